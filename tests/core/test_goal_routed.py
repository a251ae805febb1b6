"""An add-branch whose clause is a device gate (``elif is_sm120_supported(): BODY``) is for "the
chain takes the device into BODY" (goal.routed).  Where the chain already does in other words
(an arm ``major >= 12`` with the same statements, or an ``else`` every arm before refuses the
device), the op reads `upstream` (or `someone-else`), never `pending`, and apply writes no
second arm.  An arm before it whose answer is unknown, the device taken into other statements,
the same statements under an arm the device never reaches, a clause that is no device gate:
nothing is concluded.

Offline, on a miniature sglang tree: 0.5.8 (in the cache) is the release the recipe was
written for, 0.5.9 the target's pristine release.
"""

from __future__ import annotations

import pytest

FILE = "sglang/srt/moe.py"

HOME = """\
import torch
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


class Runner:
    def pick(self):
        if is_sm100_supported():
            self.backend = "flashinfer_trtllm"
        elif is_sm90_supported():
            self.backend = "flashinfer_cutlass"
        else:
            self.backend = "triton"
"""

RECIPE = """
id = "route-sm120"
summary = "the cutlass MoE on SM120"
device = "sm120"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "add-branch"
engine = "sglang"
file = "sglang/srt/moe.py"
scope = "Runner.pick"
[ops.locator]
branch = "elif is_sm90_supported()"
position = "after"
[ops.params]
code = '''
elif is_sm120_supported():
    self.backend = "flashinfer_cutlass"
'''
"""

# upstream routes SM120 into the same statements in its own words
OTHER_WORDS = HOME.replace(
    "        elif is_sm90_supported():",
    "        elif torch.cuda.get_device_capability()[0] >= 12 or is_sm90_supported():",
)


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(FILE, "route-sm120", RECIPE, home=HOME)


def test_the_release_as_written_is_pending_and_apply_adds_the_arm(judge):
    root, cli, op = judge(HOME, pristine=HOME)
    assert op["state"] == "pending", op


def test_the_chain_taking_the_device_there_in_other_words_reads_upstream(judge):
    root, cli, op = judge(OTHER_WORDS, pristine=OTHER_WORDS)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["rule"] == 7 and ev["goal"] == "upstream" and ev["goal_at"] == f"{FILE}:9", ev
    assert "already takes 12.0 into the clause's statements" in ev["goal_eval"], ev
    code, out, err = cli("apply", "route-sm120")
    assert (root / FILE).read_text() == OTHER_WORDS, (code, out, err)


def test_someone_elses_arm_is_left_by_apply_and_revert(judge):
    root, cli, op = judge(OTHER_WORDS, pristine=HOME)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    for verb in ("apply", "revert"):
        code, out, err = cli(verb, "route-sm120")
        assert (root / FILE).read_text() == OTHER_WORDS, (verb, code, out, err)


def test_an_else_every_arm_before_refuses_is_the_device_s_arm(judge):
    text = HOME.replace('            self.backend = "triton"', '            self.backend = "flashinfer_cutlass"')
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op


def test_the_named_branch_gone_one_chain_that_takes_the_device_there_reads_upstream(judge):
    text = HOME.replace("elif is_sm90_supported():", "elif torch.cuda.get_device_capability()[0] in (9, 12):")
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op


DECOYS = {
    # the device taken into other statements first
    "another body": HOME.replace(
        "        elif is_sm90_supported():",
        '        elif torch.cuda.get_device_capability()[0] >= 12:\n            self.backend = "triton"\n'
        "        elif is_sm90_supported():",
    ),
    # an arm before it whose answer for the device is unknown
    "unknown before": OTHER_WORDS.replace("        if is_sm100_supported():", "        if self.forced:"),
    # the same statements under an arm the device never reaches, and an else elsewhere
    "never reached": HOME.replace("elif is_sm90_supported():", "elif is_sm90_supported() or is_sm100_supported():"),
    # the named branch gone, and two chains of the scope take the device there: no site
    "two chains": HOME.replace("elif is_sm90_supported():", "elif torch.cuda.get_device_capability()[0] >= 12:")
    + '        if torch.cuda.get_device_capability()[0] >= 12:\n            self.backend = "flashinfer_cutlass"\n',
    # another chain of the scope does, but the named branch's chain does not
    "another chain": HOME
    + '        if torch.cuda.get_device_capability()[0] >= 12:\n            self.backend = "flashinfer_cutlass"\n',
}


@pytest.mark.parametrize("name", sorted(DECOYS))
def test_a_look_alike_route_is_not_the_goal(judge, name):
    target = DECOYS[name]
    root, cli, op = judge(target, pristine=target)
    assert op["state"] in ("pending", "missing"), (name, op)
    assert op["evidence"]["goal"] == "", (name, op)


def test_a_clause_that_is_no_device_gate_has_no_such_goal(judge):
    recipe = RECIPE.replace("elif is_sm120_supported():", 'elif self.mode == "fast":')
    text = HOME.replace('            self.backend = "triton"', '            self.backend = "flashinfer_cutlass"')
    root, cli, op = judge(text, pristine=text, recipe=recipe)
    assert op["state"] == "pending" and not op["evidence"]["goal"], op
