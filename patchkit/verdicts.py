"""Verdict cache: `status` on an unchanged tree without importing libcst or parsing a file.

A verdict is reused only when every input that produced it is byte-identical (BLAKE2b-256
digests): patchkit's own code and the Python running it, every recipe file, the targets
(root, layout, version), each file the evaluation read, and the provenance it used
(journal, installed wheels' patchkit.json).
Evaluations that searched the whole tree (relocation, an upstream marker found elsewhere)
depend on files nobody listed, so they are never cached.  The cache can only make `status`
faster, never different; deleting it (~/.cache/patchkit/verdicts) changes nothing else.
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


def _dir() -> Path:
    from patchkit.paths import cache_dir

    return cache_dir() / "verdicts"


def key(recipes_dir: Path, names: tuple[str, ...], targets: dict, code: Optional[str] = None) -> str:
    """The cache key of a `status` invocation; ``code`` is ``code_hash()``, computed here
    when not given."""
    h = _hash((code_hash() if code is None else code).encode(), digest_size=32)
    h.update(repr(sorted(names)).encode())
    for p in sorted(recipes_dir.glob("*.toml")):
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
    the tag refs of a checkout, the release wheels in the cache, and PATCHKIT_OFFLINE."""
    from patchkit.paths import cache_dir

    out: dict[str, Optional[str]] = {"offline": os.environ.get("PATCHKIT_OFFLINE", "")}
    for t in sorted(targets.values(), key=lambda t: (t.engine, str(t.root))):
        if t.layout == "git":
            git = t.root / ".git"
            for rel in ("packed-refs", f"refs/tags/v{t.version}", f"refs/tags/{t.version}"):
                out[str(git / rel)] = _file_digest(git / rel)
            out[str(t.root / ".patchkit/source.json")] = _file_digest(t.root / ".patchkit" / "source.json")
        else:
            from patchkit.target import ENGINES

            public = (t.version or "").split("+", 1)[0]
            d = cache_dir() / "wheels" / ENGINES[t.engine].dist.replace("_", "-").lower() / public
            out[str(d)] = ",".join(sorted(p.name for p in d.glob("*.whl"))) if public else ""
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
    return [RecipeResult.from_json(r) for r in entry["results"]]


def save(k: str, session, res: list[RecipeResult]) -> None:
    """Cache ``res`` under ``k``; only for verdicts that read no file beyond session.files
    (judge.cacheable), which the caller checks."""
    entry = {
        "files": {str(f.path): (digest_of(f.original) if f.exists else None) for f in session.files.values()},
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
