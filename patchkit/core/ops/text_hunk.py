"""text-hunk: a unified-diff hunk of whole lines, with its context: for C++/CUDA/CMake/shell
files, and for comments and layout in Python files (which Python ops do not see).

  params.hunk = '''
   #if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))
  -  cudaGridDependencySynchronize();
  +  cudaGridDependencySynchronize();  // SM120 too
   #endif
  '''
  params.count = 1        how many places hold it (default 1); any other number is an error

Each line starts with ' ' (context), '-' (upstream's line, taken out) or '+' (put in); an
``@@`` header is ignored, and ``\\ No newline at end of file`` says the line above ends the
file.  The hunk needs at least one context line, and a change.

Matching is exact: the hunk's upstream lines (context and '-') must stand in the file as
whole consecutive lines, byte for byte: whitespace, tabs and line endings included.  There
is no fuzz, no offset limit and no partial context, so a hunk never lands on a place whose
context differs.  On drift the same lines are searched for anywhere in the file (they may
have moved up or down) and, by relocation, in the other files of the tree (``moved``).
"""

from __future__ import annotations

from typing import Union

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register

NO_NEWLINE = "\\ No newline at end of file"
FUZZ = 2  # GNU patch's default fuzz factor: context lines it may ignore at each end of a hunk


def parse_hunk(src: str) -> tuple[list[str], list[str], int]:
    """(upstream lines, edited lines, context lines) of a hunk, each line with its newline."""
    old: list[str] = []
    new: list[str] = []
    last: list[list[str]] = []
    context = 0
    lines = src.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines and lines[0] == "":  # a TOML '''-string starts with the newline after the quotes
        lines.pop(0)
    for n, ln in enumerate(lines, 1):
        if ln.startswith("@@") and not old and not new:
            continue
        if ln.startswith("\\"):
            if ln.strip() != NO_NEWLINE or not last:
                raise OpParamError("params.hunk", f"line {n}: {ln!r} is not a hunk line")
            for side in last:
                side[-1] = side[-1][:-1]
            continue
        tag, body = ln[:1], ln[1:] + "\n"
        if tag == " ":
            old.append(body)
            new.append(body)
            context += 1
            last = [old, new]
        elif tag == "-":
            old.append(body)
            last = [old]
        elif tag == "+":
            new.append(body)
            last = [new]
        else:
            raise OpParamError(
                "params.hunk",
                f"line {n} starts with {tag!r}, not ' ', '-' or '+'",
                "write it as a unified-diff hunk: context lines start with a space",
            )
    return old, new, context


def _lines(block: str) -> int:
    return block.count("\n") + (0 if block.endswith("\n") else 1)


def _outside(runs: list[int], block: str, others: list[int], other: str) -> list[int]:
    """``runs`` of ``block`` that do not lie within a run of ``other``: lines added after (or
    before) context only on one side make the upstream lines a part of the edited ones, and
    there they are not the upstream place."""
    k, m = _lines(block), _lines(other)
    return [r for r in runs if not any(o <= r and r + k <= o + m for o in others)]


def _runs(text: str, block: str) -> list[int]:
    """1-based line numbers where ``block`` (whole lines) stands in ``text``."""
    out, start = [], 0
    while (i := text.find(block, start)) != -1:
        if (i == 0 or text[i - 1] == "\n") and (block.endswith("\n") or i + len(block) == len(text)):
            out.append(text.count("\n", 0, i) + 1)
        start = i + 1
    return out


@register("text-hunk")
class TextHunk(Op):
    language = "text"
    ANY_FILE = True  # a Python file's comments too
    SCOPED = False
    PARAMS = {"hunk": "str", "count": "int"}
    REQUIRED = ("params.hunk",)

    def __init__(self, locator: dict, params: dict) -> None:
        self.hunk = params["hunk"]
        old, new, context = parse_hunk(self.hunk)
        if old == new:
            raise OpParamError("params.hunk", "changes nothing (no '-' or '+' line)")
        if not context:
            raise OpParamError(
                "params.hunk", "has no context line", "keep at least one unchanged line around the change, with a space"
            )
        self.old, self.new = "".join(old), "".join(new)
        # Two context lines or more are the site's identity, carried in the recipe as a
        # unified diff carries it (GNU patch's fuzz never drops below two): wherever the op
        # matches them exactly is the site.  One line is a fragment, judged like any other.
        self.carries_identity = context >= 2
        self.count = params.get("count", 1)
        if self.count < 1:
            raise OpParamError("params.count", f"must be at least 1, not {self.count}")
        # Where the site stands, pending or done, its context lines do; the longest one is
        # the rarest word relocation greps for.
        ctx = [ln.strip() for ln in old if ln in new and ln.strip()]
        first = max(ctx, key=len) if ctx else ""
        self.reads = Reads(
            patterns=((self.old,), (self.new,)),
            file_words=(first,) if first else (),
            sites=((self.old,), (self.new,)),
        )
        self._first_change = next(i for i, (a, b) in enumerate(zip(old + [None], new + [None], strict=False)) if a != b)
        self._old_lines, self._new_lines = old, new
        self._trailing = next(
            i
            for i in range(len(old) + 1)
            if i >= min(len(old), len(new)) - self._first_change or old[-1 - i] != new[-1 - i]
        )

    # A Python file comes as its libcst module: the hunk reads and writes its text.
    @staticmethod
    def _text(scope) -> str:
        return scope if isinstance(scope, str) else scope.code

    @staticmethod
    def _back(scope, text: str):
        if isinstance(scope, str):
            return text
        import libcst as cst

        return cst.parse_module(text)

    def _both(self, text: str) -> tuple[list[int], list[int]]:
        """(upstream places, edited places), each not counting those inside one of the other."""
        olds, news = _runs(text, self.old), _runs(text, self.new)
        return _outside(olds, self.old, news, self.new), _outside(news, self.new, olds, self.old)

    def site_lines(self, line: int) -> tuple[int, int]:
        # A DONE node is the hunk's first changed line; the site is the whole edited block.
        return line - self._first_change, len(self._new_lines)

    def locate(self, scope: Union[str, object]) -> Located:
        text = self._text(scope)
        olds, news = self._both(text)
        at = self._first_change
        if len(olds) == self.count and not news:
            return Located(PENDING, tuple(n + at for n in olds))
        if len(news) == self.count and not olds:
            return Located(DONE, tuple(n + at for n in news))
        if not olds and not news:
            return Located(MISSING, reason="the hunk's lines (with their context) are not in the file")
        if olds and news:
            return Located(
                MISSING,
                tuple(n + at for n in olds + news),
                f"{len(olds)} upstream and {len(news)} edited places: partially edited",
            )
        found = olds or news
        return Located(
            AMBIGUOUS,
            tuple(n + at for n in found),
            f"expected {self.count} place(s) holding the hunk, found {len(found)} (widen its context, or give count)",
        )

    def fuzzed(self, text: str) -> tuple[list[int], list[int]]:
        """(upstream places, edited places) where the hunk stands with up to FUZZ of its
        context lines ignored at each end, GNU patch's fuzz (its default, 2): the least fuzz
        at which either side stands, never every context line of an end that has some.
        The line of each place is that of its first changed line.  For telling an edit
        upstream made with its context rewritten (fuzzed.py); apply and revert stay exact."""
        lead, trail = self._first_change, self._trailing
        old, new = self._old_lines, self._new_lines
        for fuzz in range(1, FUZZ + 1):
            a, b = max(0, min(fuzz, lead - 1)), max(0, min(fuzz, trail - 1))
            if fuzz > 1 and (a, b) == (max(0, min(fuzz - 1, lead - 1)), max(0, min(fuzz - 1, trail - 1))):
                continue  # no context line left to ignore: the same lines as one fuzz less
            if (a, b) == (0, 0):
                continue  # exactly the hunk (locate)
            o, n = "".join(old[a : len(old) - b]), "".join(new[a : len(new) - b])
            olds, news = _runs(text, o), _runs(text, n)
            olds, news = _outside(olds, o, news, n), _outside(news, n, olds, o)
            if olds or news:
                at = lead - a
                return [k + at for k in olds], [k + at for k in news]
        return [], []

    def is_applied(self, scope) -> bool:
        # The goal on its own: the edited lines stand as often as asked, upstream's nowhere.
        olds, news = self._both(self._text(scope))
        return len(news) == self.count and not olds

    def _swap(self, text: str, a: str, b: str) -> str:
        out, start = [], 0
        starts = set(_runs(text, a))
        line, pos = 1, 0
        while (i := text.find(a, start)) != -1:
            line += text.count("\n", pos, i)
            pos = i
            if line in starts:
                out.append(text[start:i])
                out.append(b)
                start = i + len(a)
            else:
                out.append(text[start : i + 1])
                start = i + 1
        out.append(text[start:])
        return "".join(out)

    def apply(self, scope):
        return self._back(scope, self._swap(self._text(scope), self.old, self.new))

    def revert(self, scope):
        return self._back(scope, self._swap(self._text(scope), self.new, self.old))
