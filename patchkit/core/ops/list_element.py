"""list-element: add or remove an element of a list, tuple or set literal.

Also widens gates whose allowed values are a literal collection:
  locator.contains   = ['"flashinfer_trtllm"']        the collection holding these elements
  locator.keyword    = "supported_major_versions"     the value of this keyword argument
                       (locator.call narrows it to one callee)
  locator.membership = "major"                        the right side of ``major in [...]``
  locator.target     = "MOE_RUNNER_BACKEND_CHOICES"   the value assigned to this name (or
                       attribute): ``NAME = [...]``, ``NAME: T = [...]``

An added element goes at the end, after params.after, or before params.before (the element
it precedes: the front of the collection).

With params.comment (or params.uncomment = true, meaning ``# <element>,``) the element is
turned from that exact comment line into a real element, and back on revert, so the
comment comes back byte for byte.
"""

from __future__ import annotations

import libcst as cst

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import (
    insert_item,
    meaning,
    node_meaning,
    node_tokens,
    parse_expr,
    remove_item,
    replace_node,
    tokens,
    walk,
)

_COLLECTIONS = (cst.List, cst.Tuple, cst.Set)


def _opening(coll):
    if isinstance(coll, cst.List):
        return coll.lbracket
    if isinstance(coll, cst.Set):
        return coll.lbrace
    return coll.lpar[0] if coll.lpar else None


def _opening_ws(coll):
    return getattr(_opening(coll), "whitespace_after", None)


def _closing_ws(coll):
    if isinstance(coll, cst.List):
        return coll.rbracket.whitespace_before
    if isinstance(coll, cst.Set):
        return coll.rbrace.whitespace_before
    return coll.rpar[-1].whitespace_before if coll.rpar else None


def _with_closing_ws(coll, ws):
    if isinstance(coll, cst.List):
        return coll.with_changes(rbracket=coll.rbracket.with_changes(whitespace_before=ws))
    if isinstance(coll, cst.Set):
        return coll.with_changes(rbrace=coll.rbrace.with_changes(whitespace_before=ws))
    return coll.with_changes(rpar=[*coll.rpar[:-1], coll.rpar[-1].with_changes(whitespace_before=ws)])


def _assigned(n) -> list:
    """(target, value) of an assignment whose value is a literal collection: ``NAME = [...]``
    (each of ``A = B = [...]``'s targets), ``NAME: T = [...]``; [] for any other node."""
    if isinstance(n, cst.Assign) and isinstance(n.value, _COLLECTIONS):
        return [(t.target, n.value) for t in n.targets]
    if isinstance(n, cst.AnnAssign) and isinstance(n.value, _COLLECTIONS):
        return [(n.target, n.value)]
    return []


def _gap(coll, j: int):
    """The whitespace (with any comment lines) that follows element j."""
    if j < len(coll.elements) - 1:
        return getattr(coll.elements[j].comma, "whitespace_after", None)
    return _closing_ws(coll)


@register("list-element")
class ListElement(Op):
    LOCATOR = {"contains": "list[str]", "keyword": "str", "call": "str", "membership": "str", "target": "str"}
    PARAMS = {"element": "str", "action": "str", "comment": "str", "uncomment": "bool", "after": "str", "before": "str"}
    REQUIRED = ("params.element",)

    def __init__(self, locator: dict, params: dict) -> None:
        forms = [k for k in ("contains", "keyword", "membership", "target") if k in locator]
        if len(forms) != 1:
            raise OpParamError(
                "locator",
                "needs exactly one of contains, keyword, membership, target",
                "e.g. locator = { contains = ['\"flashinfer_trtllm\"'] }",
            )
        if "call" in locator and "keyword" not in locator:
            raise OpParamError("locator.call", "only narrows a keyword locator")
        self.form = forms[0]
        self.contains = tuple(tokens(c) for c in locator.get("contains", ()))
        for i, c in enumerate(locator.get("contains", ())):
            parse_expr(c, f"locator.contains[{i}]")
        if self.form == "contains" and not self.contains:
            raise OpParamError(
                "locator.contains", "is empty", "name at least one element that identifies the collection"
            )
        self.keyword = locator.get("keyword")
        self.call = tokens(locator["call"]) if "call" in locator else None
        self.membership = tokens(locator["membership"]) if "membership" in locator else None
        self.target = tokens(locator["target"]) if "target" in locator else None
        if "target" in locator:
            parse_expr(locator["target"], "locator.target")
        self.element_src = params["element"]
        self.element = parse_expr(self.element_src, "params.element")
        self.element_tokens = tokens(self.element_src)
        self.action = params.get("action", "add")
        if self.action not in ("add", "remove"):
            raise OpParamError("params.action", f"must be 'add' or 'remove', not {self.action!r}")
        comment = params.get("comment")
        if params.get("uncomment") and comment is None:
            comment = f"# {self.element_src},"
        if comment is not None and not comment.startswith("#"):
            raise OpParamError("params.comment", f"must be a comment line starting with '#': {comment!r}")
        self.comment = comment
        self.after = tokens(params["after"]) if "after" in params else None
        self.before = tokens(params["before"]) if "before" in params else None
        if self.after is not None and self.before is not None:
            raise OpParamError("params.before", "and params.after both place the element: give one")
        if "before" in params:
            parse_expr(params["before"], "params.before")
        # The post-condition's own reading of the locator and the element (is_applied).
        self.goal = meaning(self.element_src)
        self.site = {k: locator[k] for k in ("contains", "keyword", "call", "membership", "target") if k in locator}
        # Every candidate holds the locator's fragments (not necessarily the element), in one
        # statement, done or pending.  Every file holding the site holds their words, and with
        # a comment (or for remove) the element's words too: they are there in both states.
        located_by = tuple(
            s
            for s in (
                *locator.get("contains", ()),
                self.keyword or "",
                locator.get("membership", ""),
                locator.get("target", ""),
            )
            if s
        )
        both = (self.element_src,) if (self.comment is not None or self.action == "remove") else ()
        self.reads = Reads(patterns=(located_by,), file_words=(*located_by, *both))

    # -- locate ------------------------------------------------------------------------
    def _candidates(self, scope) -> list:
        found = []
        for n in walk(scope):
            if self.form == "contains" and isinstance(n, _COLLECTIONS):
                have = {node_tokens(e.value) for e in n.elements}
                if all(c in have for c in self.contains):
                    found.append(n)
            elif self.form == "keyword" and isinstance(n, cst.Call):
                if self.call is not None and node_tokens(n.func) != self.call:
                    continue
                for arg in n.args:
                    if (
                        arg.keyword is not None
                        and arg.keyword.value == self.keyword
                        and isinstance(arg.value, _COLLECTIONS)
                    ):
                        found.append(arg.value)
            elif self.form == "membership" and isinstance(n, cst.Comparison):
                if node_tokens(n.left) != self.membership:
                    continue
                for t in n.comparisons:
                    if isinstance(t.operator, (cst.In, cst.NotIn)) and isinstance(t.comparator, _COLLECTIONS):
                        found.append(t.comparator)
            elif self.form == "target":
                found += [v for t, v in _assigned(n) if node_tokens(t) == self.target]
        return found

    def _describe(self) -> str:
        """What the locator looks for, without an article: 'no X here', 'N candidates for X'."""
        if self.form == "contains":
            return "list/tuple/set holding " + ", ".join(" ".join(c) for c in self.contains)
        if self.form == "keyword":
            return f"literal collection passed as {self.keyword}="
        if self.form == "target":
            return f"literal collection assigned to `{' '.join(self.target)}`"
        return f"literal collection in `{' '.join(self.membership)} in [...]`"

    def _index(self, coll) -> int | None:
        for i, e in enumerate(coll.elements):
            if node_tokens(e.value) == self.element_tokens:
                return i
        return None

    def _comment_at(self, coll):
        for j in range(len(coll.elements)):
            ws = _gap(coll, j)
            if isinstance(ws, cst.ParenthesizedWhitespace):
                for k, line in enumerate(ws.empty_lines):
                    if line.comment is not None and line.comment.value == self.comment:
                        return j, k
        return None

    def _find(self, scope):
        cands = self._candidates(scope)
        if not cands:
            return None, Located(MISSING, reason=f"no {self._describe()} here")
        if len(cands) > 1:
            return None, Located(AMBIGUOUS, tuple(cands), f"{len(cands)} candidates for a {self._describe()}")
        return cands[0], None

    def locate(self, scope) -> Located:
        coll, bad = self._find(scope)
        if bad:
            return bad
        present = self._index(coll) is not None
        want_present = self.action == "add"
        if present == want_present:
            return Located(DONE, (coll,))
        # Not yet done: check the edit is possible.
        if self.comment is not None and self.action == "add" and self._comment_at(coll) is None:
            return Located(MISSING, (coll,), f"commented-out element `{self.comment}` not found in the collection")
        for side, at in (("after", self.after), ("before", self.before)):
            if at is not None and self.action == "add" and not any(node_tokens(e.value) == at for e in coll.elements):
                return Located(MISSING, (coll,), f"element `{' '.join(at)}` to insert {side} is not in the collection")
        return Located(PENDING, (coll,))

    def is_applied(self, scope) -> bool:
        # The goal on its own, by what the code means: the one collection the locator names
        # holds the element exactly once (add) or not at all (remove).
        colls = list(self._sites(scope))
        if len(colls) != 1:
            return False
        held = sum(node_meaning(e.value) == self.goal for e in colls[0].elements)
        return held == (1 if self.action == "add" else 0)

    def _sites(self, scope):
        """The collections the locator names, read apart from locate's ``_candidates``."""
        site = self.site
        for n in walk(scope):
            if isinstance(n, _COLLECTIONS) and "contains" in site:
                have = {node_meaning(e.value) for e in n.elements}
                if {meaning(c) for c in site["contains"]} <= have:
                    yield n
            elif isinstance(n, cst.Call) and "keyword" in site:
                if "call" in site and node_meaning(n.func) != meaning(site["call"]):
                    continue
                for a in n.args:
                    if a.keyword is not None and a.keyword.value == site["keyword"]:
                        yield from [a.value] if isinstance(a.value, _COLLECTIONS) else ()
            elif isinstance(n, cst.Comparison) and "membership" in site:
                if node_meaning(n.left) == meaning(site["membership"]):
                    for t in n.comparisons:
                        if isinstance(t.operator, (cst.In, cst.NotIn)) and isinstance(t.comparator, _COLLECTIONS):
                            yield t.comparator
            elif "target" in site:
                yield from (v for t, v in _assigned(n) if node_meaning(t) == meaning(site["target"]))

    # -- edits -------------------------------------------------------------------------
    def _add(self, coll):
        if self.comment is not None:
            return self._uncomment(coll, *self._comment_at(coll))
        index = len(coll.elements)
        if self.after is not None:
            index = 1 + next(i for i, e in enumerate(coll.elements) if node_tokens(e.value) == self.after)
        if self.before is not None:
            index = next(i for i, e in enumerate(coll.elements) if node_tokens(e.value) == self.before)
        new = cst.Element(value=self.element)
        return coll.with_changes(elements=insert_item(coll.elements, index, new, _opening_ws(coll)))

    def _uncomment(self, coll, j: int, k: int):
        """Element j is followed by comment line k; that line becomes element j+1."""
        gap = _gap(coll, j)
        line = gap.empty_lines[k]
        before = gap.with_changes(empty_lines=gap.empty_lines[:k], indent=line.indent, last_line=line.whitespace)
        after = cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(newline=line.newline),
            empty_lines=gap.empty_lines[k + 1 :],
            indent=gap.indent,
            last_line=gap.last_line,
        )
        els = list(coll.elements)
        prev = els[j]
        if j < len(els) - 1:
            els[j] = prev.with_changes(comma=prev.comma.with_changes(whitespace_after=before))
            els.insert(j + 1, cst.Element(value=self.element, comma=cst.Comma(whitespace_after=after)))
            return coll.with_changes(elements=els)
        # The last element: the gap is the closing bracket's; the new element inherits the trailing comma.
        prev_comma = (
            prev.comma.with_changes(whitespace_after=before)
            if isinstance(prev.comma, cst.Comma)
            else cst.Comma(whitespace_after=before)
        )
        els[j] = prev.with_changes(comma=prev_comma)
        els.append(cst.Element(value=self.element, comma=prev.comma))
        return _with_closing_ws(coll.with_changes(elements=els), after)

    def _recomment(self, coll, i: int):
        """Inverse of _uncomment: element i becomes the comment line again."""
        if i == 0:
            raise ValueError("cannot turn the first element into a comment")
        els = list(coll.elements)
        prev, el = els[i - 1], els[i]
        before, after = getattr(prev.comma, "whitespace_after", None), _gap(coll, i)
        if not (isinstance(before, cst.ParenthesizedWhitespace) and isinstance(after, cst.ParenthesizedWhitespace)):
            raise ValueError("the element is not on a line of its own, so it cannot become a comment line")
        line = cst.EmptyLine(
            indent=before.indent,
            whitespace=before.last_line,
            comment=cst.Comment(self.comment),
            newline=after.first_line.newline,
        )
        merged = before.with_changes(
            empty_lines=(*before.empty_lines, line, *after.empty_lines), indent=after.indent, last_line=after.last_line
        )
        del els[i]
        if i < len(els):
            els[i - 1] = prev.with_changes(comma=prev.comma.with_changes(whitespace_after=merged))
            return coll.with_changes(elements=els)
        els[i - 1] = prev.with_changes(comma=el.comma)
        return _with_closing_ws(coll.with_changes(elements=els), merged)

    def _remove(self, coll):
        i = self._index(coll)
        if self.comment is not None:
            return self._recomment(coll, i)
        return coll.with_changes(elements=remove_item(coll.elements, i))

    def _edit(self, scope, adding: bool):
        coll, bad = self._find(scope)
        if bad:
            raise ValueError(bad.reason)
        new = self._add(coll) if adding else self._remove(coll)
        return replace_node(scope, coll, new)

    def apply(self, scope):
        return self._edit(scope, adding=self.action == "add")

    def revert(self, scope):
        return self._edit(scope, adding=self.action != "add")
