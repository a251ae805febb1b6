"""CMake goals (goal.cmake_in_scope): a text hunk that adds the device to a CMake arch list
(``cuda_archs_loose_intersection(FP4_ARCHS "10.0a;12.0a" ...)``) is for "this arch list admits
the device, under the toolkit branch it stands in".  Where its lines are gone but upstream's
list admits the device in other words (``12.0f`` for ``12.0a``, or a version split whose every
arm admits it), the op reads `upstream` (the pristine release has it) or `someone-else`, never
`missing` or `pending`, with the place and the evaluation in --json's evidence.  Decoys: the
device admitted only in another toolkit branch, a list that admits 10.0 only, a list of
another kernel.

Offline, on a miniature sglang tree with hand-made releases in the cache (the file is
CMake by its name, whatever the engine): 0.5.8 the release the recipe was written for, 0.5.9
the target's pristine release.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tree_sitter_cmake")

CM = "sglang/srt/kernels.cmake"

HOME = """\
if(VLLM_GPU_LANG STREQUAL "CUDA")
  # FP4 kernels
  cuda_archs_loose_intersection(FP4_ARCHS "10.0a;10.1a" "${CUDA_ARCHS}")
  if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8 AND FP4_ARCHS)
    set(FP4_SRCS "csrc/fp4.cu")
  endif()

  cuda_archs_loose_intersection(MLA_ARCHS "10.0a" "${CUDA_ARCHS}")
  if(MLA_ARCHS)
    set(MLA_SRCS "csrc/mla.cu")
  endif()
endif()
"""

RECIPE = """
id = "cm-gate"
summary = "build the FP4 kernels for SM120"
device = "sm120"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "text-hunk"
engine = "sglang"
file = "sglang/srt/kernels.cmake"
[ops.params]
hunk = '''
   # FP4 kernels
-  cuda_archs_loose_intersection(FP4_ARCHS "10.0a;10.1a" "${CUDA_ARCHS}")
+  cuda_archs_loose_intersection(FP4_ARCHS "10.0a;10.1a;12.0a" "${CUDA_ARCHS}")
   if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8 AND FP4_ARCHS)
'''
"""

OLD = '  # FP4 kernels\n  cuda_archs_loose_intersection(FP4_ARCHS "10.0a;10.1a" "${CUDA_ARCHS}")\n'


def split(new13: str, old: str) -> str:
    """Upstream's version split of the FP4 list (CUDA 13 renamed 10.1 to 11.0)."""
    return HOME.replace(
        OLD,
        "  # FP4 kernels, per toolkit\n"
        "  if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)\n"
        f'    cuda_archs_loose_intersection(FP4_ARCHS "{new13}" "${{CUDA_ARCHS}}")\n'
        "  else()\n"
        f'    cuda_archs_loose_intersection(FP4_ARCHS "{old}" "${{CUDA_ARCHS}}")\n'
        "  endif()\n",
    )


def one(items: str) -> str:
    return HOME.replace(
        OLD, f'  # FP4 kernels (Blackwell)\n  cuda_archs_loose_intersection(FP4_ARCHS "{items}" "${{CUDA_ARCHS}}")\n'
    )


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(CM, "cm-gate", RECIPE, home=HOME)


@pytest.mark.parametrize("items", ["10.0f;12.0f", "10.0a;10.1a;12.0a;12.1a", "10.0a;8.0+PTX", "12.0"])
def test_upstream_admits_the_device_in_other_words(judge, items):
    text = one(items)
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["goal"] == "upstream" and ev["rule"] == 7, ev
    line = text.splitlines().index(f'  cuda_archs_loose_intersection(FP4_ARCHS "{items}" "${{CUDA_ARCHS}}")') + 1
    assert ev["goal_at"] == f"{CM}:{line}", ev
    assert f'`FP4_ARCHS "{items}"` (line {line}) admits 12.0' in ev["goal_eval"], ev


def test_a_version_split_whose_every_arm_admits_the_device_reads_upstream(judge):
    text = split("10.0f;11.0f;12.0f", "10.0a;10.1a;12.0a")
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op
    said = op["evidence"]["goal_eval"]
    assert "under if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)" in said, said
    assert "`CMAKE_CUDA_COMPILER_VERSION` is not known (the device names no CUDA version; 12.0 needs 12.8" in said


def test_someone_else_admits_it_and_apply_revert_leave_it(judge):
    text = one("10.0f;12.0f")
    root, cli, op = judge(text, pristine=HOME)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    path = root / CM
    code, out, err = cli("apply", "cm-gate")
    assert code == 0 and path.read_text() == text, (out, err)
    code, out, err = cli("revert", "cm-gate")
    assert path.read_text() == text, (code, out, err)


@pytest.mark.parametrize(
    "text",
    [
        split("10.0f;11.0f;12.0f", "10.0a;10.1a"),  # 12.0 only in the CUDA 13 arm: unknown without a toolkit
        one("10.0a;10.1a;10.3a"),  # a list that admits 10.0 only
        one("10.0a;12.1a"),  # 12.1a is 12.1's alone
        one("10.0f;11.0f"),  # other families
        one("10.0a;${EXTRA_ARCHS}"),  # unknown, never true
        # the device admitted by another kernel's list (MLA), FP4's own list unchanged in other words
        one("10.0a;10.1a;10.3a").replace('MLA_ARCHS "10.0a"', 'MLA_ARCHS "10.0a;12.0a"'),
    ],
)
def test_decoys_conclude_nothing(judge, text):
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "missing", op
    assert not op["evidence"]["goal"], op


def test_the_toolkit_of_the_device_decides_the_arm(judge):
    """sm120@cuda13.0: only the CUDA 13 arm is in effect, and it admits 12.0."""
    text = split("10.0f;11.0f;12.0f", "10.0a;10.1a")
    root, cli, op = judge(text, pristine=text, recipe=RECIPE.replace('device = "sm120"', 'device = "sm120@cuda13.0"'))
    assert op["state"] == "upstream", op
    assert "not in effect" in op["evidence"]["goal_eval"], op
    root, cli, op = judge(text, pristine=text, recipe=RECIPE.replace('device = "sm120"', 'device = "sm120@cuda12.9"'))
    assert op["state"] == "missing", op


def split_at(version: str, new: str, old: str) -> str:
    return split(new, old).replace(
        "VERSION_GREATER_EQUAL 13.0)\n    cuda_archs", f"VERSION_GREATER_EQUAL {version})\n    cuda_archs"
    )


def test_an_arm_no_toolkit_of_the_device_takes_is_not_read(judge):
    """The device names no toolkit, but no build for 12.0 runs under CUDA before 12.8 (its
    first: Device.first_cuda): the older arm of a split at 12.8 is not in effect, and the
    12.8 arm admits it.  A split at 12.9 or 13.0 may go either way (a 12.8 toolkit): nothing."""
    text = split_at("12.8", "10.0a;10.1a;12.0a", "10.0a")
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op
    assert "not in effect" in op["evidence"]["goal_eval"] and "12.0 needs 12.8" not in op["evidence"]["goal_eval"], op
    for version in ("12.9", "13.0"):
        text = split_at(version, "10.0a;10.1a;12.0a", "10.0a")
        root, cli, op = judge(text, pristine=text)
        assert op["state"] == "missing" and not op["evidence"]["goal"], (version, op)


def test_two_lists_of_the_variable_guarding_other_sources_conclude_nothing(judge):
    """FP4_ARCHS set twice for other kernels, neither guarding csrc/fp4.cu: no site."""
    text = one("10.0f;12.0f").replace('"csrc/fp4.cu"', '"csrc/fp4_v2.cu"') + (
        'cuda_archs_loose_intersection(FP4_ARCHS "12.0f" "${CUDA_ARCHS}")\nset(X "csrc/other.cu")\n'
    )
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "missing", op


def test_the_pending_release_is_pending_and_apply_widens_it(judge):
    root, cli, op = judge(HOME, pristine=HOME)
    assert op["state"] == "pending", op
    code, out, err = cli("apply", "cm-gate")
    assert code == 0 and '"10.0a;10.1a;12.0a"' in (root / CM).read_text(), (out, err)
    code, out, err = cli("status", "cm-gate", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "applied"
