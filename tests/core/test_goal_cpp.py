"""C/C++/CUDA goals (goal.cpp_in_scope): a text hunk that widens a device gate in a .cu/.cpp/.h
file is for "this gate admits the recipe's device".  Where its lines are gone but the one
device gate of the function the edit was in (an ``#if __CUDA_ARCH__`` or a runtime ``major
==`` check, read by tree-sitter's C++ grammar) admits the device, the op reads `upstream`
(the pristine release has it) or `someone-else` (the target has it, the release not), never
`missing` or `pending`, with the place and the evaluation in --json's evidence.  A gate that
does not admit the device, two gates, or a name the function does not bind concludes nothing.

Offline, on a miniature sglang tree with hand-made releases in the cache: 0.5.8 the release
the recipe was written for, 0.5.9 the target's pristine release.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tree_sitter_cpp")

KERNEL = "sglang/srt/kernel.cu"

HOME = """\
#include <cuda_runtime.h>

void launch(int dev) {
  int major, minor;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major == 10) {
    run_fast(dev);
  } else {
    run_slow(dev);
  }
}

template <typename T>
__global__ void fused(T* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200
  cudaGridDependencySynchronize();
#endif
  p[threadIdx.x] = T(0);
}
"""

RUNTIME = """
id = "cu-gate"
summary = "admit SM120 in the launcher"
device = "sm120"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "text-hunk"
engine = "sglang"
file = "sglang/srt/kernel.cu"
[ops.params]
hunk = '''
   cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
-  if (major == 10) {
+  if (major == 10 || major == 12) {
     run_fast(dev);
'''
"""

GUARD = """
id = "cu-gate"
summary = "compile the PDL wait for SM120"
device = "sm120"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "text-hunk"
engine = "sglang"
file = "sglang/srt/kernel.cu"
[ops.params]
hunk = '''
 __global__ void fused(T* p) {
-#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200
+#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1300
   cudaGridDependencySynchronize();
'''
"""

# The launcher refactored (its lines no longer the hunk's), in words that admit SM120 or not.
REFACTOR_RUNTIME = """\
  int sm_major = 0, minor;
  cudaDeviceGetAttribute(&sm_major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if ({cond}) {{
"""
OLD_RUNTIME = """\
  int major, minor;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major == 10) {
"""
OLD_GUARD = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200\n"


def runtime(cond: str) -> str:
    return HOME.replace(OLD_RUNTIME, REFACTOR_RUNTIME.format(cond=cond))


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(KERNEL, "cu-gate", RUNTIME, home=HOME)


@pytest.mark.parametrize(
    "cond", ["sm_major >= 10", "sm_major == 10 || sm_major == 12", "sm_major / 2 == 6 || sm_major == 10"]
)
def test_upstream_admits_the_device_in_its_own_words(judge, cond):
    text = runtime(cond)
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["goal"] == "upstream" and ev["rule"] == 7, ev
    line = text.splitlines().index(f"  if ({cond}) {{") + 1
    assert ev["goal_at"] == f"{KERNEL}:{line}", ev
    assert f"`{cond}` is true for 12.0" in ev["goal_eval"] and "`launch`" in ev["goal_eval"], ev


def test_someone_else_admits_it_and_apply_revert_leave_it(judge):
    text = runtime("sm_major >= 10")
    root, cli, op = judge(text, pristine=HOME)
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    path = root / KERNEL
    code, out, err = cli("apply", "cu-gate")
    assert code == 0 and path.read_text() == text, (out, err)
    code, out, err = cli("revert", "cu-gate")
    assert path.read_text() == text, (code, out, err)


@pytest.mark.parametrize(
    "cond",
    [
        "sm_major == 10 || sm_major == 11",  # does not admit SM120
        "is_blackwell(sm_major)",  # a call: unknown, never true
        "cap >= 10",  # a name the function does not bind to the capability: unknown
    ],
)
def test_a_gate_that_is_not_shown_to_admit_the_device_stays_missing(judge, cond):
    root, cli, op = judge(runtime(cond), pristine=runtime(cond))
    assert op["state"] == "missing", op
    assert not op["evidence"]["goal"], op


def test_two_device_gates_in_the_function_conclude_nothing(judge):
    text = runtime("sm_major >= 10").replace("    run_slow(dev);\n", "    if (minor == 1) run_slow(dev);\n")
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "missing", op


def test_an_arch_guard_widened_upstream_reads_upstream(judge):
    text = HOME.replace(OLD_GUARD, "#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)\n")
    root, cli, op = judge(text, pristine=text, recipe=GUARD)
    assert op["state"] == "upstream", op
    assert "`defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)` is true for 12.0" in op["evidence"]["goal_eval"]
    line = text.splitlines().index("#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)") + 1
    assert op["evidence"]["goal_at"] == f"{KERNEL}:{line}", op


def test_an_arch_guard_that_still_excludes_the_device_stays_missing(judge):
    text = HOME.replace(OLD_GUARD, "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200\n")
    root, cli, op = judge(text, pristine=text, recipe=GUARD)
    assert op["state"] == "missing", op


def test_the_pending_release_is_pending_and_apply_widens_it(judge):
    root, cli, op = judge(HOME, pristine=HOME)
    assert op["state"] == "pending", op
    code, out, err = cli("apply", "cu-gate")
    assert code == 0 and "major == 10 || major == 12" in (root / KERNEL).read_text(), (out, err)
    code, out, err = cli("status", "cu-gate", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "applied"


def test_no_pristine_release_to_read_is_applied_unsure(judge):
    root, cli, op = judge(runtime("sm_major >= 10"))
    assert op["state"] == "applied?", op
