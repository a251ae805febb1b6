"""set-default: change a default value.

locator.field = "max_running_requests"        a class attribute / dataclass field in scope
locator.param = "max_tokens"                  a parameter of the scope function
locator.call  = "parser.add_argument"         a keyword argument of a matched call ...
locator.arg   = '"--max-running-requests"'    ... whose first argument is this ...
locator.keyword = "default"                   ... and the keyword to set

params.value  = "1024"   the new default
params.expect = "None"   the upstream default, exactly as upstream writes it (used by revert)
params.goal   = ">= 2.9.0"  optional: the goal is a bound, not the value (a version pin, a
                         size): a default that satisfies it (upstream bumped the pin past the
                         recipe's value) reaches the goal in other words (patchkit/core/goal.py)
"""

from __future__ import annotations

import libcst as cst

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import code, meaning, node_meaning, node_tokens, parse_expr, replace_node, tokens, walk


@register("set-default")
class SetDefault(Op):
    LOCATOR = {"field": "str", "param": "str", "call": "str", "arg": "str", "keyword": "str"}
    PARAMS = {"value": "str", "expect": "str", "goal": "str"}
    REQUIRED = ("params.value", "params.expect")

    def __init__(self, locator: dict, params: dict) -> None:
        forms = [k for k in ("field", "param", "call") if k in locator]
        if len(forms) != 1:
            raise OpParamError(
                "locator",
                "needs exactly one of field, param, call",
                'e.g. locator = { field = "max_running_requests" }',
            )
        self.form = forms[0]
        if self.form == "call" and "keyword" not in locator:
            raise OpParamError("locator.keyword", "is required with locator.call", 'e.g. keyword = "default"')
        self.name = locator.get(self.form)
        self.bound = _bound(params["goal"]) if "goal" in params else None
        if self.bound is not None and not satisfies(_literal(params["value"]), self.bound):
            raise OpParamError("params.goal", f"`{params['goal']}` does not hold for params.value itself")
        self.call = tokens(locator["call"]) if "call" in locator else None
        self.arg = tokens(locator["arg"]) if "arg" in locator else None
        self.keyword = locator.get("keyword")
        self.value = parse_expr(params["value"], "params.value")
        self.expect = parse_expr(params["expect"], "params.expect")
        self.value_tokens, self.expect_tokens = tokens(params["value"]), tokens(params["expect"])
        self.goal = meaning(params["value"])
        self.call_src, self.arg_src = locator.get("call"), locator.get("arg")
        if self.value_tokens == self.expect_tokens:
            raise OpParamError("params.value", "equals params.expect, so the op would change nothing")
        # Every holder names the field, the param or (with a call) the first argument or keyword.
        named = self.name if self.form != "call" else locator.get("arg", self.keyword)
        # A holder done or pending is `NAME = v` or `NAME: T = v` (a field or a parameter), or a
        # call's `KEYWORD=v`, with v the new value or the upstream one.
        if self.form == "call":
            holds = [(locator["call"], locator.get("arg", ""), f"{self.keyword} =")]
        else:
            holds = [(f"{self.name} =",), (f"{self.name} :",)]
        self.reads = Reads(
            patterns=((named,),),
            file_words=(named,),
            sites=tuple((*h, v) for h in holds for v in (params["value"], params["expect"])),
            shallow=self.form != "call",  # a field is in the class's body, a param in the def's header
        )

    def _holders(self, scope) -> list:
        """Nodes carrying the default: AnnAssign/Assign, Param or Arg."""
        found = []
        if self.form == "field":
            body = getattr(getattr(scope, "body", None), "body", None) or (
                scope.body if isinstance(scope, cst.Module) else ()
            )
            for stmt in body:
                if not isinstance(stmt, cst.SimpleStatementLine):
                    continue
                for small in stmt.body:
                    if (
                        isinstance(small, cst.AnnAssign)
                        and isinstance(small.target, cst.Name)
                        and small.target.value == self.name
                        and small.value is not None
                    ):
                        found.append(small)
                    elif (
                        isinstance(small, cst.Assign)
                        and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name)
                        and small.targets[0].target.value == self.name
                    ):
                        found.append(small)
        elif self.form == "param":
            if isinstance(scope, cst.FunctionDef):
                p = scope.params
                for param in (*p.params, *p.kwonly_params, *p.posonly_params):
                    if param.name.value == self.name and param.default is not None:
                        found.append(param)
        else:
            for n in walk(scope):
                if isinstance(n, cst.Call) and node_tokens(n.func) == self.call:
                    if self.arg is not None and not (
                        n.args and n.args[0].keyword is None and node_tokens(n.args[0].value) == self.arg
                    ):
                        continue
                    found += [a for a in n.args if a.keyword is not None and a.keyword.value == self.keyword]
        return found

    @staticmethod
    def _value(holder):
        return holder.default if isinstance(holder, cst.Param) else holder.value

    @staticmethod
    def _with_value(holder, value):
        if isinstance(holder, cst.Param):
            return holder.with_changes(default=value)
        return holder.with_changes(value=value)

    def locate(self, scope) -> Located:
        holders = self._holders(scope)
        what = {
            "field": f"field `{self.name}`",
            "param": f"parameter `{self.name}` with a default",
            "call": f"`{self.keyword}=` in a matching call",
        }[self.form]
        if not holders:
            return Located(MISSING, reason=f"no {what} here")
        if len(holders) > 1:
            return Located(AMBIGUOUS, tuple(holders), f"{len(holders)} candidates for {what}")
        h = holders[0]
        now = node_tokens(self._value(h))
        if now == self.value_tokens:
            return Located(DONE, (h,))
        if now == self.expect_tokens:
            return Located(PENDING, (h,))
        return Located(
            MISSING,
            (h,),
            f"{what} is `{code(self._value(h))}`, "
            f"expected `{code(self.expect)}` (pristine) or `{code(self.value)}` (applied)",
        )

    def is_applied(self, scope) -> bool:
        # The goal on its own: the default the name ends up with is the new value, by what the
        # code means (the field's last binding in the body; every matching call's keyword).
        if self.form == "field":
            body = scope.body if isinstance(scope, cst.Module) else getattr(scope.body, "body", ())
            last = None
            for stmt in body:
                for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                    if isinstance(small, cst.Assign) and any(_named(t.target, self.name) for t in small.targets):
                        last = small.value
                    elif (
                        isinstance(small, cst.AnnAssign) and small.value is not None and _named(small.target, self.name)
                    ):
                        last = small.value
            values = [last] if last is not None else []
        elif self.form == "param":
            p = getattr(scope, "params", None)
            every = (*p.posonly_params, *p.params, *p.kwonly_params) if isinstance(p, cst.Parameters) else ()
            values = [q.default for q in every if q.name.value == self.name and q.default is not None]
        else:
            values = [
                a.value
                for n in walk(scope)
                if isinstance(n, cst.Call) and node_meaning(n.func) == meaning(self.call_src)
                if self.arg_src is None
                or (n.args and n.args[0].keyword is None and node_meaning(n.args[0].value) == meaning(self.arg_src))
                for a in n.args
                if a.keyword is not None and a.keyword.value == self.keyword
            ]
        return bool(values) and all(node_meaning(v) == self.goal for v in values)

    def _set(self, scope, value):
        (h,) = self._holders(scope)
        return replace_node(scope, h, self._with_value(h, value))

    def apply(self, scope):
        return self._set(scope, self.value)

    def revert(self, scope):
        return self._set(scope, self.expect)


def _named(target, name: str) -> bool:
    return isinstance(target, cst.Name) and target.value == name


_OPS = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}


def _bound(text: str) -> tuple:
    """``">= 2.9.0"`` -> (">=", the value compared); an OpParamError otherwise."""
    t = text.strip()
    for op in (">=", "<=", ">", "<"):
        if t.startswith(op):
            v = _literal(t[len(op) :].strip())
            if v is None:
                break
            return op, v
    raise OpParamError(
        "params.goal", f"`{text}` is not a bound", 'write a comparison and a value: ">= 2.9.0", "> 1024"'
    )


def _literal(text: str):
    """A default's value for a bound: a number, or a version (``"2.9.0"``, quoted or not);
    None for anything else."""
    from packaging.version import InvalidVersion, Version

    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        t = t[1:-1]
    try:
        return (
            float(t) if t.replace(".", "", 1).isdigit() and t.count(".") <= 1 and not t.startswith(".") else Version(t)
        )
    except InvalidVersion:
        return None


def satisfies(value, bound: tuple) -> bool | None:
    """Does a default's value (``_literal``) satisfy the bound?  None when it cannot be told
    (not a number or version, or the two are of different kinds)."""
    op, want = bound
    if value is None or type(value) is not type(want):
        return None
    return _OPS[op](value, want)


def value_code(op: "SetDefault", holder) -> str:
    """The code of the default a holder (a site ``locate`` found) sets."""
    return code(op._value(holder))
