"""`doctor`: the judge on facts recorded on a real H200, and the collector on this machine.

tests/fixtures/doctor_h200*.json are the untouched output of `patchkit doctor --json` run on
the device machine (one NVIDIA H200, torch 2.11), with the pinned sglang/flashinfer wheels
installed there (doctor_h200.json) or the sm120 wheels built by `patchkit wheel`
(doctor_h200_patched.json).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from patchkit.fleet import doctor as D

FIXTURES = Path(__file__).parents[1] / "fixtures"
SGLANG_ONLY = ("autotune-cutlass", "max-running-requests", "moe-backend-sm120")


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def messages(findings, level=None) -> list[str]:
    return [f.message for f in findings if level is None or f.level == level]


def has_gpu_here() -> bool:
    if shutil.which("nvidia-smi"):
        return True
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


# -- the judge, on real recorded facts -----------------------------------------------------------


def test_h200_is_told_sm120_is_not_for_it():
    doc = recorded("doctor_h200.json")
    findings = D.judge(doc["facts"])
    assert [f["topic"] for f in doc["findings"]] == [
        "python",
        "gpu",
        "sglang",
        "flashinfer",
        "bundle",
        "jit",
    ]  # as the device printed them
    assert "GPU 0: NVIDIA H200, compute capability 9.0 (via torch)" in messages(findings, D.OK)
    assert (
        "sm120: NOT for this GPU (NVIDIA H200 (9.0)); it is for compute capability 12.x only (SM120: e.g. RTX PRO "
        "6000 Blackwell). Do not apply it here" in messages(findings, D.INFO)
    )
    assert "sglang 0.5.9 imported from /tmp/site/sglang (pin 0.5.9)" in messages(findings, D.OK)
    assert D.exit_code(findings) == 0  # pristine engines on a Hopper GPU: nothing is off


def test_h200_running_the_sm120_wheels_is_an_error():
    doc = recorded("doctor_h200_patched.json")
    findings = D.judge(doc["facts"])
    errors = messages(findings, D.ERROR)
    assert errors == [
        "sm120 recipes are applied here (allreduce-fusion, autotune-cutlass, max-running-requests, "
        "moe-backend-sm120) but this GPU is not compute capability 12.x. "
        "Undo them: reinstall the released wheels: pip install --force-reinstall --no-deps "
        "flashinfer-python==0.6.3 sglang==0.5.9"
    ]
    assert (
        "sglang: installed from a patchkit wheel 0.5.9+sm120 (label sm120): allreduce-fusion, autotune-cutlass, "
        "max-running-requests, moe-backend-sm120" in messages(findings)
    )
    assert D.exit_code(findings) == 1


def test_no_gpu_is_a_warning_that_does_not_fail():
    """The H200's facts without its GPU: nothing is wrong, so exit 0, and the missing GPU is
    shown as a WARN that the summary says is something the machine lacks."""
    facts = copy.deepcopy(recorded("doctor_h200.json")["facts"])
    facts["gpus"] = {"devices": [], "tried": ["torch: not importable", "nvidia-smi: not on PATH"]}
    findings = D.judge(facts)
    assert "no GPU found (torch: not importable; nvidia-smi: not on PATH)" in messages(findings, D.WARN)
    assert D.exit_code(findings) == 0
    assert D.summary(findings) == "nothing wrong found; this machine lacks what the WARN lines above say (gpu)."
    # A version off this directory's pin is said, but is the project's, not the venv's:
    # exit 0 (tests/product/test_first_hour_more.py); a warning that is something wrong in the venv
    # (its RECORD off its files) still fails without a GPU.
    facts["engines"]["sglang"]["version"] = "0.5.10"
    assert D.exit_code(D.judge(facts)) == 0
    facts["engines"]["sglang"]["location"]["record"] = {"dist_info": "sglang-0.5.10.dist-info", "problems": ["x.py"]}
    assert D.exit_code(D.judge(facts)) == 1


def test_on_a_capability_12_gpu_sm120_fits_and_pending_recipes_are_flagged():
    # The H200 facts with the GPU swapped for an SM120 one (a derived case, not a recording).
    facts = copy.deepcopy(recorded("doctor_h200.json")["facts"])
    facts["gpus"]["devices"] = [
        {"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "capability": "12.0"}
    ]
    findings = D.judge(facts)
    assert "sm120: fits this machine (NVIDIA RTX PRO 6000 Blackwell Server Edition (12.0))" in messages(findings, D.OK)
    warn = messages(findings, D.WARN)
    assert len(warn) == 1 and warn[0].startswith(
        "sm120 fits these GPUs, but the imported copies lack allreduce-fusion, autotune-cutlass, "
        "max-running-requests, moe-backend-sm120"
    )
    assert D.exit_code(findings) == 1


def test_bundle_major():
    assert [D.bundle_major(b) for b in ("sm120", "sm90", "sm100", "sm_120", "fast", "sm")] == [
        12,
        9,
        10,
        12,
        None,
        None,
    ]


def test_facts_file_through_the_cli(run_cli):
    code, out, err = run_cli("doctor", "--facts", str(FIXTURES / "doctor_h200_patched.json"), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False and doc["findings"][-0]["topic"] == "python"
    code, out, err = run_cli("doctor", "--facts", str(FIXTURES / "doctor_h200.json"))
    assert code == 0
    assert "[  --  ] sm120: NOT for this GPU (NVIDIA H200 (9.0))" in out and out.rstrip().endswith("all well.")


# -- the collector, on this machine ------------------------------------------------------------


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No real JIT cache; PYTHONPATH decides what the probed interpreter imports."""
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "fiws"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return monkeypatch


@pytest.mark.real
def test_workspace_patched_but_imported_copy_not_is_loud(tree, run_cli, isolated, tmp_path):
    imported = tree("sglang", name="imported", links=True)
    ws = tmp_path / "ws"
    (ws / "trees").mkdir(parents=True)
    shutil.copytree(imported, ws / "trees" / "sglang", symlinks=True)
    assert run_cli("apply", *SGLANG_ONLY, "-t", f"sglang={ws / 'trees' / 'sglang'}")[0] == 0
    isolated.setenv("PYTHONPATH", str(imported))

    code, out, err = run_cli("--workspace", str(ws), "doctor", "--json")
    # said loudly, but of the workspace, not the venv: the exit code is the venv's alone
    assert code == 0, err
    doc = json.loads(out)
    facts = doc["facts"]
    assert facts["python"]["executable"] == sys.executable
    assert facts["engines"]["sglang"]["root"] == str(imported)
    assert facts["engines"]["sglang"]["location"]["recipes"]["autotune-cutlass"] == "pending"
    errors = [f["message"] for f in doc["findings"] if f["level"] == "error"]
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        f"sglang: the workspace tree {ws / 'trees' / 'sglang'} is patched (autotune-cutlass, max-running-requests"
    ), errors[0]
    assert (
        f"), but {sys.executable} imports sglang from {imported / 'sglang'}, which is NOT: the server runs "
        "unpatched code." in errors[0]
    )
    if not has_gpu_here():
        assert facts["gpus"]["devices"] == []
        assert any(f["level"] == "warn" and f["message"].startswith("no GPU found") for f in doc["findings"])
        assert any(
            f["message"] == "sm120: for GPUs of compute capability 12.x only; no GPU here to check it against"
            for f in doc["findings"]
        )

    # Patch the copy Python imports (--python finds it); the loud error goes away.
    code, out, err = run_cli("apply", *SGLANG_ONLY, "--python", sys.executable)
    assert code == 0, out + err
    assert str(imported / "sglang" / "srt" / "server_args.py") in out
    code, out, err = run_cli("--workspace", str(ws), "doctor")
    assert "[ERROR ]" not in out
    assert "RECORD does not match" not in out  # patchkit kept the RECORD true
    with open(imported / "sglang" / "srt" / "utils" / "common.py", "a") as f:
        f.write("# a hand edit\n")
    code, out, err = run_cli("--workspace", str(ws), "doctor")
    assert (
        "[ WARN ] sglang: sglang-0.5.9.dist-info/RECORD does not match the installed files "
        "(sglang/srt/utils/common.py: hash or size differs from RECORD): edited outside pip and patchkit?" in out
    )
    assert "[  --  ] sglang: carries autotune-cutlass (applied), max-running-requests (applied)" in out


@pytest.mark.real
def test_jit_builds_older_than_the_patched_sources_are_flagged(tree, run_cli, isolated, tmp_path):
    sg, fi = tree("sglang", links=True), tree("flashinfer", links=True)
    isolated.setenv("PYTHONPATH", os.pathsep.join([str(sg), str(fi)]))
    assert run_cli("apply", "allreduce-fusion", "--python", sys.executable)[0] == 0
    cache = tmp_path / "fiws" / ".cache" / "flashinfer" / "0.6.3" / "120a" / "cached_ops"
    old, new, other = cache / "trtllm_comm", cache.parent.parent / "90a" / "cached_ops" / "trtllm_comm", cache / "norm"
    for d in (old, new, other):
        d.mkdir(parents=True)
        (d / "build.ninja").write_text("")
    os.utime(old / "build.ninja", (1_577_836_800, 1_577_836_800))  # 2020: before the edit
    os.utime(other / "build.ninja", (1_577_836_800, 1_577_836_800))  # old, but not a module the recipes touch
    code, out, err = run_cli("--workspace", str(tmp_path / "nows"), "doctor")
    warn = [line for line in out.splitlines() if "predate" in line]
    # Both edited files were written in one batch; either may be the newest.
    assert len(warn) == 1 and warn[0].startswith(
        "[ WARN ] 1 cached FlashInfer build(s) predate the patched FlashInfer sources ("
    )
    assert warn[0].endswith(f"FlashInfer keeps their old nvcc flags. Remove them: rm -rf {old}")
    assert code == 1


@pytest.mark.real
def test_stale_journal_after_a_reinstall_is_explained(tree, run_cli, isolated):
    site = tree("sglang", links=True)
    pristine = (site / "sglang/srt/server_args.py").read_bytes()
    assert run_cli("apply", "max-running-requests", "-t", f"sglang={site}")[0] == 0
    (site / "sglang/srt/server_args.py").write_bytes(pristine)  # what `pip install --force-reinstall` does
    isolated.setenv("PYTHONPATH", str(site))
    code, out, err = run_cli("doctor")
    assert code == 1
    assert (
        f"[ WARN ] sglang: patchkit's journal in {site}/.patchkit says max-running-requests are applied, but "
        "sglang/srt/server_args.py are back to the released bytes (reinstalled?); the stale record is dropped at "
        f"the next write: `patchkit apply max-running-requests --target sglang={site}` applies them again" in out
    )


def test_unknown_interpreter_is_one_line(run_cli):
    code, out, err = run_cli("doctor", "--python", "/nonexistent/bin/python")
    assert (code, err.strip()) == (
        2,
        "patchkit: error: --python /nonexistent/bin/python: no such interpreter (hint: give the path of the python "
        "that runs the server, e.g. --python ~/venvs/serve/bin/python)",
    )
