"""Outlines: the part of a Python file's ``ast`` that views and scope lookups read, cached
by the file's bytes.

A view (patchkit/core/view.py) and a scope lookup (Document._scope_node) read little of
a file's ``ast``: for each statement of the module, and of each def or class body, its
kind, name, lines and column; the names check (patchkit/core/names.py) also reads which
names the module binds at its top level.  Yet ``ast.parse`` of the four files an sm120
apply edits costs about 50 ms, a tenth of a cold apply.  The outline depends only on the
file's bytes and Python's version, so it is kept in patchkit's cache under their digest: a
release's file is parsed by ``ast`` once per machine, then on any copy of it the outline
is read back (patchkit/base/store.py).

An outline exists only for bytes that CPython's own parser accepted (``of_tree`` is given
their ``ast``): that is what lets libcst parse them (Document.tree says why).  An entry
that does not read back as a well-formed outline of the text at hand is a miss: the text
is parsed again and the entry replaced.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import Optional

from patchkit.base import store

FORMAT = 1
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPOUND = tuple(
    getattr(ast, n)
    for n in ("If", "For", "AsyncFor", "While", "With", "AsyncWith", "Try", "TryStar", "Match")
    if hasattr(ast, n)
)
KINDS = ("def", "import", "doc", "compound", "simple")


@dataclass(frozen=True)
class Stmt:
    """One statement: ``kind`` is "def" (a function or class: a scope), "import", "doc" (a
    string standing alone: the docstring when first), "compound" (if, for, while, with,
    try, match) or "simple"; ``first`` is its first line with its decorators."""

    kind: str
    name: str  # a def's or class's; "" otherwise
    lineno: int
    end_lineno: int
    first: int
    col_offset: int
    body: tuple["Stmt", ...] = ()  # a def's or class's statements; () otherwise


@dataclass(frozen=True)
class Outline:
    body: tuple[Stmt, ...]
    bindings: dict[str, int]  # name -> how many times the module binds it at top level


def module_bindings(tree: ast.Module) -> Counter:
    """How many times each name is bound at module level (imports, assignments, defs,
    classes, loop and ``with`` targets, also under ``if``/``try``), not inside defs."""
    out: Counter = Counter()

    def targets(node) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                out[n.id] += 1

    def visit(stmts) -> None:
        for s in stmts:
            if isinstance(s, _DEFS):
                out[s.name] += 1
                continue
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                for a in s.names:
                    out[a.asname or a.name.split(".")[0]] += 1
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    targets(t)
            elif isinstance(s, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                targets(s.target)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(s, field, ()) or ())

    visit(tree.body)
    return out


def _stmt(s: ast.stmt) -> Stmt:
    first = min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))])
    end = s.end_lineno or s.lineno
    if isinstance(s, _DEFS):
        return Stmt("def", s.name, s.lineno, end, first, s.col_offset, tuple(_stmt(b) for b in s.body))
    if isinstance(s, (ast.Import, ast.ImportFrom)):
        kind = "import"
    elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
        kind = "doc"
    elif isinstance(s, _COMPOUND):
        kind = "compound"
    else:
        kind = "simple"
    return Stmt(kind, "", s.lineno, end, first, s.col_offset)


def of_tree(tree: ast.Module) -> Outline:
    return Outline(tuple(_stmt(s) for s in tree.body), dict(module_bindings(tree)))


# -- the cache ----------------------------------------------------------------------------------


def key(data: bytes) -> str:
    """The outline's key: the file's bytes, and the Python whose ``ast`` outlined them."""
    return store.key(f"python {sys.version_info[0]}.{sys.version_info[1]}", data)


def _encode(s: Stmt) -> list:
    return [s.kind, s.name, s.lineno, s.end_lineno, s.first, s.col_offset, [_encode(b) for b in s.body]]


class _Bad(Exception):
    pass


def _decode(x, lines: list[str], lo: int, hi: int) -> Stmt:
    """A statement from its JSON, checked against the text: inside lines ``lo``..``hi``, and a
    def's name on its header line."""
    if not (isinstance(x, list) and len(x) == 7 and x[0] in KINDS and isinstance(x[1], str)):
        raise _Bad
    kind, name, lineno, end, first, col, body = x
    if not all(type(v) is int for v in (lineno, end, first, col)) or not isinstance(body, list):
        raise _Bad
    if not (lo <= first <= lineno <= end <= hi and 0 <= col):
        raise _Bad
    if kind == "def":
        if not body or not name.isidentifier() or name not in lines[lineno - 1]:
            raise _Bad
        inner = tuple(_decode(b, lines, lineno, end) for b in body)
        if any(b.first < a.end_lineno for a, b in pairwise(inner)):
            raise _Bad
        return Stmt(kind, name, lineno, end, first, col, inner)
    if body or name:
        raise _Bad
    return Stmt(kind, name, lineno, end, first, col)


def read(data: bytes, lines: list[str]) -> Optional[Outline]:
    """The cached outline of a file's bytes (``lines``: its text's, view.split_lines), or None."""
    doc = store.get_json("outlines", key(data), {"body": [list], "bindings": {str: int}}, FORMAT)
    if doc is None or not doc["body"]:
        return None
    try:
        stmts, bindings = doc["body"], doc["bindings"]
        if not all(v > 0 for v in bindings.values()):
            return None
        body = tuple(_decode(s, lines, 1, len(lines)) for s in stmts)
        if any(b.first < a.end_lineno for a, b in pairwise(body)):
            return None
        return Outline(body, bindings)
    except (_Bad, ValueError, TypeError, RecursionError):
        return None


def remember(data: bytes, o: Outline) -> None:
    store.put_json("outlines", key(data), {"body": [_encode(s) for s in o.body], "bindings": o.bindings}, FORMAT)
