"""`patchkit gates` (patchkit/upstream/gates.py, patchkit/commands/gates.py) on miniature
trees: which gates read closed for 12.0 and open for 10.0, which unknown, what is left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.core.goals import cppeval
from patchkit.core.goals.device import Device
from patchkit.upstream import gates as G
from tests.conftest import mini_sglang, pk

SM120, SM100 = Device.parse("12.0"), Device.parse("10.0")

COMMUNICATOR = """\
from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported, is_sm120_supported

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()


def apply_flashinfer_allreduce_fusion(batch_size: int):
    return (
        (_is_sm90_supported or _is_sm100_supported)
        and batch_size > 0
    )


def resolve(backend):
    if not (is_sm90_supported() or is_sm100_supported()):
        raise ValueError("requires SM90 or SM10X")
    return backend


def runtime(server_args):
    if server_args.enable_x and is_sm100_supported():
        launch_fast_kernel()


def already_open():
    if is_sm120_supported():
        go()


def unknown_major(major):
    if major == 10:
        go()


def unrelated(x):
    if x.enabled:
        go()
"""

FI_COMM = """\
def gen_trtllm_comm_module():
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(
        supported_major_versions=[9, 10]
    )
    block_sizes = [9, 10]
    return gen_jit_spec("trtllm_comm", extra_cuda_cflags=nvcc_flags, archs=["sm_90a", "sm_100a"])
"""

CUH = """\
#pragma once
template <typename T>
__global__ void rms_norm_kernel(T* out) {
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  do_work(out);
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  always();
#endif
#if defined(ENABLE_FP8) && (__CUDA_ARCH__ == 1000)
  fp8();
#endif
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL)
  tcgen05();
#endif
}
"""


def rows(text: str):
    return G.python_gates(text, G.engine_words("sglang"), SM120, SM100)


def test_python_gates_closed_maximal_and_unknown_apart():
    closed, unknown = rows(COMMUNICATOR)
    got = {(r["line"], r["kind"], r["function"], r["condition"]) for r in closed}
    assert (5, "flag", "", "_is_cuda and is_sm100_supported()") in got
    assert (10, "return", "apply_flashinfer_allreduce_fusion", "_is_sm90_supported or _is_sm100_supported") in got
    assert (16, "if", "resolve", "is_sm90_supported() or is_sm100_supported()") in got
    assert (22, "if", "runtime", "is_sm100_supported()") in got
    assert len(closed) == 4, closed  # is_sm120_supported() is open; the rest are no device gates
    by_line = {r["line"]: r for r in closed}
    assert "`_is_sm100_supported` = `_is_cuda and is_sm100_supported()`: false" in by_line[10]["why"]
    assert by_line[10]["why"].startswith("false for 12.0")
    assert by_line[16]["guards"] == "raises ValueError"  # the device is let into the refusal
    assert by_line[22]["guards"] == "launch_fast_kernel"
    assert [(r["line"], r["function"]) for r in unknown] == [(32, "unknown_major")]
    assert "is bound by something not modelled" in unknown[0]["why"]


def test_arch_lists_by_keyword_or_by_their_strings_only():
    closed, _ = G.python_gates(FI_COMM, G.engine_words("flashinfer"), SM120, SM100)
    got = [(r["line"], r["kind"], r["condition"]) for r in closed]
    assert got == [
        (3, "arch-list", "supported_major_versions=[9, 10]"),
        (6, "arch-list", 'archs=["sm_90a", "sm_100a"]'),
    ]  # block_sizes = [9, 10] is no list of devices


def test_a_gate_that_admits_both_or_neither_is_not_reported():
    closed, unknown = rows("from x import is_sm90_supported\nif is_sm90_supported():\n    go()\n")
    assert closed == [] and unknown == []  # closed on 12.0, but closed on 10.0 too
    closed, _ = G.python_gates(
        "if is_sm90_supported():\n    go()\n", G.engine_words("sglang"), SM120, Device.parse("9.0")
    )
    assert [r["condition"] for r in closed] == ["is_sm90_supported()"]


@pytest.mark.skipif(not cppeval.available(), reason="tree-sitter-cpp not installed")
def test_cuda_arch_guards():
    closed, unknown = G.cpp_gates(CUH, SM120, SM100)
    got = [(r["line"], r["kind"], r.get("function"), r["condition"]) for r in closed]
    assert got == [
        (4, "#if", "rms_norm_kernel", "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"),
        (10, "#if", "rms_norm_kernel", "(__CUDA_ARCH__ == 1000)"),
        (13, "#if", "rms_norm_kernel", "defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL)"),
    ]
    assert closed[0]["guards"] == "do_work(out);"
    assert "__CUDA_ARCH__ is 1200" in closed[0]["why"]
    assert unknown == []


def test_default_compare_is_the_nearest_datacenter_part():
    assert str(G.default_compare(SM120)) == "10.0"
    assert str(G.default_compare(Device.parse("12.1"))) == "10.0"
    assert str(G.default_compare(SM100)) == "9.0"
    assert str(G.default_compare(Device.parse("8.9"))) == "8.0"


def test_vendored_paths_by_whole_component():
    assert G.is_vendored("flashinfer/data/cutlass/include/cute/arch.hpp")
    assert G.is_vendored("sglang/kernels/jit/csrc/deep_select/vendor/3rdparty/x.h")
    assert not G.is_vendored("flashinfer/data/csrc/cute_sm12x_gemm/kernel.cu")
    assert not G.is_vendored("vllm/csrc/cutlass_extensions/x.h")


def _tree(tmp_path: Path) -> Path:
    return mini_sglang(
        tmp_path / "sglang",
        {
            "sglang/srt/layers/communicator.py": COMMUNICATOR,
            "sglang/srt/plain.py": "def f():\n    return 1\n",
            "sglang/third_party/lib.py": "if is_sm100_supported():\n    go()\n",
            "sglang/srt/broken.py": "def f(:\n    is_sm100_supported()\n",
        },
    )


def test_scan_a_tree(tmp_path):
    root = _tree(tmp_path)
    res = G.scan("sglang", root, "package", "0.5.9", SM120, SM100, jobs=1)
    assert {g.path for g in res.closed} == {"sglang/srt/layers/communicator.py"}
    assert res.vendored_skipped == 1 and res.parsed == 2  # plain.py names no device check: not parsed
    assert res.errors == ["sglang/srt/broken.py: does not parse (SyntaxError)"]
    again = G.scan("sglang", root, "package", "0.5.9", SM120, SM100, vendored=True, jobs=2)
    assert {g.path for g in again.closed} == {"sglang/srt/layers/communicator.py", "sglang/third_party/lib.py"}
    assert [g.vendored for g in again.closed if g.path.startswith("sglang/third_party")] == [True]


def test_recipes_in_play_are_marked(tmp_path):
    root = _tree(tmp_path)
    rdir = tmp_path / "recipes"
    rdir.mkdir()
    (rdir / "widen.toml").write_text(
        'id = "widen"\nsummary = "s"\nrationale = "r"\n[engines]\nsglang = ">=0.5.9"\n'
        '[[ops]]\nkind = "or-operand"\nengine = "sglang"\nfile = "sglang/srt/layers/communicator.py"\n'
        'scope = "apply_flashinfer_allreduce_fusion"\n'
        '[ops.locator]\noperands = ["_is_sm90_supported", "_is_sm100_supported"]\n'
        '[ops.params]\noperand = "_is_sm120_supported"\n'
    )
    r = pk("gates", "--device", "12.0", "-t", f"sglang={root}", "--json", "--recipes", str(rdir), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["device"] == "12.0" and doc["compare"] == "10.0"
    tree = doc["trees"][0]
    marked = {(g["line"], tuple(g["recipes"])) for g in tree["closed"]}
    assert (10, ("widen",)) in marked and (16, ()) in marked
    assert tree["unknown"][0]["state"] == "unknown"
    human = pk("gates", "--device", "sm120", "-t", f"sglang={root}", "--recipes", str(rdir), cwd=tmp_path)
    assert human.returncode == 1
    assert "apply_flashinfer_allreduce_fusion" in human.stdout and "[widened by widen]" in human.stdout
    assert "1 vendored files left out" in human.stdout


def test_bad_input_is_one_line_exit_2(tmp_path):
    root = _tree(tmp_path)
    for args, words in [
        (["--device", "120"], "not a device"),
        (["--device", "12.0", "--compare", "12.0"], "is the device itself"),
        (["--device", "12.0", "-t", "nope=/x"], "unknown engine"),
        (["--device", "12.0", "-t", f"sglang={tmp_path / 'missing'}"], "does not exist"),
    ]:
        r = pk("gates", *args, "-t", f"sglang={root}" if "-t" not in args else "flashinfer=/nonexistent", cwd=tmp_path)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert words in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_no_gate_closed_exits_0(tmp_path):
    root = mini_sglang(tmp_path / "t", {"sglang/srt/a.py": "if is_sm120_supported():\n    go()\n"})
    r = pk("gates", "--device", "12.0", "-t", f"sglang={root}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "0 closed" in r.stdout
