"""Results as values: op and recipe states, and what status, apply, revert and drift report.

Immutable once computed (engine.py); human output and ``--json`` are both rendered from
them (report.py).  Kept apart from the recipe model, and NamedTuples rather than
dataclasses (a tenth of the cost to define), so that ``status`` answered from its cache
starts quickly.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from patchkit.base.states import State


class OpResult(NamedTuple):
    recipe: str
    index: int
    kind: str
    engine: str
    file: str
    state: State
    line: Optional[int] = None
    location: str = ""  # "file::scope" where the op was found
    message: str = ""
    # Places scored against the site's identity, best first: {"location", "line", "score",
    # "matched"} (identity.Candidate.to_json); for moved, missing and ambiguous verdicts.
    candidates: tuple = ()
    # What decided the state: the evidence and the rule of the decision table
    # (patchkit/core/decision.py); {} where no judge decided it (a plan's own result).
    evidence: dict = {}

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "kind": self.kind,
            "engine": self.engine,
            "file": self.file,
            "state": State(self.state).value,
            "line": self.line,
            "location": self.location,
            "message": self.message,
            "candidates": list(self.candidates),
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_json(cls, recipe: str, o: dict) -> "OpResult":
        return cls(
            recipe,
            o["index"],
            o["kind"],
            o["engine"],
            o["file"],
            State(o["state"]),
            o["line"],
            o["location"],
            o["message"],
            tuple(o.get("candidates", ())),
            dict(o.get("evidence", {})) if isinstance(o.get("evidence", {}), dict) else {},
        )


class RecipeResult(NamedTuple):
    id: str
    state: State
    in_range: Optional[bool]
    ops: tuple[OpResult, ...] = ()
    message: str = ""
    versions: Optional[dict] = None  # engine -> version judged
    blockers: tuple = ()  # blockers standing ({"blocker", "file", "path", "line", "message"})

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "state": State(self.state).value,
            "in_range": self.in_range,
            "versions": self.versions or {},
            "message": self.message,
            "blockers": list(self.blockers),
            "ops": [op.to_json() for op in self.ops],
        }

    @classmethod
    def from_json(cls, d: dict) -> "RecipeResult":
        ops = tuple(OpResult.from_json(d["id"], o) for o in d["ops"])
        return cls(
            d["id"], State(d["state"]), d["in_range"], ops, d["message"], d["versions"], tuple(d.get("blockers", ()))
        )


# An op in one of these stops `apply` (planner.plan_apply refuses the plan, nothing is
# written): a recipe holding one is not pending, whatever its other ops read.  In this order
# the first one held names the recipe.
REFUSED = (State.MISSING, State.AMBIGUOUS, State.MODIFIED, State.MOVED)


def recipe_state(op_states: list[State]) -> State:
    """Fold op states into a recipe state (the rule is part of the JSON contract; docs/states.md:
    states).  The first rule that holds decides:

    1. ``interrupted`` when an op is (a killed write; the next apply or revert finishes it);
    2. ``missing``, ``ambiguous``, ``modified``, ``moved``, the first of these an op reads:
       apply refuses each (``REFUSED``), so the recipe cannot be applied as it stands, even
       when its other ops read ``pending``;
    3. ``partial`` when an op is ``pending`` and another ``applied``, ``applied?`` or
       ``someone-else``; ``pending`` when an op is ``pending`` (the others ``upstream``);
    4. ``applied?`` when an op is (the edits are there, who made one is unknown);
    5. ``someone-else`` when an op is (its edit is there, made by someone else);
    6. ``upstream`` when every op is;
    7. ``applied`` (every op ``applied`` or ``upstream``).

    ``blocked``, ``skipped`` and a recipe's ``interrupted`` are decided above the ops, on the
    recipe (verdict.results)."""
    if State.INTERRUPTED in op_states:
        return State.INTERRUPTED
    for bad in REFUSED:
        if bad in op_states:
            return bad
    if State.PENDING in op_states:
        some = any(s in op_states for s in (State.APPLIED, State.APPLIED_UNSURE, State.FOREIGN))
        return State.PARTIAL if some else State.PENDING
    if State.APPLIED_UNSURE in op_states:
        return State.APPLIED_UNSURE
    if State.FOREIGN in op_states:
        return State.FOREIGN
    if op_states and all(s == State.UPSTREAM for s in op_states):
        return State.UPSTREAM
    return State.APPLIED
