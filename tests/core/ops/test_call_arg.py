"""call-arg: a keyword or positional argument added, set or removed, byte for byte back."""

import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check, state

SRC = """
def gen_trtllm_comm_module():
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(
        supported_major_versions=[9, 10],
    )
    return gen_jit_spec("trtllm_comm", sources, extra_cuda_cflags=nvcc_flags)
"""


def test_add_keyword_to_a_multiline_call():
    after = SRC.replace("[9, 10],\n", "[9, 10],\n        allow_fallback=True,\n")
    check(
        "call-arg",
        SRC,
        after,
        "gen_trtllm_comm_module",
        {"call": "current_compilation_context.get_nvcc_flags_list"},
        {"keyword": "allow_fallback", "value": "True"},
    )


def test_set_and_remove_a_keyword_on_one_line():
    after = SRC.replace("extra_cuda_cflags=nvcc_flags", "extra_cuda_cflags=nvcc_flags + ['-lineinfo']")
    check(
        "call-arg",
        SRC,
        after,
        "gen_trtllm_comm_module",
        {"call": "gen_jit_spec"},
        {
            "keyword": "extra_cuda_cflags",
            "action": "set",
            "expect": "nvcc_flags",
            "value": "nvcc_flags + ['-lineinfo']",
        },
    )
    after = SRC.replace(", extra_cuda_cflags=nvcc_flags", "")
    check(
        "call-arg",
        SRC,
        after,
        "gen_trtllm_comm_module",
        {"call": "gen_jit_spec"},
        {"keyword": "extra_cuda_cflags", "action": "remove", "value": "nvcc_flags"},
    )


def test_positional_argument_added_and_removed():
    after = SRC.replace('gen_jit_spec("trtllm_comm", sources,', 'gen_jit_spec("trtllm_comm", sources, extra,')
    check(
        "call-arg",
        SRC,
        after,
        "gen_trtllm_comm_module",
        {"call": "gen_jit_spec", "arg": '"trtllm_comm"'},
        {"index": 2, "value": "extra"},
    )
    after = SRC.replace('gen_jit_spec("trtllm_comm", sources,', 'gen_jit_spec("trtllm_comm",')
    check(
        "call-arg",
        SRC,
        after,
        "gen_trtllm_comm_module",
        {"call": "gen_jit_spec"},
        {"index": 1, "action": "remove", "value": "sources"},
    )


def test_states_that_are_not_success():
    # another value than upstream's: neither pending nor done
    loc = state(
        "call-arg",
        SRC,
        "gen_trtllm_comm_module",
        {"call": "gen_jit_spec"},
        {"keyword": "extra_cuda_cflags", "action": "remove", "value": "other"},
    )
    assert loc.state == "missing" and "another value" in loc.reason
    twice = SRC + "\ndef g():\n    pass\n" + "x = gen_jit_spec(1)\ny = gen_jit_spec(2)\n"
    assert state("call-arg", twice, "", {"call": "gen_jit_spec"}, {"keyword": "k", "value": "1"}).state == "ambiguous"
    assert state("call-arg", SRC, "", {"call": "nothing"}, {"keyword": "k", "value": "1"}).state == "missing"
    with pytest.raises(OpParamError, match="exactly one of keyword, index"):
        KINDS["call-arg"]({"call": "f"}, {"value": "1"})
    with pytest.raises(OpParamError, match="goes with action = 'set'"):
        KINDS["call-arg"]({"call": "f"}, {"keyword": "k", "value": "1", "action": "set"})
