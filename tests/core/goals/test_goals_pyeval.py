"""The three-valued gate evaluator (patchkit/core/goals/pyeval.py), offline: tables of gates
with what they say for SM120, SM100 and SM90 (True, False, None for unknown), under the
shipped predicates of patchkit/base/engines.toml and the bindings of a module around them."""

from __future__ import annotations

import ast

import pytest

from patchkit.base.engines import ENGINES
from patchkit.core.goals.device import Device
from patchkit.core.goals.pyeval import (
    Env,
    admits,
    arch_admits,
    env_for,
    evaluate,
    find_scope,
    keyword_admits,
    list_admits,
    predicates,
    value,
)

SM120, SM100, SM90 = Device.parse("sm120"), Device.parse("sm100"), Device.parse("sm90")
T, F, N = True, False, None

# A module of the kind gates live in: module-level flags bound from the engine's checks.
PRELUDE = """\
import torch
from sglang.srt import utils
from sglang.srt.utils import get_device_sm, is_cuda, is_sm90_supported, is_sm100_supported, is_sm120_supported
from sglang.srt.runtime_context import get_platform

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()
_is_sm120_supported = _is_cuda and is_sm120_supported()
major, minor = torch.cuda.get_device_capability()
cc = torch.cuda.get_device_capability()
first = torch.cuda.get_device_capability()[0]
sm_version = get_device_sm()
arch = major * 10 + minor
twice = True
twice = False
if _is_cuda:
    maybe = True
try:
    import sgl_kernel
    tried = True
except ImportError:
    tried = False
count = 1
count += 1
"""

SGLANG_CASES = [
    # expression, sm120, sm100, sm90
    ("major >= 12", T, F, F),
    ("major >= 10", T, T, F),  # the known-bad widening (it admits SM110 and all after): just evaluated
    ("major == 10 or major == 12", T, T, F),
    ("major in (11, 12)", T, F, F),
    ("major not in (9, 10)", T, F, F),
    ("major in [9, 10]", F, T, T),
    ("major in {9, 10, 12}", T, T, T),
    ("(major, minor) >= (12, 0)", T, F, F),
    ("(major, minor) == (12, 0)", T, F, F),
    ("(major, minor) in [(12, 0), (12, 1)]", T, F, F),
    ("cc >= (10, 0)", T, T, F),
    ("cc[0] == 12", T, F, F),
    ("cc.major == 12 and cc.minor == 0", T, F, F),
    ("first >= 12", T, F, F),
    ("torch.cuda.get_device_capability()[0] >= 12", T, F, F),
    ("torch.cuda.get_device_capability() == (9, 0)", F, F, T),
    ("sm_version >= 120", T, F, F),
    ("sm_version // 10 == 12", T, F, F),
    ("arch // 10 in (10, 12)", T, T, F),
    ("arch % 10 == 0", T, T, T),
    ("9 <= major < 12", F, T, T),
    ("8 < major <= 12", T, T, T),
    ("-major < -11", T, F, F),
    ("get_device_sm() in (100, 103, 120)", T, T, F),
    ("is_sm100_supported()", F, T, F),
    ("is_sm120_supported()", T, F, F),
    ("utils.is_sm100_supported()", F, T, F),
    ("_is_sm90_supported or _is_sm100_supported", F, T, T),
    ("(_is_sm90_supported or _is_sm100_supported) or _is_sm120_supported", T, T, T),
    ("_is_sm90_supported or _is_sm100_supported or _is_sm120_supported", T, T, T),
    ("not _is_sm120_supported", F, T, T),
    ("_is_cuda and major >= 9", T, T, T),
    ("is_blackwell_supported()", T, T, F),
    ("is_sm120()", T, F, F),  # sglang 0.5.23: exactly 12.0
    ("is_hip()", F, F, F),
    ("get_platform().is_sm120", T, F, F),
    ("get_platform().is_sm90 or get_platform().is_sm100", F, T, T),
    ("get_platform().device_sm >= 100", T, T, F),
    ("major == 12 if _is_cuda else False", T, F, F),
    ("unknown_fn()", N, N, N),
    ("unknown_fn() or _is_sm120_supported", T, N, N),
    ("unknown_fn() and _is_sm120_supported", N, F, F),
    ("not unknown_fn()", N, N, N),
    ("None or True", T, T, T),
    ("None and False", F, F, F),
    ("None or False", N, N, N),
    ("twice", N, N, N),  # bound twice
    ("twice or major == 12", T, N, N),
    ("maybe", N, N, N),  # bound under an if
    ("tried", N, N, N),  # bound in a try
    ("count == 2", N, N, N),  # augmented
    ("undefined_name", N, N, N),
    ("major >= 12 and batch_size > 0", N, F, F),
    ("major is 12", N, N, N),
    ("get_global_server_args().enable_flashinfer_allreduce_fusion", N, N, N),
    ("major >= 12 and 'a' < 1", N, F, F),  # ordering a str and an int: unknown, not an error
    ("cc[5] == 1", N, N, N),
]


@pytest.fixture(scope="module")
def sg_env():
    module = ast.parse(PRELUDE)
    preds = predicates(ENGINES["sglang"].predicates)
    return lambda: env_for(module, None, preds)


@pytest.mark.parametrize("expr,sm120,sm100,sm90", SGLANG_CASES, ids=[c[0] for c in SGLANG_CASES])
def test_sglang_gates(sg_env, expr, sm120, sm100, sm90):
    node = ast.parse(expr, mode="eval").body
    got = tuple(evaluate(node, d, sg_env()) for d in (SM120, SM100, SM90))
    assert got == (sm120, sm100, sm90)


VLLM_CASES = [
    ("current_platform.is_device_capability(100)", F, T, F),
    ("current_platform.is_device_capability(120)", T, F, F),
    ("current_platform.is_device_capability((12, 0))", T, F, F),
    ("current_platform.has_device_capability(90)", T, T, T),
    ("current_platform.has_device_capability(100)", T, T, F),
    ("current_platform.has_device_capability((12, 0))", T, F, F),
    ("current_platform.is_device_capability_family(100)", F, T, F),
    ("current_platform.is_device_capability_family(120)", T, F, F),
    (
        "current_platform.is_device_capability_family(100) or current_platform.is_device_capability(90)",
        F,
        T,
        T,
    ),
    ("current_platform.get_device_capability().to_int() >= 100", T, T, F),
    ("current_platform.get_device_capability().major == 12", T, F, F),
    ("current_platform.is_cuda() and current_platform.is_device_capability(90)", F, F, T),
    ("current_platform.is_rocm()", F, F, F),
    ("current_platform.is_device_capability(capability)", N, N, N),  # an argument not known
]


@pytest.mark.parametrize("expr,sm120,sm100,sm90", VLLM_CASES, ids=[c[0] for c in VLLM_CASES])
def test_vllm_gates(expr, sm120, sm100, sm90):
    node = ast.parse(expr, mode="eval").body
    preds = predicates(ENGINES["vllm"].predicates)
    got = tuple(evaluate(node, d, env_for(None, None, preds)) for d in (SM120, SM100, SM90))
    assert got == (sm120, sm100, sm90)


FI_MODULE = """\
import torch
from flashinfer.utils import get_compute_capability, is_sm100a_supported

def gate(device):
    cc = get_compute_capability(device)
    major = torch.cuda.get_device_capability()[0]
    return {expr}
"""

FLASHINFER_CASES = [
    ("is_sm100a_supported(device)", F, T, F),
    ("is_sm90a_supported(device) or is_sm100a_supported(device)", F, T, T),
    ("is_sm120a_supported(device)", T, F, F),
    ("is_sm12x_supported(device)", T, F, F),
    ("cc[0] >= 12", T, F, F),
    ("cc >= (9, 0)", T, T, T),
    ("major in (10, 12)", T, T, F),
    ("get_compute_capability(device)[0] == 9", F, F, T),
]


@pytest.mark.parametrize("expr,sm120,sm100,sm90", FLASHINFER_CASES, ids=[c[0] for c in FLASHINFER_CASES])
def test_flashinfer_gates_in_a_function(expr, sm120, sm100, sm90):
    src = FI_MODULE.format(expr=expr)
    got = tuple(admits(expr, src, "gate", d, ENGINES["flashinfer"].predicates)[0] for d in (SM120, SM100, SM90))
    assert got == (sm120, sm100, sm90)


def test_sm121_and_the_exact_checks():
    sm121 = Device.parse("sm121")
    sg = ENGINES["sglang"].predicates
    fi = ENGINES["flashinfer"].predicates
    assert admits("is_sm120()", None, None, sm121, sg)[0] is False  # 0.5.23's: exactly 12.0
    assert admits("is_sm121()", None, None, sm121, sg)[0] is True
    assert admits("is_sm120_supported()", None, None, sm121, sg)[0] is True  # any 12.x
    assert admits("is_sm120a_supported(d)", None, None, sm121, fi)[0] is False
    assert admits("is_sm121a_supported(d)", None, None, sm121, fi)[0] is True
    assert admits("is_sm12x_supported(d)", None, None, sm121, fi)[0] is True


def test_the_cuda_a_check_needs():
    sg, fi = ENGINES["sglang"].predicates, ENGINES["flashinfer"].predicates
    assert admits("is_sm120_supported()", None, None, Device.parse("sm120", cuda="12.6"), sg)[0] is False
    assert admits("is_sm120_supported()", None, None, Device.parse("sm120", cuda="12.8"), sg)[0] is True
    assert admits("is_sm100f_supported(d)", None, None, Device.parse("sm100", cuda="12.8"), fi)[0] is False
    assert admits("is_sm100f_supported(d)", None, None, Device.parse("sm100", cuda="12.9"), fi)[0] is True
    assert admits("is_sm100f_supported(d)", None, None, Device.parse("sm100"), fi)[0] is True  # not said: met
    assert admits("is_sm120_supported()", None, None, Device(12, 0, platform="rocm"), sg)[0] is False


# -- scopes -----------------------------------------------------------------------------------

SCOPES = """\
import torch
level = 12
shadowed = 12
flag = torch.cuda.get_device_capability()[0] >= 12

def in_function():
    major, minor = torch.cuda.get_device_capability()
    return major >= 12

def from_module():
    return level == 12 and flag

def parameter(shadowed):
    return shadowed == 12

def local_shadow():
    shadowed = 9
    return shadowed == 12

def conditional(x):
    if x:
        major = 12
    return major == 12

def rebound():
    major = torch.cuda.get_device_capability()[0]
    major = 9
    return major == 12

def declares_global():
    global shadowed
    shadowed = 9
    return shadowed == 12

def outer():
    major = torch.cuda.get_device_capability()[0]
    def inner():
        return major == 12
    return inner

def starred():
    major, *rest = torch.cuda.get_device_capability()
    return major == 12

def in_loop():
    for major in (9, 12):
        pass
    return major == 12

def walrus():
    if (major := torch.cuda.get_device_capability()[0]) > 0:
        pass
    return major == 12

def itself():
    x = x and True
    return x

class Runner:
    level = 9

    def method(self):
        return level == 12
"""

SCOPE_CASES = [
    ("in_function", "major >= 12", T),
    ("from_module", "level == 12 and flag", T),
    ("parameter", "shadowed == 12", N),
    ("local_shadow", "shadowed == 12", F),
    ("conditional", "major == 12", N),
    ("rebound", "major == 12", N),
    ("declares_global", "shadowed == 12", N),  # the module's, now bound twice (there and here)
    ("outer.inner", "major == 12", T),
    ("starred", "major == 12", N),
    ("in_loop", "major == 12", N),
    ("walrus", "major == 12", N),
    ("itself", "x", N),
    ("Runner.method", "level == 12", T),  # the class's `level` is not seen from its method
    ("Runner", "level == 12", F),  # but is from the class body
    (None, "level == 12", T),
    (None, "level == 12 and shadowed == 12", N),  # declares_global binds the module's too
]


@pytest.mark.parametrize("scope,expr,want", SCOPE_CASES, ids=[f"{c[0]}: {c[1]}" for c in SCOPE_CASES])
def test_scopes(scope, expr, want):
    got, why = admits(expr, SCOPES, scope, SM120, ENGINES["sglang"].predicates)
    assert got is want, why


def test_find_scope():
    module = ast.parse(SCOPES + "if True:\n    def guarded():\n        pass\n")
    assert find_scope(module, "Runner.method").name == "method"
    assert find_scope(module, "guarded").name == "guarded"
    assert find_scope(module, "nothere") is None
    got, why = admits("x", SCOPES, "nothere", SM120, ())
    assert got is None and why == "no single nothere in the module"


# -- lists ------------------------------------------------------------------------------------

LIST_CASES = [
    ("supported_major_versions=[9, 10]", F, T, T),
    ("supported_major_versions=[9, 10, 12]", T, T, T),
    ("supported_major_versions=[12]", T, F, F),
    ("[10, 11, 12]", T, T, F),
    ("(90, 100)", F, T, T),  # SM numbers
    ("[(9, 0), (12, 0)]", T, F, T),
    ('["sm_90a", "sm_100a"]', F, T, T),
    ('["sm_90", "sm_90a", "sm_100a", "sm_100f"]', F, T, T),  # CuTe DSL's admissible_archs
    ('["sm_120a"]', T, F, F),
    ('["compute_90"]', T, T, T),
    ("[9, somewhere]", N, N, T),
    ("[somewhere, 12]", T, N, N),
    ('["not-an-arch", "sm_100a"]', N, T, N),
]


@pytest.mark.parametrize("src,sm120,sm100,sm90", LIST_CASES, ids=[c[0] for c in LIST_CASES])
def test_lists(src, sm120, sm100, sm90):
    got = tuple(admits(src, None, None, d, ())[0] for d in (SM120, SM100, SM90))
    assert got == (sm120, sm100, sm90)


def test_arch_admits():
    sm121, sm103 = Device.parse("sm121"), Device.parse("sm103")
    assert arch_admits("sm_120a", sm121) is False and arch_admits("sm_120f", sm121) is True
    assert arch_admits("sm_120", sm121) is True and arch_admits("sm_121a", SM120) is False
    assert arch_admits("sm_100f", sm103) is True and arch_admits("sm_100a", sm103) is False
    assert arch_admits("compute_120", SM100) is False and arch_admits("SM_90A", SM90) is True
    assert arch_admits("gfx942", SM90) is None


def test_keyword_admits_and_names_in_a_list():
    module = ast.parse("MAJORS = [9, 10, 12]\nflags = ctx.get_nvcc_flags_list(supported_major_versions=MAJORS)\n")
    call = module.body[1].value
    env = env_for(module, None, ())
    assert keyword_admits(call, "supported_major_versions", SM120, env) is True
    assert keyword_admits(call, "other", SM120, env) is None
    assert list_admits(ast.parse("[9, 10]", mode="eval").body, SM120) is False


# -- the explanation, and what is not Python ---------------------------------------------------


def test_explanations():
    sg = ENGINES["sglang"].predicates
    got = admits("major >= 12", "import torch\nmajor = torch.cuda.get_device_capability()[0]\n", None, SM120, sg)
    assert got == (
        True,
        "`major >= 12` is true for 12.0 (`major` = `torch.cuda.get_device_capability()[0]`: 12)",
    )
    got = admits("_is_sm90_supported or _is_sm100_supported", PRELUDE, None, SM120, sg)
    assert got == (
        False,
        "`_is_sm90_supported or _is_sm100_supported` is false for 12.0 (`_is_sm90_supported` = "
        "`_is_cuda and is_sm90_supported()`: false; "
        "`_is_sm100_supported` = `_is_cuda and is_sm100_supported()`: false)",
    )
    assert admits("unknown_fn() or major == 12", PRELUDE, None, SM100, sg) == (
        None,
        "`unknown_fn() or major == 12` is unknown for 10.0: `unknown_fn()` is no known check",
    )
    assert admits("twice", PRELUDE, None, SM100, sg) == (None, "`twice` is unknown for 10.0: `twice` is bound 2 times")
    assert admits("is_sm120_supported()", None, None, SM120, sg) == (
        True,
        "`is_sm120_supported()` is true for 12.0 (`is_sm120_supported()` means `major == 12` and CUDA >= 12.8: true)",
    )
    assert admits("supported_major_versions=[9, 10]", None, None, SM120, ())[1] == (
        "`supported_major_versions=[9, 10]` is false for 12.0"
    )


def test_what_is_not_python():
    assert admits("major >=", None, None, SM120, ()) == (None, "`major >=` is not a Python expression")
    assert admits("x", "def (", None, SM120, ())[0] is None
    # a multi-line gate as it stands in a file, indented
    src = """
        (
            _is_sm90_supported
            or _is_sm100_supported
        )"""
    assert admits(src, PRELUDE, None, SM100, ENGINES["sglang"].predicates)[0] is True


def test_value_of_a_capability():
    env = env_for(None, None, ENGINES["sglang"].predicates)
    v = value(ast.parse("torch.cuda.get_device_capability()", mode="eval").body, SM120, env)
    assert v == (12, 0) and v.to_int() == 120
    assert value(ast.parse("get_device_sm() // 10", mode="eval").body, SM120, env) == 12
    assert value(ast.parse("'a' + 'b'", mode="eval").body, SM120, Env()) is None


def test_a_self_referring_predicate_is_unknown():
    preds = predicates([("loop()", "loop()", ""), ("a()", "b()", ""), ("b()", "a() or major == 12", "")])
    env = env_for(None, None, preds)
    assert evaluate(ast.parse("loop()", mode="eval").body, SM120, env) is None
    assert evaluate(ast.parse("a()", mode="eval").body, SM120, env_for(None, None, preds)) is True
    assert evaluate(ast.parse("a()", mode="eval").body, SM100, env_for(None, None, preds)) is None


def test_every_shipped_predicate_evaluates():
    """Each entry of each engine's table, called with a known argument, gives a value for each
    device (no entry leans on a name its table lacks)."""
    for name, info in ENGINES.items():
        for pat, _, _ in info.predicates:
            call = pat.replace("(cap)", "(120)")
            for d in (SM120, SM100, SM90):
                env = env_for(None, None, info.predicates)
                got = value(ast.parse(call, mode="eval").body, d, env)
                assert got is not None, f"{name}: {pat} on {d}: {env.why}"
