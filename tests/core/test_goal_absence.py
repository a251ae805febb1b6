"""delete-stmt's goal is "absence at the identified scope" (goal.absent): its context gone
(it would read `missing`), the op's named scope stands and holds the deleted statement nowhere,
in any formatting, where the release the recipe was written for held it.  Then it reads
`upstream` where the pristine release lacks it too, `someone-else` where the pristine has it
(nothing proves patchkit deleted it), and apply and revert leave the bytes; a scope that still
holds the statement anywhere, or a scope that is gone, concludes nothing.

Offline, on a miniature sglang tree: 0.5.8 (in the cache) is the release the recipe was
written for, 0.5.9 the target's pristine release.
"""

from __future__ import annotations

import pytest

FILE = "sglang/srt/runner.py"

HOME = """\
class Runner:
    def start(self):
        self.load()
        self.disable_cuda_graph()
        self.warmup()
"""

RECIPE = """
id = "keep-graphs"
summary = "keep CUDA graphs on"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "delete-stmt"
engine = "sglang"
file = "sglang/srt/runner.py"
scope = "Runner.start"
[ops.locator]
match = "self.disable_cuda_graph()"
after = "self.load()"
"""

# upstream refactored start(): the context the op names is gone, and so is the statement
GONE = """\
class Runner:
    def start(self):
        self.load_weights()
        self.warmup(graphs=True)
"""


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(FILE, "keep-graphs", RECIPE, home=HOME)


def test_upstream_removed_it_too_reads_upstream(judge):
    root, cli, op = judge(GONE, pristine=GONE)
    assert op["state"] == "upstream", op
    assert op["evidence"]["goal"] == "upstream" and op["evidence"]["rule"] == 7, op
    assert "stands nowhere in Runner.start" in op["evidence"]["goal_eval"], op


def test_absent_in_the_target_present_in_the_pristine_is_someone_elses(judge):
    pristine = GONE.replace("        self.warmup(", "        self.disable_cuda_graph()\n        self.warmup(")
    root, cli, op = judge(GONE, pristine=pristine)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    path = root / FILE
    for verb in ("apply", "revert"):
        code, out, err = cli(verb, "keep-graphs")
        assert path.read_text() == GONE, (verb, code, out, err)


@pytest.mark.parametrize(
    "target",
    [
        GONE.replace(
            "        self.warmup(", "        if True:\n            self.disable_cuda_graph( )\n        self.warmup("
        ),
        GONE.replace("class Runner:\n    def start", "class Runner:\n    def begin"),  # the scope is gone
    ],
)
def test_a_statement_still_in_the_scope_or_a_scope_gone_stays_missing(judge, target):
    root, cli, op = judge(target, pristine=target)
    assert op["state"] == "missing", op
    assert not op["evidence"]["goal"], op


def test_on_its_own_release_it_is_pending(judge):
    root, cli, op = judge(HOME, pristine=HOME)
    assert op["state"] == "pending", op
