"""The C++/CUDA gate evaluator (patchkit/core/goals/cppeval.py): ``#if`` conditions in the
device pass of a compile for SM120, SM100 and SM90, and runtime checks, over tree-sitter's
C++ grammar; unknown, saying why, when tree-sitter is not installed."""

from __future__ import annotations

import sys
import zipfile

import pytest

from patchkit.core.goals import cppeval, grammar
from patchkit.core.goals.cppeval import evaluate_cpp, evaluate_if, preproc_conditions
from patchkit.core.goals.device import Device

SM120, SM100, SM90 = Device.parse("sm120"), Device.parse("sm100"), Device.parse("sm90")
T, F, N = True, False, None

IF_CASES = [
    ("#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))", F, T, T),
    ("#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))", T, T, T),
    ("#if __CUDA_ARCH__ >= 1000", T, T, F),
    ("#elif __CUDA_ARCH__ == 1200 || __CUDA_ARCH__ == 1210", T, F, F),
    ("__CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1000", F, F, T),
    ("__CUDA_ARCH__ / 100 == 12", T, F, F),
    ("__CUDA_ARCH__ % 100 == 0", T, T, T),
    ("!defined(__CUDA_ARCH__)", F, F, F),
    ("defined __CUDA_ARCH__", T, T, T),
    ("defined(ENABLE_FP4) && __CUDA_ARCH__ >= 1000", N, N, F),
    ("defined(ENABLE_FP4) || __CUDA_ARCH__ >= 1200", T, N, N),
    ("SOME_MACRO >= 3", N, N, N),
    ("CUDA_VERSION_AT_LEAST(12, 8)", N, N, N),
    ("__CUDA_ARCH__ >= 0x4B0", T, F, F),  # 1200
    ("1 ? __CUDA_ARCH__ >= 1200 : 0", N, N, N),  # the grammar's #if has no ?: (a parse error: unknown)
    ("-__CUDA_ARCH__ < -1100", T, F, F),
]


@pytest.mark.parametrize("cond,sm120,sm100,sm90", IF_CASES, ids=[c[0] for c in IF_CASES])
def test_preprocessor_conditions(cond, sm120, sm100, sm90):
    assert tuple(evaluate_if(cond, d)[0] for d in (SM120, SM100, SM90)) == (sm120, sm100, sm90)


def test_defines_and_explanations():
    assert evaluate_if("defined(ENABLE_FP4) && __CUDA_ARCH__ >= 1000", SM120, {"ENABLE_FP4": 1}) == (
        True,
        "`defined(ENABLE_FP4) && __CUDA_ARCH__ >= 1000` is true for 12.0",
    )
    assert evaluate_if("defined(ENABLE_FP4)", SM120, {"ENABLE_FP4": False})[0] is False
    assert evaluate_if("SOME_MACRO >= 3", SM120) == (
        None,
        "`SOME_MACRO >= 3` is unknown for 12.0: `SOME_MACRO` is not known here (a macro the build may define)",
    )
    assert evaluate_if("#if __CUDA_ARCH__ >=", SM120) == (
        None,
        "`__CUDA_ARCH__ >=` is unknown for 12.0: not a preprocessor condition",
    )
    assert evaluate_if("#if (__CUDA_ARCH__ >= 900) && \\\n    (__CUDA_ARCH__ < 1200)", SM90)[0] is True


RUNTIME_CASES = [
    ("major == 10 || major == 12", T, T, F),
    ("major == 9 || major == 10", F, T, T),
    ("major >= 10", T, T, F),
    ("(major == 12 && minor == 0) || sm == 100", T, T, F),
    ("sm_version >= 90 && sm_version < 120", F, T, T),
    ("!(major == 12)", F, T, T),
    ("major == 12 && unknown_flag", N, F, F),
    ("major == 12 || unknown_flag", T, N, N),
    ("is_sm120()", N, N, N),
    ("major == 12 ? true : false", T, F, F),
]


@pytest.mark.parametrize("expr,sm120,sm100,sm90", RUNTIME_CASES, ids=[c[0] for c in RUNTIME_CASES])
def test_runtime_checks(expr, sm120, sm100, sm90):
    names = {"major": "major", "minor": "minor", "sm": "sm", "sm_version": "sm"}
    assert tuple(evaluate_cpp(expr, d, names)[0] for d in (SM120, SM100, SM90)) == (sm120, sm100, sm90)


def test_runtime_names():
    assert evaluate_cpp("cc == 12", SM120, {"cc": 12})[0] is True
    assert evaluate_cpp("major == 12", SM120) == (None, "`major == 12` is unknown for 12.0: `major` is not known here")
    assert evaluate_cpp("major ==", SM120)[1] == "`major ==` is unknown for 12.0: not a C++ expression"
    with pytest.raises(ValueError):
        evaluate_cpp("x", SM120, {"x": "arch"})


def test_conditions_of_a_source():
    src = "#if A\n#elif __CUDA_ARCH__ >= 900\nint x;\n#endif\nvoid f() {\n#if B > 1\n#endif\n}\n"
    assert preproc_conditions(src) == [(1, "A"), (2, "__CUDA_ARCH__ >= 900"), (6, "B > 1")]


def test_without_tree_sitter_every_verdict_is_unknown(monkeypatch):
    monkeypatch.setattr(grammar, "_PARSERS", {})  # loaded once per process: as in a fresh one
    monkeypatch.setitem(sys.modules, "tree_sitter", None)  # import fails
    assert not cppeval.available()
    assert evaluate_if("__CUDA_ARCH__ >= 900", SM120) == (
        None,
        "`__CUDA_ARCH__ >= 900` is unknown for 12.0: tree-sitter is not installed (pip install patchkit[goals])",
    )
    assert evaluate_cpp("major == 12", SM120, {"major": "major"})[0] is None
    assert preproc_conditions("#if A\n#endif\n") is None


@pytest.mark.real
@pytest.mark.parametrize("version,sm120", [("0.6.3", False), ("0.7.4", True)])
def test_flashinfer_trtllm_allreduce_guards(version, sm120):
    """0.6.3 compiles its Hopper/Blackwell kernels out of SM120 (`__CUDA_ARCH__ < 1200`);
    0.7.4 dropped the bound: upstream admits SM120 there."""
    from patchkit.base.engines import ENGINES
    from patchkit.upstream import fetch

    whl = fetch.fetch_wheel(ENGINES["flashinfer"].dist, version)
    with zipfile.ZipFile(whl) as z:
        src = z.read("flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh").decode()
    guards = [c for _, c in preproc_conditions(src) if "__CUDA_ARCH__ >= 900" in c]
    assert len(guards) >= 8
    assert {evaluate_if(c, SM120)[0] for c in guards} == {sm120}
    assert {evaluate_if(c, SM100)[0] for c in guards} == {True}
