"""delete-stmt's absence goal, and insert's presence goal, on SGLang 0.5.9's real communicator.py: a recipe deleting
``self.input_scattered_ = False`` from ``AttnTpContext.__init__`` (after ``self.allow_input_scattered
= False``).  A tree whose ``__init__`` was rewritten by hand without the statement (its context
renamed too, so the op's site is not found) reads `someone-else` (0.5.9's pristine file has it),
never `missing`, and apply and revert leave it; rewritten with the statement still there in
other formatting, nothing is concluded (`missing`).  Light: SGLang 0.5.9 is the suite's pin."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.real]

FILE = "sglang/srt/layers/communicator.py"
INIT = """\
    def __init__(self):
        self.allow_input_scattered = False
        self.input_scattered_ = False
        self.attn_inputs_: Optional[AttentionInputs] = None
"""

RECIPE = """
id = "drop-scattered"
summary = "take the input_scattered_ reset out of AttnTpContext"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "delete-stmt"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
scope = "AttnTpContext.__init__"
[ops.locator]
match = "self.input_scattered_ = False"
after = "self.allow_input_scattered = False"
"""


def _world(tree, tmp_path, run_cli, init: str, recipe: str = RECIPE):
    root = tree("sglang", "0.5.9", links=True)
    path = root / FILE
    text = path.read_text()
    assert text.count(INIT) == 1
    path.unlink()  # a hard link to the shared release
    path.write_text(text.replace(INIT, init))
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "drop-scattered.toml").write_text(recipe)

    def cli(*args):
        return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")

    code, out, err = cli("status", "drop-scattered", "--json")
    assert code in (0, 1), (out, err)
    return path, cli, json.loads(out)["recipes"][0]["ops"][0]


def test_deleted_by_hand_in_a_rewritten_init_is_someone_elses(tree, tmp_path, run_cli):
    init = """\
    def __init__(self):
        self.allow_scattered = False
        self.attn_inputs_: Optional[AttentionInputs] = None
"""
    path, cli, op = _world(tree, tmp_path, run_cli, init)
    assert op["state"] == "someone-else", op
    assert "stands nowhere in AttnTpContext.__init__" in op["evidence"]["goal_eval"], op
    before = path.read_text()
    for verb in ("apply", "revert"):
        code, out, err = cli(verb, "drop-scattered")
        assert path.read_text() == before, (verb, code, out, err)


def test_still_there_in_other_formatting_concludes_nothing(tree, tmp_path, run_cli):
    init = """\
    def __init__(self):
        self.allow_scattered = False
        self.input_scattered_ = (False)  # reset
        self.attn_inputs_: Optional[AttentionInputs] = None
"""
    path, cli, op = _world(tree, tmp_path, run_cli, init)
    assert op["state"] == "missing", op


INSERT = """
id = "drop-scattered"
summary = "remember the rank in AttnTpContext"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
scope = "AttnTpContext.__init__"
[ops.locator]
anchor = "self.input_scattered_ = False"
[ops.params]
code = "self.rank_hint = get_tensor_model_parallel_world_size() > 1"
"""


def test_an_insert_made_by_hand_in_other_formatting_is_someone_elses(tree, tmp_path, run_cli):
    """The insert's code already there (parenthesised, commented, a line further down): never
    pending, and apply writes no second copy."""
    init = INIT + "        self.rank_hint = (get_tensor_model_parallel_world_size() > 1)  # mine\n"
    path, cli, op = _world(tree, tmp_path, run_cli, init, INSERT)
    assert op["state"] == "someone-else", op
    before = path.read_text()
    code, out, err = cli("apply", "drop-scattered")
    assert code == 0 and path.read_text() == before, (out, err)
