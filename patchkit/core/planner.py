"""The planner: every edit made in memory and checked, before anything is written.

``plan_apply`` and ``plan_revert`` take the judge's verdicts, make each op's edit (or its
inverse) on a value of its file (the document is only read: the edited states are the
planner's own), and run the ``CHECKS`` on it.  They return a ``Plan``, a frozen value: for
each file written a ``Planned`` (old and new bytes), the journal's changes as data, the
results and the blockers.  A plan with blockers writes nothing; otherwise
patchkit/core/transaction.py writes it.  Nothing here touches the disk.

The checks, each named in the message when it refuses an edit:

- ``post-condition``: after apply the op's ``is_applied`` holds (after revert it does not);
- ``idempotence``: after apply the op locates its edit as done, so a second apply changes
  nothing (after revert it reads pending again);
- ``round-trip``: the inverse edit gives back the original code, byte for byte;
- ``compile``: the edited file still compiles (``compile()``, not only ``ast.parse``: a
  ``return`` at module level parses but does not compile);
- ``names`` (apply): no scope an op edited is left with a name that is not defined there
  and was before the edit (pyflakes; patchkit/core/names.py);
- ``overlap``: no two edits touch the same code (``_overlaps``: two recipes' sites on one line,
  in the plan or in the journal; ``_overlapped``: an op that no longer reads as judged once
  the plan's earlier edits of its file are made).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import libcst as cst

from patchkit.base.errors import OpBug
from patchkit.base.journal import sha256
from patchkit.base.model import Recipe
from patchkit.base.results import RecipeResult
from patchkit.base.states import State
from patchkit.base.target import Target
from patchkit.core import blockers, proof, provenance
from patchkit.core.document import Document
from patchkit.core.judge import evaluate
from patchkit.core.ops._cst import same_code
from patchkit.core.session import Session
from patchkit.core.verdict import Verdict, cacheable, in_range, results


class Mark(NamedTuple):
    """A journal entry a plan makes: patchkit applied (or reverted) this op of this recipe."""

    action: str  # "applied" | "reverted"
    engine: str
    recipe: str
    recipe_sha: str
    op: int
    file: str = ""  # applied: the logical file of the op's site
    site: str = ""  # applied: the digest of the code the edit leaves there (patchkit/core/proof.py)


@dataclass(frozen=True)
class Planned:
    """One file a plan writes, a value: where it is, the bytes it has and the bytes it gets."""

    target: Target
    logical: str
    path: Path  # as the recipe names it, inside the target
    real: Path  # where the bytes are written (a symlink inside the target is written through)
    exists: bool
    original: bytes
    new: bytes
    encoding: str  # the file's own (PEP 263 for Python), to show its bytes as text
    viewed: bool = False  # edited through a view of the file (patchkit/core/view.py)

    @property
    def is_python(self) -> bool:
        return self.logical.endswith(".py")

    def where(self, line: Optional[int] = None) -> str:
        return f"{self.path}:{line}" if line else str(self.path)

    def decode(self, data: bytes) -> str:
        return data.decode(self.encoding, "replace")


@dataclass(frozen=True)
class Plan:
    """What apply or revert would do, every check done: a value (``plan_apply``,
    ``plan_revert``), which the transaction writes as it is."""

    results: tuple[RecipeResult, ...]
    blockers: tuple[str, ...] = ()
    files: tuple[Planned, ...] = ()  # files with new content
    marks: tuple[Mark, ...] = ()
    # The journal's other changes, as data (the transaction makes them, with the marks):
    # records of files the code contradicts, dropped; each engine's version written against.
    forget: tuple[tuple[str, str], ...] = ()  # (engine, logical file)
    versions: tuple[tuple[str, Optional[str]], ...] = ()  # (engine, version), sorted
    jit_modules: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    # Made only from what the session's digests and tree fingerprints name (verdict.cacheable):
    # the plan cache may keep it (patchkit/core/plancache.py).
    cacheable: bool = False

    def edits(self) -> set[tuple[str, int]]:
        """(recipe, op) of every op this plan edits (or forgets)."""
        return {(m.recipe, m.op) for m in self.marks}


# -- checks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One op's edit of one scope, for the checks: before and after, and the op's face."""

    op: object  # the op implementation (patchkit/ops)
    before: object  # scope before (libcst node or text)
    after: object
    forward: bool  # apply (True) or revert (False)
    python: bool
    force: bool = False  # revert --force: the user's own lines inside the edit may go with it


def check_post_condition(e: Edit) -> Optional[str]:
    if e.op.is_applied(e.after) != e.forward:
        said = "does not hold after apply" if e.forward else "still holds after revert"
        return f"the op's post-condition {said}"
    return None


def check_idempotence(e: Edit) -> Optional[str]:
    want = State.DONE if e.forward else State.PENDING
    after = e.op.locate(e.after).state
    if after != want:
        return f"after {'apply' if e.forward else 'revert'} the op reads {after}, so a second run would not be a no-op"
    return None


def check_round_trip(e: Edit) -> Optional[str]:
    back = e.op.revert(e.after) if e.forward else e.op.apply(e.after)
    same = same_code(back, e.before) if e.python else back == e.before
    if not same and e.force and not e.forward and e.python:
        # revert --force of an edit the user wrote comments or blank lines into: the same
        # code, if not the same bytes, comes back (the user's lines went with the edit).
        same = _same_ast(back, e.before)
    if not same:
        return (
            "the edit does not give back the original bytes when undone"
            " (is the recipe's upstream text exactly as upstream writes it?)"
        )
    return None


def _same_ast(a, b) -> bool:
    """Do two libcst nodes hold the same code, comments and layout aside?"""
    try:
        return ast.dump(ast.parse(_module_code(a))) == ast.dump(ast.parse(_module_code(b)))
    except SyntaxError:
        return False


def _module_code(node) -> str:
    return node.code if isinstance(node, cst.Module) else cst.Module(body=[node]).code


CHECKS: dict[str, Callable[[Edit], Optional[str]]] = {
    "post-condition": check_post_condition,
    "idempotence": check_idempotence,
    "round-trip": check_round_trip,
}


def compile_error(f: Document, state: Any) -> Optional[str]:
    """The ``compile`` check, on a whole edited file (``state``, as the planner edited it):
    None, or why it does not compile."""
    code, new = f.printed(state)
    whole = f.decode(new)
    # A view's code stands for the whole file and is cheaper to compile; a construct whose
    # binding the view left out (nonlocal) can fail there alone, so the whole file decides.
    for text in (code, whole) if f.view is not None else (whole,):
        try:
            compile(text, str(f.path), "exec", dont_inherit=True)
            return None
        except SyntaxError as e:
            err = e
        except ValueError as e:  # e.g. a NUL byte
            return f"{f.where()}: refused by the compile check: {e}"
    return f"{f.where(err.lineno)}: refused by the compile check: the edited file would not compile ({err.msg})"


def names_errors(f: Document, state: Any, evs: list[Verdict]) -> list[str]:
    """The ``names`` check, on an edited Python file (``state``): each name the edits leave undefined in
    a scope an op edited, that was not undefined there before (patchkit/core/names.py),
    named with the op that edits that scope."""
    from patchkit.core import names

    out = []
    for u in names.check(f, list(dict.fromkeys(ev.scope for ev in evs)), state):
        mine = [ev for ev in evs if ev.scope == u.scope] or evs
        ev = next((e for e in mine if u.name in repr(vars(e.op.impl))), mine[0])
        out.append(
            f"{ev.recipe.id} > {ev.op.label} > {f.where(u.line)}: refused by the names check: `{u.name}` is not"
            " defined after the edit (no import, assignment, definition or builtin of that name);"
            " import or define it in the recipe"
        )
    return out


# -- editing ----------------------------------------------------------------------------------


def _blocker(ev: Verdict, why: str) -> str:
    return f"{ev.recipe.id} > {ev.op.label} > {ev.file.where(ev.line)}: {why}"


def _edit(ev: Verdict, state: Any, forward: bool, force: bool = False) -> tuple[Optional[str], Any, str]:
    """Make one op's edit (or its inverse) on ``state``, a value of its file, if every check
    passes.  Returns (why not or None, the file's state after it, the digest of the site
    the edit leaves: the proof the journal keeps, "" for a revert)."""
    f, impl = ev.file, ev.impl or ev.op.impl  # ev.impl: bound where the judge needed a before
    if not f.round_trips():
        why = "libcst does not print this file back byte for byte, so rewriting it could lose text; edit it by hand"
        return why, state, ""
    chain, scope = f.scope(ev.scope, state)
    try:
        if forward:
            impl = impl.relative_to(scope)  # the checks judge the edit against where it started
        new = impl.apply(scope) if forward else impl.revert(scope)
        e = Edit(impl, scope, new, forward, f.is_python, force)
        for name, check in CHECKS.items():
            why = check(e)
            if why:
                return f"refused by the {name} check: {why}", state, ""
        site = proof.digest(impl, new, impl.locate(new)) if forward else ""
    except (ValueError, LookupError, cst.CSTValidationError) as err:  # the op says it cannot
        return f"cannot {'apply' if forward else 'revert'}: {err}", state, ""
    except Exception as err:
        raise OpBug(ev.recipe.id, ev.op.label, err) from err
    return None, f.splice(chain, new), site


def _overlapped(ev: Verdict, state: Any, forward: bool, earlier: list[Verdict]) -> Optional[str]:
    """The overlap refusal within one plan, for spans that do not start on one line (a whole
    statement replaced, and a string inside it): after the plan's earlier edits of the file
    (``state``), the op no longer reads as the judge read it on the file as it was."""
    if not earlier:
        return None
    want = State.PENDING if forward else State.DONE
    try:
        now = (ev.impl or ev.op.impl).locate(ev.file.scope(ev.scope, state)[1]).state
    except LookupError:  # the scope itself is gone
        now = State.MISSING
    if now == want:
        return None
    a = ev.scope or ""
    near = [
        e for e in earlier if not a or not e.scope or f"{a}.".startswith(f"{e.scope}.") or e.scope.startswith(f"{a}.")
    ]
    ops = " and ".join(dict.fromkeys(f"{e.recipe.id} > {e.op.label}" for e in near or earlier))
    return (
        f"refused by the overlap check: {ops} edits the same code first, and this op then reads {now}"
        f" there: the two cannot both be made. Refusing to {'apply' if forward else 'revert'}:"
        " keep one of them (or merge them into one)"
    )


class Edited(NamedTuple):
    """What ``_edit_all`` made, as values: the files to write, the op marks, the blockers,
    each edited op's result, and every edited file's bytes (``bytes_of``: what the blockers
    are looked for in, as the plan leaves them)."""

    files: tuple[Planned, ...]
    marks: tuple[Mark, ...]
    blockers: tuple[str, ...]
    overrides: dict
    jit_modules: frozenset[str]
    bytes_of: dict  # (engine, logical) -> new bytes, for every file an edit was made in


def _planned(f: Document, new: bytes) -> Planned:
    return Planned(f.target, f.logical, f.path, f.real, f.exists, f.original, new, f.encoding, f.view is not None)


def _edit_all(todo: list[Verdict], forward: bool, dry_run: bool, force: bool = False) -> Edited:
    """Make each op's edit (or its inverse) on the planner's own value of its file, in
    order; the documents are only read.  A dry run reports each edit as still to do."""
    action = "applied" if forward else "reverted"
    if dry_run:
        state, said = (State.PENDING, "would be applied") if forward else (State.APPLIED, "would be reverted")
    else:
        state, said = (State.APPLIED, "applied now") if forward else (State.PENDING, "reverted now")
    docs: dict[int, Document] = {}  # id(document) -> the document, in the order first edited
    states: dict[int, Any] = {}  # id(document) -> its state after the edits taken so far
    edited: dict[int, list[Verdict]] = {}  # id(document) -> the verdicts whose edit it took
    blocked: list[str] = []
    marks: list[Mark] = []
    jit: set[str] = set()
    overrides: dict = {}
    for ev in todo:
        k = id(ev.file)
        now = states.get(k)  # None: the file as read
        why = _overlapped(ev, now, forward, edited.get(k, []))
        site = ""
        if not why:
            why, after, site = _edit(ev, now, forward=forward, force=force)
        if why:
            blocked.append(_blocker(ev, why))
            continue
        docs.setdefault(k, ev.file)
        states[k] = after
        edited.setdefault(k, []).append(ev)
        marks.append(Mark(action, ev.op.engine, ev.recipe.id, ev.recipe.sha256, ev.op.index, ev.file.logical, site))
        jit.update(ev.op.jit_modules)
        overrides[(ev.recipe.id, ev.op.index)] = ev.result(state, said)
    files: list[Planned] = []
    bytes_of: dict = {}
    for k, f in docs.items():
        new = f.printed(states[k])[1]
        bytes_of[(f.target.engine, f.logical)] = new
        if new == f.original:
            continue
        why = compile_error(f, states[k]) if f.is_python else None
        if why:
            blocked.append(f"{why}; nothing was written")
            continue
        undefined = names_errors(f, states[k], edited[k]) if forward and f.is_python else []
        if undefined:
            blocked += [f"{why}; nothing was written" for why in undefined]
            continue
        files.append(_planned(f, new))
    return Edited(tuple(files), tuple(marks), tuple(blocked), overrides, frozenset(jit), bytes_of)


class Forgotten(NamedTuple):
    """The journal's changes besides the edits (``_forget_stale``), as data."""

    forget: tuple[tuple[str, str], ...]
    marks: tuple[Mark, ...]
    notes: tuple[str, ...]
    versions: tuple[tuple[str, Optional[str]], ...]


def _forget_stale(session: Session, evaluated, files, marks) -> Forgotten:
    """Records the code contradicts (an upgrade, a reinstall) are dropped with the write:
    the journal's entry for the file (``forget``), and the op marks of ops this plan does
    not edit.  The journal then records the version of each engine the plan writes into
    (``versions``).  Only the plan says so: the transaction changes the journal."""
    edits = {(m.recipe, m.op) for m in marks}
    stale: dict[str, set[str]] = {}
    forget: list[tuple[str, str]] = []
    more: list[Mark] = []
    notes: list[str] = []
    for _, evs in evaluated:
        for ev in evs:
            if not ev.stale:
                continue
            stale.setdefault(ev.op.engine, set()).add(ev.file.logical)
            forget.append((ev.op.engine, ev.file.logical))
            if (ev.recipe.id, ev.op.index) not in edits:
                more.append(Mark("reverted", ev.op.engine, ev.recipe.id, ev.recipe.sha256, ev.op.index))
    for engine, stale_files in sorted(stale.items()):
        was, now = session.journal(engine).version(engine), session.targets[engine].version
        if was and now and was != now:
            notes.append(
                f"{engine} was upgraded from {was} to {now} since patchkit last wrote it: its record of"
                f" {len(stale_files)} file(s) the upgrade replaced is dropped (those files are not your edits)"
            )
    engines = sorted({f.target.engine for f in files} | {m.engine for m in (*marks, *more)})
    versions = tuple((e, session.targets[e].version) for e in engines)
    return Forgotten(tuple(forget), tuple(more), tuple(notes), versions)


# The verdicts whose site holds (or is to hold) an edit a recipe answers for.
_HELD = (State.PENDING, State.APPLIED, State.APPLIED_UNSURE, State.FOREIGN)


def _applied_before(session: Session, evaluated) -> list:
    """The verdicts of every other recipe the journal says patchkit applied (``_overlaps``
    checks the plan's edits against theirs)."""
    mine = {r.id for r, _ in evaluated}
    others = []
    for engine in session.targets:
        j = session.journal(engine)
        for rid in sorted(j.engines.get(engine, {}).get("applied", {})):
            r = session.known.get(rid)
            if r is not None and rid not in mine and r not in others and set(r.engines) <= set(session.targets):
                others.append(r)
    return evaluate(session, others) if others else []


def _overlaps(session: Session, evaluated, action: str, before: list) -> list[str]:
    """Two recipes editing the same code, refused as ruff refuses overlapping fixes: the
    later edit would read as already made, and reverting either would take back both.
    The plan's recipes are checked against each other and against every recipe the
    journal says patchkit applied (``before``: _applied_before)."""
    mine = {r.id for r, _ in evaluated}
    everything = [*evaluated, *before]
    sites: dict[tuple, Verdict] = {}
    out = []
    for _, evs in everything:
        for ev in evs:
            if ev.state not in _HELD or not ev.lines:
                continue
            for line in ev.lines:
                key = (ev.op.engine, str(ev.file.path), line)
                first = sites.setdefault(key, ev)
                if first.recipe.id != ev.recipe.id and mine & {first.recipe.id, ev.recipe.id}:
                    out.append(
                        f"{first.recipe.id} > {first.op.label} and {ev.recipe.id} > {ev.op.label} edit the same code"
                        f" at {ev.file.where(line)}; reverting either would take back both. Refusing to {action}:"
                        " keep one of the two recipes (or merge them into one)"
                    )
                    break
    return out


# -- plans ------------------------------------------------------------------------------------


def plan_apply(session: Session, recipes: list[Recipe], ignore_range: bool = False, dry_run: bool = False) -> Plan:
    """Plan (and check) every edit that applying ``recipes`` needs: a frozen Plan."""
    evaluated = evaluate(session, recipes)
    blocked: list[str] = []
    skipped = set()
    for r, evs in evaluated:
        rng, _ = in_range(r, session)
        if rng is False and not ignore_range:
            skipped.add(r.id)
            continue
        for ev in evs:
            if ev.state in (State.MISSING, State.AMBIGUOUS, State.MODIFIED, State.MOVED):
                where = f" (at {ev.location()})" if ev.state == State.MOVED else ""
                blocked.append(_blocker(ev, f"{ev.state}: {ev.message}{where}"))
    kept = [(r, evs) for r, evs in evaluated if r.id not in skipped]
    before = _applied_before(session, kept)
    blocked += _overlaps(session, kept, "apply", before)
    cache = cacheable(session, evaluated) and cacheable(session, before)
    if blocked:
        return Plan(tuple(results(session, evaluated, {}, frozenset(skipped))), tuple(blocked), cacheable=cache)
    todo = [ev for r, evs in evaluated if r.id not in skipped for ev in evs if ev.state == State.PENDING]
    made = _edit_all(todo, forward=True, dry_run=dry_run)
    blocked += made.blockers
    gone = _forget_stale(session, evaluated, made.files, made.marks)
    standing = {}  # recipe id -> the blockers the plan's edits leave standing
    for r, _ in evaluated:  # what the edits leave standing
        if r.id not in skipped:
            standing[r.id] = blockers.find(session, r, planned=made.bytes_of)
            blocked += [
                f"{r.id} is blocked by {b.label} at {b.describe()}; its edits alone would not reach its goal"
                for b in standing[r.id]
            ]
    overrides = dict(made.overrides)
    for r, evs in evaluated:
        for ev in evs:
            if ev.state == State.APPLIED and (r.id, ev.op.index) not in overrides:
                overrides[(r.id, ev.op.index)] = ev.result(State.APPLIED, "already applied (nothing to do)")
            elif ev.state == State.FOREIGN:  # its goal is reached: never written a second time
                overrides[(r.id, ev.op.index)] = ev.result(State.FOREIGN, f"nothing to do: {ev.message}")
    blocked_now = {**evaluated.blocked, **standing}
    marks = made.marks
    if not blocked and made.marks:
        why, marks = _read_back(session, [r for r, _ in evaluated if r.id not in skipped], made, gone)
        blocked += why
    if blocked:  # a blocked plan writes nothing
        res = results(session, evaluated, {}, frozenset(skipped), blocked_now)
        return Plan(tuple(res), tuple(blocked), cacheable=cache)
    res = results(session, evaluated, overrides, frozenset(skipped), blocked_now)
    return Plan(
        tuple(res),
        (),
        made.files,
        marks + gone.marks,
        gone.forget,
        gone.versions,
        made.jit_modules,
        gone.notes,
        cache,
    )


def _read_back(session: Session, recipes: list[Recipe], made: Edited, gone: Forgotten) -> tuple[list[str], tuple]:
    """The read-back check, as Black checks its own output: the plan's bytes are judged by the
    same judge, as if written (Session.as_planned).  Every op the plan edits must read
    `applied`, by patchkit's own record, and the revert planned on those bytes must give back
    the bytes of every file exactly; otherwise (why, ...) names the op, and nothing is written.
    Returns (blockers, the marks, each with the digest of its site as the judge reads it
    there: the proof the journal keeps is the judge's own reading)."""
    from patchkit.core.transaction import journals_after

    trial = Plan((), (), made.files, made.marks + gone.marks, gone.forget, gone.versions)
    after = session.as_planned(
        {(f.target.engine, f.logical): f.new for f in made.files}, journals_after(session, trial)
    )
    wrote = {(m.recipe, m.op): m for m in made.marks}
    judged = evaluate(after, [r for r in recipes if any(m.recipe == r.id for m in made.marks)])
    out: list[str] = []
    marks = []
    by_key = {(r.id, ev.op.index): ev for r, evs in judged for ev in evs}
    for key, m in wrote.items():
        ev = by_key.get(key)
        if ev is None or ev.state != State.APPLIED:
            said = f"{ev.state}: {ev.message}" if ev is not None else "it is not judged at all"
            where = ev.file.where(ev.line) if ev is not None else m.file
            out.append(
                f"{m.recipe} > op #{m.op} > {where}: refused by the read-back check: after apply, patchkit would"
                f" read this op {said}, so it could not tell its own edit later; nothing was written"
            )
            continue
        marks.append(m._replace(file=ev.file.logical, site=proof.of_verdict(ev) or m.site))
    if out:
        return out, made.marks
    # The revert of this apply: of the ops it writes (an op someone else made stays out).
    mine = [
        dataclasses.replace(r, ops=tuple(o for o in r.ops if (r.id, o.index) in wrote))
        for r in recipes
        if any(m.recipe == r.id for m in made.marks)
    ]
    back = _plan_revert(after, mine, False, True)
    if back.blockers:
        return [
            f"refused by the read-back check: the revert of this apply could not be planned ({b}); nothing was written"
            for b in back.blockers
        ], made.marks
    undone = {(f.target.engine, f.logical): f.new for f in back.files}
    for f in made.files:
        if undone.get((f.target.engine, f.logical)) != f.original:
            out.append(
                f"{f.where()}: refused by the read-back check: reverting this apply would not give back the file's"
                " bytes exactly; nothing was written"
            )
    return out, tuple(marks)


def _changed_since_write(session: Session, f: Document, engine: str) -> Optional[str]:
    j = session.journal(engine)
    entry = j.written(engine, f.logical)
    if not entry or entry["sha256"] == sha256(f.original):
        return None
    before = j.written_bytes(engine, f.logical)
    if before is None:
        return "changed since patchkit wrote it"
    a = before.decode("utf-8", "replace").splitlines()
    b = f.text.splitlines()
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    spans = [f"{j1 + 1}-{j2}" if j2 - j1 > 1 else f"{j1 + 1}" for tag, i1, i2, j1, j2 in ops if tag != "equal"]
    return f"changed since patchkit wrote it (lines {', '.join(spans[:8]) or '?'} differ)"


_NO_REFERENCE = (
    "revert takes back only what it can prove is patchkit's: give it the pristine release"
    " (go online, or put the release's wheel in patchkit's cache with `patchkit sync`; unset PATCHKIT_OFFLINE)"
)


def plan_revert(session: Session, recipes: list[Recipe], force: bool = False, dry_run: bool = False) -> Plan:
    """Plan (and check) taking back what patchkit applied for ``recipes``: a frozen Plan."""
    return _plan_revert(session, recipes, force, dry_run)


def _plan_revert(session: Session, recipes: list[Recipe], force: bool, dry_run: bool) -> Plan:
    evaluated = evaluate(session, recipes)
    blocked: list[str] = []
    todo: list[Verdict] = []
    forgotten: list[Mark] = []
    overrides: dict = {}
    for r, evs in evaluated:
        for ev in evs:
            ours = ev.op.index in session.journal(ev.op.engine).applied_ops(ev.op.engine, r.id)
            if ev.state == State.APPLIED:
                todo.append(ev)
            elif ev.state == State.APPLIED_UNSURE:
                # --force too: it must never edit code the pristine release may have.
                blocked.append(_blocker(ev, f"{ev.state}: {ev.message}; {_NO_REFERENCE}"))
            elif ev.state == State.FOREIGN:
                # --force too: revert takes back only what patchkit can prove it wrote.
                blocked.append(
                    _blocker(
                        ev,
                        f"{ev.state}: someone else made this edit (nothing proves patchkit wrote it), so revert"
                        f" will not touch it, with or without --force; undo it by hand, or `patchkit adopt {r.id}`"
                        " first if it is patchkit's edit whose record was lost",
                    )
                )
            elif ev.state == State.MODIFIED or (ev.state in (State.MISSING, State.AMBIGUOUS) and ours):
                if force:
                    forgotten.append(Mark("reverted", ev.op.engine, r.id, r.sha256, ev.op.index))
                    said = "would be forgotten" if dry_run else "forgotten"
                    overrides[(r.id, ev.op.index)] = ev.result(State.PENDING, f"{said} (--force): {ev.message}")
                else:
                    why = f"{ev.state}: {ev.message}; revert it by hand, or pass --force to forget it"
                    blocked.append(_blocker(ev, why))
    if not force:
        seen: list[Document] = []
        for ev in todo:
            if ev.file in seen:
                continue
            seen.append(ev.file)
            why = _changed_since_write(session, ev.file, ev.op.engine)
            if why:
                blocked.append(
                    f"{ev.file.where()}: {why}; revert would rewrite a file you edited."
                    " Look at it, then pass --force to revert anyway"
                )
    before = _applied_before(session, evaluated)
    blocked += _overlaps(session, evaluated, "revert", before)
    cache = cacheable(session, evaluated) and cacheable(session, before)
    if blocked:
        return Plan(tuple(results(session, evaluated)), tuple(blocked), cacheable=cache)
    # last applied, first reverted
    made = _edit_all(list(reversed(todo)), forward=False, dry_run=dry_run, force=force)
    blocked += made.blockers
    for f in made.files:  # the invariant, --force or not: upstream's code is never reverted
        why = provenance.upstream_lines(
            session, f, [ev for ev in todo if ev.file.target is f.target and ev.file.logical == f.logical]
        )
        if why:
            blocked.append(why)
    marks = tuple(forgotten) + made.marks
    gone = _forget_stale(session, evaluated, made.files, marks)
    if blocked:
        return Plan(tuple(results(session, evaluated)), tuple(blocked), cacheable=cache)
    res = results(session, evaluated, {**overrides, **made.overrides})
    return Plan(
        tuple(res), (), made.files, marks + gone.marks, gone.forget, gone.versions, made.jit_modules, gone.notes, cache
    )


def plan_adopt(session: Session, recipes: list[Recipe], dry_run: bool = False) -> Plan:
    """Take on, on purpose, edits someone else made (``someone-else``): the journal records
    each as patchkit's, with the digest of the code at its site as it stands, so that
    `status` reads it `applied` and `revert` may take it back.  No target file is written.
    Meant for patchkit's own edits whose record was lost; an edit the pristine release holds
    (``upstream``) or whose maker is unknown (``applied?``) is never adopted."""
    evaluated = evaluate(session, recipes)
    marks: list[Mark] = []
    overrides: dict = {}
    blocked: list[str] = []
    said = "would be adopted" if dry_run else "adopted: patchkit's now (revert takes it back)"
    for r, evs in evaluated:
        for ev in evs:
            if ev.state != State.FOREIGN:
                continue
            site = proof.of_verdict(ev)
            if not site:
                blocked.append(_blocker(ev, "its site cannot be read back as code, so no proof of it can be kept"))
                continue
            marks.append(Mark("applied", ev.op.engine, r.id, r.sha256, ev.op.index, ev.file.logical, site))
            overrides[(r.id, ev.op.index)] = ev.result(State.FOREIGN if dry_run else State.APPLIED, said)
    cache = cacheable(session, evaluated)
    if blocked:
        return Plan(tuple(results(session, evaluated)), tuple(blocked), cacheable=cache)
    versions = tuple(sorted({(m.engine, session.targets[m.engine].version) for m in marks}))
    return Plan(tuple(results(session, evaluated, overrides)), (), (), tuple(marks), (), versions, cacheable=False)


def restored_notes(plan: Plan, journals: dict) -> list[str]:
    """After a write: which files are back to the bytes they had before patchkit, by the
    journals the write left (root -> Journal: transaction.journals_after)."""
    out = []
    for f in plan.files:
        entry = journals[f.target.root].written(f.target.engine, f.logical)
        if entry and entry["pristine"] == sha256(f.new):
            out.append(f"{f.where()}: restored byte for byte")
    return out


def unified_diff(files, reverse: bool = False) -> str:
    """A diff per file (``Planned``), with paths relative to the target root (``git apply`` there)."""
    out = []
    for f in files:
        old, new = f.decode(f.original), f.decode(f.new)
        if reverse:
            old, new = new, old
        rel = f.target.relpath(f.logical)
        out += difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
    return "".join(out)
