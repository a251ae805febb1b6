"""set-default with a bound goal (``params.goal = ">= 2.9.0"``): a pin upstream bumped past
the recipe's value reaches the goal in other words (upstream, or someone-else where the
release does not), never `missing`; below the bound it stays missing; a bound that the
recipe's own value does not meet is refused when the recipe is read."""

from __future__ import annotations

import json
import zipfile

import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.conftest import downloaded, mini_sglang

MODULE = """\
class Deps:
    flashinfer_version: str = "{v}"
    other: int = 1
"""

RECIPE = """
id = "pin"
summary = "need flashinfer 0.6.5 or later"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "set-default"
engine = "sglang"
file = "sglang/srt/deps.py"
scope = "Deps"
[ops.locator]
field = "flashinfer_version"
[ops.params]
value = '"0.6.5"'
expect = '"0.6.3"'
goal = ">= 0.6.5"
"""


@pytest.fixture
def world(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "pin.toml").write_text(RECIPE)

    def on(tree_v: str, release_v: str | None):
        if release_v is not None:
            wheels = tmp_path / "cache" / "wheels" / "sglang" / "0.5.9"
            wheels.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(wheels / "sglang-0.5.9-py3-none-any.whl", "w") as z:
                z.writestr("sglang/__init__.py", "")
                z.writestr("sglang/version.py", '__version__ = "0.5.9"\n')
                z.writestr("sglang/srt/deps.py", MODULE.format(v=release_v))
            downloaded(wheels / "sglang-0.5.9-py3-none-any.whl", tmp_path / "cache")
        root = mini_sglang(tmp_path / "t", {"sglang/srt/deps.py": MODULE.format(v=tree_v)})
        out = run_cli("--recipes", str(tmp_path / "r"), "status", "pin", "-t", f"sglang={root}", "--json")[1]
        return json.loads(out)["recipes"][0]["ops"][0]

    return on


def test_a_pin_bumped_past_the_value_by_upstream_reads_upstream(world):
    op = world("0.7.4", "0.7.4")
    assert op["state"] == "upstream" and "satisfies the goal `>= 0.6.5`" in op["message"], op
    assert op["evidence"]["rule"] == 7


def test_bumped_by_someone_else_reads_someone_else(world):
    op = world("0.7.4", "0.6.3")
    assert op["state"] == "someone-else", op


@pytest.mark.parametrize("v", ["0.6.4", "banana"])
def test_below_the_bound_or_not_a_version_stays_missing(world, v):
    assert world(v, v)["state"] == "missing"


def test_a_bound_the_value_itself_misses_is_refused():
    with pytest.raises(OpParamError, match="does not hold for params.value"):
        KINDS["set-default"]({"field": "x"}, {"value": '"0.6.4"', "expect": '"0.6.3"', "goal": ">= 0.6.5"})
    with pytest.raises(OpParamError, match="is not a bound"):
        KINDS["set-default"]({"field": "x"}, {"value": "1", "expect": "0", "goal": "lots"})
