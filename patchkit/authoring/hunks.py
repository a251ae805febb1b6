"""capture's lower half: what it finds (CapturedOp, Unexpressed), a file's line hunks, and
text files as text-hunk ops.  patchkit/authoring/pycapture.py (Python files) and patchkit/authoring/capture.py
(the driver over a whole tree) both build on it; it imports neither."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Optional

from patchkit.base.states import State

# -- what capture finds -------------------------------------------------------------------------


@dataclass
class CapturedOp:
    kind: str
    engine: str
    file: str
    scope: str = ""
    locator: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    hunks: str = ""  # which lines of the edited file it makes, for messages
    jit_modules: tuple = ()  # the JIT modules its edit reaches (`gates --draft`: an arch list's)


@dataclass
class Unexpressed:
    engine: str
    file: str  # logical
    line: int  # in the edited file (0: the whole file)
    why: str

    def __str__(self) -> str:
        return f"{self.engine}:{self.file}{f':{self.line}' if self.line else ''}: {self.why}"


# -- hunks ----------------------------------------------------------------------------------------


class Lines:
    """A file's pristine and edited lines, and its line hunks (difflib opcodes that differ)."""

    def __init__(self, old: str, new: str) -> None:
        self.a, self.b = old.splitlines(True), new.splitlines(True)
        ops = self.ops = difflib.SequenceMatcher(None, self.a, self.b, autojunk=False).get_opcodes()
        self.hunks = []
        for tag, i1, i2, j1, j2 in ops:
            if tag == "replace" and i2 - i1 == j2 - j1:  # line for line: one hunk per line (a run
                # of them can still be claimed by one op, see _claims)
                self.hunks += [("replace", i1 + n, i1 + n + 1, j1 + n, j1 + n + 1) for n in range(i2 - i1)]
            elif tag != "equal":
                self.hunks.append((tag, i1, i2, j1, j2))

    def text(self, done: set[int]) -> str:
        """The pristine text with the hunks ``done`` (indices) applied."""
        out, i = [], 0
        for k, (_, i1, i2, j1, j2) in enumerate(self.hunks):
            out += self.a[i:i1]
            out += self.b[j1:j2] if k in done else self.a[i1:i2]
            i = i2
        out += self.a[i:]
        return "".join(out)


def _claims(lines: Lines, done: set[int], k: int, got: str) -> Optional[set[int]]:
    """The hunks k..m (m >= k) whose application to the pristine text, with ``done``, gives
    exactly ``got``; None if no run of hunks starting at k does."""
    run: set[int] = set()
    for m in range(k, min(k + 6, len(lines.hunks))):
        run.add(m)
        if lines.text(done | run) == got:
            return set(run)
    return None


# -- text files -----------------------------------------------------------------------------------


CONTEXTS = (3, 6, 12, 24)  # lines of context tried, as `diff -U` does: more only where needed


def hunk_text(a: list[str], b: list[str], group: list[tuple]) -> str:
    """A unified-diff hunk (without its ``@@`` line) of one difflib opcode group: whole lines,
    context with ' ', upstream's with '-', the edit's with '+'."""
    out = []

    def put(tag: str, lines: list[str]) -> None:
        for ln in lines:
            out.append(tag + ln if ln.endswith("\n") else f"{tag}{ln}\n\\ No newline at end of file\n")

    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            put(" ", a[i1:i2])
        else:
            put("-", a[i1:i2])
            put("+", b[j1:j2])
    return "".join(out)


def text_hunks(old: str, new: str) -> Optional[list[tuple[str, int, int]]]:
    """(hunk, count, first edited line) per change of a text file, with as much context as
    makes each hunk stand at exactly the places it changes (identical hunks become one op
    with a count); None when no context up to the file's size does."""
    from patchkit.core.ops import OpParamError
    from patchkit.core.ops.text_hunk import TextHunk

    a, b = old.splitlines(True), new.splitlines(True)
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for c in CONTEXTS:
        groups = list(sm.get_grouped_opcodes(c))
        out: dict[str, list[int]] = {}
        for g in groups:
            out.setdefault(hunk_text(a, b, g), []).append(next(j1 for t, _, _, j1, _ in g if t != "equal") + 1)
        cur, ok = old, True
        for hunk, lines in out.items():
            try:
                op = TextHunk({}, {"hunk": hunk, "count": len(lines)})
            except OpParamError:
                ok = False
                break
            if op.locate(cur).state != State.PENDING:
                ok = False
                break
            cur = op.apply(cur)
        if ok and cur == new:
            return [(h, len(lines), lines[0]) for h, lines in out.items()]
    return None


def capture_text(engine: str, logical: str, old: str, new: str) -> tuple[list[CapturedOp], list[Unexpressed]]:
    """A text file's changes as text-hunk ops: whole lines with context, never fragments."""
    got = text_hunks(old, new)
    if got is None:
        lines = Lines(old, new)
        at = lines.hunks[0][3] + 1 if lines.hunks else 0
        why = (
            f"nearest op kind text-hunk, which does not fit: no context of up to {CONTEXTS[-1]} lines tells its"
            " changes apart from the rest of the file (the same lines stand elsewhere, changed differently)"
        )
        if not set(old.splitlines(True)) & set(new.splitlines(True)):
            why = "nearest op kind text-hunk, which does not fit: no line of the file is left unchanged to anchor it on"
        return [], [Unexpressed(engine, logical, at, why)]
    ops = []
    for hunk, count, line in got:
        params: dict = {"hunk": hunk}
        if count > 1:
            params["count"] = count
        ops.append(CapturedOp("text-hunk", engine, logical, params=params, hunks=f"line {line}"))
    return ops, []


def _claims_any(lines: Lines, done: set[int], k: int, got: str) -> Optional[set[int]]:
    """Like _claims, but the hunks made may be any set holding k (a text-replace with a count
    makes the same change in several places): the hunks whose pristine lines ``got`` changed."""
    run = _claims(lines, done, k, got)
    if run is not None:
        return run
    touched: list[tuple[int, int]] = []
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, lines.a, got.splitlines(True), autojunk=False).get_opcodes():
        if tag != "equal":
            touched.append((i1, i2))
    claim = {
        m
        for m, (_, i1, i2, _, _) in enumerate(lines.hunks)
        if m not in done and any(lo <= max(i1, i2 - 1) and i1 <= hi for lo, hi in touched)
    }
    if k in claim and lines.text(done | claim) == got:
        return claim
    return None


# -- the recipe as TOML ---------------------------------------------------------------------------


def toml_str(s: str) -> str:
    """A TOML string whose value is exactly ``s``: a literal string where one can say it."""
    ctrl = any((ord(ch) < 32 and ch not in "\n\t") or ord(ch) == 127 for ch in s)
    if not ctrl and "\n" not in s and "'" not in s:
        return f"'{s}'"
    if not ctrl and "\n" in s and "'''" not in s and not s.endswith("'"):
        return "'''\n" + s + "'''"
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")
