"""dict-entry: set, add or remove a key of a dict literal.

  locator.target = "_BACKEND_TABLE"             the name (or attribute) the dict is assigned to ...
  locator.keys   = ['"fa3"', '"triton"']        ... and/or keys it holds, as code
  params.key     = '"flashinfer_cutlass"'       the entry's key, as code
  params.action  = "add" | "set" | "remove"     (default "add")
  params.value   = '"FlashInferCutlassMoE"'     the value added or set; removed: upstream's value
  params.expect  = ...                          (set) upstream's value, exactly as upstream writes it
  params.after   = '"triton"'                   (add/remove) the key it follows (default: the end),
  params.before  = '"fa3"'                      or the one it precedes

Revert takes an added entry out, puts a removed one back (after ``after``, else at the end)
and writes ``expect`` back over a set one.
"""

from __future__ import annotations

import libcst as cst

from patchkit.core.ops import OpParamError, Reads, register
from patchkit.core.ops._cst import node_tokens, parse_expr, tokens, walk
from patchkit.core.ops._items import ITEM_PARAMS, ItemOp


@register("dict-entry")
class DictEntry(ItemOp):
    LOCATOR = {"target": "str", "keys": "list[str]"}
    PARAMS = {"key": "str", **ITEM_PARAMS}
    REQUIRED = ("params.key", "params.value")
    field, noun = "elements", "key"

    def __init__(self, locator: dict, params: dict) -> None:
        if "target" not in locator and not locator.get("keys"):
            raise OpParamError("locator", "needs target or keys", 'e.g. locator = { target = "BACKENDS" }')
        self.target_src = locator.get("target")
        self.target = tokens(self.target_src) if self.target_src else None
        self.keys_src = list(locator.get("keys", ()))
        self.keys = [tokens(k) for k in self.keys_src]
        parse_expr(params["key"], "params.key")
        key = tokens(params["key"])
        if key in self.keys and params.get("action", "add") != "set":
            raise OpParamError("locator.keys", "holds the key the op adds or removes, so one state could not be told")
        self.key_text = params["key"]
        self.setup(f"`{params['key']}`", key, params)
        first = self.target_src or self.keys_src[0]
        self.reads = Reads(
            patterns=(tuple([*filter(None, [self.target_src]), *self.keys_src]),),
            file_words=(first,),
            sites=((first,),),
        )

    def where(self) -> str:
        parts = [f"assigned to `{self.target_src}`"] if self.target_src else []
        if self.keys_src:
            parts.append(f"holding {', '.join(self.keys_src)}")
        return "dict literal " + " and ".join(parts)

    def containers(self, scope) -> list:
        found = []
        if self.target is not None:
            for n in walk(scope):
                if isinstance(n, cst.Assign) and isinstance(n.value, cst.Dict):
                    if any(node_tokens(t.target) == self.target for t in n.targets):
                        found.append(n.value)
                elif isinstance(n, cst.AnnAssign) and isinstance(n.value, cst.Dict):
                    if node_tokens(n.target) == self.target:
                        found.append(n.value)
        else:
            found = [n for n in walk(scope) if isinstance(n, cst.Dict)]
        if self.keys:
            found = [d for d in found if all(k in {self.key_of(d, e) for e in d.elements} for k in self.keys)]
        return found

    def key_of(self, d, item):
        return node_tokens(item.key) if isinstance(item, cst.DictElement) else None

    def value_of(self, item):
        return item.value

    def make(self, value_src: str):
        return cst.parse_expression(f"{{{self.key_text}: {value_src}}}").elements[0]

    def opening(self, d):
        return d.lbrace.whitespace_after
