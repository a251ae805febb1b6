"""Two refactor classes a site's identity reads as such (context.similarity): the arm of an
``if`` a site stands in, and an if/else of one assignment folded into a conditional expression.

*Arm polarity.*  A statement in the ``else`` arm of ``if C:`` runs exactly where the one in its
true arm does not: code in the opposite arm of the same condition (its normalised text, as
``ast.unparse`` prints it; an ``elif`` is an ``if`` in the outer ``else``) is another site,
however alike its words (SGLang 0.5.20's FP8 default ``default = "trtllm" if major >= 10 else
"flashmla_kv"`` under ``elif kv_cache_dtype == "fp8_e4m3":`` is not the bf16 default the
GLM-5 guide edits in that ``if``'s ``else``).  ``arms`` lists the ifs around a site with the arm
it is in (context.arms); ``opposite`` names the condition two such lists disagree on.

*Folded if/else.*  ``if C: ...; x = A`` / ``else: ...; x = B``, its two arms the same but for
``x``'s value, is ``...; x = A if C else B`` (pylint's consider-using-ternary, Sourcery's
assign-if-exp; the mirror ``x = B if not C else A`` too).  context.fold finds that shape
around a home release's site; ``unfold`` finds a candidate statement of the folded form, with the same
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
    try:
        return ast.unparse(node)
    except (ValueError, TypeError, AttributeError, RecursionError):  # a node unparse cannot print
        return ast.dump(node)


def opposite(mine: Arms, theirs: Arms) -> Optional[str]:
    """The condition whose other arm ``theirs`` stands in, or None."""
    have = dict(mine)
    return next((t for t, side in theirs if t in have and have[t] != side), None)


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
