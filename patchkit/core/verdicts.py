"""Verdict cache: `status` on an unchanged tree without importing libcst or parsing a file.

A verdict is reused only when every input that produced it is byte-identical (BLAKE2b-256
digests): patchkit's own code and the Python running it, every recipe file, the targets
(root, layout, version), each file the evaluation read, and the provenance it used
(journal, installed wheels' patchkit.json).
An evaluation that searched an engine's whole tree (relocation, an upstream marker found
elsewhere) also depends on every file that could have held a candidate, named or not: it is
keyed on the state of that tree as well (``tree_state``: every directory and file, by
inode, size, mtime and ctime, taken before the search read anything), as git's index and
make know a file changed.  A tree with a change younger than RACY_NS when it was
fingerprinted is not cached at all: a second change in the same timestamp tick could not be
told.  Verdicts that depend on what nothing names (no pristine release to read yet) are
never cached.  The cache can only make `status` faster, never different; deleting it
(~/.cache/patchkit/verdicts) changes nothing else, and an entry the store misses
(patchkit/base/store.py) or of the wrong shape (patchkit/base/shape.py) is judged again and
replaced.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from patchkit.base import regular, shape
from patchkit.base.results import RecipeResult

try:  # BLAKE2 without hashlib: importing hashlib loads OpenSSL, a tenth of `status`'s budget
    from _blake2 import blake2b as _hash
except ImportError:  # pragma: no cover - other Pythons
    from hashlib import blake2b as _hash


def digest_of(data: bytes) -> str:
    return _hash(data, digest_size=32).hexdigest()


CACHE_LIMIT = 64 << 20  # bytes of one cached entry; anything larger is not patchkit's


def mirror_input(root) -> str:
    """How a cache entry names a target's journal mirror as an input: by the target's root.
    Its digest is that of the bytes the mirror is trusted to hold (journal.read_mirror), so a
    mirror that loses its trust (another user could write it) misses the cache, even with the
    same bytes."""
    return f"mirror:{root}"


def input_digest(name: str) -> Optional[str]:
    """The digest of an input a cache entry names: a file, or a target's mirror (``mirror_input``)."""
    if name.startswith("mirror:"):
        from patchkit.base.journal import read_mirror

        data = read_mirror(Path(name[len("mirror:") :]))
        return digest_of(data) if data is not None else None
    return file_digest(Path(name))


def file_digest(path: Path) -> Optional[str]:
    """The digest of the regular file at ``path``; None when nothing is there; shape.UNREADABLE
    for a FIFO, a device, a directory or a read error (read non-blocking: never a hang)."""
    try:
        return digest_of(regular.read(path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, regular.NotRegular):
        return shape.UNREADABLE


class _Untrusted(Exception):
    """patchkit's own state in a target is not a regular file (a link, a FIFO, a device):
    what it holds cannot be fingerprinted, so nothing judged with it is cached."""


def _state_digest(root: Path, rel: str) -> Optional[str]:
    """The digest of patchkit's own file ``root/.patchkit/rel``, opened with O_NOFOLLOW on
    every component (patchkit/base/regular.py), or None when nothing is there."""
    try:
        return digest_of(regular.read_owned(root, f".patchkit/{rel}", CACHE_LIMIT))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, regular.NotRegular, regular.TooBig):
        raise _Untrusted() from None


def code_hash() -> str:
    """patchkit's own code, by each module's path, size and mtime (as Python's .pyc files
    are checked), and the Python running it: the whole package, not this layer alone (the
    engine definitions in base/, the pristine readers in upstream/ decide verdicts too).

    Computed afresh on every call (a walk and a stat of patchkit's files, about a
    millisecond), never remembered in a module global: a caller that needs it more than
    once in an invocation computes it once and passes it on (``key(..., code=)``), so what
    a key was made from is visible at the call."""
    h = _hash(sys.version.encode(), digest_size=32)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for dirpath, dirnames, filenames in sorted(os.walk(package)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "engines.toml":  # the shipped engine definitions
                st = os.stat(os.path.join(dirpath, fn))
                h.update(f"{dirpath}/{fn}|{st.st_size}|{st.st_mtime_ns};".encode())
    return h.hexdigest()


RACY_NS = 1_000_000_000  # a file changed less than 1 s before its tree was fingerprinted


def tree_state(target) -> Optional[str]:
    """A fingerprint of every directory and file under the target's package roots (dot
    directories, patchkit's state among them, left out: no search reads them), or None when
    one changed less than RACY_NS ago.  A new, removed, renamed or rewritten file changes
    it; ctime cannot be set back by a tool that restores mtimes."""
    import time

    from patchkit.base.target import ENGINES

    now = time.time_ns()
    roots = sorted({str(target.root / pp) for _, pp in ENGINES[target.engine].layouts[target.layout]})
    roots = [r for r in roots if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in roots)]
    h = _hash(digest_size=32)
    newest = 0
    for root in roots:
        stack = [root]
        while stack:
            d = stack.pop()
            try:
                it = os.scandir(d)
            except OSError as e:
                h.update(f"{d}!{e.errno};".encode())
                continue
            with it:
                entries = sorted(it, key=lambda e: e.name)
            for e in entries:
                if e.name.startswith("."):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                newest = max(newest, st.st_ctime_ns, st.st_mtime_ns)
                h.update(f"{e.path}|{st.st_mode}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns};".encode())
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return None if newest > now - RACY_NS else h.hexdigest()


def key(recipe_dirs, names: tuple[str, ...], targets: dict, code: Optional[str] = None) -> str:
    """The cache key of a `status` invocation; ``code`` is ``code_hash()``, computed here
    when not given.  ``recipe_dirs`` is every recipe directory in play, nearest first
    (Project.recipe_dirs; one Path is one directory): each one's place, and every recipe
    file in it, by name and content, so that a recipe added, changed or removed anywhere
    (shipped, the user's, the project's, a --recipes directory) is a new key."""
    h = _hash((code_hash() if code is None else code).encode(), digest_size=32)
    h.update(repr(sorted(names)).encode())
    for d in [recipe_dirs] if isinstance(recipe_dirs, Path) else recipe_dirs:
        d = getattr(d, "path", d)
        h.update(f"dir|{d}|".encode())
        for p in sorted(d.glob("*.toml")) + sorted(d.glob("engines/*.toml")):  # engines.py: user definitions
            h.update(p.name.encode() + (file_digest(p) or "").encode())
    for engine, t in sorted(targets.items()):
        h.update(f"{engine}|{t.root}|{t.layout}|{t.version}".encode())
    return h.hexdigest()


def _provenance(targets: dict) -> Optional[dict[str, Optional[str]]]:
    """What names the verdicts' provenance, by digest; None when patchkit's own state in a
    target cannot be fingerprinted (_Untrusted): then nothing is cached or read back."""
    try:
        files = _references(targets)
        for root in sorted({t.root for t in targets.values()}):
            files[str(root / ".patchkit" / "journal.json")] = _state_digest(root, "journal.json")
    except _Untrusted:
        return None
    for root in sorted({t.root for t in targets.values()}):
        for p in sorted(root.glob("*.dist-info/patchkit.json")):
            files[str(p)] = file_digest(p)
        files[f"{root}/*.dist-info/patchkit.json"] = ",".join(
            sorted(str(p) for p in root.glob("*.dist-info/patchkit.json"))
        )
    return files


def _references(targets: dict) -> dict[str, Optional[str]]:
    """What names each target's pristine release (patchkit/upstream/pristine.py), without running git:
    the tag refs and HEAD of a checkout, the release wheels in the cache (the target's, and
    which releases there are), and PATCHKIT_OFFLINE."""
    from patchkit.base.paths import cache_dir, wheels_dir
    from patchkit.base.target import ENGINES

    out: dict[str, Optional[str]] = {"offline": os.environ.get("PATCHKIT_OFFLINE", "")}
    for t in sorted(targets.values(), key=lambda t: (t.engine, str(t.root))):
        if t.layout == "git":
            git, common = _git_dirs(t.root)
            out[str(t.root / ".git")] = file_digest(t.root / ".git") if git != t.root / ".git" else "dir"
            for rel in ("packed-refs", f"refs/tags/v{t.version}", f"refs/tags/{t.version}"):
                out[str(common / rel)] = file_digest(common / rel)
            out[str(t.root / ".patchkit/source.json")] = _state_digest(t.root, "source.json")
            # The checkout's committed code (Session.head): HEAD and the branch it names
            # (a worktree's HEAD is its own; its branches are the repository's).
            out[str(git / "HEAD")] = file_digest(git / "HEAD")
            named = _small_text(git, "HEAD")
            if named.startswith("ref: refs/"):
                ref = named[5:]
                out[str(common / ref)] = file_digest(common / ref)
                out[f"{common / 'packed-refs'}"] = file_digest(common / "packed-refs")
        else:
            public = (t.version or "").split("+", 1)[0]
            d = wheels_dir(ENGINES[t.engine].dist) / public
            out[str(d)] = ",".join(sorted(p.name for p in d.glob("*.whl"))) if public else ""
        from patchkit.base.target import ENGINES

        if ENGINES[t.engine].reference == "sdist":  # the release's sdist, unpacked in the cache
            src = (
                cache_dir() / "trees" / f"{t.engine}-{(t.version or '').split('+', 1)[0]}" / ".patchkit" / "source.json"
            )
            out[str(src)] = file_digest(src)
        # A site's identity may come from another release in the recipe's range (identity.py):
        # which releases the cache holds is an input too.
        releases = wheels_dir(ENGINES[t.engine].dist)
        try:
            out[f"{releases}/*"] = ",".join(sorted(os.listdir(releases)))
        except OSError:
            out[f"{releases}/*"] = ""
    return out


def _small_text(d: Path, name: str) -> str:
    """A small file git keeps (HEAD, a worktree's .git or commondir) as text; "" when it is
    not a regular file (a FIFO or a link planted there is never read) or not text."""
    raw = regular.read_small(d, name, 4096)
    try:
        return raw.decode().strip() if raw is not None else ""
    except UnicodeDecodeError:
        return ""


def _git_dirs(root: Path) -> tuple[Path, Path]:
    """(the checkout's git directory, the repository's common one): ``root/.git`` for both
    in a plain clone; for a worktree (``git worktree add``, `patchkit fork`), whose ``.git``
    is a file ``gitdir: PATH``, that directory and the one its ``commondir`` names."""
    dot = root / ".git"
    if dot.is_dir() and not dot.is_symlink():
        return dot, dot
    said = _small_text(root, ".git")
    if not said.startswith("gitdir: "):
        return dot, dot
    gd = Path(os.path.normpath(root / said[len("gitdir: ") :]))
    common = _small_text(gd, "commondir")
    return gd, (Path(os.path.normpath(gd / common)) if common else gd)


def _entry(k: str) -> Optional[dict]:
    """The entry under ``k`` in patchkit's store (patchkit/base/store.py), when it has the
    shape ``save`` writes; None (a miss, replaced by the next save) otherwise."""
    from patchkit.base import store

    return store.get_json("verdicts", k, shape.VERDICTS)


def load(k: str, targets: dict) -> Optional[list[RecipeResult]]:
    entry = _entry(k)
    if entry is None:
        return None
    provenance = _provenance(targets)
    if provenance is None or entry["provenance"] != provenance:
        return None
    for path, sha in entry["files"].items():
        if input_digest(path) != sha:
            return None
    for engine, fp in entry["trees"].items():
        if engine not in targets or tree_state(targets[engine]) != fp:
            return None
    return [RecipeResult.from_json(r) for r in entry["results"]]


def save(k: str, session, res: list[RecipeResult]) -> None:
    """Cache ``res`` under ``k``; only for verdicts that read no file beyond session.files
    and the trees it swept (verdict.cacheable), which the caller checks."""
    provenance = _provenance(session.targets)
    if provenance is None:
        return
    entry = {
        "files": {
            **{str(f.path): (digest_of(f.original) if f.exists else None) for f in session.files.values()},
            **session.mirrors,  # the journals' mirrors the judge leaned on (core/proof.py)
        },
        "trees": dict(session.swept),
        "provenance": provenance,
        "results": [r.to_json() for r in res],
    }
    from patchkit.base import store

    store.put_json("verdicts", k, entry)
