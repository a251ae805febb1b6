"""pyscope: scope resolution and line numbers on small modules."""

from __future__ import annotations

import libcst as cst
import pytest

from patchkit.core import pyscope

BANNER = "#" * 48  # banner comments: each '#' was a place a naive gap regex could restart


SOURCE = f"""\
class A:
    def f(self):
        x = (  {BANNER}
            1)
        {BANNER}
        return x

    def g(self):
        x = (  # one
            2)
"""


def test_resolve_finds_nested_scopes_and_says_what_is_missing():
    m = cst.parse_module("class A:\n    def f(self):\n        pass\n")
    assert [type(n).__name__ for n in pyscope.resolve(m, "A.f")] == ["Module", "ClassDef", "FunctionDef"]
    with pytest.raises(pyscope.ScopeError, match=r"scope `A.g` not found \(no `g`\)"):
        pyscope.resolve(m, "A.g")


def test_line_numbers_skip_comments_between_tokens_without_backtracking_blowup():
    src = SOURCE
    m = cst.parse_module(src)
    g = pyscope.resolve(m, "A.g")[-1]
    f = pyscope.resolve(m, "A.f")[-1]
    xg, xf = g.body.body[0], f.body.body[0]
    lines = pyscope.line_numbers(m, None, [xg, xf], src)
    assert lines == {id(xf): 3, id(xg): 9}
