"""Two refactor classes a site's identity reads as such (context.similarity): the arm of an
``if`` a site stands in, and an if/else of one assignment folded into a conditional expression.

*Arm polarity.*  A statement in the ``else`` arm of ``if C:`` runs exactly where the one in its
true arm does not: code in the opposite arm of the same condition (its normalised text, as
``ast.unparse`` prints it; an ``elif`` is an ``if`` in the outer ``else``) is another site,
however alike its words (SGLang 0.5.20's FP8 default ``default = "trtllm" if major >= 10 else
"flashmla_kv"`` under ``elif kv_cache_dtype == "fp8_e4m3":`` is not the bf16 default the
GLM-5 guide edits in that ``if``'s ``else``).  ``arms`` lists the ifs around a site with the arm
it is in; ``opposite`` names the condition two such lists disagree on.

*Folded if/else.*  ``if C: ...; x = A`` / ``else: ...; x = B``, its two arms the same but for
``x``'s value, is ``...; x = A if C else B`` (pylint's consider-using-ternary, Sourcery's
assign-if-exp; the mirror ``x = B if not C else A`` too).  ``fold`` finds that shape around a
home release's site; ``unfold`` finds a candidate statement of the folded form, with the same
``C``, ``A`` and ``B``, and gives back the statement as the site's arm had it, so that its
header and the other arm's statements, folded into it, are matched there.
"""

from __future__ import annotations

import ast
from typing import Optional

Arms = tuple  # ((condition text, in its true arm), ...), outermost first
# (condition, site in the true arm, site's value, other arm's value, indices of the context
# lines before and after the site that the fold folds away: the if's header, the other arm)
Fold = tuple


def _text(node) -> str:
    from patchkit.context import _unparse

    return _unparse(node)


def _path(tree: ast.Module, line: int) -> list[tuple[ast.If, bool]]:
    """The ifs whose arm holds the statement starting at ``line``, outermost first, inside
    the innermost def or class holding it (an enclosing function's ifs are another scope)."""
    from patchkit.context import _blocks, _spans

    out: list[tuple[ast.If, bool]] = []
    body = tree.body
    while body:
        s = next((s for s in body if _spans(s, line)), None)
        if s is None:
            break
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out = []
        if isinstance(s, ast.If):
            if any(_spans(c, line) for c in s.body):
                out.append((s, True))
            elif any(_spans(c, line) for c in s.orelse):
                out.append((s, False))
            else:
                break  # the site is the if's own header
        body = [c for b in _blocks(s) for c in b]
    return out


def arms(tree: ast.Module, line: int) -> Arms:
    return tuple((_text(s.test), side) for s, side in _path(tree, line))


def opposite(mine: Arms, theirs: Arms) -> Optional[str]:
    """The condition whose other arm ``theirs`` stands in, or None."""
    have = dict(mine)
    return next((t for t, side in theirs if t in have and have[t] != side), None)


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    from patchkit.context import _flat as flat

    out: list[ast.stmt] = []
    flat(body, out)
    return out


def _one_target(s) -> Optional[str]:
    return _text(s.targets[0]) if isinstance(s, ast.Assign) and len(s.targets) == 1 else None


def fold(tree: ast.Module, line: int, site: ast.stmt, before: list, after: list) -> Fold:
    """The fold around a site (``site``: its statement; ``before``/``after``: the nodes of its
    context lines, nearest first), or () when the innermost if/else around it that could fold
    does not: its arms must be the same statements, in order, but for the site's value."""
    target = _one_target(site)
    if target is None:
        return ()
    for node, side in reversed(_path(tree, line)):
        if not node.orelse:
            continue
        mine, other = (node.body, node.orelse) if side else (node.orelse, node.body)
        a, b = _flat(mine), _flat(other)
        at = next((k for k, s in enumerate(a) if s is site), None)
        if at is None or len(a) != len(b) or _one_target(b[at]) != target:
            return ()
        from patchkit.context import stmt

        if any(stmt(x) != stmt(y) for k, (x, y) in enumerate(zip(a, b, strict=True)) if k != at):
            return ()
        va, vb = _text(site.value), _text(b[at].value)
        if va == vb:
            return ()
        gone = {id(node), *(id(s) for s in b)}
        return (_text(node.test), side, va, vb, _among(before, gone), _among(after, gone))
    return ()


def _among(nodes: list, gone: set) -> tuple:
    return tuple(k for k, s in enumerate(nodes) if id(s) in gone)


def unfold(f: Fold, text: str) -> Optional[str]:
    """A candidate statement ``x = A if C else B`` (or ``x = B if not C else A``) of the fold
    ``f``, written back as the site's arm had it (``x = A``); None when it is not that fold."""
    cond, side, a, b = f[0], f[1], f[2], f[3]
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    s = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(s, ast.Assign) or not isinstance(s.value, ast.IfExp):
        return None
    test, yes, no = s.value.test, s.value.body, s.value.orelse
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, yes, no = test.operand, no, yes
    mine, other = (yes, no) if side else (no, yes)
    if _text(test) != cond or _text(mine) != a or _text(other) != b:
        return None
    s.value = mine
    return _text(s)
