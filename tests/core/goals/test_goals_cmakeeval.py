"""The CMake evaluator (patchkit/core/goals/cmakeeval.py): if() conditions in three values
under a device with (or without) a CUDA version, with CMake's documented precedence, and arch
lists read as vLLM's ``cuda_archs_loose_intersection`` (cmake/utils.cmake) reads them: the
suffixes ``a`` (this arch), ``f`` (the family: its major), ``+PTX`` (any later major), a plain
entry at or below the device within its major."""

from __future__ import annotations

import pytest

from patchkit.core.goals import cmakeeval as C
from patchkit.core.goals.device import Device

pytest.importorskip("tree_sitter_cmake")

SM120, SM121, SM100 = Device(12, 0), Device(12, 1), Device(10, 0)
CU129, CU130 = Device(12, 0, (12, 9)), Device(12, 0, (13, 0))
ODD, ROCM = Device(12, 5), Device(12, 0, platform="rocm")  # 12.5: an architecture with no first toolkit listed


@pytest.mark.parametrize(
    "items,device,want",
    [
        ("12.0", SM120, True),
        ("12.0a", SM120, True),
        ("12.0f", SM120, True),
        ("12.0f", SM121, True),  # the family
        ("12.0", SM121, True),  # a plain entry runs forward within its major
        ("12.0a", SM121, False),  # arch-specific: 12.0 only
        ("12.1a", SM120, False),
        ("12.1", SM120, False),  # above the device
        ("10.0f", SM120, False),  # another family
        ("9.0a;10.0a;10.1a;10.3a", SM120, False),
        ("9.0a;10.0a;10.1a;10.3a", SM100, True),
        ("7.5;8.0+PTX", SM120, True),  # PTX: JIT-compiled on any later major
        ("8.0;9.0", SM120, False),
        ("${OTHER};10.0a", SM120, None),  # an unexpanded variable: unknown, never true
        ("gfx942;gfx950", SM120, False),
    ],
)
def test_admits(items, device, want):
    assert C.admits(C._split_items(items), device) is want


@pytest.mark.parametrize(
    "cond,device,want",
    [
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8", CU129, True),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0", CU129, False),
        ("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0", CU130, True),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.8", CU129, False),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_LESS_EQUAL 12.9", CU129, True),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_EQUAL 12.9.0", CU129, True),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER 12.9", CU129, False),
        # no CUDA named: read over every toolkit from 12.0's first (12.8) on (Device.first_cuda)
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8", SM120, True),
        ("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8", SM120, True),
        ('"${CMAKE_CUDA_COMPILER_VERSION}" VERSION_GREATER 12.4', SM120, True),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.8", SM120, False),
        ("12.8 VERSION_GREATER CMAKE_CUDA_COMPILER_VERSION", SM120, False),  # mirrored
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_EQUAL 12.0", SM120, False),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.9", SM120, None),  # 12.8 or 12.9
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.9", SM121, True),  # 12.1's first is 12.9
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 13.0", SM120, None),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_EQUAL 12.8", SM120, None),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8", ODD, None),  # an arch with no floor
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8", ROCM, None),
        ("DEFINED CMAKE_CUDA_COMPILER_VERSION", CU129, True),
        ("DEFINED CMAKE_CUDA_COMPILER_VERSION", SM120, True),  # a build for it runs under a toolkit
        ("DEFINED CMAKE_CUDA_COMPILER_VERSION", ODD, None),
        (
            "DEFINED CMAKE_CUDA_COMPILER_VERSION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0",
            CU129,
            False,
        ),
        ("NOT CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0", CU129, True),
        ("NOT CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0", SM120, None),
        ("NOT CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8", SM120, False),
        # Kleene: false AND unknown is false, true OR unknown is true
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0 AND SOME_OPTION", CU129, False),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER 12.0 OR SOME_OPTION", CU129, True),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER 12.0 AND SOME_OPTION", CU129, None),
        # AND and OR share one precedence, left to right: (TRUE OR TRUE) AND FALSE
        ("TRUE OR TRUE AND FALSE", SM120, False),
        ("TRUE OR (TRUE AND FALSE)", SM120, True),
        ("NOT (ON AND OFF)", SM120, True),
        ("1", SM120, True),
        ("0", SM120, False),
        ('"FOO"', SM120, False),  # a quoted string that is no true constant
        ("FOO-NOTFOUND", SM120, False),
        ('"12" EQUAL 12', SM120, True),
        ('"CUDA" STREQUAL "CUDA"', SM120, True),
        ("x MATCHES ^y", SM120, None),  # x: a variable it does not know
        ('"abc" MATCHES "^a"', SM120, True),
    ],
)
def test_conditions(cond, device, want):
    got, why = C.condition_text(cond, device)
    assert got is want, (cond, why)
    if want is None:
        assert why, cond


def test_an_unknown_toolkit_says_so():
    got, why = C.condition_text("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0", SM120)
    assert got is None and "the device names no CUDA version; 12.0 needs 12.8 or later" in why[0], why
    got, why = C.condition_text("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8", ODD)
    assert got is None and "the device names no CUDA version" in why[0], why


SPLIT = """\
if(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
  set(CUDA_SUPPORTED_ARCHS "7.5;8.0;9.0;10.0;11.0;12.0")
elseif(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
  set(CUDA_SUPPORTED_ARCHS "7.0;7.5;8.0;9.0;10.0;10.1;12.0")
else()
  set(CUDA_SUPPORTED_ARCHS "7.0;7.5;8.0;9.0")
endif()
set(HIP_SUPPORTED_ARCHS "gfx906;gfx942")
if(VLLM_GPU_LANG STREQUAL "CUDA")
  if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
    cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0f;11.0f" "${CUDA_ARCHS}")
  else()
    cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0a;10.1a" "${CUDA_ARCHS}")
  endif()
  if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8 AND SCALED_MM_ARCHS)
    set(SRCS "csrc/sm100.cu")
  endif()
endif()
"""


def test_arch_lists_their_branches_and_what_they_guard():
    lists = C.arch_lists(SPLIT)
    assert [(x.var, x.line, x.written) for x in lists] == [
        ("CUDA_SUPPORTED_ARCHS", 3, "7.5;8.0;9.0;10.0;11.0;12.0"),
        ("CUDA_SUPPORTED_ARCHS", 6, "7.0;7.5;8.0;9.0;10.0;10.1;12.0"),
        ("CUDA_SUPPORTED_ARCHS", 8, "7.0;7.5;8.0;9.0"),
        ("SCALED_MM_ARCHS", 13, "10.0f;11.0f"),
        ("SCALED_MM_ARCHS", 15, "10.0a;10.1a"),
    ]  # the HIP list is no CUDA list
    assert lists[3].guards == lists[4].guards == "csrc/sm100.cu"
    # the build option around them is configuration, not a toolkit branch
    assert lists[4].branch_text() == "NOT if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)"
    # which arm is in effect: decided by the toolkit; without one, by every toolkit from the
    # architecture's first on (12.0: 12.8, so never the else arm for CUDA before 12.8)
    assert [C.in_effect(x, CU129)[0] for x in lists] == [False, True, False, False, True]
    assert [C.in_effect(x, CU130)[0] for x in lists] == [True, False, False, True, False]
    assert [C.in_effect(x, SM120)[0] for x in lists] == [None, None, False, None, None]
    assert [C.in_effect(x, ODD)[0] for x in lists] == [None, None, None, None, None]
    groups = C.groups(lists)
    assert [len(g) for g in groups] == [3, 2]
    # the variable's value over its arms: the else arm (CUDA < 12.8) refuses 12.0, but no build
    # for 12.0 runs under it, and both arms that may be in effect admit it; with 12.9 the 12.8 arm
    # alone is in effect.  An architecture with no first toolkit known: unknown
    assert C.value(groups[0], SM120)[0] is True
    assert C.value(groups[0], ODD)[0] is None
    assert C.value(groups[0], CU129)[0] is True
    assert C.value(groups[1], SM120)[0] is False  # no arm admits it, whichever is taken
    assert C.value(groups[1], SM100)[0] is True


def test_a_list_in_a_function_names_it():
    text = 'function(build_fp4)\n  set(FP4_ARCHS "10.0a")\nendfunction()\nset(TOP_ARCHS "9.0a")\n'
    assert [(x.var, x.function) for x in C.arch_lists(text)] == [("FP4_ARCHS", "build_fp4"), ("TOP_ARCHS", "")]
