"""Blockers: code that defeats a recipe, found in the code as it is (or as a plan leaves it).

A recipe may declare ``[[blockers]]``: a file, a scope, fragments of code that stand there
in order, and what that code does to the recipe (``_resolve_backend`` raising for anything
but SM90/SM10X, say: widening the layer gate alone then crashes at the first fused
forward).  While a blocker stands, the recipe is ``blocked``, which never reads as
success, and `apply` refuses to write a recipe that its own edits leave blocked.

Fragments match with any whitespace between their words, so they read as the code does
(``'requires SM90 or SM10X'``), and across line breaks.  They match code only: text that
runs nothing is blanked out before the search (``masked``), offsets and lines kept.  In
Python that is comments and string statements (a docstring, or any other string standing
alone as a statement: it is never used); a string the code uses (the message of a
``raise``) is code.  In C, C++ and CUDA it is ``//`` and ``/* */`` comments (not inside a
string or character literal).  A quote of the pattern in prose (a docstring explaining the
gate that used to stand there) never blocks a recipe.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


C_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inc", ".inl")


def _blank(chars: list, start: int, end: int) -> None:
    """Blank ``chars[start:end]``, keeping line breaks (so offsets and lines stay)."""
    for i in range(start, end):
        if chars[i] not in "\r\n":
            chars[i] = " "


def _python_masked(text: str) -> str:
    """``text`` with its comments and string statements blanked; as it is where it does not
    tokenize, its comments alone blanked where it does not parse (then ``_span`` finds no
    scope either, and only a scope-less blocker reads it)."""
    starts = [0]
    for ln in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(ln))
    chars = list(text)
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, ValueError, tokenize.TokenError):
        return text
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        tree = None  # the comments still go
    lines = text.splitlines(keepends=True)

    def offset(line: int, col: int, utf8: bool = False) -> int:
        if utf8 and line - 1 < len(lines):  # ast's columns count UTF-8 bytes
            col = len(lines[line - 1].encode("utf-8", "surrogateescape")[:col].decode("utf-8", "surrogateescape"))
        return starts[line - 1] + col

    for t in toks:
        if t.type == tokenize.COMMENT:
            _blank(chars, offset(*t.start), offset(*t.end))
    for node in ast.walk(tree) if tree is not None else ():
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, (str, bytes))
        ):
            _blank(
                chars, offset(node.lineno, node.col_offset, True), offset(node.end_lineno, node.end_col_offset, True)
            )
    return "".join(chars)


def _c_masked(text: str) -> str:
    """``text`` with its ``//`` and ``/* */`` comments blanked (a ``//`` or ``/*`` inside a
    string or character literal is not one; a raw string ``R"d(...)d"`` is read whole)."""
    chars = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            while j > 0 and text[j - 1] == "\\":  # a line splice continues the comment
                j = text.find("\n", j + 1)
            j = n if j < 0 else j
            _blank(chars, i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            _blank(chars, i, j)
            i = j
        elif c == '"' and i and text[i - 1] == "R":
            m = re.compile(r'"([^()\\\s]{0,16})\(').match(text, i)
            if m:
                j = text.find(")" + m.group(1) + '"', m.end())
                i = n if j < 0 else j + len(m.group(1)) + 2
            else:
                i += 1
        elif c == "'" and i and text[i - 1].isdigit():  # a digit separator (1'000)
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return "".join(chars)


def masked(text: str, file: str = "x.py") -> str:
    """``text`` as a blocker reads it: what runs nothing blanked (comments, and in Python
    string statements), every offset and line where it was.  Files neither Python nor
    C-like (CMake, shell) are read as they are."""
    if file.endswith((".py", ".pyi")):
        return _python_masked(text)
    if file.endswith(C_SUFFIXES):
        return _c_masked(text)
    return text


def search(text: str, scope: str, contains: tuple[str, ...], file: str = "x.py") -> Optional[int]:
    """The line where ``contains`` stands, in order, as code (not in a comment or a
    docstring: ``masked``) within ``scope`` of ``text`` (the logical name ``file`` says what
    language it is); or None."""
    span = _span(text, scope)
    if span is None:
        return None
    text = masked(text, file)
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
        line = search(text, b.scope, b.contains, b.file)
        if line is not None:
            out.append(Found(recipe.id, b.label, b.file, b.scope, str(doc.path), line, b.message))
    return out
