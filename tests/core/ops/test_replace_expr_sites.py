"""replace-expr whose replacement (`True`) already stands elsewhere in the scope, end to end:
a pristine site reads pending, apply makes exactly its edit, a done site reads applied (the
pristine release, here the release's wheel in patchkit's cache, tells which `True` is the
op's), and revert gives the original bytes back, the other `True`s untouched."""

from __future__ import annotations

import json
import zipfile

import pytest

from tests.conftest import downloaded, mini_sglang
from tests.core.ops.test_replace_expr import RUNNER

RECIPE = """
id = "fuse"
summary = "fuse on SM120 too"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "sglang/srt/model_executor/model_runner.py"
scope = "ModelRunner.init_attention_backend"
[ops.locator]
match = "is_sm100_supported()"
[ops.params]
with = "True"
"""
FILE = "sglang/srt/model_executor/model_runner.py"
SOURCE = "import torch\n" + RUNNER


def _world(tmp_path, run_cli, monkeypatch, recipe=RECIPE, file=FILE, source=SOURCE):
    root = mini_sglang(tmp_path / "site", {file: source})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "fuse.toml").write_text(recipe)
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))

    def cli(*args):
        return run_cli("--recipes", str(tmp_path / "recipes"), *args, "-t", f"sglang={root}")

    def op(*args):
        code, out, _ = cli(*args, "--json")
        return code, json.loads(out)["recipes"][0]["ops"][0]

    def wheel():
        d = cache / "wheels" / "sglang" / "0.5.9"
        d.mkdir(parents=True)
        with zipfile.ZipFile(d / "sglang-0.5.9-py3-none-any.whl", "w") as z:
            z.writestr("sglang/__init__.py", "")
            z.writestr(file, source)
        downloaded(d / "sglang-0.5.9-py3-none-any.whl", cache)

    return root / file, cli, op, wheel


@pytest.fixture
def world(tmp_path, run_cli, monkeypatch):
    return _world(tmp_path, run_cli, monkeypatch)


def test_pristine_pending_apply_applied_revert_with_the_pristine_release(world):
    path, cli, op, wheel = world
    wheel()
    code, o = op("status", "fuse")
    assert (code, o["state"]) == (1, "pending"), o
    code, out, err = cli("apply", "fuse")
    assert code == 0, (out, err)
    assert path.read_text() == SOURCE.replace("is_sm100_supported()", "True")
    code, o = op("status", "fuse")
    assert (code, o["state"]) == (0, "applied"), o
    line = next(i for i, ln in enumerate(SOURCE.splitlines(), 1) if "is_sm100_supported()" in ln)
    assert o["location"].endswith(f":{line}"), o  # the line the op edited, not another `True`
    code, out, err = cli("revert", "fuse")
    assert code == 0, (out, err)
    assert path.read_text() == SOURCE


def test_without_the_pristine_release_apply_is_refused_since_it_could_not_be_read_back(world):
    """Once applied, only the pristine release can tell which `True` is the edit's: without
    it, patchkit could not read its own edit back (it would read `ambiguous`), so the
    read-back check refuses the apply and nothing is written.  With the release, it applies."""
    path, cli, op, wheel = world
    code, out, err = cli("apply", "fuse")
    assert code == 1 and "refused by the read-back check" in err and "ambiguous" in err, (out, err)
    assert path.read_text() == SOURCE
    wheel()
    code, out, err = cli("apply", "fuse")
    assert code == 0, (out, err)
    assert path.read_text() == SOURCE.replace("is_sm100_supported()", "True")
    assert op("status", "fuse")[1]["state"] == "applied"


# Two ops of one recipe write the same `"flashinfer"` into one scope (the GLM-5 guide on sglang
# 0.5.9's ServerArgs._set_default_nsa_backends): once applied, each op sees three where it
# makes two (or one).  The release with the recipe's other edit made tells each its sites.
NSA_RECIPE = """
id = "fuse"
summary = "NSA backends -> flashinfer"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "sglang/srt/server_args.py"
scope = "ServerArgs._set_default_nsa_backends"
locator = { match = '"flashmla_sparse"', count = 2 }
params = { with = '"flashinfer"' }
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "sglang/srt/server_args.py"
scope = "ServerArgs._set_default_nsa_backends"
locator = { match = '"trtllm"' }
params = { with = '"flashinfer"' }
"""


def test_two_ops_writing_the_same_replacement_apply_read_applied_and_revert(tmp_path, run_cli, monkeypatch):
    from tests.core.ops.test_replace_expr import NSA

    source = "import os\n" + NSA
    path, cli, op, wheel = _world(tmp_path, run_cli, monkeypatch, NSA_RECIPE, "sglang/srt/server_args.py", source)
    code, out, err = cli("apply", "fuse")  # without the release it could not be read back: refused
    assert code == 1 and "refused by the read-back check" in err and path.read_text() == source, (out, err)
    wheel()
    code, out, err = cli("apply", "fuse")
    assert code == 0, (out, err)
    assert path.read_text() == source.replace('"flashmla_sparse"', '"flashinfer"').replace('"trtllm"', '"flashinfer"')
    code, out, err = cli("status", "fuse", "--json")
    assert code == 0 and {o["state"] for o in json.loads(out)["recipes"][0]["ops"]} == {"applied"}, out
    code, out, err = cli("revert", "fuse")
    assert code == 0, (out, err)
    assert path.read_text() == source
