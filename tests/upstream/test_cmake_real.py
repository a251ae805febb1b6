"""CMake arch lists on a real vLLM sdist (0.33.0, and 0.17.0 as the release a recipe was
written for; both already downloaded by the vLLM tests): the evaluator reads
CMakeLists.txt as the code says, `gates` reports its lists, and a hunk that added 12.0a to
0.17.0's DeepSeek-V3 fused-A GEMM list reads `upstream` on 0.33.0, whose lists admit SM120 in
other words (``12.0f`` under CUDA 13, ``12.0a;12.1a`` before it)."""

from __future__ import annotations

import json

import pytest

from patchkit.core.goals import cmakeeval as C
from patchkit.core.goals.device import Device
from patchkit.upstream import cmakegates, fetch

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("vllm")]
pytest.importorskip("tree_sitter_cmake")


def _lists(version: str):
    text = (fetch.release_tree("vllm", version) / "CMakeLists.txt").read_text()
    return text, {x.line: x for x in C.arch_lists(text)}


def test_vllm_0330_cmakelists_reads_as_the_code_says():
    text, at = _lists("0.33.0")
    lines = text.splitlines()
    # CMakeLists.txt:132, under the CUDA >= 12.8 arm (line 130/131) of the toolkit split at 119
    assert lines[131].strip() == 'set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;10.1;10.3;12.0;12.1")'
    supported = C.group(list(at.values()), at[132])
    assert [x.line for x in supported] == [123, 129, 132, 134]
    assert C.value(supported, Device.parse("12.0@cuda12.9"))[0] is True  # the 12.8 arm: 12.0 in it
    assert C.value(supported, Device.parse("12.0@cuda13.0"))[0] is True  # 13.0: "...;11.0;12.0"
    # No toolkit named: the else arm (CUDA < 12.8) lacks 12.0, but no build for 12.0 runs under
    # CUDA before 12.8 (Device.first_cuda), and each arm from 12.8 on admits it
    value, why = C.value(supported, Device.parse("12.0"))
    assert value is True and "(line 134)" in why and "not in effect" in why, why
    assert C.value(supported, Device.parse("10.7"))[0] is None  # no first toolkit known for 10.7
    # CMakeLists.txt:861/863: the SM120 scaled_mm list, 12.0f under CUDA 13, 12.0a;12.1a before
    assert at[861].written == "12.0f" and at[863].written == "12.0a;12.1a"
    assert at[861].guards == "csrc/quantization/w8a8/cutlass/scaled_mm_c3x_sm120.cu"
    assert C.value(C.group(list(at.values()), at[861]), Device.parse("12.1"))[0] is True  # 12.0f's family, 12.1a
    # CMakeLists.txt:897: the SM100 list, else arm of `if(... VERSION_GREATER_EQUAL 13.0)` at 894
    assert at[897].written == "10.0a;10.1a;10.3a" and at[897].path[-1].line == 894
    assert C.admits(at[897].items, Device(12, 0)) is False and C.admits(at[897].items, Device(10, 0)) is True


def test_gates_on_vllm_0330_cmakelists():
    text, _ = _lists("0.33.0")
    closed, unknown = cmakegates.cmake_gates(text, Device.parse("12.0"), Device.parse("10.0"))
    assert not closed  # every such list stands under a toolkit branch: undecided without one
    rows = {r["line"]: r for r in unknown}
    assert rows[897]["condition"] == 'SCALED_MM_ARCHS "10.0a;10.1a;10.3a"'
    assert rows[897]["guards"] == "csrc/quantization/w8a8/cutlass/scaled_mm_c3x_sm100.cu"
    assert "VERSION_GREATER_EQUAL 13.0) (line 894) is unknown" in rows[897]["why"]
    assert 863 not in rows and 861 not in rows  # they admit 12.0
    closed, unknown = cmakegates.cmake_gates(text, Device.parse("12.0@cuda12.9"), Device.parse("10.0@cuda12.9"))
    got = {r["line"] for r in closed}
    assert {897, 981, 1063, 1130} <= got and 895 not in got  # the CUDA 13 arm is not in effect
    # CMakeLists.txt:629: the SM100 MiniMax list, but every target arch >= 12.0 is appended to it
    # at 634 (a foreach) before set_gencode_flags_for_srcs builds the file it guards with it
    assert 629 not in got
    rows = {r["line"]: r for r in unknown}
    assert "appended to at line 634" in rows[629]["why"]
    assert rows[629]["guards"] == "csrc/fused_minimax_m3_qknorm_rope_kv_insert_kernel.cu"


HUNK = """
id = "dsv3-sm120"
summary = "build the DeepSeek-V3 fused A GEMM for SM120"
device = "sm120"
[engines]
vllm = ">=0.17.0"
[[ops]]
kind = "text-hunk"
engine = "vllm"
file = "CMakeLists.txt"
[ops.params]
hunk = '''
   else()
-    cuda_archs_loose_intersection(DSV3_FUSED_A_GEMM_ARCHS "9.0a;10.0a;10.1a;10.3a" "${CUDA_ARCHS}")
+    cuda_archs_loose_intersection(DSV3_FUSED_A_GEMM_ARCHS "9.0a;10.0a;10.1a;10.3a;12.0a" "${CUDA_ARCHS}")
   endif()
'''
"""


def test_a_hunk_on_vllm_0170_reads_upstream_on_0330(tmp_path, run_cli):
    rec = tmp_path / "recipes"
    rec.mkdir()
    (rec / "dsv3-sm120.toml").write_text(HUNK)
    code, out, err = run_cli("--recipes", str(rec), "drift", "dsv3-sm120", "--to", "vllm==0.17.0", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "pending", out + err
    code, out, err = run_cli("--recipes", str(rec), "drift", "dsv3-sm120", "--to", "vllm==0.33.0", "--json")
    (op,) = json.loads(out)["recipes"][0]["ops"]
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["rule"] == 7 and ev["goal_at"] == "CMakeLists.txt:793", ev  # 0.33.0's else arm
    assert '`DSV3_FUSED_A_GEMM_ARCHS "9.0a;10.0a;10.1a;10.3a;12.0a;12.1a"` (line 793) admits 12.0' in ev["goal_eval"]
    # The decoy: 0.17.0's SM100 FP4 list (CMakeLists.txt:679, "10.0a;10.1a;10.3a", pending
    # there) is gone in 0.33.0, split into FP4_SM100_ARCHS (10.0 only) and FP4_SM120_ARCHS
    # (which admits 12.0): another variable is not the list, and nothing is concluded.
    (rec / "dsv3-sm120.toml").write_text(
        HUNK.replace("DSV3_FUSED_A_GEMM_ARCHS", "FP4_ARCHS").replace('"9.0a;10.0a;10.1a;10.3a', '"10.0a;10.1a;10.3a')
    )
    code, out, err = run_cli("--recipes", str(rec), "drift", "dsv3-sm120", "--to", "vllm==0.17.0", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "pending", out + err
    code, out, err = run_cli("--recipes", str(rec), "drift", "dsv3-sm120", "--to", "vllm==0.33.0", "--json")
    (op,) = json.loads(out)["recipes"][0]["ops"]
    assert op["state"] == "missing" and not op["evidence"]["goal"], op
