"""A distribution's RECORD (``*.dist-info/RECORD``), kept true when patchkit edits files in place.

pip writes one row per installed file: ``path,sha256=<urlsafe b64, no padding>,size``.
When patchkit patches an installed package, the rows of the files it rewrites must follow,
or tools that verify an installation see a tampered package.  ``updates`` returns the new
RECORD bytes so that transaction.write can write them in the *same* all-or-nothing batch as the
files themselves: either the files and their RECORD change together, or nothing does.

Only the rows that change are rewritten, in every RECORD that lists the file; every other
line keeps its bytes.  Bytecode caches (``__pycache__/x.*.pyc``) of a patched module get an
empty hash, as the wheel spec allows for .pyc files (pip writes them so already): Python
recompiles them from the patched source, so no fixed hash would stay true.  The rows as
they were before patchkit first rewrote them are remembered (``MEMORY``), so a revert that
gives a file back its bytes gives back its rows too, byte for byte, even a row that was
already stale.
"""

from __future__ import annotations

import base64
import csv
import functools
import glob
import hashlib
import io
import json
import os
import re
import sys
import sysconfig
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Iterable, Optional

from patchkit.base import fsio
from patchkit.base.errors import TargetError
from patchkit.base.target import STATE_DIR

if TYPE_CHECKING:
    from patchkit.base.target import Target

ALLOW_SYSTEM_ENV = "PATCHKIT_ALLOW_SYSTEM_SITE"


def hash_of(data: bytes) -> str:
    """The RECORD hash field: ``sha256=`` + urlsafe base64 of the digest, without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def row_line(path: str, hash_: str, size: str, newline: str = "\n") -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator=newline).writerow([path, hash_, size])
    return buf.getvalue()


def parse(data: bytes, where: Optional[Path] = None) -> list[tuple[str, str, str]]:
    """RECORD rows as (path, hash, size); blank lines are skipped."""
    rows = []
    for fields in csv.reader(io.StringIO(_text(data, where), newline="")):
        if not fields:
            continue
        fields = (fields + ["", "", ""])[:3]
        rows.append((fields[0], fields[1], fields[2]))
    return rows


def _text(data: bytes, where: Optional[Path]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TargetError(
            f"{where or 'RECORD'}:{line}: not UTF-8, as a RECORD must be; patchkit will not rewrite it",
            "reinstall the package (pip install --force-reinstall --no-deps), then run the command again",
        ) from None


def render(rows: Iterable[tuple[str, str, str]]) -> bytes:
    return "".join(row_line(*r) for r in rows).encode("utf-8")


def _split_lines(text: str) -> list[str]:
    """Lines ending in \\n (csv's own row terminator), each with its ending."""
    lines = text.split("\n")
    return [ln + "\n" for ln in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _row_path(line: str) -> Optional[str]:
    fields = next(csv.reader([line]), None)
    return fields[0] if fields else None


def _records(root: Path) -> dict[Path, bytes]:
    """Every RECORD under ``root``, read once; one that cannot be read is a TargetError (its
    rows could not be kept true)."""
    out = {}
    for rec in sorted(root.glob("*.dist-info/RECORD")):
        data = fsio.read_file(rec)
        if data is not None:
            out[rec] = data
    return out


def _pyc_prefix(rel: str) -> Optional[str]:
    p = PurePosixPath(rel)
    if p.suffix != ".py":
        return None
    return str(p.parent / "__pycache__" / p.stem) + "."


def _pyc_source(path: str, prefixes: dict[str, str]) -> Optional[str]:
    """The source (among ``prefixes``: pyc prefix -> source row) a bytecode row belongs to."""
    if not path.endswith(".pyc"):
        return None
    for pre, src in prefixes.items():
        if path.startswith(pre) and "/" not in path[len(pre) :]:
            return src
    return None


# -- what patchkit remembers of the rows it rewrote ------------------------------------------------
#
# A RECORD row may already be stale before patchkit touches its file (the user edited the
# file, or the RECORD was wrong).  Apply must make the row true, and revert must give back
# the RECORD as it was, byte for byte: so the first time patchkit rewrites a row it keeps
# the row's original text in ``<root>/.patchkit/record.json`` (written in the same
# transaction as the RECORD), with the digest of the bytes the file had then.  When a later
# write gives the file back exactly those bytes, the original rows come back; otherwise the
# rows follow the file.  A remembered row that someone else rewrote since (a reinstall) is
# forgotten: the RECORD as it is now is the original again.

MEMORY = "record.json"
MEMORY_FORMAT = 1


def _memory_path(root: Path) -> Path:
    return root / STATE_DIR / MEMORY


def load_memory(root: Path) -> tuple[dict, Optional[bytes]]:
    """(records: {RECORD path relative to root: {source row: {"pristine", "rows"}}}, the
    file's bytes or None).  A damaged file is read as empty: stale rows are then made true
    rather than given back."""
    path = _memory_path(root)
    data = fsio.read_file(path)
    if data is None:
        return {}, None
    try:
        doc = json.loads(data)
        recs = doc["records"] if doc.get("format") == MEMORY_FORMAT else None
        ok = isinstance(recs, dict) and all(
            isinstance(srcs, dict)
            and all(
                isinstance(e, dict)
                and isinstance(e.get("pristine"), str)
                and isinstance(e.get("rows"), dict)
                and all(
                    isinstance(r, dict) and isinstance(r.get("original"), str) and isinstance(r.get("wrote"), str)
                    for r in e["rows"].values()
                )
                for e in srcs.values()
            )
            for srcs in recs.values()
        )
    except (ValueError, AttributeError, KeyError, TypeError):
        ok = False
    return (recs if ok else {}), data


def render_memory(records: dict) -> bytes:
    return (json.dumps({"format": MEMORY_FORMAT, "records": records}, indent=1, sort_keys=True) + "\n").encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def updates(
    root: Path, changes: list[tuple[Path, bytes, Optional[bytes]]], memory: Optional[dict] = None
) -> list[tuple[Path, bytes, bytes]]:
    """(RECORD path, new bytes, old bytes) for every RECORD under ``root`` that lists a changed file.

    ``changes`` are (absolute path, new bytes, bytes before) of files about to be written;
    ``memory`` (load_memory) is updated in place."""
    root = Path(root)
    memory = {} if memory is None else memory
    files: dict[str, tuple[bytes, bytes]] = {}
    for path, new, old in changes:
        try:
            rel = Path(path).relative_to(root).as_posix()
        except ValueError:
            continue
        files[rel] = (new, new if old is None else old)
    if not files:
        return []
    out = []
    for rec, data in sorted(_records(root).items()):
        listed = {p for p, _, _ in parse(data, rec)}
        mine = {rel: v for rel, v in files.items() if rel in listed}
        if not mine:
            continue
        text = data.decode("utf-8")
        key = rec.relative_to(root).as_posix()
        mem = memory.setdefault(key, {})
        pyc = {pre: rel for rel in mine if (pre := _pyc_prefix(rel))}
        near = _near(text, [*mine, *pyc])
        lines = [
            (line, *_row(line, mine, pyc)) if near is None or near.search(line) else (line, None, None, None)
            for line in _split_lines(text)
        ]
        # A source's remembered rows hold only while every one is still as patchkit wrote it.
        for src in mine:
            entry = mem.get(src)
            if entry is not None:
                now = {path: body for _, body, path, s in lines if s == src}
                if any(now.get(p) != r["wrote"] for p, r in entry["rows"].items()):
                    del mem[src]
        back = {src for src, (new, _) in mine.items() if src in mem and mem[src]["pristine"] == _sha(new)}
        result = []
        for line, body, path, src in lines:
            if src is None:
                result.append(line)
                continue
            nl = line[len(body) :] or "\n"
            if src in back and path in mem[src]["rows"]:
                result.append(mem[src]["rows"][path]["original"] + nl)
                continue
            new, old = mine[src]
            if path == src:
                want = row_line(path, hash_of(new), str(len(new)), "")
            else:  # bytecode of a patched module: an empty hash, which Python's recompiling keeps true
                fields = next(csv.reader([body]))
                want = row_line(path, "", "", "") if len(fields) > 1 and fields[1] else body
            if src not in back:
                entry = mem.setdefault(src, {"pristine": _sha(old), "rows": {}})
                entry["rows"].setdefault(path, {"original": body, "wrote": body})["wrote"] = want
            result.append(want + nl)
        for src in back:
            del mem[src]
        if not mem:
            del memory[key]
        new_text = "".join(result)
        if new_text != text:
            out.append((rec, new_text.encode("utf-8"), data))
    return out


def _near(text: str, needles: list[str]):
    """A regex that every row of a changed source (or of its bytecode) matches: the row's
    path stands in its line verbatim, quoted or not, when no needle holds a quote.  Only
    those lines are read as CSV (a RECORD has thousands of rows; apply changes a few files);
    the other rows are kept as they are.  None where that does not hold, or a bare CR (which
    csv refuses in a row) would go unread."""
    if not needles or any(c in n for n in needles for c in '"\r\n') or "\r" in text.replace("\r\n", ""):
        return None
    return re.compile("|".join(map(re.escape, needles)))


def _row(line: str, mine: dict, pyc: dict) -> tuple[str, Optional[str], Optional[str]]:
    """(the line's text without its ending, its row path, the changed source it belongs to)."""
    body = line.rstrip("\r\n")
    path = _row_path(body) if body else None
    if path is None:
        return body, None, None
    return body, path, path if path in mine else _pyc_source(path, pyc)


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


def plan_updates(session, plan) -> list[tuple[Path, bytes, Optional[bytes]]]:
    """The RECORD rewrites that go with an engine Plan (patchkit/core/transaction.py writes them in
    its batch), and patchkit's memory of the rows it rewrote (``MEMORY``) with them.

    Only package-layout targets that hold a dist-info are concerned; a git checkout has no
    RECORD.  Installed trees are checked first: a system site-packages is refused.  A file
    reached through a symlink inside the target is listed under either name."""
    by_root: dict[Path, list] = {}
    for f in plan.files:
        if f.target.layout == "package":
            by_root.setdefault(f.target.root, []).append(f)
    out: list[tuple[Path, bytes, Optional[bytes]]] = []
    for root, files in sorted(by_root.items()):
        if not is_installed_tree(root):
            continue
        guard_writable(root)
        changes = []
        for f in files:
            for p in dict.fromkeys([Path(f.path), Path(f.real)]):
                changes.append((p, f.new, f.original if f.exists else None))
        memory, before = load_memory(root)
        out += updates(root, changes, memory)
        after = render_memory(memory)
        if after != before and (memory or before is not None):
            out.append((_memory_path(root), after, before))
    return out


# -- what the installer wrote (the judge and identity ask) -------------------------------------


def installed_as(t: Target, logical: str, data: bytes) -> str:
    """The RECORD of the target's installed distribution, when it lists exactly these bytes
    for the file ("" otherwise).  patchkit keeps RECORD true when it writes, so a file
    that differs from patchkit's write yet matches RECORD was written by an installer
    together with its RECORD: a hand edit leaves RECORD alone."""
    if t.layout != "package":
        return ""
    from patchkit.base.errors import PatchkitError
    from patchkit.base.target import ENGINES

    try:
        rel = t.relpath(logical)
    except PatchkitError:
        return ""
    norm = ENGINES[t.engine].dist.replace("-", "_")
    first = [t.root / f"{norm}-{t.version}.dist-info"] if t.version else []
    want = hash_of(data)
    for di in dict.fromkeys([*first, *sorted(t.root.glob(f"{norm}-*.dist-info"))]):
        if _record_rows(di / "RECORD").get(rel) == want:
            return f"{di.name}/RECORD"
    return ""


def _record_rows(path: Path) -> dict[str, str]:
    """A RECORD's rows as {path: hash}, read once per version of the file ({} when unreadable)."""
    try:
        st = path.stat()
    except OSError:
        return {}
    return _parsed_record(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _parsed_record(path: str, mtime_ns: int, size: int) -> dict[str, str]:
    from patchkit.base import regular
    from patchkit.base.errors import PatchkitError

    try:
        data = regular.read_file(Path(path))
        return {p: h for p, h, _ in parse(data or b"")}
    except (OSError, PatchkitError):
        return {}
