"""A replace-stmt that turns an assertion into a fallback (``assert stream is not None`` ->
``if stream is None: ...; return entry.runnable(*args)``) is for "the assertion no longer stops
the run: where it would fail, the code leaves by that fallback" (goal.relaxing, goal.relaxed).
Reached in other words (upstream's own guard after the same statement, in its own words), the
op reads `upstream`, or `someone-else` where the pristine release still asserts, and apply
writes no second guard.  A look-alike guard (on one platform only, one that raises, one that
returns another result, one after a use of the name) or the assertion still standing where it
can fail concludes nothing.

Offline, on a miniature sglang tree: 0.5.8 (in the cache) is the release the recipe was
written for, 0.5.9 the target's pristine release.  Real: SGLang 0.5.17+ (the corpus's
glm51bench-pcg-skip-assert, tests/product/test_corpus.py).
"""

from __future__ import annotations

import pytest

from patchkit.core import goal
from patchkit.core.ops import KINDS

FILE = "sglang/srt/compilation/backend.py"

HOME = """\
class Backend:
    def __call__(self, entry, *args):
        if entry.graph is None:
            stream = get_stream()
            assert (
                stream is not None
            ), "capture stream is not set"
            with capture(stream=stream):
                out = entry.runnable(*args)
            return out
        return entry.graph.replay()
"""

RECIPE = """
id = "skip-capture"
summary = "fall back to eager where no capture stream is active"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "replace-stmt"
engine = "sglang"
file = "sglang/srt/compilation/backend.py"
scope = "Backend.__call__"
[ops.locator]
match = '''
assert (
    stream is not None
), "capture stream is not set"
'''
[ops.params]
with = '''
if stream is None:
    logger.warning("no capture stream")
    entry.skip = True
    return entry.runnable(*args)
'''
"""

# upstream's own fallback, in its own words (SGLang 0.5.17's shape): the assertion gone
UPSTREAM = """\
class Backend:
    def __call__(self, entry, *args):
        if entry.graph is None:
            # the replacement backend has no capture stream: run eagerly
            stream = get_stream()
            if stream is None:
                print_warning_once("capture stream is not set; falling back to eager")
                return entry.runnable(*args)
            with capture(stream=stream):
                out = entry.runnable(*args)
            return out
        return entry.graph.replay()
"""


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(FILE, "skip-capture", RECIPE, home=HOME)


def test_upstream_fallback_in_its_own_words_reads_upstream(judge):
    root, cli, op = judge(UPSTREAM, pristine=UPSTREAM)
    assert op["state"] == "upstream", op
    assert op["evidence"]["rule"] == 7 and op["evidence"]["goal"] == "upstream", op
    assert op["evidence"]["goal_at"] == f"{FILE}:6", op
    assert "first statement that reads stream is `if stream is None:`" in op["evidence"]["goal_eval"], op
    code, out, err = cli("apply", "skip-capture")
    assert (root / FILE).read_text() == UPSTREAM, (code, out, err)


def test_a_fallback_the_pristine_lacks_is_someone_elses_and_left_alone(judge):
    root, cli, op = judge(UPSTREAM, pristine=HOME)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    for verb in ("apply", "revert"):
        code, out, err = cli(verb, "skip-capture")
        assert (root / FILE).read_text() == UPSTREAM, (verb, code, out, err)


# The guard stands before the assertion, which can then no longer fail: the goal is reached at
# the pending site too, and apply would write a second guard.
GUARD_ABOVE = UPSTREAM.replace(
    "                return entry.runnable(*args)\n",
    "                return entry.runnable(*args)\n            assert stream is not None\n",
)


def test_a_guard_above_the_assertion_reads_upstream_not_pending(judge):
    root, cli, op = judge(GUARD_ABOVE, pristine=GUARD_ABOVE)
    assert op["state"] == "upstream", op


def test_the_patchs_own_form_in_other_words_reads_upstream(judge):
    own = UPSTREAM.replace("if stream is None:", "if not (stream is not None) or entry.skip:")
    root, cli, op = judge(own, pristine=own)
    assert op["state"] == "upstream", op


DECOYS = {
    # upstream 0.5.14's shape: a fallback on one platform, the assertion kept for the others
    "one platform": UPSTREAM.replace("if stream is None:", "if _is_hip and stream is None:"),
    "raises": UPSTREAM.replace(
        "                return entry.runnable(*args)\n", "                raise RuntimeError()\n"
    ),
    "raises first": UPSTREAM.replace(
        "                print_warning_once(",
        "                if strict:\n                    raise RuntimeError()\n                print_warning_once(",
    ),
    "another result": UPSTREAM.replace(
        "                return entry.runnable(*args)\n", "                return None\n"
    ),
    "another condition": UPSTREAM.replace("if stream is None:", "if stream is not None:"),
    "after a use": UPSTREAM.replace(
        "            if stream is None:", "            stream.synchronize()\n            if stream is None:"
    ),
    "the assertion still before it": UPSTREAM.replace(
        "            if stream is None:",
        "            assert stream is not None, 'no stream'\n            if stream is None:",
    ),
    "the assertion in another arm": UPSTREAM.replace(
        "        return entry.graph.replay()", "        assert stream is not None\n        return entry.graph.replay()"
    ),
    "the statement before it gone": UPSTREAM.replace("stream = get_stream()", "stream = get_capture_stream()"),
    "another scope": UPSTREAM.replace("def __call__", "def run"),
}


@pytest.mark.parametrize("name", sorted(DECOYS))
def test_a_look_alike_fallback_is_not_the_goal(judge, name):
    target = DECOYS[name]
    root, cli, op = judge(target, pristine=target)
    assert op["state"] not in ("upstream", "someone-else", "applied", "applied?"), (name, op)
    assert op["evidence"]["goal"] == "", (name, op)


class _Op:
    kind = "replace-stmt"

    def __init__(self, match: str, with_: str) -> None:
        self.impl = KINDS["replace-stmt"]({"match": match}, {"with": with_})


@pytest.mark.parametrize(
    "match, with_",
    [
        ("x = 1", "if y is None:\n    return z"),  # not an assertion
        ("assert y is not None", "if y is None:\n    raise ValueError()"),  # still stops
        ("assert y is not None", "if y is None:\n    log()"),  # does not leave: runs on into the use
        ("assert y is not None", "if y is None:\n    return z\nelse:\n    pass"),
        ("assert y is not None", "if y is None:\n    return z\nlog()"),  # more than the guard
        ("assert y is not None", "if y is None and x:\n    return z"),
    ],
)
def test_only_an_assertion_turned_into_a_fallback_has_this_goal(match, with_):
    assert goal.relaxing(_Op(match, with_)) is None


FIRST_HOME = """\
def run(entry, *args):
    assert entry.graph is not None, "no graph"
    return entry.graph.replay(*args)
"""

FIRST_RECIPE = (
    RECIPE.replace('scope = "Backend.__call__"', 'scope = "run"')
    .replace(
        """match = \'\'\'
assert (
    stream is not None
), "capture stream is not set"
\'\'\'""",
        """match = 'assert entry.graph is not None, "no graph"'""",
    )
    .replace(
        """if stream is None:
    logger.warning("no capture stream")
    entry.skip = True
    return entry.runnable(*args)""",
        """if entry.graph is None:
    return entry.runnable(*args)""",
    )
)


@pytest.mark.parametrize(
    "target, reached",
    [
        # a guard on another test (`not x` is not `x is None`) that does not leave
        ("def run(entry, *args):\n    if not entry.graph:\n        pass\n", False),
        (  # upstream's guard at the def's start, in its own words
            "def run(entry, *args):\n    log()\n    if entry.graph is None:\n        warn()\n"
            "        return entry.runnable(*args)\n    return entry.graph.replay(*args)\n",
            True,
        ),
        (  # a use of the name before the guard
            "def run(entry, *args):\n    entry.graph.warm()\n    if entry.graph is None:\n"
            "        warn()\n        return entry.runnable(*args)\n    return entry.graph.replay(*args)\n",
            False,
        ),
    ],
)
def test_an_assertion_that_opened_its_def_is_read_from_the_defs_start(one_op_judge, target, reached):
    judge = one_op_judge(FILE, "skip-capture", FIRST_RECIPE, home=FIRST_HOME)
    root, cli, op = judge(target, pristine=target)
    assert (op["state"] == "upstream") is reached, op
    if reached:
        assert "at the start of run the first statement that reads entry" in op["evidence"]["goal_eval"], op
