"""replace-expr: replace an expression matched structurally (token for token, any layout).

  locator.match = "major == 10"          the expression as upstream writes it
  locator.count = 1                       how many occurrences the scope must hold (default 1)
  params.with   = "major in (10, 12)"     the replacement

Revert writes ``match`` back; the engine's round-trip check refuses the edit if that would
not restore the original bytes (write ``match`` exactly as upstream does).
"""

from __future__ import annotations

import libcst as cst

from patchkit.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.ops._cst import contains_seq, node_tokens, parse_expr, tokens, walk


@register("replace-expr")
class ReplaceExpr(Op):
    LOCATOR = {"match": "str", "count": "int"}
    PARAMS = {"with": "str"}
    REQUIRED = ("locator.match", "params.with")

    def __init__(self, locator: dict, params: dict) -> None:
        self.match_src, self.with_src = locator["match"], params["with"]
        self.match = parse_expr(self.match_src, "locator.match")
        self.repl = parse_expr(self.with_src, "params.with")
        self.match_tokens, self.with_tokens = tokens(self.match_src), tokens(self.with_src)
        if self.match_tokens == self.with_tokens:
            raise OpParamError("params.with", "equals locator.match, so the op would change nothing")
        if contains_seq(self.with_tokens, self.match_tokens):
            raise OpParamError(
                "params.with", "contains locator.match, so applying twice would nest it", "match a larger expression"
            )
        self.count = locator.get("count", 1)
        if self.count < 1:
            raise OpParamError("locator.count", f"must be at least 1, not {self.count}")
        # Occurrences, pending or done.  Relocation greps for what upstream wrote.
        self.reads = Reads(patterns=((self.match_src,), (self.with_src,)), file_words=(self.match_src,))

    def _find(self, scope, want: tuple) -> list:
        out = []
        for n in walk(scope):
            if isinstance(n, cst.BaseExpression) and node_tokens(n) == want:
                out.append(n)
        return out

    def locate(self, scope) -> Located:
        olds, news = self._find(scope, self.match_tokens), self._find(scope, self.with_tokens)
        if not olds and len(news) == self.count:
            return Located(DONE, tuple(news))
        if len(olds) == self.count and not news:
            return Located(PENDING, tuple(olds))
        if not olds and not news:
            return Located(MISSING, reason=f"`{self.match_src}` not found")
        if olds and news:
            return Located(
                MISSING, tuple(olds + news), f"both `{self.match_src}` and `{self.with_src}` present: partially edited"
            )
        return Located(
            AMBIGUOUS, tuple(olds or news), f"expected {self.count} occurrence(s), found {len(olds or news)}"
        )

    def _swap(self, scope, want: tuple, new):
        targets = {id(n) for n in self._find(scope, want)}

        class _T(cst.CSTTransformer):
            def on_leave(self, original, updated):
                if id(original) in targets:
                    return (
                        new.with_changes(lpar=getattr(original, "lpar", ()), rpar=getattr(original, "rpar", ()))
                        if getattr(original, "lpar", ())
                        else new
                    )
                return updated

        return scope.visit(_T())

    def apply(self, scope):
        return self._swap(scope, self.match_tokens, self.repl)

    def revert(self, scope):
        return self._swap(scope, self.with_tokens, self.match)
