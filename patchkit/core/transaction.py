"""The transaction: the lock first, then every refusal, then all writes or none.  This is
where bytes hit the disk: target files, their RECORD and patchkit's journal are one set.

Apply and revert, in this order (patchkit/commands/apply.py), each stage run once:

1. ``locked``: lock every target root (a flock of the root directory: it creates
   nothing, so a dry run takes it too and reads a consistent tree); finish any
   transaction a kill interrupted (``recover``), its records checked first
   (patchkit/core/txnrecord.py: one naming anything but this run's targets is refused);
2. read and judge (patchkit/core/judge.py), plan (patchkit/core/planner.py): pure stages, whose
   output, the Plan, is a frozen value.  Nothing can change what they read meanwhile;
3. ``finish``: ``check``, every refusal (a system site-packages, a file or directory that
   cannot be written, a .patchkit that is a symlink), before any directory is made.
   ``--dry-run`` stops here, having run every check the real run runs;
4. ``write``, the one commit protocol:

   a. in each root, ``.patchkit/txn-pending.json`` names the transaction and every path it
      will write (a temp file is found beside its path);
   b. every new content goes to a temp file beside its target (random name, O_EXCL), fsynced;
   c. **commit point**: ``.patchkit/txn-commit.json`` in the first root, written atomically,
      naming every temp file;
   d. every temp is renamed over its target;
   e. the commit record goes, then the pending markers, then blobs nobody needs.

What is written is a value, a ``Commit`` (``freeze``: every file's new and old bytes, the
RECORD rows, the journal as the write leaves it, computed on copies, the blobs), and what
``check`` looked at is one too (``Refusals``), so a plan made earlier can be written
without the Session that made it: ``replay`` (patchkit/core/plancache.py) has its refusals run
again, takes the lock, and writes only when every input the plan read is byte-identical
still.

A kill before (c) leaves every file as it was (the next run removes the temps); a kill
after it leaves a transaction that the next ``apply`` or ``revert`` rolls forward before
doing anything else.  Until then the judge reads its recipes as ``interrupted`` and counts
patchkit's edits as patchkit's, so ``status`` never calls them upstream.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional

from patchkit.base import fsio, guardlock
from patchkit.base.errors import TargetError
from patchkit.base.journal import BLOBS, PATH, Journal, sha256, write_mirror
from patchkit.base.target import STATE_DIR
from patchkit.base.target import TXN_PENDING as PENDING
from patchkit.core import record, txnrecord
from patchkit.core.txnrecord import COMMIT


def _state(root: Path) -> Path:
    return root / STATE_DIR


def pending_roots(roots: list[Path]) -> list[Path]:
    """The roots (of this run's, ``roots``) with a transaction to finish or clean: each
    record checked, so one naming anything but these roots is refused here."""
    targets = frozenset(roots)
    return sorted(r for r in targets if txnrecord.pending(r, targets) is not None)


def _temps(d: Path, name: str = "*") -> list[Path]:
    """patchkit's temp files in ``d`` (for files called ``name``): fsio.write_temp's random
    names, and the ``.NAME.patchkit-PID.tmp`` older releases wrote."""
    try:
        return [*d.glob(f".{name}.*.patchkit-tmp"), *d.glob(f".{name}.patchkit-*.tmp")]
    except OSError:
        return []


def _unlink(paths) -> None:
    for p in paths:
        with contextlib.suppress(OSError):  # best effort: a temp left is swept by a later run
            os.unlink(p)


def sweep(root: Path, beside: tuple = ()) -> None:
    """Remove temp files a kill left: in patchkit's own state (a record or blob
    half-written) and beside the files in ``beside``.  A run that never committed leaves
    its temps beside files its pending marker names (``recover`` removes those); this also
    catches those of a run whose marker is gone, or of a release that wrote none.
    Call with the root locked: no other run can be writing them.  Never through a symlink:
    a directory that leads elsewhere (a planted ``.patchkit/written``, a dist-info) is not
    patchkit's to clean."""
    state = _state(root)
    for d in (state, state / BLOBS):
        if txnrecord.kind(state) == txnrecord.kind(d) == "a directory":
            _unlink(_temps(d))
    for path in sorted(set(beside)):
        d = Path(path).parent
        if (d == root or root in d.parents) and os.path.realpath(d) == str(d):
            _unlink(_temps(d, glob_escape(Path(path).name)))


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def recover(roots: list[Path]) -> list[str]:
    """Finish (roll forward) a committed transaction, or clean up one that never committed.
    Call with every root of this run locked.  Every record is checked first, and every
    rename it asks for, so a bad one is refused with nothing renamed.  Returns notes for
    the user."""
    targets = frozenset(roots)
    found = []
    for root in sorted(targets):
        doc = txnrecord.pending(root, targets)
        if doc is not None:
            done = txnrecord.commit(doc, targets)
            if done is not None:
                txnrecord.ready(done, _state(Path(doc["primary"])) / COMMIT)
            found.append((root, doc, done))
    notes: list[str] = []
    seen: set[str] = set()
    for root, doc, done in found:
        if doc["id"] in seen:
            continue  # the same transaction, found in another of its roots
        seen.add(doc["id"])
        try:
            notes += _recover(doc, done)
        except OSError as e:
            raise TargetError(
                f"{e.filename or root}: cannot finish the write a kill interrupted ({e.strerror or e})",
                "fix the cause (permissions, a full disk, an immutable file), then run `patchkit apply` or"
                " `patchkit revert` again: either finishes it first",
            ) from None
    return notes


def _recover(doc: dict, commit: Optional[dict]) -> list[str]:
    notes = []
    if commit is not None:
        for e in commit["entries"]:
            tmp, path = Path(e["tmp"]), Path(e["path"])
            if os.path.lexists(tmp):
                fsio.replace(tmp, path)
        for d in {Path(e["path"]).parent for e in commit["entries"]}:
            fsio.fsync_dir(d)
        recipes = ", ".join(commit["recipes"])
        notes.append(f"finished the `patchkit {commit['action']}` that a kill interrupted ({recipes})")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_state(Path(doc["primary"])) / COMMIT)
    else:
        # Never committed: every file is as it was.  Remove the temps it left beside them.
        for e in doc["entries"]:
            path = Path(e["path"])
            _unlink(_temps(path.parent, glob_escape(path.name)))
    for r in doc["roots"]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_state(Path(r)) / PENDING)
    return notes


# -- refusals ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """One file the transaction writes: its new bytes, and the bytes it replaces (None:
    there is no file yet)."""

    path: Path
    new: bytes
    old: Optional[bytes]


@dataclass(frozen=True)
class Commit:
    """A plan as the transaction writes it, a value: every file (targets, RECORD, patchkit's
    memory of RECORD, blobs, the journals last) and what the transaction record names.
    Writing it needs no Session and no parser (a plan cache replays one)."""

    action: str  # "apply" | "revert"
    writes: tuple[Write, ...]
    roots: tuple[Path, ...]  # every root written into, sorted; the first holds the commit record
    recipes: tuple[str, ...]
    journals: dict  # str(root) -> the journal's engines as the write leaves them (Interrupted.journal)
    keep: dict  # root -> the blobs its journal still points at (the others go after the write)


def freeze(session, plan, action: str, records: Optional[list] = None) -> Commit:
    """The Commit of a plan.  The journal is changed here, the one place (the plan's file
    writes, op marks, records dropped and versions), on copies (``journals_after``): the
    Session the stages read is left as it was loaded.  ``records``: the RECORD rewrites,
    when ``check`` has read them already."""
    after = journals_after(session, plan)
    writes = [Write(p, n, o) for p, n, o in _writes(session, plan, after, records)]
    roots = sorted({session.targets[m.engine].root for m in plan.marks} | {f.target.root for f in plan.files})
    mine = [after[r] for r in roots if r in after]
    return Commit(
        action,
        tuple(writes),
        tuple(roots),
        tuple(sorted({m.recipe for m in plan.marks})),
        {str(j.root): j.engines for j in mine},
        {j.root: frozenset(j.kept_blobs()) for j in mine},
    )


def journals_after(session, plan) -> dict[Path, Journal]:
    """root -> the journal as the plan's write leaves it, for each root the plan changes:
    a copy of the session's, changed (the session's own is never)."""
    out: dict[Path, Journal] = {}

    def of(engine: str) -> Journal:
        root = session.targets[engine].root
        if root not in out:
            out[root] = session.journal(engine).copy()
        return out[root]

    for engine, logical in plan.forget:  # first: a file written anew then records its own pristine
        of(engine).forget_file(engine, logical)
    for engine, version in plan.versions:
        of(engine).wrote_against(engine, version)
    for f in plan.files:
        of(f.target.engine).record_write(f.target.engine, f.logical, f.original, f.new)
    for m in plan.marks:
        if m.action == "applied":
            of(m.engine).mark_applied(m.engine, m.recipe, m.recipe_sha, m.op, m.file, m.site)
        else:
            of(m.engine).mark_reverted(m.engine, m.recipe, m.op)
    return out


def _writes(session, plan, journals: dict[Path, Journal], records=None) -> list[tuple[Path, bytes, Optional[bytes]]]:
    """Every (path, new bytes, old bytes or None) the plan means, journal and RECORD included."""
    out: list[tuple[Path, bytes, Optional[bytes]]] = [
        (f.real, f.new, f.original if f.exists else None) for f in plan.files
    ]
    out += record.plan_updates(session, plan) if records is None else records
    touched = {session.targets[m.engine].root for m in plan.marks} | {f.target.root for f in plan.files}
    for root, j in sorted(journals.items()):
        if root not in touched:
            continue
        for sha, data in sorted(j.blobs.items()):
            p = j.dir / BLOBS / sha
            if not p.exists():
                out.append((p, data, None))
        old = j.path.read_bytes() if j.path.is_file() else None
        out.append((j.path, j.render(), old))
    return out


@dataclass(frozen=True)
class Refusals:
    """What ``check`` looked at, a value, so that a plan replayed from the cache is refused
    exactly as it was when it was made: the roots written into, each target file as
    (real path, where a message names it), and the RECORD files rewritten."""

    roots: tuple[Path, ...]
    files: tuple[tuple[Path, str], ...]
    records: tuple[Path, ...]


def check(session, plan) -> Refusals:
    """Every refusal, before a directory is made or a byte written (TargetError, exit 2).
    Returns what it checked."""
    return _check(session, plan)[0]


def _check(session, plan) -> tuple[Refusals, list]:
    """``check``, with the RECORD rewrites it read (record.plan_updates, computed once: the
    write writes them)."""
    roots = sorted({f.target.root for f in plan.files} | {session.targets[m.engine].root for m in plan.marks})
    files = tuple((f.real, f.where()) for f in plan.files)
    updates: list = []

    def rows() -> tuple[Path, ...]:  # last, as before: a bad RECORD is told after the roots
        updates[:] = record.plan_updates(session, plan)
        return tuple(path for path, _, _ in updates)

    refuse(Refusals(tuple(roots), files, ()), rows)
    return Refusals(tuple(roots), files, tuple(path for path, _, _ in updates)), updates


def refuse(r: Refusals, records: Optional[Callable[[], tuple]] = None) -> None:
    """``check``'s refusals over what it looked at (TargetError, exit 2)."""
    for root in r.roots:
        if record.is_installed_tree(root):
            record.guard_writable(root)  # a system site-packages is refused
        state = _state(root)
        if txnrecord.kind(state) == "a symlink":
            raise TargetError(
                f"{state}: is a symlink; patchkit keeps its journal and lock inside the target only",
                "remove the symlink (patchkit recreates the directory)",
            )
        _in_the_way(state, directory=True)
        _writable(state if state.is_dir() else root, directory=True)
        if state.is_dir():
            for name in (PATH, PENDING, COMMIT, record.MEMORY):
                _in_the_way(state / name)
                _writable(state / name)
            _writable(state / "lock")
            _in_the_way(state / BLOBS, directory=True)
            if (state / BLOBS).is_dir():
                _writable(state / BLOBS, directory=True)
    seen: dict[Path, str] = {}
    for real, where in r.files:
        other = seen.setdefault(real, where)
        if other != where:
            raise TargetError(
                f"{where} and {other} are one file (a symlink inside the target); two recipes' edits of it"
                " would overwrite each other",
                "name the file by one path in the recipes, or replace the symlink with a copy",
            )
        _writable(real, where=where)
    for path in records() if records is not None else r.records:
        _writable(path)


def _in_the_way(path: Path, directory: bool = False) -> None:
    """Refuse what stands where the write puts a file (or makes a directory) of its own and a
    rename or mkdir would fail or follow it: a directory where a file goes, a symlink, a
    FIFO.  Checked before the commit point, so a write never stops half-way on one."""
    what = txnrecord.kind(path)
    if what in (None, "a directory" if directory else "a file"):
        return
    raise TargetError(
        f"{path}: is {what}, where patchkit writes {'a directory' if directory else 'a file'} of its own;"
        " nothing was written",
        "move it out of the way (patchkit writes it anew), then run the command again",
    )


def _writable(path: Path, where: object = None, directory: bool = False) -> None:
    """Refuse a file (or directory) this user cannot replace: its directory must take a new
    entry, and an existing file must be writable (not read-only, not immutable)."""
    d = path if directory else path.parent
    while not d.exists() and d != d.parent:  # a directory the write will make (.patchkit)
        d = d.parent
    # An attribute refuses the renames even to root, and os.access does not see append-only:
    # refused here, before the commit point, not half-way through the write (said first: it
    # is the precise reason).
    for at in (d,) if directory or not path.exists() else (d, path):
        attr = fsio.refusing_attribute(at)
        if attr is not None:
            named = where if at == path and where else at
            raise TargetError(
                f"{named}: is {attr}, so patchkit cannot replace {'files in it' if at == d else 'it'};"
                " nothing was written",
                f"remove the attribute (chattr -{attr[-2]} {at}), or patch a copy",
            )

    ok = os.access(d, os.W_OK | os.X_OK) and (directory or not path.exists() or os.access(path, os.W_OK))
    if not ok:
        raise TargetError(
            f"{where or path}: not writable by this user",
            "it is read-only, immutable (chattr +i) or another user's: patch a copy, or a venv you own;"
            " or build a patched wheel with `patchkit wheel`",
        )


# -- the write --------------------------------------------------------------------------------


def write(session, plan, action: str, records: Optional[list] = None) -> Commit:
    """Write the plan's files, their RECORD rows (``records``: as ``_check`` read them) and
    the journal as one set (steps a-e).  Returns what it wrote."""
    done = freeze(session, plan, action, records)
    write_commit(done)
    return done


def write_commit(c: Commit) -> None:
    """Write a Commit (steps a-e).  Call with every root locked."""
    writes = c.writes
    if not writes:
        return
    for path in sorted({w.path.parent for w in writes}):  # under the lock, just before step (a)
        _in_the_way(path, directory=True)
    for w in writes:
        _in_the_way(w.path)
    roots = list(c.roots)
    primary = roots[0]
    txn = {
        "id": os.urandom(8).hex(),
        "action": c.action,
        "recipes": list(c.recipes),
        "primary": str(primary),
        "roots": [str(r) for r in roots],
        "journals": c.journals,
        "entries": [],
    }
    txn["entries"] = [
        {"path": str(w.path), "new": sha256(w.new), "old": sha256(w.old) if w.old is not None else None} for w in writes
    ]
    temps: list[tuple[Path, Path]] = []
    try:
        for root in roots:
            (_state(root) / BLOBS).mkdir(parents=True, exist_ok=True)
            fsio.ensure_ignored(_state(root))  # patchkit's state stays out of the user's `git status`
        # (a) the markers name every path before a temp exists beside it (recover() finds the temps)
        for root in roots:
            fsio.atomic_write(_state(root) / PENDING, _dump(txn))
        # (b)
        for w, e in zip(writes, txn["entries"], strict=True):
            path = w.path
            tmp = fsio.write_temp(path, w.new)
            e["tmp"] = str(tmp)
            temps.append((tmp, path))
        # (c) the commit point, naming every temp: from here on the transaction only goes
        # forward.  Until its rename is done, a failure leaves every file as it was.
        fsio.atomic_write(_state(primary) / COMMIT, _dump(txn))
    except BaseException as e:
        if _committed(txn):  # interrupted (^C) just after the commit point: only forward from here
            raise
        _unlink(tmp for tmp, _ in temps)
        _unlink(_state(root) / PENDING for root in roots)
        if isinstance(e, OSError):  # EPERM, EACCES, EROFS, ENOSPC, EDQUOT, EIO: never a bug
            raise fsio.cannot_write(Path(e.filename or primary), e) from None
        raise
    # (d)
    try:
        for tmp, path in temps:
            fsio.replace(tmp, path)
        for d in {p.parent for _, p in temps}:
            fsio.fsync_dir(d)
    except OSError as e:
        raise TargetError(
            f"{e.filename or primary}: the write stopped half-way ({e.strerror})",
            "fix the cause, then run `patchkit apply` or `patchkit revert`: either finishes this write first",
        ) from None
    # (e)
    try:
        os.unlink(_state(primary) / COMMIT)
        for root in roots:
            os.unlink(_state(root) / PENDING)
    except OSError as e:
        raise TargetError(
            f"{e.filename or primary}: every file is written, but this transaction record could not be removed"
            f" ({e.strerror})",
            "fix the cause, then run `patchkit apply` or `patchkit revert`: either removes it first",
        ) from None
    for root, keep in sorted(c.keep.items()):
        _drop(root, keep)
    for root, engines in sorted(c.journals.items()):  # the journal's second copy (journal.py)
        write_mirror(Path(root), engines)


def _committed(txn: dict) -> bool:
    try:
        doc = txnrecord.read(_state(Path(txn["primary"])) / COMMIT)
    except TargetError:
        return False
    return isinstance(doc, dict) and doc.get("id") == txn["id"]


def _is_blob(name: str) -> bool:
    """The name of a blob patchkit writes: the sha256 of the bytes it holds."""
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _drop_blobs(j: Journal) -> None:
    _drop(j.root, j.kept_blobs())


def _drop(root: Path, keep) -> None:
    """Delete the blobs no file entry points at (not in ``keep``): only patchkit's own (a
    sha256 name, a regular file) in ``.patchkit/written`` opened without following a link,
    so a planted link at .patchkit or written never turns this into a delete elsewhere."""
    try:
        fd = fsio.open_dir(root, (STATE_DIR, BLOBS))
    except OSError:
        return  # no blobs, or not patchkit's directory: nothing of patchkit's to delete
    try:
        for name in os.listdir(fd):
            if name not in keep:
                fsio.remove_owned(fd, name, _is_blob)
    finally:
        os.close(fd)


def _dump(doc: dict) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


class Ran(NamedTuple):
    """What ``finish`` did: the plan, with what ``check`` looked at and what was written
    (None when nothing was), and notes for the user (a recovery's)."""

    session: object
    plan: object
    notes: list
    refusals: Refusals
    commit: Optional[Commit]


@contextlib.contextmanager
def locked(targets: dict, dry_run: bool = False) -> Iterator[list[str]]:
    """The first step of apply and revert: lock every target root (fsio.locked, which
    creates nothing), then finish any transaction a kill interrupted (``recover``; not on
    a dry run, which writes nothing and reads it as interrupted), before anything is read.
    Yields the recovery's notes.  Inside: read, judge, plan once, then ``finish``."""
    roots = sorted({t.root for t in targets.values()})
    with fsio.locked(roots, create=not dry_run):
        yield recover(roots) if not dry_run and pending_roots(roots) else []


def finish(session, plan, action: str, dry_run: bool, notes: list[str], force: bool = False) -> Ran:
    """The last steps, under ``locked``: every refusal (``check``), then the write.  The
    plan was made under the lock, from what the session read there: nothing it read can
    have changed, so it is written as it is.  A dry run, or a plan with blockers, writes
    nothing."""
    refusals, records = _check(session, plan)
    if dry_run or plan.blockers:
        return Ran(session, plan, notes, refusals, None)
    roots = [t.root for t in session.targets.values()]
    if plan.files or plan.marks or notes:
        _sweep(roots, _beside([f.real for f in session.files.values()], session.targets, session.journal))
    done = None
    if plan.files or plan.marks:
        with guardlock.exclude(roots, action, force):  # not under a server `patchkit run` guards
            done = write(session, plan, action, records)
    return Ran(session, plan, notes, refusals, done)


def replay(
    targets: dict,
    reals: list[Path],
    refusals: Refusals,
    made: Optional[Callable[[], Optional[Commit]]],
    first: Callable[[], None],
    action: str = "apply",
    force: bool = False,
) -> bool:
    """Write a Commit made earlier (the plan cache), in the same order as the full path:
    lock every target root first; with no transaction to finish, its ``refusals`` run
    again (``refuse``), then ``made()`` builds it from the bytes on disk now, or says (None)
    that an input changed; ``first()`` runs just before the write (and before a refusal is
    raised).  ``made`` None: the plan wrote nothing.  ``reals``: the target files the plan
    read.  False when nothing was done: the caller plans afresh."""
    roots = [t.root for t in targets.values()]
    with fsio.locked(roots):
        if pending_roots(roots):
            return False
        try:
            refuse(refusals)
        except TargetError:
            first()
            raise
        if made is None:
            first()
            return True
        c = made()
        if c is None:
            return False
        journals = {r: Journal.load(r) for r in set(roots)}
        _sweep(roots, _beside(reals, targets, lambda e: journals[targets[e].root]))
        first()
        with guardlock.exclude(roots, action, force):  # not under a server `patchkit run` guards
            write_commit(c)
    return True


def _sweep(roots, beside: set[Path]) -> None:
    for root in roots:
        sweep(root, tuple(p for p in beside if root in p.parents))


def _beside(reals, targets: dict, journal) -> set[Path]:
    """Files beside which a killed run may have left temps: those this run read (``reals``),
    every file the journals say patchkit wrote, and the RECORDs."""
    out = set(reals)
    for engine, t in targets.items():
        for logical in journal(engine).engines.get(engine, {}).get("files", {}):
            with contextlib.suppress(TargetError):
                out.add(Path(os.path.realpath(t.path(logical))))
        out.update(t.root.glob("*.dist-info/RECORD"))
    return out


def commit(session, plan, action: str = "apply") -> None:
    """Check and write a plan already made, under the lock: for trees patchkit made itself
    (a wheel being built, a fork's worktree), where nobody else can be writing."""
    _, records = _check(session, plan)
    if plan.blockers:
        raise RuntimeError("internal: commit() of a plan with blockers")
    with fsio.locked([t.root for t in session.targets.values()]):
        write(session, plan, action, records)
