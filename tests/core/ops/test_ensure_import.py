import pytest

from patchkit.core.ops.ensure_import import defines
from tests.core.ops.golden import check, goal, state

IMPORTS = """
from sglang.srt.distributed import get_tp_group
from sglang.srt.utils import (
    get_bool_env_var,
    is_cuda,
    is_sm90_supported,  # hopper
    is_sm100_supported,
)

_is_cuda = is_cuda()
"""


def test_add_name_to_parenthesised_multiline_import_after_sibling():
    after = IMPORTS.replace("    is_sm100_supported,\n)", "    is_sm100_supported,\n    is_sm120_supported,\n)")
    check(
        "ensure-import",
        IMPORTS,
        after,
        "",
        {"module": "sglang.srt.utils"},
        {"name": "is_sm120_supported", "after": "is_sm100_supported"},
    )


def test_add_in_the_middle_keeps_trailing_comment_on_its_owner():
    after = IMPORTS.replace("    is_sm90_supported,  # hopper\n", "    is_sm90_supported,  # hopper\n    is_sm95,\n")
    check(
        "ensure-import",
        IMPORTS,
        after,
        "",
        {"module": "sglang.srt.utils"},
        {"name": "is_sm95", "after": "is_sm90_supported"},
    )


def test_single_line_import_and_new_statement():
    check(
        "ensure-import", "from a import b\nx = 1\n", "from a import b, c\nx = 1\n", "", {"module": "a"}, {"name": "c"}
    )
    check(
        "ensure-import", "import os\nx = 1\n", "import os\nfrom a import c\nx = 1\n", "", {"module": "a"}, {"name": "c"}
    )


def test_already_imported_is_done():
    assert state("ensure-import", IMPORTS, "", {"module": "sglang.srt.utils"}, {"name": "is_cuda"}).state == "done"


def test_defines_sees_assignments_not_only_defs():
    # sglang >= 0.5.7 defines is_sm120_supported as a module-level assignment.
    assert defines("is_sm120_supported = lru_cache(maxsize=1)(partial(f, 12))\n", "is_sm120_supported")
    assert defines("def is_sm120_supported():\n    pass\n", "is_sm120_supported")
    assert not defines("def is_sm100_supported():\n    pass\n", "is_sm120_supported")


# -- the post-condition reads the goal: the name, as the module's top level leaves it ---------------


def test_goal_a_later_fallback_rebinding_the_name_is_not_the_import():
    """locate finds the import; the goal is what the name is bound to once the top level ran."""
    params = {"name": "is_sm120_supported"}
    done = IMPORTS.replace("    is_sm100_supported,\n", "    is_sm100_supported,\n    is_sm120_supported,\n")
    assert goal("ensure-import", done, "", {"module": "sglang.srt.utils"}, params) == ("done", True)
    rebound = done + "is_sm120_supported = None\n"
    assert goal("ensure-import", rebound, "", {"module": "sglang.srt.utils"}, params) == ("done", False)
    aliased = done + "from sglang.srt.layers import is_sm120_supported\n"
    assert goal("ensure-import", aliased, "", {"module": "sglang.srt.utils"}, params) == ("done", False)


def test_goal_an_import_as_another_name_or_of_another_module_does_not_bind_it():
    params = {"name": "is_sm120_supported"}
    other = IMPORTS + "from sglang.srt.utils import is_sm120_supported as sm120\nimport is_sm120_supported.x\n"
    assert goal("ensure-import", other, "", {"module": "sglang.srt.utils"}, params) == ("pending", False)
    back = other + "from sglang.srt.utils import is_sm120_supported as is_sm120_supported\n"
    assert goal("ensure-import", back, "", {"module": "sglang.srt.utils"}, params) == ("done", True)


# -- shims: a module moved into a package, its old path left re-exporting ---------------------

SM120 = {"name": "is_sm120_supported", "after": "is_sm100_supported"}
UTILS, COMMON = {"module": "sglang.srt.utils"}, {"module": "sglang.srt.utils.common"}


@pytest.mark.parametrize(
    "src,locator,want",
    [
        # upstream moved utils.py to utils/common.py and imports the name from there
        ("from sglang.srt.utils.common import is_sm100_supported, is_sm120_supported\n", UTILS, ("done", True)),
        # a recipe naming the new module, on a file that imports it through the shim
        ("from sglang.srt.utils import is_sm100_supported, is_sm120_supported\n", COMMON, ("done", True)),
        # bound, then rebound from elsewhere: not the goal
        (
            "from sglang.srt.utils.common import is_sm120_supported\nis_sm120_supported = None\n",
            UTILS,
            ("pending", False),
        ),
        # another package's name is another thing
        ("from sglang.srt.platforms import is_sm120_supported\n", UTILS, ("pending", False)),
        ("from sglang.srt.utils_extra import is_sm120_supported\n", UTILS, ("pending", False)),
    ],
)
def test_the_name_bound_from_its_moved_module_or_shim_is_the_goal(src, locator, want):
    assert goal("ensure-import", src, "", locator, SM120) == want


@pytest.mark.parametrize(
    "src,shim",
    [
        ('"""Moved."""\nfrom sglang.srt.layers.comm_impl import *  # noqa\n', "sglang.srt.layers.comm_impl"),
        ("from .comm_impl import *\nfrom .comm_impl import _private\n__all__ = ['gate']\n", ".comm_impl"),
    ],
)
def test_a_shim_at_the_moved_modules_old_path_is_not_the_site(src, shim):
    """Its code moved: an import added to the shim binds the name where nothing uses it."""
    got = state("ensure-import", src, "", UTILS, SM120)
    assert got.state == "missing" and f"re-export shim of {shim}" in got.reason


@pytest.mark.parametrize(
    "src,locator",
    [
        ("from .common import *\n", COMMON),  # the package's own shim of the recipe's module
        ("from sglang.srt.utils import *\n", UTILS),
        ("from .x import *\n\ndef f():\n    pass\n", UTILS),  # code of its own: no shim
        ("import os\nfrom a import b\n", UTILS),  # no star import: no shim
    ],
)
def test_not_a_shim_of_another_module_reads_pending_as_before(src, locator):
    assert state("ensure-import", src, "", locator, SM120).state == "pending"
