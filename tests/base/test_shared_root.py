"""One site-packages holding two engines (every `--python` venv): each engine's pristine
release, journal entries and files stay its own, for every command, with or without a
journal.  Offline, on miniature trees whose "released" wheels sit in a private cache; the
real tier does the same on SGLang 0.5.13 + FlashInfer 0.7.4 unpacked into one directory."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from patchkit.base import journal
from tests.conftest import downloaded

SG = {
    "sglang/__init__.py": "",
    "sglang/version.py": '__version__ = "0.5.9"\n',
    # upstream already has "b": the sglang op reads upstream, through sglang's own wheel
    "sglang/srt/x.py": 'def f():\n    return ["a", "b"]\n',
}
FI = {
    "flashinfer/__init__.py": "",
    "flashinfer/_build_meta.py": '__version__ = "0.6.3"\n',
    "flashinfer/jit/comm.py": "def gen():\n    return dict(majors=[9, 10])\n",
    "flashinfer/data/include/flashinfer/k.cuh": "#if __CUDA_ARCH__ < 1200\nx();\n#endif\n",
}
RECIPE = """\
id = "both"
summary = "one edit per engine"
bundles = ["b"]

[engines]
sglang = ">=0.5.9"
flashinfer = ">=0.6.3"

[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/x.py"
scope = "f"
[ops.locator]
contains = ['"a"']
[ops.params]
element = '"b"'

[[ops]]
kind = "list-element"
engine = "flashinfer"
file = "flashinfer/jit/comm.py"
scope = "gen"
[ops.locator]
contains = ["9", "10"]
[ops.params]
element = "12"
"""


def _wheel(cache: Path, dist: str, version: str, files: dict[str, str]) -> None:
    d = cache / "wheels" / dist / version
    d.mkdir(parents=True)
    with zipfile.ZipFile(d / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
        for rel, text in files.items():
            z.writestr(rel, text)
    downloaded(d / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl", cache)


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """(site-packages holding both engines, CLI arguments naming it for both)."""
    cache = tmp_path / "cache"
    _wheel(cache, "sglang", "0.5.9", SG)
    _wheel(cache, "flashinfer-python", "0.6.3", FI)
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    sp = tmp_path / "site-packages"
    for rel, text in {**SG, **FI}.items():
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_text(text)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "both.toml").write_text(RECIPE)
    return sp, ["--recipes", str(tmp_path / "recipes")], ["-t", f"sglang={sp}", "-t", f"flashinfer={sp}"]


def _states(run_cli, pre, t) -> tuple[int, list[str]]:
    code, out, err = run_cli(*pre, "status", "both", *t, "--json")
    assert err == "" or "error" not in err, err
    return code, [op["state"] for op in json.loads(out)["recipes"][0]["ops"]]


def test_every_command_on_one_site_packages_with_and_without_a_journal(shared, run_cli):
    sp, pre, t = shared
    assert _states(run_cli, pre, t) == (1, ["upstream", "pending"])
    code, out, err = run_cli(*pre, "diff", "both", *t)
    assert code == 0 and "+    return dict(majors=[9, 10, 12])" in out, err
    code, _, err = run_cli(*pre, "apply", "both", *t)
    assert code == 0, err
    assert (sp / "flashinfer/jit/comm.py").read_text() == "def gen():\n    return dict(majors=[9, 10, 12])\n"
    assert _states(run_cli, pre, t) == (0, ["upstream", "applied"])
    code, _, err = run_cli(*pre, "verify", "both", *t)
    assert code == 0, err
    code, out, err = run_cli(*pre, "drift", "both", "--to", f"sglang={sp}", "--to", f"flashinfer={sp}")
    assert code == 0 and "#2 list-element   applied   flashinfer/jit/comm.py:2" in out, err

    # The journal is lost: its mirror in the user's state directory still proves patchkit's edit.
    shutil.rmtree(sp / ".patchkit")
    code, out, err = run_cli(*pre, "status", "both", *t, "--json")
    ops = json.loads(out)["recipes"][0]["ops"]
    assert [o["state"] for o in ops] == ["upstream", "applied"], err
    assert "the journal's mirror records these very bytes at the site" in json.dumps(ops[1])
    # The mirror lost too: nothing proves the edit patchkit's, and the release lacks it, so
    # someone else made it; revert will not touch it (--force neither) until it is adopted.
    mirror = journal.mirror_path(sp)
    kept = mirror.read_bytes()
    mirror.unlink()
    code, out, err = run_cli(*pre, "status", "both", *t, "--json")
    ops = json.loads(out)["recipes"][0]["ops"]
    assert code == 0 and [o["state"] for o in ops] == ["upstream", "someone-else"], (out, err)
    assert "flashinfer-python 0.6.3's wheel does not have it" in json.dumps(ops[1])
    before = (sp / "flashinfer/jit/comm.py").read_bytes()
    for force in ([], ["--force"]):
        code, out, err = run_cli(*pre, "revert", "both", *t, *force)
        assert code == 1 and "someone else made this edit" in err, (out, err)
        assert (sp / "flashinfer/jit/comm.py").read_bytes() == before
    code, out, err = run_cli(*pre, "apply", "both", *t)  # the goal is reached: nothing written twice
    assert code == 0 and "nothing to apply" in out and (sp / "flashinfer/jit/comm.py").read_bytes() == before, out
    code, out, err = run_cli(*pre, "adopt", "both", *t)
    assert code == 0 and "adopted 1 op(s)" in out, (out, err)
    assert _states(run_cli, pre, t) == (0, ["upstream", "applied"])
    assert kept  # (the mirror an apply wrote was there to lose)
    code, _, err = run_cli(*pre, "verify", "both", *t)
    assert code == 0, err
    code, _, err = run_cli(*pre, "revert", "both", *t)
    assert code == 0, err
    assert (sp / "flashinfer/jit/comm.py").read_text() == FI["flashinfer/jit/comm.py"]
    assert (sp / "sglang/srt/x.py").read_text() == SG["sglang/srt/x.py"]  # upstream's: never reverted
    assert _states(run_cli, pre, t) == (1, ["upstream", "pending"])


@pytest.mark.real
def test_sglang_0_5_13_and_flashinfer_0_7_4_in_one_site_packages(release_dir, tmp_path, run_cli, recipes_dir):
    from tests.conftest import copy_linked

    sp = copy_linked(release_dir("sglang", "0.5.13"), tmp_path / "site-packages")
    fi = copy_linked(release_dir("flashinfer", "0.7.4"), tmp_path / "fi")
    for entry in fi.iterdir():
        entry.rename(sp / entry.name)
    t = ["-t", f"sglang={sp}", "-t", f"flashinfer={sp}"]
    pre = ["--recipes", str(recipes_dir)]

    def states(*names: str) -> dict[str, str]:
        code, out, err = run_cli(*pre, "status", *names, *t, "--json")
        assert code in (0, 1), err
        return {r["id"]: r["state"] for r in json.loads(out)["recipes"]}

    assert states("autotune-cutlass", "allreduce-fusion") == {
        "autotune-cutlass": "upstream",  # 0.5.13 made it a real element
        "allreduce-fusion": "pending",
    }
    assert states("sm120")["max-running-requests"] == "pending"
    code, out, err = run_cli(*pre, "drift", "sm120", "--to", f"sglang={sp}", "--to", f"flashinfer={sp}")
    assert code == 0, err
    code, _, err = run_cli(*pre, "apply", "sm120", *t)
    assert code == 0, err
    assert states("sm120")["allreduce-fusion"] == "applied"
    code, _, err = run_cli(*pre, "verify", "sm120", *t)
    assert code == 0, err
    shutil.rmtree(sp / ".patchkit")  # the journal is lost: its mirror proves the edits patchkit's
    got = states("sm120")
    assert (got["allreduce-fusion"], got["max-running-requests"]) == ("applied", "applied")
    code, _, err = run_cli(*pre, "revert", "sm120", *t)
    assert code == 0, err
    got = states("sm120")
    assert (got["allreduce-fusion"], got["max-running-requests"]) == ("pending", "pending")
    code, out, _ = run_cli(*pre, "diff", "sm120", *t)
    assert code == 0 and "+_is_sm120_supported = " in out
