"""Statements located as sites are, for replace-stmt and delete-stmt: a run of statements
of the scope (at any depth: the bodies of if/elif/else, for, while, with, try clauses), told
apart by the statements around it (``after``, ``before``) and the clause whose body holds it
(``inside``).  Each context statement is compared token for token, a compound one whole or by
its header (``if a:``, ``elif b``, ``else``, ``except E:``: the colon may be left out)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from patchkit.core.ops import OpParamError
from patchkit.core.ops._cst import blocks, clauses, header_tokens, may_print_as, node_tokens, statement_tokens

CONTEXT = {"after": "str", "before": "str", "inside": "str"}


def _is(stmt, want: tuple) -> bool:
    return (may_print_as(stmt, want) and node_tokens(stmt) == want) or (
        not isinstance(stmt, cst.SimpleStatementLine) and header_tokens(stmt) == want
    )


class Context:
    """The statements around a run, from a locator's ``after`` / ``before`` / ``inside``."""

    def __init__(self, locator: dict) -> None:
        self.src = {k: locator[k] for k in CONTEXT if k in locator}
        self.tok = {k: statement_tokens(v) for k, v in self.src.items()}
        for k, t in self.tok.items():
            if not t:
                raise OpParamError(f"locator.{k}", "is empty")

    def fragments(self) -> tuple[str, ...]:
        return tuple(self.src.values())

    def describe(self) -> str:
        return ", ".join(f"{k} `{v}`" for k, v in self.src.items())

    def _clause_headers(self, scope) -> dict[int, tuple]:
        return {id(c.body): h for h, c, _ in clauses(scope) if isinstance(getattr(c, "body", None), cst.IndentedBlock)}

    def holds(self, owner, i: int, n: int, headers: Optional[dict]) -> bool:
        """Does the run ``owner.body[i:i+n]`` stand in this context?"""
        body = owner.body
        if "after" in self.tok and (i == 0 or not _is(body[i - 1], self.tok["after"])):
            return False
        if "before" in self.tok and (i + n >= len(body) or not _is(body[i + n], self.tok["before"])):
            return False
        if "inside" in self.tok and (headers or {}).get(id(owner)) != self.tok["inside"]:
            return False
        return True

    def runs(self, scope, seq: tuple) -> list[tuple]:
        """(owner, index) of each run of statements whose tokens are ``seq`` (one tuple per
        statement), in this context."""
        headers = self._clause_headers(scope) if "inside" in self.tok else None
        n, out = len(seq), []
        for owner, body in blocks(scope):
            for i in range(len(body) - n + 1):
                if all(may_print_as(body[i + k], seq[k]) and node_tokens(body[i + k]) == seq[k] for k in range(n)) and (
                    self.holds(owner, i, n, headers)
                ):
                    out.append((owner, i))
        return out

    def runs_of(self, scope, pred) -> list[tuple]:
        """(owner, index) of each statement for which ``pred`` holds, in this context."""
        headers = self._clause_headers(scope) if "inside" in self.tok else None
        return [
            (owner, i)
            for owner, body in blocks(scope)
            for i in range(len(body))
            if pred(body[i]) and self.holds(owner, i, 1, headers)
        ]

    def gaps(self, scope) -> list[tuple]:
        """(owner, index) of each place between ``after`` and ``before`` (inside ``inside``):
        where a deleted statement stood."""
        headers = self._clause_headers(scope) if "inside" in self.tok else None
        out = []
        for owner, body in blocks(scope):
            for i in range(len(body) + 1):
                if self.holds(owner, i, 0, headers):
                    out.append((owner, i))
        return out
