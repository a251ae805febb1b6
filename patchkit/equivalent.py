"""Equivalent fixes: when an op's site is gone, did upstream make its edit in other words?

A hint, never a verdict: when the op reads missing, the pristine release's code at the
identified place (the op's named scope there, or else the nearest candidate's scope in the
tree) is searched for a line that mentions every *key token* of the edit, the words the
edit adds that its pattern does not hold (``_is_sm120_supported`` of an or-operand,
``12`` and ``major`` of ``major == 10`` -> ``major in (10, 12)``).  Comments do not count.
The message then says "upstream may have fixed this in other words at FILE:LINE", so that
a person can read it and write a marker (``[[ops.markers]]``) if it is so.
"""

from __future__ import annotations

import ast
import keyword
import re
from typing import Optional

_WORD = re.compile(r"[A-Za-z_]\w*|\d+")
_CONSTANTS = {"True", "False", "None", "self", "cls"}


def _words(toks) -> list[str]:
    out = []
    for t in toks:
        for w in _WORD.findall(t.strip("'\"")):
            if not keyword.iskeyword(w) and w not in _CONSTANTS:
                out.append(w.lstrip("_") or w)
    return out


def key_tokens(op) -> tuple[str, ...]:
    """The words the op's edit adds that its pattern does not already hold."""
    impl = op.impl
    added: list = []
    for name in ("operand_tokens", "element_tokens", "with_tokens", "value_tokens"):
        added += list(getattr(impl, name, None) or ())
    for st in getattr(impl, "stmt_tokens", None) or ():
        added += list(st)
    if getattr(impl, "language", "") == "text" and isinstance(getattr(impl, "replace", None), str):
        added.append(impl.replace)
    held: list = []
    for name in ("match_tokens", "expect_tokens", "anchor"):
        held += list(getattr(impl, name, None) or ())
    if isinstance(getattr(impl, "find", None), str):
        held.append(impl.find)
    have = set(_words(held))
    keys = [w for w in dict.fromkeys(_words(added)) if w not in have]
    if keys and all(w.isdigit() for w in keys):
        keys += [w for w in dict.fromkeys(_words(held)) if not w.isdigit()][:2]  # `12` alone says little
    return tuple(keys)


def _span(text: str, scope: str) -> Optional[tuple[int, int]]:
    """(first, last) line of def/class ``scope`` ("" = the whole file), or None."""
    lines = text.count("\n") + 1
    if not scope:
        return 1, lines
    try:
        node: object = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    for part in scope.split("."):
        hits = [
            d
            for d in getattr(node, "body", ())
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and d.name == part
        ]
        if len(hits) != 1:
            return None
        node = hits[0]
    return node.lineno, node.end_lineno or node.lineno


def _mentions(text: str, span: tuple[int, int], keys: tuple[str, ...], python: bool) -> Optional[int]:
    lines = text.splitlines()
    for n in range(span[0], min(span[1], len(lines)) + 1):
        ln = lines[n - 1]
        code = ln.split("#", 1)[0] if python else ln.split("//", 1)[0]
        if all(re.search(rf"(?<![A-Za-z0-9]){re.escape(k)}(?![A-Za-z0-9])", code) for k in keys):
            return n
    return None


def hint(session, op, candidates) -> str:
    """ "upstream may have fixed this in other words at FILE:LINE", or ""."""
    keys = key_tokens(op)
    if not keys:
        return ""
    places = []
    ref = session.reference(op.engine)
    if ref.available:
        data = ref.read(op.file)
        if data is not None:
            places.append((op.file, op.scope, data.decode("utf-8", "replace"), "the release"))
    for c in candidates[:1]:
        f = session.file(op.engine, c["location"].split("::", 1)[0])
        if f.exists:
            places.append((f.logical, c["location"].split("::", 1)[1].replace("<module>", ""), f.text, "the tree"))
    for logical, scope, text, _ in places:
        span = _span(text, scope) if logical.endswith(".py") else (1, text.count("\n") + 1)
        line = _mentions(text, span, keys, logical.endswith(".py")) if span else None
        if line:
            return (
                f"upstream may have fixed this in other words at {logical}:{line}"
                f" (it mentions {', '.join(keys)}; a hint, not a verdict: read it, and if so add a marker)"
            )
    return ""
