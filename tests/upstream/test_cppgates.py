"""`gates` on run-time C++/CUDA capability checks (patchkit/upstream/cppgates.py): a check,
``if`` or ``return`` over what binds the device's capability (``cudaDeviceGetAttribute``,
``cudaGetDeviceProperties``, an accessor the file defines or a shared one, a member bound from
one) is closed where it is false for 12.0 and true for 10.0; an ``if`` that refuses is closed
where it is true for the device; a parameter or a macro is never guessed.  Offline, on
hand-made text and a miniature FlashInfer tree."""

from __future__ import annotations

import pytest

from patchkit.core.goals.device import Device
from patchkit.upstream import cppgates
from patchkit.upstream import gates as G

pytest.importorskip("tree_sitter_cpp")
SM120, SM100, SM90 = Device.parse("12.0"), Device.parse("10.0"), Device.parse("9.0")

TEXT = """\
#include <cuda_runtime.h>

void CheckTarget(int device_id) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id);
  TVM_FFI_ICHECK(major == 10 && (minor == 0 || minor == 3)) << "SM100 only";
  TVM_FFI_ICHECK(major == 10 || major == 12) << "admits both";
  TVM_FFI_ICHECK(major >= KERNEL_MIN_MAJOR) << "a macro";
}

void Props(int device) {
  cudaDeviceProp props;
  cudaGetDeviceProperties(&props, device);
  TORCH_CHECK(props.major >= 9 && props.major < 12, "Hopper or Blackwell datacenter");
}

static int my_sm() {
  int a, b;
  cudaDeviceGetAttribute(&a, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&b, cudaDevAttrComputeCapabilityMinor, 0);
  return a * 10 + b;
}

void run(int cap) {
  int const sm = my_sm();
  if (sm >= 100 && sm < 120) {
    launch_sm100();
  } else if (sm >= 120) {
    launch_sm120();
  }
  if (cap == 10) {
    launch_param();
  }
}

void refuse() {
  if (tensorrt_llm::common::getSMVersion() < 100 || tensorrt_llm::common::getSMVersion() >= 120) {
    throw std::runtime_error("SM10x only");
  }
}

struct Runner {
  Runner() : mSM(getSMVersion()) {}
  bool fused() const { return mSM >= 100 && mSM < 110; }
  void pick() { TLLM_CHECK_WITH_INFO(mSM == 90, "Hopper kernels"); }
  int mSM;
};
"""


def _rows(text=TEXT, dev=SM120, cmp_=SM100):
    closed, unknown = G.cpp_gates(text, dev, cmp_)
    return [(r["line"], r["kind"], r["condition"], r.get("function", "")) for r in closed], unknown, closed


def test_runtime_checks_closed_for_the_device():
    rows, unknown, closed = _rows()
    assert rows == [
        (7, "check", "major == 10 && (minor == 0 || minor == 3)", "CheckTarget"),
        (15, "check", "props.major >= 9 && props.major < 12", "Props"),
        (27, "if", "sm >= 100 && sm < 120", "run"),
        (38, "if", "tensorrt_llm::common::getSMVersion() < 100 || tensorrt_llm::common::getSMVersion() >= 120",
         "refuse"),
        (45, "return", "mSM >= 100 && mSM < 110", "Runner::fused"),
    ]  # fmt: skip
    by = {r["line"]: r for r in closed}
    assert by[7]["why"] == "false for 12.0: major is 12, minor is 0"
    assert by[7]["open_why"] == "true for 10.0: major is 10, minor is 0"
    assert by[27]["guards"] == "launch_sm100" and by[27]["why"] == "false for 12.0: sm is 120"
    # a refusal is a gate where it is true for the device: the device is thrown out
    assert by[38]["why"].startswith("true for 12.0: getSMVersion() is 120, and the branch refuses: throw")
    assert by[38]["open_why"] == "false for 10.0: getSMVersion() is 100"
    # the macro's bound is unknown, never closed; the parameter `cap` is not the device
    assert [(u["line"], u["condition"]) for u in unknown] == [(9, "major >= KERNEL_MIN_MAJOR")]
    assert "`KERNEL_MIN_MAJOR` is not known here" in unknown[0]["why"] and unknown[0]["state"] == "unknown"


def test_a_check_that_admits_neither_is_a_gate_against_another_part():
    rows, _, _ = _rows(cmp_=SM90)
    assert (46, "check", "mSM == 90", "Runner::pick") in rows  # TLLM_CHECK_WITH_INFO, the member read
    # against 9.0 the largest closed part of `mSM >= 100 && mSM < 110` is its upper bound
    assert [r[2] for r in rows if r[0] == 45] == ["mSM < 110"]


def test_what_does_not_bind_the_capability_is_not_read():
    text = 'void f(int major) {\n  TORCH_CHECK(major == 10, "x");\n  if (major < 12) { go(); }\n}\n'
    assert not cppgates.holds_words(text.encode())
    assert G.cpp_gates(text, SM120, SM100) == ([], [])
    # a file's own accessor that is not the capability is not taken for one
    own = (
        "int getSMVersion() { return 42; }\n"
        'void g() { int const sv = getSMVersion(); TORCH_CHECK(sv >= 100 && sv < 110, "x"); }\n'
    )
    closed, _ = G.cpp_gates(own, SM120, SM100)
    assert [r["condition"] for r in closed] == ["sv >= 100 && sv < 110"]  # the shared accessor's meaning
    own_sm = own.replace(
        "return 42;", "int a; cudaDeviceGetAttribute(&a, cudaDevAttrComputeCapabilityMajor, 0); return a;"
    )
    closed, _ = G.cpp_gates(own_sm, SM120, SM100)
    assert closed == []  # this file's getSMVersion is the major: 12 >= 100 is false on both
    # a branch that only logs goes on: true for the device is no refusal
    logs = 'void h() {\n  if (getSMVersion() != 100) {\n    TLLM_LOG_ERROR("not SM100");\n  }\n}\n'
    assert G.cpp_gates(logs, SM120, SM100) == ([], [])
    assert G.cpp_gates(logs.replace("TLLM_LOG_ERROR", "TLLM_THROW"), SM120, SM100)[0][0]["line"] == 2


def test_a_tree_scan_reads_a_file_with_no_cuda_arch(tmp_path):
    root = tmp_path / "fi"
    csrc = root / "flashinfer" / "data" / "csrc"
    csrc.mkdir(parents=True)
    (root / "flashinfer" / "__init__.py").write_text("")
    (csrc / "binding.cu").write_text(TEXT)
    (csrc / "plain.cu").write_text("void f() { if (n > 3) go(); }\n")
    res = G.scan("flashinfer", root, "package", "0.7.4", SM120, SM100, jobs=1, cache=False)
    assert [(g.file, g.line) for g in res.closed][:2] == [("csrc/binding.cu", 7), ("csrc/binding.cu", 15)]
    assert res.parsed == 1  # plain.cu names neither __CUDA_ARCH__ nor a capability source
