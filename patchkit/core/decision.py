"""The decision table: an op's verdict as a function of its evidence, in one place.

The judge (patchkit/core/judge.py) gathers the evidence: where the op's site is and what its
pattern finds there (locating, relocation, the site's identity), whether the op's goal is
reached in other words (goal.py), whether patchkit's own record proves it wrote the edit
(proof.py), what the pristine release (or a checkout's HEAD) holds at the site, and whether an
upstream marker matches.  This module decides; nothing else does.  The rows, first match wins:

====  ===========================  ==========================================  ================
rule  the site                      and                                         verdict
====  ===========================  ==========================================  ================
1     done                          a killed write of this recipe names the op  applied
2     the edit is there (done)      patchkit's record proves it                 applied
3     done                          the pristine release (or HEAD) has it       upstream
4     done                          the journal names the op, the release not   modified
5     done                          no record, the release lacks it             someone-else
6     done                          no pristine release: a marker matches       upstream
                                    no pristine release, no marker              applied?
7     the goal reached otherwise    the release reaches it too                  upstream
8     the goal reached otherwise    the release does not                        someone-else
9     the goal reached otherwise    no pristine release to read                 applied?
10    pattern there, edit not made  the journal names the op (record not stale) modified
11    a site holding neither side   the journal names the op (record not stale) modified
12    pending, missing              an upstream marker matches                  upstream
13    pending                       found away from its named file or scope     moved
14    pending                                                                   pending
15    missing, ambiguous, moved                                                 as found
====  ===========================  ==========================================  ================

Every threshold the evidence is weighed by (similarity, margin, the share of a done
statement's tokens) is in patchkit/core/identity.py, as git has one ``-M``.  A verdict
carries its evidence and the rule that decided it (``Evidence.to_json``) into ``--json``;
rules 7-9 also where the goal is reached and how it was evaluated (``goal_at``, ``goal_eval``):
a Python or C/C++/CUDA device gate, a CMake arch list, a bound, a deleted statement's absence, an insert's
presence, an assertion turned into a fallback, a chain that takes the device into an added arm's
statements (goal.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from patchkit.base.states import State

# What a goal reached without the op (goal.py) says of who reached it.
GOAL_BY = {State.UPSTREAM: "upstream", State.FOREIGN: "someone-else", State.APPLIED_UNSURE: "unknown"}


@dataclass(frozen=True)
class Evidence:
    """What the judge found for one op, as data."""

    found: State  # what the op's pattern finds at the identified site: DONE, PENDING, MISSING, AMBIGUOUS
    moved: bool = False  # the site is away from the op's named file or scope
    neither: bool = False  # MISSING with a site: it holds neither side of the edit
    journal: bool = False  # the target's journal names the op as patchkit's
    killed: Optional[bool] = None  # a killed write of this recipe: does its journal name the op
    proof: str = ""  # why patchkit's record proves it wrote the edit (proof.recorded), "" when none does
    pristine: Optional[bool] = None  # the pristine release (or HEAD) holds the edit at the site; None: no release
    goal: str = ""  # the goal reached without the op: "upstream", "someone-else", "unknown"; "" not shown
    stale: str = ""  # why the journal's record no longer holds (an installer replaced the file)
    marker: str = ""  # an upstream marker that matches
    goal_at: str = ""  # where the goal reached without the op is (file:line), "" where not shown
    goal_eval: str = ""  # the evaluation there, in words

    def to_json(self, rule: int) -> dict:
        return {
            "rule": rule,
            "found": State(self.found).value,
            "moved": self.moved,
            "journal": self.journal,
            "proof": self.proof,
            "pristine": {True: "has it", False: "lacks it", None: "not read"}[self.pristine],
            "goal": self.goal,
            "stale": self.stale,
            "marker": self.marker,
            **({"goal_at": self.goal_at, "goal_eval": self.goal_eval} if self.goal else {}),
        }


def decide(e: Evidence) -> tuple[State, int]:
    """(the verdict, the rule of the table above that decided it)."""
    if e.killed is not None and e.found == State.DONE and (e.journal or e.killed):
        return State.APPLIED, 1
    if e.found == State.DONE:
        if e.proof:
            return State.APPLIED, 2
        if e.pristine is True:
            return State.UPSTREAM, 3
        if e.pristine is False:
            return (State.MODIFIED, 4) if e.journal else (State.FOREIGN, 5)
        return (State.UPSTREAM, 6) if e.marker and not e.journal else (State.APPLIED_UNSURE, 6)
    if e.goal:
        return {"upstream": (State.UPSTREAM, 7), "someone-else": (State.FOREIGN, 8)}.get(
            e.goal, (State.APPLIED_UNSURE, 9)
        )
    if e.found == State.PENDING and e.journal and not e.stale and e.killed is None:
        return State.MODIFIED, 10
    if e.found == State.MISSING and e.neither and e.journal and not e.stale and e.killed is None:
        return State.MODIFIED, 11
    if e.marker and e.found in (State.PENDING, State.MISSING):
        return State.UPSTREAM, 12
    if e.found == State.PENDING:
        return (State.MOVED, 13) if e.moved else (State.PENDING, 14)
    return e.found, 15
