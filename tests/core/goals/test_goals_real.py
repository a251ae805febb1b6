"""The gate evaluator (patchkit/core/goals/pyeval.py) on the real releases' files: the gates
the sm120 bundle widens read false on SM120 where upstream does not admit it (SGLang 0.5.9's
allreduce fusion, FlashInfer 0.6.3's trtllm_comm module), and true where a later release
admits 12 in its own words (FlashInfer 0.7.4's supported_major_versions=[9, 10, 12], SGLang
0.5.23's get_platform().is_sm120).  Files are read straight from the cached wheels."""

from __future__ import annotations

import ast
import zipfile

import pytest

from patchkit.base.engines import ENGINES
from patchkit.core import pyast
from patchkit.core.goals.device import Device
from patchkit.core.goals.pyeval import admits, env_for, find_scope, keyword_admits
from patchkit.upstream import fetch

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("goals-real")]

SM120, SM100, SM90 = Device.parse("sm120"), Device.parse("sm100"), Device.parse("sm90")


def wheel_file(engine: str, version: str, path: str) -> str:
    whl = fetch.fetch_wheel(ENGINES[engine].dist, version)
    with zipfile.ZipFile(whl) as z:
        return z.read(path).decode("utf-8")


def segment(src: str, node: ast.AST) -> str:
    return pyast.segment(src, node)


def test_sglang_059_allreduce_fusion_gate():
    src = wheel_file("sglang", "0.5.9", "sglang/srt/layers/communicator.py")
    fn = find_scope(ast.parse(src), "apply_flashinfer_allreduce_fusion")
    whole = fn.body[0].value  # return (...) and _is_flashinfer_available and batch_size > 0 ...
    gate = whole.values[0]
    assert ast.unparse(gate) == "_is_sm90_supported or _is_sm100_supported"
    preds = ENGINES["sglang"].predicates
    got = {d: admits(segment(src, gate), src, fn.name, d, preds) for d in (SM120, SM100, SM90)}
    assert [v for v, _ in got.values()] == [False, True, True], got
    assert got[SM120][1] == (
        "`_is_sm90_supported or _is_sm100_supported` is false for 12.0 (`_is_sm90_supported` = "
        "`_is_cuda and is_sm90_supported()`: false; "
        "`_is_sm100_supported` = `_is_cuda and is_sm100_supported()`: false)"
    )
    # The whole condition: false on SM120 whatever the rest says; on SM100 it rests on the
    # server's arguments, which are not the device's.
    assert admits(segment(src, whole), src, fn.name, SM120, preds)[0] is False
    assert admits(segment(src, whole), src, fn.name, SM100, preds)[0] is None


def _comm_call(src: str, function: str) -> ast.Call:
    fn = find_scope(ast.parse(src), function)
    calls = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and any(k.arg == "supported_major_versions" for k in n.keywords)
    ]
    assert len(calls) == 1
    return calls[0]


@pytest.mark.parametrize("version,sm120,sm100", [("0.6.3", False, True), ("0.7.4", True, True)])
def test_flashinfer_trtllm_comm_supported_major_versions(version, sm120, sm100):
    """0.6.3: [9, 10]; 0.7.4 admits 12: supported_major_versions=[9, 10, 12]."""
    src = wheel_file("flashinfer", version, "flashinfer/jit/comm.py")
    call = _comm_call(src, "gen_trtllm_comm_module")
    env = env_for(ast.parse(src), None, ENGINES["flashinfer"].predicates)
    got = [keyword_admits(call, "supported_major_versions", d, env) for d in (SM120, SM100)]
    assert got == [sm120, sm100]
    kw = next(k for k in call.keywords if k.arg == "supported_major_versions")
    text = f"supported_major_versions={segment(src, kw.value)}"
    assert admits(text, src, "gen_trtllm_comm_module", SM120, ())[0] is sm120


def test_sglang_0523_admits_sm120_in_its_own_words():
    """0.5.23's flashinfer_per_tensor_fp8_supported: `is_flashinfer_available() and
    (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120)`."""
    path = "sglang/srt/layers/quantization/fp8_utils.py"
    src = wheel_file("sglang", "0.5.23", path)
    fn = find_scope(ast.parse(src), "flashinfer_per_tensor_fp8_supported")
    gate = fn.body[0].value.values[1]
    assert ast.unparse(gate) == "get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120"
    preds = ENGINES["sglang"].predicates
    got = [admits(segment(src, gate), src, fn.name, d, preds)[0] for d in (SM120, SM100, Device.parse("sm110"))]
    assert got == [True, True, False]
    # and a module flag bound from is_sm120_supported() (deep_gemm_sm120.py: `_is_sm120 = ...`)
    src = wheel_file("sglang", "0.5.23", "sglang/srt/layers/moe/moe_runner/deep_gemm_sm120.py")
    assert admits("not _is_sm120", src, "use_swizzle", SM120, preds)[0] is False
    assert admits("not _is_sm120", src, "use_swizzle", SM100, preds)[0] is True


def test_vllm_0330_allreduce_rms_fusion_gate():
    """vLLM 0.33.0's enable_allreduce_rms_fusion: `... and current_platform.is_cuda() and
    has_flashinfer() and (is_device_capability_family(100) or is_device_capability(90))`."""
    import tarfile

    sd = fetch.fetch_sdist(ENGINES["vllm"].dist, "0.33.0")
    with tarfile.open(sd) as tar:
        src = tar.extractfile("vllm-0.33.0/vllm/config/vllm.py").read().decode()
    fn = find_scope(ast.parse(src), "enable_allreduce_rms_fusion")
    ret = [n for n in fn.body if isinstance(n, ast.Return)][-1]
    gate = ret.value.values[-1]
    assert "is_device_capability_family(100)" in ast.unparse(gate)
    preds = ENGINES["vllm"].predicates
    got = [admits(segment(src, gate), src, fn.name, d, preds)[0] for d in (SM120, SM100, Device.parse("sm103"), SM90)]
    assert got == [False, True, True, True]
    widened = segment(src, gate) + " or current_platform.is_device_capability_family(120)"
    assert admits(widened, src, fn.name, SM120, preds)[0] is True
    # the whole return: false on SM120 whatever the configuration; on SM100 it rests on it
    assert admits(segment(src, ret.value), src, fn.name, SM120, preds)[0] is False
    assert admits(segment(src, ret.value), src, fn.name, SM100, preds)[0] is None
