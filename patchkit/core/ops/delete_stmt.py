"""delete-stmt: take one statement (at any depth of the scope) out.

  locator.match  = "self.disable_foo()"       the statement as upstream writes it, whole,
                                              with the comment and blank lines above it
                                              that go with it
  locator.after / before                      the statement just above / just below it (one
                                              is required: it is where revert puts it back)
  locator.inside                              optional: the clause whose body holds it

Revert puts ``match`` back between ``after`` and ``before``; the round-trip check refuses an
edit that would not restore the original bytes.  A statement that is its block's only one
has no neighbour, so it is never found: use replace-stmt with ``pass``.
"""

from __future__ import annotations

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import node_tokens, parse_stmts, replace_node
from patchkit.core.ops._stmt import CONTEXT, Context


@register("delete-stmt")
class DeleteStmt(Op):
    LOCATOR = {"match": "str", **CONTEXT}
    PARAMS: dict = {}
    REQUIRED = ("locator.match",)

    def __init__(self, locator: dict, params: dict) -> None:
        if "after" not in locator and "before" not in locator:
            raise OpParamError(
                "locator",
                "needs after or before (the statement next to the one deleted), so that revert knows where it goes",
                'e.g. locator = { match = "x = 1", after = "y = 2" }',
            )
        self.match_src = locator["match"]
        stmts = parse_stmts(self.match_src, "locator.match")
        if len(stmts) != 1:
            raise OpParamError("locator.match", f"holds {len(stmts)} statements; it names one", "one op per statement")
        self.match = stmts[0]
        self.old = (node_tokens(self.match),)
        self.ctx = Context(locator)
        if self.old[0] in self.ctx.tok.values():
            raise OpParamError("locator", "a context statement equals the deleted one, so done could not be told")
        self.reads = Reads(
            patterns=((self.match_src,), *((f,) for f in self.ctx.fragments())),
            whole_statements=True,
            sites=tuple((f,) for f in self.ctx.fragments()),
        )

    def _gaps(self, scope) -> list:
        """Places in context where the statement is not (where it was deleted).  With one
        neighbour only, a statement standing anywhere else in the scope means it moved, not
        that it was deleted: no gap then (both neighbours side by side are evidence enough)."""
        if not ("after" in self.ctx.tok and "before" in self.ctx.tok) and Context({}).runs(scope, self.old):
            return []
        return [(o, i) for o, i in self.ctx.gaps(scope) if i >= len(o.body) or node_tokens(o.body[i]) != self.old[0]]

    def locate(self, scope) -> Located:
        olds = self.ctx.runs(scope, self.old)
        if len(olds) == 1:
            o, i = olds[0]
            return Located(PENDING, (o.body[i],))
        if len(olds) > 1:
            return Located(
                AMBIGUOUS, tuple(o.body[i] for o, i in olds), f"the statement stands {len(olds)} times in its context"
            )
        gaps = self._gaps(scope)
        if len(gaps) == 1:
            o, i = gaps[0]
            return Located(DONE, (o.body[min(i, len(o.body) - 1)],) if o.body else ())
        if not gaps:
            return Located(
                MISSING,
                reason=f"statement `{self.match_src.strip()}` not found, nor its context ({self.ctx.describe()})",
            )
        return Located(
            AMBIGUOUS,
            tuple(o.body[min(i, len(o.body) - 1)] for o, i in gaps if o.body),
            f"its context ({self.ctx.describe()}) stands {len(gaps)} times",
        )

    def is_applied(self, scope) -> bool:
        # The goal on its own: the statement is gone from its context, and that context stands once.
        return not self.ctx.runs(scope, self.old) and len(self._gaps(scope)) == 1

    def apply(self, scope):
        ((owner, i),) = self.ctx.runs(scope, self.old)  # a neighbour stands beside it: the block keeps one
        body = [*owner.body[:i], *owner.body[i + 1 :]]
        return replace_node(scope, owner, owner.with_changes(body=body))

    def revert(self, scope):
        ((owner, i),) = self._gaps(scope)
        body = [*owner.body[:i], self.match, *owner.body[i:]]
        return replace_node(scope, owner, owner.with_changes(body=body))
