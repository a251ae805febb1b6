"""The tvm-ffi headers FlashInfer's C++ includes, fetched when none are installed.

They ship in the ``apache-tvm-ffi`` wheel (``tvm_ffi/include/``).  Before asking anyone to
pip install it by hand, patchkit takes the release FlashInfer's own metadata requires from
the package index, through the same client and cache as the engines' releases
(patchkit/upstream/fetch.py), and unpacks only its headers into ``~/.cache/patchkit/tvm-ffi/V/``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from patchkit.base import paths
from patchkit.base.errors import FetchError, PatchkitError
from patchkit.upstream import fetch

DIST = "apache-tvm-ffi"
DEFAULT_SPEC = ">=0.1.6,<0.2"  # FlashInfer 0.6.x's own requirement, for a checkout without metadata
PREFIX = "tvm_ffi/include/"


def required(fi_root: Path) -> str:
    """The specifier FlashInfer's METADATA gives apache-tvm-ffi (``Requires-Dist``), else the default."""
    pattern = re.compile(r"^Requires-Dist:\s*apache[-_.]tvm[-_.]ffi\s*([^;\s][^;]*?)?\s*(;.*)?$", re.I | re.M)
    from patchkit.base.engines import ENGINES

    jit = ENGINES.with_jit()
    stem = re.sub(r"[-_.]+", "_", jit.dist).lower() if jit else ""
    for meta in sorted(fi_root.glob(f"{stem}-*.dist-info/METADATA") if stem else ()):
        m = pattern.search(meta.read_text("utf-8", "replace"))
        if m:
            return (m.group(1) or "").strip()
    return DEFAULT_SPEC


def _pick(spec: str, say: Callable[[str], None]) -> str:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    try:
        listed = fetch.versions(DIST)
    except FetchError:
        # Offline or unreachable: what the cache already holds, if anything.
        d = paths.wheels_dir(DIST)
        listed = sorted((p.name for p in d.iterdir() if any(p.glob("*.whl"))), key=Version) if d.is_dir() else []
        if not listed:
            raise
    fits = [v for v in SpecifierSet(spec).filter(listed)]
    if not fits:
        raise PatchkitError(
            f"verify --build: no {DIST} release fits FlashInfer's requirement {spec!r} (on the index or in the cache)",
            f"pip install '{DIST}{spec}' beside FlashInfer, or go online",
        )
    return max(fits, key=Version)


def fetch_headers(fi_root: Path, say: Callable[[str], None] = lambda s: None) -> Path:
    """``.../tvm_ffi/include`` of the apache-tvm-ffi release FlashInfer requires, from the
    cache, else downloaded and unpacked there (headers only, atomically)."""
    spec = required(fi_root)
    version = _pick(spec, say)
    from patchkit.base import fsio

    # patchkit's own directory, every component checked without following a link: a link
    # planted at cache/tvm-ffi would take the unpacked headers elsewhere (TargetError, exit 2)
    parent = fsio.owned_dir(paths.cache_dir(), "tvm-ffi")
    dest = parent / version
    inc = dest / "tvm_ffi" / "include"
    if dest.is_symlink():
        from patchkit.base.errors import TargetError

        raise TargetError(f"{dest}: is a symlink in patchkit's cache, not headers it unpacked", "remove it")
    if (inc / "tvm" / "ffi").is_dir():
        return inc
    say(f"tvm-ffi headers: none installed; fetching {DIST} {version} (FlashInfer requires {DIST}{spec})")
    whl = fetch.fetch_wheel(DIST, version, say=say)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{version}."))
    try:
        with zipfile.ZipFile(whl) as z:
            names = [n for n in z.namelist() if n.startswith(PREFIX) and ".." not in n.split("/")]
            z.extractall(tmp, names)
        try:
            os.rename(tmp, dest)
        except OSError:  # another process put it there first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not (inc / "tvm" / "ffi").is_dir():
        raise PatchkitError(f"verify --build: {whl.name} holds no {PREFIX}tvm/ffi", f"pip install '{DIST}{spec}'")
    say(f"tvm-ffi headers: {inc}")
    return inc
