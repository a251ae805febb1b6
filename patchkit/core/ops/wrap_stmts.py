"""wrap-stmts: put a run of consecutive statements inside a new ``if``, ``with`` or ``try``.

  locator.match  = "a = load()\\nb = a.check()"   the statements as upstream writes them,
                                                  token for token, one after the other
  locator.after / before / inside                 optional context (patchkit/core/ops/_stmt.py)
  params.header  = "if not _is_sm120:"            the new compound statement's first line
  params.footer  = "except ImportError:\\n    pass" optional: clauses after the body (a
                                                  ``try`` needs its ``except``/``finally``)

Real patches often guard a few statements at once ("skip this block on SM120").  Written
as a delete-stmt and a replace-stmt, such an edit cannot be read back: after it, the
statement the delete-stmt took out stands again, inside the new block.  One op for the
whole run knows its site both ways: pending, the run stands as upstream wrote it; done, a
compound statement with that header holds exactly the run as its body (and the footer).
Comments and blank lines above the run stay above the new statement; revert puts the run
back, byte for byte (the round-trip check refuses an edit that would not).
"""

from __future__ import annotations

import libcst as cst

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import code, header_tokens, node_tokens, parse_stmts, replace_node
from patchkit.core.ops._stmt import CONTEXT, Context

_COMPOUND = (cst.If, cst.With, cst.Try, cst.For, cst.While)


@register("wrap-stmts")
class WrapStmts(Op):
    LOCATOR = {"match": "str", **CONTEXT}
    PARAMS = {"header": "str", "footer": "str"}
    REQUIRED = ("locator.match", "params.header")

    def __init__(self, locator: dict, params: dict) -> None:
        self.match_src, self.header_src = locator["match"], params["header"].strip()
        self.run = parse_stmts(self.match_src, "locator.match")
        if len(self.run) < 1:
            raise OpParamError("locator.match", "holds no statement", "name the statements to wrap")
        footer = params.get("footer", "")
        if not self.header_src.endswith(":"):
            raise OpParamError(
                "params.header", f"`{self.header_src}` does not end with `:`", 'e.g. "if not _is_sm120:"'
            )
        src = self.header_src + "\n    pass\n" + (footer.rstrip("\n") + "\n" if footer else "")
        try:
            shell = cst.parse_statement(src)
        except cst.ParserSyntaxError as e:
            raise OpParamError(
                "params.header", f"header and footer do not make a statement ({e.message})", "a `try:` needs a footer"
            ) from None
        if not isinstance(shell, _COMPOUND) or not isinstance(shell.body, cst.IndentedBlock):
            raise OpParamError("params.header", "is not the header of an if, with, try, for or while")
        self.shell = shell
        self.seq = tuple(node_tokens(s) for s in self.run)
        self.head = header_tokens(shell)
        self.ctx = Context(locator)
        self.reads = Reads(
            patterns=((code(self.run[0]),), (self.header_src,), *((f,) for f in self.ctx.fragments())),
            whole_statements=True,
            sites=((code(self.run[0]),), (self.header_src,)),
        )

    def _wrapped(self, scope) -> list:
        """(owner, index) of each compound statement with this header whose body is the run
        (and whose other clauses are the footer's), in the op's context."""
        out = []
        want = self._built(self.run)
        for owner, i in self.ctx.runs_of(scope, lambda s: isinstance(s, _COMPOUND) and header_tokens(s) == self.head):
            stmt = owner.body[i]
            body = getattr(stmt.body, "body", ())
            if tuple(node_tokens(s) for s in body) == self.seq and node_tokens(stmt) == node_tokens(want):
                out.append((owner, i))
        return out

    def _built(self, stmts):
        return self.shell.with_changes(body=self.shell.body.with_changes(body=list(stmts)))

    def locate(self, scope) -> Located:
        wrapped = self._wrapped(scope)
        held = {id(s) for o, i in wrapped for s in o.body[i].body.body}
        olds = [(o, i) for o, i in self.ctx.runs(scope, self.seq) if id(o.body[i]) not in held]
        around = f" ({self.ctx.describe()})" if self.ctx.src else ""
        if len(olds) == 1 and not wrapped:
            o, i = olds[0]
            return Located(PENDING, tuple(o.body[i : i + len(self.seq)])[:1])
        if len(wrapped) == 1 and not olds:
            o, i = wrapped[0]
            return Located(DONE, (o.body[i],))
        if not olds and not wrapped:
            return Located(MISSING, reason=f"the statements `{self.run_text()}` are not found together{around}")
        if olds and wrapped:
            nodes = tuple(o.body[i] for o, i in olds + wrapped)
            return Located(MISSING, nodes, "the statements stand both wrapped and unwrapped: partially edited")
        found = olds or wrapped
        return Located(
            AMBIGUOUS,
            tuple(o.body[i] for o, i in found),
            f"the run stands {len(found)} times{around}; give after/before/inside to tell them apart",
        )

    def run_text(self) -> str:
        first = " ".join(self.match_src.strip().splitlines()[0].split())
        return first + (" ..." if len(self.run) > 1 else "")

    def apply(self, scope):
        ((owner, i),) = self.ctx.runs(scope, self.seq)
        n = len(self.seq)
        stmts = list(owner.body[i : i + n])
        lead = stmts[0].leading_lines
        stmts[0] = stmts[0].with_changes(leading_lines=())
        new = self._built(stmts).with_changes(leading_lines=lead)
        body = [*owner.body[:i], new, *owner.body[i + n :]]
        return replace_node(scope, owner, owner.with_changes(body=body))

    def revert(self, scope):
        ((owner, i),) = self._wrapped(scope)
        stmt = owner.body[i]
        stmts = list(stmt.body.body)
        stmts[0] = stmts[0].with_changes(leading_lines=stmt.leading_lines)
        body = [*owner.body[:i], *stmts, *owner.body[i + 1 :]]
        return replace_node(scope, owner, owner.with_changes(body=body))
