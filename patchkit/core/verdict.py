"""The judge's answer, a value: one op's ``Verdict``, and the result values folded from
verdicts (``results``) that every command reports.

Deciding a verdict is the judge's (patchkit/core/judge.py); what the planner and the commands
read of one lives here, so that reading a verdict never enters the judge's module.
A Verdict is frozen: a stage that refines one makes a new one (``dataclasses.replace``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from patchkit.base.model import OpSpec, Recipe
from patchkit.base.results import OpResult, RecipeResult, recipe_state
from patchkit.base.states import State


@dataclass(frozen=True)
class Verdict:
    """One op judged: where its site is (file, scope, line) and its state.  ``file`` is the
    Document the site was found in, read only."""

    recipe: Recipe
    op: OpSpec
    file: Any  # patchkit.core.document.Document
    located: Any  # patchkit.core.ops.Located
    scope: str  # where it was located
    state: State = State.MISSING
    line: Optional[int] = None
    message: str = ""
    lines: tuple = ()  # lines of all nodes (candidates when ambiguous)
    root: Any = None  # (module, view) the nodes were found in, for their line numbers
    searched: bool = False  # depends on what no digest names (a reference had later): never cached
    stale: bool = False  # the journal records this op as patchkit's, but the code says otherwise
    impl: Any = None  # the op bound to the pristine scope (Op.relative_to), where that told its done sites
    candidates: tuple = ()  # identity.Candidate: the places scored, best first (moved/missing/ambiguous)
    evidence: Any = None  # what decided it: decision.Evidence.to_json, with the table's rule

    @property
    def moved(self) -> bool:
        return self.file.logical != self.op.file or self.scope != self.op.scope

    def location(self) -> str:
        return f"{self.file.logical}::{self.scope or '<module>'}"

    def result(self, state: Optional[State] = None, message: Optional[str] = None) -> OpResult:
        return OpResult(
            recipe=self.recipe.id,
            index=self.op.index,
            kind=self.op.kind,
            engine=self.op.engine,
            file=self.op.file,  # the recipe's file; ``location`` says where the code is now
            state=state or self.state,
            line=self.line,
            location=(self.location() + (f":{self.line}" if self.line else "")) if self.file.exists else "",
            message=self.message if message is None else message,
            candidates=tuple(c.to_json() for c in self.candidates),
            evidence=self.evidence or {},
        )


@dataclass(frozen=True)
class Evaluation:
    """The judge's answer for a list of recipes, a value: each recipe cut to the variant of
    the targets' versions with its ops' verdicts (iterating gives ``(recipe, verdicts)``),
    the blockers that stand (recipe id -> blockers.Found), and why a nearer variant was
    judged (recipe id -> note)."""

    judged: tuple[tuple[Recipe, tuple[Verdict, ...]], ...] = ()
    blocked: Mapping[str, tuple] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)

    def __iter__(self) -> Iterator[tuple[Recipe, tuple[Verdict, ...]]]:
        return iter(self.judged)

    def __len__(self) -> int:
        return len(self.judged)

    def __getitem__(self, i: int) -> tuple[Recipe, tuple[Verdict, ...]]:
        return self.judged[i]

    def __bool__(self) -> bool:
        return bool(self.judged)


def in_range(recipe: Recipe, session) -> tuple[Optional[bool], dict]:
    """(is every target's version in the recipe's range: True, False or None when one is
    unknown, {engine: version})."""
    versions, inside = {}, []
    for eng, spec in recipe.engines.items():
        t = session.targets.get(eng)
        v = t.version if t else None
        versions[eng] = v
        inside.append(None if v is None else spec.contains(v, prereleases=True))
    if False in inside:
        return False, versions
    if None in inside:
        return None, versions
    return True, versions


def cacheable(session, evaluated: Evaluation) -> bool:
    """Can these verdicts be cached, keyed on the digests of the files read and the
    fingerprints of the trees searched?  Not when a verdict depends on something neither
    names, or a searched tree changed too recently for its fingerprint to be trusted."""
    if any(fp is None for fp in session.swept.values()):
        return False
    return not any(ev.searched for _, evs in evaluated for ev in evs)


def results(
    session,
    evaluated: Evaluation,
    overrides: dict | None = None,
    skipped: frozenset = frozenset(),
    blocked: Optional[dict] = None,
) -> list[RecipeResult]:
    """Result values for evaluated recipes.  ``overrides`` maps (recipe, op) to the OpResult
    a plan made; ``skipped`` are recipes apply left alone because of their version range;
    ``blocked`` (recipe id -> blockers.Found) the blockers a plan leaves standing, else the
    judge's (``evaluated.blocked``)."""
    overrides = overrides or {}
    blocked = evaluated.blocked if blocked is None else blocked
    notes = evaluated.notes
    interrupted = session.interrupted_recipes()
    res = []
    for r, evs in evaluated:
        ops = tuple(overrides.get((r.id, ev.op.index), ev.result()) for ev in evs)
        rng, vers = in_range(r, session)
        state = recipe_state([o.state for o in ops])
        msg = ""
        if r.id in skipped:
            state = State.SKIPPED
            msg = (
                "out of version range ("
                + ", ".join(f"{e} {vers[e]} not in {r.engines[e]}" for e in r.engines)
                + "); pass --ignore-range to apply anyway"
            )
        elif blocked.get(r.id):
            state = State.BLOCKED
            msg = "blocked: " + "; ".join(b.describe() for b in blocked[r.id])
        elif r.id in interrupted:
            state = State.INTERRUPTED
            msg = (
                f"a `patchkit {interrupted[r.id]}` was killed while writing it; "
                f"run `patchkit {interrupted[r.id]}` to finish, or the other command to go back"
            )
        if r.id in notes:
            msg = "; ".join(m for m in (msg, notes[r.id]) if m)
        found = tuple(b.to_json() for b in blocked.get(r.id, ()))
        res.append(RecipeResult(r.id, state, rng, ops, msg, vers, found))
    return res
