"""The engine: judge ops against the code, plan every edit in memory, verify, then write.

Nothing here prints.  ``evaluate`` turns recipes into result values; ``plan_apply`` and
``plan_revert`` add the new file contents, checked op by op (post-condition holds, a
second apply changes nothing, revert restores the bytes, the file still parses), and
``commit`` hands them to fsio.write_all in one go.
"""

from __future__ import annotations

import ast
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import libcst as cst

from patchkit import pyscope, relocate, view
from patchkit import results as M
from patchkit.errors import TargetError
from patchkit.fsio import write_all
from patchkit.journal import Journal, sha256
from patchkit.model import OpSpec, Recipe
from patchkit.ops import AMBIGUOUS, DONE, MISSING, PENDING, Located
from patchkit.ops._cst import ast_near, contains_seq, same_code, tokens
from patchkit.ops.ensure_import import missing_definition
from patchkit.results import OpResult, RecipeResult, recipe_state
from patchkit.target import Target


def display(path: Path) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("../..") else str(path)


class SourceFile:
    """One file of one target, read once per invocation; edits stay in memory until commit."""

    def __init__(self, target: Target, logical: str) -> None:
        self.target, self.logical = target, logical
        self.path = target.path(logical)
        self.exists = self.path.is_file()
        self.original: bytes = self.path.read_bytes() if self.exists else b""
        self.text = self.original.decode("utf-8", errors="surrogateescape")
        self.is_python = logical.endswith(".py")
        self._module: Optional[cst.Module] = None
        # What the ops of this invocation read ({scope: [pattern]}); None: the whole file.
        self._wants: Optional[dict[str, list]] = {}
        self.view: Optional[view.View] = None  # set when the module is a view of the file
        self._tree: Any = None
        self.current: Any = None  # str (text) or cst.Module (python) once edited
        self._printed: Optional[tuple] = None  # (state, bytes): printing a module is costly

    def want(self, scope: str, pats: list) -> None:
        """Note what an op will read here (view.patterns), before the module is first used."""
        if self._wants is None:
            return
        if self._module is not None and not all(p in self._wants.get(scope, ()) for p in pats):
            self.whole()  # already parsed for other ops: this one reads the whole file
            return
        self._wants.setdefault(scope, []).extend(p for p in pats if p not in self._wants.get(scope, ()))

    def whole(self) -> None:
        """From now on, parse and edit the whole file rather than a view of it."""
        self._wants = None
        if self.view is not None:
            if self.current is not None:
                raise RuntimeError(f"internal: {self.logical} was edited in a view before the whole file was needed")
            self.view, self._module = None, None

    @property
    def module(self) -> cst.Module:
        if self._module is None:
            self.view = view.build(self.text, self._wants, self.tree) if self._wants and self.tree else None
            if self.view is not None:
                self._module = self.view.module
                return self._module
            try:
                self._module = cst.parse_module(self.text)
            except cst.ParserSyntaxError as e:
                raise TargetError(
                    f"{display(self.path)}:{e.raw_line}: does not parse as Python ({e.message})",
                    "the target tree is damaged or not Python 3; restore it (e.g. `patchkit sync --force`)",
                ) from None
        return self._module

    @property
    def tree(self) -> Optional[ast.Module]:
        """The original text's ``ast`` (None when it does not parse), parsed once."""
        if self._tree is None:
            try:
                self._tree = ast.parse(self.text)
            except (SyntaxError, ValueError):
                self._tree = False
        return self._tree or None

    def whole_module(self) -> cst.Module:
        self.whole()
        return self.module

    def state(self):
        """The file as edited so far in this invocation."""
        if self.current is not None:
            return self.current
        return self.module if self.is_python else self.text

    def printed(self) -> tuple[str, bytes]:
        """(the current state's own code, the file's new bytes), printed once per state;
        for a view the code is the view's, the bytes are the whole file's."""
        cur = self.state()
        if self._printed is None or self._printed[0] is not cur:
            code = cur.code if isinstance(cur, cst.Module) else cur
            out = self.view.expand(code) if self.view is not None and isinstance(cur, cst.Module) else code
            self._printed = (cur, code, out.encode("utf-8", errors="surrogateescape"))
        return self._printed[1], self._printed[2]

    def new_bytes(self) -> bytes:
        return self.printed()[1]

    def where(self, line: Optional[int] = None) -> str:
        return f"{display(self.path)}:{line}" if line else display(self.path)


class Session:
    """The targets of one invocation, their journals, and the files read so far."""

    def __init__(self, targets: dict[str, Target]) -> None:
        self.targets = targets
        self.journals: dict[Path, Journal] = {}
        self.files: dict[tuple[str, str], SourceFile] = {}
        self.searched_tree = False  # a verdict that looked beyond the files read is not cacheable

    def target(self, engine: str, recipe: Recipe) -> Target:
        if engine not in self.targets:
            raise TargetError(
                f"recipe {recipe.id} edits {engine}, but there is no {engine} target",
                f"pass --target {engine}=PATH, or run `patchkit sync` to use the pinned workspace",
            )
        return self.targets[engine]

    def journal(self, engine: str) -> Journal:
        root = self.targets[engine].root
        if root not in self.journals:
            self.journals[root] = Journal(root)
        return self.journals[root]

    def file(self, engine: str, logical: str) -> SourceFile:
        key = (engine, logical)
        if key not in self.files:
            self.files[key] = SourceFile(self.targets[engine], logical)
        return self.files[key]


@dataclass
class OpEval:
    recipe: Recipe
    op: OpSpec
    file: SourceFile
    located: Located
    scope: str  # where it was located
    state: str = ""
    line: Optional[int] = None
    message: str = ""
    lines: tuple = ()  # lines of all nodes (candidates when ambiguous)
    root: Any = None  # (module, view) the nodes were found in, for their line numbers

    def location(self) -> str:
        return f"{self.file.logical}::{self.scope or '<module>'}"

    def result(self, state: Optional[str] = None, message: Optional[str] = None) -> OpResult:
        return OpResult(
            recipe=self.recipe.id,
            index=self.op.index,
            kind=self.op.kind,
            engine=self.op.engine,
            file=self.op.file,
            state=state or self.state,
            line=self.line,
            location=self.location() if self.file.exists else "",
            message=self.message if message is None else message,
        )


# -- locating ---------------------------------------------------------------------------------


def _locate_in(op: OpSpec, f: SourceFile, scope_name: str, state) -> Located:
    if not f.is_python:
        return op.impl.locate(state)
    try:
        chain = pyscope.resolve(state, scope_name)
    except pyscope.ScopeError as e:
        return Located(MISSING, reason=str(e))
    return op.impl.locate(chain[-1])


def _marker_hit(session: Session, op: OpSpec, anywhere: bool) -> Optional[str]:
    """Does upstream's own version of this edit stand in the marker's file, or (with
    ``anywhere``, for ops whose own site is gone) in any file of the engine holding its words?"""
    for m in op.markers:
        f = session.file(op.engine, m.file)
        if not f.is_python:
            if f.exists and all(frag in f.text for frag in m.contains):
                return f"upstream marker matched in {m.file}"
            continue
        frags = [tokens(c) for c in m.contains]
        words = tuple(w for c in m.contains for w in relocate.word_bytes(c))
        files = [(m.file, f.path)] if f.exists else []
        if anywhere:
            session.searched_tree = True
            files += [(lf, p) for lf, p in relocate.tree_files(session.targets[op.engine], ".py") if lf != m.file]
        for logical, path in files:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if all(w in data for w in words):
                line = _marker_in(data.decode("utf-8", "replace"), frags, words, f.tree if logical == m.file else None)
                if line:
                    return f"upstream marker matched at {logical}:{line}"
    return None


MARKER_SPAN = 60  # lines: a marker recognises one local piece of code, not a whole module


def _marker_in(text: str, frags, words, tree: Optional[ast.Module] = None) -> Optional[int]:
    """Line of the smallest statement whose tokens contain every fragment.  Uses ``ast``
    (C speed) for statement boundaries, and visits only statements around a line holding
    the rarest word; only statements holding all words are tokenized.  Defs, classes and
    statements longer than MARKER_SPAN lines do not count: fragments scattered over a
    whole class are not upstream's version of an edit."""
    lines = view.split_lines(text)
    first = min((w.decode() for w in words), key=text.count) if words else ""
    hot = [i for i, ln in enumerate(lines, 1) if first in ln]
    if not hot:
        return None
    if tree is None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return None
    best = None
    for node in ast_near(tree, hot):
        if not isinstance(node, ast.stmt) or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        end = node.end_lineno or node.lineno
        span = end - node.lineno
        if span > MARKER_SPAN or (best is not None and (span, node.lineno) >= best):
            continue
        seg = "".join(lines[node.lineno - 1 : end])
        if not all(w.decode() in seg for w in words):
            continue
        have = tokens(seg)
        if all(contains_seq(have, fr) for fr in frags):
            best = (span, node.lineno)
    return best[1] if best else None


def _leaf(scope: str) -> str:
    return scope.rsplit(".", 1)[-1].lstrip("_")


def _relocate(session: Session, op: OpSpec, named: SourceFile) -> tuple[str, Optional[SourceFile], str, Located]:
    """Where the op's site went: (state, file, scope, Located); state is "" when nowhere.

    Sites are found by content.  When several scopes hold one, a scope that kept the
    named scope's name (``_should_run_x`` -> ``Base._should_run_x`` or ``should_run_x``)
    wins; otherwise the answer is ambiguous, with the candidates listed.
    """
    hits = []
    if named.exists:
        hits = [(named, sc, loc) for sc, loc in relocate.scan_file(op, named, skip_scope=op.scope)]
    if not hits:
        session.searched_tree = True
        try:
            hits = [
                (session.file(op.engine, lf), sc, loc) for lf, sc, loc in relocate.search(session, op, skip=op.file)
            ]
        except relocate.TooCommon as e:
            return (
                "",
                None,
                "",
                Located(
                    MISSING,
                    reason=f"not found in place, and its words are in {e.n} files of the tree, too many to say where it went",
                ),
            )
    if len(hits) > 1 and op.scope:
        same_name = [h for h in hits if _leaf(h[1]) == _leaf(op.scope)]
        if len(same_name) == 1:
            hits = same_name
    if len(hits) == 1:
        f, sc, loc = hits[0]
        return M.MOVED, f, sc, loc
    if len(hits) > 1:
        where = ", ".join(f"{f.logical}::{sc or '<module>'}" for f, sc, _ in hits[:8])
        return (
            M.AMBIGUOUS,
            None,
            "",
            Located(AMBIGUOUS, reason=f"not in {op.scope or '<module>'}; found in {len(hits)} places: {where}"),
        )
    return "", None, "", Located(MISSING)


def judge(session: Session, recipe: Recipe, op: OpSpec) -> OpEval:
    session.target(op.engine, recipe)
    f = session.file(op.engine, op.file)
    if not f.exists:
        ev = OpEval(recipe, op, f, Located(MISSING, reason=f"{f.where()} does not exist"), op.scope)
    else:
        ev = OpEval(recipe, op, f, _locate_in(op, f, op.scope, f.state()), op.scope)
        if f.view is not None and ev.located.state not in (DONE, PENDING):
            # A view answers done or pending exactly; anything else is judged on the whole file.
            f.whole()
            ev.located = _locate_in(op, f, op.scope, f.state())
    ours = op.index in session.journal(op.engine).applied_ops(op.engine, recipe.id)
    if ev.located.state == MISSING and not ours:
        found, mf, mscope, mloc = _relocate(session, op, f)
        if found == M.MOVED:
            old = op.file + ("::" + op.scope if op.scope else "")
            ev.file, ev.scope, ev.located = mf, mscope, Located(mloc.state, mloc.nodes, f"moved from {old}")
        elif found == M.AMBIGUOUS:
            ev.located = mloc
        elif mloc.reason:
            ev.located = Located(MISSING, ev.located.nodes, f"{ev.located.reason}; {mloc.reason}")
    if ev.located.state == PENDING and getattr(op.impl, "defined_in", None):
        other = session.file(op.engine, op.impl.defined_in)
        bad = missing_definition(op.impl, other.text if other.exists else None)
        if bad:
            ev.located = bad
    st = ev.located.state
    reason = ev.located.reason
    moved = ev.file is not f or ev.scope != op.scope
    if st == DONE:
        ev.state = M.APPLIED if ours else M.UPSTREAM
    elif st == PENDING:
        ev.state = M.MODIFIED if ours else (M.MOVED if moved else M.PENDING)
        if ours:
            reason = "patchkit applied this op, but the code no longer shows it"
    else:
        ev.state = M.MISSING if st == MISSING else M.AMBIGUOUS
        if ours and ev.state == M.MISSING:
            reason += " (patchkit had applied it)"
    if ev.state in (M.PENDING, M.MISSING, M.MOVED) and not ours and op.markers:
        hit = _marker_hit(session, op, anywhere=ev.state != M.PENDING)
        if hit:
            ev.state, reason = M.UPSTREAM, hit
    ev.message = reason
    if ev.file.is_python and ev.file.exists and ev.located.nodes:
        ev.root = (ev.file.module, ev.file.view)
    return ev


def _add_lines(evals: list[OpEval]) -> None:
    """Line numbers for every eval, one codegen pass per Python module read."""
    by_file: dict[tuple, list[OpEval]] = {}
    for ev in evals:
        by_file.setdefault((id(ev.file), id(ev.root[0]) if ev.root else 0), []).append(ev)
    for group in by_file.values():
        f = group[0].file
        if group[0].root:
            nodes = [n for ev in group for n in ev.located.nodes]
            lines = pyscope.line_numbers(*group[0].root, nodes, f.text)
            for ev in group:
                ev.lines = tuple(sorted(lines[id(n)] for n in ev.located.nodes if id(n) in lines))
        else:
            for ev in group:
                ev.lines = tuple(n for n in ev.located.nodes if isinstance(n, int))
        for ev in group:
            ev.line = ev.lines[0] if ev.lines else None
            if ev.state == M.AMBIGUOUS and ev.lines:
                ev.message += f" (candidates at lines {', '.join(map(str, ev.lines))})"


def in_range(recipe: Recipe, session: Session) -> tuple[Optional[bool], dict]:
    versions, verdicts = {}, []
    for eng, spec in recipe.engines.items():
        t = session.targets.get(eng)
        v = t.version if t else None
        versions[eng] = v
        if v is None:
            verdicts.append(None)
        else:
            verdicts.append(spec.contains(v, prereleases=True))
    if False in verdicts:
        return False, versions
    if None in verdicts:
        return None, versions
    return True, versions


def evaluate(session: Session, recipes: list[Recipe]) -> list[tuple[Recipe, list[OpEval]]]:
    for r in recipes:  # what each Python file will be read for, before any is parsed
        for op in r.ops:
            if op.engine in session.targets and op.impl.language == "python":
                session.file(op.engine, op.file).want(op.scope, view.patterns(op.impl))
    out = [(r, [judge(session, r, op) for op in r.ops]) for r in recipes]
    _add_lines([ev for _, evs in out for ev in evs])
    return out


def results(
    session: Session, evaluated, overrides: dict | None = None, skipped: set[str] = frozenset()
) -> list[RecipeResult]:
    overrides = overrides or {}
    res = []
    for r, evs in evaluated:
        ops = tuple(overrides.get((r.id, ev.op.index), ev.result()) for ev in evs)
        rng, versions = in_range(r, session)
        state = M.SKIPPED if r.id in skipped else recipe_state([o.state for o in ops])
        msg = ""
        if r.id in skipped:
            msg = (
                "out of version range ("
                + ", ".join(f"{e} {versions[e]} not in {r.engines[e]}" for e in r.engines)
                + "); pass --ignore-range to apply anyway"
            )
        res.append(RecipeResult(id=r.id, state=state, in_range=rng, ops=ops, message=msg, versions=versions))
    return res


# -- planning ---------------------------------------------------------------------------------


@dataclass
class Plan:
    results: list[RecipeResult]
    blockers: list[str] = field(default_factory=list)
    files: list[SourceFile] = field(default_factory=list)  # files with new content
    marks: list[tuple[str, str, str, str, int]] = field(default_factory=list)  # (action, engine, recipe, sha, op)
    jit_modules: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    @property
    def changes(self) -> list[tuple[Path, bytes, bytes]]:
        return [(f.path, f.new_bytes(), f.original) for f in self.files]


def _blocker(ev: OpEval, why: str) -> str:
    return f"{ev.recipe.id} > {ev.op.label} > {ev.file.where(ev.line)}: {why}"


def _edit(ev: OpEval, forward: bool) -> Optional[str]:
    """Apply (or revert) one op on its file's in-memory state, verifying the result.
    Returns a failure reason, or None."""
    f, op = ev.file, ev.op
    if f.is_python and f.current is None and f.view is None and f.module.code != f.text:
        # (A view is checked the same way when it is built.)
        return "libcst does not print this file back byte for byte, so rewriting it could lose text; edit it by hand"
    state = f.state()
    do, undo = (op.impl.apply, op.impl.revert) if forward else (op.impl.revert, op.impl.apply)
    try:
        if not f.is_python:
            new = do(state)
            after = op.impl.locate(new).state
            if after != (DONE if forward else PENDING):
                return f"after {'apply' if forward else 'revert'} the op reads {after}, so the edit is not stable"
            if undo(new) != state:
                return "the edit does not round-trip byte for byte"
            f.current = new
            return None
        chain = pyscope.resolve(state, ev.scope)
        scope = chain[-1]
        new_scope = do(scope)
        after = op.impl.locate(new_scope).state
        if after != (DONE if forward else PENDING):
            return (
                f"after {'apply' if forward else 'revert'} the op reads {after}, so a second run would not be a no-op"
            )
        if not same_code(undo(new_scope), scope):
            return "the edit does not round-trip byte for byte (is the recipe's upstream text exactly as upstream writes it?)"
        f.current = pyscope.splice(chain, new_scope)
    except (ValueError, LookupError, cst.CSTValidationError) as e:
        return f"cannot {'apply' if forward else 'revert'}: {e}"
    return None


def _finish(plan: Plan, touched: list[SourceFile]) -> None:
    for f in touched:
        code, new = f.printed()
        if new == f.original:
            continue
        if f.is_python:
            # A view's code stands for the whole file: the statements left out are unchanged
            # and stand in the same blocks, so the file parses when the edited view does.
            edited = code if f.view is not None else new
            try:
                ast.parse(edited)
            except SyntaxError as e:
                line = f.view.file_line(e.lineno) if f.view is not None and e.lineno else e.lineno
                plan.blockers.append(f"{f.where(line)}: the edited file would not parse ({e.msg}); nothing was written")
                continue
        plan.files.append(f)


def _edit_all(plan: Plan, todo: list[OpEval], overrides: dict, forward: bool) -> None:
    """Make each op's edit (or its inverse) in memory, in order; record what was done."""
    action, state, said = ("applied", M.APPLIED, "applied now") if forward else ("reverted", M.PENDING, "reverted now")
    touched: list[SourceFile] = []
    for ev in todo:
        why = _edit(ev, forward=forward)
        if why:
            plan.blockers.append(_blocker(ev, why))
            continue
        if ev.file not in touched:
            touched.append(ev.file)
        plan.marks.append((action, ev.op.engine, ev.recipe.id, ev.recipe.sha256, ev.op.index))
        plan.jit_modules.update(ev.op.jit_modules)
        overrides[(ev.recipe.id, ev.op.index)] = ev.result(state, said)
    _finish(plan, touched)


def _discard(plan: Plan, session: Session) -> dict:
    """A blocked plan writes nothing: forget every in-memory edit.  Returns no overrides."""
    plan.files, plan.marks = [], []
    for f in session.files.values():
        f.current = None
    return {}


def plan_apply(session: Session, recipes: list[Recipe], ignore_range: bool = False, follow_moves: bool = False) -> Plan:
    """Plan (and verify) every edit; ``follow_moves`` edits moved sites where they are now."""
    evaluated = evaluate(session, recipes)
    plan = Plan(results=[])
    skipped = set()
    for r, evs in evaluated:
        rng, _ = in_range(r, session)
        if rng is False and not ignore_range:
            skipped.add(r.id)
            continue
        for ev in evs:
            if ev.state in (M.MISSING, M.AMBIGUOUS, M.MODIFIED, M.MOVED):
                plan.blockers.append(
                    _blocker(
                        ev, f"{ev.state}: {ev.message}" + (f" (at {ev.location()})" if ev.state == M.MOVED else "")
                    )
                )
    overrides = {}
    if not plan.blockers:
        todo = [
            ev
            for r, evs in evaluated
            if r.id not in skipped
            for ev in evs
            if ev.state == M.PENDING or (follow_moves and ev.state == M.MOVED)
        ]
        _edit_all(plan, todo, overrides, forward=True)
        for r, evs in evaluated:
            for ev in evs:
                if ev.state == M.APPLIED and (r.id, ev.op.index) not in overrides:
                    overrides[(r.id, ev.op.index)] = ev.result(M.APPLIED, "already applied (nothing to do)")
    if plan.blockers:
        overrides = _discard(plan, session)
    plan.results = results(session, evaluated, overrides, skipped)
    return plan


def _changed_since_write(session: Session, f: SourceFile, engine: str) -> Optional[str]:
    j = session.journal(engine)
    entry = j.written(engine, f.logical)
    if not entry or entry["sha256"] == sha256(f.original):
        return None
    before = j.written_bytes(engine, f.logical)
    if before is None:
        return "changed since patchkit wrote it"
    a = before.decode("utf-8", "replace").splitlines()
    b = f.text.splitlines()
    spans = [
        f"{j1 + 1}-{j2}" if j2 - j1 > 1 else f"{j1 + 1}"
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
        if tag != "equal"
    ]
    return f"changed since patchkit wrote it (lines {', '.join(spans[:8]) or '?'} differ)"


def plan_revert(session: Session, recipes: list[Recipe], force: bool = False) -> Plan:
    evaluated = evaluate(session, recipes)
    plan = Plan(results=[])
    todo: list[OpEval] = []
    overrides = {}
    for r, evs in evaluated:
        for ev in evs:
            if ev.state == M.APPLIED:
                todo.append(ev)
            elif ev.state == M.MODIFIED or (
                ev.state in (M.MISSING, M.AMBIGUOUS)
                and ev.op.index in session.journal(ev.op.engine).applied_ops(ev.op.engine, r.id)
            ):
                if force:
                    plan.marks.append(("reverted", ev.op.engine, r.id, r.sha256, ev.op.index))
                    overrides[(r.id, ev.op.index)] = ev.result(M.PENDING, f"forgotten (--force): {ev.message}")
                else:
                    plan.blockers.append(
                        _blocker(ev, f"{ev.state}: {ev.message}; revert it by hand, or pass --force to forget it")
                    )
    if not force:
        seen = set()
        for ev in todo:
            if id(ev.file) in seen:
                continue
            seen.add(id(ev.file))
            why = _changed_since_write(session, ev.file, ev.op.engine)
            if why:
                plan.blockers.append(
                    f"{ev.file.where()}: {why}; revert would rewrite a file you edited. Look at it, then pass --force to revert anyway"
                )
    if not plan.blockers:
        _edit_all(plan, list(reversed(todo)), overrides, forward=False)  # last applied, first reverted
    if plan.blockers:
        overrides = _discard(plan, session)
    plan.results = results(session, evaluated, overrides)
    return plan


def commit(session: Session, plan: Plan) -> None:
    """Write the planned files (all or none), then record what patchkit did."""
    from patchkit import record

    # An installed package's RECORD follows its files, in the same all-or-nothing batch.
    write_all(plan.changes + record.plan_updates(session, plan))
    touched_journals = set()
    for f in plan.files:
        j = session.journal(f.target.engine)
        j.record_write(f.target.engine, f.logical, f.original, f.new_bytes())
        touched_journals.add(j.root)
    for action, engine, recipe, sha, op in plan.marks:
        j = session.journal(engine)
        if action == "applied":
            j.mark_applied(engine, recipe, sha, op)
        else:
            j.mark_reverted(engine, recipe, op)
        touched_journals.add(j.root)
    for root in touched_journals:
        session.journals[root].save()
    for f in plan.files:
        entry = session.journal(f.target.engine).written(f.target.engine, f.logical)
        if entry and entry["pristine"] == sha256(f.new_bytes()):
            plan.notes.append(f"{f.where()}: restored byte for byte")


def unified_diff(files: list[SourceFile], reverse: bool = False) -> str:
    """A diff per file, with paths relative to the target root (``git apply`` there)."""
    out = []
    for f in files:
        old, new = f.original.decode("utf-8", "surrogateescape"), f.new_bytes().decode("utf-8", "surrogateescape")
        if reverse:
            old, new = new, old
        rel = f.target.relpath(f.logical)
        out += difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
    return "".join(out)
