from tests.core.ops.golden import check, goal, state

GATE = """
def apply_flashinfer_allreduce_fusion(batch_size: int):
    return (
        # NOTE: a comment
        (_is_sm90_supported or _is_sm100_supported)
        and _is_flashinfer_available
        and batch_size > 0
    )


def lookalike():
    return _is_sm90_supported or _is_sm100_supported
"""


def test_append_operand_in_parenthesised_multiline_gate():
    after = GATE.replace(
        "(_is_sm90_supported or _is_sm100_supported)\n",
        "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)\n",
        1,
    )
    check(
        "or-operand",
        GATE,
        after,
        "apply_flashinfer_allreduce_fusion",
        {"operands": ["_is_sm90_supported", "_is_sm100_supported"]},
        {"operand": "_is_sm120_supported"},
    )


def test_insert_after_named_operand():
    before = "def f():\n    return a or b or c\n"
    after = "def f():\n    return a or x or b or c\n"
    check("or-operand", before, after, "f", {"operands": ["a", "c"]}, {"operand": "x", "after": "a"})


def test_multiline_operator_layout_is_copied():
    before = "X = (\n    a\n    or b\n)\n"
    after = "X = (\n    a\n    or b\n    or c\n)\n"
    check("or-operand", before, after, "", {"operands": ["a", "b"]}, {"operand": "c"})


def test_module_scope_sees_both_and_is_ambiguous():
    loc = state("or-operand", GATE, "", {"operands": ["_is_sm90_supported"]}, {"operand": "_is_sm120_supported"})
    assert loc.state == "ambiguous"


def test_and_chain_is_not_an_or_chain():
    assert state("or-operand", "X = a and b\n", "", {"operands": ["a", "b"]}, {"operand": "c"}).state == "missing"


# -- the post-condition reads the goal: a top-level operand of the one `or`, once --------------------


def test_goal_the_operand_stands_once_at_the_top_of_the_chain():
    loc, params = {"operands": ["_is_sm90_supported", "_is_sm100_supported"]}, {"operand": "_is_sm120_supported"}
    scope = "apply_flashinfer_allreduce_fusion"
    done = GATE.replace("or _is_sm100_supported)\n", "or _is_sm100_supported or _is_sm120_supported)\n", 1)
    assert goal("or-operand", done, scope, loc, params) == ("done", True)
    twice = GATE.replace(
        "or _is_sm100_supported)\n", "or _is_sm100_supported or _is_sm120_supported or _is_sm120_supported)\n", 1
    )
    assert goal("or-operand", twice, scope, loc, params) == ("done", False)
    nested = GATE.replace("or _is_sm100_supported)\n", "or (_is_sm100_supported or _is_sm120_supported))\n", 1)
    assert goal("or-operand", nested, scope, loc, params)[1] is False  # inside a parenthesised sub-chain


def test_goal_compares_operands_by_meaning():
    loc = {"operands": ["is_sm90_supported()", "is_sm100_supported()"]}
    src = "def _resolve_backend():\n    return is_sm90_supported() or is_sm100_supported() or is_sm120_supported( )\n"
    assert goal("or-operand", src, "_resolve_backend", loc, {"operand": "is_sm120_supported()"}) == ("done", True)
