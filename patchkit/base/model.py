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
    # Written by `port` for a person to confirm (what to read, and how): such a marker never
    # counts, and `check` warns about it, until the ``proposed`` line is deleted.
    proposed: str = ""
    line: int = 0  # of its table in the recipe file (for `check`'s warning)


When = tuple  # ((engine, SpecifierSet), ...): the versions an op or blocker holds for; () = all


def holds(when: When, versions: dict[str, Optional[str]]) -> bool:
    """Does ``when`` hold for these engine versions?  An unknown version holds nothing."""
    return all(versions.get(e) is not None and spec.contains(versions[e], prereleases=True) for e, spec in when)


def describe_when(when: When) -> str:
    return ", ".join(f"{e} {spec}" for e, spec in when) or "every version"


@dataclass(frozen=True)
class Blocker:
    """Code that defeats a recipe: while it stands on the path, the recipe's goal is not
    reached, whatever its ops did (a second gate that still refuses, say)."""

    index: int  # 1-based: "blocker #1"
    engine: str
    file: str
    scope: str
    contains: tuple[str, ...]  # fragments that must all stand in the scope, in order
    message: str
    when: When = ()

    @property
    def label(self) -> str:
        return f"blocker #{self.index}"


@dataclass(frozen=True)
class Example:
    """``[[ops.examples]]``: a small file (holding the op's scope) on which the op is pending,
    and exactly what apply makes of it.  `patchkit check` runs it both ways."""

    before: str
    after: str
    line: int = 0  # where it stands in the recipe file


@dataclass(frozen=True)
class OpSpec:
    """One edit of a recipe, validated and bound to its op kind (``impl``)."""

    index: int  # 1-based, as in messages: "op #2"
    kind: str
    engine: str
    file: str  # logical name, e.g. "sglang/srt/server_args.py" or "include/flashinfer/x.cuh"
    scope: str  # "" = module level / whole file
    impl: Any  # the bound op object (patchkit.core.ops.*), built at load time
    markers: tuple[Marker, ...] = ()
    jit_modules: tuple[str, ...] = ()  # FlashInfer JIT modules whose cache this edit invalidates
    when: When = ()  # the releases this op is for (a version variant); () = every release
    examples: tuple[Example, ...] = ()  # run by `patchkit check`
    identity: Any = None  # (release, contexts) carried in the recipe ([ops.identity], carried.py), or None

    @property
    def label(self) -> str:
        return f"op #{self.index} ({self.kind})"


@dataclass(frozen=True)
class Expectation:
    """What a recipe says `patchkit verify --build` must find in the device code it builds."""

    index: int  # 1-based: "expect #1"
    kind: str  # "no-empty-kernels" | "same-count"
    arch: str  # e.g. "120a"
    module: str = ""  # a JIT module's units; "" = the units that include an edited file
    instruction: str = ""  # same-count: the PTX instruction counted
    as_arch: str = ""  # same-count: the build it must equal

    @property
    def label(self) -> str:
        return f"expect #{self.index} ({self.kind})"

    def describe(self) -> str:
        units = f"the units of {self.module}" if self.module else "the units that include an edited file"
        if self.kind == "no-empty-kernels":
            return f"on {self.arch}, no kernel of {units} is empty (patched)"
        return f"on {self.arch}, {units} hold as many {self.instruction} as on {self.as_arch} (patched)"


@dataclass(frozen=True)
class VerifySpec:
    """A recipe's [verify] table: the archs `verify --build` builds by default, the PTX
    instructions it counts beside griddepcontrol, and the expectations it judges."""

    arch: tuple[str, ...] = ()
    count: tuple[str, ...] = ()
    expect: tuple[Expectation, ...] = ()


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
    blockers: tuple[Blocker, ...] = ()
    verify: VerifySpec = VerifySpec()
    # The hardware the recipe is for ("sm120"): its ops' goals (patchkit/core/goal.py) are
    # judged on it.  "" when the recipe names none: then its ops are judged by their text alone.
    device: str = ""

    def variants(self) -> list[tuple[When, tuple[int, ...]]]:
        """(when, op indices) per version variant, in file order; () holds the common ops."""
        out: dict[When, list[int]] = {}
        for op in self.ops:
            out.setdefault(op.when, []).append(op.index)
        return [(w, tuple(ix)) for w, ix in out.items()]

    def for_versions(self, versions: dict[str, Optional[str]]) -> tuple["Recipe", str]:
        """This recipe cut down to the ops and blockers of the target's versions, and a note
        when no variant covers them.  Outside the recipe's range (or with a version
        unknown) the nearest variant is judged: the newest above the range, the oldest
        below it, so that status and drift still have something to say."""
        if all(op.when == () for op in self.ops) and all(b.when == () for b in self.blockers):
            return self, ""
        judged, notes = dict(versions), []
        for eng, spec in self.engines.items():
            v = versions.get(eng)
            if v is not None and spec.contains(v, prereleases=True):
                continue
            above = v is None or any(s.operator in ("<", "<=") and not s.contains(v, prereleases=True) for s in spec)
            judged[eng] = _EXTREME[above]
            if not any(op.when for op in self.ops):
                continue  # one variant: nothing to choose, and the range already says it
            why = f"{eng} version unknown" if v is None else f"no variant for {eng} {v}"
            notes.append(f"{why}: judged with the {'newest' if above else 'oldest'} variant")
        ops = tuple(op for op in self.ops if holds(op.when, judged))
        # A blocker is a fact about the code of the version at hand, not a variant: where the
        # version is known it decides, even outside the range (--ignore-range).
        known = {e: (versions.get(e) if versions.get(e) is not None else judged[e]) for e in judged}
        blockers = tuple(b for b in self.blockers if holds(b.when, known))
        return dataclasses.replace(self, ops=ops, blockers=blockers), "; ".join(notes)

    def ops_for(self, engine: str) -> tuple[OpSpec, ...]:
        return tuple(op for op in self.ops if op.engine == engine)

    def only(self, engine: str) -> Optional["Recipe"]:
        """This recipe cut down to its ops on ``engine`` (a fork or a wheel holds one
        engine's code), or None if it does not touch that engine."""
        ops = self.ops_for(engine)
        if not ops:
            return None
        blockers = tuple(b for b in self.blockers if b.engine == engine)
        return dataclasses.replace(self, ops=ops, blockers=blockers, engines={engine: self.engines[engine]})


_EXTREME = {True: "99999", False: "0"}  # a version above (below) every range


def per_engine(recipes: list[Recipe], engine: str) -> list[Recipe]:
    """The recipes that touch ``engine``, each cut down to its ops there."""
    return [c for c in (r.only(engine) for r in recipes) if c is not None]
