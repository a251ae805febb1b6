"""Upstream markers (patchkit/core/markers.py): upstream's own version of an edit, recognised in
the marker's file and, by default, in the op's scope only."""

from __future__ import annotations

import json

from tests.conftest import gate_recipe, mini_sglang

GATES = """
def gate():
    return _is_a or _is_b


def other():
    if _is_a or _is_b or _is_sm120:
        return 1
"""

RECIPE = gate_recipe(extra='[[ops.markers]]\ncontains = ["_is_a or _is_b or _is_sm120"]\n{extra}\n')


def _status(tmp_path, run_cli, text: str, extra: str = "") -> dict:
    root = mini_sglang(tmp_path / "site", {"sglang/srt/gate.py": text})
    recipes = tmp_path / "recipes"
    recipes.mkdir(exist_ok=True)
    (recipes / "widen.toml").write_text(RECIPE.replace("{extra}", extra))
    code, out, err = run_cli("--recipes", str(recipes), "status", "widen", "-t", f"sglang={root}", "--json")
    assert code in (0, 1), err
    return json.loads(out)["recipes"][0]["ops"][0]


def test_a_marker_in_another_function_of_the_file_is_not_upstream(tmp_path, run_cli):
    op = _status(tmp_path, run_cli, GATES)
    assert op["state"] == "pending", op


def test_a_marker_in_the_ops_scope_is_upstream(tmp_path, run_cli):
    text = GATES.replace("return _is_a or _is_b\n", "x = 0\n    return _is_a or _is_b or _is_sm120\n", 1)
    op = _status(tmp_path, run_cli, text)
    # The or-chain itself now reads pending (it holds _is_a, _is_b); the marker stands in scope.
    assert op["state"] == "upstream" and op["message"] == "upstream marker matched at sglang/srt/gate.py:4", op


def test_a_marker_may_name_another_scope(tmp_path, run_cli):
    op = _status(tmp_path, run_cli, GATES, extra='scope = "other"')
    assert op["state"] == "upstream" and op["message"] == "upstream marker matched at sglang/srt/gate.py:7", op
