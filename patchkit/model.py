"""Plain values shared by every layer: recipes as parsed, and results as reported.

Recipes are frozen once loaded (see recipe.py); results are frozen once computed
(see engine.py).  Human output and ``--json`` are both rendered from these values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # packaging is imported where ranges are parsed (recipe.py), not at start-up
    from packaging.specifiers import SpecifierSet

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


@dataclass(frozen=True)
class Marker:
    """Code that upstream wrote differently but that does what the op does."""

    file: str
    scope: str
    contains: tuple[str, ...]


@dataclass(frozen=True)
class OpSpec:
    """One edit of a recipe, validated and bound to its op kind (``impl``)."""

    index: int  # 1-based, as in messages: "op #2"
    kind: str
    engine: str
    file: str  # logical name, e.g. "sglang/srt/server_args.py" or "include/flashinfer/x.cuh"
    scope: str  # "" = module level / whole file
    impl: Any  # the bound op object (patchkit.ops.*), built at load time
    markers: tuple[Marker, ...] = ()
    jit_modules: tuple[str, ...] = ()  # FlashInfer JIT modules whose cache this edit invalidates

    @property
    def label(self) -> str:
        return f"op #{self.index} ({self.kind})"


@dataclass(frozen=True)
class Recipe:
    id: str
    summary: str
    rationale: str
    bundles: tuple[str, ...]
    engines: dict[str, SpecifierSet]
    ops: tuple[OpSpec, ...]
    path: Path
    sha256: str

    def ops_for(self, engine: str) -> tuple[OpSpec, ...]:
        return tuple(op for op in self.ops if op.engine == engine)

    def only(self, engine: str) -> Optional["Recipe"]:
        """This recipe cut down to its ops on ``engine`` (a fork or a wheel holds one
        engine's code), or None if it does not touch that engine."""
        ops = self.ops_for(engine)
        if not ops:
            return None
        return dataclasses.replace(self, ops=ops, engines={engine: self.engines[engine]})


def per_engine(recipes: list[Recipe], engine: str) -> list[Recipe]:
    """The recipes that touch ``engine``, each cut down to its ops there."""
    return [c for c in (r.only(engine) for r in recipes) if c is not None]


@dataclass(frozen=True)
class OpResult:
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


@dataclass(frozen=True)
class RecipeResult:
    id: str
    state: str
    in_range: Optional[bool]
    ops: tuple[OpResult, ...] = ()
    message: str = ""
    versions: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "state": self.state,
            "in_range": self.in_range,
            "versions": self.versions,
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
