"""or-operand: widen a boolean ``or`` chain, e.g. ``(_is_sm90_supported or _is_sm100_supported)``
gains ``or _is_sm120_supported``.

  locator.operands = ["_is_sm90_supported", "_is_sm100_supported"]   the chain holding these
  params.operand   = "_is_sm120_supported"                          what to add
  params.after     = "_is_sm90_supported"                           optional; default: at the end
"""

from __future__ import annotations

import ast

import libcst as cst

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import code, meaning, node_tokens, parse_expr, replace_node, tokens, walk


def _is_op(n, operator=cst.Or) -> bool:
    return isinstance(n, cst.BooleanOperation) and isinstance(n.operator, operator)


def flatten(chain: cst.BooleanOperation) -> tuple[list, list]:
    """Operands and operators of an ``a or b or c`` chain (or ``a and b and c``: the chain's
    own operator); parenthesised sub-chains stay whole."""
    operands, operators = [], []
    operator = type(chain.operator)

    def rec(n, top: bool) -> None:
        if _is_op(n, operator) and (top or not n.lpar):
            rec(n.left, False)
            operators.append(n.operator)
            rec(n.right, False)
        else:
            operands.append(n)

    rec(chain, True)
    return operands, operators


def build(operands: list, operators: list, like: cst.BooleanOperation) -> cst.BaseExpression:
    node = operands[0]
    for op, right in zip(operators, operands[1:], strict=True):  # one operator between two operands
        node = cst.BooleanOperation(left=node, operator=op, right=right)
    return node.with_changes(lpar=like.lpar, rpar=like.rpar)


def chains(scope, operator=cst.Or):
    """Maximal ``or`` (or ``and``) chains in scope (a chain's inner nodes are not chains of their own)."""
    inner: set[int] = set()
    for n in walk(scope):
        if _is_op(n, operator) and id(n) not in inner:
            yield n
            stack = [n]
            while stack:
                m = stack.pop()
                if _is_op(m, operator) and (m is n or not m.lpar):
                    inner.add(id(m))
                    stack += [m.left, m.right]


@register("or-operand")
class OrOperand(Op):
    OPERATOR: type = cst.Or  # and-operand (patchkit/core/ops/and_operand.py) is this op on `and`
    WORD = "or"
    LOCATOR = {"operands": "list[str]"}
    PARAMS = {"operand": "str", "after": "str"}
    REQUIRED = ("locator.operands", "params.operand")

    def __init__(self, locator: dict, params: dict) -> None:
        if not locator["operands"]:
            raise OpParamError("locator.operands", "is empty", "name the operands the chain already has")
        for i, o in enumerate(locator["operands"]):
            parse_expr(o, f"locator.operands[{i}]")
        self.operands = tuple(tokens(o) for o in locator["operands"])
        self.operand = parse_expr(params["operand"], "params.operand")
        self.operand_tokens = tokens(params["operand"])
        self.after = tokens(params["after"]) if "after" in params else None
        named = tuple(locator["operands"])
        # The post-condition's own reading (is_applied): what the operands mean.
        self.goal, self.named = meaning(params["operand"]), {meaning(o) for o in named}
        self.reads = Reads(patterns=(named,), file_words=named)  # every candidate chain holds them

    def _find(self, scope):
        cands = []
        for ch in chains(scope, self.OPERATOR):
            have = [node_tokens(o) for o in flatten(ch)[0]]
            if all(o in have for o in self.operands):
                cands.append((ch, have))
        return cands

    def locate(self, scope) -> Located:
        cands = self._find(scope)
        if not cands:
            held = ", ".join(" ".join(o) for o in self.operands)
            return Located(MISSING, reason=f"no `{self.WORD}` chain holding {held}")
        if len(cands) > 1:
            said = f"{len(cands)} `{self.WORD}` chains hold these operands"
            return Located(AMBIGUOUS, tuple(c for c, _ in cands), said)
        ch, have = cands[0]
        if self.operand_tokens in have:
            return Located(DONE, (ch,))
        if self.after is not None and self.after not in have:
            return Located(MISSING, (ch,), f"operand `{' '.join(self.after)}` to insert after is not in the chain")
        return Located(PENDING, (ch,))

    def is_applied(self, scope) -> bool:
        # The goal on its own, read by Python's parser (``ast`` flattens ``a or b or c`` into
        # one BoolOp and keeps a parenthesised ``(a or b)`` whole): the one ``or`` holding the
        # locator's operands has the operand as a top-level operand, exactly once.
        ors = [n for n in walk(scope) if _is_op(n, self.OPERATOR)]
        inner = {id(k) for n in ors for k in (n.left, n.right) if not k.lpar}
        found = []
        for n in ors:
            if id(n) in inner:
                continue
            values = [ast.dump(v) for v in ast.parse(f"(\n{code(n)}\n)", mode="eval").body.values]
            if self.named <= set(values):
                found.append(values.count(self.goal))
        return found == [1]

    def apply(self, scope):
        ((ch, have),) = self._find(scope)
        operands, operators = flatten(ch)
        i = len(operands) if self.after is None else have.index(self.after) + 1
        operands.insert(i, self.operand)
        operators.insert(i - 1, operators[i - 2] if i >= 2 else operators[0])
        return replace_node(scope, ch, build(operands, operators, ch))

    def revert(self, scope):
        ((ch, have),) = self._find(scope)
        operands, operators = flatten(ch)
        i = have.index(self.operand_tokens)
        del operands[i]
        del operators[i - 1 if i > 0 else 0]
        return replace_node(scope, ch, build(operands, operators, ch))
