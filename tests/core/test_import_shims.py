"""ensure-import across a module moved into a package (README: ensure-import and shims),
judged through `status` on a tree that is its own release: the name bound from the moved
module is upstream's, and a shim left at the op's own file is not its site."""

from __future__ import annotations

import json

from tests.conftest import mini_sglang, release_in_cache

UTILS = "def is_sm100_supported():\n    return True\n\n\ndef is_sm120_supported():\n    return False\n"
COMM = "from sglang.srt.utils import is_sm100_supported\n\n\ndef gate():\n    return is_sm100_supported()\n"
HOME = {"sglang/srt/utils.py": UTILS, "sglang/srt/layers/comm.py": COMM}
RECIPE = """
id = "imp"
summary = "import the SM120 helper"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "ensure-import"
engine = "sglang"
file = "sglang/srt/layers/comm.py"
[ops.locator]
module = "sglang.srt.utils"
[ops.params]
name = "is_sm120_supported"
after = "is_sm100_supported"
"""


def _status(tmp_path, run_cli, monkeypatch, files):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    release_in_cache(cache, "sglang", "0.5.9", HOME)  # where the recipe was written
    new = {**files, "sglang/version.py": '__version__ = "0.5.10"\n'}
    release_in_cache(cache, "sglang", "0.5.10", {"sglang/__init__.py": "", **new})  # the tree's own release
    root = mini_sglang(tmp_path / "t", new)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "imp.toml").write_text(RECIPE)
    code, out, err = run_cli("--recipes", str(tmp_path / "r"), "status", "imp", "-t", f"sglang={root}", "--json")
    return code, json.loads(out)["recipes"][0], err


def test_the_name_imported_from_the_moved_module_is_upstream(tmp_path, run_cli, monkeypatch):
    moved = COMM.replace("sglang.srt.utils import is_sm100_supported", "sglang.srt.utils.common import (\n"
                         "    is_sm100_supported,\n    is_sm120_supported,\n)")  # fmt: skip
    files = {
        "sglang/srt/utils/__init__.py": "from .common import *\n",
        "sglang/srt/utils/common.py": UTILS,
        "sglang/srt/layers/comm.py": moved,
    }
    code, r, err = _status(tmp_path, run_cli, monkeypatch, files)
    (op,) = r["ops"]
    assert (r["state"], op["state"]) == ("upstream", "upstream"), (r, err)
    assert code == 0


def test_the_op_file_left_as_a_shim_is_missing_not_pending(tmp_path, run_cli, monkeypatch):
    files = {
        "sglang/srt/utils.py": UTILS,
        "sglang/srt/layers/comm.py": "from sglang.srt.layers.comm_impl import *\n",
        "sglang/srt/layers/comm_impl.py": COMM,
    }
    code, r, err = _status(tmp_path, run_cli, monkeypatch, files)
    (op,) = r["ops"]
    assert (r["state"], op["state"]) == ("missing", "missing"), (r, err)
    assert "re-export shim of sglang.srt.layers.comm_impl" in op["message"]
    assert code == 1
