"""call-arg: add, change or remove an argument of a located call.

  locator.call   = "current_compilation_context.get_nvcc_flags_list"   the callee, token for token
  locator.arg    = '"--max-running-requests"'   optional: the call's first argument, to tell calls apart
  params.keyword = "supported_major_versions"   the keyword argument ...
  params.index   = 0                            ... or the position of a positional one (from 0)
  params.action  = "add" | "set" | "remove"     (default "add")
  params.value   = "[9, 10, 12]"                the value added or set; removed: upstream's value
  params.expect  = "[9, 10]"                    (set) upstream's value, exactly as upstream writes it
  params.after   = "dtype"                      (keyword add/remove) the keyword it follows,
  params.before  = "device"                     or the one it precedes

Revert takes an added argument out, puts a removed one back (after ``after``, else at the
end of the keywords or at its position) and writes ``expect`` back over a set one.
"""

from __future__ import annotations

import libcst as cst

from patchkit.core.ops import OpParamError, Reads, register
from patchkit.core.ops._cst import node_tokens, tokens, walk
from patchkit.core.ops._items import ITEM_PARAMS, ItemOp


@register("call-arg")
class CallArg(ItemOp):
    LOCATOR = {"call": "str", "arg": "str"}
    PARAMS = {"keyword": "str", "index": "int", **ITEM_PARAMS}
    REQUIRED = ("locator.call", "params.value")
    field, noun = "args", "argument"

    def __init__(self, locator: dict, params: dict) -> None:
        if ("keyword" in params) == ("index" in params):
            raise OpParamError("params", "needs exactly one of keyword, index", 'e.g. keyword = "default"')
        self.call_src = locator["call"]
        self.call = tokens(self.call_src)
        self.first = tokens(locator["arg"]) if "arg" in locator else None
        self.keyword = params.get("keyword")
        self.index = params.get("index")
        if self.index is not None and self.index < 0:
            raise OpParamError("params.index", f"must be 0 or more, not {self.index}")
        if self.keyword is not None and not self.keyword.isidentifier():
            raise OpParamError("params.keyword", f"{self.keyword!r} is not a keyword name")
        key_src = f"`{self.keyword}=`" if self.keyword else f"#{self.index}"
        self.setup(key_src, (self.keyword,) if self.keyword else ("#", self.index), params)
        if self.index is not None and (self.after or self.before) is not None:
            raise OpParamError("params.after", "goes with keyword; a positional argument has its index")
        # The call (and its first argument) stand in both states; the keyword only in one.
        named = tuple(x for x in (self.call_src, locator.get("arg", "")) if x)
        self.reads = Reads(patterns=(named,), file_words=named, sites=(named,))

    def where(self) -> str:
        return f"call `{self.call_src}(`" + (f" with first argument `{' '.join(self.first)}`" if self.first else "")

    def containers(self, scope) -> list:
        out = []
        for n in walk(scope):
            if isinstance(n, cst.Call) and node_tokens(n.func) == self.call:
                if self.first is not None and not (n.args and node_tokens(n.args[0].value) == self.first):
                    continue
                out.append(n)
        return out

    @staticmethod
    def _positional(call) -> list[int]:
        return [i for i, a in enumerate(call.args) if a.keyword is None and not a.star]

    def key_of(self, call, item):
        if item.keyword is not None:
            return (item.keyword.value,)
        pos = self._positional(call)
        i = next((k for k, a in enumerate(call.args) if a is item), None)
        return ("#", pos.index(i)) if i in pos else None

    def value_of(self, item):
        return item.value

    def make(self, value_src: str):
        text = f"f({self.keyword}={value_src})" if self.keyword else f"f({value_src})"
        return cst.parse_expression(text).args[0]

    def opening(self, call):
        return call.whitespace_before_args

    def default_position(self, call) -> int:
        if self.keyword:
            stars = [i for i, a in enumerate(call.args) if a.star == "**"]
            return stars[0] if stars else len(call.args)
        pos = self._positional(call)
        return pos[self.index] if self.index < len(pos) else (pos[-1] + 1 if pos else 0)

    def _position(self, call) -> int:
        if self.index is not None:
            return self.default_position(call)
        return super()._position(call)
