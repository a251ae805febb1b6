"""`patchkit verify --build`: what a recipe's edit does to device code, proven with nvcc.

Offline: the PTX reading, the static read of FlashInfer's JIT specs, the judging and the
printing on the real report recorded on an H200 machine (tests/fixtures/verify_h200.json),
the exit 2 without nvcc, and the whole command on a hand-made FlashInfer tree of one
kernel (nvcc compiles it in a second or two; the second run answers from the cache).
Real: one unit of FlashInfer 0.6.3, trtllm_allreduce.cu, for sm_120a, pristine and patched
in parallel: 0 griddepcontrol, then some (1836 on the H200)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from patchkit.verify import build, jitspec, ptx, report

FIXTURE = Path(__file__).parents[1] / "fixtures" / "verify_h200.json"
HAVE_NVCC = shutil.which("nvcc") is not None or any(p.exists() for p in build.FALLBACK_NVCC)
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")

PTX = """
.version 9.0
.target sm_120a

.visible .entry _ZN10flashinfer4comm6kernelIfLi2EEEvPT_(
	.param .u64 _ZN10flashinfer4comm6kernelIfLi2EEEvPT__param_0
)
{
	.reg .pred 	%p<2>;

	ret;

}
.entry _ZN10flashinfer4comm6kernelIfLi4EEEvPT_(
	.param .u64 p
)
{
	.reg .b32 	%r<3>;

$L__BB1_1:
	griddepcontrol.wait;
	@%p1 bra 	$L__BB1_1;
	// a comment
	{
	.reg .b32 %tmp;
	mov.u32 	%r1, %tid.x;
	}
	@!%p1 griddepcontrol.launch_dependents;
	ret;

}
.visible .entry plain(
)
{
	ret;
}
"""


def test_ptx_kernels_empty_bodies_and_counts():
    ks = ptx.kernels(PTX, ("griddepcontrol", "mov"))
    assert [(k.name, k.instructions, k.empty) for k in ks] == [
        ("_ZN10flashinfer4comm6kernelIfLi2EEEvPT_", 1, True),
        ("_ZN10flashinfer4comm6kernelIfLi4EEEvPT_", 5, False),
        ("plain", 1, True),
    ]
    assert ks[1].counts == {"griddepcontrol": 2, "mov": 1}  # predicated and dotted forms count
    s = ptx.summary(ks, ("griddepcontrol",))
    assert (s["kernels"], s["empty"], s["counts"]) == (3, 2, {"griddepcontrol": 2})
    fam = s["families"][0]
    assert fam["name"] == "flashinfer::comm::kernel" and fam["kernels"] == 2 and fam["empty"] == 1
    assert fam["instructions"] == [1, 5]


COMM = """
from . import env as jit_env
from .core import JitSpec, gen_jit_spec, current_compilation_context


def gen_trtllm_comm_module() -> JitSpec:
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(
        supported_major_versions=[9, 10]
    )
    return gen_jit_spec(
        "trtllm_comm",
        [
            jit_env.FLASHINFER_CSRC_DIR / "trtllm_allreduce.cu",
            jit_env.FLASHINFER_CSRC_DIR / "nv_internal" / "x.cu",
            some_path(),
        ],
        extra_cuda_cflags=nvcc_flags + ["-DENABLE_X", "-gencode=arch=compute_90a,code=sm_90a"],
    )


def gen_other_module():
    return gen_jit_spec("other", [jit_env.FLASHINFER_INCLUDE_DIR / "a.cuh"])
"""


def test_jit_modules_are_read_statically():
    mods = jitspec.find({"flashinfer/jit/comm.py": COMM, "flashinfer/jit/x.py": "y = 1\n"}, {"trtllm_comm", "nope"})
    assert list(mods) == ["trtllm_comm"]
    m = mods["trtllm_comm"]
    assert m.sources == ["csrc/trtllm_allreduce.cu", "csrc/nv_internal/x.cu"]
    assert m.unread == ["some_path()"]  # said, never guessed
    assert m.flags == ["-DENABLE_X"] and m.majors == [9, 10]
    assert (m.admits("120a"), m.admits("90a"), m.admits("100a")) == (False, True, True)
    assert m.line == 10  # the gen_jit_spec call
    assert jitspec.find({"flashinfer/jit/comm.py": COMM}, {"other"})["other"].majors is None


# -- the report recorded on the H200 ----------------------------------------------------------


@pytest.fixture
def h200():
    return json.loads(FIXTURE.read_text())


LAMPORT = "lamport_style_one_shot_all_reduce_norm_kernel"


def _unit(doc, name):
    return next(u for u in doc["build"]["units"] if u["unit"] == name)


def test_the_recorded_h200_run_reproduces_the_figures(h200):
    """FlashInfer 0.6.3, allreduce-fusion, sm_120a and sm_90a, recorded with --json on 16 cores."""
    assert h200["ok"] is True and h200["errors"] == []
    b = h200["build"]
    assert b["archs"] == ["120a", "90a"] and "release 13.0" in b["nvcc"]
    ar = _unit(h200, "csrc/trtllm_allreduce.cu")
    assert ar["edited"] and ar["modules"] == ["trtllm_comm"]
    pristine, patched, hopper = ar["builds"]["120a"]["pristine"], ar["builds"]["120a"]["patched"], ar["builds"]["90a"]
    assert (pristine["kernels"], pristine["empty"], pristine["counts"]["griddepcontrol"]) == (921, 480, 0)
    assert (patched["kernels"], patched["empty"], patched["counts"]["griddepcontrol"]) == (921, 0, 1836)
    assert hopper["patched"]["counts"]["griddepcontrol"] == hopper["pristine"]["counts"]["griddepcontrol"] == 1836
    lamport = next(
        f for f in pristine["families"] if f["name"].endswith("lamport_style_one_shot_all_reduce_norm_kernel")
    )
    assert lamport["kernels"] == lamport["empty"] == 480
    for name in ("csrc/trtllm_allreduce_fusion.cu", "csrc/trtllm_moe_allreduce_fusion.cu"):
        u = _unit(h200, name)
        assert not u["edited"]
        for arch in ("120a", "90a"):
            before, after = u["builds"][arch]["pristine"], u["builds"][arch]["patched"]
            assert before["built"] and {k: v for k, v in before.items() if k not in ("seconds", "cached")} == {
                k: v for k, v in after.items() if k not in ("seconds", "cached")
            }
    (mod,) = b["modules"]
    assert mod["name"] == "trtllm_comm" and mod["admits"]["120a"] == {"pristine": False, "patched": True}
    assert [e["ok"] for e in b["expectations"]] == [True, True]
    for u in b["units"]:  # the wall time of every build was measured
        assert all(v[k]["seconds"] > 10 for v in u["builds"].values() for k in ("pristine", "patched"))


def test_judging_the_recorded_run(h200):
    """The expectations are judged again from the recorded builds, and each one fails where
    the device code would be wrong."""
    b = h200["build"]
    expects = [{k: v for k, v in e.items() if k not in ("ok", "detail")} for e in b["expectations"]]
    assert [e["ok"] for e in report.judge(expects, b["units"])] == [True, True]

    # the pristine sm_120a build in place of the patched one: both expectations fail
    broken = copy.deepcopy(b["units"])
    for u in broken:
        u["builds"]["120a"]["patched"] = u["builds"]["120a"]["pristine"]
    judged = report.judge(expects, broken)
    assert [e["ok"] for e in judged] == [False, False]
    assert "480 of 921 kernels empty" in judged[0]["detail"]
    assert "0 griddepcontrol on 120a, 1836 on 90a" in judged[1]["detail"]

    # a patched build that fails: the run fails, whatever the expectations say
    failed = copy.deepcopy(h200)
    _unit(failed, "csrc/trtllm_allreduce_fusion.cu")["builds"]["90a"]["patched"].update(built=False, error="x")
    assert report.ok(h200) and not report.ok(failed)

    # 90a not built: the comparison cannot be judged (None), which is no failure by itself
    one = copy.deepcopy(b["units"])
    for u in one:
        del u["builds"]["90a"]
    assert [e["ok"] for e in report.judge(expects, one)] == [True, None]


def test_the_recorded_run_prints_its_table(h200):
    text = report.human(h200)
    assert "csrc/trtllm_allreduce.cu [trtllm_comm]  <- includes an edited file" in text
    assert "sm_120a  pristine: 921 kernels, 480 empty, griddepcontrol 0" in text
    assert "sm_120a  patched:  921 kernels, 0 empty, griddepcontrol 1836" in text
    assert "JIT module trtllm_comm (flashinfer/jit/comm.py:63)" in text and "120a yes (pristine no)" in text
    assert "expect #2 (same-count): on 120a, the units that include an edited file hold as many griddepcontrol" in text


# -- no nvcc ----------------------------------------------------------------------------------


def test_without_nvcc_verify_build_says_so_in_one_line(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc on PATH
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(build, "FALLBACK_NVCC", (tmp_path / "cuda" / "bin" / "nvcc",))
    code, out, err = run_cli("verify", "allreduce-fusion", "--build")
    assert code == 2
    assert err.strip().splitlines() == [
        "patchkit: error: verify --build needs nvcc, and there is none (not on PATH, CUDA_HOME unset, no "
        f"{tmp_path}/cuda/bin/nvcc) (hint: {build.NO_NVCC_HINT})"
    ]
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    code, out, err = run_cli("verify", "allreduce-fusion", "--build", "--json")
    assert code == 2 and err.strip() == (
        f"patchkit: error: verify --build: CUDA_HOME={tmp_path} holds no bin/nvcc (hint: {build.NO_NVCC_HINT})"
    )
    assert json.loads(out)["error"]["exit"] == 2
    code, out, err = run_cli("verify", "allreduce-fusion", "--build", "--nvcc", str(tmp_path / "nvcc"))
    assert code == 2 and "--nvcc" in err and "no executable nvcc there" in err


# -- the whole command on a hand-made FlashInfer tree -----------------------------------------

KERNEL_H = """#pragma once
#include "../util.cuh"
__global__ void k(float* x) {
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  cudaGridDependencySynchronize();
  x[threadIdx.x] = twice(x[threadIdx.x]);
#endif
}
"""
UTIL_H = "#pragma once\n__device__ float twice(float v) { return v + v; }\n"
MINI_COMM = """
from . import env as jit_env


def gen_mini_module():
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10])
    sources = [jit_env.FLASHINFER_CSRC_DIR / "mini.cu", jit_env.FLASHINFER_CSRC_DIR / "host.cpp"]
    return gen_jit_spec("mini", sources, extra_cuda_cflags=nvcc_flags)
"""
MINI_RECIPE = """
id = "mini-guard"
summary = "widen a device guard"
[engines]
flashinfer = ">=0"
[[ops]]
kind = "list-element"
engine = "flashinfer"
file = "flashinfer/jit/comm.py"
scope = "gen_mini_module"
jit_modules = ["mini"]
[ops.locator]
keyword = "supported_major_versions"
[ops.params]
element = "12"
[[ops]]
kind = "text-replace"
engine = "flashinfer"
file = "include/flashinfer/comm/kernel.cuh"
[ops.params]
find = "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
replace = "(__CUDA_ARCH__ >= 900){replace_tail}"
count = 1
[verify]
arch = ["120a"]
[[verify.expect]]
kind = "no-empty-kernels"
arch = "120a"
module = "mini"
"""


@pytest.fixture(scope="module")
def mini_cache(tmp_path_factory):
    """One build cache for the mini-tree tests: the pristine build is compiled once, and
    every later test answers it from the cache (the key names files relative to the tree)."""
    return tmp_path_factory.mktemp("verify-cache")


@pytest.fixture
def mini_fi(tmp_path, monkeypatch, mini_cache):
    root = tmp_path / "site"
    files = {
        "flashinfer/__init__.py": "",
        "flashinfer/_build_meta.py": '__version__ = "0.6.3"\n',
        "flashinfer/jit/__init__.py": "",
        "flashinfer/jit/comm.py": MINI_COMM,
        "flashinfer/data/include/flashinfer/util.cuh": UTIL_H,
        "flashinfer/data/include/flashinfer/comm/kernel.cuh": KERNEL_H,
        "flashinfer/data/csrc/mini.cu": '#include "flashinfer/comm/kernel.cuh"\n',
        "flashinfer/data/csrc/unrelated.cu": "__global__ void u() {}\n",
        "flashinfer/data/csrc/host.cpp": "int host() { return 0; }\n",
        "tvm_ffi/include/tvm/ffi/function.h": "#pragma once\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "mini-guard.toml").write_text(MINI_RECIPE.format(replace_tail=")"))
    (recipes / "half-guard.toml").write_text(
        MINI_RECIPE.replace("mini-guard", "half-guard").format(replace_tail=" && 0)")
    )
    monkeypatch.setenv("PATCHKIT_CACHE", str(mini_cache))
    return root, recipes


@needs_nvcc
def test_verify_build_on_a_mini_tree_and_its_cache(mini_fi, run_cli):
    root, recipes = mini_fi
    args = ("--recipes", str(recipes), "verify", "mini-guard", "--build", "-t", f"flashinfer={root}", "--json")
    code, out, err = run_cli(*args)
    assert code == 0, (out, err)
    doc = json.loads(out)
    (unit,) = doc["build"]["units"]  # the unit that includes the edited header; unrelated.cu is not built
    assert unit["unit"] == "csrc/mini.cu" and unit["edited"] and unit["modules"] == ["mini"]
    before, after = unit["builds"]["120a"]["pristine"], unit["builds"]["120a"]["patched"]
    assert (before["empty"], before["counts"]["griddepcontrol"]) == (1, 0)
    assert (after["empty"], after["counts"]["griddepcontrol"]) == (0, 1)
    assert not after["cached"]  # (the pristine build may come from another test's run: the same inputs)
    (module,) = doc["build"]["modules"]
    assert module["admits"] == {"120a": {"pristine": False, "patched": True}}
    assert module["sources"] == ["csrc/mini.cu", "csrc/host.cpp"] and module["not_built"] == ["csrc/host.cpp"]
    assert [e["ok"] for e in doc["build"]["expectations"]] == [True]

    t0 = time.monotonic()
    code, out, err = run_cli(*args)
    took = time.monotonic() - t0
    again = json.loads(out)["build"]["units"][0]["builds"]["120a"]
    assert code == 0 and again["pristine"]["cached"] and again["patched"]["cached"]
    assert took < 1.0, f"a cached verify --build took {took:.2f} s"

    # applied to the tree: the pristine side comes from reverting in memory, and matches
    code, out, err = run_cli("--recipes", str(recipes), "apply", "mini-guard", "-t", f"flashinfer={root}")
    assert code == 0, (out, err)
    code, out, err = run_cli(*args)
    applied = json.loads(out)
    assert code == 0 and applied["recipes"][0]["state"] == "applied"
    b = applied["build"]["units"][0]["builds"]["120a"]
    assert (
        (b["pristine"]["empty"], b["patched"]["empty"]) == (1, 0) and b["pristine"]["cached"] and b["patched"]["cached"]
    )


@needs_nvcc
def test_an_expectation_that_fails_is_exit_1(mini_fi, run_cli):
    """A guard widened to a constant false: the patched kernel stays empty on sm_120a."""
    root, recipes = mini_fi
    code, out, err = run_cli("--recipes", str(recipes), "verify", "half-guard", "--build", "-t", f"flashinfer={root}")
    assert code == 1, (out, err)
    assert "half-guard > expect #1 (no-empty-kernels): on 120a, no kernel of the units of mini is empty" in out
    assert "FAILED (csrc/mini.cu: 1 of 1 kernels empty: k (1))" in out


@needs_nvcc
def test_a_patched_build_that_fails_names_nvccs_first_error(mini_fi, run_cli):
    root, recipes = mini_fi
    (recipes / "mini-guard.toml").write_text(MINI_RECIPE.format(replace_tail=") && undefined_name)"))
    code, out, err = run_cli("--recipes", str(recipes), "verify", "mini-guard", "--build", "-t", f"flashinfer={root}")
    assert code == 1, (out, err)
    assert "sm_120a  patched:  FAILED: " in out and "error" in out


def test_tvm_ffi_headers_missing_is_one_line(mini_fi, run_cli, monkeypatch):
    root, recipes = mini_fi
    shutil.rmtree(root / "tvm_ffi")
    from importlib import metadata

    def none(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", none)
    monkeypatch.setattr(build, "nvcc_version", lambda nvcc: "Cuda compilation tools, release 13.0")
    code, out, err = run_cli(
        "--recipes", str(recipes), "verify", "mini-guard", "--build", "-t", f"flashinfer={root}", "--nvcc", "/bin/sh",
        "--jobs", "2",
    )  # fmt: skip
    assert code == 2
    assert err.strip().splitlines() == [
        "verify: building for sm_120a (mini-guard's [verify] arch), on 2 job(s)",
        f"patchkit: error: verify --build: the tvm-ffi headers are missing (no apache-tvm-ffi beside {root}, none"
        " installed for this Python, and its wheel could not be fetched: apache-tvm-ffi: the package index is not "
        f"asked while PATCHKIT_OFFLINE=1) (hint: {build.TVM_FFI_HINT})",
    ]


# -- real: one unit of FlashInfer 0.6.3 -------------------------------------------------------

ONE_UNIT = """
id = "guards-only"
summary = "the allreduce-fusion's __CUDA_ARCH__ guards alone: one unit includes them"
[engines]
flashinfer = ">=0.6.3"
[[ops]]
kind = "text-replace"
engine = "flashinfer"
file = "include/flashinfer/comm/trtllm_allreduce.cuh"
[ops.params]
find = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
replace = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))"
count = 13
[verify]
arch = ["120a"]
"""
TVM_FFI = "0.1.15.post2"


@pytest.mark.real
@needs_nvcc
def test_one_real_unit_for_sm120a_pristine_and_patched(tree, run_cli, tmp_path, monkeypatch):
    """trtllm_allreduce.cu, FlashInfer 0.6.3, sm_120a: two nvcc processes at once (about 2.5
    minutes on 2 cores); pristine 0 griddepcontrol and 480 empty kernels, patched some and none."""
    from patchkit.upstream import fetch

    fi = tree("flashinfer", "0.6.3", links=True)
    with zipfile.ZipFile(fetch.fetch_wheel("apache-tvm-ffi", TVM_FFI)) as z:  # the headers, as pip installs them
        z.extractall(fi, [n for n in z.namelist() if n.startswith("tvm_ffi/include/")])
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "guards-only.toml").write_text(ONE_UNIT)
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    code, out, err = run_cli(
        "--recipes", str(recipes), "verify", "guards-only", "--build", "-t", f"flashinfer={fi}", "--jobs", "2", "--json"
    )
    assert code == 0, (out, err)
    (unit,) = json.loads(out)["build"]["units"]
    assert unit["unit"] == "csrc/trtllm_allreduce.cu"
    before, after = unit["builds"]["120a"]["pristine"], unit["builds"]["120a"]["patched"]
    assert (before["kernels"], before["empty"], before["counts"]["griddepcontrol"]) == (921, 480, 0)
    assert after["empty"] == 0 and after["counts"]["griddepcontrol"] > 0


FAKE_NVCC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi
echo $$ >> "{pids}"
exec sleep 60
"""


def test_an_interrupted_build_leaves_no_nvcc_running(mini_fi, run_cli, tmp_path, monkeypatch):
    """Ctrl-C while nvcc runs: every nvcc patchkit started is killed before the error goes up."""
    import concurrent.futures
    import os

    root, recipes = mini_fi
    pids = tmp_path / "pids"
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(pids=pids))
    nvcc.chmod(0o755)

    def interrupted(futs, *args, **kwargs):
        deadline = time.monotonic() + 120  # generous: a loaded machine may take long to start two shells
        while time.monotonic() < deadline and len(pids.read_text().split() if pids.exists() else []) < 2:
            time.sleep(0.05)
        raise KeyboardInterrupt

    monkeypatch.setattr(concurrent.futures, "wait", interrupted)
    code, out, err = run_cli(
        "--recipes", str(recipes), "verify", "mini-guard", "--build", "-t", f"flashinfer={root}", "--nvcc", str(nvcc)
    )
    assert code == 130, (out, err)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2  # pristine and patched, at once
    for pid in started:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
        else:
            pytest.fail(f"nvcc {pid} still runs after the interrupt")


def test_an_nvcc_that_hangs_is_killed_at_the_timeout_and_reported(mini_fi, run_cli, tmp_path):
    """--nvcc-timeout: a run past it is killed with its process group, and the build reads
    failed, naming the timeout and the flag (never cached, never waited on forever)."""
    import os

    root, recipes = mini_fi
    pids = tmp_path / "pids"
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(pids=pids))
    nvcc.chmod(0o755)
    t0 = time.monotonic()
    code, out, err = run_cli(
        "--recipes", str(recipes), "verify", "mini-guard", "--build", "-t", f"flashinfer={root}",
        "--nvcc", str(nvcc), "--nvcc-timeout", "1", "--json",
    )  # fmt: skip
    assert time.monotonic() - t0 < 30
    assert code == 1, (out, err)
    units = json.loads(out)["build"]["units"]
    errors = [b["error"] for u in units for arch in u["builds"].values() for b in arch.values()]
    assert errors and all("ran past 1 s and was killed" in e and "--nvcc-timeout" in e for e in errors), errors
    for pid in (int(p) for p in pids.read_text().split()):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        pytest.fail(f"nvcc {pid} still runs after its timeout")


def test_a_long_build_says_what_it_builds_and_why_then_how_far_it_got(mini_fi, run_cli, tmp_path, monkeypatch):
    """Up front: each arch and why it is built (the comparison arch of an expectation too);
    then a line at least every PROGRESS_EVERY seconds while nvcc runs and nothing finishes."""
    root, recipes = mini_fi
    (recipes / "mini-guard.toml").write_text(
        (recipes / "mini-guard.toml").read_text()
        + '[[verify.expect]]\nkind = "same-count"\narch = "120a"\ninstruction = "griddepcontrol"\nas_arch = "90a"\n'
    )
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(pids=tmp_path / "pids"))
    nvcc.chmod(0o755)
    monkeypatch.setattr(build, "PROGRESS_EVERY", 0.2)
    code, out, err = run_cli(
        "--recipes", str(recipes), "verify", "mini-guard", "--build", "-t", f"flashinfer={root}",
        "--nvcc", str(nvcc), "--nvcc-timeout", "2", "--jobs", "4",
    )  # fmt: skip
    assert code == 1, (out, err)  # the fake nvcc never builds
    lines = err.splitlines()
    assert lines[0] == (
        "verify: building for sm_120a (mini-guard's [verify] arch); sm_90a (mini-guard's same-count expectation "
        "compares sm_120a with it), on 4 job(s)"
    )
    assert lines[1] == "verify: 4 nvcc run(s) to make, 4 at once (0 from the cache)"
    assert any(re.fullmatch(r"verify: 0/4 nvcc run\(s\) done, \d running, \d+ s so far", ln) for ln in lines), err
    assert any(ln.endswith("(4/4)") for ln in lines), err


def test_a_second_verify_of_unchanged_trees_does_not_plan_again(mini_fi, run_cli, monkeypatch):
    """The plan (every check of apply, in memory) is cached on the bytes of every file it read:
    unchanged, verify answers without planning; one byte changed, it plans again."""
    from patchkit.core import planner

    root, recipes = mini_fi
    args = ("--recipes", str(recipes), "verify", "mini-guard", "-t", f"flashinfer={root}", "--json")
    code, first, err = run_cli(*args)
    assert code == 0, (first, err)
    calls = []
    real = planner.plan_apply
    monkeypatch.setattr(planner, "plan_apply", lambda *a, **k: calls.append(1) or real(*a, **k))
    code, second, err = run_cli(*args)
    assert code == 0 and second == first and calls == []
    header = root / "flashinfer/data/include/flashinfer/comm/kernel.cuh"
    header.write_text(header.read_text() + "// a comment\n")
    code, third, err = run_cli(*args)
    assert code == 0 and calls == [1]
    comm = root / "flashinfer/jit/comm.py"
    comm.write_text(comm.read_text().replace("[9, 10]", "[9, 10, 12]"))  # made upstream: nothing to do
    code, out, err = run_cli(*args)
    assert calls == [1, 1] and json.loads(out)["recipes"][0]["edits"] == 1, out
