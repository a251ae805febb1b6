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
(~/.cache/patchkit/verdicts) changes nothing else.
"""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path
from typing import Optional

from patchkit.results import RecipeResult

try:  # BLAKE2 without hashlib: importing hashlib loads OpenSSL, a tenth of `status`'s budget
    from _blake2 import blake2b as _hash
except ImportError:  # pragma: no cover - other Pythons
    from hashlib import blake2b as _hash


def digest_of(data: bytes) -> str:
    return _hash(data, digest_size=32).hexdigest()


def _file_digest(path: Path) -> Optional[str]:
    try:
        return digest_of(path.read_bytes())
    except OSError:
        return None


def code_hash() -> str:
    """patchkit's own code, by each module's path, size and mtime (as Python's .pyc files
    are checked), and the Python running it (marshal's format is per version).

    Computed afresh on every call (a walk and a stat of patchkit's files, about a
    millisecond), never remembered in a module global: a caller that needs it more than
    once in an invocation computes it once and passes it on (``key(..., code=)``), so what
    a key was made from is visible at the call."""
    h = _hash(sys.version.encode(), digest_size=32)
    for dirpath, dirnames, filenames in sorted(os.walk(os.path.dirname(__file__))):
        dirnames.sort()
        for fn in sorted(filenames):
            if fn.endswith(".py"):
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

    from patchkit.target import ENGINES

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


def _dir() -> Path:
    from patchkit.paths import cache_dir

    return cache_dir() / "verdicts"


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
        for p in sorted(d.glob("*.toml")):
            h.update(p.name.encode() + (_file_digest(p) or "").encode())
    for engine, t in sorted(targets.items()):
        h.update(f"{engine}|{t.root}|{t.layout}|{t.version}".encode())
    return h.hexdigest()


def _provenance(targets: dict) -> dict[str, Optional[str]]:
    files = _references(targets)
    for root in sorted({t.root for t in targets.values()}):
        files[str(root / ".patchkit" / "journal.json")] = _file_digest(root / ".patchkit" / "journal.json")
        for p in sorted(root.glob("*.dist-info/patchkit.json")):
            files[str(p)] = _file_digest(p)
        files[f"{root}/*.dist-info/patchkit.json"] = ",".join(
            sorted(str(p) for p in root.glob("*.dist-info/patchkit.json"))
        )
    return files


def _references(targets: dict) -> dict[str, Optional[str]]:
    """What names each target's pristine release (patchkit/pristine.py), without running git:
    the tag refs and HEAD of a checkout, the release wheels in the cache (the target's, and
    which releases there are), and PATCHKIT_OFFLINE."""
    from patchkit.paths import cache_dir
    from patchkit.target import ENGINES

    out: dict[str, Optional[str]] = {"offline": os.environ.get("PATCHKIT_OFFLINE", "")}
    for t in sorted(targets.values(), key=lambda t: (t.engine, str(t.root))):
        if t.layout == "git":
            git = t.root / ".git"
            for rel in ("packed-refs", f"refs/tags/v{t.version}", f"refs/tags/{t.version}"):
                out[str(git / rel)] = _file_digest(git / rel)
            out[str(t.root / ".patchkit/source.json")] = _file_digest(t.root / ".patchkit" / "source.json")
            # The checkout's committed code (judge.Session.head): HEAD and the branch it names.
            head = _file_digest(git / "HEAD")
            out[str(git / "HEAD")] = head
            try:
                named = (git / "HEAD").read_text().strip()
            except (OSError, UnicodeDecodeError):
                named = ""
            if named.startswith("ref: refs/"):
                out[str(git / named[5:])] = _file_digest(git / named[5:])
        else:
            public = (t.version or "").split("+", 1)[0]
            d = cache_dir() / "wheels" / ENGINES[t.engine].dist.replace("_", "-").lower() / public
            out[str(d)] = ",".join(sorted(p.name for p in d.glob("*.whl"))) if public else ""
        # A site's identity may come from another release in the recipe's range (identity.py):
        # which releases the cache holds is an input too.
        releases = cache_dir() / "wheels" / ENGINES[t.engine].dist.replace("_", "-").lower()
        try:
            out[f"{releases}/*"] = ",".join(sorted(os.listdir(releases)))
        except OSError:
            out[f"{releases}/*"] = ""
    return out


def load(k: str, targets: dict) -> Optional[list[RecipeResult]]:
    p = _dir() / f"{k}.marshal"
    try:
        entry = marshal.loads(p.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if entry.get("provenance") != _provenance(targets):
        return None
    for path, sha in entry["files"].items():
        if _file_digest(Path(path)) != sha:
            return None
    for engine, fp in entry.get("trees", {}).items():
        if engine not in targets or tree_state(targets[engine]) != fp:
            return None
    return [RecipeResult.from_json(r) for r in entry["results"]]


def save(k: str, session, res: list[RecipeResult]) -> None:
    """Cache ``res`` under ``k``; only for verdicts that read no file beyond session.files
    and the trees it swept (judge.cacheable), which the caller checks."""
    entry = {
        "files": {str(f.path): (digest_of(f.original) if f.exists else None) for f in session.files.values()},
        "trees": dict(session.swept),
        "provenance": _provenance(session.targets),
        "results": [r.to_json() for r in res],
    }
    d = _dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{k}.{os.getpid()}.tmp"
        tmp.write_bytes(marshal.dumps(entry))
        os.replace(tmp, d / f"{k}.marshal")
    except OSError:
        pass  # a cache that cannot be written only costs speed
