"""A distribution's RECORD (``*.dist-info/RECORD``), kept true when patchkit edits files in place.

pip writes one row per installed file: ``path,sha256=<urlsafe b64, no padding>,size``.
When patchkit patches an installed package, the rows of the files it rewrites must follow,
or tools that verify an installation see a tampered package.  ``updates`` returns the new
RECORD bytes so that transaction.write can write them in the *same* all-or-nothing batch as the
files themselves: either the files and their RECORD change together, or nothing does.

Only the rows that change are rewritten; every other line keeps its bytes, so a revert
gives back the RECORD pip wrote, byte for byte.  Bytecode caches (``__pycache__/x.*.pyc``)
of a patched module get an empty hash, as the wheel spec allows for .pyc files (pip
writes them so already): Python recompiles them from the patched source, so no fixed hash
would stay true.
"""

from __future__ import annotations

import base64
import csv
import glob
import hashlib
import io
import os
import sys
import sysconfig
from pathlib import Path, PurePosixPath
from typing import Iterable, Optional

from patchkit.errors import TargetError

ALLOW_SYSTEM_ENV = "PATCHKIT_ALLOW_SYSTEM_SITE"


def hash_of(data: bytes) -> str:
    """The RECORD hash field: ``sha256=`` + urlsafe base64 of the digest, without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def row_line(path: str, hash_: str, size: str, newline: str = "\n") -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator=newline).writerow([path, hash_, size])
    return buf.getvalue()


def parse(data: bytes) -> list[tuple[str, str, str]]:
    """RECORD rows as (path, hash, size); blank lines are skipped."""
    rows = []
    for fields in csv.reader(io.StringIO(data.decode("utf-8"), newline="")):
        if not fields:
            continue
        fields = (fields + ["", "", ""])[:3]
        rows.append((fields[0], fields[1], fields[2]))
    return rows


def render(rows: Iterable[tuple[str, str, str]]) -> bytes:
    return "".join(row_line(*r) for r in rows).encode("utf-8")


def _split_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _row_path(line: str) -> Optional[str]:
    fields = next(csv.reader([line]), None)
    return fields[0] if fields else None


def owner(root: Path, rel: str, _cache: Optional[dict] = None) -> Optional[Path]:
    """The RECORD under ``root`` that lists ``rel`` (a posix path relative to root), if any."""
    cache = {} if _cache is None else _cache
    if not cache:
        for rec in sorted(root.glob("*.dist-info/RECORD")):
            try:
                cache[rec] = rec.read_bytes()
            except OSError:
                continue
    for rec, data in cache.items():
        if rel.encode() in data and any(p == rel for p, _, _ in parse(data)):
            return rec
    return None


def _pyc_prefix(rel: str) -> Optional[str]:
    p = PurePosixPath(rel)
    if p.suffix != ".py":
        return None
    return str(p.parent / "__pycache__" / p.stem) + "."


def updates(root: Path, changes: list[tuple[Path, bytes]]) -> list[tuple[Path, bytes, bytes]]:
    """(RECORD path, new bytes, old bytes) for every RECORD under ``root`` that lists a changed file.

    ``changes`` are (absolute path, new bytes) of files about to be written.
    """
    root = Path(root)
    by_record: dict[Path, dict[str, bytes]] = {}
    records: dict[Path, bytes] = {}  # each RECORD of site-packages read once per call
    for path, new in changes:
        try:
            rel = Path(path).relative_to(root).as_posix()
        except ValueError:
            continue
        rec = owner(root, rel, records)
        if rec is not None:
            by_record.setdefault(rec, {})[rel] = new
    out = []
    for rec, files in sorted(by_record.items()):
        old = rec.read_bytes()
        text = old.decode("utf-8")
        pyc = [pre for rel in files if (pre := _pyc_prefix(rel))]
        lines = []
        for line in _split_lines(text):
            body = line.rstrip("\r\n")
            nl = line[len(body) :] or "\n"
            path = _row_path(body) if body else None
            if path in files:
                line = row_line(path, hash_of(files[path]), str(len(files[path])), nl)
            elif path and path.endswith(".pyc") and any(path.startswith(p) and "/" not in path[len(p) :] for p in pyc):
                fields = next(csv.reader([body]))
                if len(fields) > 1 and fields[1]:
                    line = row_line(path, "", "", nl)
            lines.append(line)
        new_text = "".join(lines)
        if new_text != text:
            out.append((rec, new_text.encode("utf-8"), old))
    return out


def verify(dist_info: Path) -> list[str]:
    """Problems with one installed distribution's RECORD: files whose hash or size differ, or are gone."""
    root = dist_info.parent
    problems = []
    for path, h, size in parse((dist_info / "RECORD").read_bytes()):
        if not h:
            continue
        f = root / path
        if not f.is_file():
            problems.append(f"{path}: listed in RECORD but missing")
            continue
        data = f.read_bytes()
        if hash_of(data) != h or (size and int(size) != len(data)):
            problems.append(f"{path}: hash or size differs from RECORD")
    return problems


# -- where patchkit may write --------------------------------------------------------------------

_SYSTEM_GLOBS = (
    "/usr/lib/python3*",
    "/usr/lib64/python3*",
    "/usr/local/lib/python3*",
    "/usr/share/python3*",
    "/System/Library/*",
    "/Library/Python/*",
)


def system_locations() -> list[Path]:
    """Site directories that belong to a system interpreter, not to a venv the user owns."""
    locs = {Path(p) for g in _SYSTEM_GLOBS for p in glob.glob(g)}
    if sys.base_prefix != sys.prefix:  # we run in a venv: its base interpreter's site dirs are system ones
        for key in ("purelib", "platlib"):
            p = sysconfig.get_path(key, vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
            if p:
                locs.add(Path(p))
    return sorted(locs)


def is_installed_tree(root: Path) -> bool:
    """Does ``root`` look like site-packages (a dist-info with a RECORD) rather than a source tree?"""
    return any(Path(root).glob("*.dist-info/RECORD"))


def guard_writable(root: Path, extra_system: Iterable[Path] = ()) -> None:
    """Refuse to patch an interpreter's own (system) site-packages, or a place we cannot write."""
    root = Path(os.path.realpath(root))
    if os.environ.get(ALLOW_SYSTEM_ENV) != "1":
        for loc in [*system_locations(), *map(Path, extra_system)]:
            real = Path(os.path.realpath(loc))
            if root == real or real in root.parents:
                raise TargetError(
                    f"{root}: is the site-packages of a system Python ({real}); patchkit will not patch it in place",
                    "create a venv you own (python3 -m venv ENV), install the engine there, and patch that;"
                    f" or build a patched wheel with `patchkit wheel`; {ALLOW_SYSTEM_ENV}=1 overrides",
                )
    if not os.access(root, os.W_OK):
        raise TargetError(
            f"{root}: not writable by this user",
            "patch a venv you own, or build a patched wheel with `patchkit wheel` and install that",
        )


def plan_updates(session, plan) -> list[tuple[Path, bytes, bytes]]:
    """The RECORD rewrites that go with an engine Plan (patchkit/transaction.py writes them in its batch).

    Only package-layout targets that hold a dist-info are concerned; a git checkout has no
    RECORD.  Installed trees are checked first: a system site-packages is refused."""
    by_root: dict[Path, list] = {}
    for f in plan.files:
        if f.target.layout == "package":
            by_root.setdefault(f.target.root, []).append(f)
    out = []
    for root, files in sorted(by_root.items()):
        if not is_installed_tree(root):
            continue
        guard_writable(root)
        out += updates(root, [(Path(f.path), f.new_bytes()) for f in files])
    return out
