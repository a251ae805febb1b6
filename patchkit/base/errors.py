"""The only exceptions patchkit raises on purpose.

Everything a user can get wrong (a recipe, a target, a flag) is a `PatchkitError`.
The CLI's one top-level handler turns it into a single line on stderr and exit 2.
Outcomes of patching (missing anchor, ambiguous match, ...) are *values*, not exceptions.
"""

from __future__ import annotations


class PatchkitError(Exception):
    """A usage, recipe or target error: one line for the user, exit code 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class RecipeError(PatchkitError):
    """A recipe file is malformed; raised while loading, before any target is read."""


class TargetError(PatchkitError):
    """A target tree is absent, of an unknown layout, locked, or would be escaped."""


class FetchError(PatchkitError):
    """Downloading or verifying an upstream artifact failed."""


class OpBug(Exception):
    """An op's own code failed (a bug in patchkit or in a plugged-in op kind, not a verdict):
    exit 3, naming the recipe and the op."""

    def __init__(self, recipe: str, op: str, cause: BaseException) -> None:
        super().__init__(f"{recipe} > {op}: {type(cause).__name__}: {cause}")
