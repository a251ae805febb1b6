"""`gates` on CMake arch lists (patchkit/upstream/cmakegates.py): a list closed for the device
and open for the comparison part is `closed` where its toolkit branch is taken for the device,
`unknown` where that branch cannot be decided (no CUDA version named), and not reported where
another arm is in effect; a list that admits the device (``12.0f``, ``8.0+PTX``) or admits
neither is not one.  Offline, on hand-made text and a miniature vLLM git-layout tree."""

from __future__ import annotations

import json

import pytest

from patchkit.core.goals.device import Device
from patchkit.upstream import cmakegates
from patchkit.upstream import gates as G
from tests.conftest import pk

pytest.importorskip("tree_sitter_cmake")

TEXT = """\
if(VLLM_GPU_LANG STREQUAL "CUDA")
  cuda_archs_loose_intersection(MARLIN_ARCHS "8.0+PTX" "${CUDA_ARCHS}")
  cuda_archs_loose_intersection(SM90_ARCHS "9.0a" "${CUDA_ARCHS}")
  if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
    cuda_archs_loose_intersection(MLA_ARCHS "10.0f;11.0f" "${CUDA_ARCHS}")
  else()
    cuda_archs_loose_intersection(MLA_ARCHS "10.0a;10.1a" "${CUDA_ARCHS}")
  endif()
  set(MLA_SRCS "csrc/mla.cu")
  cuda_archs_loose_intersection(FP4_ARCHS "10.0a;12.0f" "${CUDA_ARCHS}")
  cuda_archs_loose_intersection(SM100_ONLY "10.0a" "${CUDA_ARCHS}")
  set(SM100_SRCS "csrc/sm100.cu")
endif()
"""


def test_closed_unknown_and_not_in_effect():
    closed, unknown = cmakegates.cmake_gates(TEXT, Device.parse("12.0"), Device.parse("10.0"))
    assert [(r["line"], r["condition"], r["guards"]) for r in closed] == [
        (11, 'SM100_ONLY "10.0a"', "csrc/sm100.cu")  # the build option around it is not the device
    ]
    assert [(r["line"], r["condition"]) for r in unknown] == [
        (5, 'MLA_ARCHS "10.0f;11.0f"'),
        (7, 'MLA_ARCHS "10.0a;10.1a"'),
    ]
    assert all(r["state"] == "unknown" and "the device names no CUDA version" in r["why"] for r in unknown)
    # a toolkit decides the arm: under 12.9 the CUDA 13 list is not in effect
    closed, unknown = cmakegates.cmake_gates(TEXT, Device.parse("12.0@cuda12.9"), Device.parse("10.0@cuda12.9"))
    assert [r["line"] for r in closed] == [7, 11] and not unknown
    assert closed[0]["branch"] == "NOT if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)"
    # SM90_ARCHS admits neither 12.0 nor 10.0: no gate between them; against 9.0 it is one
    closed, _ = cmakegates.cmake_gates(TEXT, Device.parse("12.0@cuda12.9"), Device.parse("9.0@cuda12.9"))
    assert [r["line"] for r in closed] == [3]


def test_a_vllm_tree_scan_reports_its_cmake_lists(tmp_path):
    root = tmp_path / "vllm"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "csrc").mkdir()
    (root / "cmake").mkdir()
    (root / "CMakeLists.txt").write_text(TEXT)
    (root / "cmake" / "utils.cmake").write_text('set(OTHER_ARCHS "9.0a;10.0a")\nset(X "csrc/x.cu")\n')
    res = G.scan("vllm", root, "git", None, Device.parse("12.0"), Device.parse("10.0"), jobs=1)
    assert {(g.path, g.line) for g in res.closed} == {("CMakeLists.txt", 11), ("cmake/utils.cmake", 1)}
    assert {(g.path, g.line) for g in res.unknown} == {("CMakeLists.txt", 5), ("CMakeLists.txt", 7)}
    r = pk("gates", "--device", "12.0@cuda12.9", "-t", f"vllm={root}", "--json", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    rows = [g for t in json.loads(r.stdout)["trees"] for g in t["closed"]]
    assert {(g["path"], g["line"], g["kind"]) for g in rows} == {
        ("CMakeLists.txt", 7, "cmake-arch-list"),
        ("CMakeLists.txt", 11, "cmake-arch-list"),
        ("cmake/utils.cmake", 1, "cmake-arch-list"),
    }
    r = pk("gates", "--device", "12.0@cuda99", "-t", f"vllm={root}", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


def test_without_the_cmake_grammar_a_cmake_file_is_said_not_read(tmp_path, monkeypatch):
    from patchkit.core.goals import cmakeeval

    monkeypatch.setattr(cmakeeval, "_parser", lambda: None)
    root = tmp_path / "vllm"
    (root / "vllm").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(TEXT)
    # cache=False: a scan kept while the grammar was here answers for these bytes (its key names the
    # grammar's files, which this stand-in does not remove)
    res = G.scan("vllm", root, "git", None, Device.parse("12.0"), Device.parse("10.0"), jobs=1, cache=False)
    assert not res.closed and not res.unknown
    assert res.errors == [f"CMakeLists.txt: {cmakegates.NOT_READ}"], res.errors


def test_a_list_appended_to_after_it_is_not_closed():
    """vLLM 0.33.0's MINIMAX_M3_FUSED_ARCHS: the SM100 list, then every target arch >= 12.0
    appended to it in a foreach: the value built with is not the literal, so unknown."""
    text = (
        'cuda_archs_loose_intersection(M_ARCHS "10.0a;10.1a" "${CUDA_ARCHS}")\n'
        "foreach(_ARCH ${CUDA_ARCHS})\n"
        "  if(_ARCH VERSION_GREATER_EQUAL 12.0)\n"
        '    list(APPEND M_ARCHS "${_ARCH}")\n'
        "  endif()\n"
        "endforeach()\n"
        'set_gencode_flags_for_srcs(SRCS "csrc/m.cu" CUDA_ARCHS "${M_ARCHS}")\n'
    )
    closed, unknown = cmakegates.cmake_gates(text, Device.parse("12.0@cuda12.9"), Device.parse("10.0@cuda12.9"))
    assert not closed
    assert [(r["line"], r["guards"]) for r in unknown] == [(1, "csrc/m.cu")]
    assert "M_ARCHS is appended to at line 4" in unknown[0]["why"]
