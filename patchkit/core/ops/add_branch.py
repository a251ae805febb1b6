"""add-branch: an ``elif`` or ``else`` clause added to an if-chain, before or after a named
branch.

  locator.branch   = 'elif self.moe_runner_backend == "flashinfer_trtllm"'
                     the header of a branch of the chain (``if ...``, ``elif ...`` or
                     ``else``; the colon may be left out), token for token, at any depth
  locator.position = "after" | "before"       (default "after"; not before the chain's ``if``)
  params.code      = '''
  elif is_sm120_supported():
      self.moe_runner_backend = "flashinfer_cutlass"
  '''                the clause, header and body (an ``else:`` only as the chain's last)

Revert takes exactly that clause out again; the chain's other branches are not touched.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import blocks, header_tokens, node_tokens, replace_node, statement_tokens


def _parse_clause(src: str):
    text = "if __patchkit__:\n    pass\n" + textwrap.dedent(src).strip("\n") + "\n"
    try:
        mod = cst.parse_module(text)
    except cst.ParserSyntaxError as e:
        raise OpParamError("params.code", f"is not an elif/else clause ({e.message})") from None
    (stmt,) = mod.body if len(mod.body) == 1 else (None,)
    if not isinstance(stmt, cst.If) or stmt.orelse is None:
        raise OpParamError("params.code", "is not one elif/else clause", 'e.g. code = "elif x:\\n    y = 1\\n"')
    clause = stmt.orelse
    if isinstance(clause, cst.If) and clause.orelse is not None:
        raise OpParamError("params.code", "holds more than one clause", "one op per branch")
    return clause


def _branch_tokens(clause, first: bool) -> tuple:
    h = header_tokens(clause)
    return h if isinstance(clause, cst.Else) or first else ("elif", *h[1:])


def _chains(scope):
    """Each if-chain of the scope (at any depth) as its list of clauses, the ``if`` first."""
    for _, body in blocks(scope):
        for stmt in body:
            if isinstance(stmt, cst.If):
                chain, node = [stmt], stmt
                while node.orelse is not None:
                    node = node.orelse
                    chain.append(node)
                    if isinstance(node, cst.Else):
                        break
                yield chain


def _rebuild(chain: list):
    """The ``if`` statement made of these clauses, in this order."""
    node = None
    for clause in reversed(chain):
        node = clause if node is None else clause.with_changes(orelse=node)
        if isinstance(node, cst.If) and node is chain[-1] and node.orelse is not None:
            node = node.with_changes(orelse=None)
    return node


@register("add-branch")
class AddBranch(Op):
    LOCATOR = {"branch": "str", "position": "str"}
    PARAMS = {"code": "str"}
    REQUIRED = ("locator.branch", "params.code")

    def __init__(self, locator: dict, params: dict) -> None:
        self.branch_src = locator["branch"]
        self.branch = statement_tokens(self.branch_src)
        if not self.branch or self.branch[0] not in ("if", "elif", "else"):
            raise OpParamError("locator.branch", "is not an if/elif/else header", "e.g. branch = 'elif x == 1'")
        self.position = locator.get("position", "after")
        if self.position not in ("before", "after"):
            raise OpParamError("locator.position", f"must be 'before' or 'after', not {self.position!r}")
        if self.position == "before" and self.branch[0] == "if":
            raise OpParamError("locator.position", "nothing goes before a chain's `if`", "add it after that branch")
        if self.position == "after" and self.branch[0] == "else":
            raise OpParamError("locator.position", "nothing goes after a chain's `else`", "add it before that branch")
        self.clause_src = params["code"]
        self.clause = _parse_clause(self.clause_src)
        self.is_else = isinstance(self.clause, cst.Else)
        if self.is_else and self.position == "before":
            raise OpParamError("params.code", "an else clause is the chain's last; it cannot go before a branch")
        self.head = _branch_tokens(self.clause, False)
        if self.head == self.branch:
            raise OpParamError("params.code", "has the header of the branch it is placed by")
        self.whole = node_tokens(self.clause.with_changes(orelse=None) if not self.is_else else self.clause)
        text = params["code"].strip().splitlines()[0]
        self.reads = Reads(
            patterns=((self.branch_src,),),
            whole_statements=True,
            file_words=(self.branch_src,),
            sites=((self.branch_src,),),
        )
        self._code_head = text

    def _same(self, clause) -> bool:
        """Is ``clause`` the added one: its header and its own body (not the arms after it)?"""
        if self.is_else != isinstance(clause, cst.Else):
            return False
        own = clause if self.is_else else clause.with_changes(orelse=None)
        return node_tokens(own) == self.whole

    def _sites(self, scope):
        """(chain, index of the named branch, added: index of the added clause or None)."""
        out = []
        for chain in _chains(scope):
            for k, clause in enumerate(chain):
                if _branch_tokens(clause, k == 0) != self.branch:
                    continue
                j = k + 1 if self.position == "after" else k - 1
                added = j if 0 < j < len(chain) and self._same(chain[j]) else None
                out.append((chain, k, added))
        return out

    def locate(self, scope) -> Located:
        sites = self._sites(scope)
        if not sites:
            return Located(MISSING, reason=f"branch `{self.branch_src}` not found")
        if len(sites) > 1:
            return Located(
                AMBIGUOUS, tuple(c[k] for c, k, _ in sites), f"branch `{self.branch_src}` stands {len(sites)} times"
            )
        ((chain, k, added),) = sites
        if added is not None:
            return Located(DONE, (chain[added],))
        if self.is_else and not isinstance(chain[-1], cst.Else) and k != len(chain) - 1:
            return Located(MISSING, (chain[k],), "an else clause goes after the chain's last branch")
        if self.is_else and isinstance(chain[-1], cst.Else):
            return Located(MISSING, (chain[-1],), "the chain already has an else clause")
        if any(self._head_of(c, i) == self.head for i, c in enumerate(chain)):
            return Located(MISSING, (chain[k],), f"`{self._code_head}` stands elsewhere in the chain: edited by hand?")
        return Located(PENDING, (chain[k],))

    @staticmethod
    def _head_of(clause, i):
        return _branch_tokens(clause, i == 0)

    def is_applied(self, scope) -> bool:
        # The goal on its own: the clause stands right beside the named branch, once.
        return sum(1 for _, _, added in self._sites(scope) if added is not None) == 1

    def _chain_site(self, scope):
        ((chain, k, added),) = self._sites(scope)
        return chain, k, added

    def apply(self, scope):
        chain, k, _ = self._chain_site(scope)
        at = k + 1 if self.position == "after" else k
        new = [*chain[:at], self.clause, *chain[at:]]
        return replace_node(scope, chain[0], _rebuild(new))

    def revert(self, scope):
        chain, _, added = self._chain_site(scope)
        return replace_node(scope, chain[0], _rebuild([*chain[:added], *chain[added + 1 :]]))
