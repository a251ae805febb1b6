"""Results as values: op and recipe states, and what status, apply, revert and drift report.

Immutable once computed (engine.py); human output and ``--json`` are both rendered from
them (report.py).  Kept apart from the recipe model, and NamedTuples rather than
dataclasses (a tenth of the cost to define), so that ``status`` answered from its cache
starts quickly.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

# Op and recipe states, as they appear in `status --json`.
APPLIED = "applied"  # post-condition holds and patchkit wrote it
PENDING = "pending"  # anchor found, edit not yet made
UPSTREAM = "upstream"  # post-condition holds (or an upstream marker matches) but patchkit did not write it
MOVED = "moved"  # found, but not in the named file/scope
MISSING = "missing"  # anchor not found
AMBIGUOUS = "ambiguous"  # several candidate sites
SKIPPED = "skipped"  # out of version range; apply left it alone
PARTIAL = "partial"  # some ops applied, some pending
MODIFIED = "modified"  # patchkit applied it, but the code changed since

STATES = (APPLIED, PENDING, UPSTREAM, MOVED, MISSING, AMBIGUOUS, SKIPPED, PARTIAL, MODIFIED)


class OpResult(NamedTuple):
    recipe: str
    index: int
    kind: str
    engine: str
    file: str
    state: str
    line: Optional[int] = None
    location: str = ""  # "file::scope" where the op was found
    message: str = ""

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "kind": self.kind,
            "engine": self.engine,
            "file": self.file,
            "state": self.state,
            "line": self.line,
            "location": self.location,
            "message": self.message,
        }


class RecipeResult(NamedTuple):
    id: str
    state: str
    in_range: Optional[bool]
    ops: tuple[OpResult, ...] = ()
    message: str = ""
    versions: Optional[dict] = None  # engine -> version judged

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "state": self.state,
            "in_range": self.in_range,
            "versions": self.versions or {},
            "message": self.message,
            "ops": [op.to_json() for op in self.ops],
        }


def recipe_state(op_states: list[str]) -> str:
    """Fold op states into a recipe state (the rule is part of the JSON contract)."""
    for bad in (MISSING, AMBIGUOUS):
        if bad in op_states:
            return bad
    if MODIFIED in op_states:
        return MODIFIED
    if PENDING in op_states:
        return PARTIAL if (APPLIED in op_states) else PENDING
    if MOVED in op_states:
        return MOVED
    if op_states and all(s == UPSTREAM for s in op_states):
        return UPSTREAM
    return APPLIED
