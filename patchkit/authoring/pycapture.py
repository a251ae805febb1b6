"""Capture of a Python file's changes (patchkit/authoring/capture.py does the rest): the smallest piece of
code that differs between the pristine and the edited statement (``ast``, walked in parallel)
names the op kind, each candidate is made on the file as edited so far, in memory, and kept
only when the file then equals the pristine one with exactly the hunks it claims applied.
What no candidate makes is reported with the nearest op kind and why it did not fit."""

from __future__ import annotations

import ast
import copy
import difflib
import json
from dataclasses import dataclass
from typing import Iterator, Optional

from patchkit.authoring.hunks import CapturedOp, Lines, Unexpressed, _claims_any, text_hunks
from patchkit.core import pyast

# -- Python files ---------------------------------------------------------------------------------


@dataclass
class _Stmt:
    node: ast.stmt
    scope: str  # the qualified name pyscope resolves ("" = the module)
    block: list  # the statement list it stands in
    index: int
    depth: int


def _statements(tree: ast.Module) -> list[_Stmt]:
    """Every statement, with the scope an op would name for it and the block it stands in."""
    out: list[_Stmt] = []

    def visit(body: list, scope: str, resolvable: bool, depth: int) -> None:
        for i, s in enumerate(body):
            out.append(_Stmt(s, scope, body, i, depth))
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{s.name}" if scope else s.name
                if resolvable and not isinstance(s, ast.AsyncFunctionDef):
                    visit(s.body, inner, True, depth + 1)
                else:
                    visit(s.body, scope, False, depth + 1)
            else:
                for name in ("body", "orelse", "finalbody"):
                    sub = getattr(s, name, None)
                    if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                        visit(sub, scope, False, depth + 1)
                for h in getattr(s, "handlers", ()) or ():
                    visit(h.body, scope, False, depth + 1)
                for c in getattr(s, "cases", ()) or ():
                    visit(c.body, scope, False, depth + 1)

    visit(tree.body, "", True, 0)
    return out


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _header(node: ast.stmt) -> ast.stmt:
    """A compound statement without its bodies (its header), to compare headers alone."""
    n = copy.copy(node)
    for name in _BODIES:
        if isinstance(getattr(n, name, None), list):
            setattr(n, name, [])
    return n


def _same(a, b) -> bool:
    return ast.dump(a) == ast.dump(b)


def _diff(a, b, parents: list) -> Optional[tuple]:
    """The smallest pair of nodes where ``a`` and ``b`` differ, walking both in parallel, and
    the path of (node_a, node_b, field) above it; None when they are the same."""
    if type(a) is not type(b):
        return a, b, parents
    differing = []
    for name, va in ast.iter_fields(a):
        vb = getattr(b, name, None)
        if isinstance(va, list):
            if not isinstance(vb, list) or len(va) != len(vb):
                return a, b, parents
            for x, y in zip(va, vb, strict=True):
                if isinstance(x, ast.AST):
                    if not _same(x, y):
                        differing.append((x, y, name))
                elif x != y:
                    return a, b, parents
        elif isinstance(va, ast.AST):
            if not isinstance(vb, ast.AST) or not _same(va, vb):
                differing.append((va, vb, name))
        elif va != vb:
            return a, b, parents
    if not differing:
        return None
    if len(differing) > 1:
        return a, b, parents
    x, y, name = differing[0]
    return _diff(x, y, [*parents, (a, b, name)])


def _leaves(a, b, parents: list) -> list[tuple]:
    """Every smallest pair where ``a`` and ``b`` differ, as _diff finds one, but past a node
    where several children differ (three defaults changed in one ``def`` header, keywords of
    one call): each is (node_a, node_b, path).  A node whose shape changes (a list of
    another length, another type, a field that is no node) is a pair itself."""
    if type(a) is not type(b):
        return [(a, b, parents)]
    differing = []
    for name, va in ast.iter_fields(a):
        vb = getattr(b, name, None)
        if isinstance(va, list):
            if not isinstance(vb, list) or len(va) != len(vb):
                return [(a, b, parents)]
            for x, y in zip(va, vb, strict=True):
                if isinstance(x, ast.AST):
                    if not _same(x, y):
                        differing.append((x, y, name))
                elif x != y:
                    return [(a, b, parents)]
        elif isinstance(va, ast.AST):
            if not isinstance(vb, ast.AST) or not _same(va, vb):
                differing.append((va, vb, name))
        elif va != vb:
            return [(a, b, parents)]
    got = [leaf for x, y, name in differing for leaf in _leaves(x, y, [*parents, (a, b, name)])]
    return sorted(got, key=lambda leaf: (getattr(leaf[0], "lineno", 0), getattr(leaf[0], "col_offset", 0)))


def _chain(node: ast.If, lines: list[str]) -> list[tuple[str, object]]:
    """An if-chain's clauses: ("if"|"elif", the If node), ("else", its statement list).  An
    ``else:`` holding only an ``if`` is told from an ``elif`` by its text."""
    out: list[tuple[str, object]] = [("if", node)]
    while True:
        orelse = node.orelse
        if (
            len(orelse) == 1
            and isinstance(orelse[0], ast.If)
            and lines[orelse[0].lineno - 1].lstrip().startswith("elif")
        ):
            node = orelse[0]
            out.append(("elif", node))
            continue
        if orelse:
            out.append(("else", orelse))
        return out


def _clause_key(kind: str, clause) -> str:
    body = clause if kind == "else" else clause.body
    return kind[:2] + (ast.dump(clause.test) if kind != "else" else "") + "".join(ast.dump(s) for s in body)


def _clause_end(chain: list, pos: int) -> int:
    kind, clause = chain[pos]
    body = clause if kind == "else" else clause.body
    return max((s.end_lineno or s.lineno) for s in body)


def _else_line(lines: list[str], body: list) -> Optional[int]:
    """The line of the ``else:`` whose body starts at ``body[0]``."""
    line = body[0].lineno
    while line > 1 and not lines[line - 1].lstrip().startswith("else"):
        line -= 1
    return line if lines[line - 1].lstrip().startswith("else") else None


def _added(xs: list[str], ys: list[str]) -> list[int]:
    """Positions in ``ys`` of the items added to ``xs`` (nothing else changed), or []."""
    ops = difflib.SequenceMatcher(None, xs, ys, autojunk=False).get_opcodes()
    if any(tag not in ("equal", "insert") for tag, *_ in ops):
        return []
    return [j for tag, _, _, j1, j2 in ops if tag == "insert" for j in range(j1, j2)]


def _src(text: str, node) -> str:
    return pyast.segment(text, node) or ""


class _PyFile:
    def __init__(self, engine: str, logical: str, old: str, new: str) -> None:
        self.engine, self.logical = engine, logical
        self.old, self.new = old, new
        self.lines = Lines(old, new)
        self.a_tree, self.b_tree = ast.parse(old), ast.parse(new)
        self.a_stmts, self.b_stmts = _statements(self.a_tree), _statements(self.b_tree)

    # -- the statements a hunk touches ---------------------------------------------------------
    @staticmethod
    def _covering(stmts: list[_Stmt], lo: int, hi: int) -> Optional[_Stmt]:
        """The deepest statement spanning lines lo..hi (1-based, inclusive)."""
        best = None
        for s in stmts:
            if s.node.lineno <= lo and (s.node.end_lineno or s.node.lineno) >= hi:
                if best is None or s.depth > best.depth:
                    best = s
        return best

    def candidates(self, k: int) -> Iterator[CapturedOp]:
        tag, i1, i2, j1, j2 = self.lines.hunks[k]
        # the statements holding the hunk (for lines added or removed: the lines around them)
        a = self._covering(self.a_stmts, *((i1 + 1, i2) if i2 > i1 else (i1, i1 + 1)))
        b = self._covering(self.b_stmts, *((j1 + 1, j2) if j2 > j1 else (j1, j1 + 1)))
        if b is not None:
            yield from self._wrapped(b)
        if a is not None and b is not None:
            yield from self._modified(a, b)
        for ai, bi in self._ifs(i1, i2, j1, j2):
            yield from self._branch(ai, bi)
        if j2 > j1:
            yield from self._inserted(j1, j2)
        if i2 > i1 and j2 == j1:
            yield from self._deleted(i1, i2)
        if a is not None and b is not None:
            yield from self._replaced(a, b)

    # -- statements deleted or replaced: delete-stmt, replace-stmt ---------------------------------
    def _own_lines(self, s: _Stmt, lines: list[str], start: Optional[int] = None) -> Optional[str]:
        """The statement's text, whole lines dedented (from ``start``: the comment and blank
        lines above it that go with it), or None when it shares a line with other code."""
        node = s.node
        first = node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno
        end = node.end_lineno or node.lineno
        if lines[first - 1][: node.col_offset].strip():
            return None
        nxt = s.block[s.index + 1] if s.index + 1 < len(s.block) else None
        if nxt is not None and nxt.lineno == end:
            return None  # `a; b`
        return self._dedent(lines[(start or first) - 1 : end], node.col_offset)

    def _context(self, s: _Stmt, lines: list[str], text: str, skip: int = 0) -> list[dict]:
        """Ways to name a statement's place: the statement above, below, the clause holding it."""
        prev = s.block[s.index - 1] if s.index > 0 else None
        nxt = s.block[s.index + 1 + skip] if s.index + 1 + skip < len(s.block) else None
        after = self._anchor(prev, lines, text) if prev is not None else ""
        before = self._anchor(nxt, lines, text) if nxt is not None else ""
        out = []
        if after:
            out.append({"after": after})
        if before:
            out.append({"before": before})
        if after and before:
            out.append({"after": after, "before": before})
        return out

    def _deleted(self, i1: int, i2: int) -> Iterator:
        """delete-stmt for whole statements of the pristine file in lines i1+1..i2, each with
        the comments and blank lines above it."""
        gone = [s for s in self.a_stmts if s.node.lineno > i1 and (s.node.end_lineno or s.node.lineno) <= i2]
        if not gone:
            return
        top = min(s.depth for s in gone)
        gone = [s for s in gone if s.depth == top]
        if any(s.block is not gone[0].block for s in gone) or [s.index for s in gone] != list(
            range(gone[0].index, gone[0].index + len(gone))
        ):
            return
        block, first, n = gone[0].block, gone[0], len(gone)
        prev = block[first.index - 1] if first.index > 0 else None
        after = self._anchor(prev, self.lines.a, self.old) if prev is not None else ""
        steps = []
        start = i1 + 1
        for s in gone:
            match = self._own_lines(s, self.lines.a, start)
            nxt = block[s.index + 1] if s.index + 1 < len(block) else None
            before = self._anchor(nxt, self.lines.a, self.old) if nxt is not None else ""
            if match is None or not (after or before):
                return
            loc = {"match": match}
            if after:
                loc["after"] = after
            if before:
                loc["before"] = before
            steps.append(CapturedOp("delete-stmt", self.engine, self.logical, first.scope, loc, {}))
            start = (s.node.end_lineno or s.node.lineno) + 1
        yield steps[0] if n == 1 else steps

    def _wrapped(self, b: _Stmt) -> Iterator[CapturedOp]:
        """wrap-stmts: a new if / with / try whose body is, line for line, a run of the pristine
        file's consecutive statements (a guard put around a block)."""
        node = b.node
        if (
            not isinstance(node, (ast.If, ast.With, ast.Try))
            or getattr(node, "orelse", None)
            and isinstance(node, ast.If)
        ):
            return
        body = node.body
        inner = self._dedent(self.lines.b[body[0].lineno - 1 : body[-1].end_lineno], body[0].col_offset)
        head = "".join(self.lines.b[node.lineno - 1 : body[0].lineno - 1])
        if inner is None or not head.strip() or "\n" in head.strip():
            return
        footer = ""
        if isinstance(node, ast.Try):
            tail = self.lines.b[body[-1].end_lineno : node.end_lineno]
            footer = self._dedent(tail, node.col_offset) or ""
            if not footer:
                return
        for s in self.a_stmts:
            if s.scope != b.scope or s.index + len(body) > len(s.block):
                continue
            last = s.block[s.index + len(body) - 1]
            run = self._dedent(self.lines.a[s.node.lineno - 1 : last.end_lineno], s.node.col_offset)
            if run is not None and run == inner:
                params = {"header": head.strip()}
                if footer:
                    params["footer"] = footer.rstrip("\n")
                yield CapturedOp("wrap-stmts", self.engine, self.logical, b.scope, {"match": run.rstrip("\n")}, params)
                for ctx in self._context(s, self.lines.a, self.old, skip=len(body) - 1):
                    yield CapturedOp(
                        "wrap-stmts", self.engine, self.logical, b.scope, {"match": run.rstrip("\n"), **ctx}, params
                    )
                return

    def _replaced(self, a: _Stmt, b: _Stmt) -> Iterator[CapturedOp]:
        """replace-stmt: a simple statement replaced by another (the fallback for a changed
        statement no finer op makes)."""
        if a.scope != b.scope or any(isinstance(getattr(a.node, n, None), list) for n in _BODIES):
            return
        match, with_ = self._own_lines(a, self.lines.a), self._own_lines(b, self.lines.b)
        if not match or not with_:
            return
        yield CapturedOp("replace-stmt", self.engine, self.logical, a.scope, {"match": match}, {"with": with_})
        for ctx in self._context(a, self.lines.a, self.old):
            yield CapturedOp(
                "replace-stmt", self.engine, self.logical, a.scope, {"match": match, **ctx}, {"with": with_}
            )

    def _ifs(self, i1: int, i2: int, j1: int, j2: int) -> Iterator[tuple[_Stmt, _Stmt]]:
        """(pristine, edited) if-statements that hold the hunk, innermost first, paired by
        where they start (the same line, once the hunks above are taken into account)."""
        lo, hi = (j1 + 1, j2) if j2 > j1 else (j1, j1 + 1)
        ifs = [
            s for s in self.b_stmts if isinstance(s.node, ast.If) and s.node.lineno <= lo and s.node.end_lineno >= hi
        ]
        for bi in sorted(ifs, key=lambda s: -s.depth):
            line = self._to_a(bi.node.lineno)
            ai = next((s for s in self.a_stmts if isinstance(s.node, ast.If) and s.node.lineno == line), None)
            if ai is not None:
                yield ai, bi

    def _to_a(self, line: int) -> int:
        """The pristine line of an edited line that stands in both (0 if it does not)."""
        for tag, i1, _, j1, j2 in self.lines.ops:
            if tag == "equal" and j1 < line <= j2:
                return line - j1 + i1
        return 0

    def _branch(self, a: _Stmt, b: _Stmt) -> Iterator[CapturedOp]:
        """add-branch: an elif/else clause added to an if-chain."""
        if not (isinstance(a.node, ast.If) and isinstance(b.node, ast.If)) or a.scope != b.scope:
            return
        ca, cb = _chain(a.node, self.lines.a), _chain(b.node, self.lines.b)
        ka, kb = [_clause_key(*c) for c in ca], [_clause_key(*c) for c in cb]
        if len(kb) != len(ka) + 1:
            return
        pos = next((i for i in range(len(ka)) if ka[i] != kb[i]), len(ka))
        if kb[:pos] + kb[pos + 1 :] != ka or pos == 0:
            return
        kind, clause = cb[pos]
        start = clause.lineno if kind != "else" else _else_line(self.lines.b, clause)
        if start is None:
            return
        code = self._dedent(self.lines.b[start - 1 : _clause_end(cb, pos)], b.node.col_offset)
        if code is None:
            return
        heads = [self._branch_head(ca, i) for i in range(len(ca))]
        yield CapturedOp("add-branch", self.engine, self.logical, a.scope, {"branch": heads[pos - 1]}, {"code": code})
        if pos < len(ca):
            yield CapturedOp(
                "add-branch",
                self.engine,
                self.logical,
                a.scope,
                {"branch": heads[pos], "position": "before"},
                {"code": code},
            )

    def _branch_head(self, chain: list, i: int) -> str:
        kind, node = chain[i]
        if kind == "else":
            return "else"
        return f"{'if' if i == 0 else 'elif'} {_src(self.old, node.test)}"

    # -- statements added: insert, ensure-import ------------------------------------------------
    def _inserted(self, j1: int, j2: int) -> Iterator[CapturedOp]:
        """Candidates for statements of the edited file that stand in lines j1+1..j2 and are
        new: consecutive siblings of one block."""
        new = [s for s in self.b_stmts if s.node.lineno > j1 and (s.node.end_lineno or s.node.lineno) <= j2]
        if not new:
            return
        top = min(s.depth for s in new)
        new = [s for s in new if s.depth == top]
        block = new[0].block
        if any(s.block is not block for s in new):
            return
        idx = [s.index for s in new]
        if idx != list(range(idx[0], idx[0] + len(idx))):
            return
        first, last = new[0], new[-1]
        scope = first.scope
        if (
            len(new) == 1
            and top == 0
            and isinstance(first.node, ast.ImportFrom)
            and first.node.module
            and not first.node.level
            and len(first.node.names) == 1
            and first.node.names[0].asname is None
        ):
            yield CapturedOp(
                "ensure-import",
                self.engine,
                self.logical,
                locator={"module": first.node.module},
                params={"name": first.node.names[0].name},
            )
        prev = block[first.index - 1] if first.index > 0 else None
        nxt = block[last.index + 1] if last.index + 1 < len(block) else None
        end = last.node.end_lineno or last.node.lineno
        starts = [first.node.lineno]
        first_line = (first.node.decorator_list[0].lineno) if getattr(first.node, "decorator_list", None) else None
        if first_line:
            starts = [first_line]
        above = (prev.end_lineno or prev.lineno) + 1 if prev is not None else self._block_start(first)
        if above is not None and above < starts[0]:
            starts.insert(0, above)
        codes = []
        for start in starts:
            code = self._dedent(self.b[start - 1 : end], first.node.col_offset)
            if code is not None and code not in codes:
                codes.append(code)
        anchors = []
        if nxt is not None and self._anchor(nxt):
            anchors.append(({"anchor": self._anchor(nxt), "position": "before"}))
        if prev is not None and self._anchor(prev):
            anchors.append({"anchor": self._anchor(prev), "position": "after"})
        if prev is None:
            anchors.append({"at": "start"})
        if nxt is None:
            anchors.append({"at": "end"})
        for code in codes:
            for loc in anchors:
                yield CapturedOp("insert", self.engine, self.logical, scope, dict(loc), {"code": code})

    @property
    def b(self) -> list[str]:
        return self.lines.b

    def _block_start(self, first: _Stmt) -> Optional[int]:
        """The first line after the header of the block ``first`` opens (its owner's colon)."""
        for s in self.b_stmts:
            for name in _BODIES:
                if getattr(s.node, name, None) is first.block:
                    body = first.block
                    # the header ends on the line before the body's first statement and its comments
                    line = body[0].lineno - 1
                    while line > s.node.lineno and self.b[line - 1].strip().startswith("#"):
                        line -= 1
                    while line > s.node.lineno and not self.b[line - 1].strip():
                        line -= 1
                    return line + 1
        return 1 if first.block is self.b_tree.body else None

    @staticmethod
    def _dedent(lines: list[str], col: int) -> Optional[str]:
        out = []
        for ln in lines:
            if ln[:col].strip() == "" and len(ln) > col:
                out.append(ln[col:])
            elif not ln.strip():
                out.append(ln.lstrip(" \t"))
            else:
                return None
        return "".join(out)

    def _anchor(self, node: ast.stmt, lines: Optional[list[str]] = None, text: Optional[str] = None) -> str:
        """The anchor text of a statement (of the edited file, or of ``lines``/``text``): a
        simple one whole, a compound one's header."""
        lines, text = lines or self.b, text or self.new
        if getattr(node, "decorator_list", None):
            return ""
        if any(isinstance(getattr(node, n, None), list) and getattr(node, n) for n in _BODIES):
            body = node.body
            head = "".join(lines[node.lineno - 1 : body[0].lineno - 1]) if body[0].lineno > node.lineno else ""
            if not head:
                return ""
            return "\n".join(ln.strip() for ln in head.strip().splitlines())
        return _src(text, node).strip()

    # -- a statement changed: the smallest difference ------------------------------------------
    def _modified(self, a: _Stmt, b: _Stmt) -> Iterator[CapturedOp]:
        if a.scope != b.scope:
            return
        an, bn = a.node, b.node
        if any(isinstance(getattr(an, n, None), list) for n in _BODIES):
            an, bn = _header(an), _header(bn)
        d = _diff(an, bn, [])
        if d is None:
            return
        leaves = _leaves(an, bn, [])
        if len(leaves) > 1:  # several changes in one statement: one op each, made in order
            yield from self._several(leaves, a)
        x, y, path = d
        yield from self._smallest(x, y, path, a)

    _MAX_GROUPS = 4  # of several changes' ops: the first candidates of each, then the next ones

    def _several(self, leaves: list[tuple], a: _Stmt) -> Iterator[list[CapturedOp]]:
        """Groups of one op per change (each change's candidates in their order: a group of
        the first ones, then of the second ones, ...), where every change has one that is
        not a replace-expr (which would rewrite what holds the others)."""
        per = []
        for x, y, path in leaves:
            got = [c for c in self._smallest(x, y, path, a) if not isinstance(c, list) and c.kind != "replace-expr"]
            if not got:
                return
            per.append(got)
        for i in range(min(self._MAX_GROUPS, max(len(p) for p in per))):
            yield [copy.copy(p[min(i, len(p) - 1)]) for p in per]

    def _smallest(self, x, y, path, a: _Stmt) -> Iterator:
        """The ops for one smallest difference ``x`` -> ``y`` of a statement."""
        scope = a.scope
        if isinstance(x, (ast.List, ast.Tuple, ast.Set)) and type(x) is type(y):
            yield from self._list_element(x, y, path, scope)
        if (
            isinstance(x, ast.BoolOp)
            and isinstance(y, ast.BoolOp)
            and isinstance(x.op, ast.Or) == isinstance(y.op, ast.Or)
        ):
            yield from self._or_operand(x, y, scope)
        if isinstance(x, ast.ImportFrom) and isinstance(y, ast.ImportFrom) and a.depth == 0:
            yield from self._import(x, y)
        if isinstance(x, ast.Call) and isinstance(y, ast.Call) and _same(x.func, y.func):
            yield from self._call_arg(x, y, scope)
        if isinstance(x, ast.Dict) and isinstance(y, ast.Dict):
            yield from self._dict_entry(x, y, path, scope)
        yield from self._set_default(x, y, path, a)
        yield from self._replace_expr(x, y, path, a)

    def _call_arg(self, x: ast.Call, y: ast.Call, scope: str) -> Iterator[CapturedOp]:
        """call-arg: one keyword argument added or removed (positional ones: replace-expr)."""
        if [ast.dump(v) for v in x.args] != [ast.dump(v) for v in y.args]:
            return
        kx = [(k.arg, ast.dump(k.value)) for k in x.keywords]
        ky = [(k.arg, ast.dump(k.value)) for k in y.keywords]
        if len(ky) == len(kx) + 1:
            more, less, text, params = y, kx, self.new, {}
        elif len(kx) == len(ky) + 1:
            more, less, text, params = x, ky, self.old, {"action": "remove"}
        else:
            return
        mk = [(k.arg, ast.dump(k.value)) for k in more.keywords]
        pos = next((i for i in range(len(less)) if mk[i] != less[i]), len(less))
        kw = more.keywords[pos]
        if mk[:pos] + mk[pos + 1 :] != less or kw.arg is None:
            return
        params.update({"keyword": kw.arg, "value": _src(text, kw.value)})
        if pos > 0 and more.keywords[pos - 1].arg:
            params["after"] = more.keywords[pos - 1].arg
        elif pos + 1 < len(more.keywords) and more.keywords[pos + 1].arg:
            params["before"] = more.keywords[pos + 1].arg
        loc = {"call": _src(self.old, x.func)}
        yield CapturedOp("call-arg", self.engine, self.logical, scope, dict(loc), dict(params))
        if x.args and not isinstance(x.args[0], ast.Starred):
            loc["arg"] = _src(self.old, x.args[0])
            yield CapturedOp("call-arg", self.engine, self.logical, scope, loc, dict(params))

    def _dict_entry(self, x: ast.Dict, y: ast.Dict, path, scope: str) -> Iterator[CapturedOp]:
        """dict-entry: one key added or removed."""
        if None in x.keys or None in y.keys:
            return
        ex = [(ast.dump(k), ast.dump(v)) for k, v in zip(x.keys, x.values, strict=True)]
        ey = [(ast.dump(k), ast.dump(v)) for k, v in zip(y.keys, y.values, strict=True)]
        if len(ey) == len(ex) + 1:
            more, less, text, params = y, ex, self.new, {}
        elif len(ex) == len(ey) + 1:
            more, less, text, params = x, ey, self.old, {"action": "remove"}
        else:
            return
        me = [(ast.dump(k), ast.dump(v)) for k, v in zip(more.keys, more.values, strict=True)]
        pos = next((i for i in range(len(less)) if me[i] != less[i]), len(less))
        if me[:pos] + me[pos + 1 :] != less:
            return
        params.update({"key": _src(text, more.keys[pos]), "value": _src(text, more.values[pos])})
        if pos > 0:
            params["after"] = _src(text, more.keys[pos - 1])
        elif pos + 1 < len(more.keys):
            params["before"] = _src(text, more.keys[pos + 1])
        locs = []
        holder = path[-1][0] if path else None
        if isinstance(holder, (ast.Assign, ast.AnnAssign)) and len(path) == 1:
            target = holder.target if isinstance(holder, ast.AnnAssign) else holder.targets[0]
            locs.append({"target": _src(self.old, target)})
        others = [_src(self.old, k) for k in x.keys if ast.dump(k) != me[pos][0]]
        if others:
            locs += [{"keys": others}, {"keys": others[:2]}]
        for loc in locs:
            yield CapturedOp("dict-entry", self.engine, self.logical, scope, loc, dict(params))

    def _list_element(self, x, y, path, scope) -> Iterator[CapturedOp]:
        xs = [ast.dump(e) for e in x.elts]
        ys = [ast.dump(e) for e in y.elts]
        added = _added(xs, ys)
        if len(added) > 1:  # several elements: one op each, in order
            if added[0] == 0:
                return
            others = [_src(self.old, e) for e in x.elts]
            steps = []
            for pos in added:
                params = {"element": _src(self.new, y.elts[pos])}
                if any(p > pos for p in range(len(ys)) if p not in added):
                    params["after"] = _src(self.new, y.elts[pos - 1])
                steps.append(params)
            for loc in self._collection_locators(path, others):
                yield [CapturedOp("list-element", self.engine, self.logical, scope, dict(loc), p) for p in steps]
            return
        if len(ys) == len(xs) + 1:
            action, more, less, text = "add", y, x, self.new
        elif len(xs) == len(ys) + 1:
            action, more, less, text = "remove", x, y, self.old
        else:
            return
        big, small = [ast.dump(e) for e in more.elts], [ast.dump(e) for e in less.elts]
        pos = next((i for i in range(len(small)) if big[i] != small[i]), len(small))
        if big[:pos] + big[pos + 1 :] != small:
            return
        element = _src(text, more.elts[pos])
        others = [_src(self.old, e) for e in x.elts if ast.dump(e) != big[pos]]
        params: dict = {"element": element}
        if action == "remove":
            params["action"] = "remove"
        afters = [{}]
        if action == "add" and pos < len(small):  # not at the end: after its predecessor, or at the front
            afters = [{"after": _src(self.new, y.elts[pos - 1])} if pos > 0 else {"before": _src(self.new, y.elts[1])}]
        locators = self._collection_locators(path, others)
        comments = []
        if action == "add":
            seg = _src(self.old, x).splitlines()
            comments = [ln.strip() for ln in seg if ln.strip().startswith("#") and element in ln]
        for loc in locators:
            for after in afters:
                for c in comments:
                    yield CapturedOp(
                        "list-element", self.engine, self.logical, scope, dict(loc), {**params, **after, "comment": c}
                    )
                    if c == f"# {element},":
                        yield CapturedOp(
                            "list-element",
                            self.engine,
                            self.logical,
                            scope,
                            dict(loc),
                            {**params, **after, "uncomment": True},
                        )
                yield CapturedOp("list-element", self.engine, self.logical, scope, dict(loc), {**params, **after})

    def _collection_locators(self, path, others: list[str]) -> list[dict]:
        """The ways to find a collection: the keyword it is passed as (with or without its
        call), the membership test it is the right side of, the name it is assigned to, or
        elements it holds."""
        locators: list[dict] = []
        parent = path[-1][1] if path else None
        if isinstance(parent, ast.keyword) and parent.arg:
            grand = path[-2][1] if len(path) > 1 else None
            loc = {"keyword": parent.arg}
            locators.append(loc)
            if isinstance(grand, ast.Call):
                locators.append({**loc, "call": _src(self.new, grand.func)})
        if isinstance(parent, ast.Compare):
            locators.append({"membership": _src(self.new, parent.left)})
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and path[-1][2] == "value":
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            locators += [{"target": _src(self.new, t)} for t in targets if isinstance(t, (ast.Name, ast.Attribute))]
        if others:
            locators += [{"contains": others}, {"contains": others[:2]}] + [{"contains": [o]} for o in others]
        return locators

    def _or_operand(self, x, y, scope) -> Iterator:
        """An operand added to an ``or`` chain (or-operand) or an ``and`` chain (and-operand)."""
        if not isinstance(x.op, (ast.Or, ast.And)) or type(y.op) is not type(x.op):
            return
        kind = "or-operand" if isinstance(x.op, ast.Or) else "and-operand"
        added = _added([ast.dump(v) for v in x.values], [ast.dump(v) for v in y.values])
        if not added or added[0] == 0:
            return
        operands = [_src(self.old, v) for v in x.values]
        steps = []
        for pos in added:  # in order: each one's predecessor stands when it is added
            params = {"operand": _src(self.new, y.values[pos])}
            if pos < len(y.values) - 1 and any(p > pos for p in range(len(y.values)) if p not in added):
                params["after"] = _src(self.new, y.values[pos - 1])
            steps.append(params)
        for locator in ({"operands": operands}, {"operands": operands[:2]}):
            group = [CapturedOp(kind, self.engine, self.logical, scope, dict(locator), p) for p in steps]
            yield group[0] if len(group) == 1 else group

    def _import(self, x: ast.ImportFrom, y: ast.ImportFrom) -> Iterator[CapturedOp]:
        if x.module != y.module or x.level or y.level or not x.module:
            return
        xs = [(n.name, n.asname) for n in x.names]
        ys = [(n.name, n.asname) for n in y.names]
        if len(ys) != len(xs) + 1:
            return
        pos = next((i for i in range(len(xs)) if ys[i] != xs[i]), len(xs))
        if ys[:pos] + ys[pos + 1 :] != xs or ys[pos][1] is not None:
            return
        params = {"name": ys[pos][0]}
        if pos > 0:
            yield CapturedOp(
                "ensure-import",
                self.engine,
                self.logical,
                locator={"module": x.module},
                params={**params, "after": ys[pos - 1][0]},
            )
        yield CapturedOp("ensure-import", self.engine, self.logical, locator={"module": x.module}, params=params)

    def _set_default(self, x, y, path, a: _Stmt) -> Iterator[CapturedOp]:
        if not (isinstance(x, ast.expr) and isinstance(y, ast.expr)) or not path:
            return
        holder_a, holder_b, fieldname = path[-1]
        value, expect = _src(self.new, y), _src(self.old, x)
        if not value or not expect:
            return
        params = {"value": value, "expect": expect}
        if isinstance(holder_a, (ast.AnnAssign, ast.Assign)) and fieldname == "value" and len(path) == 1:
            target = holder_a.target if isinstance(holder_a, ast.AnnAssign) else holder_a.targets[0]
            if isinstance(target, ast.Name) and (isinstance(holder_a, ast.AnnAssign) or len(holder_a.targets) == 1):
                yield CapturedOp("set-default", self.engine, self.logical, a.scope, {"field": target.id}, params)
        if isinstance(holder_a, ast.keyword) and holder_a.arg and len(path) >= 2:
            call = path[-2][0]
            if isinstance(call, ast.Call):
                loc = {"call": _src(self.old, call.func), "keyword": holder_a.arg}
                if call.args and not isinstance(call.args[0], ast.Starred):
                    yield CapturedOp(
                        "set-default",
                        self.engine,
                        self.logical,
                        a.scope,
                        {**loc, "arg": _src(self.old, call.args[0])},
                        params,
                    )
                yield CapturedOp("set-default", self.engine, self.logical, a.scope, loc, params)
        if isinstance(holder_a, ast.arguments) and isinstance(a.node, ast.FunctionDef):
            name = self._param_of(holder_a, x, fieldname)
            if name:
                inner = f"{a.scope}.{a.node.name}" if a.scope else a.node.name
                yield CapturedOp("set-default", self.engine, self.logical, inner, {"param": name}, params)

    @staticmethod
    def _param_of(args: ast.arguments, default, fieldname: str) -> str:
        if fieldname == "defaults":
            pos = [*args.posonlyargs, *args.args]
            ds = args.defaults
            for i, d in enumerate(ds):
                if d is default:
                    return pos[len(pos) - len(ds) + i].arg
        if fieldname == "kw_defaults":
            for arg, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if d is default:
                    return arg.arg
        return ""

    def _replace_expr(self, x, y, path, a: _Stmt) -> Iterator[CapturedOp]:
        pairs = [(x, y)] + [(pa, pb) for pa, pb, _ in reversed(path)]
        for pa, pb in pairs:
            if not (isinstance(pa, ast.expr) and isinstance(pb, ast.expr)):
                break
            match, with_ = _src(self.old, pa), _src(self.new, pb)
            if not match or not with_:
                continue
            count = sum(1 for n in ast.walk(self._scope_node(a)) if isinstance(n, ast.expr) and _same(n, pa))
            yield CapturedOp(
                "replace-expr",
                self.engine,
                self.logical,
                a.scope,
                {"match": match, "count": max(count, 1)},
                {"with": with_},
            )

    def _scope_node(self, a: _Stmt):
        node = self.a_tree
        for part in a.scope.split(".") if a.scope else ():
            node = next(s for s in node.body if isinstance(s, (ast.ClassDef, ast.FunctionDef)) and s.name == part)
        return node


def _build(c: CapturedOp):
    """The op object for a candidate, or why its kind refuses the locator and params."""
    from patchkit.core.ops import KINDS, OpParamError

    try:
        return KINDS[c.kind](c.locator, c.params)
    except OpParamError as e:
        return f"{e.field} {e.message}"
    except (KeyError, TypeError) as e:
        return f"its locator and params do not fit ({e})"


def _comment_only(f: "_PyFile", k: int) -> bool:
    _, i1, i2, j1, j2 = f.lines.hunks[k]
    changed = f.lines.a[i1:i2] + f.lines.b[j1:j2]
    return all(not ln.strip() or ln.strip().startswith("#") for ln in changed)


def _with_text_hunk(f: "_PyFile", k: int, done: set[int]) -> Iterator:
    """The hunk's candidates; for a change of comments and blank lines only (which Python
    ops do not see), a text-hunk of whole lines with context."""
    yield from f.candidates(k)
    if not _comment_only(f, k):
        return
    got = text_hunks(f.lines.text(done), f.lines.text(done | {k}))
    if got and len(got) == 1 and got[0][1] == 1:
        yield CapturedOp("text-hunk", f.engine, f.logical, params={"hunk": got[0][0]})


def capture_python(engine: str, logical: str, old: str, new: str) -> tuple[list[CapturedOp], list[Unexpressed]]:
    ops, failed, _ = capture_with_text(engine, logical, old, new)
    return ops, failed


def capture_with_text(engine: str, logical: str, old: str, new: str) -> tuple[list, list, str]:
    """(ops, what they could not express, the text the ops make of ``old``)."""
    import libcst as cst

    from patchkit.base.states import State
    from patchkit.core import pyscope

    try:
        f = _PyFile(engine, logical, old, new)
    except SyntaxError as e:  # refused before libcst sees it: its parser can crash on what CPython refuses
        return [], [Unexpressed(engine, logical, e.lineno or 0, f"does not parse as Python ({e.msg})")], old
    except (ValueError, MemoryError, RecursionError) as e:
        why = str(e) if isinstance(e, ValueError) else "it nests too deeply for Python's own parser"
        return [], [Unexpressed(engine, logical, 0, f"does not parse as Python ({why})")], old
    done: set[int] = set()
    ops: list[CapturedOp] = []
    failed: list[Unexpressed] = []
    module = cst.parse_module(old)
    for k in range(len(f.lines.hunks)):
        if k in done:
            continue
        found = None
        tried: set = set()
        misfits: dict[str, str] = {}  # op kind -> why its first candidate did not fit
        for cand in _with_text_hunk(f, k, done):
            group = cand if isinstance(cand, list) else [cand]  # ops made one after the other
            key = json.dumps([[c.kind, c.scope, c.locator, c.params] for c in group], sort_keys=True)
            if key in tried:
                continue
            tried.add(key)
            edited = module
            for c in group:
                op = _build(c)
                if isinstance(op, str):
                    misfits.setdefault(c.kind, op)
                    edited = None
                    break
                try:
                    chain = pyscope.resolve(edited, c.scope)
                    loc = op.locate(chain[-1])
                    if loc.state != State.PENDING:
                        misfits.setdefault(
                            c.kind, f"it reads {loc.state} there" + (f" ({loc.reason})" if loc.reason else "")
                        )
                        edited = None
                        break
                    edited = pyscope.splice(chain, op.apply(chain[-1]))
                except (ValueError, LookupError, cst.CSTValidationError) as e:
                    misfits.setdefault(c.kind, str(e))
                    edited = None
                    break
            if edited is None:
                continue
            claims = _claims_any(f.lines, done, k, edited.code)
            if claims is not None:
                found = (group, edited, claims)
                break
            misfits.setdefault(
                group[0].kind, "it would not make exactly this change (other lines, or these differently)"
            )
        if found is None:
            _, i1, i2, j1, j2 = f.lines.hunks[k]
            failed.append(Unexpressed(engine, logical, j1 + 1, _why(f, k, misfits)))
            continue
        group, module, claims = found
        done |= claims
        lo, hi = min(claims), max(claims)
        first, last = f.lines.hunks[lo][3] + 1, f.lines.hunks[hi][4]
        for c in group:
            c.hunks = f"line {first}" if last <= first else f"lines {first}-{last}"
        ops += group
    return ops, failed, module.code


def _why(f: _PyFile, k: int, misfits: dict[str, str]) -> str:
    """Why no op makes this hunk: the nearest op kind (the first one tried) and why it did
    not fit, or what kind of change it is when no kind came near."""
    tag, i1, i2, j1, j2 = f.lines.hunks[k]
    old, new = "".join(f.lines.a[i1:i2]), "".join(f.lines.b[j1:j2])
    n = (j2 - j1) or (i2 - i1)
    what = {"delete": "lines deleted", "insert": "lines added"}.get(tag, "lines changed")
    what = f"{n} {what}" if n > 1 else what.replace("lines", "a line")
    if misfits:
        kind, why = next(iter(misfits.items()))
        return f"{what}: nearest op kind {kind}, which does not fit: {why}"
    if not (old + new).strip():
        return f"{what}: only blank lines, which no op (not even text-hunk, without context) can place"
    return (
        f"{what}: no op kind makes this change (a compound statement's header, like a def's parameters, or"
        " several statements at once); write one op per statement, or a text-hunk, by hand"
    )
