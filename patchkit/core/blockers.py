"""Blockers: code that defeats a recipe, found in the code as it is (or as a plan leaves it).

A recipe may declare ``[[blockers]]``: a file, a scope, fragments of code that stand there
in order, and what that code does to the recipe (``_resolve_backend`` raising for anything
but SM90/SM10X, say: widening the layer gate alone then crashes at the first fused
forward).  While a blocker stands, the recipe is ``blocked``, which never reads as
success, and `apply` refuses to write a recipe that its own edits leave blocked.

Fragments match with any whitespace between their words, so they read as the code does
(``'requires SM90 or SM10X'``), and across line breaks.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple, Optional

from patchkit.base.model import Recipe


class Found(NamedTuple):
    recipe: str
    label: str  # "blocker #1"
    file: str  # logical name
    scope: str
    path: str  # where it is, absolute
    line: int
    message: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"

    def to_json(self) -> dict:
        return {"blocker": self.label, "file": self.file, "path": self.path, "line": self.line, "message": self.message}


def _pattern(fragment: str) -> re.Pattern:
    return re.compile(r"\s+".join(re.escape(w) for w in fragment.split()))


def _span(text: str, scope: str) -> Optional[tuple[int, int]]:
    """(start, end) character offsets of def/class ``scope`` in ``text``; the whole text for
    no scope; None when the scope is not there (or the text is not Python)."""
    if not scope:
        return 0, len(text)
    try:
        node = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for part in scope.split("."):
        hits = [
            d
            for d in getattr(node, "body", ())
            if isinstance(d, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == part
        ]
        if not hits:
            return None
        node = hits[-1]  # the definition that stands last is the one Python uses
    starts = [0]
    for ln in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(ln))
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return starts[first - 1], starts[min(node.end_lineno, len(starts) - 1)]


def search(text: str, scope: str, contains: tuple[str, ...]) -> Optional[int]:
    """The line where ``contains`` stands, in order, within ``scope`` of ``text``; or None."""
    span = _span(text, scope)
    if span is None:
        return None
    pos, end, first = span[0], span[1], None
    for frag in contains:
        m = _pattern(frag).search(text, pos, end)
        if m is None:
            return None
        first = m.start() if first is None else first
        pos = m.end()
    return text.count("\n", 0, first) + 1 if first is not None else None


def find(session, recipe: Recipe, planned: Optional[dict] = None) -> list[Found]:
    """The blockers of ``recipe`` that stand in the targets: in the files as they are, or
    as a plan's edits leave them (``planned``: (engine, logical) -> the file's new bytes)."""
    out = []
    for b in recipe.blockers:
        if b.engine not in session.targets:
            continue
        doc = session.file(b.engine, b.file)
        if not doc.exists:
            continue
        new = planned.get((b.engine, b.file)) if planned else None
        text = new.decode("utf-8", "surrogateescape") if new is not None else doc.text
        line = search(text, b.scope, b.contains)
        if line is not None:
            out.append(Found(recipe.id, b.label, b.file, b.scope, str(doc.path), line, b.message))
    return out
