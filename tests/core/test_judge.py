"""The judge trusts a view only after checking it: an op kind that under-declares the words it
reads (``Op.reads``) cannot make an ambiguous site read as pending or done, and a bug in an
op is an internal error naming the recipe and the op, never a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.core.ops import KINDS, Reads
from patchkit.core.ops.list_element import ListElement
from tests.conftest import gate_recipe, mini_sglang

# Two lists hold "a" and "b": a list-element op looking for them has two candidates.
MODULE = '''"""Stand-in engine module."""

import os

PRIMARY = ["a", "b"]  # special


def helper():
    return os.sep


SECONDARY = ["a", "b"]
'''

RECIPE = """
id = "{id}"
summary = 'add "c" to the list holding "a" and "b"'
[engines]
sglang = ">=0"
[[ops]]
kind = "{kind}"
engine = "sglang"
file = "sglang/srt/lists.py"
[ops.locator]
contains = ['"a"', '"b"']
[ops.params]
element = '"c"'
"""


class UnderDeclared(ListElement):
    """Declares that it reads only statements holding `special`, a word that only the first
    candidate's line has: a view then hides the second candidate."""

    def __init__(self, locator, params):
        super().__init__(locator, params)
        self.reads = Reads(patterns=(("special",),), file_words=self.reads.file_words, sites=self.reads.sites)


class Crashing(ListElement):
    def locate(self, scope):
        raise TypeError("a bug in this op")


@pytest.fixture
def mini(tmp_path, monkeypatch):
    root = mini_sglang(tmp_path / "site", {"sglang/srt/lists.py": MODULE})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    monkeypatch.setitem(KINDS, "under-declared", UnderDeclared)
    monkeypatch.setitem(KINDS, "crashing", Crashing)
    for rid, kind in (("narrow", "under-declared"), ("honest", "list-element"), ("buggy", "crashing")):
        (recipes / f"{rid}.toml").write_text(RECIPE.format(id=rid, kind=kind))
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))  # no confirmation from another run
    return root, recipes


def cli(run_cli, mini, *args):
    root, recipes = mini
    return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")


def test_the_under_declared_view_alone_would_say_pending(mini):
    """The premise: the view built from the narrow declaration really hides the second
    candidate, so only the judge's check stands between it and a wrong `pending`."""
    from patchkit.core import view

    root, _ = mini
    text = (root / "sglang/srt/lists.py").read_text()
    op = UnderDeclared({"contains": ['"a"', '"b"']}, {"element": '"c"'})
    v = view.build(text, {"": view.patterns(op)})
    assert v is not None and "SECONDARY" not in v.module.code and "PRIMARY" in v.module.code
    assert op.locate(v.module).state == "pending"


@pytest.mark.parametrize("state_of_first", ["pristine", "edited"])
def test_an_under_declaring_op_cannot_make_an_ambiguous_site_read_pending_or_done(mini, run_cli, state_of_first):
    root, _ = mini
    path = root / "sglang/srt/lists.py"
    if state_of_first == "edited":  # the view's only candidate already holds the edit: it would say done
        path.write_text(MODULE.replace('PRIMARY = ["a", "b"]', 'PRIMARY = ["a", "b", "c"]'))
    before = path.read_bytes()
    code, out, err = cli(run_cli, mini, "status", "narrow", "--json")
    (r,) = json.loads(out)["recipes"]
    assert code == 1 and r["state"] == "ambiguous", r
    code, out, err = cli(run_cli, mini, "apply", "narrow")
    assert code == 1 and "ambiguous" in err, err
    assert path.read_bytes() == before


def test_the_honest_kind_agrees(mini, run_cli):
    code, out, _ = cli(run_cli, mini, "status", "honest", "--json")
    assert code == 1 and json.loads(out)["recipes"][0]["state"] == "ambiguous"


@pytest.mark.parametrize("command", ["status", "apply"])
def test_a_bug_in_an_op_is_exit_3_naming_the_recipe_and_the_op(mini, run_cli, command):
    root, _ = mini
    before = (root / "sglang/srt/lists.py").read_bytes()
    code, out, err = cli(run_cli, mini, command, "buggy")
    assert code == 3, (out, err)
    assert "internal error: buggy > op #1 (crashing): TypeError: a bug in this op" in err, err
    assert (root / "sglang/srt/lists.py").read_bytes() == before
    assert not Path(root / ".patchkit").exists()


# A gate renamed and moved to another file: its words also stand at module level (the flags
# it reads), so the module scope holds the very site its function holds.
GATE_OLD = """_is_a = True
_is_b = False


def helper():
    return 1
"""
GATE_NEW = """_is_a = True
_is_b = False


def renamed_gate(n):
    return (_is_a or _is_b) and n > 0
"""
GATE_RECIPE = gate_recipe(scope="old_gate")


def test_one_site_is_one_candidate_when_relocating(tmp_path, run_cli):
    """The function holding the chain and the module holding the function are one place:
    one candidate, never "2 places".  With no release to read, all that is known of the
    site is its scope's name, which the renamed function does not have: a look-alike, not
    the site (missing, the candidate named with its score)."""
    root = mini_sglang(tmp_path / "site", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(GATE_RECIPE)
    code, out, _ = run_cli("--recipes", str(recipes), "status", "widen", "-t", f"sglang={root}", "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "missing", op
    assert [(c["location"], c["line"], c["score"]) for c in op["candidates"]] == [
        ("sglang/srt/gate2.py::renamed_gate", 6, 0.0)
    ], op
