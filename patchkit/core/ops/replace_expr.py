"""replace-expr: replace an expression matched structurally (token for token, any layout).

  locator.match = "major == 10"          the expression as upstream writes it
  locator.count = 1                       how many occurrences the scope must hold (default 1)
  params.with   = "major in (10, 12)"     the replacement

Revert writes ``match`` back; the engine's round-trip check refuses the edit if that would
not restore the original bytes (write ``match`` exactly as upstream does).
"""

from __future__ import annotations

import copy
from typing import Optional

import libcst as cst

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import (
    contains_seq,
    header_tokens,
    kids,
    meaning,
    node_meaning,
    node_tokens,
    parse_expr,
    tokens,
    walk,
    words,
)


def _common_words(op: "ReplaceExpr") -> tuple[str, ...]:
    """The words (as fragments) that both the match and the replacement hold, or the match."""
    theirs = set(words(op.with_src))
    common = [w for w in words(op.match_src) if w in theirs]
    return tuple(w if w.isidentifier() else repr(w) for w in common) or (op.match_src,)


def _is_block(node) -> bool:
    return isinstance(getattr(node, "body", None), cst.BaseSuite)


def _masked(chain: tuple, node) -> tuple[str, ...]:
    """The tokens of the occurrence's own statement (its innermost small statement, else
    its outermost enclosing expression) with the occurrence itself masked by one name."""
    own = next((a for a in reversed(chain) if isinstance(a, cst.BaseSmallStatement)), None)
    if own is None:
        exprs = [a for a in chain if isinstance(a, cst.BaseExpression)]
        own = exprs[0] if exprs else node

    class _Mask(cst.CSTTransformer):
        def on_leave(self, original, updated):
            return cst.Name("_PATCHKIT_SITE_") if original is node else updated

    masked = own.visit(_Mask()) if own is not node else cst.Name("_PATCHKIT_SITE_")
    return node_tokens(masked)


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
        self.old, self.new = meaning(self.match_src), meaning(self.with_src)  # for is_applied
        # The node types an occurrence can have.  Equal tokens parse to the same tree, so a
        # node of another type never prints to the match's or the replacement's tokens; the
        # one exception is a starred element, whose code carries its trailing comma (`*a,`
        # reads as a tuple).  _occurrences prints only nodes of these types: printing every
        # expression of a scope prints each subtree once per enclosing expression.
        self._types = frozenset({type(self.match), type(self.repl), cst.StarredElement})
        self._before: tuple = ()  # labels of the occurrences where it read pending (relative_to)
        self._only: Optional[tuple] = None  # bound to one occurrence: (its key, its rank) (``only``)
        self.count = locator.get("count", 1)
        if self.count < 1:
            raise OpParamError("locator.count", f"must be at least 1, not {self.count}")
        # Occurrences, pending or done.  Relocation greps for the words both forms hold, so
        # that a site found done elsewhere (upstream's own code, moved) is found too; with
        # none in common, for what upstream wrote.
        self.reads = Reads(patterns=((self.match_src,), (self.with_src,)), file_words=_common_words(self))

    def _occurrences(self, scope) -> list[tuple[str, cst.CSTNode]]:
        """Each occurrence of the match ("m") and of the replacement ("w"), in document
        order.  What stands inside an occurrence is part of it (the ``None`` of a match
        ``x is None`` is not a replacement already made)."""
        # Pruned by position, not by node identity: a node standing at two places (libcst
        # shares subtrees) is two occurrences.
        out, stack = [], [scope]
        while stack:
            n = stack.pop()
            if type(n) in self._types:
                t = node_tokens(n)
                label = "m" if t == self.match_tokens else "w" if t == self.with_tokens else ""
                if label:
                    out.append((label, n))
                    continue
            stack.extend(reversed(kids(n)))
        if self._only is not None:
            # Bound to one place (``only``): the occurrence of that place's key, the n-th of
            # those that share it.
            key, nth = self._only
            same = [o for o, k in zip(out, self._keys(scope, [n for _, n in out]), strict=True) if k == key]
            return same[nth : nth + 1]
        return out

    def occurrences(self, scope) -> tuple[Located, ...]:
        """Each place the match (PENDING) or the replacement (DONE) stands, in document
        order, as a site of its own, when the op makes one edit (``count`` 1)."""
        if self.count != 1 or self._only is not None:
            return ()
        return tuple(Located(PENDING if label == "m" else DONE, (n,)) for label, n in self._occurrences(scope))

    def only(self, scope, k: int) -> "ReplaceExpr":
        """Bound to the k-th of ``occurrences(scope)`` by what surrounds it, not by its
        ordinal: the headers of the blocks it stands in and its own statement with the
        occurrence masked (``_keys``), and its rank among occurrences that share those.
        Apply and revert keep that key (they swap one form for the other in place), and so
        do the recipe's other edits of the scope made first in one plan (a sibling writing
        the same replacement elsewhere shifts every ordinal); where one changes the key's
        own code, the bound op reads missing there and apply refuses (never another place)."""
        occ = [n for _, n in self._occurrences(scope)]
        keys = self._keys(scope, occ)
        bound = copy.copy(self)
        bound._only, bound._before = (keys[k], keys[:k].count(keys[k])), ()
        return bound

    def _keys(self, scope, nodes: list) -> list[tuple]:
        """For each node (an occurrence in ``scope``): the header tokens of every compound
        statement and clause it stands in, outermost first, and the tokens of its own
        simple statement (else of its outermost expression) with the occurrence masked."""
        want = {id(n): i for i, n in enumerate(nodes)}
        out: list = [None] * len(nodes)
        stack = [(scope, ())]
        while stack:
            n, chain = stack.pop()
            if id(n) in want and out[want[id(n)]] is None:
                out[want[id(n)]] = (*(header_tokens(a) for a in chain if _is_block(a)), _masked(chain, n))
                continue
            stack.extend((c, (*chain, n)) for c in reversed(kids(n)))
        return out

    def relative_to(self, before) -> "ReplaceExpr":
        if self._only is not None:
            return self  # bound to one place already: its sites need no before
        labels = tuple(label for label, _ in self._occurrences(before))
        if labels.count("m") != self.count or "w" not in labels:
            return self  # not pending there, or nothing to tell the sites from
        bound = copy.copy(self)
        bound._before = labels
        return bound

    def _done_sites(self, occ: list) -> Optional[tuple]:
        """The done sites by what ``before`` held at each place: every occurrence is now
        the replacement, one for one with ``before``'s; the sites are those that were
        the match.  None when that cannot be said."""
        base = self._before
        if not base or len(occ) != len(base) or any(label != "w" for label, _ in occ):
            return None
        return tuple(n for (_, n), was in zip(occ, base, strict=True) if was == "m")

    def locate(self, scope) -> Located:
        occ = self._occurrences(scope)
        olds = [n for label, n in occ if label == "m"]
        news = [n for label, n in occ if label == "w"]
        if not olds and len(news) == self.count:
            return Located(DONE, tuple(news))
        if len(olds) == self.count:
            # Every site still holds the match: pending, whatever else the scope holds.  A
            # replacement as common as `None`, `True` or a dtype standing elsewhere is not a
            # half-made edit (apply swaps the matches only; those other occurrences stay).
            return Located(PENDING, tuple(olds))
        if not olds and not news:
            return Located(MISSING, reason=f"`{self.match_src}` not found")
        if olds and news:
            return Located(
                MISSING,
                tuple(olds + news),
                f"{len(olds)} of the {self.count} `{self.match_src}` expected, and `{self.with_src}` present:"
                " partially edited",
            )
        if not olds:
            sites = self._done_sites(occ)
            if sites is not None:
                return Located(DONE, sites)
            # Nothing marks which `None` the op made; the pristine release tells (the judge
            # asks it through relative_to), and without it revert could swap them all.
            return Located(
                AMBIGUOUS,
                tuple(news),
                f"`{self.match_src}` not found, and `{self.with_src}` occurs {len(news)} times where the op makes"
                f" {self.count}: which are its edits only the pristine release can tell",
            )
        return Located(AMBIGUOUS, tuple(olds), f"expected {self.count} occurrence(s), found {len(olds)}")

    def is_applied(self, scope) -> bool:
        # The goal on its own, by what the code means: the match stands nowhere in the scope
        # (in any layout or spelling), and the replacement stands at least where it stood.
        # Only nodes of the match's or the replacement's kind are read.  Bound to one
        # place (``only``), the goal is that place's: the other occurrences are not the op's.
        if self._only is not None:
            return self.locate(scope).state == DONE
        kinds = (type(self.match), type(self.repl))
        said = [node_meaning(n) for n in walk(scope) if isinstance(n, kinds)]
        return self.old not in said and said.count(self.new) >= self.count

    def each(self, located: Located) -> tuple[Located, ...]:
        """Each match of an ambiguous scope, pending, when the op makes one edit (``count``
        1); a replacement there says nothing of which place was the site."""
        if self.count != 1 or located.state != AMBIGUOUS:
            return ()
        return tuple(Located(PENDING, (n,)) for n in located.nodes if node_tokens(n) == self.match_tokens)

    def _swap(self, scope, targets: set, new):
        class _T(cst.CSTTransformer):
            def on_leave(self, original, updated):
                if id(original) in targets:
                    # Each site its own node: one node at two places is one identity, which
                    # identity-keyed passes (the occurrence count, replace_node) see once.
                    site = new.deep_clone()
                    if getattr(original, "lpar", ()):
                        site = site.with_changes(lpar=original.lpar, rpar=original.rpar)
                    return site
                return updated

        return scope.visit(_T())

    def apply(self, scope):
        return self._swap(scope, {id(n) for label, n in self._occurrences(scope) if label == "m"}, self.repl)

    def revert(self, scope):
        """The done sites back to the match: every replacement, or (judged against a
        ``before``) only those that were the match there."""
        occ = self._occurrences(scope)
        sites = self._done_sites(occ)
        if sites is None:
            sites = [n for label, n in occ if label == "w"]
        return self._swap(scope, {id(n) for n in sites}, self.match)
