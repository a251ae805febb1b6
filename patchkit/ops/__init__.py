"""Op kinds.  One small module per kind, each registering itself with ``@register``.

Every op has the same face and does no I/O:

    locate(scope)      -> Located   where the edit goes, and whether it is there already
    is_applied(scope)  -> bool      the post-condition
    apply(scope)       -> scope'    the edited scope (only when locate says PENDING)
    revert(scope)      -> scope'    the exact inverse of apply (only when locate says DONE)

Python ops take and return a libcst node (the recipe's scope: a Module, ClassDef or
FunctionDef).  Text ops take and return a ``str``.  The engine (patchkit/engine.py)
does the reading, the checking and the writing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

DONE = "done"
PENDING = "pending"
MISSING = "missing"
AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Located:
    state: str  # DONE | PENDING | MISSING | AMBIGUOUS
    nodes: tuple = ()  # site node(s) for line numbers; candidates when AMBIGUOUS
    reason: str = ""


class OpParamError(ValueError):
    """Raised by an op's constructor; recipe.py adds the breadcrumb."""

    def __init__(self, field: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.hint = hint


class Op:
    kind: ClassVar[str]
    language: ClassVar[str] = "python"  # or "text"
    # Accepted keys and their types ("str", "int", "bool", "list[str]"), checked by recipe.py.
    LOCATOR: ClassVar[dict[str, str]] = {}
    PARAMS: ClassVar[dict[str, str]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # required keys, as "locator.x" / "params.y"
    SCOPED: ClassVar[bool] = True  # False: scope must be module level
    RELOCATABLE: ClassVar[bool] = True  # False: the edit only means something in its own file
    # True when the op compares whole statements (a def or class may be one); views then
    # keep a def or class holding one of its patterns whole instead of reading inside it.
    STATEMENTS: ClassVar[bool] = False

    def locate(self, scope: Any) -> Located:  # pragma: no cover - interface
        raise NotImplementedError

    def is_applied(self, scope: Any) -> bool:
        return self.locate(scope).state == DONE

    def apply(self, scope: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def revert(self, scope: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def literals(self) -> tuple[str, ...]:
        """Code fragments whose words any file holding this op's site contains (prefilter)."""
        return ()

    def prefilter(self, text: str) -> bool:
        """A cheap test on a file's text: False means the site cannot be in this file."""
        return True

    def reads(self) -> tuple[tuple[str, ...], ...] | None:
        """What this op looks at in its scope, for views (patchkit/view.py): patterns, each a
        tuple of code fragments.  A statement holding no pattern's every word is never
        looked at, in either state, whether it would be a site or only a candidate that makes
        the site ambiguous.  None: every statement of the scope."""
        return None


KINDS: dict[str, type[Op]] = {}


def register(kind: str) -> Callable[[type[Op]], type[Op]]:
    def deco(cls: type[Op]) -> type[Op]:
        cls.kind = kind
        KINDS[kind] = cls
        return cls

    return deco


def _load_all() -> None:
    # Importing the modules runs their @register decorators.
    import importlib

    for name in (
        "ensure_import",
        "insert",
        "list_element",
        "or_operand",
        "replace_expr",
        "set_default",
        "text_replace",
    ):
        importlib.import_module(f"patchkit.ops.{name}")


_load_all()
