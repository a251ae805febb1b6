"""replace-stmt: golden before/after (with the round trip), at any depth, told apart by
context; and the refusals."""

import pytest

from patchkit.ops import KINDS, OpParamError
from tests.ops.golden import check, state

# sglang's model_runner-like shape: a statement nested in an if body inside a method.
SRC = """
class ModelRunner:
    def init(self):
        if self.server_args.enable_foo:
            # the hook registers itself
            self.register_hook()
            self.ready = True
        for layer in self.layers:
            layer.setup()
        self.ready = True
"""


def test_replace_stmt_by_pass_inside_an_if_body():
    after = SRC.replace("            self.register_hook()\n", "            pass\n")
    check(
        "replace-stmt",
        SRC,
        after,
        "ModelRunner.init",
        {"match": "self.register_hook()"},
        {"with": "pass"},
    )


def test_replace_stmt_with_several_statements_in_a_for_body():
    after = SRC.replace(
        "            layer.setup()\n", "            layer.setup(warm=True)\n            layer.check()\n"
    )
    check(
        "replace-stmt",
        SRC,
        after,
        "ModelRunner.init",
        {"match": "layer.setup()"},
        {"with": "layer.setup(warm=True)\nlayer.check()"},
    )
    with pytest.raises(OpParamError, match="holds locator.match"):
        KINDS["replace-stmt"]({"match": "layer.setup()"}, {"with": "layer.setup()\nlayer.warm()"})


def test_replace_stmt_needs_context_where_the_statement_repeats():
    loc = state("replace-stmt", SRC, "ModelRunner.init", {"match": "self.ready = True"}, {"with": "pass"})
    assert loc.state == "ambiguous" and "after/before/inside" in loc.reason
    after = SRC.replace("            self.ready = True\n", "            self.ready = False\n")
    check(
        "replace-stmt",
        SRC,
        after,
        "ModelRunner.init",
        {"match": "self.ready = True", "inside": "if self.server_args.enable_foo"},
        {"with": "self.ready = False"},
    )


def test_replace_stmt_missing_and_partially_edited():
    assert state("replace-stmt", SRC, "ModelRunner.init", {"match": "nothing()"}, {"with": "pass"}).state == "missing"
    both = SRC.replace("            layer.setup()\n", "            layer.setup()\n            pass\n")
    loc = state(
        "replace-stmt",
        both,
        "ModelRunner.init",
        {"match": "layer.setup()", "inside": "for layer in self.layers"},
        {"with": "pass"},
    )
    assert loc.state == "missing" and "partially" in loc.reason


def test_the_round_trip_check_fires_when_match_is_not_upstreams_bytes():
    import libcst as cst

    from patchkit import pyscope
    from patchkit.planner import Edit, check_round_trip

    src = "def f():\n    x = g(1)  # why\n    y = 2\n"
    op = KINDS["replace-stmt"]({"match": "x = g(1)"}, {"with": "pass"})  # the comment left out
    scope = pyscope.resolve(cst.parse_module(src), "f")[-1]
    why = check_round_trip(Edit(op, scope, op.apply(scope), True, True))
    assert why and "original bytes" in why
