"""Equivalent fixes: when an op's site is gone, did upstream make its edit in other words?

A hint, never a verdict: when the op reads missing, the pristine release's code at the
identified place (the op's named scope there, the functions that scope now calls or hands
on by name, one level, or else the nearest candidate's scope in the tree) is searched
for the smallest statement (a text file: a line) that mentions at least SHARE of the
edit's *key words*: the words its edit adds that its pattern does not hold, names split
at ``_`` (``sm120`` and ``supported`` of ``_is_sm120_supported``; ``12`` and ``major`` of
``major == 10`` -> ``major in (10, 12)``).  Comments and prose do not count.  The message
then says "upstream may have fixed this in other words at FILE:LINE", so that a person can
read it and write a marker (``[[ops.markers]]``) if it is so; `port` drafts that marker
(``fragments``) as a *proposed* one, which counts only once a person confirms it.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass
from typing import Optional

_IDENT = re.compile(r"[A-Za-z_]\w*|\d+")
# Words that say nothing about what an edit does (they are in any code around it).
_STOP = {"is", "self", "cls", "get", "set", "none", "true", "false", "logger", "log", "info", "warning", "debug"}
SHARE = 0.7  # of the key words a statement mentions, to be worth a look
MAX_LINES = 15  # a statement longer than this is not one place
MAX_DELEGATES = 8  # functions a scope calls, followed one level
MAX_FRAGMENTS = 4  # pieces of code a proposed marker lists
MAX_FRAGMENT = 120  # characters of one piece


def _words(toks) -> list[str]:
    """Lower-case words of code tokens: identifiers split at ``_`` and case changes,
    numbers, and string literals that are names (``"flashinfer_cutlass"``), not prose."""
    from patchkit.core.context import name_words

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


def _python_place(text: str, scope: str, keys: tuple[str, ...]) -> Optional[tuple[int, int]]:
    """(first, last) line of the smallest statement of ``scope`` that mentions SHARE of the
    key words (comments left out: ``ast.unparse``), or None."""
    tree = _parse(text)
    if tree is None:
        return None
    from patchkit.core.context import scope_node

    node = scope_node(tree, scope)
    if node is None:
        return None
    return _smallest(node, keys)


def _parse(text: str) -> Optional[ast.Module]:
    """A release's file parsed once for the scope, its delegates and the next op (pyast)."""
    from patchkit.core import pyast

    try:
        return pyast.parsed(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _smallest(node, keys: tuple[str, ...]) -> Optional[tuple[int, int]]:
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
    return (best[1], best[1] + best[0]) if best else None


def _delegates(text: str, logical: str, scope: str) -> list[tuple[str, str]]:
    """(file, def) of the functions the scope calls or hands on by name, one level, that the
    file defines at module level or imports from a module of the same package tree (a
    refactor that moves a scope's code into a helper leaves the scope calling it:
    ``run_post_process_pass(self, _moe_runner_backend_quant_constraints)``)."""
    tree = _parse(text)
    if tree is None:
        return []
    from patchkit.core.context import imports_of, module_of, scope_node

    node = scope_node(tree, scope)
    if node is None or node is tree:
        return []
    own = {d.name for d in tree.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))}
    imported = {name: mod for mod, name in imports_of(tree, logical) if name}
    top = module_of(logical).split(".", 1)[0]
    out: list[tuple[str, str]] = []
    for n in ast.walk(node):
        name = n.id if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) else ""
        if not name or name == scope.rsplit(".", 1)[-1]:
            continue
        if name in own:
            where = (logical, name)
        elif name in imported and imported[name].split(".", 1)[0] == top:
            where = (imported[name].replace(".", "/") + ".py", name)
        else:
            continue
        if where not in out:
            out.append(where)
    return out[:MAX_DELEGATES]


def _enough(keys: tuple[str, ...], have: set) -> bool:
    hit = sum(1 for k in keys if k in have)
    return hit >= min(2, len(keys)) and hit >= SHARE * len(keys)


def _text_place(text: str, keys: tuple[str, ...]) -> Optional[tuple[int, int]]:
    for n, ln in enumerate(text.splitlines(), 1):
        if _enough(keys, set(_words([ln.split("//", 1)[0]]))):
            return n, n
    return None


@dataclass(frozen=True)
class Place:
    """Where upstream may have made the edit in other words: the statement (a text file:
    the line) at ``file:line`` .. ``end``, in ``scope``, mentioning ``keys``."""

    file: str
    scope: str
    line: int
    end: int
    text: str  # the statement's lines
    keys: tuple[str, ...]


def find(session, op, candidates) -> Optional[Place]:
    """The place, or None: the op's named scope in the release, then the functions that
    scope now calls (one level), then the scope of the nearest candidate in the tree."""
    keys = key_tokens(op)
    if not keys:
        return None
    python = op.file.endswith(".py")
    ref = session.reference(op.engine)

    def released(logical: str) -> Optional[str]:
        data = ref.read(logical) if ref.available else None
        return None if data is None else data.decode("utf-8", "replace")

    places = []
    own = released(op.file)
    if own is not None:
        places.append((op.file, op.scope, own))
        if python and op.scope:
            for lf, name in _delegates(own, op.file, op.scope):
                text = own if lf == op.file else released(lf)
                if text is not None:
                    places.append((lf, name, text))
    for c in candidates[:1]:
        f = session.file(op.engine, c["location"].split("::", 1)[0])
        if f.exists:
            places.append((f.logical, c["location"].split("::", 1)[1].replace("<module>", ""), f.text))
    for logical, scope, text in places:
        span = _python_place(text, scope, keys) if logical.endswith(".py") else _text_place(text, keys)
        if span:
            lines = text.splitlines()[span[0] - 1 : span[1]]
            return Place(logical, scope if logical.endswith(".py") else "", span[0], span[1], "\n".join(lines), keys)
    return None


def hint(session, op, candidates) -> str:
    """ "upstream may have fixed this in other words at FILE:LINE", or ""."""
    p = find(session, op, candidates)
    if p is None:
        return ""
    proposed = [m for m in getattr(op, "markers", ()) if m.proposed]
    then = (
        f"if so confirm the proposed marker (recipe line {proposed[0].line}) by deleting its `proposed` line"
        if proposed
        else "if so add a marker"
    )
    return (
        f"upstream may have fixed this in other words at {p.file}:{p.line}"
        f" (it mentions {', '.join(p.keys)}; a hint, not a verdict: read it, and {then})"
    )


def fragments(place: Place) -> list[str]:
    """What a marker for ``place`` lists: the pieces of its statement that mention a key
    word (an ``if``'s conditions, a call, an assignment in its body), as upstream wrote
    them, at most MAX_FRAGMENTS; a text file's line as it stands."""
    if not place.file.endswith(".py"):
        return [place.text.split("//", 1)[0].strip()]
    import textwrap

    from patchkit.core.pyast import segment

    src = textwrap.dedent(place.text)
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return [place.text.strip().splitlines()[0]]
    keys = set(place.keys)
    out: list[str] = []

    def mentions(node) -> bool:
        try:
            return bool(keys & set(_words([ast.unparse(node)])))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return False

    def visit(node) -> None:
        if len(out) >= MAX_FRAGMENTS:
            return
        if isinstance(node, ast.BoolOp) or isinstance(node, (ast.If, ast.While)) or isinstance(node, ast.Module):
            kids = node.values if isinstance(node, ast.BoolOp) else [getattr(node, "test", None), *node.body]
            for k in kids:
                if k is not None:
                    visit(k)
            return
        if isinstance(node, (ast.Expr, ast.Return)) and node.value is not None:
            visit(node.value)
            return
        if isinstance(node, ast.expr) or isinstance(node, ast.stmt):
            seg = segment(src, node) or ""
            if seg and mentions(node) and len(seg) <= MAX_FRAGMENT and "\n" not in seg and seg not in out:
                out.append(seg)

    visit(tree)
    return out or [place.text.strip().splitlines()[0].strip()]
