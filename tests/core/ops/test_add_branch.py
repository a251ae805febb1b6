"""add-branch: an elif/else clause added to an if-chain beside a named branch (the shape of
sglang's server_args.py picking a default attention backend)."""

import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check, state

SRC = """
class ServerArgs:
    def _pick_attention_backend(self):
        if self.attention_backend is None:
            if is_sm100_supported():
                self.attention_backend = "trtllm_mha"
            elif is_hip():
                self.attention_backend = "aiter"
            else:
                self.attention_backend = "triton"
"""
ARM = 'elif is_sm120_supported():\n    self.attention_backend = "flashinfer"\n'
NEW = '            elif is_sm120_supported():\n                self.attention_backend = "flashinfer"\n'


def test_elif_after_a_named_branch_at_depth():
    after = SRC.replace("            elif is_hip():", NEW + "            elif is_hip():")
    check(
        "add-branch",
        SRC,
        after,
        "ServerArgs._pick_attention_backend",
        {"branch": "if is_sm100_supported():", "position": "after"},
        {"code": ARM},
    )


def test_elif_before_else():
    after = SRC.replace("            else:", NEW + "            else:")
    check(
        "add-branch",
        SRC,
        after,
        "ServerArgs._pick_attention_backend",
        {"branch": "else", "position": "before"},
        {"code": ARM},
    )


def test_else_after_the_last_branch():
    src = SRC.replace('            else:\n                self.attention_backend = "triton"\n', "")
    after = src + '        else:\n            self.attention_backend = "auto"\n'
    check(
        "add-branch",
        src,
        after,
        "ServerArgs._pick_attention_backend",
        {"branch": "if self.attention_backend is None"},
        {"code": 'else:\n    self.attention_backend = "auto"\n'},
    )
    # an else where the chain has one already is refused, not stacked
    loc = state(
        "add-branch",
        SRC,
        "ServerArgs._pick_attention_backend",
        {"branch": "elif is_hip()"},
        {"code": "else:\n    pass\n"},
    )
    assert loc.state == "missing" and "already has an else" in loc.reason


def test_missing_branch_and_hand_edited_chain():
    assert (
        state("add-branch", SRC, "ServerArgs._pick_attention_backend", {"branch": "elif is_xpu()"}, {"code": ARM}).state
        == "missing"
    )
    moved = SRC.replace("            else:", NEW + "            else:")
    loc = state(
        "add-branch", moved, "ServerArgs._pick_attention_backend", {"branch": "if is_sm100_supported()"}, {"code": ARM}
    )
    assert loc.state == "missing" and "elsewhere in the chain" in loc.reason


def test_refusals():
    with pytest.raises(OpParamError, match="before a chain's `if`"):
        KINDS["add-branch"]({"branch": "if a", "position": "before"}, {"code": ARM})
    with pytest.raises(OpParamError, match="one elif/else clause|more than one"):
        KINDS["add-branch"]({"branch": "if a"}, {"code": ARM + "elif b:\n    pass\n"})
    with pytest.raises(OpParamError, match="not an if/elif/else header"):
        KINDS["add-branch"]({"branch": "x = 1"}, {"code": ARM})
