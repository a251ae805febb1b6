"""A replace-stmt that widens an assertion for the recipe's device (``assert is_sm100_supported()``
-> ``assert is_sm100_supported() or is_sm120_supported()``) is for "the assertion lets the device
through" (goal.widening, goal.widened).  Where the code does in other words (the assertion
itself, a name it reads now bound wider; or, the assertion rewritten, the scope's one device
assertion admitting the device), the op reads `upstream` (or `someone-else`), never `pending`
or `missing`, and apply writes nothing.  A rewritten assertion that still refuses the device,
one whose answer is unknown, two device assertions: nothing is concluded.

Offline, on a miniature sglang tree: 0.5.8 (in the cache) is the release the recipe was
written for, 0.5.9 the target's pristine release.
"""

from __future__ import annotations

import pytest

FILE = "sglang/srt/fp4.py"

HOME = """\
import torch
from sglang.srt.utils import is_sm100_supported, is_sm120_supported

_is_sm100 = is_sm100_supported()


def fp4_gemm(a, b):
    assert _is_sm100, "the FP4 GEMM needs SM100"
    return torch.ops.fp4(a, b)
"""

RECIPE = """
id = "fp4-sm120"
summary = "the FP4 GEMM on SM120"
device = "sm120"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "replace-stmt"
engine = "sglang"
file = "sglang/srt/fp4.py"
scope = "fp4_gemm"
[ops.locator]
match = 'assert _is_sm100, "the FP4 GEMM needs SM100"'
[ops.params]
with = 'assert _is_sm100 or is_sm120_supported(), "the FP4 GEMM needs SM100 or SM120"'
"""

# upstream widened the flag the assertion reads: the assertion itself stands unedited
FLAG = HOME.replace("_is_sm100 = is_sm100_supported()", "_is_sm100 = is_sm100_supported() or is_sm120_supported()")
# upstream rewrote the assertion in its own words
REWRITTEN = HOME.replace(
    '    assert _is_sm100, "the FP4 GEMM needs SM100"',
    '    assert torch.cuda.get_device_capability()[0] in (10, 12), "FP4 needs Blackwell"',
)


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(FILE, "fp4-sm120", RECIPE, home=HOME)


def test_the_release_as_written_is_pending(judge):
    root, cli, op = judge(HOME, pristine=HOME)
    assert op["state"] == "pending", op


@pytest.mark.parametrize("text", [FLAG, REWRITTEN], ids=["the flag bound wider", "rewritten"])
def test_the_assertion_admitting_the_device_in_other_words_reads_upstream(judge, text):
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["rule"] == 7 and ev["goal_at"] == f"{FILE}:8" and "admits 12.0" in ev["goal_eval"], ev
    code, out, err = cli("apply", "fp4-sm120")
    assert (root / FILE).read_text() == text, (code, out, err)


def test_someone_elses_wider_assertion_is_left_by_apply_and_revert(judge):
    root, cli, op = judge(REWRITTEN, pristine=HOME)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    for verb in ("apply", "revert"):
        code, out, err = cli(verb, "fp4-sm120")
        assert (root / FILE).read_text() == REWRITTEN, (verb, code, out, err)


DECOYS = {
    "still refuses": REWRITTEN.replace("in (10, 12)", "in (10, 11)"),
    "unknown": HOME.replace('    assert _is_sm100, "the FP4 GEMM needs SM100"', "    assert self_check(a)"),
    "two device assertions": REWRITTEN.replace(
        "    return torch", "    assert torch.cuda.get_device_capability()[0] >= 9\n    return torch"
    ),
    "the flag bound to something unknown": HOME.replace("_is_sm100 = is_sm100_supported()", "_is_sm100 = probe()"),
}


@pytest.mark.parametrize("name", sorted(DECOYS))
def test_a_look_alike_assertion_is_not_the_goal(judge, name):
    target = DECOYS[name]
    root, cli, op = judge(target, pristine=target)
    assert op["state"] in ("pending", "missing"), (name, op)
    assert op["evidence"]["goal"] == "", (name, op)


def test_a_recipe_with_no_device_has_no_such_goal(judge):
    root, cli, op = judge(REWRITTEN, pristine=REWRITTEN, recipe=RECIPE.replace('device = "sm120"\n', ""))
    assert op["state"] == "missing" and not op["evidence"]["goal"], op
