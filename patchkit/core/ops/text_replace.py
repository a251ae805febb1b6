"""text-replace: for files libcst does not parse (.cu, .cuh, .h, CMake, shell).

  params.find    = "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
  params.replace = "(__CUDA_ARCH__ >= 900))"
  params.count   = 13         exact number of occurrences; any other number is an error

To be revertible, ``replace`` must not occur in the pristine file: revert turns every
occurrence of ``replace`` back into ``find``.  Give enough context to make both unique.
"""

from __future__ import annotations

import copy

from patchkit.core.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register


def lines_of(text: str, needle: str) -> tuple[int, ...]:
    out, start = [], 0
    while (i := text.find(needle, start)) != -1:
        out.append(text.count("\n", 0, i) + 1)
        start = i + len(needle)
    return tuple(out)


@register("text-replace")
class TextReplace(Op):
    language = "text"
    SCOPED = False
    PARAMS = {"find": "str", "replace": "str", "count": "int"}
    REQUIRED = ("params.find", "params.replace", "params.count")

    def __init__(self, locator: dict, params: dict) -> None:
        self.find, self.replace, self.count = params["find"], params["replace"], params["count"]
        if not self.find:
            raise OpParamError("params.find", "is empty")
        if not self.replace:
            raise OpParamError(
                "params.replace",
                "is empty",
                "keep some context around what you delete, so that revert knows where it goes",
            )
        if self.find == self.replace:
            raise OpParamError("params.replace", "equals params.find, so the op would change nothing")
        if self.replace in self.find or self.find in self.replace:
            raise OpParamError(
                "params.replace",
                "and params.find contain one another, so the edit could not be told from the original",
                "widen the context of both",
            )
        if self.count < 1:
            raise OpParamError("params.count", f"must be at least 1, not {self.count}")
        # The site holds either text (pending or done), so no one text is in every file holding it.
        self.reads = Reads(patterns=((self.find,), (self.replace,)))
        self._before: str | None = None  # the text an apply started from (relative_to)

    def relative_to(self, before: str) -> "TextReplace":
        if not isinstance(before, str) or before.count(self.find) != self.count or self.replace in before:
            return self  # not pending there
        bound = copy.copy(self)
        bound._before = before
        return bound

    def is_applied(self, text: str) -> bool:
        # The goal on its own: judged against the text an apply started from, the text is that
        # one with the replacement standing where each find stood and every other byte as it
        # was; without it, the replacement stands `count` times and the find nowhere.
        if self._before is None:
            return text.count(self.replace) == self.count and self.find not in text
        return text == self.replace.join(self._before.split(self.find))

    def locate(self, text: str) -> Located:
        olds, news = lines_of(text, self.find), lines_of(text, self.replace)
        if len(olds) == self.count and not news:
            return Located(PENDING, olds)
        if len(news) == self.count and not olds:
            return Located(DONE, news)
        if not olds and not news:
            return Located(MISSING, reason=f"`{self.find}` not found (expected {self.count})")
        if olds and news:
            return Located(
                MISSING, olds + news, f"{len(olds)} original and {len(news)} edited occurrences: partially edited"
            )
        found = olds or news
        return Located(
            AMBIGUOUS,
            found,
            f"expected exactly {self.count} occurrence(s), found {len(found)} "
            f"(lines {', '.join(map(str, found[:20]))})",
        )

    def apply(self, text: str) -> str:
        return text.replace(self.find, self.replace)

    def revert(self, text: str) -> str:
        return text.replace(self.replace, self.find)
