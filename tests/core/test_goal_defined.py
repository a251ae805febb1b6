"""An insert whose code is a def (a helper) is for the name bound by a def in the op's scope
(goal.defined), not for the helper's body: upstream's `def is_sm12x_supported` with another
CUDA floor (FlashInfer 0.6.8's utils.py) reads `upstream`, a user's own def `someone-else`,
never `pending`, and apply never writes a second def of the name.  The name bound otherwise
(an assignment, an import), or by a def in another scope (a method, a nested def), is not
the helper: `pending`, as the text says.  An anchor def that upstream decorated
(`@functools.cache`) is still the anchor.

Offline, on a miniature sglang tree; 0.5.8 in the cache is the release the recipe was
written for, 0.5.9 the target's pristine release.
"""

from __future__ import annotations

import json

import pytest

FILE = "sglang/srt/utils.py"

RECIPE = """
id = "helper"
summary = "add the SM12x helper"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/utils.py"
[ops.locator]
anchor = "def is_sm121a_supported(device) -> bool:"
position = "after"
[ops.params]
code = '''
def is_sm12x_supported(device) -> bool:
    major, minor = get_compute_capability(device)
    if major != 12:
        return False
    return version_at_least(cuda_version(), "13.0" if minor >= 1 else "12.8")
'''
"""

HOME = """\
import functools


def get_compute_capability(device):
    return device.capability


def version_at_least(have, want) -> bool:
    return have >= want


def cuda_version():
    return "12.8"


def is_sm120a_supported(device) -> bool:
    return get_compute_capability(device) == (12, 0)


def is_sm121a_supported(device) -> bool:
    return get_compute_capability(device) == (12, 1)


def other():
    return 1
"""

# upstream's helper, its own body (SM121's floor 12.9), after a decorated anchor
UPSTREAM = HOME.replace(
    "def is_sm121a_supported(device) -> bool:\n    return get_compute_capability(device) == (12, 1)\n",
    "@functools.cache\ndef is_sm121a_supported(device) -> bool:\n    return get_compute_capability(device) == (12, 1)\n"
    "\n\n@functools.cache\ndef is_sm12x_supported(device) -> bool:\n"
    '    """Any SM12x."""\n    major, minor = get_compute_capability(device)\n'
    '    return major == 12 and version_at_least(cuda_version(), "12.9" if minor >= 1 else "12.8")\n',
)
DEF_LINE = UPSTREAM.splitlines().index("def is_sm12x_supported(device) -> bool:") + 1


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(FILE, "helper", RECIPE, home=HOME)


def test_upstreams_helper_in_its_own_words_after_a_decorated_anchor_reads_upstream(judge):
    root, cli, op = judge(UPSTREAM, pristine=UPSTREAM)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["rule"] == 7 and ev["goal_at"] == f"{FILE}:{DEF_LINE}", ev
    assert "`def is_sm12x_supported`" in ev["goal_eval"], ev


def test_the_helper_with_its_anchor_gone_still_reads_upstream(judge):
    text = UPSTREAM.replace("is_sm121a_supported", "is_sm121_family")
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op


def test_someone_elses_helper_is_never_defined_twice(judge):
    root, cli, op = judge(UPSTREAM, pristine=HOME)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    code, out, err = cli("apply", "helper")
    assert code == 0 and (root / FILE).read_text() == UPSTREAM, (out, err)
    code, out, err = cli("revert", "helper")
    assert (root / FILE).read_text() == UPSTREAM, (code, out, err)


@pytest.mark.parametrize(
    "target",
    [
        # the name bound to something else: an assignment, an import of another module's
        HOME + "\nis_sm12x_supported = None\n",
        "from sglang.srt.other import is_sm12x_supported\n\n\n" + HOME,
        # a def of that name in another scope: a method, a nested def
        HOME + "\n\nclass Probe:\n    def is_sm12x_supported(self, device) -> bool:\n        return False\n",
        HOME.replace("    return 1\n", "    def is_sm12x_supported(device):\n        return False\n\n    return 1\n"),
    ],
    ids=["assigned", "imported", "a-method", "a-nested-def"],
)
def test_the_name_bound_otherwise_or_in_another_scope_is_not_the_helper(judge, target):
    root, cli, op = judge(target, pristine=target)
    assert op["state"] == "pending", op
    assert not op["evidence"]["goal"], op


def test_pending_where_it_is_not_defined_and_apply_defines_it_once(judge):
    decorated = HOME.replace("def is_sm121a_supported", "@functools.cache\ndef is_sm121a_supported")
    root, cli, op = judge(decorated, pristine=decorated)
    assert op["state"] == "pending", op
    code, out, err = cli("apply", "helper")
    text = (root / FILE).read_text()
    assert code == 0 and text.count("def is_sm12x_supported") == 1, (out, err)
    assert text.index("def is_sm121a_supported") < text.index("def is_sm12x_supported"), text
    code, out, err = cli("status", "helper", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "applied", out


def test_a_helper_that_stood_there_already_where_the_op_was_written_is_not_its_goal(judge):
    home = HOME + "\n\ndef is_sm12x_supported(device) -> bool:\n    return False\n"
    later = home.replace("return 1", "return 2")
    root, cli, op = judge(later, pristine=later, home=home)
    assert op["state"] == "pending", op
