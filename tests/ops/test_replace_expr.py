import pytest

from patchkit.ops import KINDS, OpParamError
from tests.ops.golden import check, state


def test_replace_gate_expression_in_scope_only():
    before = "def f(major):\n    return major == 10\n\n\ndef g(major):\n    return major == 10\n"
    after = "def f(major):\n    return major in (10, 12)\n\n\ndef g(major):\n    return major == 10\n"
    check("replace-expr", before, after, "f", {"match": "major == 10"}, {"with": "major in (10, 12)"})


def test_count_mismatch_is_ambiguous():
    assert (
        state("replace-expr", "x = a + 1\ny = a + 1\n", "", {"match": "a + 1"}, {"with": "a + 2"}).state == "ambiguous"
    )


def test_replacement_containing_match_is_rejected():
    with pytest.raises(OpParamError):
        KINDS["replace-expr"]({"match": "a"}, {"with": "a or b"})
