"""Op kinds.  One small module per kind, each registering itself with ``@register``; every
module here whose name does not start with ``_`` is imported (``_load_all``), so adding a
kind is adding a module.

Every op has the same face and does no I/O:

    locate(scope)      -> Located   where the edit goes, and whether it is there already
    is_applied(scope)  -> bool      the post-condition
    apply(scope)       -> scope'    the edited scope (only when locate says PENDING)
    revert(scope)      -> scope'    the exact inverse of apply (only when locate says DONE)

and two pieces of data that its constructor sets from its locator and params:

    reads              Reads        the words it looks for: views (patchkit/core/view.py) and
                                    relocation (patchkit/core/relocate.py) derive every filter
                                    from this; an op has no filtering code of its own
    context_files      tuple[str]   other files its verdict depends on; the judge reads them
                                    and asks ``check_context(texts)``

Python ops take and return a libcst node (the recipe's scope: a Module, ClassDef or
FunctionDef).  Text ops take and return a ``str``.  The judge, planner and transaction
(patchkit/core/judge.py, planner.py, transaction.py) do the reading, the checking and the writing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

from patchkit.base.states import State

# What locate answers: members of the one state vocabulary (patchkit/base/states.py).
DONE, PENDING, MISSING, AMBIGUOUS = State.DONE, State.PENDING, State.MISSING, State.AMBIGUOUS


@dataclass(frozen=True)
class Located:
    state: State  # DONE | PENDING | MISSING | AMBIGUOUS
    # Site node(s) for line numbers; candidates when AMBIGUOUS.  MISSING with nodes: the site
    # is there but holds neither side of the edit (the judge says `modified` where patchkit's
    # edit was).
    nodes: tuple = ()
    reason: str = ""


Patterns = tuple[tuple[str, ...], ...]  # alternatives, each a tuple of code fragments


@dataclass(frozen=True)
class Reads:
    """The words an op reads, as data.  A fragment is a piece of code: views compare its
    words (identifiers and string contents), relocation its tokens in order with any layout
    (or, for a text op, its exact text).

    patterns         The candidates: a statement of the op's scope that holds no pattern's
                     every fragment is never looked at, in either state, whether it would be
                     the site or only a candidate that makes the site ambiguous (views leave
                     it out).  None: every statement.  (): none but the module's top-level
                     imports, which every view keeps.
    whole_statements The op compares whole statements (a def or class may be one): views keep
                     a def or class holding a pattern whole instead of reading inside it.
    file_words       Fragments whose words every file holding the site contains, done or
                     pending (relocation greps for them, and scans the scopes holding them).
    sites            The site, done or pending, stands in one statement holding every fragment
                     of one of these alternatives (in its own text: without the statements
                     nested in it, unless whole_statements).  Relocation skips a file where none
                     does.  Left out: the same as ``patterns`` (anywhere when that is None);
                     ``((),)``: anywhere.
    shallow          Every candidate is a simple statement directly in the scope's body (a
                     class's field, a module's import) or the scope's own header (a def's
                     parameter): a compound statement nested in the scope (a method, an
                     ``if``) never holds one.  A view shows the op only those simple
                     statements (a method holding its words is left out for it), and its
                     answer is confirmed on the scope with the compound statements left out
                     (Document.shallow_scope), so a 6,000-line class is not parsed to confirm
                     one field.
    """

    patterns: Optional[Patterns] = None
    whole_statements: bool = False
    file_words: tuple[str, ...] = ()
    sites: Optional[Patterns] = None
    shallow: bool = False

    def __post_init__(self) -> None:
        if self.sites is None:
            object.__setattr__(self, "sites", self.patterns)


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
    ANY_FILE: ClassVar[bool] = False  # a text op that also edits Python files (as text)
    # Accepted keys and their types ("str", "int", "bool", "list[str]"), checked by recipe.py.
    LOCATOR: ClassVar[dict[str, str]] = {}
    PARAMS: ClassVar[dict[str, str]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # required keys, as "locator.x" / "params.y"
    # Semantics, not speed hints: both change what an op means, not only how fast it is found.
    SCOPED: ClassVar[bool] = True  # False: the op works on the whole file; a recipe gives it no scope
    RELOCATABLE: ClassVar[bool] = True  # False: the edit only means something in its own file

    # Set by each op's constructor from its locator and params (see Reads).  The default
    # reads every statement and lets relocation look anywhere: right for any op, only slower.
    reads: Reads = Reads()
    # Logical names of other files of the same target that the op's verdict depends on.
    context_files: tuple[str, ...] = ()

    def locate(self, scope: Any) -> Located:  # pragma: no cover - interface
        raise NotImplementedError

    def is_applied(self, scope: Any) -> bool:
        return self.locate(scope).state == DONE

    def apply(self, scope: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def revert(self, scope: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def site_text(self, scope: Any, located: Located) -> str:
        """The code at the site ``located`` found in ``scope``, as it reads: what the
        provenance proof digests (patchkit/core/proof.py).  Python ops: each site node's
        code; a text op: its lines (``site_lines``)."""
        if located.nodes and all(isinstance(n, int) for n in located.nodes):
            text = scope if isinstance(scope, str) else scope.code
            lines = text.splitlines(True)
            out = []
            for n in located.nodes:
                first, count = self.site_lines(n)
                out.append("".join(lines[max(first - 1, 0) : first - 1 + count]))
            return "\x00".join(out)
        import libcst as cst

        empty = cst.Module(body=[])
        return "\x00".join(empty.code_for_node(n) for n in located.nodes)

    def site_lines(self, line: int) -> tuple[int, int]:
        """(first line, number of lines) of a text op's site whose node is ``line``."""
        return line, 1

    def relative_to(self, before: Any) -> "Op":
        """This op judged against ``before``, a state of its scope where it reads pending
        (the scope an apply started from, or the pristine release's).  An op whose done
        sites cannot be told from the code alone (replace-expr making a ``None`` where
        other ``None``s stand) finds them by what ``before`` held at each place; the
        rest need nothing more and return themselves."""
        return self

    def each(self, located: Located) -> tuple[Located, ...]:
        """An AMBIGUOUS answer's candidates as sites of their own (each PENDING or DONE), for
        relocation to score one by one against the site's identity: a scope that now holds
        the pattern several times may still hold the site once, singled out by its context.
        () when its candidates are not sites one by one (the default)."""
        return ()

    def occurrences(self, scope: Any) -> tuple[Located, ...]:
        """Each place in ``scope`` where the op's edit is to be made (PENDING) or stands made
        (DONE), in document order, as a site of its own: the judge scores them one by one
        against the site's identity when the scope holds several (the op then reads
        ambiguous or partially edited), and binds the op to the one singled out (``only``).
        () when the op's places are not sites one by one (the default)."""
        return ()

    def only(self, scope: Any, k: int) -> "Op":
        """This op bound to the k-th of ``occurrences(scope)``: it locates, applies, reverts
        and checks its post-condition there alone (in ``scope``, and in that scope edited).
        Only called where ``occurrences`` offered k (an op that offers none need not bind)."""
        raise NotImplementedError

    def check_context(self, texts: dict[str, Optional[str]]) -> Optional[Located]:
        """The verdict's dependence on ``context_files``, given their texts (None: the file
        does not exist).  The judge asks when the site is PENDING: None keeps that verdict,
        a Located (MISSING, with a reason) replaces it."""
        return None


KINDS: dict[str, type[Op]] = {}


def register(kind: str) -> Callable[[type[Op]], type[Op]]:
    def deco(cls: type[Op]) -> type[Op]:
        cls.kind = kind
        KINDS[kind] = cls
        return cls

    return deco


def _load_all() -> None:
    """Import every op module of this package (not the ``_private`` helpers): importing one
    runs its ``@register``."""
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


_load_all()
