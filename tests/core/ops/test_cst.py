"""patchkit/core/ops/_cst.py: what the ops compare statements and expressions by."""

import libcst as cst

from patchkit.core.ops._cst import blocks, may_print_as, node_tokens, walk

EVERY_KIND = """
import os
match = 1
type Alias = int
x: int = 3; y = 4
# a comment before a compound statement
if match:
    pass
elif y:
    for i in range(3):
        while i:
            i -= 1
        else:
            pass
    async def f():
        async for a in b:
            pass
        async with c as d:
            pass
@decorator
def g(x):
    with open(x) as f:
        try:
            return f.read()
        except OSError:
            return None
        finally:
            pass
@dataclass
class C:
    field: int = 0
try:
    pass
except* ValueError:
    pass
match x:
    case 1:
        pass
"hello"
(a, b) = 1, 2
iffy = 1
"""


def _statements(src: str) -> list:
    module = cst.parse_module(src)
    return [s for scope in walk(module) if isinstance(scope, (cst.Module, cst.FunctionDef, cst.ClassDef))
            for _, body in blocks(scope) for s in body]  # fmt: skip


def test_a_statement_may_always_print_as_its_own_tokens():
    """may_print_as is a filter before printing: it never turns away a statement whose tokens
    are the ones wanted, of any kind, at any depth."""
    stmts = _statements(EVERY_KIND)
    kinds = {type(s).__name__ for s in stmts}
    assert {"SimpleStatementLine", "If", "For", "While", "FunctionDef", "ClassDef", "With", "Try", "TryStar"} <= kinds
    assert "Match" in kinds
    assert all(may_print_as(s, node_tokens(s)) for s in stmts)


def test_a_simple_statement_is_never_printed_to_be_compared_with_a_compound_one():
    stmts = _statements(EVERY_KIND)
    simple = [s for s in stmts if isinstance(s, cst.SimpleStatementLine)]
    compound = [s for s in stmts if not isinstance(s, cst.SimpleStatementLine)]
    for s in simple:
        for c in compound:
            want = node_tokens(c)
            assert may_print_as(s, want) == (want[0] == "match"), (node_tokens(s), want)
            assert may_print_as(c, node_tokens(s)) == (node_tokens(s)[0] in ("match", '"hello"', "(")), node_tokens(s)
