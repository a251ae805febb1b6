"""dict-entry: a key of a dict literal added, set or removed, byte for byte back."""

import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check, state

SRC = """
MOE_RUNNERS = {
    "triton": TritonRunner,
    # SM100 only
    "flashinfer_trtllm": TrtllmRunner,
}
OTHER = {"triton": 1}
"""


def test_add_after_a_key_keeps_the_comment_with_its_entry():
    after = SRC.replace("    # SM100 only\n", '    "flashinfer_cutlass": CutlassRunner,\n    # SM100 only\n')
    check(
        "dict-entry",
        SRC,
        after,
        "",
        {"target": "MOE_RUNNERS"},
        {"key": '"flashinfer_cutlass"', "value": "CutlassRunner", "after": '"triton"'},
    )


def test_add_at_the_end_set_and_remove():
    after = SRC.replace("TrtllmRunner,\n}", 'TrtllmRunner,\n    "cutlass": CutlassRunner,\n}')
    check(
        "dict-entry", SRC, after, "", {"keys": ['"flashinfer_trtllm"']}, {"key": '"cutlass"', "value": "CutlassRunner"}
    )
    after = SRC.replace('"triton": 1', '"triton": 2')
    check(
        "dict-entry",
        SRC,
        after,
        "",
        {"target": "OTHER"},
        {"key": '"triton"', "action": "set", "expect": "1", "value": "2"},
    )
    src = 'OTHER = {\n    "a": 1,\n    "b": 2,\n    "c": 3,\n}\n'
    after = src.replace('    "b": 2,\n', "")
    check(
        "dict-entry",
        src,
        after,
        "",
        {"target": "OTHER"},
        {"key": '"b"', "action": "remove", "value": "2", "after": '"a"'},
    )


def test_ambiguous_missing_and_refusals():
    assert state("dict-entry", SRC, "", {"keys": ['"triton"']}, {"key": '"x"', "value": "1"}).state == "ambiguous"
    assert state("dict-entry", SRC, "", {"target": "NOPE"}, {"key": '"x"', "value": "1"}).state == "missing"
    loc = state("dict-entry", SRC, "", {"target": "OTHER"}, {"key": '"triton"', "value": "3"})
    assert loc.state == "missing" and "another value" in loc.reason
    with pytest.raises(OpParamError, match="target or keys"):
        KINDS["dict-entry"]({}, {"key": "1", "value": "2"})
    with pytest.raises(OpParamError, match="holds the key"):
        KINDS["dict-entry"]({"keys": ['"a"']}, {"key": '"a"', "value": "2", "action": "remove"})
