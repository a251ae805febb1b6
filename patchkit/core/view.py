"""Views: parse only the part of a Python file that this invocation's ops read.

libcst parses about 15k lines a second, and server_args.py alone has 5,800 lines.  An op
reads only its scope, and within it only the statements that hold every word of one of its
patterns (``Op.reads.patterns``, data the op sets; ``patterns`` below).  A view is the file
with each other run of statements replaced by one placeholder line
(``pass  # patchkit-gap-<nonce>-<k>``) at that block's indentation:

- statement boundaries come from ``ast`` (C speed, ~50x libcst), through the file's outline
  (patchkit/core/outline.py: cached by the file's bytes, so a release's file is parsed once);
- the text kept is the file's own bytes, so libcst sees the same nodes, comments and layout
  there, and an op finds exactly what it would find in the whole file: a statement left out
  holds none of its patterns, and a placeholder matches nothing;
- the scope chain (the headers of ``Class.method``) is kept, so scopes resolve as before;
- top-level imports are always kept (an op whose patterns are ``()`` reads only them), and
  the module's docstring (a ``from __future__`` import may follow nothing else);
- after editing, each placeholder line is swapped back for the text it stands for
  (``expand``), and line numbers map back to the file (``file_line``).

The engine trusts a view only when an op reads done or pending there; anything else is
judged again on the whole file (engine.judge).  ``build`` returns None, and the engine
parses the whole file, whenever it cannot make a view it can vouch for.
"""

from __future__ import annotations

import ast
import bisect
import io
import os
import re
import tokenize
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional, Union

import libcst as cst

from patchkit.core import outline
from patchkit.core.ops._cst import words
from patchkit.core.outline import Outline

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # lines as the tokenizer counts them
_ODD_BREAK = re.compile("[\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # where str.splitlines also breaks
_WS = re.compile(r"[ \t\f]*")


@dataclass
class _Scope:
    patterns: list = field(default_factory=list)  # word tuples; () keeps every statement
    shallow: list = field(default_factory=list)  # the same, read in the scope's simple statements only
    children: dict = field(default_factory=dict)  # name -> _Scope, along wanted scope chains
    whole: bool = False  # an op here compares whole statements: keep matching defs whole


@dataclass
class View:
    module: cst.Module
    gaps: list[tuple[str, str]]  # (placeholder line, the text it stands for), in order
    marks: list[tuple[int, int, int]]  # (view line, file line, 1) per kept run; (.., .., 0) per placeholder

    def expand(self, code: str) -> str:
        """The whole file's text for the view's (edited) code."""
        out, pos = [], 0
        for ph, text in self.gaps:
            i = code.find(ph, pos)
            if i < 0:
                raise RuntimeError(f"internal: view placeholder {ph.strip()!r} lost in an edit")
            out += [code[pos:i], text]
            pos = i + len(ph)
        out.append(code[pos:])
        return "".join(out)

    def file_line(self, line: int) -> int:
        """The file line of a line of the view's (unedited) code; a placeholder's is the
        first line of the first statement it stands for."""
        k = bisect.bisect_right(self.marks, (line, float("inf"), 0)) - 1
        if k < 0:
            return line
        vline, fline, step = self.marks[k]
        return fline + (line - vline) * step


def split_lines(text: str) -> list[str]:
    """Lines as ``ast`` numbers them (str.splitlines also splits at \\f, \\x1c, \\u2028...).
    A new list each time (callers cut it); the split itself is made once per text."""
    return list(_lines(text))


@lru_cache(maxsize=16)  # an invocation asks again for the same few files' lines
def _lines(text: str) -> tuple[str, ...]:
    # str.splitlines (2x faster) gives the same lines where none of its extra separators stands.
    return tuple(text.splitlines(True) if _ODD_BREAK.search(text) is None else _LINE.findall(text))


def patterns(op) -> list:
    """What ``op`` (an Op) reads, as ``build`` takes it for the op's scope: its
    ``Reads.patterns``, each with ``Reads.whole_statements`` and ``Reads.shallow``."""
    r = op.reads
    pats = [None] if r.patterns is None else r.patterns
    return [(p, r.whole_statements, r.shallow) for p in pats]


def first_line(s: ast.stmt) -> int:
    """The first line of a statement, its decorators included."""
    return min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))])


def _units(stmts: list, start: int) -> list[tuple[int, int, list]]:
    """(first line, last line, statements) per run of statements that share no line; a run
    starts right after the previous one, so comments above a statement travel with it."""
    units: list = []
    for s in stmts:
        first, end = s.first, s.end_lineno
        if units and first <= units[-1][1]:
            a, b, ss = units[-1]
            units[-1] = (a, max(b, end), [*ss, s])
        else:
            units.append((units[-1][1] + 1 if units else start, end, [s]))
    return units


def first_indent(text: str) -> Optional[str]:
    """The relative indent of the file's first INDENT token (libcst's default_indent),
    read lazily: the tokenizer stops at the first indented block."""
    try:
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type == tokenize.INDENT:
                return t.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return "    "


def build(text: str, wants: dict[str, list], tree: Union[ast.Module, Outline, None] = None) -> Optional[View]:
    """A view of ``text`` for ``wants``: {scope qualname: [(pattern, whole[, shallow]), ...]},
    each pattern a tuple of code fragments whose words a statement must all hold to be read
    (None: read every statement of that scope), ``whole`` true when the op compares whole
    statements (Reads.whole_statements), and ``shallow`` true when its candidates are only
    the scope's own simple statements (Reads.shallow): then a def, class or other compound
    statement holding the words is not read for it.  ``tree``: the text's outline
    (patchkit/core/outline.py), or its ``ast``."""
    if tree is None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return None
    if isinstance(tree, ast.Module):
        tree = outline.of_tree(tree)
    if not tree.body:
        return None
    root = _Scope()
    for qual, pats in wants.items():
        node = root
        for part in qual.split(".") if qual else ():
            node = node.children.setdefault(part, _Scope())
        for p, whole, *shallow in pats:
            ws = () if p is None else tuple(w for frag in p for w in words(frag))
            (node.shallow if shallow and shallow[0] else node.patterns).append(ws)
            node.whole = node.whole or whole
    lines = split_lines(text)
    pieces: list = []  # ("keep", a, b) or ("gap", a, b, indent): 1-based, inclusive

    def keep(a: int, b: int) -> None:
        if a > b:
            return
        if pieces and pieces[-1][0] == "keep" and pieces[-1][2] + 1 == a:
            pieces[-1] = ("keep", pieces[-1][1], b)
        else:
            pieces.append(("keep", a, b))

    def gap(a: int, b: int, indent: str, first: int) -> None:
        last = pieces[-1] if pieces else None
        if last and last[0] == "gap" and last[2] + 1 == a and last[3] == indent:
            pieces[-1] = ("gap", last[1], b, indent, last[4])
        else:
            pieces.append(("gap", a, b, indent, first))

    def block(stmts: list, start: int, scope: _Scope, top: bool) -> bool:
        names = [s.name for s in stmts if s.kind == "def"]
        if any(names.count(n) != 1 for n in scope.children):
            return False  # missing or defined twice: the whole file decides what that means
        for a, b, ss in _units(stmts, start):
            seg = "".join(lines[a - 1 : b])
            d = ss[0] if len(ss) == 1 and ss[0].kind == "def" else None
            read = any(all(w in seg for w in p) for p in scope.patterns) or (
                bool(scope.shallow)
                and all(s.kind not in ("def", "compound") for s in ss)
                and any(all(w in seg for w in p) for p in scope.shallow)
            )
            inner = scope.children.get(d.name) if d else None
            if read and d and not scope.whole:
                # A def read by expression-matching ops: read inside it with the same patterns.
                inner = _Scope(
                    [*scope.patterns, *(inner.patterns if inner else ())],
                    inner.shallow if inner else [],
                    inner.children if inner else {},
                    bool(inner and inner.whole),
                )
            elif read or (
                top
                and (
                    all(s.kind == "import" for s in ss)
                    # The module's docstring: all that may stand before a `from __future__`
                    # import, so without it the view would not compile (and the compile
                    # check would compile the whole file: 0.12 s on server_args.py).
                    or (ss[0] is stmts[0] and ss[0].kind == "doc")
                )
            ):
                keep(a, b)
                continue
            if inner is not None:
                body = d.body[0].first
                if body <= d.lineno:  # `class A: x = 1`: nothing to leave out
                    keep(a, b)
                    continue
                keep(a, body - 1)  # decorators, the header, comments above the body
                if not block(d.body, body, inner, False):
                    return False
            else:
                first = ss[0].first
                # A placeholder's line is the line the whole file numbers its first statement
                # at: a decorated def's is its `def` line, not its first decorator's.
                at = ss[0].lineno if ss[0].kind == "def" else first
                gap(a, b, _WS.match(lines[first - 1]).group(), at)
        return True

    if not block(tree.body, 1, root, True):
        return None
    # Comments after the last statement go with it.
    if pieces[-1][0] == "gap" and pieces[-1][3] == "":
        pieces[-1] = ("gap", pieces[-1][1], len(lines), "", pieces[-1][4])
    else:
        keep(pieces[-1][2] + 1, len(lines))
    if not any(p[0] == "gap" for p in pieces):
        return None  # the view would be the whole file

    nonce = os.urandom(6).hex()
    parts, gaps, marks, vline = [], [], [], 1
    for p in pieces:
        chunk = "".join(lines[p[1] - 1 : p[2]])
        if p[0] == "keep":
            marks.append((vline, p[1], 1))
            vline += p[2] - p[1] + 1
            parts.append(chunk)
        else:
            marks.append((vline, p[4], 0))
            nl = re.search(r"\r\n|\r|\n", chunk)
            ph = f"{p[3]}pass  # patchkit-gap-{nonce}-{len(gaps)}{nl.group() if nl else chr(10)}"
            gaps.append((ph, chunk))
            parts.append(ph)
            vline += 1
    src = "".join(parts)
    try:
        module = cst.parse_module(src)
    except (cst.ParserSyntaxError, RecursionError):
        return None
    if module.code != src:
        return None  # libcst does not give this text back byte for byte: trust only the whole file
    # New nodes print with the module's default indent and newline: they must be the file's.
    nl = re.search(r"\r\n|\r|\n", text)
    if module.default_indent != first_indent(text) or module.default_newline != (nl.group() if nl else "\n"):
        return None
    return View(module, gaps, marks)
