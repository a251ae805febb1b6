"""An ensure-import's goal is the name bound at the module's top level from the op's module
(goal.imported): a relative import (``from ..utils import (... NAME ...)``) is resolved from
the file's own package, so the name upstream imports in the file's first ``from ..utils``
block reads `upstream` (the pristine release has it) or `someone-else` (it does not), never
`pending` at another block, and apply writes no second import.  An import of the name from
another module, a relative import that resolves elsewhere, or a later rebinding of the name,
concludes nothing (`pending`).

Offline, on a miniature sglang tree; 0.5.9 in the cache is the target's pristine release.
"""

from __future__ import annotations

import json

import pytest

FILE = "sglang/srt/layers/gemm.py"

RECIPE = """
id = "imp"
summary = "import the helper"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "ensure-import"
engine = "sglang"
file = "sglang/srt/layers/gemm.py"
[ops.locator]
module = "sglang.srt.utils"
[ops.params]
name = "is_sm12x_supported"
"""

# FlashInfer 0.6.5's gemm_base.py in miniature: the name in the first of two `from ..utils` blocks
UPSTREAM = """\
import torch

from ..utils import (
    is_sm100a_supported,
    is_sm12x_supported,
)
from ..utils import (
    get_indptr,
)


def gemm(a):
    return is_sm12x_supported(a.device)
"""

BASE = UPSTREAM.replace("    is_sm12x_supported,\n", "")


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(FILE, "imp", RECIPE)


def test_a_relative_import_of_the_name_upstream_reads_upstream(judge):
    root, cli, op = judge(UPSTREAM, pristine=UPSTREAM)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["rule"] == 7 and ev["goal_at"] == f"{FILE}:5", ev
    assert "from ..utils import" in ev["goal_eval"] and "sglang.srt.utils" in ev["goal_eval"], ev


def test_someone_elses_relative_import_is_never_written_twice(judge):
    root, cli, op = judge(UPSTREAM, pristine=BASE)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    code, out, err = cli("apply", "imp")
    assert code == 0 and (root / FILE).read_text() == UPSTREAM, (out, err)
    code, out, err = cli("revert", "imp")
    assert (root / FILE).read_text() == UPSTREAM, (code, out, err)


@pytest.mark.parametrize(
    "target",
    [
        # the name from another module (a decoy of the same name)
        BASE.replace("from ..utils import (\n    get_indptr,", "from ..quant_utils import (\n    is_sm12x_supported,"),
        # one level too deep: sglang.srt.layers.utils, another module
        BASE.replace("import torch\n", "import torch\nfrom .utils import is_sm12x_supported\n"),
        # imported, then rebound at the top level
        UPSTREAM.replace("\n\ndef gemm", "\nis_sm12x_supported = None\n\n\ndef gemm"),
        # bound only inside a function: not at the module's top level
        BASE.replace(
            "    return is_sm12x_supported",
            "    from ..utils import is_sm12x_supported\n\n    return is_sm12x_supported",
        ),
    ],
    ids=["another-module", "another-package", "rebound", "in-a-function"],
)
def test_the_name_from_elsewhere_or_rebound_stays_pending(judge, target):
    root, cli, op = judge(target, pristine=target)
    assert op["state"] == "pending", op
    assert not op["evidence"]["goal"], op


def test_pending_where_it_is_not_imported_and_apply_imports_it_once(judge):
    root, cli, op = judge(BASE, pristine=BASE)
    assert op["state"] == "pending", op
    code, out, err = cli("apply", "imp")
    assert code == 0 and (root / FILE).read_text().count("is_sm12x_supported") == 2, (out, err)
    code, out, err = cli("status", "imp", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "applied", out


@pytest.mark.parametrize(
    "logical,level,module,want",
    [
        ("flashinfer/gemm/gemm_base.py", 2, "utils", "flashinfer.utils"),
        ("flashinfer/gemm/gemm_base.py", 1, "utils", "flashinfer.gemm.utils"),
        ("flashinfer/gemm/__init__.py", 1, "gemm_base", "flashinfer.gemm.gemm_base"),
        ("flashinfer/utils.py", 1, None, "flashinfer"),
        ("flashinfer/utils.py", 3, "x", ""),  # climbs out of the tree
    ],
)
def test_relative_imports_resolve_from_the_files_package(logical, level, module, want):
    import ast

    from patchkit.core import goal

    node = ast.ImportFrom(module=module, names=[ast.alias("x")], level=level)
    assert goal.import_source(node, logical) == want
