import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check, goal, state


def test_replace_gate_expression_in_scope_only():
    before = "def f(major):\n    return major == 10\n\n\ndef g(major):\n    return major == 10\n"
    after = "def f(major):\n    return major in (10, 12)\n\n\ndef g(major):\n    return major == 10\n"
    check("replace-expr", before, after, "f", {"match": "major == 10"}, {"with": "major in (10, 12)"})


def test_count_mismatch_is_ambiguous():
    assert (
        state("replace-expr", "x = a + 1\ny = a + 1\n", "", {"match": "a + 1"}, {"with": "a + 2"}).state == "ambiguous"
    )


def test_replacement_containing_match_is_rejected():
    with pytest.raises(OpParamError):
        KINDS["replace-expr"]({"match": "a"}, {"with": "a or b"})


# -- the replacement already stands elsewhere in the scope ----------------------------------------
# `True`, `None` and dtypes are everywhere: a pristine site reads pending, and the done sites are
# told from the other occurrences by what the scope held before (Op.relative_to).

RUNNER = """
class ModelRunner:
    def init_attention_backend(self):
        self.support_pp = True
        self.cuda_graph_runner = None
        use_fused = is_sm100_supported() and not self.server_args.disable_cuda_graph
        if self.server_args.kv_cache_dtype == "auto":
            self.kv_cache_dtype = torch.bfloat16
        else:
            self.kv_cache_dtype = torch.float8_e4m3fn
        self.max_running = self.server_args.max_running_requests // 2
        return use_fused, True
"""

CASES = [
    ("is_sm100_supported()", "True"),
    ("torch.float8_e4m3fn", "torch.bfloat16"),
    ("self.server_args.max_running_requests // 2", "None"),
]


def _scope(src: str):
    import libcst as cst

    from patchkit.core import pyscope

    return pyscope.resolve(cst.parse_module(src), "ModelRunner.init_attention_backend")


@pytest.mark.parametrize("match,repl", CASES)
def test_a_pristine_site_reads_pending_though_the_replacement_stands_elsewhere(match, repl):
    loc = state("replace-expr", RUNNER, "ModelRunner.init_attention_backend", {"match": match}, {"with": repl})
    assert loc.state == "pending", loc
    assert len(loc.nodes) == 1


@pytest.mark.parametrize("match,repl", CASES)
def test_a_done_site_reads_done_against_where_it_started_and_reverts_alone(match, repl):
    from patchkit.core import pyscope

    op = KINDS["replace-expr"]({"match": match}, {"with": repl})
    chain = _scope(RUNNER)
    before = chain[-1]
    bound = op.relative_to(before)
    after = bound.apply(before)
    text = pyscope.splice(chain, after).code
    assert text == RUNNER.replace(match, repl, 1) and match not in text
    # The code alone cannot tell which occurrence the op made: it says so, it never guesses.
    alone = op.locate(after)
    assert alone.state == "ambiguous" and "only the pristine release can tell" in alone.reason, alone
    done = bound.locate(after)
    assert done.state == "done" and len(done.nodes) == 1, done
    assert bound.is_applied(after)
    # Revert swaps back the site only; swapping every occurrence would change the others.
    assert pyscope.splice(chain, bound.revert(after)).code == RUNNER
    assert pyscope.splice(chain, op.revert(after)).code != RUNNER


def test_relative_to_a_scope_where_it_is_not_pending_changes_nothing():
    op = KINDS["replace-expr"]({"match": "torch.float8_e4m3fn"}, {"with": "torch.bfloat16"})
    done_scope = _scope(RUNNER.replace("torch.float8_e4m3fn", "torch.bfloat16"))[-1]
    assert op.relative_to(done_scope) is op
    lone = KINDS["replace-expr"]({"match": "torch.float8_e4m3fn"}, {"with": "torch.float16"})
    assert lone.relative_to(_scope(RUNNER)[-1]) is lone  # no other occurrence: nothing to tell apart


def test_a_done_site_with_other_code_changed_too_is_not_claimed():
    op = KINDS["replace-expr"]({"match": "is_sm100_supported()"}, {"with": "True"})
    bound = op.relative_to(_scope(RUNNER)[-1])
    # Applied, and another `True` added by hand: the occurrences no longer line up one for one.
    after = _scope(
        RUNNER.replace("is_sm100_supported()", "True").replace("return use_fused, True", "return True, True")
    )
    assert bound.locate(after[-1]).state == "ambiguous"


def test_a_replacement_inside_the_match_is_part_of_it():
    # `None` inside `scale or None` is not a replacement already made: pristine reads pending.
    src = "def f(scale):\n    y = scale or None\n    return y\n"
    after = "def f(scale):\n    y = None\n    return y\n"
    check("replace-expr", src, after, "f", {"match": "scale or None"}, {"with": "None"})


# -- count > 1: each site its own node --------------------------------------------------------------
# sglang 0.5.9's ServerArgs._set_default_nsa_backends assigns "flashmla_sparse" twice; a recipe
# with count = 2 swaps both.  One shared replacement node at both sites was counted once.

NSA = """
class ServerArgs:
    def _set_default_nsa_backends(self, kv_cache_dtype, major):
        if kv_cache_dtype == "fp8_e4m3":
            self.nsa_prefill_backend = "flashmla_sparse"
            self.nsa_decode_backend = "trtllm"
        else:
            self.nsa_prefill_backend = "flashmla_sparse"
            self.nsa_decode_backend = "fa3"
"""


def test_count_two_replaces_both_sites_and_reads_done():
    after = NSA.replace('"flashmla_sparse"', '"flashinfer"')
    loc = {"match": '"flashmla_sparse"', "count": 2}
    check("replace-expr", NSA, after, "ServerArgs._set_default_nsa_backends", loc, {"with": '"flashinfer"'})


def test_count_two_sites_are_distinct_nodes_in_the_edited_tree():
    op = KINDS["replace-expr"]({"match": '"flashmla_sparse"', "count": 2}, {"with": '"flashinfer"'})
    import libcst as cst

    from patchkit.core import pyscope

    edited = op.apply(pyscope.resolve(cst.parse_module(NSA), "ServerArgs._set_default_nsa_backends")[-1])
    done = op.locate(edited)
    assert done.state == "done" and len(done.nodes) == 2, done
    assert done.nodes[0] is not done.nodes[1]
    # and back: both sites, in the tree apply made (not re-parsed)
    assert op.locate(op.revert(edited)).state == "pending"


def test_one_node_standing_at_two_places_counts_twice():
    import libcst as cst

    shared = cst.Name("b")

    class _Share(cst.CSTTransformer):
        def leave_Name(self, original, updated):
            return shared if original.value == "a" else updated

    mod = cst.parse_module("x = a\ny = a\n").visit(_Share())
    loc = KINDS["replace-expr"]({"match": "a", "count": 2}, {"with": "b"}).locate(mod)
    assert loc.state == "done" and len(loc.nodes) == 2, loc


# -- the post-condition reads the goal: the match nowhere, in any spelling; the replacement there ----


def test_goal_the_match_in_another_layout_still_stands():
    loc, params = {"match": "major == 10"}, {"with": "major in (10, 12)"}
    src = "def f(major):\n    ok = major in (10, 12)\n    return ok\n"
    assert goal("replace-expr", src, "f", loc, params) == ("done", True)
    kept = src.replace("    return ok", "    assert (major == 10)\n    return ok")  # tokens differ: "(" ... ")"
    assert goal("replace-expr", kept, "f", loc, params) == ("done", False)
    hex_ = src.replace("    return ok", "    return ok or major == 0xA")
    assert goal("replace-expr", hex_, "f", loc, params) == ("done", False)


# -- bound to one of several occurrences (Op.occurrences / Op.only) -------------------------------
# The judge binds the op to the place the site's identity singles out; the bound op reads, edits,
# checks and reverts that place alone, and keeps to it while other edits of the scope are made.

BACKENDS = """
def pick(fp8, major, user_set):
    if fp8:
        if major >= 10:
            if not user_set:
                backend = "trtllm"
    else:
        if major >= 10:
            if not user_set:
                backend = "trtllm"
    return "trtllm"
"""


def _pick(src: str, name: str = "pick"):
    import libcst as cst

    return next(s for s in cst.parse_module(src).body if getattr(s, "name", None) and s.name.value == name)


def _code(node) -> str:
    import libcst as cst

    return cst.Module(body=[node]).code


def test_occurrences_are_each_place_of_either_form_in_order():
    op = KINDS["replace-expr"]({"match": '"trtllm"'}, {"with": '"flashinfer"'})
    scope = _pick(BACKENDS.replace('backend = "trtllm"\n    return', 'backend = "flashinfer"\n    return'))
    assert [o.state for o in op.occurrences(scope)] == ["pending", "done", "pending"]
    # An op that makes several edits, or one already bound, offers none.
    assert KINDS["replace-expr"]({"match": '"trtllm"', "count": 3}, {"with": '"x"'}).occurrences(scope) == ()
    assert op.only(scope, 0).occurrences(scope) == ()


def test_a_bound_op_edits_reads_and_reverts_its_place_alone():
    op = KINDS["replace-expr"]({"match": '"trtllm"'}, {"with": '"flashinfer"'})
    scope = _pick(BACKENDS)
    assert op.locate(scope).state == "ambiguous"
    bound = op.only(scope, 1)  # the else branch's
    assert bound.locate(scope).state == "pending" and not bound.is_applied(scope)
    after = bound.apply(scope)
    want = BACKENDS.replace('backend = "trtllm"\n    return', 'backend = "flashinfer"\n    return')
    assert _code(after) == want.lstrip("\n")
    assert bound.locate(after).state == "done" and bound.is_applied(after)
    assert bound.relative_to(scope) is bound
    assert _code(bound.revert(after)) == _code(scope)
    # The unbound op reads the edited scope as half made: it is the bound one that knows.
    assert op.locate(after).state == "missing"


def test_a_bound_op_keeps_its_place_when_a_sibling_writes_the_replacement_first():
    """An ordinal of the occurrences would shift when another op of the recipe writes the
    same replacement earlier in the scope: the bound op still finds its own place."""
    op = KINDS["replace-expr"]({"match": '"trtllm"'}, {"with": '"flashinfer"'})
    src = BACKENDS.replace("    if fp8:", '    prefill = "flashmla"\n    if fp8:')
    scope = _pick(src)
    bound = op.only(scope, 1)
    sibling = KINDS["replace-expr"]({"match": '"flashmla"'}, {"with": '"flashinfer"'})
    first = sibling.apply(scope)
    assert bound.locate(first).state == "pending"
    after = bound.apply(first)
    assert 'if not user_set:\n                backend = "flashinfer"\n    return' in _code(after)
    assert _code(after).count('"trtllm"') == 2


def test_a_bound_op_whose_place_changed_reads_missing_never_another_place():
    op = KINDS["replace-expr"]({"match": '"trtllm"'}, {"with": '"flashinfer"'})
    scope = _pick(BACKENDS)
    bound = op.only(scope, 1)
    changed = _pick(BACKENDS.replace("    else:\n        if major >= 10:", "    else:\n        if major >= 12:"))
    assert bound.locate(changed).state == "missing"


# -- which nodes are compared -------------------------------------------------------------------
# Only nodes of the match's or the replacement's type are printed and compared (equal tokens
# parse to the same tree); a starred element prints with its trailing comma, so it reads as
# the tuple `*a,` does and is compared too.


def test_a_starred_element_is_an_occurrence_of_the_tuple_its_tokens_spell():
    src = "def f(k):\n    return torch.empty((*k.shape, 3))\n"
    loc = state("replace-expr", src, "f", {"match": "*k.shape,"}, {"with": "*k.shape[:-1],"})
    assert loc.state == "pending" and type(loc.nodes[0]).__name__ == "StarredElement", loc


def test_the_replacement_is_found_where_it_is_of_another_type_than_the_match():
    # the match parses to a Comparison, the replacement to a Call: each is looked for
    src = "def f(x):\n    if h(x, y=2):\n        return 1\n"
    assert state("replace-expr", src, "f", {"match": "g(x) == 1"}, {"with": "h(x, y = 2)"}).state == "done"
    assert state("replace-expr", src, "f", {"match": "h(x,\n y=2)"}, {"with": "g(x) == 1"}).state == "pending"
