"""The planner: every edit made in memory and checked, before anything is written.

``plan_apply`` and ``plan_revert`` take the judge's verdicts, make each op's edit (or its
inverse) on its document, and run the ``CHECKS`` on it.  A plan with blockers writes
nothing; otherwise patchkit/core/transaction.py writes it.  Nothing here touches the disk.

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
import difflib
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

import libcst as cst

from patchkit.base.errors import OpBug
from patchkit.base.journal import sha256
from patchkit.base.model import Recipe
from patchkit.base.results import RecipeResult
from patchkit.base.states import State
from patchkit.core import blockers, provenance
from patchkit.core.document import Document
from patchkit.core.judge import Session, Verdict, cacheable, evaluate, in_range, results
from patchkit.core.ops._cst import same_code


class Mark(NamedTuple):
    """A journal entry a plan makes: patchkit applied (or reverted) this op of this recipe."""

    action: str  # "applied" | "reverted"
    engine: str
    recipe: str
    recipe_sha: str
    op: int


@dataclass
class Plan:
    results: list[RecipeResult]
    blockers: list[str] = field(default_factory=list)
    files: list[Document] = field(default_factory=list)  # files with new content
    marks: list[Mark] = field(default_factory=list)
    # The journal's other changes, as data (the transaction makes them, with the marks):
    # records of files the code contradicts, dropped; each engine's version written against.
    forget: list[tuple[str, str]] = field(default_factory=list)  # (engine, logical file)
    versions: dict[str, Optional[str]] = field(default_factory=dict)
    jit_modules: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    # Made only from what the session's digests and tree fingerprints name (judge.cacheable):
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


def compile_error(f: Document) -> Optional[str]:
    """The ``compile`` check, on a whole edited file: None, or why it does not compile."""
    code, new = f.printed()
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


def names_errors(f: Document, evs: list[Verdict]) -> list[str]:
    """The ``names`` check, on an edited Python file: each name the edits leave undefined in
    a scope an op edited, that was not undefined there before (patchkit/core/names.py),
    named with the op that edits that scope."""
    from patchkit.core import names

    out = []
    for u in names.check(f, list(dict.fromkeys(ev.scope for ev in evs))):
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


def _edit(ev: Verdict, forward: bool, force: bool = False) -> Optional[str]:
    """Make one op's edit (or its inverse) on its document, if every check passes.
    Returns why not, or None."""
    f, impl = ev.file, ev.impl or ev.op.impl  # ev.impl: bound where the judge needed a before
    if not f.round_trips():
        return "libcst does not print this file back byte for byte, so rewriting it could lose text; edit it by hand"
    chain, scope = f.scope(ev.scope)
    try:
        if forward:
            impl = impl.relative_to(scope)  # the checks judge the edit against where it started
        new = impl.apply(scope) if forward else impl.revert(scope)
        e = Edit(impl, scope, new, forward, f.is_python, force)
        for name, check in CHECKS.items():
            why = check(e)
            if why:
                return f"refused by the {name} check: {why}"
    except (ValueError, LookupError, cst.CSTValidationError) as err:  # the op says it cannot
        return f"cannot {'apply' if forward else 'revert'}: {err}"
    except Exception as err:
        raise OpBug(ev.recipe.id, ev.op.label, err) from err
    f.take(chain, new)
    return None


def _overlapped(ev: Verdict, forward: bool, earlier: list[Verdict]) -> Optional[str]:
    """The overlap refusal within one plan, for spans that do not start on one line (a whole
    statement replaced, and a string inside it): after the plan's earlier edits of the file,
    the op no longer reads as the judge read it on the file as it was."""
    if not earlier:
        return None
    want = State.PENDING if forward else State.DONE
    try:
        now = (ev.impl or ev.op.impl).locate(ev.file.scope(ev.scope)[1]).state
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


def _edit_all(
    plan: Plan, todo: list[Verdict], overrides: dict, forward: bool, dry_run: bool, force: bool = False
) -> None:
    """Make each op's edit (or its inverse) in memory, in order; record what was done.
    A dry run reports each edit as still to do."""
    action = "applied" if forward else "reverted"
    if dry_run:
        state, said = (State.PENDING, "would be applied") if forward else (State.APPLIED, "would be reverted")
    else:
        state, said = (State.APPLIED, "applied now") if forward else (State.PENDING, "reverted now")
    touched: list[Document] = []
    edited: dict[int, list[Verdict]] = {}  # id(document) -> the verdicts whose edit it took
    for ev in todo:
        why = _overlapped(ev, forward, edited.get(id(ev.file), [])) or _edit(ev, forward=forward, force=force)
        if why:
            plan.blockers.append(_blocker(ev, why))
            continue
        if ev.file not in touched:
            touched.append(ev.file)
        edited.setdefault(id(ev.file), []).append(ev)
        plan.marks.append(Mark(action, ev.op.engine, ev.recipe.id, ev.recipe.sha256, ev.op.index))
        plan.jit_modules.update(ev.op.jit_modules)
        overrides[(ev.recipe.id, ev.op.index)] = ev.result(state, said)
    for f in touched:
        if f.new_bytes() == f.original:
            continue
        why = compile_error(f) if f.is_python else None
        if why:
            plan.blockers.append(f"{why}; nothing was written")
            continue
        undefined = names_errors(f, edited[id(f)]) if forward and f.is_python else []
        if undefined:
            plan.blockers += [f"{why}; nothing was written" for why in undefined]
            continue
        plan.files.append(f)


def _forget_stale(plan: Plan, session: Session, evaluated) -> None:
    """Records the code contradicts (an upgrade, a reinstall) are dropped with the write:
    the journal's entry for the file (``plan.forget``), and the op marks of ops this plan
    does not edit.  The journal then records the version of each engine the plan writes
    into (``plan.versions``).  Only the plan changes: the transaction changes the journal."""
    edits = plan.edits()
    stale: dict[str, set[str]] = {}
    for _, evs in evaluated:
        for ev in evs:
            if not ev.stale:
                continue
            stale.setdefault(ev.op.engine, set()).add(ev.file.logical)
            plan.forget.append((ev.op.engine, ev.file.logical))
            if (ev.recipe.id, ev.op.index) not in edits:
                plan.marks.append(Mark("reverted", ev.op.engine, ev.recipe.id, ev.recipe.sha256, ev.op.index))
    for engine, files in sorted(stale.items()):
        was, now = session.journal(engine).version(engine), session.targets[engine].version
        if was and now and was != now:
            plan.notes.append(
                f"{engine} was upgraded from {was} to {now} since patchkit last wrote it: its record of"
                f" {len(files)} file(s) the upgrade replaced is dropped (those files are not your edits)"
            )
    for engine in sorted({f.target.engine for f in plan.files} | {m.engine for m in plan.marks}):
        plan.versions[engine] = session.targets[engine].version


# The verdicts whose site holds (or is to hold) an edit a recipe answers for.
_HELD = (State.PENDING, State.APPLIED, State.APPLIED_UNSURE)


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
    everything = list(evaluated) + before
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


def _discard(plan: Plan, session: Session) -> dict:
    """A blocked plan writes nothing: forget every in-memory edit.  Returns no overrides."""
    plan.files, plan.marks, plan.forget, plan.versions = [], [], [], {}
    for f in session.files.values():
        f.discard()
    return {}


# -- plans ------------------------------------------------------------------------------------


def plan_apply(session: Session, recipes: list[Recipe], ignore_range: bool = False, dry_run: bool = False) -> Plan:
    """Plan (and check) every edit that applying ``recipes`` needs."""
    evaluated = evaluate(session, recipes)
    plan = Plan(results=[])
    skipped = set()
    for r, evs in evaluated:
        rng, _ = in_range(r, session)
        if rng is False and not ignore_range:
            skipped.add(r.id)
            continue
        for ev in evs:
            if ev.state in (State.MISSING, State.AMBIGUOUS, State.MODIFIED, State.MOVED):
                where = f" (at {ev.location()})" if ev.state == State.MOVED else ""
                plan.blockers.append(_blocker(ev, f"{ev.state}: {ev.message}{where}"))
    kept = [(r, evs) for r, evs in evaluated if r.id not in skipped]
    before = _applied_before(session, kept)
    plan.blockers += _overlaps(session, kept, "apply", before)
    plan.cacheable = cacheable(session, evaluated) and cacheable(session, before)
    overrides: dict = {}
    if not plan.blockers:
        todo = [ev for r, evs in evaluated if r.id not in skipped for ev in evs if ev.state == State.PENDING]
        _edit_all(plan, todo, overrides, forward=True, dry_run=dry_run)
        _forget_stale(plan, session, evaluated)
        for r, _ in evaluated:  # what the edits leave standing
            if r.id not in skipped:
                session.blocked[r.id] = blockers.find(session, r, planned=True)
                plan.blockers += [
                    f"{r.id} is blocked by {b.label} at {b.describe()}; its edits alone would not reach its goal"
                    for b in session.blocked[r.id]
                ]
        for r, evs in evaluated:
            for ev in evs:
                if ev.state == State.APPLIED and (r.id, ev.op.index) not in overrides:
                    overrides[(r.id, ev.op.index)] = ev.result(State.APPLIED, "already applied (nothing to do)")
    if plan.blockers:
        overrides = _discard(plan, session)
    plan.results = results(session, evaluated, overrides, frozenset(skipped))
    return plan


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
    """Plan (and check) taking back what patchkit applied for ``recipes``."""
    evaluated = evaluate(session, recipes)
    plan = Plan(results=[])
    todo: list[Verdict] = []
    overrides: dict = {}
    for r, evs in evaluated:
        for ev in evs:
            ours = ev.op.index in session.journal(ev.op.engine).applied_ops(ev.op.engine, r.id)
            if ev.state == State.APPLIED:
                todo.append(ev)
            elif ev.state == State.APPLIED_UNSURE:
                # --force too: it must never edit code the pristine release may have.
                plan.blockers.append(_blocker(ev, f"{ev.state}: {ev.message}; {_NO_REFERENCE}"))
            elif ev.state == State.MODIFIED or (ev.state in (State.MISSING, State.AMBIGUOUS) and ours):
                if force:
                    plan.marks.append(Mark("reverted", ev.op.engine, r.id, r.sha256, ev.op.index))
                    said = "would be forgotten" if dry_run else "forgotten"
                    overrides[(r.id, ev.op.index)] = ev.result(State.PENDING, f"{said} (--force): {ev.message}")
                else:
                    why = f"{ev.state}: {ev.message}; revert it by hand, or pass --force to forget it"
                    plan.blockers.append(_blocker(ev, why))
    if not force:
        seen: list[Document] = []
        for ev in todo:
            if ev.file in seen:
                continue
            seen.append(ev.file)
            why = _changed_since_write(session, ev.file, ev.op.engine)
            if why:
                plan.blockers.append(
                    f"{ev.file.where()}: {why}; revert would rewrite a file you edited."
                    " Look at it, then pass --force to revert anyway"
                )
    before = _applied_before(session, evaluated)
    plan.blockers += _overlaps(session, evaluated, "revert", before)
    plan.cacheable = cacheable(session, evaluated) and cacheable(session, before)
    if not plan.blockers:
        # last applied, first reverted
        _edit_all(plan, list(reversed(todo)), overrides, forward=False, dry_run=dry_run, force=force)
        for f in plan.files:  # the invariant, --force or not: upstream's code is never reverted
            why = provenance.upstream_lines(session, f, [ev for ev in todo if ev.file is f])
            if why:
                plan.blockers.append(why)
        _forget_stale(plan, session, evaluated)
    if plan.blockers:
        overrides = _discard(plan, session)
    plan.results = results(session, evaluated, overrides)
    return plan


def restored_notes(session: Session, plan: Plan) -> list[str]:
    """After a write: which files are back to the bytes they had before patchkit."""
    out = []
    for f in plan.files:
        entry = session.journal(f.target.engine).written(f.target.engine, f.logical)
        if entry and entry["pristine"] == sha256(f.new_bytes()):
            out.append(f"{f.where()}: restored byte for byte")
    return out


def unified_diff(files: list[Document], reverse: bool = False) -> str:
    """A diff per file, with paths relative to the target root (``git apply`` there)."""
    out = []
    for f in files:
        old, new = f.decode(f.original), f.decode(f.new_bytes())
        if reverse:
            old, new = new, old
        rel = f.target.relpath(f.logical)
        out += difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
    return "".join(out)
