"""Verdict cache: `status` on an unchanged tree without importing libcst or parsing a file.

A verdict is reused only when every input that produced it is byte-identical (BLAKE2b-256
digests): patchkit's own code and the Python running it, every recipe file, the targets (root, layout, version), each file the evaluation
read (by sha256), and the provenance it used (journal, installed wheels' patchkit.json).
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

from patchkit.results import OpResult, RecipeResult

try:  # BLAKE2 without hashlib: importing hashlib loads OpenSSL, a tenth of `status`'s budget
    from _blake2 import blake2b as _hash
except ImportError:  # pragma: no cover - other Pythons
    from hashlib import blake2b as _hash

_CODE: Optional[str] = None


def _digest(data: bytes) -> str:
    return _hash(data, digest_size=32).hexdigest()


def _file_digest(path: Path) -> Optional[str]:
    try:
        return _digest(path.read_bytes())
    except OSError:
        return None


def code_hash() -> str:
    """patchkit's own code, by each module's path, size and mtime (as Python's .pyc files
    are checked), and the Python running it (marshal's format is per version)."""
    global _CODE
    if _CODE is None:
        h = _hash(sys.version.encode(), digest_size=32)
        for dirpath, dirnames, filenames in sorted(os.walk(os.path.dirname(__file__))):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith(".py"):
                    st = os.stat(os.path.join(dirpath, fn))
                    h.update(f"{dirpath}/{fn}|{st.st_size}|{st.st_mtime_ns};".encode())
        _CODE = h.hexdigest()
    return _CODE


def _dir() -> Path:
    from patchkit.paths import cache_dir

    return cache_dir() / "verdicts"


def key(recipes_dir: Path, names: tuple[str, ...], targets: dict) -> str:
    h = _hash(code_hash().encode(), digest_size=32)
    h.update(repr(sorted(names)).encode())
    for p in sorted(recipes_dir.glob("*.toml")):
        h.update(p.name.encode() + (_file_digest(p) or "").encode())
    for engine, t in sorted(targets.items()):
        h.update(f"{engine}|{t.root}|{t.layout}|{t.version}".encode())
    return h.hexdigest()


def _provenance(targets: dict) -> dict[str, Optional[str]]:
    files = {}
    for root in sorted({t.root for t in targets.values()}):
        files[str(root / ".patchkit" / "journal.json")] = _file_digest(root / ".patchkit" / "journal.json")
        for p in sorted(root.glob("*.dist-info/patchkit.json")):
            files[str(p)] = _file_digest(p)
        files[f"{root}/*.dist-info/patchkit.json"] = ",".join(
            sorted(str(p) for p in root.glob("*.dist-info/patchkit.json"))
        )
    return files


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
    return [_recipe(r) for r in entry["results"]]


def save(k: str, session, res: list[RecipeResult]) -> None:
    if session.searched_tree:
        return
    entry = {
        "files": {str(f.path): (_digest(f.original) if f.exists else None) for f in session.files.values()},
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


def _recipe(d: dict) -> RecipeResult:
    ops = tuple(
        OpResult(
            recipe=d["id"],
            index=o["index"],
            kind=o["kind"],
            engine=o["engine"],
            file=o["file"],
            state=o["state"],
            line=o["line"],
            location=o["location"],
            message=o["message"],
        )
        for o in d["ops"]
    )
    return RecipeResult(
        id=d["id"], state=d["state"], in_range=d["in_range"], ops=ops, message=d["message"], versions=d["versions"]
    )
