from tests.core.ops.golden import check, goal, state

# SGLang's shape of the published patch (a GLM-5 deployment guide's patch_serverargs.py):
# the DSA KV-cache dtype override restricted to compute capability 10 and up.
GATE = """
class ServerArgs:
    def _handle_model_specific_adjustments(self):
        compute_cap = get_device_capability()
        if self.kv_cache_dtype in ("auto", "fp8_e4m3") and is_deepseek_dsa:
            self.kv_cache_dtype = "fp8_e4m3"
        if self.kv_cache_dtype in ("auto", "fp8_e4m3") or is_deepseek_dsa:
            pass
"""
SCOPE = "ServerArgs._handle_model_specific_adjustments"
LOC = {"operands": ['self.kv_cache_dtype in ("auto", "fp8_e4m3")', "is_deepseek_dsa"]}


def test_append_operand_to_an_if_header():
    after = GATE.replace("and is_deepseek_dsa:", "and is_deepseek_dsa and compute_cap[0] >= 10:", 1)
    check("and-operand", GATE, after, SCOPE, LOC, {"operand": "compute_cap[0] >= 10"})


def test_insert_after_named_operand_in_a_multiline_chain():
    before = "X = (\n    a\n    and b\n    and c\n)\n"
    after = "X = (\n    a\n    and x\n    and b\n    and c\n)\n"
    check("and-operand", before, after, "", {"operands": ["a", "c"]}, {"operand": "x", "after": "a"})


def test_an_or_chain_is_not_an_and_chain():
    # The `or` chain holding both operands is not the site: one `and` chain is.
    assert state("and-operand", GATE, SCOPE, LOC, {"operand": "c"}).state == "pending"
    assert state("and-operand", "X = a or b\n", "", {"operands": ["a", "b"]}, {"operand": "c"}).state == "missing"


def test_a_parenthesised_sub_chain_is_one_operand_of_the_outer_chain_and_a_chain_of_its_own():
    before = "X = (a and b) and c\n"
    check("and-operand", before, "X = (a and b and d) and c\n", "", {"operands": ["a", "b"]}, {"operand": "d"})
    after = "X = (a and b) and c and d\n"
    check("and-operand", before, after, "", {"operands": ["(a and b)", "c"]}, {"operand": "d"})


def test_goal_the_operand_stands_once_at_the_top_of_the_chain():
    params = {"operand": "compute_cap[0] >= 10"}
    done = GATE.replace("and is_deepseek_dsa:", "and is_deepseek_dsa and compute_cap[0] >= 10:", 1)
    assert goal("and-operand", done, SCOPE, LOC, params) == ("done", True)
    twice = GATE.replace(
        "and is_deepseek_dsa:", "and is_deepseek_dsa and compute_cap[0] >= 10 and compute_cap[0]>=10:", 1
    )
    assert goal("and-operand", twice, SCOPE, LOC, params)[1] is False
