"""The one vocabulary of states, shared by ops, results, reports, drift, doctor and fork.

A ``str`` enum, so a state *is* its JSON string (``"applied"``) and `--json` output is
unchanged, while code compares members, never literals.  Ops answer with the first four
(where their site is, and whether their edit is there); the judge turns those into the
verdicts users see, which add *who* made an edit and where it went.
"""

from __future__ import annotations

from enum import Enum


class State(str, Enum):
    # What an op's locate finds (patchkit/ops): its site, and whether its edit is there.
    DONE = "done"  # the post-condition holds (who made the edit is for the judge to say)
    PENDING = "pending"  # anchor found, edit not yet made
    MISSING = "missing"  # anchor not found
    AMBIGUOUS = "ambiguous"  # several candidate sites
    # Verdicts (patchkit/core/judge.py): what status, apply, revert and drift report.
    APPLIED = "applied"  # post-condition holds, and the pristine release does not have it: patchkit's
    UPSTREAM = "upstream"  # the pristine release has the edit (or an upstream marker matches)
    APPLIED_UNSURE = "applied?"  # the edit is there; with no pristine release to compare, who made it is unknown
    # The edit is there, the pristine release does not have it, and no record of patchkit's
    # proves patchkit wrote it: someone else made it (a hand edit, another tool).  Its goal
    # is reached; apply writes nothing, revert never touches it; `patchkit adopt` takes it on.
    FOREIGN = "someone-else"
    MOVED = "moved"  # found, but not in the named file/scope
    SKIPPED = "skipped"  # out of version range; apply left it alone
    PARTIAL = "partial"  # some ops applied, some pending
    MODIFIED = "modified"  # patchkit applied it, but the code changed since
    BLOCKED = "blocked"  # a recipe's declared blocker stands: its goal is not reached, whatever its ops say
    INTERRUPTED = "interrupted"  # an apply/revert was killed mid-write; `apply` or `revert` finishes it

    # str() and format() give the value, as for a plain string ("applied", not "State.APPLIED").
    __str__ = str.__str__
    __format__ = str.__format__


# The states a recipe or op can have in results (DONE is an op's answer only).
VERDICTS = tuple(s for s in State if s is not State.DONE)
# A recipe in one of these is where the user asked it to be after `apply`: its edits are in
# the code.  (`applied?` too: the code does it; only *who* wrote it is unknown, which is
# revert's concern, and revert refuses it; `someone-else` likewise.)
GOOD = (State.APPLIED, State.UPSTREAM, State.APPLIED_UNSURE, State.FOREIGN)
