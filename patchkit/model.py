"""Recipes as parsed: frozen values built by recipe.py, read by every layer.

Results (states, OpResult, RecipeResult) live in results.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # packaging is imported where ranges are parsed (recipe.py), not at start-up
    from packaging.specifiers import SpecifierSet


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
