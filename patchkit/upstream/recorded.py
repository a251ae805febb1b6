"""The sha256 a release archive in patchkit's cache was checked against when it came from the
package index, and the check every use of it as a pristine reference makes.

A release (its wheel, its sdist, or the tree unpacked from one of them) is where "upstream"
verdicts come from: a wheel placed in the cache under a release's name, holding an applied
edit, would make that edit read "upstream", and `revert` leave it.  So:

* **When an archive is downloaded** (patchkit/upstream/fetch.py), the sha256 the index
  listed for it (the one the download was checked against) is recorded beside it as an
  entry of patchkit's store (``NAME.sha256``, kept beside it: patchkit/base/store.py, an HMAC
  under this user's key over the entry's place too, so a record moved beside another archive
  fails).
* **Every use** of a cached archive compares its bytes with that record (``why_not``,
  ``open_checked``), offline too: it is hashed unless it still has the device, inode, size,
  mtime and ctime it had when last hashed and found right (kept in the record, and for this
  process: a file rewritten, replaced or touched since is hashed again).  A file with no
  record, a record that fails its MAC (a planted, copied or another user's cache, one the
  trust rule refuses), or other bytes than recorded is not a pristine reference: offline,
  patchkit says so in one line and the verdicts that need it read unknown; online, fetch.py
  checks it against the index again (and downloads it again where it differs).
* **An unpacked tree** (``trees/ENGINE-VERSION``) is tied to the archive it was made from:
  ``.patchkit/checked`` is an authenticated record of the engine, the version, the archive's
  name and its recorded sha256, written as the tree is made from a checked archive
  (``seal_tree``); a tree without it, or whose record fails, names another release, or
  disagrees with the archive's own record, is made again (offline: refused, ``tree_ok``).

Standard library only; hashlib is imported where a file is hashed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import BinaryIO, Optional

KIND = "records"  # the store's kind of these entries
SUFFIX = ".sha256"  # the record beside the archive: wheels/DIST/VERSION/NAME.whl.sha256
TREE_RECORD = ".patchkit/checked"  # the tree's record, under the tree's root
_HEX64 = re.compile(r"[0-9a-f]{64}")
_hashed: dict[tuple, str] = {}  # (path, dev, ino, size, mtime_ns, ctime_ns) -> sha256, this process
_mine: dict[str, str] = {}  # archive -> the sha256 this process checked it against the index with


class Unchecked(Exception):
    """The archive is not the bytes recorded for it; ``str()`` says why (a phrase)."""


def record(archive: Path, sha256: str) -> None:
    """Record ``sha256`` (checked against the index as ``archive`` was downloaded) as the
    archive's, an authenticated entry beside it.  Best effort: an untrusted cache, or one
    without a key, keeps none, and the archive is checked against the index on next use."""
    from patchkit.base import store

    if _HEX64.fullmatch(sha256 or ""):
        _mine[str(archive)] = sha256  # this process's own check stands where none can be stored
        store.put_json(KIND, archive.parent / (archive.name + SUFFIX), {"file": archive.name, "sha256": sha256})


def _record(archive: Path) -> Optional[dict]:
    """The authenticated record beside ``archive``, or None."""
    from patchkit.base import store

    doc = store.get_json(KIND, archive.parent / (archive.name + SUFFIX), dict, limit=4096)
    if doc is None or doc.get("file") != archive.name:
        return None
    return doc if isinstance(doc.get("sha256"), str) and _HEX64.fullmatch(doc["sha256"]) else None


def recorded(archive: Path) -> Optional[str]:
    """The sha256 recorded for ``archive`` when it was downloaded (by this process, where the
    cache keeps no record), or None: no record, or one that is not this user's (its MAC
    fails, or the cache is not trusted), or not its name's."""
    doc = _record(archive)
    return doc["sha256"] if doc is not None else _mine.get(str(archive))


def _stat_key(st: os.stat_result) -> list:
    """What a file rewritten, replaced or touched changes: its device, inode, size, mtime and
    ctime (which no one sets back)."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _digest(f: BinaryIO, path: Path) -> str:
    key = (str(path), *_stat_key(os.fstat(f.fileno())))
    if key not in _hashed:
        import hashlib

        h = hashlib.sha256()
        f.seek(0)
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        f.seek(0)
        _hashed[key] = h.hexdigest()
    return _hashed[key]


def open_checked(archive: Path) -> BinaryIO:
    """The archive opened for reading, its bytes checked against its record (the same open
    file is hashed and handed back: nothing swapped in between is read).  Unchecked (why),
    or regular.open_file's exceptions.

    The record also keeps the file's ``_stat_key`` as of its last check: while the file still
    has it, it is not hashed again (other processes too); any change to the file misses."""
    from patchkit.base import regular, store

    doc = _record(archive)
    want = doc["sha256"] if doc is not None else _mine.get(str(archive))
    if want is None:
        raise Unchecked(
            "no sha256 was recorded for it by a download from the package index (a file placed in the"
            " cache, a cache from before records, or one copied or not trusted)"
        )
    f = regular.open_file(archive)
    try:
        now = _stat_key(os.fstat(f.fileno()))
        if doc is not None and doc.get("checked") == now:
            return f
        got = _digest(f, archive)
    except BaseException:
        f.close()
        raise
    if got != want:
        f.close()
        raise Unchecked(f"its sha256 is {got[:16]}..., not the {want[:16]}... recorded when it was downloaded")
    if doc is not None:  # checked as it stands now: the next use need not hash it again
        store.put_json(KIND, archive.parent / (archive.name + SUFFIX), {**doc, "checked": now})
    return f


def why_not(archive: Path) -> Optional[str]:
    """None when ``archive`` is the bytes recorded for it, else why (a phrase)."""
    from patchkit.base import regular

    try:
        open_checked(archive).close()
    except Unchecked as e:
        return str(e)
    except regular.NotRegular as e:
        return f"it is {e.kind}, not a file"
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    return None


def refusal(archive: Path, why: str, offline_env: str):
    """The one line for an archive that is not used as a pristine reference, offline."""
    from patchkit.base.errors import FetchError

    return FetchError(
        f"{archive}: not used as a pristine reference: {why}",
        f"unset {offline_env} once to check it against the package index (it is downloaded again where it"
        " differs), or remove it",
    )


# -- trees unpacked from a checked archive ---------------------------------------------------


def tree_record(archive: Path, source: dict) -> Optional[bytes]:
    """The record a tree made from ``archive`` carries: ``source`` and the archive's recorded
    sha256, when the archive is checked now (None: it is not, and the tree gets no record)."""
    if why_not(archive) is not None:
        return None
    return json.dumps({**source, "sha256": recorded(archive)}, sort_keys=True).encode()


def seal_tree(tmp: Path, dest: Path, data: Optional[bytes]) -> None:
    """Put the authenticated record ``data`` (tree_record) in the tree being made at ``tmp``,
    sealed under the name it will have at ``dest``."""
    from patchkit.base import store

    sealed = store.sealed(KIND, dest / TREE_RECORD, data) if data is not None else None
    if sealed is not None:
        (tmp / TREE_RECORD).parent.mkdir(exist_ok=True)
        (tmp / TREE_RECORD).write_bytes(sealed)


def tree_why_not(dest: Path, engine: str, version: str) -> Optional[str]:
    """None when the tree at ``dest`` was unpacked from a checked archive of ``engine``
    ``version`` (its authenticated record says so, and agrees with the archive's own record
    where the archive is still cached), else why (a phrase)."""
    from patchkit.base import store
    from patchkit.base.target import ENGINES

    doc = store.get_json(KIND, dest / TREE_RECORD, dict, limit=1 << 16)
    if doc is None or not _HEX64.fullmatch(str(doc.get("sha256", ""))):
        return "it carries no authenticated record of the checked archive it was unpacked from"
    if doc.get("engine") != engine or doc.get("version") != version:
        return f"its record names {doc.get('engine')} {doc.get('version')}"
    from patchkit.base.paths import cache_dir, wheels_dir

    dist = ENGINES[engine].dist if engine in ENGINES else engine
    for kind, where in (("wheel", wheels_dir(dist) / version), ("sdist", sdist_dir(cache_dir(), dist, version))):
        name = doc.get(kind)
        if isinstance(name, str) and name:
            if "/" in name or name.startswith("."):
                return f"its record names {name!r}"
            archive = where / name
            if os.path.lexists(archive) and recorded(archive) != doc["sha256"]:
                return f"{archive} is no longer the archive it was unpacked from"
            return None
    return "its record names no archive"


def sparse_record(engine: str, version: str, wheel: str, record: str) -> bytes:
    """The record a sparse tree carries (patchkit/upstream/lazytree.py): the release and the
    wheel whose directory and RECORD (by its digest) vouch for each file fetched into it.  It
    has no ``sha256``, so ``tree_why_not`` never takes a sparse tree for a whole one."""
    return json.dumps({"engine": engine, "sparse": version, "wheel": wheel, "record": record}, sort_keys=True).encode()


def sparse_why_not(dest: Path, engine: str, version: str) -> Optional[str]:
    """None when ``dest`` is a sparse tree patchkit made of ``engine`` ``version`` (its
    authenticated record says so), else why (a phrase): a planted ``sparse.json`` and
    ``source.json`` make no pristine reference."""
    from patchkit.base import store

    doc = store.get_json(KIND, dest / TREE_RECORD, dict, limit=1 << 16)
    if doc is None or not _HEX64.fullmatch(str(doc.get("record", ""))):
        return "it carries no authenticated record of the wheel it is read from"
    if doc.get("engine") != engine or doc.get("sparse") != version:
        return f"its record names {doc.get('engine')} {doc.get('sparse')}"
    wheel = doc.get("wheel")
    if not isinstance(wheel, str) or not wheel or "/" in wheel or wheel.startswith("."):
        return f"its record names {wheel!r}"
    return None


def sdist_dir(cache: Path, dist: str, version: str) -> Path:
    """fetch.sdist_dir, without importing the index client."""
    return cache / "sdists" / re.sub(r"[-_.]+", "-", dist).lower() / version
