"""insert: add statements before/after an anchor statement, or at the start/end of the scope.

locator.anchor   = 'if self.moe_runner_backend == "flashinfer_cutlass":'
                   a statement, or the header of a compound one (compared token by token,
                   so layout and comments do not matter)
locator.position = "before" | "after"          (with anchor; default "after")
locator.at       = "start" | "end"             (instead of anchor: of the scope's body ...)
locator.inside   = "elif x == 1"               (... or, with at, of the body of this clause:
                   an if/elif/else, for, while, with, try/except/finally header at any depth,
                   the colon may be left out)
An anchor is found at any depth of the scope: in the bodies of its if/elif/else, for,
while, with and try clauses (not in nested defs and classes, which are scopes of their own).
params.code      = the statements; blank lines above the first one are kept, so the
                   snippet decides its own spacing.  Revert removes exactly these.
"""

from __future__ import annotations

import libcst as cst

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import (
    blocks,
    clauses,
    code,
    header_tokens,
    may_print_as,
    node_tokens,
    parse_stmts,
    replace_node,
    statement_tokens,
)


def _scope_block(scope):
    if isinstance(scope, cst.Module):
        return scope
    body = getattr(scope, "body", None)
    return body if isinstance(body, cst.IndentedBlock) else None


@register("insert")
class Insert(Op):
    LOCATOR = {"anchor": "str", "position": "str", "at": "str", "inside": "str"}
    PARAMS = {"code": "str"}
    REQUIRED = ("params.code",)

    def __init__(self, locator: dict, params: dict) -> None:
        if ("anchor" in locator) == ("at" in locator):
            raise OpParamError(
                "locator", "needs exactly one of anchor, at", 'e.g. locator = { anchor = "x = 1", position = "after" }'
            )
        self.anchor_src = locator.get("anchor")
        self.anchor = statement_tokens(self.anchor_src) if self.anchor_src else None
        if self.anchor is not None and not self.anchor:
            raise OpParamError("locator.anchor", "is empty")
        self.position = locator.get("position", "after")
        if self.position not in ("before", "after"):
            raise OpParamError("locator.position", f"must be 'before' or 'after', not {self.position!r}")
        if "position" in locator and "at" in locator:
            raise OpParamError("locator.position", "only goes with anchor")
        self.at = locator.get("at")
        self.inside_src = locator.get("inside")
        self.inside = statement_tokens(self.inside_src) if self.inside_src else None
        if self.inside_src is not None and self.at is None:
            raise OpParamError("locator.inside", "goes with at (start or end of that clause's body)")
        if self.at is not None and self.at not in ("start", "end"):
            raise OpParamError("locator.at", f"must be 'start' or 'end', not {self.at!r}")
        self.params_code = params["code"]  # as written: goal.present reads its meaning
        self.stmts = parse_stmts(params["code"], "params.code")
        self.stmt_tokens = tuple(node_tokens(s) for s in self.stmts)
        snippet = tuple(code(s) for s in self.stmts)
        if self.at is not None:
            # The first or last statement of the scope, whatever it is.  Relocation follows only
            # a snippet that already stands: a pending site could be any scope of any file.
            self.reads = Reads(None, whole_statements=True, sites=((snippet[0],),))
            if self.inside_src:
                self.reads = Reads(
                    None,
                    whole_statements=True,
                    file_words=(self.inside_src,),
                    sites=((self.inside_src,), (snippet[0],)),
                )
        else:
            # Anchors and the snippet are whole statements, the snippet found statement by
            # statement.  A file holding the site holds the anchor, and the anchor statement
            # (pending) or the snippet's first statement (done).
            self.reads = Reads(
                patterns=((self.anchor_src,), *((c,) for c in snippet)),
                whole_statements=True,
                file_words=(self.anchor_src,),
                sites=((self.anchor_src,), (snippet[0],)),
            )

    def _existing(self, scope) -> list:
        """(owner, index) of every place the snippet already stands, consecutively."""
        n, first, hits = len(self.stmts), self.stmt_tokens[0], []
        for owner, body in blocks(scope):
            for i in range(len(body) - n + 1):
                if (may_print_as(body[i], first) and node_tokens(body[i]) == first) and all(
                    may_print_as(body[i + k], self.stmt_tokens[k]) and node_tokens(body[i + k]) == self.stmt_tokens[k]
                    for k in range(1, n)
                ):
                    hits.append((owner, i))
        return hits

    def _is_anchor(self, stmt) -> bool:
        """The anchor is a whole statement, or a compound one's header: never a statement
        it is only the start of (`x = 1` is not `x = 1 + 2`).  A def's (class's) header is
        its `def` line, with or without the decorators above it: upstream decorating the
        anchor def (`@functools.cache`) leaves it the same def.  "before" it is before them."""
        if may_print_as(stmt, self.anchor) and node_tokens(stmt) == self.anchor:
            return True
        if isinstance(stmt, cst.SimpleStatementLine):
            return False
        if header_tokens(stmt) == self.anchor:
            return True
        decorated = isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.decorators
        return bool(decorated) and header_tokens(stmt.with_changes(decorators=())) == self.anchor

    def _anchors(self, scope) -> list:
        return [(owner, i) for owner, body in blocks(scope) for i, stmt in enumerate(body) if self._is_anchor(stmt)]

    def _where(self, scope):
        """(owner, index) where the snippet goes, or a Located explaining why not."""
        if self.inside is not None:
            found = [c for h, c, _ in clauses(scope) if h == self.inside and isinstance(c.body, cst.IndentedBlock)]
            if len(found) != 1:
                state = MISSING if not found else AMBIGUOUS
                return Located(state, tuple(found), f"clause `{self.inside_src}` stands {len(found)} times")
            block = found[0].body
            return block, (0 if self.at == "start" else len(block.body))
        if self.at is not None:
            block = _scope_block(scope)
            if block is None:
                return Located(MISSING, reason="scope has no body to insert into")
            return block, (0 if self.at == "start" else len(block.body))
        hits = self._anchors(scope)
        if not hits:
            return Located(MISSING, reason=f"anchor statement `{self.anchor_src}` not found")
        if len(hits) > 1:
            return Located(
                AMBIGUOUS,
                tuple(o.body[i] for o, i in hits),
                f"anchor statement `{self.anchor_src}` matches {len(hits)} statements",
            )
        owner, i = hits[0]
        return owner, (i if self.position == "before" else i + 1)

    def locate(self, scope) -> Located:
        have = self._existing(scope)
        if len(have) == 1:
            owner, i = have[0]
            return Located(DONE, (owner.body[i],))
        if len(have) > 1:
            return Located(
                AMBIGUOUS, tuple(o.body[i] for o, i in have), f"the inserted statements stand {len(have)} times"
            )
        where = self._where(scope)
        if isinstance(where, Located):
            return where
        owner, i = where
        site = owner.body[i] if i < len(owner.body) else (owner.body[i - 1] if owner.body else owner)
        return Located(PENDING, (site,))

    def is_applied(self, scope) -> bool:
        # The goal on its own: the snippet stands once, where the locator puts it (beside
        # the anchor, or at the start/end of its block).
        have = self._existing(scope)
        if len(have) != 1:
            return False
        owner, i = have[0]
        n, body = len(self.stmts), owner.body
        if self.anchor is not None:
            j = i + n if self.position == "before" else i - 1
            return 0 <= j < len(body) and self._is_anchor(body[j])
        if self.inside is not None:
            if not any(h == self.inside and c.body is owner for h, c, _ in clauses(scope)):
                return False
        elif owner is not _scope_block(scope):
            return False
        return i == 0 if self.at == "start" else i + n == len(body)

    def apply(self, scope):
        owner, i = self._where(scope)
        body = list(owner.body)
        body[i:i] = self.stmts
        return replace_node(scope, owner, owner.with_changes(body=body))

    def revert(self, scope):
        ((owner, i),) = self._existing(scope)
        body = list(owner.body)
        del body[i : i + len(self.stmts)]
        return replace_node(scope, owner, owner.with_changes(body=body))
