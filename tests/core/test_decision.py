"""The decision table (patchkit/core/decision.py): each rule, reached by its evidence alone;
the first match wins where two could; and every verdict carries its evidence and rule in
`--json`."""

from __future__ import annotations

import json
import re

import pytest

from patchkit.base.states import State
from patchkit.core import decision
from patchkit.core.decision import Evidence

D, P, M, A = State.DONE, State.PENDING, State.MISSING, State.AMBIGUOUS

ROWS = [
    (Evidence(D, killed=True), State.APPLIED, 1),
    (Evidence(D, journal=True, killed=False), State.APPLIED, 1),
    (Evidence(D, proof="the file is byte for byte what patchkit wrote"), State.APPLIED, 2),
    (Evidence(D, journal=True, proof="x", pristine=True), State.APPLIED, 2),  # proof first
    (Evidence(D, pristine=True), State.UPSTREAM, 3),
    (Evidence(D, journal=True, pristine=True), State.UPSTREAM, 3),  # a record from before an upgrade
    (Evidence(D, journal=True, pristine=False), State.MODIFIED, 4),
    (Evidence(D, pristine=False), State.FOREIGN, 5),
    (Evidence(D, pristine=False, marker="m"), State.FOREIGN, 5),  # the release decides, not a marker
    (Evidence(D, marker="upstream marker at x.py:3"), State.UPSTREAM, 6),
    (Evidence(D), State.APPLIED_UNSURE, 6),
    (Evidence(D, journal=True, marker="m"), State.APPLIED_UNSURE, 6),
    (Evidence(P, goal="upstream"), State.UPSTREAM, 7),
    (Evidence(P, goal="someone-else"), State.FOREIGN, 8),
    (Evidence(P, goal="unknown"), State.APPLIED_UNSURE, 9),
    (Evidence(P, journal=True), State.MODIFIED, 10),
    (Evidence(P, journal=True, stale="reinstalled"), State.PENDING, 14),
    (Evidence(P, journal=True, killed=False), State.PENDING, 14),
    (Evidence(M, neither=True, journal=True), State.MODIFIED, 11),
    (Evidence(M, neither=True), State.MISSING, 15),
    (Evidence(P, marker="m"), State.UPSTREAM, 12),
    (Evidence(M, marker="m"), State.UPSTREAM, 12),
    (Evidence(A, marker="m"), State.AMBIGUOUS, 15),  # a marker never settles an ambiguous site
    (Evidence(P, moved=True), State.MOVED, 13),
    (Evidence(P), State.PENDING, 14),
    (Evidence(M), State.MISSING, 15),
    (Evidence(A), State.AMBIGUOUS, 15),
]


@pytest.mark.parametrize("e, state, rule", ROWS, ids=[f"rule{r}-{s.value}-{i}" for i, (_, s, r) in enumerate(ROWS)])
def test_each_rule(e, state, rule):
    assert decision.decide(e) == (state, rule)


def test_every_rule_of_the_documented_table_is_reached():
    documented = {int(m) for m in re.findall(r"^(\d+)\s{2,}", decision.__doc__, re.M)}
    assert documented == set(range(1, 16))
    assert {rule for _, _, rule in ROWS} == documented


def test_a_verdict_names_its_evidence_in_json(tmp_path, run_cli, monkeypatch):
    from tests.conftest import mini_sglang
    from tests.core.test_proof import GATE, WIDEN, _wheel

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    root = mini_sglang(tmp_path / "t", {"sglang/srt/gate.py": GATE})
    _wheel(tmp_path / "cache", GATE)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "widen.toml").write_text(WIDEN)
    args = ("--recipes", str(tmp_path / "r"))

    def evidence():
        out = run_cli(*args, "status", "widen", "-t", f"sglang={root}", "--json")[1]
        return json.loads(out)["recipes"][0]["ops"][0]["evidence"]

    assert evidence()["rule"] == 14 and evidence()["found"] == "pending"
    assert run_cli(*args, "apply", "widen", "-t", f"sglang={root}")[0] == 0
    ev = evidence()
    assert ev["rule"] == 2 and ev["proof"] == "the file is byte for byte what patchkit wrote", ev
    (root / ".patchkit/journal.json").unlink()
    from patchkit.base import journal

    journal.mirror_path(root).unlink()
    ev = evidence()
    assert (ev["rule"], ev["pristine"], ev["journal"]) == (5, "lacks it", False), ev
