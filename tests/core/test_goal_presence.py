"""An insert's goal is the presence of its code (goal.present): where the statements already
stand in the op's scope in other formatting (layout, quotes, parentheses: their ``ast`` the
same), the op reads `upstream` (the pristine release has them) or `someone-else` (it does not),
never `pending`, and apply writes no second copy.  Code that means something else, or that
stands twice, concludes nothing (`pending`, as the text says).

Offline, on a miniature sglang tree; 0.5.9 in the cache is the target's pristine release.
"""

from __future__ import annotations

import pytest

FILE = "sglang/srt/args.py"

BASE = """\
class Args:
    def check(self):
        self.validate()
        return self
"""

RECIPE = """
id = "flag"
summary = "turn the fast path on"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/args.py"
scope = "Args.check"
[ops.locator]
anchor = "self.validate()"
[ops.params]
code = '''
if self.backend == "flashinfer":
    self.enable_fast_path = True
'''
"""

# the same code, written otherwise: other quotes, parentheses, a comment, placed after a log line
OTHER = """\
class Args:
    def check(self):
        self.validate()
        self.log()
        if (self.backend == 'flashinfer'):  # fast path
            self.enable_fast_path = (True)
        return self
"""


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(FILE, "flag", RECIPE)


def test_upstreams_code_in_other_formatting_reads_upstream(judge):
    root, cli, op = judge(OTHER, pristine=OTHER)
    assert op["state"] == "upstream", op
    assert op["evidence"]["goal_at"] == f"{FILE}:5" and "in other formatting" in op["evidence"]["goal_eval"], op


def test_someone_elses_copy_is_never_written_twice(judge):
    root, cli, op = judge(OTHER, pristine=BASE)
    assert op["state"] == "someone-else", op
    code, out, err = cli("apply", "flag")
    assert code == 0 and (root / FILE).read_text() == OTHER, (out, err)
    code, out, err = cli("revert", "flag")
    assert (root / FILE).read_text() == OTHER, (code, out, err)


@pytest.mark.parametrize(
    "target",
    [
        OTHER.replace("(True)", "False"),  # another meaning
        OTHER.replace(
            "        return self\n",
            "        if self.backend == 'flashinfer':\n            self.enable_fast_path = True\n        return self\n",
        ),  # twice
    ],
)
def test_other_code_or_two_copies_stay_pending(judge, target):
    root, cli, op = judge(target, pristine=target)
    assert op["state"] == "pending", op


def test_pending_where_it_is_not_there_and_apply_writes_it_once(judge):
    root, cli, op = judge(BASE, pristine=BASE)
    assert op["state"] == "pending", op
    code, out, err = cli("apply", "flag")
    assert code == 0 and (root / FILE).read_text().count("enable_fast_path") == 1, (out, err)


HOME = """\
class Args:
    def check(self):
        if (self.backend == 'flashinfer'):
            self.enable_fast_path = (True)
        self.validate()
        return self
"""


def test_code_that_stood_there_already_where_the_op_was_written_is_not_its_goal(judge):
    """The release the recipe was written for (0.5.8) held the same code elsewhere in the
    scope, and the op was pending there: that copy is not the op's goal reached."""
    root, cli, op = judge(OTHER, pristine=OTHER, home=HOME)
    assert op["state"] == "pending", op
