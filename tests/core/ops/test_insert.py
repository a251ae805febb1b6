import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check, state

MOE = """
class ServerArgs:
    def _handle_moe_kernel_config(self):
        if self.quantization == "mxfp8":
            self.moe_runner_backend = "cutlass"

        if self.moe_runner_backend == "flashinfer_cutlass":
            assert self.quantization in ["modelopt_fp4", None]

    def lookalike(self):
        if self.moe_runner_backend == "flashinfer_cutlass":
            pass
"""

ARM = """
if (
    self.moe_runner_backend == "auto"
    and is_sm120_supported()
):
    self.moe_runner_backend = "flashinfer_cutlass"
"""


def test_insert_if_arm_before_compound_anchor():
    after = MOE.replace(
        '            self.moe_runner_backend = "cutlass"\n\n        if self.moe_runner_backend == '
        '"flashinfer_cutlass":\n            assert',
        '            self.moe_runner_backend = "cutlass"\n\n        if (\n            self.moe_runner_backend == '
        '"auto"\n            and is_sm120_supported()\n        ):\n            self.moe_runner_backend = '
        '"flashinfer_cutlass"\n\n        if self.moe_runner_backend == "flashinfer_cutlass":\n            assert',
    )
    assert after != MOE
    check(
        "insert",
        MOE,
        after,
        "ServerArgs._handle_moe_kernel_config",
        {"anchor": 'if self.moe_runner_backend == "flashinfer_cutlass":', "position": "before"},
        {"code": ARM},
    )


def test_insert_after_module_level_sibling_with_decorated_def_around():
    before = """
@decorator
def f():
    pass
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()  # trailing
_use_aiter = False
"""
    after = before.replace("# trailing\n", "# trailing\n_is_sm120_supported = _is_cuda and is_sm120_supported()\n")
    check(
        "insert",
        before,
        after,
        "",
        {"anchor": "_is_sm100_supported = _is_cuda and is_sm100_supported()"},
        {"code": "_is_sm120_supported = _is_cuda and is_sm120_supported()"},
    )


def test_insert_at_end_of_function():
    before = "def f():\n    x = 1\n"
    check("insert", before, "def f():\n    x = 1\n    y = 2\n", "f", {"at": "end"}, {"code": "y = 2"})


def test_anchor_missing_and_ambiguous():
    assert (
        state("insert", MOE, "ServerArgs._handle_moe_kernel_config", {"anchor": "if nothing:"}, {"code": "x = 1"}).state
        == "missing"
    )
    twice = "if a:\n    y = 1\nelse:\n    y = 1\n"
    loc = state("insert", twice, "", {"anchor": "y = 1"}, {"code": "x = 1"})
    assert loc.state == "ambiguous" and len(loc.nodes) == 2
    # A scope's statements do not include those of the defs nested in it.
    assert (
        state(
            "insert",
            MOE,
            "ServerArgs",
            {"anchor": 'if self.moe_runner_backend == "flashinfer_cutlass":'},
            {"code": "x = 1"},
        ).state
        == "missing"
    )


def test_anchor_is_token_exact_not_prefix_of_a_name():
    assert state("insert", "x = 10\n", "", {"anchor": "x = 1"}, {"code": "y = 2"}).state == "missing"
    # nor the start of a longer statement: the anchor is a whole statement or a header
    assert state("insert", "x = 1 + 2\n", "", {"anchor": "x = 1"}, {"code": "y = 2"}).state == "missing"
    assert state("insert", "if a:\n    pass\n", "", {"anchor": "if a"}, {"code": "y = 2"}).state == "pending"


DEEP = """
def f(self):
    if a:
        x = 1
    elif b:
        x = 2
    else:
        x = 3
    for i in r:
        use(i)
    while w:
        step()
    with lock:
        hold()
    try:
        risky()
    except ValueError as e:
        log(e)
    finally:
        done()
"""


@pytest.mark.parametrize(
    "locator,where",
    [
        ({"anchor": "x = 2"}, "        x = 2\n"),
        ({"anchor": "x = 3", "position": "before"}, None),
        ({"anchor": "use(i)"}, "        use(i)\n"),
        ({"anchor": "step()"}, "        step()\n"),
        ({"anchor": "hold()"}, "        hold()\n"),
        ({"anchor": "risky()"}, "        risky()\n"),
        ({"anchor": "log(e)"}, "        log(e)\n"),
        ({"anchor": "done()"}, "        done()\n"),
        ({"inside": "elif b", "at": "start"}, "    elif b:\n"),
        ({"inside": "else:", "at": "end"}, "        x = 3\n"),
        ({"inside": "except ValueError as e", "at": "end"}, "        log(e)\n"),
        ({"inside": "finally", "at": "start"}, "    finally:\n"),
        ({"inside": "for i in r", "at": "start"}, "    for i in r:\n"),
    ],
)
def test_insert_at_any_depth(locator, where):
    if where is None:
        after = DEEP.replace("    else:\n        x = 3\n", "    else:\n        y = 0\n        x = 3\n")
    else:
        after = DEEP.replace(where, where + "        y = 0\n", 1)
    assert after != DEEP
    check("insert", DEEP, after, "f", locator, {"code": "y = 0"})


def test_inside_needs_at_and_a_unique_clause():
    with pytest.raises(OpParamError, match="goes with at"):
        KINDS["insert"]({"inside": "if a", "anchor": "x"}, {"code": "y = 0"})
    assert state("insert", DEEP, "f", {"inside": "elif c", "at": "end"}, {"code": "y = 0"}).state == "missing"
    two = DEEP + "    if a:\n        pass\n"
    assert state("insert", two, "f", {"inside": "if a", "at": "end"}, {"code": "y = 0"}).state == "ambiguous"


DECORATED = """
import functools


@functools.cache
def is_sm121a_supported(device) -> bool:
    return False


def other():
    return 1
"""


@pytest.mark.parametrize("position", ["before", "after"])
def test_a_decorated_def_is_the_anchor_its_def_line_names(position):
    """Upstream decorated the anchor def (FlashInfer 0.7.4's `@functools.cache`): its header is
    still its `def` line; "before" it goes above the decorators, "after" below its body."""
    helper = "def is_sm12x_supported(device) -> bool:\n    return True\n"
    block = "@functools.cache\ndef is_sm121a_supported(device) -> bool:\n    return False\n"
    new = helper + "\n\n" + block if position == "before" else block + "\n\n" + helper
    check(
        "insert",
        DECORATED,
        DECORATED.replace(block, new),
        locator={"anchor": "def is_sm121a_supported(device) -> bool:", "position": position},
        params={"code": "\n\n" + helper},
    )


def test_a_decorator_written_in_the_anchor_must_stand_too():
    src = DECORATED.replace("@functools.cache\n", "")
    got = state(
        "insert",
        src,
        locator={"anchor": "@functools.cache\ndef is_sm121a_supported(device) -> bool:"},
        params={"code": "x = 1\n"},
    )
    assert got.state.value == "missing", got
