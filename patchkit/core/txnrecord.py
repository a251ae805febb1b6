"""Reading the transaction's records (``.patchkit/txn-pending.json``, ``txn-commit.json``)
and checking them before recovery acts on one (patchkit/core/transaction.py).

A record tells the next run to rename files and remove others, so it is input like any
other: anyone who can write into a target (a wheel that ships ``.patchkit/`` into
site-packages, say) can plant one.  A record is acted on only when it is exactly what
``transaction.write`` writes: the schema and types; roots that are all targets of this run,
its own root among them; every path normal, absolute and inside one of them, through no
symlink; every temp of patchkit's own name form (fsio.write_temp) beside its path.  Anything
else is refused (exit 2, naming the record and why) before a file is renamed, created or
locked anywhere.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from patchkit.base import regular
from patchkit.base.errors import TargetError
from patchkit.base.journal import Journal, shape_error
from patchkit.base.target import STATE_DIR
from patchkit.base.target import TXN_PENDING as PENDING

COMMIT = "txn-commit.json"
LIMIT = 16 << 20  # a record names each file of one write once: a few KiB in practice
MOST = 100_000  # entries in one record
KEYS = ("id", "action", "recipes", "primary", "roots", "journals", "entries")
_ID = re.compile(r"[0-9a-f]{16}")
_SHA = re.compile(r"[0-9a-f]{64}")
# fsio.write_temp's names (tempfile.mkstemp: ".NAME." + random + ".patchkit-tmp"), and the
# ".NAME.patchkit-PID.tmp" of older releases.
_TEMP = r"\.{name}\.(?:[a-z0-9_]{{6,}}\.patchkit-tmp|patchkit-[0-9]+\.tmp)"


def bad(path: Path, why: str) -> TargetError:
    return TargetError(
        f"{path}: {why}; nothing was done",
        "if you did not plant it, remove it; if a patchkit run you started left it, run `patchkit apply`"
        " or `patchkit revert` again naming every target that run wrote to, to finish it",
    )


def kind(path: Path) -> Optional[str]:
    """What stands at ``path``, not following a symlink: None (nothing), "a file", "a
    symlink", "a directory", "a FIFO", ..."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(st.st_mode):
        return "a file"
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    return regular.KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")


def read(path: Path) -> Optional[dict]:
    """The JSON document at ``path``, or None when there is none.  Never through a symlink
    (the record's or its .patchkit's), never from anything but a regular file, never more
    than LIMIT bytes."""
    state = kind(path.parent)
    if state is None or state != "a directory":
        return None  # no .patchkit, or one patchkit refuses before it writes (transaction.check)
    what = kind(path)
    if what is None:
        return None
    if what != "a file":
        raise bad(path, f"is {what}, where patchkit writes its transaction records as files")
    try:
        data = regular.read(path, LIMIT)
    except FileNotFoundError:
        return None
    except regular.NotRegular as e:
        raise bad(path, f"is {e.kind}, where patchkit writes its transaction records as files") from None
    except regular.TooBig:
        raise bad(path, f"is larger than {LIMIT >> 20} MiB, which no patchkit record is") from None
    except OSError as e:
        raise bad(path, f"cannot be read ({e.strerror or e})") from None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise bad(path, "is not a patchkit transaction record (not JSON)") from None
    if not isinstance(doc, dict):
        raise bad(path, "is not a patchkit transaction record (not a JSON object)")
    return doc


def pending(root: Path, targets: frozenset[Path]) -> Optional[dict]:
    """The checked pending marker in ``root``, or None."""
    path = root / STATE_DIR / PENDING
    doc = read(path)
    if doc is None:
        return None
    why = _why(doc, root, targets, commit=False)
    if why:
        raise bad(path, why)
    return doc


def commit(doc: dict, targets: frozenset[Path]) -> Optional[dict]:
    """The checked commit record of the transaction a checked pending marker names, if it got
    that far (None: it never committed, or the record there is another transaction's)."""
    primary = Path(doc["primary"])
    path = primary / STATE_DIR / COMMIT
    got = read(path)
    if got is None:
        return None
    why = _why(got, primary, targets, commit=True)
    if why:
        raise bad(path, why)
    if got["id"] != doc["id"]:
        return None
    same = ("action", "recipes", "primary", "roots", "journals")
    if any(got[k] != doc[k] for k in same) or [_row(e) for e in got["entries"]] != [_row(e) for e in doc["entries"]]:
        raise bad(path, "does not match the pending marker of its transaction")
    return got


def ready(commit_doc: dict, path: Path) -> None:
    """Refuse, before the first rename, a committed transaction a rename would not finish:
    a temp that is not a file of its own (a symlink, a FIFO), or a path where something
    other than a file stands (a directory: the rename would fail half-way)."""
    for e in commit_doc["entries"]:
        tmp = kind(Path(e["tmp"]))
        if tmp is None:
            continue  # renamed before the kill
        if tmp != "a file":
            raise bad(path, f"names the temp {e['tmp']}, which is {tmp}, not a file patchkit wrote")
        there = kind(Path(e["path"]))
        if there not in (None, "a file"):
            raise bad(path, f"would rename a temp over {e['path']}, which is {there}")


def _row(e: dict) -> tuple:
    return e["path"], e["new"], e["old"]


def _why(doc: dict, home: Path, targets: frozenset[Path], commit: bool) -> str:
    """Why ``doc`` (found in ``home``/.patchkit) is not a record this run may act on, or ""."""
    missing = [k for k in KEYS if k not in doc]
    if missing:
        return f"is not a patchkit transaction record (no {', '.join(missing)})"
    if set(doc) - set(KEYS):
        return f"is not a patchkit transaction record (unknown key {sorted(set(doc) - set(KEYS))[0]})"
    if not isinstance(doc["id"], str) or not _ID.fullmatch(doc["id"]):
        return "id is not a patchkit transaction id"
    if doc["action"] not in ("apply", "revert"):
        return "action is neither apply nor revert"
    if not _strings(doc["recipes"]):
        return "recipes is not a list of recipe ids"
    roots = doc["roots"]
    if not _strings(roots) or not roots or len(set(roots)) != len(roots):
        return "roots is not a list of target directories"
    named = {str(t) for t in targets}
    for r in roots:
        if r not in named:
            return f"names root {r} which is not a target of this run"
    if str(home) not in roots:
        return f"lies in {home}, which is not one of its roots"
    if not isinstance(doc["primary"], str) or doc["primary"] not in roots:
        return f"names the primary root {doc['primary']!r}, which is not one of its roots"
    if commit and doc["primary"] != str(home):
        return f"is a commit record in {home}, which is not its primary root"
    journals = doc["journals"]
    if not isinstance(journals, dict):
        return "journals is not a table"
    for r, engines in journals.items():
        if r not in roots:
            return f"holds a journal for {r}, which is not one of its roots"
        why = shape_error(engines)
        if why:
            return f"holds a damaged journal for {r} ({why})"
    entries = doc["entries"]
    if not isinstance(entries, list) or len(entries) > MOST:
        return "entries is not a list of writes"
    want = {"path", "new", "old", "tmp"} if commit else {"path", "new", "old"}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) != want:
            return f"entry {i} is not a write ({', '.join(sorted(want))})"
        why = _entry(e, roots, commit)
        if why:
            return f"entry {i} {why}"
    return ""


def _strings(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


def _entry(e: dict, roots: list[str], commit: bool) -> str:
    if not isinstance(e["new"], str) or not _SHA.fullmatch(e["new"]):
        return "has no sha256 of its new bytes"
    if e["old"] is not None and (not isinstance(e["old"], str) or not _SHA.fullmatch(e["old"])):
        return "has no sha256 of its old bytes"
    p = e["path"]
    if not isinstance(p, str) or "\0" in p or not os.path.isabs(p) or os.path.normpath(p) != p:
        return f"names the path {p!r}, which is not absolute and normal"
    path = Path(p)
    if not any(Path(r) in path.parents for r in roots):
        return f"names {p}, which is outside every root it names"
    real = os.path.realpath(path.parent)
    if real != str(path.parent):
        return f"names {p}, whose directory leads to {real} through a symlink"
    if commit:
        tmp = e["tmp"]
        if not isinstance(tmp, str) or os.path.dirname(tmp) != str(path.parent):
            return f"names the temp {tmp!r}, which is not beside {p}"
        if not re.fullmatch(_TEMP.format(name=re.escape(path.name)), os.path.basename(tmp)):
            return f"names the temp {tmp}, which is not a patchkit temp file of {path.name}"
    return ""


@dataclass
class Interrupted:
    """A committed transaction that a kill stopped before it finished renaming."""

    action: str  # "apply" | "revert"
    recipes: tuple[str, ...]
    journal: Journal  # this root's journal as the transaction leaves it


def interrupted(root: Path, targets) -> Optional[Interrupted]:
    """The committed, unfinished transaction that touched ``root``, if a kill left one.
    ``targets``: every target root of this run (a record naming any other is refused).
    Reads only (status and the judge use it without a lock; the transaction finishes it)."""
    targets = frozenset(targets)
    doc = pending(root, targets)
    if doc is None or commit(doc, targets) is None:
        return None  # nothing, or a transaction that never committed: every file is as it was
    engines = doc["journals"].get(str(root), {})
    return Interrupted(doc["action"], tuple(doc["recipes"]), Journal(root, engines))
