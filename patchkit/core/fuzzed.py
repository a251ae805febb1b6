"""A text hunk upstream made with its context rewritten: its edited lines, with fuzz.

A text-hunk matches exactly (ops/text_hunk.py), so after upstream makes the hunk's change
*and* rewrites a line of its context (``TORCH_CHECK(`` -> ``STD_TORCH_CHECK(``, a new check
above), or moves its file, the hunk reads ``missing``, and the user would carry a patch that
is already in.  GNU patch, asked to apply it, would say "Reversed (or previously applied)
patch detected": it finds the hunk's edited side with up to two context lines ignored at
each end (its default fuzz factor).  So does this, to read ``upstream`` and nothing else:

* the edited side stands, with that fuzz (``TextHunk.fuzzed``, never every context line of
  an end), as many times as the hunk is asked for, in one file of the tree: the named one,
  or else (it moved) the one file that holds it so, or of several (a twin of the code in
  another kernel) the one of the named file's basename, as git breaks a tie between
  rename sources; and the upstream side stands with that fuzz nowhere there;
* the hunk adds a line that is not blank (what it takes away alone leaves nothing to find);
* the pristine release (the reference) holds it so too: provenance by content.  The same
  lines with no reference, or not in the reference (an edit by hand), read ``missing``:
  never ``applied`` (revert, which is exact, would not find them) and never ``pending``
  (apply's lines are not there).
"""

from __future__ import annotations

import os
from typing import Optional

from patchkit.base.model import OpSpec
from patchkit.core.ops.text_hunk import FUZZ

MAX_FILES = 64  # files holding the hunk's added line (relocate.MAX_CANDIDATES)


def _added(op: OpSpec) -> bytes:
    """The longest line the hunk adds (stripped), as bytes to grep for; b"" when it adds none."""
    old = set(op.impl._old_lines)
    added = [ln.strip() for ln in op.impl._new_lines if ln not in old and ln.strip()]
    return max(added, key=len).encode() if added else b""


def _places(op: OpSpec, text: str) -> Optional[list[int]]:
    """The edited side's places with fuzz, when they are as many as asked and the upstream
    side stands nowhere with that fuzz; None otherwise."""
    olds, news = op.impl.fuzzed(text)
    return news if news and not olds and len(news) == op.impl.count else None


def upstream(session, op: OpSpec, named) -> Optional[tuple[object, int, str]]:
    """(document, line, why) where the tree holds the hunk's edited side with fuzz, and the
    pristine release holds it there too; (None, 0, why) where no pristine release can be
    read to tell whose it is; None otherwise."""
    from patchkit.core import relocate

    if not hasattr(op.impl, "fuzzed"):
        return None
    word = _added(op)
    if not word:
        return None  # a hunk that only takes lines away leaves nothing of its own to find
    docs = [named] if named.exists else []
    if not docs:  # the file moved: the one file that holds the hunk's added line
        target = session.sweep(op.engine)
        files = relocate.candidates(target, os.path.splitext(op.file)[1], (word,))
        if len(files) > MAX_FILES:
            return None
        held = [logical for logical, data in relocate.read_each(files) if word in data]
        docs = [session.file(op.engine, lf) for lf in held]
    found = [(d, p) for d in docs if d.exists for p in [_places(op, d.text)] if p is not None]
    if len(found) > 1:  # a twin (the same check in a MoE kernel): git's tie-break, the basename
        base = os.path.basename(op.file)
        found = [(d, p) for d, p in found if os.path.basename(d.logical) == base]
    if len(found) != 1:
        return None
    doc, places = found[0]
    where = f"{doc.logical}:{places[0]}"
    ref = session.reference(op.engine)
    if not ref.available:
        return (
            None,
            0,
            (
                f"{where} holds this hunk's edited lines, its context changed; whose they are cannot be told"
                f" (no pristine release to compare: {ref.why_not})"
            ),
        )
    data = ref.read(doc.logical)
    if data is None or _places(op, data.decode("utf-8", "surrogateescape")) is None:
        return None
    why = (
        f"{ref.what} has this hunk's edited lines at {where}, its context changed"
        f" (up to {FUZZ} context lines ignored at each end, GNU patch's fuzz); the hunk itself no longer matches"
    )
    return doc, places[0], why
