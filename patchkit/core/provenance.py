"""The revert invariant: revert never changes bytes that the reference holds at the site it
reverts.

The judge decides who made an edit by content (judge.at_site): upstream's own code reads
``upstream``, and revert leaves it alone.  This is the backstop for the day it does not
(a refactor nobody foresaw, a vendor fork): after revert's edits are made in memory, every
line they remove or rewrite is looked for in the pristine release and, for a git checkout,
its committed code (HEAD), in the edited file's copy there and in the copy of each
reverted op's named file.  A line the reference holds *in place* (within a run of RUN or
more lines the two have in the same order, as ``difflib`` aligns them) is upstream's: the
plan is refused, naming both places.  patchkit's own edit never passes that test: its
lines are exactly the ones the reference does not have there.
"""

from __future__ import annotations

import difflib
from typing import Optional

RUN = 3  # lines the file and the reference share in order around a line, for it to be the reference's


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "surrogateescape").splitlines()


def _changed(old: list[str], new: list[str]) -> list[int]:
    """0-based lines of ``old`` that ``new`` removes or rewrites (non-blank ones).  The lines
    both start and end with are kept as they stand (as git's diff keeps them): only what
    lies between is aligned, a few lines of a file of thousands (a whole-file alignment
    took 60 ms a revert on SGLang's server_args.py)."""
    lo, end = 0, min(len(old), len(new))
    while lo < end and old[lo] == new[lo]:
        lo += 1
    hi = 0
    while hi < end - lo and old[-1 - hi] == new[-1 - hi]:
        hi += 1
    a, b = old[lo : len(old) - hi], new[lo : len(new) - hi]
    out = []
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            out += [lo + i for i in range(i1, i2) if a[i].strip()]
    return out


def _kept(old: list[str], new: list[str], ref: list[str]) -> bool:
    """Does ``new`` keep, in order, every line of ``old`` the reference holds in place?  A
    diff of ``old`` and ``new`` may say a line upstream holds went where an identical line of
    patchkit's went (an arm added after an arm with the same body: which of the two bodies
    the revert "removed" is a choice of the aligner, the bytes are the same either way); the
    revert changes upstream's code only when no alignment keeps all of it."""
    want = [
        old[a + k]
        for a, _, size in difflib.SequenceMatcher(None, old, ref, autojunk=False).get_matching_blocks()
        if size >= RUN
        for k in range(size)
    ]
    it = iter(new)
    return all(any(line == n for n in it) for line in want)


def held(old: list[str], changed: list[int], ref: list[str]) -> Optional[tuple[int, int]]:
    """(line of ``old``, line of ``ref``), 1-based, of the first changed line the reference
    holds in place (in a matching run of at least RUN lines); None when it holds none."""
    if not changed:
        return None
    want = set(changed)
    for a, b, size in difflib.SequenceMatcher(None, old, ref).get_matching_blocks():
        if size < RUN:
            continue
        for k in range(size):
            if a + k in want:
                return a + k + 1, b + k + 1
    return None


def upstream_lines(session, f, evs) -> Optional[str]:
    """Why reverting ``evs`` in file ``f`` (a planner.Planned: its original and new bytes)
    would change code a reference holds, or None when it would not."""
    old = _lines(f.original)
    changed = _changed(old, _lines(f.new))
    if not changed:
        return None
    engine = evs[0].op.engine
    refs = [session.reference(engine), session.head(engine)]
    for ref in refs:
        if ref is None or not ref.available:
            continue
        for logical in dict.fromkeys([f.logical, *(ev.op.file for ev in evs)]):
            data = ref.read(logical)
            if data is None:
                continue
            ref_lines = _lines(data)
            hit = held(old, changed, ref_lines)
            if hit and _kept(old, _lines(f.new), ref_lines):
                hit = None  # another alignment of the same bytes removes only patchkit's lines
            if hit:
                ops = ", ".join(f"{ev.recipe.id} > {ev.op.label}" for ev in evs)
                return (
                    f"{f.where(hit[0])}: revert ({ops}) would change code that {ref.what} holds"
                    f" ({logical}:{hit[1]}): it is upstream's, not patchkit's edit; nothing was written."
                    " Check where the code came from; `patchkit status --json` names the site patchkit judged"
                )
    return None
