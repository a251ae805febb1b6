"""replace-stmt: replace one statement (at any depth of the scope) by other statements.

  locator.match  = "self.enable_foo = True"   the statement as upstream writes it, whole (a
                                              compound one with its body), token for token
  locator.after / before / inside             optional context (patchkit/core/ops/_stmt.py): the
                                              statement just above, just below, or the
                                              clause whose body holds it
  params.with    = "pass"                     the statements that stand in its place

Comments and blank lines above the statement stay above its replacement.  Revert writes
``match`` back; the round-trip check refuses an edit that would not restore the original
bytes (write ``match`` exactly as upstream does).  A replacement that is common (``pass``)
needs context, or the edit could not be told from the rest of the scope.
A replacement may hold the statement nested (a ``try:`` around it): the statement inside a
replacement that stands is part of the done edit, not a pending site.
"""

from __future__ import annotations

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import code, node_tokens, parse_stmts, replace_node, walk
from patchkit.core.ops._stmt import CONTEXT, Context


@register("replace-stmt")
class ReplaceStmt(Op):
    LOCATOR = {"match": "str", **CONTEXT}
    PARAMS = {"with": "str"}
    REQUIRED = ("locator.match", "params.with")

    def __init__(self, locator: dict, params: dict) -> None:
        self.match_src, self.with_src = locator["match"], params["with"]
        (self.match,) = self._one(parse_stmts(self.match_src, "locator.match"))
        self.stmts = parse_stmts(self.with_src, "params.with")
        self.old = (node_tokens(self.match),)
        self.new = tuple(node_tokens(s) for s in self.stmts)
        if self.old == self.new:
            raise OpParamError("params.with", "equals locator.match, so the op would change nothing")
        if self.old[0] in self.new:
            raise OpParamError(
                "params.with",
                "holds locator.match, so the edit could not be told from the original",
                "use insert to add statements beside it",
            )
        self.ctx = Context(locator)
        first = code(self.stmts[0])
        self.reads = Reads(
            patterns=((self.match_src,), *((code(s),) for s in self.stmts), *((f,) for f in self.ctx.fragments())),
            whole_statements=True,
            sites=((self.match_src,), (first,)),
        )

    @staticmethod
    def _one(stmts):
        if len(stmts) != 1:
            raise OpParamError("locator.match", f"holds {len(stmts)} statements; it names one", "one op per statement")
        return stmts

    def _where(self, scope):
        olds, news = self.ctx.runs(scope, self.old), self.ctx.runs(scope, self.new)
        if news and olds:
            # A replacement may hold the statement (a `try:` around it): the statement inside
            # a replacement that stands is part of the done edit, not a site still pending.
            held = {id(n) for o, i in news for s in o.body[i : i + len(self.new)] for n in walk(s)}
            olds = [(o, i) for o, i in olds if id(o.body[i]) not in held]
        return olds, news

    def locate(self, scope) -> Located:
        olds, news = self._where(scope)
        around = f" ({self.ctx.describe()})" if self.ctx.src else ""
        if len(olds) == 1 and not news:
            o, i = olds[0]
            return Located(PENDING, (o.body[i],))
        if len(news) == 1 and not olds:
            o, i = news[0]
            return Located(DONE, (o.body[i],))
        if not olds and not news:
            return Located(MISSING, reason=f"statement `{self.match_src.strip()}` not found{around}")
        if olds and news:
            nodes = tuple(o.body[i] for o, i in olds + news)
            return Located(MISSING, nodes, "both the statement and its replacement stand: partially edited")
        found = olds or news
        what = "the statement" if olds else "the replacement"
        return Located(
            AMBIGUOUS,
            tuple(o.body[i] for o, i in found),
            f"{what} stands {len(found)} times{around}; give after/before/inside to tell them apart",
        )

    def is_applied(self, scope) -> bool:
        # The goal, read on its own: the replacement stands once in its context, the original nowhere there.
        olds, news = self._where(scope)
        return len(news) == 1 and not olds

    def apply(self, scope):
        ((owner, i),) = self.ctx.runs(scope, self.old)
        old = owner.body[i]
        new = [self.stmts[0].with_changes(leading_lines=old.leading_lines), *self.stmts[1:]]
        body = [*owner.body[:i], *new, *owner.body[i + 1 :]]
        return replace_node(scope, owner, owner.with_changes(body=body))

    def revert(self, scope):
        ((owner, i),) = self.ctx.runs(scope, self.new)
        first = owner.body[i]
        back = self.match.with_changes(leading_lines=first.leading_lines)
        body = [*owner.body[:i], back, *owner.body[i + len(self.stmts) :]]
        return replace_node(scope, owner, owner.with_changes(body=body))
