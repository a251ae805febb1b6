"""`cache`: what patchkit keeps in its cache, by kind and by release; `cache path`; and
`cache prune`, by age or by size, keeping the releases the pins and the recipes need.

The cache holds two sorts of thing:

- *releases*: a release's wheel (``wheels/DIST/V``), its sdist (``sdists/DIST/V``), its
  listing read by ranges (``lazy/DIST/V``) and its unpacked tree (``trees/ENGINE-V``).  Each
  is one entry, named ``ENGINE==V``, removed as a whole.
- *derived entries and blobs*: the kinds of patchkit's store (patchkit/base/store.py:
  verdicts, plans, probes, identities, outlines, gates scans, confirmed views, build
  results, ...) and the members read by ranges (``blobs/``).  Each file is one entry; any can
  be removed at any time, and is computed (or fetched) again when next needed.

Pruning never follows a link (a link planted in the cache is removed, not its target), never
touches anything outside the cache directory, and keeps every release that
upstream_pins.toml pins, every release a recipe in play was written from (where its range
starts: the judge reads it for the site's identity), and every one named with ``--keep``.  Age is the time since an
entry was last written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from patchkit.base import store
from patchkit.base.errors import PatchkitError
from patchkit.base.paths import cache_dir
from patchkit.base.target import ENGINES
from patchkit.commands import say
from patchkit.core.project import Project

# top-level directory -> what it holds (those not named here are shown by their name)
KINDS = {
    "wheels": "release wheels",
    "sdists": "release sdists",
    "lazy": "release listings read by HTTP ranges",
    "trees": "unpacked releases",
    **store.KINDS,
    "tvm-ffi": "tvm-ffi headers for verify --build",
    "publish": "publish's built wheels",
}
RELEASE_KINDS = ("wheels", "sdists", "lazy", "trees")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SPANS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path
    size: int  # bytes on disk it holds (files' sizes; links count 0)
    mtime: float  # the newest write inside it
    release: Optional[str] = None  # ENGINE==V for a release's entry

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.size, "mtime": self.mtime,
                "release": self.release}  # fmt: skip


def _engine_of(dist: str) -> str:
    norm = dist.replace("_", "-").lower()
    for name, info in ENGINES.items():
        if info.dist.replace("_", "-").lower() == norm:
            return name
    return norm


def _measure(path: Path) -> tuple[int, float]:
    """(bytes, newest mtime) under ``path``, never following a link."""
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        return (st.st_size if stat.S_ISREG(st.st_mode) else 0), st.st_mtime
    size, newest = 0, st.st_mtime
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in (*dirs, *files):
            try:
                s = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            newest = max(newest, s.st_mtime)
            if stat.S_ISREG(s.st_mode):
                size += s.st_size
    return size, newest


def _release_dirs(root: Path, kind: str) -> Iterator[tuple[Path, str]]:
    base = root / kind
    if not base.is_dir() or base.is_symlink():
        return
    if kind == "trees":
        for d in sorted(base.iterdir()):
            engine, dash, version = d.name.partition("-")
            yield d, f"{engine}=={version}" if dash else d.name
        return
    for dist in sorted(base.iterdir()):
        if not dist.is_dir() or dist.is_symlink():
            yield dist, dist.name
            continue
        for v in sorted(dist.iterdir()):
            yield v, f"{_engine_of(dist.name)}=={v.name}"


def entries(root: Optional[Path] = None) -> list[Entry]:
    """Every entry of the cache at ``root`` (default: patchkit's)."""
    root = root or cache_dir()
    out: list[Entry] = []
    if not root.is_dir():
        return out
    for top in sorted(root.iterdir()):
        if top.name in RELEASE_KINDS and top.is_dir() and not top.is_symlink():
            for d, release in _release_dirs(root, top.name):
                size, mtime = _measure(d)
                out.append(Entry(top.name, d, size, mtime, release))
        elif top.is_dir() and not top.is_symlink():
            for dirpath, dirs, files in os.walk(top, followlinks=False):
                for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
                    p = Path(dirpath) / name
                    size, mtime = _measure(p)
                    out.append(Entry(top.name, p, size, mtime))
        else:
            size, mtime = _measure(top)
            out.append(Entry("other", top, size, mtime))
    return out


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise PatchkitError(f"--max-size {text!r}: not a size", "give a size such as 500M, 2G or 1.5G")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def parse_age(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if not m:
        raise PatchkitError(f"--older-than {text!r}: not an age", "give an age such as 12h, 30d or 2w")
    return float(m.group(1)) * _SPANS[m.group(2)]


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def pinned(project_factory) -> set[str]:
    """ENGINE==V of every release upstream_pins.toml pins (none where there is no pins file)."""
    try:
        project: Project = project_factory()
        if project.pins_path is None:
            return set()
        return {f"{engine}=={pin.version}" for engine, pin in project.pins().items()}
    except PatchkitError:
        return set()


def homes(project_factory) -> set[str]:
    """ENGINE==V of every release a recipe in play was written from (where its range starts:
    identity.floor), which the judge reads for the site's identity; none where the recipes
    cannot be read (prune then keeps only the pins and --keep)."""
    from patchkit.core.identity import floor

    try:
        catalog = project_factory().catalog()
    except PatchkitError:
        return set()
    out = set()
    for recipe in catalog.recipes.values():
        for op in recipe.ops:
            v = floor(recipe, op)
            if v is not None:
                out.add(f"{op.engine}=={v}")
    return out


def show(as_json: bool = False) -> int:
    root = cache_dir()
    got = entries(root)
    by_kind: dict[str, list[int]] = {}
    by_release: dict[str, dict[str, int]] = {}
    for e in got:
        k = by_kind.setdefault(e.kind, [0, 0])
        k[0] += e.size
        k[1] += 1
        if e.release:
            by_release.setdefault(e.release, {})[e.kind] = e.size
    total = sum(e.size for e in got)
    why = store.why_untrusted(root)
    if as_json:
        say(json.dumps({
            "command": "cache", "path": str(root), "bytes": total, "trusted": why is None, "untrusted_why": why,
            "kinds": {k: {"bytes": v[0], "entries": v[1], "what": KINDS.get(k, k)} for k, v in sorted(by_kind.items())},
            "releases": {r: {"bytes": sum(v.values()), "kinds": v} for r, v in sorted(by_release.items())},
        }, indent=2, sort_keys=True))  # fmt: skip
        return 0
    say(f"patchkit's cache: {root}  ({human(total)})")
    if why is not None:
        say(f"  not trusted ({why}): no derived entry is read or written there (chmod go-w)")
    if not got:
        say("  empty")
        return 0
    say("\nby kind:")
    for k, (size, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        say(f"  {k:<10} {human(size):>10}  {n:>6} entr{'y' if n == 1 else 'ies'}  {KINDS.get(k, '')}")
    if by_release:
        say("\nby release:")
        for r, kinds in sorted(by_release.items(), key=lambda kv: -sum(kv[1].values())):
            parts = ", ".join(f"{k} {human(s)}" for k, s in sorted(kinds.items()))
            say(f"  {r:<28} {human(sum(kinds.values())):>10}  ({parts})")
    say("\n`patchkit cache prune --older-than 30d` or `--max-size 2G` frees it; pinned releases are kept.")
    return 0


def _remove(root: Path, e: Entry) -> None:
    """Remove ``e``, which lies under ``root``: a link or file unlinked, a directory removed
    without following a link inside it."""
    real_root = root.resolve()
    parent = e.path.parent.resolve()
    if parent != real_root and real_root not in parent.parents:
        raise PatchkitError(f"{e.path}: outside patchkit's cache ({root}); not removed")
    st = e.path.lstat()
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(e.path)  # fd-based on Linux: a link inside is removed, not followed
    else:
        e.path.unlink()


def prune(
    project_factory,
    older_than: Optional[str],
    max_size: Optional[str],
    keep: tuple[str, ...] = (),
    dry_run: bool = False,
    as_json: bool = False,
) -> int:
    if older_than is None and max_size is None:
        raise PatchkitError(
            "cache prune: say what to remove", "give --older-than AGE (e.g. 30d), --max-size SIZE (e.g. 2G), or both"
        )
    age = parse_age(older_than) if older_than is not None else None
    limit = parse_size(max_size) if max_size is not None else None
    for k in keep:
        if "==" not in k:
            raise PatchkitError(f"--keep {k!r}: not ENGINE==VERSION", "e.g. --keep sglang==0.5.9")
    root = cache_dir()
    if root.exists() and root.lstat().st_uid != os.geteuid():
        raise PatchkitError(f"{root}: patchkit's cache is not yours; nothing removed", "prune it as its owner")
    kept = pinned(project_factory) | homes(project_factory) | set(keep)
    now = time.time()
    got = sorted(entries(root), key=lambda e: e.mtime)  # oldest first
    victims = [e for e in got if e.release is None or e.release not in kept]
    remove: list[Entry] = []
    if age is not None:
        remove += [e for e in victims if now - e.mtime > age]
    if limit is not None:
        total = sum(e.size for e in got) - sum(e.size for e in remove)
        for e in victims:
            if total <= limit:
                break
            if e not in remove:
                remove.append(e)
                total -= e.size
    freed = 0
    for e in remove:
        if not dry_run:
            try:
                _remove(root, e)
            except FileNotFoundError:
                continue
        freed += e.size
    left = sum(e.size for e in got) - freed
    if as_json:
        say(json.dumps({
            "command": "cache prune", "path": str(root), "dry_run": dry_run, "freed": freed, "left": left,
            "kept": sorted(kept), "removed": [e.to_json() for e in remove],
        }, indent=2, sort_keys=True))  # fmt: skip
        return 0
    verb = "would remove" if dry_run else "removed"
    derived: dict[str, list[int]] = {}
    for e in remove:
        if e.release:
            say(f"  {verb} {e.release} {e.kind}: {e.path} ({human(e.size)})")
        else:
            d = derived.setdefault(e.kind, [0, 0])
            d[0], d[1] = d[0] + 1, d[1] + e.size
    for kind, (n, size) in sorted(derived.items()):
        say(f"  {verb} {n} {kind} entr{'y' if n == 1 else 'ies'} ({human(size)})")
    say(f"{verb} {len(remove)} entr{'y' if len(remove) == 1 else 'ies'}, {human(freed)}; {human(left)} left in {root}")
    if kept:
        say(f"kept (pinned, a recipe's home release, or --keep): {', '.join(sorted(kept))}")
    return 0


def path() -> int:
    say(str(cache_dir()))
    return 0
