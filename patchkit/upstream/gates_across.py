"""`patchkit gates --across ENGINE==A..B`: which device gates appeared, closed, opened or went
away from one release of a range to the next (issue 31).

Each release is scanned by patchkit/upstream/gates.py (its closed and unknown gates, cached
per release in patchkit's cache, so a repeat scans nothing).  A gate is the same gate in two
releases by its identity: the logical file, the enclosing function and the condition as
written (blanks aside), never by its line.  A gate whose file is not in the other release is
followed to its new file by its function and condition where that pair is unique in both
releases; otherwise it is a disappearance and an appearance, never a guess.

What the scan does not report (a gate read open for the device) is found by reading the
release's file: the condition as written, or widened (an ``or`` operand or a list element
added), standing in the same function outside any gate the scan reports.  Between two
releases, for each gate:

- ``appeared``: closed in the later release, and not in the earlier one as written;
- ``closed``: closed in the later release, where the earlier one had it open (or unknown);
- ``opened``: closed in the earlier release; the later one still has it (or a widening of
  it) in the same function, and does not read it closed;
- ``undecided``: closed in the earlier release, unknown in the later one;
- ``gone``: closed in the earlier release, and not in the later one as written (removed or
  rewritten; its file may be gone);
- ``moved``: its file moved (matched as above); its state is compared as for any gate.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from patchkit.base import regular, store
from patchkit.core.goals.device import Device
from patchkit.upstream import gates as G

Key = tuple  # (file, function, condition)
CHANGES = ("appeared", "closed", "opened", "undecided", "gone", "moved")

_GATE = {"path": str, "file": str, "line": int, "kind": str, "condition": str, "why": str, "function": str}
SCAN = {
    "closed": [_GATE],
    "unknown": [_GATE],
    "files": int,
    "parsed": int,
    "vendored_skipped": int,
    "cpp": bool,
    "errors": [str],
    "layout": str,
}


# -- one release's scan, cached -------------------------------------------------------------------


def scan_key(engine: str, version: str, device: Device, compare: Device, vendored: bool, only) -> str:
    """What a release's scan is a function of: the release, both devices, the options, the
    engine's definition in effect (its predicates and layouts: a project may define its own),
    the scanner's source and the evaluator's (code_hash: patchkit/core)."""
    from patchkit.base.engines import ENGINES
    from patchkit.core.goals import cppeval
    from patchkit.core.verdicts import code_hash

    info = ENGINES[engine]
    scanner = hashlib.sha256(Path(G.__file__).read_bytes()).hexdigest()
    h = hashlib.sha256(
        json.dumps(
            [
                "gates",
                code_hash(),
                scanner,
                repr((info.predicates, sorted(info.layouts.items()))),
                engine,
                version,
                device.spec,  # 12.0, or 12.0@cuda12.9: the toolkit decides CMake branches
                compare.spec,
                vendored,
                cppeval.available(),
                sorted(only) if only is not None else None,
            ]
        ).encode()
    )
    return h.hexdigest()[:24]


def _cached(key: str) -> Optional[dict]:
    """A release's cached scan, or None: nothing there, unreadable, not JSON or not the shape
    ``scan_release`` writes (scanned again, and replaced)."""

    return store.get_json("gates/across", key, SCAN)


SITES = {"sites": [{"file": str, "function": str, "condition": str, "kind": str, "lines": [int]}]}


def _sites_key(scan_key: str) -> str:
    """A release's open sites are a function of its scan and of this module's reading."""
    mine = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return hashlib.sha256(f"{scan_key}:{mine}".encode()).hexdigest()[:24]


def load_sites(scan_key: str) -> dict:

    got = store.get_json("gates/sites", _sites_key(scan_key), SITES)
    if got is None:
        return {}
    return {(s["file"], s["function"], s["condition"], s["kind"]): s["lines"] for s in got["sites"]}


def store_sites(scan_key: str, sites: dict) -> None:

    rows = [{"file": f, "function": fn, "condition": c, "kind": k, "lines": v} for (f, fn, c, k), v in sites.items()]
    store.put_json("gates/sites", _sites_key(scan_key), {"sites": rows})


def scan_release(
    engine: str,
    version: str,
    root: Path,
    device: Device,
    compare: Device,
    vendored: bool = False,
    jobs: int = 0,
    only: Optional[set] = None,
) -> tuple[dict, bool]:
    """The scan of the release unpacked at ``root`` as JSON, and whether it came from the cache."""
    from patchkit.base.target import open_target

    key = scan_key(engine, version, device, compare, vendored, only)
    hit = _cached(key)
    if hit is not None:
        return hit, True
    t = open_target(engine, root)
    res = G.scan(engine, t.root, t.layout, version, device, compare, vendored=vendored, jobs=jobs, only=only)
    doc = {
        "closed": [g.to_json() for g in res.closed],
        "unknown": [g.to_json() for g in res.unknown],
        "files": res.files,
        "parsed": res.parsed,
        "vendored_skipped": res.vendored_skipped,
        "cpp": res.cpp,
        "errors": list(res.errors),
        "layout": t.layout,
    }
    store.put_json("gates/across", key, doc)
    return doc, False


# -- where a gate stands in a release's file --------------------------------------------------------


def _flat(s: str) -> str:
    return "".join(s.split())


_KEYWORD = re.compile(r"^([A-Za-z_]\w*)=(?!=)(.*)$", re.S)


@dataclass(frozen=True)
class _Cond:
    """A gate's condition, read for matching: its flat text, the keyword of an arch list
    given as an argument, its words (what the file must hold), and its parse (Python) or its
    top-level ``&&`` operands (C++)."""

    flat: str
    keyword: str = ""
    words: tuple = ()
    node: Optional[ast.expr] = field(default=None, compare=False)
    lines: tuple = ()  # the condition's text, for the flat text of its parts
    conjuncts: tuple = ()  # C++: the flat operands of its top-level &&

    @classmethod
    def of(cls, condition: str, kind: str, python: bool) -> "_Cond":
        text, kw = condition.strip(), ""
        m = _KEYWORD.match(text) if kind == "arch-list" else None
        if m:
            kw, text = m.group(1), m.group(2).strip()
        if not python:
            conj = _conjuncts(_flat(text))
            return cls(_flat(text), kw, conj, conjuncts=conj)
        try:
            node = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            node = None
        lines = tuple(text.splitlines(keepends=True))
        words = tuple(_flat(_segment(list(lines), n)) for n in _leaves(node)) if node is not None else ()
        return cls(_flat(text), kw, words or (_flat(text),), node, lines)

    def part(self, n) -> str:
        return _flat(_segment(list(self.lines), n))


def _leaves(node) -> list:
    """The operands of a condition's and/or and the elements of its lists, recursively."""
    if isinstance(node, ast.BoolOp):
        return [x for v in node.values for x in _leaves(v)]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return list(node.elts)
    return [node]


def _conjuncts(flat: str) -> tuple:
    """The top-level ``&&`` operands of a flat C++ condition (outer parentheses dropped)."""
    while flat.startswith("(") and _closing(flat, 0) == len(flat) - 1:
        flat = flat[1:-1]
    out, depth, start = [], 0, 0
    i = 0
    while i < len(flat):
        ch = flat[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and flat.startswith("&&", i):
            out.append(flat[start:i])
            start = i + 2
            i += 1
        i += 1
    out.append(flat[start:])
    return tuple(out)


def _closing(s: str, i: int) -> int:
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j
    return -1


def _segment(lines: list, node) -> str:
    chunk = lines[node.lineno - 1 : node.end_lineno]
    if not chunk:
        return ""
    raw = [ln.encode() for ln in chunk]
    if len(raw) == 1:
        raw[0] = raw[0][node.col_offset : node.end_col_offset]
    else:
        raw[0] = raw[0][node.col_offset :]
        raw[-1] = raw[-1][: node.end_col_offset]
    return b"".join(raw).decode(errors="replace")


# Expressions whose parts the scan does not read as gates (a comparison or a value is the gate
# or none; an f-string, a lambda): a condition standing inside one is no site of a gate.
_OPAQUE = (
    ast.Compare,
    ast.BinOp,
    ast.Subscript,
    ast.Attribute,
    ast.Name,
    ast.NamedExpr,
    ast.JoinedStr,
    ast.Lambda,
    ast.Constant,
)


class _PyFile:
    """A Python file's expressions by enclosing function (the scanner's names: classes and
    functions joined by dots, "" at module level)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines(keepends=True)
        self._flat: dict[int, str] = {}
        self._scopes: dict[str, list] = {}
        tree = ast.parse(text)
        self.bodies: dict[str, list] = {"": [tree.body]}  # qualname -> the bodies of its definitions
        self._defs(tree.body, "")

    def _defs(self, body: list, name: str) -> None:
        """Every function and class by qualname, walking statements only (cheap)."""
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{name}.{st.name}" if name else st.name
                self.bodies.setdefault(inner, []).append(st.body)
                self._defs(st.body, inner)
                continue
            for c in ast.iter_child_nodes(st):
                if isinstance(c, ast.stmt):
                    self._defs([c], name)
                elif isinstance(getattr(c, "body", None), list):  # an except handler, a match case
                    self._defs(c.body, name)

    def scope(self, name: str) -> list:
        """The expressions (and keywords) of one function's body, not of the functions and
        classes inside it."""
        got = self._scopes.get(name)
        if got is None:
            got = self._scopes[name] = []
            stack = [st for body in self.bodies.get(name, []) for st in reversed(body)]
            while stack:
                n = stack.pop()
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue  # its own scope; its decorators, defaults and bases the scan does not read
                if isinstance(n, (ast.expr, ast.keyword)):
                    got.append(n)
                if isinstance(n, _OPAQUE):
                    continue  # its parts are read as no gate (as the scan reads them): no site either
                stack.extend(reversed(list(ast.iter_child_nodes(n))))
        return got

    def flat(self, node) -> str:
        got = self._flat.get(id(node))
        if got is None:
            target = node.value if isinstance(node, ast.keyword) else node
            got = self._flat[id(node)] = _flat(_segment(self.lines, target))
        return got

    def _is(self, node, cond: _Cond, widened: bool) -> bool:
        if cond.keyword:
            if not (isinstance(node, ast.keyword) and node.arg == cond.keyword):
                return False
            value = node.value
        else:
            if isinstance(node, ast.keyword):
                return False
            value = node
        if self.flat(node) == cond.flat:
            return True
        return widened and cond.node is not None and self._widens(value, cond.node, cond)

    def _widens(self, b, a, cond: _Cond) -> bool:
        """``b`` (in the file) is ``a`` (the condition) as written, or widened: an ``or``
        with operands added, a list with elements added, an ``and`` whose operands each are
        or widen ``a``'s, in order."""
        if self.flat(b) == cond.part(a):
            return True
        if isinstance(a, ast.BoolOp) and isinstance(b, ast.BoolOp) and type(a.op) is type(b.op):
            if isinstance(a.op, ast.Or):
                have = Counter(self.flat(x) for x in b.values)
                return len(b.values) > len(a.values) and not (Counter(cond.part(x) for x in a.values) - have)
            return len(a.values) == len(b.values) and all(
                self._widens(y, x, cond) for x, y in zip(a.values, b.values, strict=True)
            )
        if not isinstance(a, ast.BoolOp) and isinstance(b, ast.BoolOp) and isinstance(b.op, ast.Or):
            return any(self.flat(x) == cond.part(a) for x in b.values)  # an operand added beside it
        if isinstance(a, (ast.List, ast.Tuple, ast.Set)) and type(a) is type(b):
            have = Counter(self.flat(x) for x in b.elts)
            return len(b.elts) > len(a.elts) and not (Counter(cond.part(x) for x in a.elts) - have)
        return False

    def open_sites(self, function: str, cond: _Cond, reported: list[tuple[int, _Cond]]) -> list[int]:
        """The lines where ``cond`` (or a widening of it) stands in ``function`` outside every
        gate the scan reported there (``reported``: (line, condition))."""
        nodes = self.scope(function)
        spans = []
        for line, rc in reported:
            for n in nodes:
                if n.lineno == line and self._is(n, rc, False):
                    spans.append(_span(n))
        found = [_span(n) for n in nodes if self._is(n, cond, True) and not any(_inside(_span(n), s) for s in spans)]
        # one site, once: an operand that is the gate, inside the `or` that widens it, is that `or`
        return sorted(f[0] for f in found if not any(g != f and _inside(f, g) for g in found))


def _span(n) -> tuple:
    return (n.lineno, n.col_offset, n.end_lineno, n.end_col_offset)


def _inside(a: tuple, b: tuple) -> bool:
    return (b[0], b[1]) <= (a[0], a[1]) and (a[2], a[3]) <= (b[2], b[3])


def _has(hay: str, needle: str) -> bool:
    """``needle`` in ``hay`` (both flat), not inside a longer name or number."""
    start = 0
    while True:
        i = hay.find(needle, start)
        if i < 0:
            return False
        before = hay[i - 1] if i else ""
        after = hay[i + len(needle)] if i + len(needle) < len(hay) else ""
        word = needle[:1].isalnum() or needle[:1] == "_"
        tail = needle[-1:].isalnum() or needle[-1:] == "_"
        if not (word and (before.isalnum() or before == "_")) and not (tail and (after.isalnum() or after == "_")):
            return True
        start = i + 1


def _bound_dropped(text: str, cond: _Cond) -> bool:
    """A directive that is the condition with one or more ``__CUDA_ARCH__`` bounds of its
    top-level ``&&`` dropped (``... && (__CUDA_ARCH__ < 1200)`` removed), the rest as written
    and in order, still comparing __CUDA_ARCH__."""
    have, was = _conjuncts(text), cond.conjuncts
    if not (0 < len(have) < len(was)):
        return False
    it = iter(was)
    dropped = []
    for c in have:
        for w in it:
            if w == c:
                break
            dropped.append(w)
        else:
            return False
    dropped += list(it)
    arch = re.compile(r"__CUDA_ARCH__(?:[<>=!]=?)|(?:[<>=!]=?)__CUDA_ARCH__")
    return all(arch.search(d) for d in dropped) and any(arch.search(c) for c in have)


class _CppFile:
    """A C/C++/CUDA file's ``#if``/``#elif`` lines over __CUDA_ARCH__, and their functions;
    and its run-time capability checks (cppgates.sites), read where a run-time gate is looked for."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.directives = [(line, _flat(cond)) for line, _, cond in G._directives(text)]
        self._functions: Optional[dict[int, str]] = None
        self._runtime: Optional[list[tuple[int, str, str]]] = None

    def runtime(self) -> list[tuple[int, str, str]]:
        """(line, function, flat condition) of each run-time site that reads the capability."""
        if self._runtime is None:
            from patchkit.core.goals import cppeval
            from patchkit.upstream import cppgates

            parser = cppeval._parser()
            data = self.text.encode()
            got = cppgates.sites(data, parser.parse(data).root_node) if parser is not None else []
            self._runtime = [(line, fn, _flat(cond)) for line, _, fn, cond in got]
        return self._runtime

    def open_runtime(self, function: str, cond: _Cond, reported: list[tuple[int, _Cond]]) -> list[int]:
        """Lines of the run-time checks of ``function`` that hold the condition as written or
        widened (``major == 10`` in ``major == 10 || major == 12``), not reported there."""
        out = []
        for line, fn, text in self.runtime():
            if fn != function or not _has(text, cond.flat):
                continue
            if any(rl == line and _has(rc.flat, cond.flat) for rl, rc in reported):
                continue
            out.append(line)
        return out

    def function_at(self, line: int) -> str:
        if self._functions is None:
            from patchkit.core.goals import cppeval

            rows = [{"line": ln} for ln, _ in self.directives]
            parser = cppeval._parser()
            if parser is not None and rows:
                G._cpp_context(parser.parse(self.text.encode()), rows)
            self._functions = {r["line"]: r.get("function", "") for r in rows}
        return self._functions.get(line, "")

    def open_sites(self, function: str, cond: _Cond, reported: list[tuple[int, _Cond]]) -> list[int]:
        out = []
        for line, text in self.directives:
            if not (_has(text, cond.flat) or _bound_dropped(text, cond)) or self.function_at(line) != function:
                continue
            if any(rl == line and _has(rc.flat, cond.flat) for rl, rc in reported):
                continue  # the scan reports a gate holding it on this line
            out.append(line)
        return out


# -- the range ----------------------------------------------------------------------------------


@dataclass
class Release:
    version: str
    root: Path
    scan: dict
    cached: bool
    seconds: float
    files: dict[str, str]  # logical name -> path relative to the root, every file of the tree
    reported: dict[Key, dict[str, list]] = field(default_factory=dict)  # key -> {"closed": [...], "unknown": [...]}
    by_file: dict[str, list] = field(default_factory=dict)  # logical file -> its reported gates
    key: str = ""  # its scan's cache key: its sites are cached beside it
    sites: dict = field(default_factory=dict)  # (file, function, condition, kind) -> open lines, as cached
    new_sites: bool = False
    shared: dict = field(default_factory=dict)  # across releases: a file's parse and sites, by its text's digest
    _text: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for state in ("closed", "unknown"):
            for g in self.scan[state]:
                self.reported.setdefault(key_of(g), {"closed": [], "unknown": []})[state].append(g)
                self.by_file.setdefault(g["file"], []).append(g)

    def text(self, logical: str) -> Optional[str]:
        if logical not in self._text:
            rel = self.files.get(logical)
            data = regular.read_file(self.root / rel) if rel else None
            self._text[logical] = data.decode("utf-8", errors="replace") if data is not None else None
        return self._text[logical]

    def parsed(self, logical: str, digest: str):
        if ("parse", digest) not in self.shared:
            text = self.text(logical)
            got = None
            if text is not None:
                if logical.endswith(G.PY_SUFFIXES):
                    try:
                        got = _PyFile(text)
                    except (SyntaxError, ValueError, RecursionError, MemoryError):
                        got = None
                elif logical.endswith(G.CPP_SUFFIXES):
                    got = _CppFile(text)
            self.shared[("parse", digest)] = got
        return self.shared[("parse", digest)]

    def open_sites(self, key: Key, kind: str) -> list[int]:
        """Lines where the gate ``key`` stands in this release without being read closed or
        unknown ([] where its file or its condition is not here): from the cache, else
        found, once per file text (a file unchanged between releases is read once; the scan
        of a file is a function of its text)."""
        k = (*key, kind)
        if k not in self.sites:
            text = self.text(key[0])
            digest = hashlib.sha256(text.encode()).hexdigest() if text is not None else ""
            if ("sites", digest, k) not in self.shared:
                self.shared[("sites", digest, k)] = self._open_sites(key, kind, digest) if text is not None else []
            self.sites[k] = self.shared[("sites", digest, k)]
            self.new_sites = True
        return self.sites[k]

    def _open_sites(self, key: Key, kind: str, digest: str) -> list[int]:
        file, function, condition = key
        python = file.endswith(G.PY_SUFFIXES)
        cond = _Cond.of(condition, kind, python)
        text = self.text(file)
        if text is None:
            return []
        flat = _flat(text)
        if not (all(a in flat for a in cond.words) if python else any(_has(flat, a) for a in cond.words)):
            return []  # the file lacks what a site of it must hold: nothing to parse
        f = self.parsed(file, digest)
        if f is None:
            return []
        reported = [
            (g["line"], _Cond.of(g["condition"], g["kind"], python))
            for g in self.by_file.get(file, [])
            if g["function"] == function
        ]
        if not python and not kind.startswith("#"):  # a run-time check (cppgates.py)
            return f.open_runtime(function, cond, reported)
        return f.open_sites(function, cond, reported)


def key_of(g: dict) -> Key:
    return (g["file"], g["function"], g["condition"])


@dataclass
class Row:
    """One gate followed across the range: its key from a release on (a moved file starts a
    new key), and its cells."""

    keys: list  # [(from index, key)], ascending
    kind: str = ""  # the gate's kind, as the newest release that reports it reads it
    cells: list = field(default_factory=list)

    def key_at(self, i: int) -> Key:
        k = self.keys[0][1]
        for start, key in self.keys:
            if start <= i:
                k = key
        return k


def _moves(a: Release, b: Release) -> list[tuple[Key, Key]]:
    """(key in a, key in b) of each gate whose file moved: a's file is not in b, b's file not
    in a, and the function (named) and condition are those of exactly one gate in each."""
    fc_a = Counter((k[1], k[2]) for k in a.reported)
    fc_b = Counter((k[1], k[2]) for k in b.reported)
    left = {}
    for k in a.reported:
        if k[0] not in b.files and k[1] and fc_a[(k[1], k[2])] == 1:
            left[(k[1], k[2])] = k
    out = []
    for k in b.reported:
        fc = (k[1], k[2])
        if k[0] not in a.files and k[1] and fc_b[fc] == 1 and fc in left:
            out.append((left[fc], k))
    return out


def _rows(releases: list[Release]) -> list[Row]:
    """Every gate closed in some release of the range, followed across moves."""
    rows: dict[Key, Row] = {}
    seen: dict[Key, list[int]] = {}
    for i, r in enumerate(releases):
        for k in r.reported:
            seen.setdefault(k, []).append(i)
            rows.setdefault(k, Row([(0, k)]))
    for i in range(1, len(releases)):
        for ka, kb in _moves(releases[i - 1], releases[i]):
            ra, rb = rows[ka], rows[kb]
            if ra is rb or ra.keys[-1][1] != ka or len(rb.keys) != 1:
                continue
            # the old key is reported up to i-1 only, the new one from i on: one gate, moved
            if max(seen[ka]) >= i or min(seen[kb]) < i:
                continue
            ra.keys.append((i, kb))
            rows[kb] = ra
    out, done = [], set()
    for row in rows.values():
        if id(row) in done:
            continue
        done.add(id(row))
        if any(releases[i].reported.get(row.key_at(i), {}).get("closed") for i in range(len(releases))):
            out.append(row)
    return out


def _cell(r: Release, key: Key, kind: str) -> dict:
    got = r.reported.get(key, {"closed": [], "unknown": []})
    closed, unknown = got["closed"], got["unknown"]
    there = key[0] in r.files
    open_lines = r.open_sites(key, kind) if there else []
    state = "closed" if closed else "unknown" if unknown else "open" if open_lines else "none"
    first = (closed or unknown or [None])[0]
    cell = {
        "state": state,
        "closed": len(closed),
        "unknown": len(unknown),
        "open": len(open_lines),
        "path": r.files.get(key[0], first["path"] if first else ""),
        "lines": sorted(g["line"] for g in closed) or sorted(g["line"] for g in unknown) or open_lines,
        "open_lines": open_lines,
    }
    if first:
        cell["kind"] = first["kind"]
        cell["why"] = first["why"]
        if first.get("guards"):
            cell["guards"] = first["guards"]
    elif state == "open":
        cell["why"] = f"stands in {key[1] or 'the module'} and is not read closed"
    else:
        cell["why"] = (
            "its file is not in this release"
            if not there
            else f"not in {key[1] or 'the module'} as written (removed or rewritten)"
        )
    return cell


def _changes(row: Row, versions: list[str]) -> list[dict]:
    """What changed for one gate between each release and the next (drift's pairs)."""
    out = []
    for i in range(1, len(versions)):
        a, b = row.cells[i - 1], row.cells[i]
        ka, kb = row.key_at(i - 1), row.key_at(i)
        base = {"from": versions[i - 1], "to": versions[i], "file": kb[0], "function": kb[1], "condition": kb[2]}
        if ka != kb:
            moved = {"change": "moved", "from_file": ka[0], "before": a["state"], "after": b["state"]}
            out.append({**base, **moved, "count": max(a["closed"], 1), "lines": b["lines"], "path": b["path"],
                        "why": f"its file moved from {ka[0]}", "exact": True})  # fmt: skip
        dc = b["closed"] - a["closed"]
        if dc < 0:
            lost = -dc
            undecided = min(lost, max(b["unknown"] - a["unknown"], 0))
            opened = min(lost - undecided, max(b["open"] - a["open"], 0))
            gone = lost - undecided - opened
            split = sum(1 for n in (undecided, opened, gone) if n) > 1
            for change, n in (("undecided", undecided), ("opened", opened), ("gone", gone)):
                if not n:
                    continue
                where = {
                    "undecided": f"unknown at {b['path']}:{_lines(b['lines'])}: {b.get('why', '')}",
                    "opened": f"still stands at {b['path']}:{_lines(b['open_lines'])} "
                    "(as written or widened), not closed",
                    "gone": b["why"],
                }[change]
                after = {"undecided": "unknown", "opened": "open", "gone": "none"}[change]
                out.append({**base, "file": ka[0], "function": ka[1], "condition": ka[2], "change": change,
                            "before": "closed", "after": after, "count": n, "lines": a["lines"], "path": a["path"],
                            "why": where,
                            "exact": not split and n == len(a["lines"])})  # fmt: skip
        elif dc > 0:
            from_unknown = min(dc, max(a["unknown"] - b["unknown"], 0))
            from_open = min(dc - from_unknown, max(a["open"] - b["open"], 0))
            appeared = dc - from_unknown - from_open
            split = sum(1 for n in (from_unknown, from_open, appeared) if n) > 1
            for change, before, n in (("closed", "unknown", from_unknown), ("closed", "open", from_open),
                                      ("appeared", "none", appeared)):  # fmt: skip
                if not n:
                    continue
                out.append({**base, "change": change, "before": before, "after": "closed", "count": n,
                            "lines": b["lines"], "path": b["path"], "why": b.get("why", ""),
                            "exact": not split and n == len(b["lines"])})  # fmt: skip
    return out


def _lines(lines: list) -> str:
    return ",".join(str(x) for x in lines) if lines else "?"


@dataclass
class Across:
    engine: str
    device: Device
    compare: Device
    versions: list[str]
    releases: list[Release]
    rows: list[Row]
    changes: list[dict]


def across(
    engine: str,
    versions: list[str],
    device: Device,
    compare: Device,
    tree: Callable[[str], Path],
    vendored: bool = False,
    jobs: int = 0,
    only: Optional[set] = None,
    say: Callable[[str], None] = lambda s: None,
) -> Across:
    """Scan each release (``tree(version)`` unpacks it), follow every gate closed in one of
    them across the range, and list what changed between consecutive releases."""
    from patchkit.base.progress import working
    from patchkit.base.target import open_target

    releases: list[Release] = []
    shared: dict = {}
    for n, v in enumerate(versions, 1):
        root = tree(v)
        t0 = time.monotonic()
        with working(f"scanning {engine} {v} ({n}/{len(versions)})"):
            doc, hit = scan_release(engine, v, root, device, compare, vendored, jobs, only)
            layout = doc["layout"] or open_target(engine, root).layout
            files = {logical: rel for rel, logical in G._files(Path(root), engine, layout)}
        dt = time.monotonic() - t0
        say(f"{engine} {v}: {len(doc['closed'])} closed, {len(doc['unknown'])} unknown "
            f"({'from the cache' if hit else f'scanned in {dt:.1f} s'}; {n}/{len(versions)})")  # fmt: skip
        key = scan_key(engine, v, device, compare, vendored, only)
        releases.append(Release(v, Path(root), doc, hit, dt, files, key=key, sites=load_sites(key), shared=shared))
    with working(f"following the gates across {len(versions)} {engine} releases"):
        rows = _rows(releases)
        changes = []
        for row in rows:
            kinds = [
                g["kind"] for i, r in enumerate(releases) for g in r.reported.get(row.key_at(i), {}).get("closed", ())
            ]
            row.kind = kinds[-1] if kinds else ""
            row.cells = [_cell(r, row.key_at(i), row.kind) for i, r in enumerate(releases)]
            changes += _changes(row, versions)
    for r in releases:
        if r.new_sites:
            store_sites(r.key, r.sites)
    order = {v: i for i, v in enumerate(versions)}
    rows.sort(key=lambda r: (r.key_at(len(versions) - 1)[0], r.key_at(len(versions) - 1)[1], _first_line(r)))
    changes.sort(key=lambda c: (order[c["to"]], CHANGES.index(c["change"]), c["file"], c["function"], c["lines"]))
    return Across(engine, device, compare, list(versions), releases, rows, changes)


def _first_line(row: Row) -> int:
    for c in reversed(row.cells):
        if c["lines"]:
            return c["lines"][0]
    return 0


def pairing_lines(res: Across, with_: dict) -> list[str]:
    """One line per engine the ranged one requires (drift's pairing): which of its releases
    each release requires, and the --across that scans them (this one does not)."""
    out = []
    for e in sorted({e for v in res.versions for e in with_.get(v, {})}):
        by: dict[str, list[str]] = {}
        for v in res.versions:
            if e in with_.get(v, {}):
                by.setdefault(with_[v][e]["version"], []).append(v)
        listed = ", ".join(f"{x} ({', '.join(vs)})" for x, vs in by.items())
        ends = sorted(by, key=_version)
        span = f"{ends[0]}..{ends[-1]}" if len(ends) > 1 else f"{ends[0]}..{ends[0]}"
        scan = (
            f"patchkit gates --device {res.device} --across {e}=={span}"
            if len(ends) > 1
            else f"patchkit gates --device {res.device} --to {e}=={ends[0]}"
        )
        out.append(
            f"{e}: the release each {res.engine} release requires (its Requires-Dist): {listed}; "
            f"not scanned here: {scan}"
        )
    return out


def _version(v: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v), v)
    except InvalidVersion:
        return (1, None, v)


def document(res: Across, spec: str, with_: Optional[dict] = None) -> dict:
    """The --json document."""
    counts: dict[str, Counter] = {v: Counter() for v in res.versions}
    for c in res.changes:
        counts[c["to"]][c["change"]] += c["count"]  # gates, not records (one per identity)
    return {
        "command": "gates",
        "across": spec,
        "engine": res.engine,
        "device": str(res.device),
        "compare": str(res.compare),
        "versions": res.versions,
        "releases": {
            r.version: {
                "closed": len(r.scan["closed"]),
                "unknown": len(r.scan["unknown"]),
                "files": r.scan["files"],
                "parsed": r.scan["parsed"],
                "vendored_skipped": r.scan["vendored_skipped"],
                "cpp": r.scan["cpp"],
                "errors": r.scan["errors"],
                "cached": r.cached,
                "changes": {k: counts[r.version][k] for k in CHANGES if counts[r.version][k]},
            }
            for r in res.releases
        },
        "gates": [
            {
                "file": row.key_at(len(res.versions) - 1)[0],
                "function": row.key_at(len(res.versions) - 1)[1],
                "condition": row.key_at(len(res.versions) - 1)[2],
                "kind": row.kind,
                "files": [k[0] for _, k in row.keys] if len(row.keys) > 1 else None,
                "states": dict(zip(res.versions, row.cells, strict=True)),
            }
            for row in res.rows
        ],
        "changes": res.changes,
        # the release of each engine the ranged one requires, per release (drift's "with"):
        # not scanned here
        "with": with_ or {},
    }
