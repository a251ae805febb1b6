"""replace-stmt: golden before/after (with the round trip), at any depth, told apart by
context; and the refusals."""

import libcst as cst
import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check, state

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

    from patchkit.core import pyscope
    from patchkit.core.planner import Edit, check_round_trip

    src = "def f():\n    x = g(1)  # why\n    y = 2\n"
    op = KINDS["replace-stmt"]({"match": "x = g(1)"}, {"with": "pass"})  # the comment left out
    scope = pyscope.resolve(cst.parse_module(src), "f")[-1]
    why = check_round_trip(Edit(op, scope, op.apply(scope), True, True))
    assert why and "original bytes" in why


# -- a replacement that holds the statement (wrapped in try:) -----------------------------------
# sglang 0.5.9's NativeSparseAttnBackend.init_forward_metadata; the GLM-5 guide wraps the call.
NSA = """
class NativeSparseAttnBackend:
    def init_forward_metadata(self, forward_batch):
        seqlens_32 = forward_batch.seq_lens.to(torch.int32)
        if is_deep_gemm:
            paged_mqa_schedule_metadata = deep_gemm.get_paged_mqa_logits_metadata(
                seqlens_32, 64, deep_gemm.get_num_sms()
            )
        return paged_mqa_schedule_metadata
"""
CALL = """
paged_mqa_schedule_metadata = deep_gemm.get_paged_mqa_logits_metadata(
    seqlens_32, 64, deep_gemm.get_num_sms()
)
"""
WRAPPED = """
try:
    paged_mqa_schedule_metadata = deep_gemm.get_paged_mqa_logits_metadata(
        seqlens_32, 64, deep_gemm.get_num_sms()
    )
except RuntimeError:
    paged_mqa_schedule_metadata = None
"""
NSA_AFTER = NSA.replace(
    "            paged_mqa_schedule_metadata = deep_gemm.get_paged_mqa_logits_metadata(\n"
    "                seqlens_32, 64, deep_gemm.get_num_sms()\n"
    "            )\n",
    "            try:\n"
    "                paged_mqa_schedule_metadata = deep_gemm.get_paged_mqa_logits_metadata(\n"
    "                    seqlens_32, 64, deep_gemm.get_num_sms()\n"
    "                )\n"
    "            except RuntimeError:\n"
    "                paged_mqa_schedule_metadata = None\n",
)
WHERE = "NativeSparseAttnBackend.init_forward_metadata"


def test_replace_stmt_by_a_try_that_holds_it():
    assert NSA_AFTER != NSA
    check("replace-stmt", NSA, NSA_AFTER, WHERE, {"match": CALL}, {"with": WRAPPED})


def test_the_statement_inside_its_done_replacement_is_no_pending_site():
    done = state("replace-stmt", NSA_AFTER, WHERE, {"match": CALL}, {"with": WRAPPED})
    assert done.state == "done" and len(done.nodes) == 1 and isinstance(done.nodes[0], cst.Try), done
    # The statement standing beside its done replacement, not inside it, is still a half edit.
    both = NSA_AFTER.replace(
        "        return", "        " + CALL.strip().replace("\n", "\n        ") + "\n        return"
    )
    loc = state("replace-stmt", both, WHERE, {"match": CALL}, {"with": WRAPPED})
    assert loc.state == "missing" and "partially" in loc.reason, loc
