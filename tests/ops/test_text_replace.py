from tests.ops.golden import check, state

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
