"""Upstream markers: does upstream's own version of an edit stand somewhere in the tree?

A recipe may say what upstream's version of its edit looks like (``[[ops.markers]]``).
When the op's own site reads pending or is gone, a matching marker makes the verdict
``upstream``: the recipe can be retired.
"""

from __future__ import annotations

import ast
from typing import Optional

from patchkit.base.model import OpSpec
from patchkit.core import relocate, view
from patchkit.core.ops import DONE
from patchkit.core.ops._cst import ast_near, contains_seq, tokens
from patchkit.core.outline import Outline, Stmt

MARKER_SPAN = 60  # lines: a marker recognises one local piece of code, not a whole module


def hit(session, op: OpSpec, anywhere: bool, recipe=None) -> Optional[str]:
    """Where upstream's version of this edit stands, in the marker's file or (with
    ``anywhere``, for ops whose own site is gone) in any file of the engine holding its
    words; None when nowhere.  A statement that holds an edit of ``recipe`` itself (its
    ops found done there) is never upstream's version: it is the recipe's own text."""
    for m in op.markers:
        if m.proposed:
            continue  # drafted by `port`: it counts once a person has confirmed it
        f = session.file(op.engine, m.file)
        if not f.is_python:
            if f.exists and all(frag in f.text for frag in m.contains):
                return f"upstream marker matched in {m.file}"
            continue
        frags = [tokens(c) for c in m.contains]
        words = tuple(w for c in m.contains for w in relocate.word_bytes(c))
        for logical, data in relocate.read_each(_files(session, op, m.file, f, anywhere)):
            if all(w in data for w in words):
                own = logical == m.file
                span = f.scope_span(m.scope) if own and m.scope else None
                if own and m.scope and span is None:
                    continue  # the marker's scope is not in its file: it cannot stand there
                text = data.decode("utf-8", "replace")
                shape = f.outline if own and data == f.original else None
                line = statement_line(text, frags, words, None, span, outline=shape)
                if line and recipe is not None:  # only now worth asking where the recipe's own edits stand
                    ours = _own_edits(session, recipe, op.engine, logical)
                    if ours:
                        line = statement_line(text, frags, words, None, span, ours, outline=shape)
                if line:
                    return f"upstream marker matched at {logical}:{line}"
    return None


def _files(session, op: OpSpec, named: str, f, anywhere: bool):
    """The marker's own file, then (``anywhere``) every other Python file of the engine's
    tree; the tree is walked, and its state fingerprinted for the verdict cache
    (``Session.sweep``), only when the named file does not hold the marker."""
    if f.exists:
        yield named, f.path
    if anywhere:
        target = session.sweep(op.engine)
        yield from ((lf, p) for lf, p in relocate.tree_files(target, ".py") if lf != named)


def _own_edits(session, recipe, engine: str, logical: str) -> list[tuple[int, int]]:
    """(first, last) lines of the statements of ``logical`` that hold an edit of the recipe
    (an op of it found done there), so that a marker never matches the recipe's own text."""
    from patchkit.core import pyscope

    spans = []
    f = session.file(engine, logical)
    if not f.exists or not f.is_python or f.outline is None:
        return spans
    for op in recipe.ops:
        if op.engine != engine or op.file != logical:
            continue
        try:
            loc = op.impl.locate(pyscope.resolve(f.module, op.scope)[-1])  # a view holds the op's statements
        except (pyscope.ScopeError, ValueError, LookupError):
            continue
        if loc.state != DONE or not loc.nodes:
            continue
        for line in pyscope.line_numbers(f.module, f.view, loc.nodes, f.text).values():
            inner = _statements_at(near(f.text, f.outline, [line]) or f.tree, line)[-1:]
            spans += [(view.first_line(s), s.end_lineno or s.lineno) for s in inner]
    return spans


def _statements_at(tree: ast.Module, line: int) -> list:
    """The statements (outermost first) whose lines hold ``line``, defs and classes left
    out: the last is the one that holds the edit."""
    out, body = [], tree.body
    while body:
        s = next((s for s in body if view.first_line(s) <= line <= (s.end_lineno or s.lineno)), None)
        if s is None:
            break
        if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(s)
        body = [c for name in ("body", "orelse", "finalbody", "handlers") for c in getattr(s, name, ())]
        body = [c for b in body for c in ([b] if isinstance(b, ast.stmt) else b.body)]
    return out


def near(text: str, shape: Optional[Outline], hot: list[int]) -> Optional[ast.Module]:
    """The ``ast`` of the statements that hold the lines ``hot``, parsed alone rather than
    with the whole file: for each line, the innermost statement of the file's outline
    (patchkit/core/outline.py) around it that is not a def or class, at its own lines and
    indentation (an indented one under an ``if 1:`` header on the line above).  A module of
    those statements, with the file's line numbers; None when it cannot be made (then the
    whole file is parsed)."""
    if shape is None:
        return None
    lines = view.split_lines(text)
    picked: dict[int, Stmt] = {}
    for line in hot:
        body, inner = shape.body, None
        while body:
            s = next((s for s in body if s.first <= line <= s.end_lineno), None)
            if s is None:
                break
            if s.kind != "def":
                inner = s
                break
            body = s.body
        if inner is not None:
            picked[inner.first] = inner
    out: list = []
    for s in sorted(picked.values(), key=lambda s: s.first):
        if s.first > len(lines) or s.end_lineno > len(lines):
            return None
        head = lines[s.first - 1].encode("utf-8", "surrogateescape")  # col_offset counts UTF-8 bytes
        if head[: s.col_offset].strip(b" \t\f"):
            return None  # another statement starts the line: the cut would start inside it
        seg = "".join(lines[s.first - 1 : s.end_lineno])
        indented = s.col_offset > 0
        if indented and s.first < 2:
            return None
        src = "\n" * (s.first - 2) + "if 1:\n" + seg if indented else "\n" * (s.first - 1) + seg
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        out += tree.body[0].body if indented else tree.body
    return ast.Module(body=out, type_ignores=[])


def statement_line(
    text: str,
    frags,
    words,
    tree: Optional[ast.Module] = None,
    within: Optional[tuple[int, int]] = None,
    exclude: list[tuple[int, int]] = (),
    outline: Optional[Outline] = None,
) -> Optional[int]:
    """Line of the smallest statement whose tokens contain every fragment.  Uses ``ast``
    (C speed) for statement boundaries, and visits only statements around a line holding
    the rarest word; only statements holding all words are tokenized.  Defs, classes and
    statements longer than MARKER_SPAN lines do not count: fragments scattered over a
    whole class are not upstream's version of an edit.  ``within``: only statements inside
    these (first, last) lines count (a marker's scope).  ``outline``: the text's outline,
    with which only the statements around those lines are parsed (``near``)."""
    lines = view.split_lines(text)
    first = min((w.decode() for w in words), key=text.count) if words else ""
    lo, hi = within or (1, len(lines))
    hot = [i for i, ln in enumerate(lines, 1) if first in ln and lo <= i <= hi]
    if not hot:
        return None
    if tree is None:
        tree = near(text, outline, hot)
    if tree is None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return None
    best = None
    for node in ast_near(tree, hot):
        if not isinstance(node, ast.stmt) or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        end = node.end_lineno or node.lineno
        span = end - node.lineno
        if node.lineno < lo or end > hi:
            continue
        if any(a <= end and node.lineno <= b for a, b in exclude):
            continue  # it holds text the recipe itself wrote
        if span > MARKER_SPAN or (best is not None and (span, node.lineno) >= best):
            continue
        seg = "".join(lines[node.lineno - 1 : end])
        if not all(w.decode() in seg for w in words):
            continue
        have = tokens(seg)
        if all(contains_seq(have, fr) for fr in frags):
            best = (span, node.lineno)
    return best[1] if best else None
