"""The ``predicates`` tables of engine definitions (patchkit/base/engines.py): what the
shipped ones say, that a user's engine may carry its own, and strict errors for a bad entry."""

from __future__ import annotations

import pytest

from patchkit.base.engines import ENGINES, EngineError, _from_row, parse

ENGINE = """\
[tinyeng]
dist = "tiny-eng"
package = "tiny"
reference = "git"
git_marker = "src/tiny"
[tinyeng.layouts]
git = [["tiny/", "src/tiny/"]]
package = [["tiny/", "tiny/"]]
[tinyeng.predicates]
"tiny.is_new(cap)" = "capability >= cap"
"is_big()" = { means = "major >= 10", cuda = "12.8" }
"""


def test_a_user_engine_carries_its_predicates():
    got = parse(ENGINE, "tiny.toml")["tinyeng"].predicates
    assert got == (("tiny.is_new(cap)", "capability >= cap", ""), ("is_big()", "major >= 10", "12.8"))
    row = list(parse(ENGINE, "tiny.toml")["tinyeng"])
    assert _from_row(row).predicates == got  # and back from patchkit's cache


def test_the_shipped_tables():
    sg = dict((p, (m, c)) for p, m, c in ENGINES["sglang"].predicates)
    assert sg["is_sm120_supported()"] == ("major == 12", "12.8")
    assert sg["get_platform().is_sm120"] == ("is_sm120_supported()", "")
    fi = dict((p, (m, c)) for p, m, c in ENGINES["flashinfer"].predicates)
    assert fi["is_sm120a_supported(device)"] == ("capability == (12, 0)", "12.8")
    vl = dict((p, (m, c)) for p, m, c in ENGINES["vllm"].predicates)
    assert vl["is_device_capability_family(cap)"] == ("major == cap[0]", "")


@pytest.mark.parametrize(
    "entry,message",
    [
        ('"x()" = 3', "'x()': a predicate is an expression or a table of means, cuda"),
        ('"x()" = { means = "major == 1", bogus = 1 }', "a predicate is an expression or a table"),
        ('"x()" = { cuda = "12.8" }', "a predicate is an expression or a table"),
        ('"x()" = { means = "major == 1", cuda = "12" }', 'cuda a version "X.Y"'),
        ('"x(" = "major == 1"', "'x(': not a Python expression"),
        ('"1 + 2" = "major == 1"', "a pattern is a name, attribute or call"),
        ('"x(3)" = "major == 1"', "a pattern's call takes parameter names only"),
        ('"x(a=b)" = "major == 1"', "a pattern's call takes parameter names only"),
        ('"x()" = "major =="', "its meaning 'major ==' is not a Python expression"),
        ('"x(cap)" = "major == cap and gpu"', "its meaning names gpu: not the device"),
    ],
)
def test_a_bad_predicate_is_an_error_naming_the_table(entry, message):
    text = ENGINE.replace('"is_big()" = { means = "major >= 10", cuda = "12.8" }', entry)
    with pytest.raises(EngineError) as e:
        parse(text, "tiny.toml")
    assert str(e.value).startswith("tiny.toml:9: [tinyeng] predicates: ") and message in str(e.value), str(e.value)


def test_predicates_must_be_a_table():
    text = ENGINE.split("[tinyeng.predicates]")[0].replace(
        'git_marker = "src/tiny"', 'git_marker = "src/tiny"\npredicates = 1'
    )
    with pytest.raises(EngineError, match="predicates must be a table"):
        parse(text, "tiny.toml")
