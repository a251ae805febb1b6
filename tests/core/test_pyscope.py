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


def test_line_numbers_put_a_decorated_def_at_its_def_line_as_position_provider_does():
    """Both ways of numbering (the token search and the printed lines) give the line that
    libcst's PositionProvider gives a decorated def: its `def` line, not its first decorator's,
    which is also where a view's placeholder for it stands."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    src = "x = 1\n\n@functools.cache\n@register(\n    'a',\n)\ndef f():\n    pass\n\n\n@a\nclass C:\n    pass\n"
    m = cst.parse_module(src)
    want = {
        id(n): p.start.line
        for n, p in MetadataWrapper(m, unsafe_skip_copy=True).resolve(PositionProvider).items()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef))
    }
    defs = [s for s in m.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))]
    assert sorted(want.values()) == [7, 12]
    assert pyscope.line_numbers(m, None, defs, src) == want  # the token search
    assert pyscope.line_numbers(m, None, defs) == want  # the printed lines
