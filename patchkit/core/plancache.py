"""Plan cache: `apply` or `revert` on inputs planned before, replayed without libcst.

A plan is a value (transaction.Commit: each file's new bytes, the RECORD rows, the
journal, the blobs, what ``check`` looked at, every input read) and so is what the
command prints (core/replay.Outcome).  This caches both, as JSON, under a key
made of everything the plan was made from: patchkit's code and the Python running it
(verdicts.code_hash, which covers the shipped engine table), every recipe file and user
engine definition (verdicts.key), the targets, the recipe names and the options that
change the plan.  The entry then names the bytes of every file the plan read (target files,
journals, RECORDs, patchkit's memory of RECORD) and the provenance the judge used, as the
verdict cache does; it is replayed only while each is byte-identical.

An entry is kept in patchkit's store (patchkit/base/store.py: authenticated, and read only
from a trusted cache) and is still input like any other: one that the store misses, is not
JSON, has the wrong shape (patchkit/base/shape.py), names a file
that is not one of the plan's own (a target file it read, a RECORD, patchkit's state in
the target), or whose splices do not give the bytes whose digest it records, is a miss,
planned again and replaced.  Under the lock, an entry becomes the Commit a fresh plan would
be (``commit_of``), which transaction.commit writes as it writes any: every input read
again first, one that changed since the lookup means the plan is made again, not replayed
(the policy is patchkit/core/replay.py's).  No marshal or pickle: the bytes a crafted entry holds are only ever data.

Standard library only, with patchkit's primitives: the replay never imports a parser.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from patchkit.base import regular, shape, store
from patchkit.core import verdicts
from patchkit.core.verdicts import digest_of, file_digest

FORMAT = 1
DIR = "plans"

# splices: [[start, end, base64 of the bytes put there]] on the bytes ``path`` holds now,
# checked item by item in _splices; or ``base``: the path of an earlier write whose new bytes
# these are (a blob holds what patchkit writes into a file: named, not copied)
WRITE = {"path": str, "old": shape.DIGEST, "new": str, "base": (str, None), "splices": [list]}
INDEX = {"paths": [str]}
MAX_PATHS = 4096  # files one invocation's plans read; more is not a plan patchkit made
COMMIT = {"roots": [str], "recipes": [str], "writes": [WRITE]}
REFUSALS = {"roots": [str], "files": [[str]], "records": [str]}
ENTRY = {
    "engines": [str],
    "inputs": {str: shape.DIGEST},
    "reals": {str: str},
    "trees": {str: str},
    "provenance": {str: shape.DIGEST},
    "refusals": REFUSALS,
    "commit": (COMMIT, None),
    "warnings": [str],
    "outcome": dict,  # core/replay.Outcome, checked there (OUTCOME)
}


@dataclass(frozen=True)
class Lookup:
    """One invocation's use of the cache: its key, the targets at hand, the provenance the
    judge will use as it stood before anything was read (what ``save`` records), and the
    entry found (None: a miss)."""

    key: str
    targets: dict
    provenance: Optional[dict]
    seen: dict  # every file the index names (what plans of this invocation read), by digest
    records: dict  # every RECORD, and patchkit's memory of RECORD, by digest, before the plan
    entry: Optional[dict]


def lookup(opts, command: str, options: dict) -> Optional[Lookup]:
    """The cache's answer for an `apply` or `revert` (``options``: JSON of those that change
    the plan), or None where it cannot serve (every recipe at hand, a target the full path
    must report on, a write to finish)."""
    targets = at_hand(opts)
    if targets is None:
        return None
    k = key(opts, command, targets, options)
    provenance = verdicts._provenance(targets)
    seen = {p: verdicts.input_digest(p) for p in _index(k)}
    entry = load(state_key(k, seen), targets, provenance) if provenance is not None and seen else None
    records = {}
    if entry is None:  # what a save records: read before the plan is made and written
        from patchkit.core.record import MEMORY

        for root in sorted({t.root for t in targets.values()}):
            for p in sorted(root.glob("*.dist-info/RECORD")) + [root / ".patchkit" / MEMORY]:
                records[str(p)] = file_digest(p)
    return Lookup(k, targets, provenance, seen, records, entry)


def key(opts, command: str, targets: dict, options: dict, code: Optional[str] = None) -> str:
    """The key of an `apply` or `revert`: verdicts.key (code, recipe files, names, targets)
    and the options that change the plan or what is printed of it (``options``: JSON)."""
    base = verdicts.key(opts.project.recipe_dirs, opts.names, targets, code=code)
    return digest_of(f"{base}|{command}|{json.dumps(options, sort_keys=True)}".encode())


def state_key(k: str, digests: dict) -> str:
    """The key of one plan of the invocation ``k``: with the bytes of every file its plans
    read (``digests``: path -> digest, None where nothing is), one entry per state of them
    (a tree before apply, the same tree applied)."""
    return digest_of(f"{k}|{json.dumps(sorted(digests.items()))}".encode())


def at_hand(opts) -> Optional[dict]:
    """The targets an invocation names, found as `status`'s cached path finds them (no recipe
    is loaded: that imports libcst); None when they cannot be (the full path says why)."""
    from patchkit.base.errors import PatchkitError
    from patchkit.base.target import ENGINES, STATE_DIR, TXN_PENDING
    from patchkit.core.project import engines_at_hand

    if not opts.names:  # every recipe at hand: which ones, only the catalog says
        return None
    try:
        targets = opts.project.targets(opts.targets, engines_at_hand(opts.project, opts.targets) or set(ENGINES))
    except PatchkitError:
        return None
    if any(t.root.joinpath(STATE_DIR, TXN_PENDING).exists() for t in targets.values()):
        return None  # a write to finish first: the full path recovers it
    return targets


# -- reading an entry ---------------------------------------------------------------------------


def _index(k: str) -> list[str]:
    """The files plans of the invocation ``k`` read: the target files its recipes name, the
    journals, the RECORDs (the catalog would tell, but loading it imports libcst)."""
    doc = store.get_json("plans/paths", k, INDEX, FORMAT)
    return doc["paths"][:MAX_PATHS] if doc is not None else []


def _entry(k: str) -> Optional[dict]:
    return store.get_json(DIR, k, ENTRY, FORMAT)


def load(k: str, targets: dict, provenance: dict) -> Optional[dict]:
    """The entry under ``k`` while every input it names is as it was, else None (a miss).
    ``provenance``: verdicts._provenance of ``targets`` now."""
    entry = _entry(k)
    if entry is None or any(e not in targets for e in entry["engines"]):
        return None
    mine = {e: targets[e] for e in entry["engines"]}
    if not _valid(entry, mine) or not unchanged(entry):
        return None
    for engine, fp in entry["trees"].items():
        if engine not in mine or verdicts.tree_state(mine[engine]) != fp:
            return None
    return entry if provenance == entry["provenance"] else None


def unchanged(entry: dict) -> bool:
    """Is every file the plan read byte-identical to what it was, and each target file
    still the file it was written through (not a link turned elsewhere)?"""
    for path, sha in entry["inputs"].items():
        if verdicts.input_digest(path) != sha:
            return False
    return all(os.path.realpath(p) == real for p, real in entry["reals"].items())


def _inside(path: str, roots: list[str]) -> bool:
    d = os.path.realpath(os.path.dirname(path))
    return any(d == r or d.startswith(r.rstrip("/") + "/") for r in roots)


def _valid(entry: dict, targets: dict) -> bool:
    """Does the entry name only what a plan of these targets reads and writes?  Each write
    is a target file the plan read, a RECORD, the journal, patchkit's memory of RECORD or a
    blob, inside a target root; what it checked is of these targets too."""
    roots = {str(t.root) for t in targets.values()}
    real_roots = [os.path.realpath(r) for r in roots]
    state = {f"{r}/.patchkit/{n}" for r in roots for n in ("journal.json", "record.json")}
    reals = set(entry["reals"].values())
    if not set(entry["reals"]) <= set(entry["inputs"]):
        return False
    r = entry["refusals"]
    if not set(r["roots"]) <= roots or any(len(f) != 2 or f[0] not in reals for f in r["files"]):
        return False
    if not all(_is_record(p, roots) for p in r["records"]):
        return False
    c = entry["commit"]
    if c is None:
        return True
    if not c["roots"] or not set(c["roots"]) <= set(r["roots"]):
        return False
    before: set[str] = set()  # a base is a write made earlier in the list
    for w in c["writes"]:
        p = w["path"]
        if (w["base"] is not None and w["base"] not in before) or p in before:
            return False
        before.add(p)
        if w["path"] not in entry["inputs"] or entry["inputs"][p] != w["old"] or _splices(w) is None:
            return False
        blob = os.path.dirname(p) in {f"{r}/.patchkit/written" for r in roots}
        if not (p in reals or p in state or _is_record(p, roots) or blob) or not _inside(p, real_roots):
            return False
    return True


def _is_record(p: str, roots: set[str]) -> bool:
    d, name = os.path.split(p)
    return name in ("RECORD", "record.json") and (
        os.path.dirname(d) in roots and d.endswith(".dist-info") or d in {f"{r}/.patchkit" for r in roots}
    )


def _splices(w: dict) -> Optional[list[tuple[int, int, bytes]]]:
    out, at = [], 0
    for s in w["splices"]:
        if not (len(s) == 3 and shape.fits(s[:2], [int]) and isinstance(s[2], str)):
            return None
        start, end = s[0], s[1]
        if not at <= start <= end:
            return None
        try:
            out.append((start, end, base64.b64decode(s[2], validate=True)))
        except (binascii.Error, ValueError):
            return None
        at = end
    return out


# -- the write under the lock ---------------------------------------------------------------------


def commit_of(entry: dict, targets: dict, action: str):
    """The entry's transaction.Commit, the value a fresh plan of these inputs freezes: each
    file it writes read now, its splices applied, and the result's digest checked against
    the entry's; the journals the transaction record names and the blobs kept, from the
    journal bytes it writes; what ``check`` looked at, and every input with its digest, for
    transaction.commit to read again.  None when the entry does not give the bytes it
    records, or a tree it swept or the provenance it used is not as it was (the plan is made
    again).  Call under the lock, with the entry's ``targets``."""
    from patchkit.base.journal import Journal, parse
    from patchkit.core import transaction

    for engine, fp in entry["trees"].items():
        if verdicts.tree_state(targets[engine]) != fp:
            return None
    if verdicts._provenance(targets) != entry["provenance"]:
        return None
    c = entry["commit"] or {"roots": [], "recipes": [], "writes": []}
    writes = []
    journals: dict[str, dict] = {}
    news: dict[str, bytes] = {}
    for w in c["writes"]:
        path = Path(w["path"])
        old = regular.read_file(path)
        new = news.get(w["base"]) if w["base"] is not None else _spliced(old or b"", _splices(w) or [])
        if new is None or digest_of(new) != w["new"]:
            return None
        if path.parent.name == "written" and path.name != transaction.sha256(new):
            return None  # a blob is named by its bytes' sha256
        if path.name == "journal.json":
            engines, why = parse(new)
            if why:
                return None
            journals[str(path.parent.parent)] = engines
        news[w["path"]] = new
        writes.append(transaction.Write(path, new, old))
    if set(journals) != set(c["roots"]):  # every root written into has its journal written
        return None
    keep = {
        Path(r): frozenset(f["sha256"] for e in eng.values() for f in e.get("files", {}).values())
        for r, eng in journals.items()
    }
    r = entry["refusals"]
    refusals = transaction.Refusals(
        tuple(Path(p) for p in r["roots"]),
        tuple((Path(real), where) for real, where in r["files"]),
        tuple(Path(p) for p in r["records"]),
    )
    loaded = {t.root: Journal.load(t.root) for t in targets.values()}
    beside = transaction._beside([Path(p) for p in entry["reals"].values()], targets, lambda e: loaded[targets[e].root])
    return transaction.Commit(
        action,
        tuple(writes),
        tuple(Path(r) for r in sorted(c["roots"])),
        tuple(c["recipes"]),
        journals,
        keep,
        refusals,
        tuple(sorted(entry["inputs"].items())),
        tuple(sorted(entry["reals"].items())),
        tuple(sorted(loaded)),
        frozenset(beside),
    )


def _spliced(old: bytes, splices: list) -> Optional[bytes]:
    parts, at = [], 0
    for start, end, data in splices:
        if end > len(old):
            return None
        parts += [old[at:start], data]
        at = end
    parts.append(old[at:])
    return b"".join(parts)


# -- saving -------------------------------------------------------------------------------------


RESYNC = 64  # lines looked ahead, on each side, for where two versions agree again


def splice(old: Optional[bytes], new: bytes) -> list:
    """``new`` as splices of ``old``, by lines: from where they first differ, the lines of
    ``new`` until both agree again for three lines (looked for RESYNC lines ahead; past
    that, the rest is one splice).  The equal stretches are found by comparing bytes
    (binary search, C speed), so a cold apply pays well under a millisecond for it; any
    choice of where they agree again gives ``new`` back exactly."""
    if old is None:
        return [[0, 0, base64.b64encode(new).decode()]]
    out: list = []
    i = j = 0
    while True:
        n = _common(old, i, new, j)
        if i + n == len(old) and j + n == len(new):
            return out
        start = max(old.rfind(b"\n", i, i + n) + 1, i)  # the line the difference is in
        i, j = start, j + (start - i)
        a, b = _lines(old, i), _lines(new, j)
        hit = next(((x, d - x) for d in range(1, RESYNC) for x in range(d + 1) if _agree(a, x, b, d - x)), None)
        if hit is None:
            out.append([i, len(old), base64.b64encode(new[j:]).decode()])
            return out
        x, y = (sum(map(len, a[: hit[0]])), sum(map(len, b[: hit[1]])))
        out.append([i, i + x, base64.b64encode(new[j : j + y]).decode()])
        i, j = i + x, j + y


def _common(a: bytes, i: int, b: bytes, j: int) -> int:
    """The length of the common prefix of a[i:] and b[j:] (slices of bytes compare with
    memcmp; a memoryview's would compare item by item)."""
    lo, hi = 0, min(len(a) - i, len(b) - j)
    if a[i : i + hi] == b[j : j + hi]:
        return hi
    while hi - lo > 1:  # a prefix of lo bytes is common, one of hi is not
        mid = (lo + hi) // 2
        if a[i : i + mid] == b[j : j + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _lines(data: bytes, at: int) -> list[bytes]:
    """The first RESYNC + 3 whole lines of data[at:] (fewer at its end), newlines kept."""
    parts = data[at:].split(b"\n", RESYNC + 3)
    whole = [p + b"\n" for p in parts[:-1]]
    if len(parts) <= RESYNC + 3 and parts[-1]:
        whole.append(parts[-1])  # the last line, with no newline
    return whole


def _agree(a: list, x: int, b: list, y: int) -> bool:
    return x < len(a) and y < len(b) and a[x : x + 3] == b[y : y + 3]


def save(look: Lookup, engines: list[str], commit, trees: dict, warnings: list[str], outcome: dict) -> None:
    """Cache a plan made (and written) by the full path, under ``look``'s key: its
    transaction.Commit, made for the targets of ``engines`` (``trees``: the fingerprints of
    the trees its judge swept).  The caller (patchkit/core/replay.py) checks that it may be
    cached."""
    if look.provenance is None:
        return
    inputs: dict[str, Optional[str]] = dict(commit.inputs)
    roots = {str(r) for r in commit.targets}
    inputs.update((p, sha) for p, sha in look.records.items() if any(p.startswith(r + "/") for r in roots))
    writes = []
    ws = commit.writes
    for n, w in enumerate(ws):
        if inputs.get(str(w.path), "") != (digest_of(w.old) if w.old is not None else None):
            return  # read as one thing, written over another: nothing to replay
        # a blob holds what a file of this write gets: named, not copied
        base = next((str(o.path) for o in ws[:n] if w.old is None and o.new == w.new), None)
        splices = [] if base is not None else splice(w.old, w.new)
        new = digest_of(w.new)
        writes.append({"path": str(w.path), "old": inputs[str(w.path)], "new": new, "base": base, "splices": splices})
    paths = sorted(set(look.seen) | set(inputs))
    if len(paths) > MAX_PATHS:
        return
    k = state_key(look.key, {p: inputs[p] if p in inputs else look.seen[p] for p in paths})
    refusals = commit.refusals
    entry = {
        "engines": list(engines),
        "inputs": inputs,
        "reals": dict(commit.reals),
        "trees": dict(trees),
        "provenance": look.provenance,
        "refusals": {
            "roots": [str(r) for r in refusals.roots],
            "files": [[str(real), where] for real, where in refusals.files],
            "records": [str(p) for p in refusals.records],
        },
        "commit": None
        if not ws
        else {"roots": [str(r) for r in commit.roots], "recipes": list(commit.recipes), "writes": writes},
        "warnings": warnings,
        "outcome": outcome,
    }
    store.put_json(DIR, k, entry, FORMAT)
    if paths != sorted(look.seen):
        store.put_json("plans/paths", look.key, {"paths": paths}, FORMAT)
