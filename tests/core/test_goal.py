"""Goals (patchkit/core/goal.py): an op that widens a device gate is for "the gate admits the
recipe's device", and where the code reaches that in other words the op is never `pending`
and apply never writes a duplicate.

Offline on a miniature tree, then on SGLang 0.5.9's real communicator.py with synthetic
refactors: an operand in other words (`torch.cuda.get_device_capability()[0] == 12`), the
gate rewritten (`is_blackwell_supported()`), decoys that do not admit SM120, and a scope with
two gates (no conclusion: a look-alike is never the site).  Upstream's own words, on a git
checkout whose tag holds them, read `upstream`.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import git, git_layout, mini_sglang

MODULE = """\
import torch
from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported, is_blackwell_supported

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()


def apply_fusion(batch_size):
    return (_is_sm90_supported or _is_sm100_supported) and batch_size < 128
"""

WIDEN = """
id = "widen"
summary = "admit SM120 in the fusion gate"
device = "sm120"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "or-operand"
engine = "sglang"
file = "sglang/srt/gate.py"
scope = "apply_fusion"
[ops.locator]
operands = ["_is_sm90_supported", "_is_sm100_supported"]
[ops.params]
operand = "torch.cuda.get_device_capability()[0] == 12"
"""

GATE = "(_is_sm90_supported or _is_sm100_supported)"


@pytest.fixture
def mini(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")  # no pristine release: who reached a goal is unknown
    recipes = tmp_path / "recipes"
    recipes.mkdir()

    def make(text: str, recipe: str = WIDEN):
        root = mini_sglang(tmp_path / "t", {"sglang/srt/gate.py": text})
        (recipes / "widen.toml").write_text(recipe)

        def cli(*args):
            return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")

        code, out, err = cli("status", "widen", "--json")
        return root, cli, json.loads(out)["recipes"][0]["ops"][0]

    return make


@pytest.mark.parametrize(
    "gate",
    [
        "(_is_sm90_supported or _is_sm100_supported or torch.cuda.get_device_capability()[0] >= 12)",
        "(_is_sm90_supported or _is_sm100_supported or torch.cuda.get_device_capability()[0] in (11, 12))",
        "(_is_sm90_supported or _is_sm100_supported or is_blackwell_supported())",
    ],
)
def test_an_operand_in_other_words_is_the_goal_reached_never_pending(mini, gate):
    """No pristine release offline: reached, but by whom cannot be told (`applied?`); apply
    writes nothing, and revert will not touch it."""
    root, cli, op = mini(MODULE.replace(GATE, gate))
    assert op["state"] == "applied?" and "already is true for 12.0" in op["message"], op
    path = root / "sglang/srt/gate.py"
    before = path.read_bytes()
    code, out, err = cli("apply", "widen")
    assert code == 0 and path.read_bytes() == before, (out, err)
    assert cli("revert", "widen")[0] == 1 and path.read_bytes() == before


@pytest.mark.parametrize(
    "gate",
    [
        "(_is_sm90_supported or _is_sm100_supported or torch.cuda.get_device_capability()[0] >= 13)",
        "(_is_sm90_supported or _is_sm100_supported or torch.cuda.get_device_capability()[0] == 11)",
        "(_is_sm90_supported or _is_sm100_supported or some_flag())",  # unknown never counts as true
    ],
)
def test_an_operand_that_does_not_admit_the_device_leaves_the_op_pending(mini, gate):
    root, cli, op = mini(MODULE.replace(GATE, gate))
    assert op["state"] == "pending", op
    assert cli("apply", "widen")[0] == 0
    assert "torch.cuda.get_device_capability()[0] == 12" in (root / "sglang/srt/gate.py").read_text()


def test_a_recipe_that_names_no_device_is_judged_by_its_text(mini):
    gate = "(_is_sm90_supported or _is_sm100_supported or is_blackwell_supported())"
    root, cli, op = mini(MODULE.replace(GATE, gate), WIDEN.replace('device = "sm120"\n', ""))
    assert op["state"] == "pending", op


def test_a_bad_device_is_one_line_naming_the_recipe(run_cli, tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "widen.toml").write_text(WIDEN.replace('device = "sm120"', 'device = "blackwell"'))
    code, out, err = run_cli("--recipes", str(tmp_path / "recipes"), "check")
    said = out + err
    assert code == 2 and "device: " in said and "blackwell" in said and "Traceback" not in said, said


# -- real: SGLang 0.5.9's communicator.py -------------------------------------------------------

COMM = "sglang/srt/layers/communicator.py"
REAL_GATE = "        (_is_sm90_supported or _is_sm100_supported)\n"


def _status(run_cli, recipes_dir, *targets) -> dict:
    code, out, err = run_cli("--recipes", str(recipes_dir), "status", "allreduce-fusion", *targets, "--json")
    ops = json.loads(out)["recipes"][0]["ops"]
    return {o["index"]: o for o in ops}


def _edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1
    path.unlink()  # the tree's files are hard links to the shared release
    path.write_text(text.replace(old, new))


@pytest.mark.real
@pytest.mark.parametrize(
    "words, state",
    [
        ("(_is_sm90_supported or _is_sm100_supported or torch.cuda.get_device_capability()[0] == 12)", "someone-else"),
        ("(_is_sm90_supported or is_blackwell_supported())", "someone-else"),  # the gate rewritten
        ("(_is_sm90_supported or _is_sm100_supported or torch.cuda.get_device_capability()[0] == 11)", "pending"),
        ("(_is_sm90_supported or is_sm100_supported())", "missing"),  # rewritten, still no SM120
    ],
)
def test_the_gate_in_other_words_on_sglang_0_5_9(tree, run_cli, recipes_dir, words, state):
    s, fi = tree("sglang", "0.5.9", links=True), tree("flashinfer", "0.6.3", links=True)
    path = s / COMM
    _edit(path, REAL_GATE, f"        {words}\n")
    if "is_blackwell_supported" in words:
        _edit(path, "    is_sm100_supported,\n", "    is_blackwell_supported,\n    is_sm100_supported,\n")
    t = ("-t", f"sglang={s}", "-t", f"flashinfer={fi}")
    ops = _status(run_cli, recipes_dir, *t)
    gate = next(o for o in ops.values() if o["kind"] == "or-operand" and o["file"] == COMM)
    assert gate["state"] == state, gate
    before = path.read_text()
    code, out, err = run_cli("--recipes", str(recipes_dir), "apply", "allreduce-fusion", *t)
    if state == "someone-else":
        assert code == 0, (out, err)
        after = path.read_text()
        assert words in after and "_is_sm120_supported)" not in after  # no second SM120 operand
    elif state == "missing":
        assert code == 1 and path.read_text() == before


@pytest.mark.real
def test_two_gates_in_the_scope_conclude_nothing(tree, run_cli, recipes_dir):
    """The gate rewritten, and a second device gate beside it: which is the site cannot be
    told, so nothing is concluded (missing), even though one of them admits SM120."""
    s, fi = tree("sglang", "0.5.9", links=True), tree("flashinfer", "0.6.3", links=True)
    path = s / COMM
    _edit(
        path,
        REAL_GATE,
        "        (_is_sm90_supported or is_blackwell_supported())\n        and not is_sm100_supported()\n",
    )
    _edit(path, "    is_sm100_supported,\n", "    is_blackwell_supported,\n    is_sm100_supported,\n")
    ops = _status(run_cli, recipes_dir, "-t", f"sglang={s}", "-t", f"flashinfer={fi}")
    gate = next(o for o in ops.values() if o["kind"] == "or-operand" and o["file"] == COMM)
    assert gate["state"] == "missing", gate


@pytest.mark.real
def test_upstreams_own_words_read_upstream_on_a_checkout(release_dir, tmp_path, run_cli, recipes_dir):
    """A checkout whose tagged commit admits SM120 in its own words: the recipe's gate op is
    upstream's (retire it), with the evaluation shown."""
    repo = git_layout("sglang", release_dir("sglang", "0.5.9"), tmp_path / "sglang")
    path = repo / "python" / COMM
    words = "(_is_sm90_supported or _is_sm100_supported or torch.cuda.get_device_capability()[0] == 12)"
    text = path.read_text()
    path.unlink()
    path.write_text(text.replace(REAL_GATE, f"        {words}\n"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.5.9")
    git(repo, "tag", "v0.5.9")
    fi = tmp_path / "fi"
    from tests.conftest import copy_linked

    copy_linked(release_dir("flashinfer", "0.6.3"), fi)
    ops = _status(run_cli, recipes_dir, "-t", f"sglang={repo}", "-t", f"flashinfer={fi}")
    gate = next(o for o in ops.values() if o["kind"] == "or-operand" and o["file"] == COMM)
    assert gate["state"] == "upstream", gate
    assert "in upstream's own words" in gate["message"] and "is true for 12.0" in gate["message"], gate
