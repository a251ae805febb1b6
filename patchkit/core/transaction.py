"""The transaction: the lock first, then every refusal, then all writes or none.  This is
where bytes hit the disk: target files, their RECORD and patchkit's journal are one set.

Every write takes one way (``commit``): apply, revert and adopt (patchkit/commands/apply.py,
through ``finish``), a plan the cache replays (patchkit/core/replay.py), `wheel` and `fork`:

1. ``locked``: lock every target root (a flock of the root directory: it creates
   nothing, so a dry run takes it too and reads a consistent tree); finish any
   transaction a kill interrupted (``recover``), its records checked first
   (patchkit/core/txnrecord.py: one naming anything but this run's targets is refused);
2. read and judge (patchkit/core/judge.py), plan (patchkit/core/planner.py): pure stages, whose
   output, the Plan, is a frozen value; ``freeze`` makes it the value that is written, a
   ``Commit``: every file's new and old bytes, the RECORD rows, the journal as the write
   leaves it (computed on copies), the blobs, what ``check`` looked at (``Refusals``: a
   system site-packages, a file or directory that cannot be written, a .patchkit that is a
   symlink, before any directory is made; ``--dry-run`` stops there) and every input the
   plan read, with its digest.  The plan cache makes the same value from an entry
   (plancache.commit_of);
3. ``commit``: the refusals again, then every input read again (a file another program
   wrote since is ``Changed``: nothing is written; a replay plans afresh), the temps of a
   kill swept, and the write, the one commit protocol:

   a. in each root, ``.patchkit/txn-pending.json`` names the transaction and every path it
      will write (a temp file is found beside its path);
   b. every new content goes to a temp file beside its target (random name, O_EXCL), fsynced;
      each target is read once more: one that is not the bytes the plan replaces is never
      written over (the old-digest check);
   c. **commit point**: ``.patchkit/txn-commit.json`` in the first root, written atomically,
      naming every temp file;
   d. every temp is renamed over its target;
   e. the commit record goes, then the pending markers, then blobs nobody needs.

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

from patchkit.base import fsio, guardlock, regular
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
class Refusals:
    """What ``check`` looked at, a value, so that a plan replayed from the cache is refused
    exactly as it was when it was made: the roots written into, each target file as
    (real path, where a message names it), and the RECORD files rewritten."""

    roots: tuple[Path, ...]
    files: tuple[tuple[Path, str], ...]
    records: tuple[Path, ...]


@dataclass(frozen=True)
class Commit:
    """A plan as the transaction writes it, a value: every file (targets, RECORD, patchkit's
    memory of RECORD, blobs, the journals last), what the transaction record names, what
    ``check`` looked at, and every input the plan was made from (read again under the lock,
    by ``commit``).  A fresh plan makes one (``freeze``) and so does the plan cache
    (plancache.commit_of); writing it needs no Session and no parser."""

    action: str  # "apply" | "revert" | "adopt"
    writes: tuple[Write, ...]
    roots: tuple[Path, ...]  # every root written into, sorted; the first holds the commit record
    recipes: tuple[str, ...]
    journals: dict  # str(root) -> the journal's engines as the write leaves them (Interrupted.journal)
    keep: dict  # root -> the blobs its journal still points at (the others go after the write)
    refusals: Refusals
    # Every file the plan read, with the digest of the bytes it read (verdicts.input_digest;
    # None: nothing was there), each written file's old bytes among them; and each target
    # file as (path, the real path it was read through).
    inputs: tuple[tuple[str, Optional[str]], ...]
    reals: tuple[tuple[str, str], ...]
    targets: tuple[Path, ...]  # every target root of the run (locked; swept of a kill's temps)
    beside: frozenset  # files beside which a killed run may have left temps (``_beside``)


class Changed(TargetError):
    """An input of a plan is not what the plan was made from any more (another program wrote
    it since it was read): nothing was written."""


def _changed(path, when: str, kind: type = Changed) -> TargetError:
    return kind(
        f"{path}: changed {when} (another program wrote it); nothing was written",
        "run the command again: it reads the file as it is now",
    )


def freeze(
    session, plan, action: str = "apply", records: Optional[list] = None, refusals: Optional[Refusals] = None
) -> Commit:
    """The Commit of a plan.  The journal is changed here, the one place (the plan's file
    writes, op marks, records dropped and versions), on copies (``journals_after``): the
    Session the stages read is left as it was loaded.  ``records``, ``refusals``: the RECORD
    rewrites and what ``check`` looked at, when ``check`` has read them already."""
    if plan.blockers:
        raise RuntimeError("internal: freeze() of a plan with blockers")
    if refusals is None:
        refusals, records = check(session, plan)
    after = journals_after(session, plan)
    writes = tuple(Write(p, n, o) for p, n, o in _writes(session, plan, after, records))
    roots = sorted({session.targets[m.engine].root for m in plan.marks} | {f.target.root for f in plan.files})
    mine = [after[r] for r in roots if r in after]
    inputs, reals = _inputs(session, writes)
    return Commit(
        action,
        writes,
        tuple(roots),
        tuple(sorted({m.recipe for m in plan.marks})),
        {str(j.root): j.engines for j in mine},
        {j.root: frozenset(j.kept_blobs()) for j in mine},
        refusals,
        inputs,
        reals,
        tuple(sorted({t.root for t in session.targets.values()})),
        frozenset(_beside([f.real for f in session.files.values()], session.targets, session.journal)),
    )


def _inputs(session, writes) -> tuple[tuple, tuple]:
    """(inputs, reals) of a Commit: every file the session read (target files, journals,
    the journals' mirrors the judge leaned on) with its digest, and each written file's old
    bytes."""
    from patchkit.core.verdicts import digest_of

    memo: dict[int, str] = {}  # a file's bytes are held by several values: digested once

    def digest(data: Optional[bytes]) -> Optional[str]:
        if data is None:
            return None
        if id(data) not in memo:
            memo[id(data)] = digest_of(data)
        return memo[id(data)]

    inputs: dict[str, Optional[str]] = {}
    reals: dict[str, str] = {}
    for f in session.files.values():
        inputs[str(f.path)] = digest(f.original if f.exists else None)
        reals[str(f.path)] = str(f.real)
    for j in session.journals.values():
        inputs[str(j.path)] = digest(j.loaded)
    inputs.update(session.mirrors)
    for w in writes:  # read as the judge read it: one read since that differs is ``commit``'s to find
        inputs.setdefault(str(w.path), digest(w.old))
    return tuple(sorted(inputs.items())), tuple(sorted(reals.items()))


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


def check(session, plan) -> tuple[Refusals, list]:
    """Every refusal, before a directory is made or a byte written (TargetError, exit 2).
    Returns what it checked, and the RECORD rewrites it read (record.plan_updates, computed
    once: the write writes them)."""
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


def write_commit(c: Commit) -> None:
    """Write a Commit (steps a-e; ``commit`` runs it).  Call with every root locked.  Just
    before the commit point, each file is read again: one that is not the bytes the plan
    replaces (``Write.old``) is never written over, and nothing is (Changed)."""
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
        for w in writes:  # the old-digest check: an editor that takes no lock may have saved
            if regular.read_file(w.path) != w.old:
                raise _changed(w.path, "while patchkit wrote its edit", TargetError)
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


@contextlib.contextmanager
def locked(targets: dict, dry_run: bool = False) -> Iterator[list[str]]:
    """The first step of every write: lock every target root (fsio.locked, which creates
    nothing), then finish any transaction a kill interrupted (``recover``; not on a dry
    run, which writes nothing and reads it as interrupted), before anything is read.
    Yields the recovery's notes.  Inside: read, judge, plan, then ``commit``."""
    roots = sorted({t.root for t in targets.values()})
    with fsio.locked(roots, create=not dry_run):
        yield recover(roots) if not dry_run and pending_roots(roots) else []


def _nothing() -> None:
    pass


def commit(c: Commit, force: bool = False, recovered: bool = False, said: Callable[[], None] = _nothing) -> None:
    """The one way a plan is written: apply, revert and adopt (``finish``), a plan replayed
    from the cache (patchkit/core/replay.py), `wheel` and `fork` all come here, with every
    root of ``c.targets`` locked (``locked``).  In this order:

    1. its refusals (``refuse``; ``said()`` first when one is raised);
    2. every input of the plan read again (``inputs``, ``reals``): Changed on any
       difference, before a byte is written or a warning said (a replay then plans again);
    3. the temps a kill left, swept (when there is something to write, or a transaction
       was ``recovered``);
    4. ``said()``: what the plan warns of, told just before its write;
    5. the write (``write_commit``: steps a-e, with the old-digest check just before the
       commit point), not under a server `patchkit run` guards (``force`` aside)."""
    try:
        refuse(c.refusals)
    except TargetError:
        said()
        raise
    from patchkit.core.verdicts import input_digest

    for name, digest in c.inputs:
        if input_digest(name) != digest:
            raise _changed(name.removeprefix("mirror:"), "since patchkit read it")
    for path, real in c.reals:
        if os.path.realpath(path) != real:
            raise _changed(path, "into a link elsewhere since patchkit read it")
    if c.writes or recovered:
        for root in c.targets:
            sweep(root, tuple(p for p in c.beside if root in p.parents))
    said()
    if c.writes:
        with guardlock.exclude(list(c.targets), c.action, force):  # not under a server `patchkit run` guards
            write_commit(c)


class Ran(NamedTuple):
    """What ``finish`` did: the plan, with what ``check`` looked at and the Commit it
    committed (None for a dry run or a plan with blockers; one that writes nothing is still
    one: the plan cache keeps it), and notes for the user (a recovery's)."""

    session: object
    plan: object
    notes: list
    refusals: Refusals
    commit: Optional[Commit]


def finish(session, plan, action: str, dry_run: bool, notes: list[str], force: bool = False) -> Ran:
    """The last steps of apply, revert and adopt, under ``locked``: every refusal
    (``check``), then the plan frozen and committed (``commit``).  A dry run, or a plan with
    blockers, writes nothing."""
    refusals, records = check(session, plan)
    if dry_run or plan.blockers:
        return Ran(session, plan, notes, refusals, None)
    c = freeze(session, plan, action, records, refusals)
    commit(c, force, recovered=bool(notes))
    return Ran(session, plan, notes, refusals, c)


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
