"""Upstream markers: does upstream's own version of an edit stand somewhere in the tree?

A recipe may say what upstream's version of its edit looks like (``[[ops.markers]]``).
When the op's own site reads pending or is gone, a matching marker makes the verdict
``upstream``: the recipe can be retired.
"""

from __future__ import annotations

import ast
from typing import Optional

from patchkit import fsio, relocate, view
from patchkit.errors import TargetError
from patchkit.model import OpSpec
from patchkit.ops._cst import ast_near, contains_seq, tokens

MARKER_SPAN = 60  # lines: a marker recognises one local piece of code, not a whole module


def hit(session, op: OpSpec, anywhere: bool) -> Optional[str]:
    """Where upstream's version of this edit stands, in the marker's file or (with
    ``anywhere``, for ops whose own site is gone) in any file of the engine holding its
    words; None when nowhere."""
    for m in op.markers:
        f = session.file(op.engine, m.file)
        if not f.is_python:
            if f.exists and all(frag in f.text for frag in m.contains):
                return f"upstream marker matched in {m.file}"
            continue
        frags = [tokens(c) for c in m.contains]
        words = tuple(w for c in m.contains for w in relocate.word_bytes(c))
        for logical, path in _files(session, op, m.file, f, anywhere):
            try:
                data = fsio.read_file(path)
            except TargetError:
                continue  # a FIFO, a directory, an unreadable file: no marker we could vouch for
            if data is not None and all(w in data for w in words):
                own = logical == m.file
                span = f.scope_span(m.scope) if own and m.scope else None
                if own and m.scope and span is None:
                    continue  # the marker's scope is not in its file: it cannot stand there
                line = statement_line(data.decode("utf-8", "replace"), frags, words, f.tree if own else None, span)
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


def statement_line(
    text: str, frags, words, tree: Optional[ast.Module] = None, within: Optional[tuple[int, int]] = None
) -> Optional[int]:
    """Line of the smallest statement whose tokens contain every fragment.  Uses ``ast``
    (C speed) for statement boundaries, and visits only statements around a line holding
    the rarest word; only statements holding all words are tokenized.  Defs, classes and
    statements longer than MARKER_SPAN lines do not count: fragments scattered over a
    whole class are not upstream's version of an edit.  ``within``: only statements inside
    these (first, last) lines count (a marker's scope)."""
    lines = view.split_lines(text)
    first = min((w.decode() for w in words), key=text.count) if words else ""
    lo, hi = within or (1, len(lines))
    hot = [i for i, ln in enumerate(lines, 1) if first in ln and lo <= i <= hi]
    if not hot:
        return None
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
        if span > MARKER_SPAN or (best is not None and (span, node.lineno) >= best):
            continue
        seg = "".join(lines[node.lineno - 1 : end])
        if not all(w.decode() in seg for w in words):
            continue
        have = tokens(seg)
        if all(contains_seq(have, fr) for fr in frags):
            best = (span, node.lineno)
    return best[1] if best else None
