"""Ambiguity carries forward (patchkit/core/judge.py, identity.of): an op that cannot single
out its site on the release it was written for never reads `pending` (nor `moved`) on
another release, where its pattern happens to stand once, at a look-alike.

The issue's case, in miniature: an add-branch anchored on an `elif` header that occurs three
times in its scope (three model chains) on SGLang 0.5.9; on 0.5.10 upstream moved two of the
chains elsewhere and one look-alike `elif` is left.  It read `pending` there, and apply wrote
into another model's chain.
"""

from __future__ import annotations

import json
import zipfile

import pytest

from tests.conftest import downloaded, mini_sglang

HOME = """\
def adjust(self, arch):
    if arch == "DeepseekV3":
        if self.quant == "fp8":
            self.backend = "a"
        elif self.quant == "fp4":
            self.backend = "b"
    if arch == "Glm5":
        if self.quant == "fp8":
            self.backend = "c"
        elif self.quant == "fp4":
            self.backend = "d"
    if arch == "Qwen3":
        if self.quant == "fp8":
            self.backend = "e"
        elif self.quant == "fp4":
            self.backend = "f"
"""

LATER = """\
def adjust(self, arch):
    _adjust_deepseek_and_glm(self, arch)
    if arch == "Qwen3":
        if self.quant == "fp8":
            self.backend = "e"
        elif self.quant == "fp4":
            self.backend = "f"
"""

RECIPE = """
id = "arm"
summary = "an SM120 arm for the GLM-5 fp4 chain"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "add-branch"
engine = "sglang"
file = "sglang/srt/args.py"
scope = "adjust"
[ops.locator]
branch = 'elif self.quant == "fp4"'
[ops.params]
code = '''
elif self.quant == "nvfp4":
    self.backend = "cutlass"
'''
"""


@pytest.fixture
def world(tmp_path, run_cli, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    wheels = cache / "wheels" / "sglang" / "0.5.9"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "sglang-0.5.9-py3-none-any.whl", "w") as z:
        z.writestr("sglang/__init__.py", "")
        z.writestr("sglang/version.py", '__version__ = "0.5.9"\n')
        z.writestr("sglang/srt/args.py", HOME)
    downloaded(wheels / "sglang-0.5.9-py3-none-any.whl", cache)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "arm.toml").write_text(RECIPE)

    def on(text: str, version: str):
        root = mini_sglang(tmp_path / f"t-{version}", {"sglang/srt/args.py": text})
        (root / "sglang/version.py").write_text(f'__version__ = "{version}"\n')

        def cli(*a):
            return run_cli("--recipes", str(tmp_path / "r"), *a, "-t", f"sglang={root}")

        code, out, err = cli("status", "arm", "--json")
        return root, cli, json.loads(out)["recipes"][0]["ops"][0]

    return on


def test_ambiguous_where_it_was_written(world):
    root, cli, op = world(HOME, "0.5.9")
    assert op["state"] == "ambiguous", op


def test_ambiguous_at_home_is_never_pending_at_a_look_alike_later(world):
    root, cli, op = world(LATER, "0.5.10")
    assert op["state"] == "ambiguous", op
    assert "the release it was written for" in op["message"] and "sglang 0.5.9" in op["message"], op
    code, out, err = cli("apply", "arm")
    assert code == 1 and (root / "sglang/srt/args.py").read_text() == LATER, (out, err)
