"""wrap-stmts: golden before/after (with the round trip) for if, with and try, at any depth,
told apart by context; the refusals; and the issue's case on a tree: the same edit written as
a delete-stmt and a replace-stmt is refused by the read-back check, as one wrap-stmts op it
applies, reads applied and reverts byte for byte."""

import json

import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.conftest import mini_sglang
from tests.core.ops.golden import check, state

SRC = """
class Runner:
    def init(self):
        self.load()
        # warm the autotuner
        self.tune()
        self.check()
        self.ready = True
"""


def test_wrap_two_statements_in_an_if():
    after = SRC.replace(
        "        # warm the autotuner\n        self.tune()\n        self.check()\n",
        "        # warm the autotuner\n        if not _is_sm120:\n            self.tune()\n            self.check()\n",
    )
    check(
        "wrap-stmts", SRC, after, "Runner.init", {"match": "self.tune()\nself.check()"}, {"header": "if not _is_sm120:"}
    )


def test_wrap_in_a_try_with_its_footer():
    after = SRC.replace(
        "        self.tune()\n        self.check()\n",
        "        try:\n            self.tune()\n            self.check()\n"
        "        except RuntimeError:\n            pass\n",
    )
    check(
        "wrap-stmts",
        SRC,
        after,
        "Runner.init",
        {"match": "self.tune()\nself.check()"},
        {"header": "try:", "footer": "except RuntimeError:\n    pass"},
    )


def test_wrap_one_statement_in_a_with():
    after = SRC.replace("        self.load()\n", "        with torch.no_grad():\n            self.load()\n")
    check("wrap-stmts", SRC, after, "Runner.init", {"match": "self.load()"}, {"header": "with torch.no_grad():"})


def test_the_run_must_stand_together_and_once():
    assert (
        state("wrap-stmts", SRC, "Runner.init", {"match": "self.load()\nself.check()"}, {"header": "if x:"}).state
        == "missing"
    )
    twice = SRC + "        self.tune()\n        self.check()\n"
    got = state("wrap-stmts", twice, "Runner.init", {"match": "self.tune()\nself.check()"}, {"header": "if x:"})
    assert got.state == "ambiguous"


@pytest.mark.parametrize(
    "params, why",
    [
        ({"header": "if x"}, "does not end with"),
        ({"header": "try:"}, "do not make a statement"),
        ({"header": "x = 1:"}, "do not make a statement"),
    ],
)
def test_refusals(params, why):
    with pytest.raises(OpParamError, match=why):
        KINDS["wrap-stmts"]({"match": "a()"}, params)


MODULE = """\
_is_sm120 = False


def init(self):
    self.load()
    self.tune()
    self.check()
    return self
"""

TWO_OPS = """
id = "guard"
summary = "skip the autotune on SM120"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "delete-stmt"
engine = "sglang"
file = "sglang/srt/runner.py"
scope = "init"
[ops.locator]
match = "self.tune()"
after = "self.load()"
[[ops]]
kind = "replace-stmt"
engine = "sglang"
file = "sglang/srt/runner.py"
scope = "init"
[ops.locator]
match = "self.check()"
[ops.params]
with = "if not _is_sm120:\\n    self.tune()\\n    self.check()"
"""

ONE_OP = """
id = "guard"
summary = "skip the autotune on SM120"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "wrap-stmts"
engine = "sglang"
file = "sglang/srt/runner.py"
scope = "init"
[ops.locator]
match = "self.tune()\\nself.check()"
[ops.params]
header = "if not _is_sm120:"
"""


@pytest.mark.parametrize("recipe, ok", [(TWO_OPS, False), (ONE_OP, True)], ids=["two-ops", "wrap-stmts"])
def test_a_wrap_written_as_two_ops_is_refused_as_one_it_reads_back(tmp_path, run_cli, monkeypatch, recipe, ok):
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    root = mini_sglang(tmp_path / "t", {"sglang/srt/runner.py": MODULE})
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "guard.toml").write_text(recipe)
    path = root / "sglang/srt/runner.py"

    def cli(*a):
        return run_cli("--recipes", str(tmp_path / "r"), *a, "-t", f"sglang={root}")

    code, out, err = cli("apply", "guard")
    if not ok:  # after it, the statement the delete-stmt took out stands again: not readable
        assert code == 1 and "refused by the read-back check" in err, (out, err)
        assert path.read_text() == MODULE
        return
    assert code == 0, (out, err)
    assert "    if not _is_sm120:\n        self.tune()\n        self.check()\n" in path.read_text()
    code, out, err = cli("status", "guard", "--json")
    assert code == 0 and json.loads(out)["recipes"][0]["state"] == "applied", out
    assert cli("revert", "guard")[0] == 0 and path.read_text() == MODULE


REAL = """
id = "guard-flags"
summary = "the SM flags of SGLang 0.5.9's communicator, guarded"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "wrap-stmts"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
[ops.locator]
match = '''
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()'''
[ops.params]
header = "try:"
footer = "except RuntimeError:\\n    _is_sm90_supported = _is_sm100_supported = False"
"""


@pytest.mark.real
def test_wrap_stmts_on_a_real_release_applies_reads_applied_and_reverts(tree, run_cli, tmp_path):
    """On SGLang 0.5.9's real communicator.py: two module flags put inside a try.  The
    read-back check passes, status reads applied, revert gives back the release's bytes."""
    root = tree("sglang", "0.5.9", links=True)
    path = root / "sglang/srt/layers/communicator.py"
    before = path.read_bytes()
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "guard-flags.toml").write_text(REAL)

    def cli(*a):
        return run_cli("--recipes", str(tmp_path / "r"), *a, "-t", f"sglang={root}")

    code, out, err = cli("apply", "guard-flags")
    assert code == 0, (out, err)
    assert "try:\n    _is_sm90_supported = _is_cuda and is_sm90_supported()\n" in path.read_text()
    code, out, err = cli("status", "guard-flags", "--json")
    assert code == 0 and json.loads(out)["recipes"][0]["state"] == "applied", out
    assert cli("revert", "guard-flags")[0] == 0 and path.read_bytes() == before
