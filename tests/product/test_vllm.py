"""vLLM, the third engine, on real releases: the truth table of vllm-allreduce-fusion
(tests/vllm_truth_table.toml, written from the sdists' code) against `patchkit drift`, and
list / check / status / apply / revert / drift on an installed vllm (site-packages layout)
and an unpacked sdist (the repository's layout).

Releases come from their sdists (11-47 MB; the wheels are 240-440 MB), cached in
~/.cache/patchkit/sdists and unpacked once into ~/.cache/patchkit/trees (vllm/, csrc/,
cmake/, CMakeLists.txt).  Seven releases in all; cold, downloading and unpacking them costs
about 30 s on a loaded 2-core machine, and the judging a few seconds a release."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from patchkit.base import journal
from patchkit.upstream import drift
from tests.conftest import ROOT, copy_linked

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("vllm")]

TABLE = tomllib.loads((Path(__file__).parents[1] / "vllm_truth_table.toml").read_text())["cell"]
RECIPE = "vllm-allreduce-fusion"
PRE = ("--recipes", str(ROOT / "recipes"))


def _cells():
    for c in TABLE:
        marks = [pytest.mark.xfail(reason=c["xfail"], strict=True)] if c.get("xfail") else []
        yield pytest.param(c, marks=marks, id=c["release"])


@pytest.mark.parametrize("cell", list(_cells()))
def test_truth_table(cell, run_cli):
    v = cell["release"]
    tree = drift.release_tree("vllm", v)
    if "line" in cell:  # the evidence still reads as the table says (independent of patchkit)
        lines = (tree / cell["file"]).read_text().splitlines()
        assert cell["shows"] in lines[cell["line"] - 1], f"vllm {v} {cell['file']}:{cell['line']}"
        refuses = lines[cell["refuses"] - 1]
        assert "(100)" in refuses and "120" not in refuses and "12" not in refuses.split("(")[-1]
        body = "\n".join(lines[cell["line"] - 30 : cell["line"] + 15])
        assert "def enable_allreduce_rms_fusion" in body and "120" not in body
    code, out, err = run_cli(*PRE, "drift", RECIPE, "--to", f"vllm=={v}", "--json")
    assert code in (0, 1), err
    (r,) = json.loads(out)["recipes"]
    (op,) = r["ops"]
    assert op["state"] == cell["state"], f"vllm {v}: {op}"
    if "line" in cell:
        assert r["in_range"] is True
        assert op["file"] == cell["file"] and op["location"].startswith(f"{cell['file']}::enable_allreduce_rms_fusion")
        assert abs(op["line"] - cell["line"]) <= 3, op


def _site_packages(tmp_path: Path, version: str) -> Path:
    """An installed vllm as pip leaves it: vllm/ and its dist-info (the sdist's vllm/, which
    a wheel carries unchanged), hard links to the cached release (patchkit writes by rename)."""
    sp = tmp_path / "site-packages"
    sp.mkdir()
    copy_linked(drift.release_tree("vllm", version) / "vllm", sp / "vllm")
    di = sp / f"vllm-{version}.dist-info"
    di.mkdir()
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\n")
    return sp


def test_every_command_on_an_installed_vllm_and_an_unpacked_sdist(tmp_path, run_cli):
    code, out, err = run_cli(*PRE, "list")
    assert code == 0 and RECIPE in out and "vllm-sm120" in out, err
    code, out, err = run_cli(*PRE, "check", str(ROOT / "recipes" / f"{RECIPE}.toml"))
    assert code == 0 and "unknown engine" not in out + err, out + err

    sp = _site_packages(tmp_path, "0.33.0")
    gate = sp / "vllm/config/vllm.py"
    before = gate.read_bytes()
    t = ("-t", f"vllm={sp}")

    def state() -> str:
        code, out, err = run_cli(*PRE, "status", RECIPE, *t, "--json")
        assert code in (0, 1), err
        return json.loads(out)["recipes"][0]["state"]

    assert state() == "pending"
    code, out, err = run_cli(*PRE, "apply", RECIPE, *t)
    assert code == 0, err
    text = gate.read_text()
    assert "            current_platform.is_device_capability_family(100)\n" in text
    assert "or current_platform.is_device_capability_family(120)" in text
    assert state() == "applied"
    shutil.rmtree(sp / ".patchkit")  # the journal is lost: its mirror proves the edit patchkit's
    code, out, err = run_cli(*PRE, "status", RECIPE, *t, "--json")
    assert "the journal's mirror records these very bytes at the site" in out, out + err
    journal.mirror_path(sp).unlink()  # and the mirror: someone else's (vLLM 0.33.0's sdist lacks it)
    code, out, err = run_cli(*PRE, "status", RECIPE, *t, "--json")
    assert "someone-else" in out and "vllm 0.33.0's sdist does not have it" in out, out + err
    assert run_cli(*PRE, "revert", RECIPE, *t)[0] == 1 and gate.read_text() == text
    assert run_cli(*PRE, "adopt", RECIPE, *t)[0] == 0
    code, out, err = run_cli(*PRE, "revert", RECIPE, *t)
    assert code == 0 and gate.read_bytes() == before, err
    assert state() == "pending"

    # An unpacked sdist: the repository's layout (vllm/ beside csrc/).
    src = copy_linked(drift.release_tree("vllm", "0.30.0"), tmp_path / "vllm-0.30.0")
    shutil.rmtree(src / ".patchkit")
    g = ("-t", f"vllm={src}")
    code, out, err = run_cli(*PRE, "apply", RECIPE, *g)
    assert code == 0 and "vllm 0.30.0 (git layout)" in out, out + err
    code, out, err = run_cli(*PRE, "revert", RECIPE, *g)
    assert code == 0, err
    assert (src / "vllm/config/vllm.py").read_bytes() == (
        drift.release_tree("vllm", "0.30.0") / "vllm/config/vllm.py"
    ).read_bytes()

    code, out, err = run_cli(*PRE, "drift", RECIPE, "--across", "vllm==0.17.0..0.18.0")
    assert code == 0, err
    assert out.splitlines()[-1].split() == [RECIPE, "pending", "pending", "pending"], out
