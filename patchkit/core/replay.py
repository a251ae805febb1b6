"""The plan cache's policy: when `apply` or `revert` looks a plan up, when one is served
(replayed) and when one made afresh is kept.  The entries themselves, and how they are read
and written, are patchkit/core/plancache.py's; the write is the transaction's one entry
point (transaction.commit), the same for a replayed plan as for a fresh one.

A plan is looked up for every invocation that names its recipes, except a dry run (as fast
as the full path's reads).  Served: under the lock, with no transaction to finish, the
entry becomes a transaction.Commit (plancache.commit_of: every file it writes read again,
its tree fingerprints and provenance taken again) and is committed, which reads every input
again first; any change means the plan is made afresh (``served`` returns None), before a
byte is written or a warning said.  Kept: a plan the full path made and wrote, when it may
be (``remember``).  What the command prints of the plan is a value too (``Outcome``), kept
with it as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from patchkit.base import fsio, shape
from patchkit.base.results import RecipeResult
from patchkit.core import transaction


@dataclass(frozen=True)
class Outcome:
    """What `apply` or `revert` reports of its plan, a value (the plan cache keeps it):
    the results, the blockers, the files written (or that a dry run would write), the
    notes before the command's own (a damaged journal) and after them (the plan's, and
    which files are back to their bytes before patchkit), and the FlashInfer JIT modules
    a write touched, with the version of the tree that compiles them."""

    results: tuple
    blockers: tuple[str, ...]
    written: tuple[str, ...]
    before: tuple[str, ...]
    after: tuple[str, ...]
    jit_modules: tuple[str, ...] = ()
    jit_version: Optional[str] = None

    @classmethod
    def of(cls, session, plan, dry_run: bool) -> "Outcome":
        from patchkit.core.planner import restored_notes

        wrote = bool(plan.files) and not dry_run
        version = None
        if wrote and plan.jit_modules:
            from patchkit.base.target import ENGINES

            fi = session.targets.get((ENGINES.with_jit() or ENGINES.NONE).name)
            version = fi.version if fi else None
        return cls(
            tuple(plan.results),
            tuple(plan.blockers),
            tuple(str(f.path) for f in plan.files),
            tuple(session.notes()),
            tuple(plan.notes)
            + (tuple(restored_notes(plan, transaction.journals_after(session, plan))) if wrote else ()),
            tuple(sorted(plan.jit_modules)) if wrote else (),
            version,
        )

    def to_json(self) -> dict:
        d = {k: list(v) for k, v in vars(self).items() if isinstance(v, tuple)}
        return {**d, "results": [r.to_json() for r in self.results], "jit_version": self.jit_version}

    @classmethod
    def from_json(cls, d: dict) -> "Outcome":
        return cls(
            tuple(RecipeResult.from_json(r) for r in d["results"]),
            *(tuple(d[k]) for k in ("blockers", "written", "before", "after", "jit_modules")),
            d["jit_version"],
        )


_OP = {**shape.OP_RESULT, "candidates": [dict]}  # what OpResult.from_json reads, all of it
OUTCOME = {  # Outcome.to_json, and what the command made of it (shape.py's schema)
    "results": [{**shape.RECIPE_RESULT, "ops": [_OP]}],
    **{k: [str] for k in ("blockers", "written", "before", "after", "jit_modules", "left", "insisted")},
    "jit_version": (str, None),
    "ok": bool,
}


def lookup(opts, command: str, dry_run: bool, profile=None, **options):
    """The plan cache's lookup for this invocation (plancache.lookup), or None where it does
    not serve: a dry run (it is as fast as the full path's reads).  ``options``: those that
    change the plan or what is printed of it; a profile's bytes are an input too (it decides
    what is left out)."""
    if dry_run:
        return None
    from patchkit.core import plancache

    options["names"] = list(opts.names)  # in the order given: the results are printed in it
    if profile is not None:
        from patchkit.core.verdicts import file_digest

        options["profile"] = [str(profile.path), file_digest(Path(profile.path))]
    return plancache.lookup(opts, command, options)


class Served(NamedTuple):
    """A plan the cache served, written: what the command reports of it."""

    outcome: Outcome
    ok: bool
    targets: dict
    left: list
    insisted: list


def served(look, command: str, warn: Callable[[str], None], force: bool = False) -> Optional[Served]:
    """The plan the cache holds for these inputs, committed now (its warnings told through
    ``warn`` as the full path tells them: before the write, and before a refusal); None for
    a miss, or when the plan must be made afresh (a transaction to finish first, an input
    changed by the time the lock was held)."""
    from patchkit.core import plancache

    entry = look.entry if look is not None else None
    if entry is None or not shape.fits(entry["outcome"], OUTCOME):
        return None
    out = entry["outcome"]
    targets = {e: look.targets[e] for e in entry["engines"]}

    def said() -> None:
        for w in entry["warnings"]:
            warn(w)

    roots = sorted({t.root for t in targets.values()})
    with fsio.locked(roots):
        if transaction.pending_roots(roots):
            return None  # the full path finishes it first
        c = plancache.commit_of(entry, targets, command)
        if c is None:
            return None
        try:
            transaction.commit(c, force, said=said)
        except transaction.Changed:
            return None  # read again under the lock, an input differs: planned afresh
    return Served(Outcome.from_json(out), out["ok"], targets, out["left"], out["insisted"])


def remember(look, ran, dry_run: bool, said: list[str], o: Outcome, ok: bool, left=(), insisted=()) -> None:
    """Keep a plan the full path made and wrote (``ran``: transaction.finish's), when its
    inputs name everything it was made from: not a dry run, no blockers, a plan whose
    verdicts are all keyed on digests (Plan.cacheable), no transaction finished or
    interrupted, and the targets the lookup found.  ``said``: the warnings it told."""
    session, plan = ran.session, ran.plan
    if look is None or dry_run or ran.commit is None or not plan.cacheable or ran.notes or session.interrupted:
        return
    for e, t in session.targets.items():
        hand = look.targets.get(e)
        if hand is None or (hand.root, hand.layout, hand.version) != (t.root, t.layout, t.version):
            return
    from patchkit.core import plancache

    out = {**o.to_json(), "ok": ok, "left": list(left), "insisted": list(insisted)}
    plancache.save(look, list(session.targets), ran.commit, session.swept, said, out)
