from patchkit.core.ops import KINDS
from tests.core.ops.golden import check, goal, state

CUH = """\
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  cudaGridDependencySynchronize();
#endif
#if __CUDA_ARCH__ >= 700
#endif
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  cudaTriggerProgrammaticLaunchCompletion();
#endif
"""
P = {
    "find": "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))",
    "replace": "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))",
}


def test_all_guards_with_exact_count():
    check("text-replace", CUH, CUH.replace(P["find"], P["replace"]), params={**P, "count": 2})


def test_wrong_count_is_not_success():
    loc = state("text-replace", CUH, params={**P, "count": 3})
    assert loc.state == "ambiguous" and "found 2" in loc.reason


def test_partially_edited_is_reported():
    half = CUH.replace(P["find"], P["replace"], 1)
    assert state("text-replace", half, params={**P, "count": 2}).state == "missing"


# -- the post-condition reads the goal: judged against where it started, the replacement stands ------
# -- where each find stood, every other byte as it was ---------------------------------------------


def test_goal_against_where_the_apply_started():
    op = KINDS["text-replace"]({}, {**P, "count": 2})
    bound = op.relative_to(CUH)
    assert bound is not op and op.relative_to(CUH.replace(P["find"], P["replace"])) is op  # bound only when pending
    right = CUH.replace(P["find"], P["replace"])
    assert bound.is_applied(right) and op.is_applied(right)
    # Both replacements made, but one at another place (locate: done, twice, no find left).
    moved = CUH.replace(P["find"] + "\n  cudaGrid", "  cudaGrid").replace(P["find"], P["replace"])
    moved = moved.replace("#if __CUDA_ARCH__ >= 700", P["replace"] + "\n#if __CUDA_ARCH__ >= 700")
    assert op.locate(moved).state == "done" and op.is_applied(moved)
    assert not bound.is_applied(moved)
    assert not bound.is_applied(right + "// and one more line\n")  # any other byte changed
    assert goal("text-replace", CUH, params={**P, "count": 2}) == ("pending", False)
