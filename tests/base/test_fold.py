"""How op states fold into a recipe's state (results.recipe_state, README: states), and what
`drift` says of them: a recipe that apply refuses never reads pending, and drift's "ok" and
exit 0 hold only when apply would apply every recipe."""

from __future__ import annotations

import itertools
import json

import pytest

from patchkit.base.results import REFUSED, OpResult, RecipeResult, recipe_state
from patchkit.base.states import State
from patchkit.commands.drift import summary
from patchkit.upstream import drift

S = State
OP_STATES = (S.PENDING, S.APPLIED, S.APPLIED_UNSURE, S.UPSTREAM, S.MOVED, S.MISSING, S.AMBIGUOUS, S.MODIFIED)


@pytest.mark.parametrize(
    "ops,state",
    [
        ([S.PENDING], S.PENDING),
        ([S.PENDING, S.UPSTREAM], S.PENDING),
        ([S.PENDING, S.APPLIED], S.PARTIAL),
        ([S.PENDING, S.APPLIED_UNSURE], S.PARTIAL),
        ([S.PENDING, S.MOVED], S.MOVED),  # the issue: apply refuses the moved op
        ([S.MOVED, S.PENDING, S.PENDING], S.MOVED),
        ([S.PENDING, S.APPLIED, S.MOVED], S.MOVED),
        ([S.UPSTREAM, S.MOVED], S.MOVED),
        ([S.APPLIED, S.MOVED], S.MOVED),
        ([S.MOVED], S.MOVED),
        ([S.MOVED, S.MODIFIED], S.MODIFIED),
        ([S.MOVED, S.AMBIGUOUS], S.AMBIGUOUS),
        ([S.MOVED, S.MISSING, S.AMBIGUOUS], S.MISSING),
        ([S.PENDING, S.MISSING], S.MISSING),
        ([S.MODIFIED, S.PENDING], S.MODIFIED),
        ([S.INTERRUPTED, S.MISSING], S.INTERRUPTED),
        ([S.APPLIED_UNSURE, S.UPSTREAM], S.APPLIED_UNSURE),
        ([S.APPLIED_UNSURE, S.APPLIED], S.APPLIED_UNSURE),
        ([S.UPSTREAM, S.UPSTREAM], S.UPSTREAM),
        ([S.UPSTREAM, S.APPLIED], S.APPLIED),
        ([S.APPLIED], S.APPLIED),
    ],
)
def test_the_fold(ops, state):
    assert recipe_state(ops) == state
    assert recipe_state(list(reversed(ops))) == state  # the order of the ops never matters


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_recipe_apply_refuses_reads_pending_or_done(n):
    """Over every combination of op states: a recipe holding an op that apply refuses reads
    the first refused state (never pending, partial or a done state), and one that holds
    none reads what its other ops make it."""
    for combo in itertools.product(OP_STATES, repeat=n):
        got = recipe_state(list(combo))
        refused = [s for s in REFUSED if s in combo]
        if refused:
            assert got == refused[0], combo
        else:
            assert got in (S.PENDING, S.PARTIAL, S.APPLIED, S.APPLIED_UNSURE, S.UPSTREAM), combo
            assert (got in (S.PENDING, S.PARTIAL)) == (S.PENDING in combo), combo


def _result(rid, *states, in_range=True, blocked=False):
    ops = tuple(OpResult(rid, i, "k", "sglang", "x.py", s) for i, s in enumerate(states, 1))
    state = S.BLOCKED if blocked else recipe_state(list(states))
    return RecipeResult(rid, state, in_range, ops)


@pytest.mark.parametrize(
    "res,good,line",
    [
        ([_result("a", S.PENDING), _result("b", S.UPSTREAM)], True, "ok: every recipe still applies or is upstream"),
        ([_result("a", S.PENDING, S.MOVED)], False, "needs work: a (moved) must be fixed before upgrading"),
        ([_result("a", S.PENDING, S.MODIFIED)], False, "needs work: a (modified) must be fixed before upgrading"),
        ([_result("a", S.PENDING, blocked=True)], False, "needs work: a (blocked) must be fixed before upgrading"),
        ([_result("a", S.PENDING), _result("b", S.AMBIGUOUS)], False, "needs work: b (ambiguous) must be fixed"),
        ([_result("a", S.PENDING, in_range=False)], True, "ok, but out of range: a (this release is outside"),
    ],
)
def test_drift_says_ok_only_when_apply_would_apply_every_recipe(res, good, line):
    assert drift.ok(res) is good
    assert summary(res).startswith(line)
    assert drift.bad([r.to_json() for r in res]) == [r.id for r in res if r.state not in drift.FINE]


SRC = '''"""Stand-in for a module of sglang."""

BACKENDS = ["flashinfer", "triton"]
'''
MOE = """

def moe_backends():
    return ["flashinfer_cutlass", "triton_kernel"]
"""
RECIPE = """
id = "two"
summary = "one op pending, one moved"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/gates.py"
[ops.locator]
contains = ['"flashinfer"', '"triton"']
[ops.params]
element = '"cutlass"'
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/gates.py"
scope = "moe_backends"
[ops.locator]
contains = ['"flashinfer_cutlass"', '"triton_kernel"']
[ops.params]
element = '"cutlass"'
"""


def test_drift_on_a_release_where_an_op_moved_is_not_ok(tmp_path, run_cli, monkeypatch):
    """The issue's case: one op pending, one moved (its def went to another module).  The
    recipe reads moved, not pending; drift exits 1 without "ok", as apply refuses it."""
    from tests.conftest import mini_sglang, release_in_cache

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    # the home release, where the recipe was written: both sites in gates.py
    release_in_cache(tmp_path / "cache", "sglang", "0.5.9", {"sglang/srt/gates.py": SRC + MOE})
    root = mini_sglang(tmp_path / "new", {"sglang/srt/gates.py": SRC, "sglang/srt/moe.py": MOE.lstrip()})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "two.toml").write_text(RECIPE)
    pre = ("--recipes", str(tmp_path / "recipes"))
    code, out, err = run_cli(*pre, "drift", "two", "--to", f"sglang={root}", "--json")
    doc = json.loads(out)
    (r,) = doc["recipes"]
    assert [o["state"] for o in r["ops"]] == ["pending", "moved"], r
    assert r["state"] == "moved" and doc["ok"] is False and code == 1, (r, err)
    code, out, err = run_cli(*pre, "drift", "two", "--to", f"sglang={root}")
    assert code == 1 and "ok: every recipe" not in out, out
    assert "needs work: two (moved) must be fixed before upgrading" in out, out
    code, out, err = run_cli(*pre, "apply", "two", "-t", f"sglang={root}")
    assert code == 1 and ": moved: " in err, err  # what drift now says, apply does
