"""C/C++/CUDA goals one call level down, and check statements as gates (goal.cpp_in_scope,
cppeval.gates/callees).  FlashInfer 0.6.3's fused-MoE launchers each checked
``TVM_FFI_ICHECK_EQ(major, 10)``; 0.6.8 removed the FP4 launcher's check, and the launcher now
calls ``FusedMoeLauncher::init_common``, whose ``TVM_FFI_ICHECK(major == 10 || major == 12)``
admits SM 12.x.  A hunk that widened the launcher's own check reads `upstream` there: the
function the edit was in holds no device gate now, and the one function of the same file it
calls that holds device gates holds one, which admits the device.

Never counted: a gate in a function the launcher does not call, a gate two levels down, two
callees with gates, a callee's gate that does not admit the device or whose answer is unknown,
a launcher that still holds a gate of its own that refuses the device, or a check of the
capability whose answer is unknown.

Offline, on a miniature sglang tree with hand-made releases in the cache: 0.5.8 the release
the recipe was written for, 0.5.9 the target's pristine release.
"""

from __future__ import annotations

import pytest

from patchkit.core.goals import cppeval
from patchkit.core.goals.device import Device

pytest.importorskip("tree_sitter_cpp")

KERNEL = "sglang/srt/moe_launcher.cu"

HOME = """\
#include <tuple>

class Launcher {
 public:
  void init_common(int dev) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    TVM_FFI_ICHECK_EQ(major, 10) << "MoE kernel requires 10.x architecture";
    this->version = std::make_tuple(major, minor);
  }
  std::tuple<int, int> version;
};

class Fp4Launcher : public Launcher {
 public:
  void init(int dev) {
    static const std::tuple<int, int> device_props = [dev] {
      int major, minor;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
      return std::make_tuple(major, minor);
    }();
    TVM_FFI_ICHECK_EQ(std::get<0>(device_props), 10)
        << "This kernel requires 10.x architecture. Current device has SM "
        << std::get<0>(device_props) << std::get<1>(device_props);
    Launcher::init_common(dev);
  }
};
"""

RECIPE = """
id = "moe-launcher"
summary = "admit SM12x in the FP4 launcher"
device = "sm120"
[engines]
sglang = ">=0.5.8"
[[ops]]
kind = "text-hunk"
engine = "sglang"
file = "sglang/srt/moe_launcher.cu"
[ops.params]
hunk = '''
-    TVM_FFI_ICHECK_EQ(std::get<0>(device_props), 10)
-        << "This kernel requires 10.x architecture. Current device has SM "
+    TVM_FFI_ICHECK(std::get<0>(device_props) == 10 || std::get<0>(device_props) == 12)
+        << "This kernel requires 10.x or 12.x architecture. Current device has SM "
         << std::get<0>(device_props) << std::get<1>(device_props);
'''
"""

OWN_CHECK = """
    TVM_FFI_ICHECK_EQ(std::get<0>(device_props), 10)
        << "This kernel requires 10.x architecture. Current device has SM "
        << std::get<0>(device_props) << std::get<1>(device_props);
"""
HOME_COMMON = '    TVM_FFI_ICHECK_EQ(major, 10) << "MoE kernel requires 10.x architecture";\n'


def refactor(common: str = 'TVM_FFI_ICHECK(major == 10 || major == 12) << "SM 10.x or SM 12.x";', own: str = "") -> str:
    """0.6.8's refactor in miniature: the launcher's own check gone (or ``own`` in its place),
    init_common's check as ``common``."""
    return HOME.replace(OWN_CHECK, "\n" + own).replace(HOME_COMMON, f"    {common}\n")


@pytest.fixture
def judge(one_op_judge):
    return one_op_judge(KERNEL, "moe-launcher", RECIPE, home=HOME)


def test_the_callees_check_admits_the_device_upstream(judge):
    text = refactor()
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "TVM_FFI_ICHECK(major == 10" in s)
    assert ev["rule"] == 7 and ev["goal_at"] == f"{KERNEL}:{line}", ev
    assert "`Fp4Launcher::init` holds no device gate now" in ev["goal_eval"], ev
    assert "calls `Launcher::init_common`" in ev["goal_eval"] and "one call level down" in ev["goal_eval"], ev
    assert "`major == 10 || major == 12` is true for 12.0" in ev["goal_eval"], ev


def test_someone_elses_callee_check_is_left_by_apply_and_revert(judge):
    text = refactor()
    root, cli, op = judge(text, pristine=refactor('TVM_FFI_ICHECK_EQ(major, 10) << "10.x";'))
    assert op["state"] == "someone-else" and op["evidence"]["rule"] == 8, op
    path = root / KERNEL
    code, out, err = cli("apply", "moe-launcher")
    assert code == 0 and path.read_text() == text, (out, err)
    code, out, err = cli("revert", "moe-launcher")
    assert path.read_text() == text, (code, out, err)


UNRELATED = """
void routing_check(int dev) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  TVM_FFI_ICHECK(major >= 10) << "routing";
}
"""

TWO_LEVELS = """
void arch_check(int dev) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  TVM_FFI_ICHECK(major >= 10) << "SM10+";
}
void prepare(int dev) { arch_check(dev); }
"""


@pytest.mark.parametrize(
    "target",
    [
        # the helper's check still refuses SM 12.x
        refactor('TVM_FFI_ICHECK(major == 10 || major == 11) << "SM 10.x or 11.x";'),
        # the helper's check is a call patchkit does not model: unknown, never true
        refactor('TVM_FFI_ICHECK(is_blackwell(major)) << "Blackwell";'),
        # an admitting check in a function the launcher does not call
        refactor("// no check").replace("class Fp4Launcher", UNRELATED + "\nclass Fp4Launcher"),
        # an admitting check two call levels down
        refactor("prepare(dev);").replace("#include <tuple>\n", "#include <tuple>\n" + TWO_LEVELS),
        # two callees with device gates: which one is the site's cannot be told
        refactor()
        .replace("    Launcher::init_common(dev);\n", "    Launcher::init_common(dev);\n    routing_check(dev);\n")
        .replace("class Fp4Launcher", UNRELATED + "\nclass Fp4Launcher"),
        # the launcher keeps a gate of its own that refuses the device
        refactor(own="    if (std::get<0>(device_props) == 9) return;\n"),
        # the launcher keeps a check of the capability patchkit cannot evaluate: it may refuse
        refactor(own="    TVM_FFI_ICHECK(is_sm100_family(std::get<0>(device_props)));\n"),
    ],
    ids=[
        "refuses",
        "unknown",
        "unrelated-function",
        "two-levels-down",
        "two-callees",
        "own-gate-refuses",
        "own-unknown",
    ],
)
def test_what_is_not_shown_to_admit_the_device_one_level_down_stays_missing(judge, target):
    root, cli, op = judge(target, pristine=target)
    assert op["state"] == "missing", op
    assert not op["evidence"]["goal"], op


def test_the_launchers_own_check_widened_in_other_words_reads_upstream(judge):
    text = HOME.replace(
        "TVM_FFI_ICHECK_EQ(std::get<0>(device_props), 10)", "TVM_FFI_ICHECK_GE(std::get<0>(device_props), 10)"
    )
    root, cli, op = judge(text, pristine=text)
    assert op["state"] == "upstream", op
    assert "now reads `TVM_FFI_ICHECK_GE(std::get<0>(device_props), 10)`" in op["evidence"]["goal_eval"], op


def test_the_pending_release_is_pending_and_apply_widens_the_check(judge):
    root, cli, op = judge(HOME, pristine=HOME)
    assert op["state"] == "pending", op
    code, out, err = cli("apply", "moe-launcher")
    assert code == 0 and "std::get<0>(device_props) == 12" in (root / KERNEL).read_text(), (out, err)


# -- cppeval, on its own -----------------------------------------------------------------------

SM120 = Device.parse("sm120")
PROBES = tuple(Device.parse(d) for d in ("sm80", "sm90", "sm100", "sm120"))


@pytest.mark.parametrize(
    "stmt,shown,answer",
    [
        ('TVM_FFI_ICHECK_EQ(major, 10) << "x";', "TVM_FFI_ICHECK_EQ(major, 10)", False),
        ("TVM_FFI_ICHECK_GE(major, 10);", "TVM_FFI_ICHECK_GE(major, 10)", True),
        (
            'TORCH_CHECK(major == 12 || major == 10, "sm", major);',
            'TORCH_CHECK(major == 12 || major == 10, "sm", major)',
            True,
        ),
        ("CHECK_LT(major, 12);", "CHECK_LT(major, 12)", False),
        ("assert(major >= 9);", "assert(major >= 9)", True),
    ],
)
def test_check_statements_are_gates(stmt, shown, answer):
    src = (
        "void f(int dev) {\n  int major;\n"
        "  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);\n"
        f"  {stmt}\n}}\n"
    )
    (g,) = cppeval.gates(src, "f", SM120, PROBES)
    assert (g.line, g.shown, g.answer) == (4, shown, answer)


def test_a_check_of_no_device_quantity_is_no_gate():
    src = "void f(int n) {\n  TVM_FFI_ICHECK_EQ(n, 10);\n  LOG_CHECKPOINT(n);\n}\n"
    undecided: list = []
    assert cppeval.gates(src, "f", SM120, PROBES, undecided) == [] and undecided == []


def test_a_check_of_the_capability_it_cannot_evaluate_is_undecided():
    src = (
        "void f(int dev, int n) {\n  int major;\n"
        "  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);\n"
        "  TVM_FFI_ICHECK(is_blackwell(major)) << major;\n  TVM_FFI_ICHECK(n > 0) << major;\n}\n"
    )
    undecided: list = []
    assert cppeval.gates(src, "f", SM120, PROBES, undecided) == []
    assert undecided == [(4, "TVM_FFI_ICHECK(is_blackwell(major))")]  # the message's `major` is no condition


def test_a_tuple_of_the_capability_is_read_with_std_get():
    assert cppeval.evaluate_cpp("std::get<0>(props) == 12", SM120, {"props": ("major", "minor")})[0] is True
    assert cppeval.evaluate_cpp("std::get<1>(props) == 0", SM120, {"props": ("major", "minor")})[0] is True
    assert cppeval.evaluate_cpp("std::get<2>(props) == 0", SM120, {"props": ("major", "minor")})[0] is None
    assert cppeval.evaluate_cpp("std::get<0>(other) == 12", SM120, {"props": ("major", "minor")})[0] is None


def test_methods_are_named_by_their_class_and_callees_resolve_in_the_file():
    assert cppeval.scope_at(HOME, HOME.splitlines().index("  void init(int dev) {") + 2) == "Fp4Launcher::init"
    assert cppeval.callees(HOME, "Fp4Launcher::init") == ["Launcher::init_common"]
    src = HOME.replace(
        "    Launcher::init_common(dev);\n", "    init_common(dev);\n    this->init_common(dev);\n    helper();\n"
    )
    assert cppeval.callees(src, "Fp4Launcher::init") == ["Launcher::init_common"]  # a base's; helper() not defined here
    free = src + "void helper() {}\n"
    assert cppeval.callees(free, "Fp4Launcher::init") == ["Launcher::init_common", "helper"]
    twice = free + "void helper(int) {}\n"  # an overload: not one definition
    assert cppeval.callees(twice, "Fp4Launcher::init") == ["Launcher::init_common"]
