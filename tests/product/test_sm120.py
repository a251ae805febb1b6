"""The sm120 bundle on real SGLang and FlashInfer releases from the package index."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, git, git_layout

pytestmark = pytest.mark.real

FILES = {
    "sglang": [
        "sglang/srt/model_executor/model_runner.py",
        "sglang/srt/layers/communicator.py",
        "sglang/srt/server_args.py",
    ],
    "flashinfer": ["flashinfer/jit/comm.py", "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"],
}
GUARD = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".patchkit" not in p.relative_to(root).parts
    }


@pytest.fixture
def trees_at(tree):
    """trees_at(sglang_version, flashinfer_version) -> (sglang tree, flashinfer tree, their -t options)."""

    def make(sg: str = "0.5.9", fi: str = "0.6.3"):
        s, f = tree("sglang", sg, links=True), tree("flashinfer", fi, links=True)
        return s, f, ["-t", f"sglang={s}", "-t", f"flashinfer={f}"]

    return make


def test_apply_sm120_effects(trees_at, run_cli):
    s, f, t = trees_at()
    code, out, err = run_cli("apply", "sm120", *t)
    assert code == 0, out + err
    mr = (s / FILES["sglang"][0]).read_text()
    assert (
        "            # TODO: flashinfer_cutlass will cause some flashinfer compilation errors. To be fixed.\n      "
        '      "flashinfer_cutlass",\n        ]:' in mr
    )
    assert '# "flashinfer_cutlass"' not in mr
    comm = (s / FILES["sglang"][1]).read_text()
    assert "    is_sm100_supported,\n    is_sm120_supported,\n)" in comm
    assert (
        "_is_sm100_supported = _is_cuda and is_sm100_supported()\n_is_sm120_supported = _is_cuda and "
        "is_sm120_supported()\n" in comm
    )
    assert (
        "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)\n        and _is_flashinfer_available"
        in comm
    )
    sa = (s / FILES["sglang"][2]).read_text()
    assert "    max_running_requests: Optional[int] = 1024\n" in sa
    arm = sa.index(
        '            and self.quantization == "modelopt_fp4"\n            and is_sm120_supported()\n        ):\n   '
        '         self.moe_runner_backend = "flashinfer_cutlass"'
    )
    assert arm < sa.index(
        '        if self.moe_runner_backend == "flashinfer_cutlass":\n            assert self.quantization in ['
    )
    assert "supported_major_versions=[9, 10, 12]" in (f / FILES["flashinfer"][0]).read_text()
    cuh = (f / FILES["flashinfer"][1]).read_text()
    assert cuh.count(GUARD) == 0
    assert cuh.count("#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))") == 13
    # Every edited Python file still compiles.
    for rel in FILES["sglang"]:
        compile((s / rel).read_text(), rel, "exec")
    compile((f / FILES["flashinfer"][0]).read_text(), "comm.py", "exec")


def test_apply_is_idempotent_and_says_so(trees_at, run_cli):
    s, f, t = trees_at()
    assert run_cli("apply", "sm120", *t)[0] == 0
    before = snapshot(s), snapshot(f)
    code, out, err = run_cli("apply", "sm120", *t, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["written"] == []
    assert {o["message"] for r in doc["recipes"] for o in r["ops"]} == {"already applied (nothing to do)"}
    assert (snapshot(s), snapshot(f)) == before


def test_status_json_shape(trees_at, run_cli):
    s, f, t = trees_at()
    code, out, _ = run_cli("status", *t, "--json")
    assert code == 1
    doc = json.loads(out)
    assert [(r["id"], r["state"], r["in_range"]) for r in doc["recipes"]] == [
        ("allreduce-fusion", "pending", True),
        ("autotune-cutlass", "pending", True),
        ("max-running-requests", "pending", True),
        ("moe-backend-sm120", "pending", True),
    ]
    run_cli("apply", "sm120", *t)
    code, out, _ = run_cli("status", *t, "--json")
    assert code == 0
    doc = json.loads(out)
    assert {r["state"] for r in doc["recipes"]} == {"applied"}
    op = doc["recipes"][1]["ops"][0]
    assert set(op) >= {"engine", "file", "state", "line", "location", "message"}
    assert (op["engine"], op["file"], op["state"], op["location"]) == (
        "sglang",
        "sglang/srt/model_executor/model_runner.py",
        "applied",
        f"sglang/srt/model_executor/model_runner.py::ModelRunner._should_run_flashinfer_autotune:{op['line']}",
    )
    assert isinstance(op["line"], int) and op["line"] > 1000
    assert doc["targets"]["sglang"]["version"] == "0.5.9" and doc["targets"]["flashinfer"]["version"] == "0.6.3"


def test_revert_allreduce_fusion_keeps_the_others(trees_at, run_cli, release_dir):
    s, f, t = trees_at()
    run_cli("apply", "sm120", *t)
    code, out, err = run_cli("revert", "allreduce-fusion", *t)
    assert code == 0, out + err
    code, out, _ = run_cli("status", *t, "--json")
    assert code == 1
    states = {r["id"]: r["state"] for r in json.loads(out)["recipes"]}
    assert states == {
        "allreduce-fusion": "pending",
        "autotune-cutlass": "applied",
        "max-running-requests": "applied",
        "moe-backend-sm120": "applied",
    }
    # Both engines' allreduce files are pristine again.
    assert snapshot(f) == snapshot(release_dir("flashinfer", "0.6.3"))
    assert (s / FILES["sglang"][1]).read_bytes() == (release_dir("sglang", "0.5.9") / FILES["sglang"][1]).read_bytes()


def test_revert_sm120_restores_every_byte(trees_at, run_cli, release_dir):
    s, f, t = trees_at()
    run_cli("apply", "sm120", *t)
    run_cli("revert", "allreduce-fusion", *t)
    run_cli("apply", "allreduce-fusion", *t)  # re-applied after the others: the order differs now
    code, out, err = run_cli("revert", "sm120", *t)
    assert code == 0, out + err
    assert snapshot(s) == snapshot(release_dir("sglang", "0.5.9"))
    assert snapshot(f) == snapshot(release_dir("flashinfer", "0.6.3"))


def test_missing_flashinfer_anchor_fails_whole_apply(trees_at, run_cli):
    s, f, t = trees_at()
    cuh = f / FILES["flashinfer"][1]
    cuh.write_text(cuh.read_text().replace(GUARD, "#if defined(__CUDA_ARCH__)"))
    before = snapshot(s), snapshot(f)
    code, out, err = run_cli("apply", "sm120", *t)
    assert code == 1
    assert (snapshot(s), snapshot(f)) == before, "nothing may be written to either engine"
    assert "allreduce-fusion > op #5 (text-replace) > " in err
    assert "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh" in err
    assert "not found (expected 13)" in err
    assert "nothing was written" in err


def test_diff_touches_nothing_and_git_applies_to_the_same_bytes(trees_at, run_cli, tree):
    s, f, t = trees_at()
    before = snapshot(s)
    code, out, err = run_cli("diff", "autotune-cutlass", "max-running-requests", *t)
    assert code == 0, err
    assert snapshot(s) == before
    assert out.startswith(f"# sglang: {s}\n--- a/sglang/srt/")
    other = tree("sglang", name="by-git-apply", links=True)
    subprocess.run(["git", "apply", "-p1", "-"], input=out, text=True, cwd=other, check=True)
    run_cli("apply", "autotune-cutlass", "max-running-requests", *t)
    # apply also rehashes the wheel's RECORD, which the source diff leaves out.

    def strip(snap):
        return {k: v for k, v in snap.items() if not k.endswith(".dist-info/RECORD")}

    assert strip(snapshot(other)) == strip(snapshot(s))


def test_git_checkout_layout(release_dir, tmp_path, run_cli):
    repos = {}
    for engine, version in (("sglang", "0.5.9"), ("flashinfer", "0.6.3")):
        repo = git_layout(engine, release_dir(engine, version), tmp_path / engine)
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"{engine} {version}")
        git(repo, "tag", f"v{version}")
        repos[engine] = repo
    t = ["-t", f"sglang={repos['sglang']}", "-t", f"flashinfer={repos['flashinfer']}"]
    code, out, err = run_cli("apply", "sm120", *t, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["targets"]["sglang"]["layout"] == "git" and doc["targets"]["flashinfer"]["layout"] == "git"
    assert sorted(git(repos["sglang"], "status", "--porcelain").split()) == sorted(
        [
            "M",
            "M",
            "M",
            "python/sglang/srt/layers/communicator.py",
            "python/sglang/srt/model_executor/model_runner.py",
            "python/sglang/srt/server_args.py",
        ]
    )
    assert sorted(git(repos["flashinfer"], "status", "--porcelain").split()) == sorted(
        ["M", "M", "flashinfer/jit/comm.py", "include/flashinfer/comm/trtllm_allreduce.cuh"]
    )
    code, out, err = run_cli("revert", "sm120", *t)
    assert code == 0, err
    assert (
        git(repos["sglang"], "status", "--porcelain") == "" and git(repos["flashinfer"], "status", "--porcelain") == ""
    )


# sglang 0.5.9 .. 0.5.12.post1 x flashinfer 0.6.3 .. 0.6.16.post4: the recipes' stated ranges.
@pytest.mark.parametrize("sg,fi", [("0.5.10.post1", "0.6.8"), ("0.5.11", "0.6.11"), ("0.5.12.post1", "0.6.16.post4")])
def test_other_releases(trees_at, run_cli, release_dir, sg, fi):
    s, f, t = trees_at(sg, fi)
    code, out, err = run_cli("apply", "sm120", *t, "--json")
    assert code == 0, out + err
    assert {r["state"] for r in json.loads(out)["recipes"]} == {"applied"}
    assert (s / FILES["sglang"][0]).read_text().count('"flashinfer_cutlass",') == 1
    assert run_cli("status", "sm120", *t)[0] == 0
    assert run_cli("revert", "sm120", *t)[0] == 0
    assert snapshot(s) == snapshot(release_dir("sglang", sg))
    assert snapshot(f) == snapshot(release_dir("flashinfer", fi))


def test_out_of_range_is_skipped_but_status_tells_the_truth(tree, run_cli, tmp_path):
    s = tree("sglang", "0.5.13", links=True)
    code, out, err = run_cli("status", "autotune-cutlass", "moe-backend-sm120", "-t", f"sglang={s}", "--json")
    doc = json.loads(out)
    assert code == 0
    assert [(r["id"], r["state"], r["in_range"]) for r in doc["recipes"]] == [
        ("autotune-cutlass", "upstream", True),
        ("moe-backend-sm120", "upstream", True),
    ]
    assert doc["retire"] == ["autotune-cutlass", "moe-backend-sm120"]
    assert "upstream marker matched at sglang/srt/server_args.py:" in doc["recipes"][1]["ops"][0]["message"]
    # A recipe whose range ends before the target's version is skipped, and apply says why.
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    src = (ROOT / "recipes" / "max-running-requests.toml").read_text()
    (recipes / "max-running-requests.toml").write_text(src.replace(">=0.5.9,<0.5.24", ">=0.5.9,<0.5.13"))
    args = ("--recipes", str(recipes), "apply", "max-running-requests", "-t", f"sglang={s}")
    code, out, err = run_cli(*args, "--json")
    assert code == 1
    r = json.loads(out)["recipes"][0]
    assert r["state"] == "skipped" and "0.5.13 not in" in r["message"]
    code, out, err = run_cli(*args)
    assert "nothing written: max-running-requests skipped, out of the version range" in out
    assert "nothing to apply" not in out


def test_jit_cache_note_and_clear(trees_at, run_cli, tmp_path, monkeypatch):
    s, f, t = trees_at()
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "home"))
    stale = tmp_path / "home/.cache/flashinfer/0.6.3/90a_100a/cached_ops/trtllm_comm"
    stale.mkdir(parents=True)
    (stale / "trtllm_comm.so").write_bytes(b"old")
    code, out, _ = run_cli("apply", "allreduce-fusion", *t)
    assert code == 0
    assert f"rm -rf {tmp_path}/home/.cache/flashinfer/0.6.3/*/cached_ops/trtllm_comm" in out
    assert stale.exists()
    code, out, _ = run_cli("revert", "allreduce-fusion", *t, "--clear-jit-cache")
    assert code == 0 and not stale.exists()
    assert "removed 1 cached build(s) of trtllm_comm" in out
