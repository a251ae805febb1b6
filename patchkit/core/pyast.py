"""A Python file's ``ast``, parsed once per text for the invocation.

The judge reads one file's tree in several places (the document, the search for a moved
site, the identity of a site, the goals, the equivalence of code), and each parsed it again:
on SGLang 0.5.22 over the corpus recipes, 253 parses of 108 texts, 16% of the judge's time.
Trees are shared: patchkit never changes a parsed tree (an edit is made on libcst's, and what
rewrites an ``ast`` parses or copies its own).  A text that does not parse raises again each
time, as ``ast.parse`` does."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Optional


@lru_cache(maxsize=16)
def parsed(text: str) -> ast.Module:
    """``ast.parse(text)``, the same tree for the same text (its exceptions, every time)."""
    return ast.parse(text)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # as CPython's parser splits lines


@lru_cache(maxsize=16)
def _lines(text: str) -> tuple[bytes, ...]:
    return tuple(m.group().encode() for m in _LINE.finditer(text))


def segment(text: str, node: ast.AST) -> Optional[str]:
    """``ast.get_source_segment(text, node)``, with the text split into lines once per text
    rather than on every call (which makes a walk over a 5,000-line file's nodes quadratic:
    seconds on SGLang's server_args.py).  None where the node has no end position."""
    end, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end is None or end_col is None:
        return None
    lines = _lines(text)
    a, b, col = node.lineno - 1, end - 1, node.col_offset
    if a == b:
        return lines[a][col:end_col].decode()
    return b"".join([lines[a][col:], *lines[a + 1 : b], lines[b][:end_col]]).decode()
