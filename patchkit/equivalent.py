"""Equivalent fixes: when an op's site is gone, did upstream make its edit in other words?

A hint, never a verdict: when the op reads missing, the pristine release's code at the
identified place (the op's named scope there, or else the nearest candidate's scope in the
tree) is searched for the smallest statement (a text file: a line) that mentions at least
SHARE of the edit's *key words*: the words its edit adds that its pattern does not hold,
names split at ``_`` (``sm120`` and ``supported`` of ``_is_sm120_supported``; ``12`` and
``major`` of ``major == 10`` -> ``major in (10, 12)``).  Comments and prose do not count.
The message then says "upstream may have fixed this in other words at FILE:LINE", so that
a person can read it and write a marker (``[[ops.markers]]``) if it is so.
"""

from __future__ import annotations

import ast
import keyword
import re
from typing import Optional

_IDENT = re.compile(r"[A-Za-z_]\w*|\d+")
# Words that say nothing about what an edit does (they are in any code around it).
_STOP = {"is", "self", "cls", "get", "set", "none", "true", "false", "logger", "log", "info", "warning", "debug"}
SHARE = 0.7  # of the key words a statement mentions, to be worth a look
MAX_LINES = 15  # a statement longer than this is not one place


def _words(toks) -> list[str]:
    """Lower-case words of code tokens: identifiers split at ``_`` and case changes,
    numbers, and string literals that are names (``"flashinfer_cutlass"``), not prose."""
    from patchkit.context import name_words

    out = []
    for t in toks:
        t = t.strip()
        if t[:1] in "'\"":
            t = t.strip("'\"")
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+", t):
                continue  # a message, not a name
        for ident in _IDENT.findall(t):
            if keyword.iskeyword(ident):
                continue
            out += [w for w in (name_words(ident) if not ident.isdigit() else (ident,)) if w not in _STOP]
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
    for name in ("match_tokens", "expect_tokens", "anchor", "operands", "contains"):
        for x in getattr(impl, name, None) or ():
            held += list(x) if isinstance(x, tuple) else [x]
    if isinstance(getattr(impl, "find", None), str):
        held.append(impl.find)
    have = set(_words(held))
    keys = [w for w in dict.fromkeys(_words(added)) if w not in have]
    if keys and all(w.isdigit() for w in keys):
        keys += [w for w in dict.fromkeys(_words(held)) if not w.isdigit()][:2]  # `12` alone says little
    return tuple(keys)


def _python_place(text: str, scope: str, keys: tuple[str, ...]) -> Optional[int]:
    """The first line of the smallest statement of ``scope`` that mentions SHARE of the key
    words (comments left out: ``ast.unparse``), or None."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    from patchkit.context import scope_node

    node = scope_node(tree, scope)
    if node is None:
        return None
    best = None
    for s in ast.walk(node):
        if not isinstance(s, ast.stmt) or isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        span = (s.end_lineno or s.lineno) - s.lineno
        if span > MAX_LINES or (best is not None and (span, s.lineno) >= best):
            continue
        try:
            have = set(_words([ast.unparse(s)]))
        except (ValueError, TypeError, AttributeError, RecursionError):
            continue
        if _enough(keys, have):
            best = (span, s.lineno)
    return best[1] if best else None


def _enough(keys: tuple[str, ...], have: set) -> bool:
    hit = sum(1 for k in keys if k in have)
    return hit >= min(2, len(keys)) and hit >= SHARE * len(keys)


def _text_place(text: str, keys: tuple[str, ...]) -> Optional[int]:
    for n, ln in enumerate(text.splitlines(), 1):
        if _enough(keys, set(_words([ln.split("//", 1)[0]]))):
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
        line = _python_place(text, scope, keys) if logical.endswith(".py") else _text_place(text, keys)
        if line:
            return (
                f"upstream may have fixed this in other words at {logical}:{line}"
                f" (it mentions {', '.join(keys)}; a hint, not a verdict: read it, and if so add a marker)"
            )
    return ""
