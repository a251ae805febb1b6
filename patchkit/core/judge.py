"""The judge: where each op's site is, and what state it is in.  Reads; never writes: what it
learns that is worth keeping (confirmations, outlines, identities) goes into its Session's
``learned``, which the command writes once judging is done (patchkit/core/learned.py).

``evaluate`` cuts each recipe to the version variant of the targets (Recipe.for_versions).
For each op, ``judge`` locates its site in the recipe's file and scope, follows it when it
moved (relocate.py; companion ops follow their anchor), asks upstream markers
(markers.py), and decides *who* made an edit that is there: the journal when the file is
exactly as patchkit wrote it, otherwise the pristine release (read through the Session's
``Releases``, which the command hands it), or ``applied?`` when there is none.  Blockers
that stand are found (blockers.py).  The answer is a frozen ``Evaluation`` of ``Verdict``s
(patchkit/core/verdict.py, where ``results`` folds verdicts into the result values that
every command reports); the Session it reads is patchkit/core/session.py.  This is where
states are decided.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import libcst as cst

from patchkit.base.errors import OpBug, PatchkitError, TargetError
from patchkit.base.journal import sha256
from patchkit.base.model import OpSpec, Recipe
from patchkit.base.states import State
from patchkit.base.target import ENGINES
from patchkit.core import (
    blockers,
    confirm,
    context,
    decision,
    edited,
    equivalent,
    follow,
    fuzzed,
    goal,
    identity,
    learned,
    markers,
    proof,
    pyscope,
    relocate,
    view,
)
from patchkit.core.document import Document
from patchkit.core.ops import Located
from patchkit.core.session import Session
from patchkit.core.verdict import Evaluation, Verdict


@dataclass
class _Draft:
    """A verdict being decided: the judge's working record while one ``evaluate`` runs
    (located, followed to where the site moved, its lines added), never handed out:
    ``evaluate`` returns each one frozen (``Verdict``)."""

    recipe: Recipe
    op: OpSpec
    file: Document
    located: Located
    scope: str
    state: State = State.MISSING
    line: Optional[int] = None
    message: str = ""
    lines: tuple = ()
    root: Any = None
    searched: bool = False
    stale: bool = False
    impl: Any = None
    candidates: tuple = ()
    evidence: Any = None

    moved = Verdict.moved

    def freeze(self) -> Verdict:
        return Verdict(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


# -- locating ---------------------------------------------------------------------------------


def _locate(op: OpSpec, f: Document, scope_name: str) -> Located:
    try:
        _, scope = f.scope(scope_name)
    except pyscope.ScopeError as e:
        return Located(State.MISSING, reason=str(e))
    return op.impl.locate(scope)


def _locate_checked(session: Session, op: OpSpec, recipe: Recipe, f: Document, scope_name: str) -> Located:
    """Locate in the document; a view's answer is checked before it is believed.

    A view holds only the statements that carry the words an op declares it reads
    (``Op.reads``).  An op that under-declares could miss a second candidate there, and a
    site that the file makes ambiguous would read pending or done.  So a view's ``pending``
    or ``done`` is confirmed on the op's complete scope, parsed apart (the edit is still
    made in the view, which prints back byte for byte where the whole file may not);
    confirmations are cached by content (confirm.py), learned here and kept after judging.  Any other answer, or one the
    complete scope contradicts, is judged again on the whole file.
    """
    loc = _locate(op, f, scope_name)
    if f.view is None:
        return loc
    if loc.state in (State.PENDING, State.DONE):
        k = confirm.key(session.code, recipe.sha256, op.index, scope_name, f.scope_text(scope_name))
        if (session.learned.get(learned.CONFIRMED, k) or confirm.known(k)) == loc.state:
            return loc
        scope = f.shallow_scope(scope_name) if op.impl.reads.shallow else None
        if scope is None:
            try:
                _, scope = f.whole_scope(scope_name)
            except pyscope.ScopeError:
                scope = None
        if scope is not None and op.impl.locate(scope).state == loc.state:
            session.learned.add(learned.CONFIRMED, k, loc.state)  # kept after judging (learned.keep)
            return loc
    f.whole()
    return _locate(op, f, scope_name)


Relocated = tuple  # (state or None, Document or None, scope, Located, candidates best first)


def _relocate(session: Session, recipe: Recipe, op: OpSpec, named: Document, ident) -> Relocated:
    """Where the op's site went.  Every place in the engine's tree where its pattern
    matches, the named file ranked *with* the rest (never a short cut), is scored against
    the site's identity (identity.py); it moved to the best only when that one reaches the
    threshold and leads the runner-up by the margin.  Otherwise ambiguous (several reach it)
    or missing (none does), every candidate named with its score."""
    hits = [(named, sc, loc) for sc, loc in relocate.scan_file(op, named)] if named.exists else []
    common = 0
    try:
        found = relocate.search(session, op, skip=op.file)
    except relocate.TooCommon as e:
        found, common = [], e.n  # the named file's candidates are still named, never moved to
    hits += [(session.file(op.engine, lf), sc, loc) for lf, sc, loc in found]
    if op.scope:
        # Code of a def or class does not move to module level: a module-level look-alike
        # (a list of backend names, say) is another site, never this op's.
        hits = [h for h in hits if h[1]]
    too_common = (
        f"not found in place, and its words are in {common} files of the tree, too many to say where it went"
        if common
        else ""
    )
    if not hits:
        return (
            _changed_elsewhere(session, op, ident, too_common)
            if ident is not None and not common
            else (
                None,
                None,
                "",
                Located(State.MISSING, reason=too_common),
                (),
            )
        )
    if ident is None:  # no release in range to read: the named scope as it stands, or its name
        ident = identity.Identity("its named scope", (relocate.original_context(session, op, named),))
    # What the file the code left imports now points at where it went.
    left = named.tree if named.exists and named.is_python else None
    if left is not None:
        imports = context.imports_of(left, op.file)
        ident = identity.Identity(
            ident.release, tuple(dataclasses.replace(c, imports=c.imports | imports) for c in ident.sites)
        )
    scored = []
    own = getattr(op.impl, "carries_identity", False)
    for f, sc, loc in hits:
        ctxs, line = identity.contexts_in(f, sc, loc)
        value, parts = (1.0, ("its own context lines",)) if own else identity.score(ident, ctxs)
        scored.append((identity.Candidate(f.logical, sc, line, value, parts), f, loc))
    scored.sort(key=lambda c: -c[0].score)  # stable: ties keep the search's order
    ranked = tuple(c for c, _, _ in scored)
    verdict = "missing" if common else identity.decide(list(ranked))
    of = f"the site as in {ident.release}"
    if verdict == "ambiguous" and not own:
        # A tie in one scope (a sibling branch alike but for a value): the alignment of the
        # site's home scope with it, a diff of their statements, may pair the site with one.
        pick = edited.break_tie(session, recipe, op, ident, list(ranked), {f.logical: f for _, f, _ in scored})
        if pick is not None:
            k = next(i for i, c in enumerate(ranked) if c is pick)
            scored.insert(0, scored.pop(k))
            best = scored[0][0]
            scored[0] = (
                identity.Candidate(best.file, best.scope, best.line, best.score, (*best.parts, "aligned")),
            ) + scored[0][1:]
            ranked = tuple(c for c, _, _ in scored)
            verdict = "moved"
    if verdict == "ambiguous" and not own:
        # A tie across scopes: the one that kept the name of the def the site stood in.
        named_best = identity.by_name(ident, list(ranked))
        if named_best is not None:
            scored[0] = (named_best,) + scored[0][1:]
            ranked = (named_best, *ranked[1:])
            verdict = "moved"
    if verdict == "moved":
        best, f, loc = scored[0]
        why = f"similarity {best.score:.2f} to {of} ({', '.join(best.parts)})"
        if len(ranked) > 1:
            why += "; runners-up: " + ", ".join(c.describe() for c in ranked[1:6])
        return State.MOVED, f, best.scope, Located(loc.state, loc.nodes, why), ranked
    if verdict == "ambiguous":
        close = [c for c in ranked if c.score >= identity.THRESHOLD]
        why = (
            f"not in {op.scope or '<module>'}; {len(close)} places reach similarity {identity.THRESHOLD:g} to {of},"
            f" none by a margin of {identity.MARGIN:g}: " + ", ".join(c.describe() for c in ranked[:8])
        )
        return State.AMBIGUOUS, None, "", Located(State.AMBIGUOUS, reason=why), ranked
    why = f"nearest candidates, none reaching similarity {identity.THRESHOLD:g} to {of}: " + ", ".join(
        c.describe() for c in ranked[:5]
    )
    why += f", and {len(ranked) - 5} more" if len(ranked) > 5 else ""
    return None, None, "", Located(State.MISSING, reason="; ".join(w for w in (too_common, why) if w)), ranked


def _changed_elsewhere(session: Session, op: OpSpec, ident, too_common: str) -> Relocated:
    """The pattern matches nowhere: statements like the site's own, changed, anywhere in the
    tree, scored against the identity (edited.changed_elsewhere).  Moved (where apply will
    not go: a moved op is reported, the port is the user's) only by the same threshold and
    margin as any move; else missing, the nearest named."""
    found = edited.changed_elsewhere(session, op, ident)
    ranked = tuple(c for _, c in found)
    of = f"the site as in {ident.release}"
    in_place = bool(ranked) and (ranked[0].file, ranked[0].scope) == (op.file, op.scope)
    verdict = identity.decide(list(ranked))
    named_best = identity.by_name(ident, list(ranked)) if verdict == "ambiguous" else None
    if ranked and not in_place and (verdict == "moved" or named_best is not None):
        # In its own scope a changed statement is no move, and never pending: the op's
        # pattern is not there to apply (the nearest is named below).  A tie across scopes
        # goes to the one that kept the name of the def the site stood in (identity.by_name).
        f, best = found[0][0], named_best or found[0][1]
        why = f"its statement changed: similarity {best.score:.2f} to {of} ({', '.join(best.parts)})"
        if len(ranked) > 1:
            why += "; runners-up: " + ", ".join(c.describe() for c in ranked[1:6])
        return State.MOVED, f, best.scope, Located(State.PENDING, (best.line,), why), ranked
    why = too_common
    if ranked:
        why = f"nearest statements like the site's, none the site by similarity {identity.THRESHOLD:g} and a margin"
        why += f" of {identity.MARGIN:g} to {of}: " + ", ".join(c.describe() for c in ranked[:5])
    return None, None, "", Located(State.MISSING, reason=why), ranked


def _identified(session: Session, recipe: Recipe, op: OpSpec, f: Document, loc: Located):
    """Is the site found in place the op's site?  (Located, identity): the Located is
    MISSING, saying why, when the place is not like the site in its home release."""
    if loc.state not in (State.PENDING, State.DONE) or not op.impl.RELOCATABLE:
        return loc, None
    if getattr(op.impl, "carries_identity", False):
        return loc, None  # matched with its own context lines, exactly: that is the site
    if identity.holds_as_released(session, recipe, op, f):
        return loc, None  # the release's own file, in range: the site is where the op finds it
    ident = identity.of(session, recipe, op)
    if ident is None:
        return loc, None
    ctxs, line = identity.contexts_in(f, op.scope, loc)
    if not ctxs:
        return loc, ident
    value, parts = identity.score(ident, ctxs)
    if value >= identity.THRESHOLD or identity.unchanged_in_scope(op, parts, done=loc.state == State.DONE):
        return loc, ident
    here = identity.Candidate(f.logical, op.scope, line, value, parts)
    why = (
        f"the pattern matches at {here.where()}, but that is not the site as in {ident.release}"
        f" (similarity {value:.2f} < {identity.THRESHOLD:g}: {', '.join(parts) or 'nothing matched'})"
    )
    return Located(State.MISSING, (), why), ident


def _singled_out(session: Session, recipe: Recipe, op: OpSpec, f: Document, loc: Located) -> tuple[Located, Any]:
    """Several places of the op's named scope hold its pattern (or its edit, partly made):
    the one the site's identity singles out, by the rules a move is decided by (the best
    reaches identity.THRESHOLD and leads by MARGIN, or a tie in one scope is broken by
    aligning the home scope's statements with it: edited.break_tie), is the site.  Then
    (that place's Located, the op bound to it: Op.only), so that apply edits it alone and
    its checks, status and revert read it alone.  Otherwise (loc, None): still ambiguous,
    every place named with its score."""
    if op.impl.language != "python" or not op.impl.RELOCATABLE:
        return loc, None
    try:
        scope = f.scope(op.scope)[1]
    except pyscope.ScopeError:
        return loc, None
    places = op.impl.occurrences(scope)
    if len(places) < 2:
        return loc, None
    ident = identity.of(session, recipe, op)
    if ident is None:
        return loc, None
    scored = []
    for k, one in enumerate(places):
        ctxs, line = identity.contexts_in(f, op.scope, one)
        value, parts = identity.score(ident, ctxs) if ctxs else (0.0, ())
        scored.append((identity.Candidate(f.logical, op.scope, line, value, parts), k))
    scored.sort(key=lambda c: -c[0].score)  # stable: ties keep document order
    ranked = [c for c, _ in scored]
    best = scored[0] if identity.decide(ranked) == "moved" else None
    if best is None and identity.decide(ranked) == "ambiguous":
        pick = edited.break_tie(session, recipe, op, ident, ranked, {f.logical: f})
        best = next((sc for sc in scored if sc[0] is pick), None)
        if best is not None:
            c = best[0]
            best = (identity.Candidate(c.file, c.scope, c.line, c.score, (*c.parts, "aligned")), best[1])
    if best is None or sum(r.line == best[0].line for r in ranked) > 1:
        return loc, None  # another place on the same line: no context tells them apart
    (c, k), bound = best, op.impl.only(scope, best[1])
    one = bound.locate(scope)
    if one.state not in (State.PENDING, State.DONE):
        return loc, None
    rest = [r for r in ranked if r.line != c.line]
    why = (
        f"{len(places)} places of {op.scope or '<module>'} hold the pattern or its edit; the site as in"
        f" {ident.release} is the one at line {c.line} (similarity {c.score:.2f}: {', '.join(c.parts)})"
    )
    if rest:
        why += "; the others: " + ", ".join(r.describe() for r in rest[:5])
    return Located(one.state, one.nodes, why), bound


def _followed(session: Session, recipe: Recipe, op: OpSpec, f: Document) -> Optional[tuple[str, Located]]:
    """The site not found, its named def still standing: the one def it calls (follow.py:
    one level, the same module) that holds the op's edit made, in a statement that is,
    whole, the home release's site statement with the edit made (identity.SITE_DONE of its
    tokens), where the pristine release holds it made too, as (that def, DONE there):
    upstream moved the code into a helper and made the edit there.  None otherwise: no
    callee holds it, several do, one holds it pending (a shared helper is not the def the
    recipe named: never edited), its statement is another, or the release does not hold it
    (then nothing says who made it)."""
    if op.impl.language != "python" or not op.scope or not op.impl.RELOCATABLE:
        return None
    module = f.whole_module()
    found = follow.sites(op, module, op.scope)
    if len(found) != 1 or found[0][1].state != State.DONE:
        return None
    name, loc = found[0]
    home = _home_statement(session, recipe, op)
    there = follow.statement(pyscope.resolve(module, name)[-1], loc.nodes[0]) if len(loc.nodes) == 1 else ()
    if not home or follow.alike(home, there) < identity.SITE_DONE:
        return None
    ref = session.reference(op.engine)
    if not ref.available or pristine_state(ref, op, f.logical, name) != State.DONE:
        return None  # (without a release, the verdict is not cached: edited.upstream_in_place)
    said = f"not in {op.scope}, which calls {name} (same module): that holds the edit, as {ref.what} does"
    return name, Located(State.DONE, loc.nodes, said)


def _home_statement(session: Session, recipe: Recipe, op: OpSpec) -> tuple[str, ...]:
    """The tokens of the site's statement in the identity's home release, the op's edit made
    there (follow.statement); () when no home release holds the site pending, alone."""
    ident = identity.of(session, recipe, op)
    ref = next((r for label, r in identity._homes(session, recipe, op) if ident and label == ident.release), None)
    module = ref.module(op.file) if ref is not None else None
    if module is None:
        return ()
    try:
        scope = pyscope.resolve(module, op.scope)[-1]
        if op.impl.locate(scope).state != State.PENDING:
            return ()
        edited_scope = op.impl.apply(scope)
    except (pyscope.ScopeError, ValueError, LookupError, cst.CSTValidationError):
        return ()
    done = op.impl.locate(edited_scope)
    if done.state != State.DONE or len(done.nodes) != 1:
        return ()
    return follow.statement(edited_scope, done.nodes[0])


def _context(session: Session, op: OpSpec) -> Optional[Located]:
    """An op whose verdict depends on other files (Op.context_files) judges them here."""
    files = op.impl.context_files
    if not files:
        return None
    texts = {}
    for lf in files:
        d = session.file(op.engine, lf)
        texts[lf] = d.text if d.exists else None
    return op.impl.check_context(texts)


def judge(session: Session, recipe: Recipe, op: OpSpec) -> _Draft:
    """One op's verdict, as a draft (``evaluate`` freezes it).  An op's code that fails is
    a bug (exit 3), never a verdict."""
    try:
        return _judge(session, recipe, op)
    except PatchkitError:
        raise
    except Exception as e:
        raise OpBug(recipe.id, op.label, e) from e


def _ours(session: Session, recipe: Recipe, op: OpSpec) -> bool:
    return op.index in session.journal(op.engine).applied_ops(op.engine, recipe.id)


def _judge(session: Session, recipe: Recipe, op: OpSpec) -> _Draft:
    t = session.target(op.engine, recipe)
    try:
        f = session.file(op.engine, op.file)
    except TargetError as e:
        if op.file.startswith(tuple(lp for lp, _ in ENGINES[op.engine].layouts[t.layout])):
            raise  # the file's own trouble (a symlink out of the tree), said as it is
        # a file this layout has no place for (an installed vLLM's csrc/): which op names it
        raise TargetError(f"{recipe.id} > {op.label} > {e.message}", e.hint) from None
    if not f.exists:
        ev = _Draft(recipe, op, f, Located(State.MISSING, reason=f"{f.where()} does not exist"), op.scope)
    else:
        loc, impl = _locate_checked(session, op, recipe, f, op.scope), None
        if loc.state == State.AMBIGUOUS and f.is_python:
            loc, impl = _against_pristine(session, recipe, op, f, loc)
        if impl is None and loc.state in (State.AMBIGUOUS, State.MISSING) and loc.nodes and f.is_python:
            loc, impl = _singled_out(session, recipe, op, f, loc)
        elif impl is None and loc.state == State.PENDING and f.is_python and _ours(session, recipe, op):
            # Applied by patchkit at the one place of several the identity singled out: the
            # pattern left standing at another (the fp8 arm's "trtllm") is not the site.
            loc, impl = _singled_out(session, recipe, op, f, loc)
        ev = _Draft(recipe, op, f, loc, op.scope, impl=impl)
    ours = _ours(session, recipe, op)
    ident = None
    # (The release's own file, in range, is the home itself: its locate already says ambiguous.)
    asks = not ours and ev.located.state != State.DONE
    home = None
    if asks and not (f.exists and identity.holds_as_released(session, recipe, op, f)):
        home = identity.of(session, recipe, op)
    if home is not None and home.ambiguous:
        # Ambiguity carries forward: where it was written the op cannot single its site out,
        # so no place of this release can be shown to be it (never pending, never moved).
        said = (
            f"its pattern stands at several places of {op.scope or 'the module'} in {home.release}, the release it"
            " was written for, so which one is its site cannot be told there, nor here; give the op context"
            " (after/before/inside, or a narrower scope) to single it out"
        )
        ev.located = Located(State.AMBIGUOUS, ev.located.nodes, said)
    elif not ours and f.exists:
        ev.located, ident = _identified(session, recipe, op, f, ev.located)
    if ev.located.state == State.MISSING and not ours:
        session.sweep(op.engine)
        if ident is None:
            ident = identity.of(session, recipe, op)
        found, mf, mscope, mloc, ev.candidates = _relocate(session, recipe, op, f, ident)
        if found == State.MOVED:
            old = op.file + ("::" + op.scope if op.scope else "")
            why = f"moved from {old}" + (f"; {mloc.reason}" if mloc.reason else "")
            ev.file, ev.scope, ev.located = mf, mscope, Located(mloc.state, mloc.nodes, why)
        elif found == State.AMBIGUOUS:
            ev.located = mloc
        elif mloc.reason:
            ev.located = Located(State.MISSING, ev.located.nodes, f"{ev.located.reason}; {mloc.reason}")
        if ev.located.state == State.MISSING and not ev.located.nodes and f.exists:
            # The op's site is not found: the statement identified as the site by its
            # context alone may hold the edit in upstream's own words (edited.py).
            got = edited.upstream_in_place(session, recipe, op, f)
            if got is not None and got[0] is not None:
                ev.located = Located(State.UPSTREAM, (got[0],), got[1])
            elif got is not None:
                ev.searched = True  # not cacheable: a reference may be had later
                ev.located = Located(State.MISSING, (), f"{ev.located.reason}; {got[1]}")
    if ev.located.state == State.MISSING and not ev.located.nodes and not ours:
        # A text hunk whose context upstream rewrote as it made the edit (fuzzed.py).
        got = fuzzed.upstream(session, op, f)
        if got is not None and got[0] is not None:
            ev.file, ev.scope, ev.located = got[0], "", Located(State.UPSTREAM, (got[1],), got[2])
        elif got is not None:
            ev.searched = True  # not cacheable: a reference may be had later
            ev.located = Located(State.MISSING, (), f"{ev.located.reason}; {got[2]}")
    if ev.located.state == State.MISSING and not ev.located.nodes and ev.file is f and f.exists and f.is_python:
        # Its named def still stands but the site left it for a helper the def calls.
        followed = _followed(session, recipe, op, f)
        if followed is not None:
            ev = dataclasses.replace(ev, scope=followed[0], located=followed[1])
    if ev.located.state == State.PENDING:
        ev.located = _context(session, op) or ev.located
    if not ours and session.mid_write(op.engine, recipe.id) is None:
        # The goal the op is for may hold already, in other words (goal.py): never pending.
        ev.located = _goal(session, recipe, op, ev) or ev.located
    st, reason = ev.located.state, ev.located.reason
    mid = session.mid_write(op.engine, recipe.id)
    # A kill stopped a write of this recipe half-way: its files may hold either side of the
    # edit, and either way the edit is patchkit's (never "upstream", never "modified").
    killed = (op.index in mid.applied_ops(op.engine, recipe.id)) if mid is not None else None
    if st == State.DONE:
        ev.state, said, e, rule = _provenance(session, recipe, op, ev, ours, killed)
        reason = said if said or rule not in (1, 3) else reason
    else:
        goal_by = decision.GOAL_BY.get(st, "")
        found = State.PENDING if goal_by else st
        stale = ""
        if ours and killed is None and (st == State.PENDING or (st == State.MISSING and ev.located.nodes)):
            stale = _stale_record(session, op, ev.file)
            ev.stale = bool(stale)
        named = (ours or bool(killed)) and not stale  # the journal's (or a killed write's) record stands
        marker = ""
        if not goal_by and not named and op.markers and st in (State.PENDING, State.MISSING):
            hit = markers.hit(session, op, anywhere=st != State.PENDING or ev.moved, recipe=recipe)
            marker = hit or ""
        e = decision.Evidence(
            found,
            ev.moved,
            neither=st == State.MISSING and bool(ev.located.nodes),
            journal=ours,
            killed=killed,
            goal=goal_by,
            goal_at=_goal_at(ev) if goal_by else "",
            goal_eval=reason if goal_by else "",
            stale=stale,
            marker=marker,
        )
        ev.state, rule = decision.decide(e)
        if rule == 10:
            reason = (
                "patchkit applied this op, but the code no longer shows it"
                if not ev.moved
                else f"patchkit applied this op, but it is not there now ({reason})"
            )
        elif rule == 11:
            # The site is there, holding neither side of the edit (a default set by hand to a
            # third value): patchkit's edit was there, and the code changed since.
            reason = f"patchkit applied this op, but the code changed since: {reason}"
        elif rule == 12:
            reason = marker
        elif stale:
            reason = f"patchkit's record of this edit is stale: {stale}" + (f"; {reason}" if reason else "")
        elif ours and ev.state == State.MISSING:
            reason += " (patchkit had applied it)"
    ev.evidence = e.to_json(rule)
    if ev.state == State.MISSING and not ours:
        said = equivalent.hint(session, op, [c.to_json() for c in ev.candidates])
        reason = "; ".join(r for r in (reason, said) if r)
    ev.message = reason
    if ev.file.is_python and ev.op.impl.language == "python" and ev.file.exists and _cst_nodes(ev.located):
        ev.root = (ev.file.module, ev.file.view)
    return ev


def _goal(session: Session, recipe: Recipe, op: OpSpec, ev: _Draft) -> Optional[Located]:
    """The op's goal reached without it (goal.py): at its pending site (the gate there already
    gives the answer its edit is for), or, its pattern gone, at the one device gate of its
    scope.  Then who reached it: upstream when the pristine release's code reaches it too,
    else someone else (``applied?`` with no release to read).  None when the goal is not
    shown reached (the verdict stands)."""
    device = goal.device_of(recipe)
    loc, f = ev.located, ev.file
    cpp = (
        device is not None
        and op.kind in goal.CPP_KINDS
        and (goal.is_cpp(op.file) or goal.is_cmake(op.file))
        and f.exists
    )
    if not cpp and (not f.exists or not f.is_python or op.impl.language != "python"):
        return None
    ref = session.reference(op.engine)
    keep: tuple = ()  # the site's own node, where the goal is read at it
    if cpp:
        # A C/C++/CUDA hunk that widens a device gate: its lines gone, the one device gate of
        # the function the edit was in admits the device (goal.cpp_in_scope); a CMake hunk
        # that adds the device to an arch list: that list admits it (goal.cmake_in_scope).
        if loc.state != State.MISSING or loc.nodes or ev.file is not session.file(op.engine, op.file):
            return None
        home_text = _home_text(session, recipe, op)
        got = goal.text_in_scope(op, f.text, home_text, device) if home_text is not None else None
        if got is None:
            return None

        def there(text: str) -> bool:
            return goal.text_in_scope(op, text, home_text, device) is not None

        where = f"in {op.file}"
    elif loc.state == State.MISSING and len(loc.nodes) == 1 and _cst_nodes(loc) and getattr(op.impl, "bound", None):
        keep = loc.nodes
        got = goal.bound_reached(op, loc.nodes[0])
        if got is None:
            return None

        def there(text: str) -> bool:
            module = ref.module(ev.file.logical)
            try:
                found = op.impl.locate(pyscope.resolve(module, ev.scope)[-1]) if module is not None else None
            except pyscope.ScopeError:
                found = None
            return found is not None and len(found.nodes) == 1 and goal.bound_reached(op, found.nodes[0]) is not None

        where = f"at its site in {ev.scope or 'the module'}"
    elif op.kind == "delete-stmt":
        # Absence at the identified scope: the deleted statement stands nowhere in it.
        if loc.state != State.MISSING or loc.nodes or ev.file is not session.file(op.engine, op.file):
            return None
        home_text = _home_text(session, recipe, op)
        got = goal.absent(op, f.text, home_text)
        if got is None:
            return None

        def there(text: str) -> bool:
            return goal.absent(op, text, home_text) is not None

        where = f"in {op.scope or 'the module'}"
    elif op.kind == "insert":
        # Presence by identity: the inserted code already stands in the scope, in other
        # formatting; a def (class) by its name bound in the scope, whatever its body.  Its
        # anchor gone (missing), the goal is still presence in the scope.
        placed = loc.state == State.PENDING or (loc.state == State.MISSING and not loc.nodes)
        if not placed or ev.file is not session.file(op.engine, op.file) or ev.scope != op.scope:
            return None
        presence = goal.defined if goal.holds_defs(op) else goal.present
        got = presence(op, f.text)
        if got is None:
            return None
        home_text = _home_text(session, recipe, op)
        pristine = ref.read(ev.file.logical) if ref.available else None
        if (
            home_text is not None
            and (pristine is None or home_text != pristine.decode("utf-8", "surrogateescape"))
            and presence(op, home_text) is not None
        ):
            return None  # the code stood there already where the op was written, pending: not its goal

        def there(text: str) -> bool:
            return presence(op, text) is not None

        where = f"in {op.scope or 'the module'}"
    elif op.kind == "ensure-import":
        # The name bound from the module at the top level, a relative import resolved.
        if loc.state != State.PENDING or ev.file is not session.file(op.engine, op.file):
            return None
        got = goal.imported(op, f.text, op.file)
        if got is None:
            return None

        def there(text: str) -> bool:
            return goal.imported(op, text, op.file) is not None

        where = f"in {op.file}"
    elif goal.relaxing(op) is not None or (device is not None and goal.widening(op) is not None):
        # An assertion turned into a fallback: the assertion no longer stops the run, the code
        # leaving by the same fallback where it would fail (before the assertion, or with it
        # gone); or widened for the device: the assertion admits it.
        placed = loc.state == State.PENDING or (loc.state == State.MISSING and not loc.nodes)
        if not placed or ev.file is not session.file(op.engine, op.file) or ev.scope != op.scope:
            return None
        home_text = _home_text(session, recipe, op)

        def reached(text: str) -> Optional[goal.Reached]:
            if goal.relaxing(op) is not None:
                return goal.relaxed(op, text, home_text)
            return goal.widened(op, text, home_text, device)

        got = reached(f.text)
        if got is None:
            return None

        def there(text: str) -> bool:
            return reached(text) is not None

        where = f"in {op.scope or 'the module'}"
    elif op.kind == "add-branch" and device is not None:
        # The chain already takes the device into the clause's statements, in other words.
        placed = loc.state in (State.PENDING, State.MISSING)
        if not placed or ev.file is not session.file(op.engine, op.file) or ev.scope != op.scope:
            return None
        home_text = _home_text(session, recipe, op) if loc.state == State.MISSING else None
        got = goal.routed(op, f.text, home_text, device)
        if got is None:
            return None

        def there(text: str) -> bool:
            home = home_text if home_text is not None else _home_text(session, recipe, op)
            return goal.routed(op, text, home, device) is not None

        where = f"in {op.scope or 'the module'}"
    elif device is None or goal.direction(op) is None:
        return None
    elif loc.state == State.PENDING and len(loc.nodes) == 1 and _cst_nodes(loc):
        got = goal.in_place(op, f.text, ev.scope, loc.nodes[0], None, device)
        if got is None:
            return None

        def there(text: str) -> bool:
            pristine = _pristine_site(ref, op, ev.file.logical, ev.scope)
            return pristine is not None and goal.in_place(op, text, ev.scope, pristine, None, device) is not None

        where = f"at its site in {ev.scope or 'the module'}"
    elif loc.state == State.MISSING and not loc.nodes and ev.file is session.file(op.engine, op.file):
        home_text = _home_text(session, recipe, op)
        if home_text is None:
            return None
        got = goal.in_scope(op, f.text, home_text, device)
        if got is None:
            return None

        def there(text: str) -> bool:
            return goal.in_scope(op, text, home_text, device) is not None

        where = f"in {op.scope or 'the module'}"
    else:
        return None
    nodes = keep or ((got.line,) if got.line else ())
    if not ref.available:
        ev.searched = True  # not cacheable: a reference may be had later
        return Located(
            State.APPLIED_UNSURE,
            nodes,
            f"{got.why}; who reached it cannot be told (no pristine release: {ref.why_not})",
        )
    data = ref.read(ev.file.logical)
    if data == f.original or (data is not None and there(data.decode("utf-8", "surrogateescape"))):
        return Located(State.UPSTREAM, nodes, f"the goal is reached {where}, in upstream's own words: {got.why}")
    return Located(
        State.FOREIGN,
        nodes,
        f"the goal is reached {where}, but not by patchkit and not in {ref.what}: {got.why}; someone else made"
        " this edit. apply leaves it, revert never touches it",
    )


def _goal_at(ev: _Draft) -> str:
    """file:line of a goal reached without the op (its site's first line, where known)."""
    nodes = ev.located.nodes
    line = nodes[0] if nodes and isinstance(nodes[0], int) else None
    return f"{ev.file.logical}:{line}" if line else ev.file.logical


def _home_text(session: Session, recipe: Recipe, op: OpSpec) -> Optional[str]:
    """The op's file in the first release it may have been written for (identity._homes)
    where its pattern stands pending, or None."""
    home = next(
        (
            r.read(op.file)
            for _, r in identity._homes(session, recipe, op)
            if pristine_state(r, op, op.file, op.scope) == State.PENDING
        ),
        None,
    )
    return home.decode("utf-8", "surrogateescape") if home is not None else None


def _pristine_site(ref, op: OpSpec, logical: str, scope_name: str):
    """The op's pending site node in a reference's copy of ``logical``, or None."""
    module = ref.module(logical) if ref.available else None
    if module is None:
        return None
    try:
        loc = op.impl.locate(pyscope.resolve(module, scope_name)[-1])
    except pyscope.ScopeError:
        return None
    return loc.nodes[0] if loc.state == State.PENDING and len(loc.nodes) == 1 else None


def _cst_nodes(loc: Located) -> bool:
    """The site's nodes are libcst's (not the line numbers of a site found by ``edited``)."""
    return bool(loc.nodes) and not all(isinstance(n, int) for n in loc.nodes)


def _against_pristine(session: Session, recipe: Recipe, op: OpSpec, f: Document, loc: Located) -> tuple[Located, Any]:
    """An ambiguous answer the pristine release settles: an op whose done sites the code
    alone cannot tell (Op.relative_to) finds them by what the release held at each place:
    as released, else with the recipe's other edits of that scope made (two ops that both
    write `"flashinfer"` there).  (located, the bound op) when it reads done so, else (loc, None)."""
    ref = session.reference(op.engine)
    module = ref.module(op.file) if ref.available else None
    if module is None:
        return loc, None
    try:
        pristine = pyscope.resolve(module, op.scope)[-1]
        now = f.scope(op.scope)[1]
        for before in (pristine, _with_siblings(recipe, op, pristine, _siblings_bound(session, recipe, op, f, now))):
            bound = op.impl.relative_to(before)
            if bound is not op.impl and (got := bound.locate(now)).state == State.DONE:
                return got, bound
    except pyscope.ScopeError:
        pass
    return loc, None


def _siblings_bound(session: Session, recipe: Recipe, op: OpSpec, f: Document, now: Any) -> dict:
    """op index -> the other ops of the recipe in this scope that the site's identity binds
    to one place of it (``_singled_out``: their pattern stands there several times)."""
    out = {}
    for o in recipe.ops:
        if o is op or (o.engine, o.file, o.scope) != (op.engine, op.file, op.scope) or o.impl.language != "python":
            continue
        loc = o.impl.locate(now)
        if loc.state in (State.AMBIGUOUS, State.MISSING) and loc.nodes:
            _, impl = _singled_out(session, recipe, o, f, loc)
            if impl is not None:
                out[o.index] = impl
    return out


def _with_siblings(recipe: Recipe, op: OpSpec, scope: Any, bound: Optional[dict] = None) -> Any:
    """``scope`` with each other op of the recipe that edits it, pending there, applied (in
    order); ``bound``: op index -> the op bound to its one place (``_siblings_bound``)."""
    for o in recipe.ops:
        if o is op or (o.engine, o.file, o.scope) != (op.engine, op.file, op.scope) or o.impl.language != "python":
            continue
        impl = (bound or {}).get(o.index, o.impl)
        try:
            if impl.locate(scope).state == State.PENDING:
                scope = impl.apply(scope)
        except (ValueError, LookupError, cst.CSTValidationError):
            continue  # that op cannot be made here: the release as it stands is the best before
    return scope


# -- who made an edit ------------------------------------------------------------------------


def _provenance(session: Session, recipe: Recipe, op: OpSpec, ev: _Draft, ours: bool, killed=None) -> tuple:
    """Who made an edit that is there (the site reads done), decided by the table
    (decision.py) from the evidence: patchkit's record proving it (proof.recorded: the file
    as patchkit wrote it, or the site's very bytes recorded, in the journal or its mirror, or
    a patched wheel), else what the pristine release or HEAD holds at the site
    (``_pristine``).  Never "patchkit's" by elimination.  (state, message, Evidence, rule)."""
    mid_write = killed is not None and (ours or killed)  # a killed write of this recipe names the op (rule 1)
    why = "" if mid_write else proof.recorded(session, recipe, op, ev)
    holds, marker, said = (None, "", "") if why or mid_write else _pristine(session, recipe, op, ev, ours)
    e = decision.Evidence(State.DONE, ev.moved, journal=ours, killed=killed, proof=why, pristine=holds, marker=marker)
    state, rule = decision.decide(e)
    if rule == 1:
        msg = ""
    elif rule == 2:
        msg = "" if why == proof.AS_WRITTEN else f"patchkit's edit: {why}"
    elif rule in (3, 6) and state == State.UPSTREAM:
        msg = said or marker or ev.located.reason
    elif rule == 4:
        msg = (
            "patchkit applied this op, but the code at its site is not what patchkit wrote there"
            f" (changed since; {said} does not have it either): the edit there is not provably patchkit's"
        )
    elif rule == 5:
        msg = (
            f"the edit is there, but patchkit did not write it: {said} does not have it and no record of"
            " patchkit's (journal, its mirror, a patched wheel) proves these bytes; someone else made it."
            f" apply leaves it, revert never touches it; `patchkit adopt {recipe.id}` makes it patchkit's"
        )
    else:
        who = (
            "patchkit's journal names it, but the code at its site is not what patchkit wrote"
            if ours
            else "no record of patchkit's proves it"
        )
        msg = f"the edit is there, but who made it cannot be told ({who}; no pristine release to compare: {said})"
    return state, msg, e, rule


def pristine_state(ref, op: OpSpec, logical: str, scope_name: str, impl: Any = None) -> State:
    """What the op (``impl``: the op bound to its site, Op.only) finds in a reference's
    copy of ``logical`` (MISSING when it has none)."""
    impl = impl or op.impl
    data = ref.read(logical)
    if data is None:
        return State.MISSING
    if not logical.endswith(".py"):
        return impl.locate(data.decode("utf-8", "surrogateescape")).state
    module = ref.module(logical)
    if module is None:
        return State.MISSING
    try:
        scope = pyscope.resolve(module, scope_name)[-1]
    except pyscope.ScopeError:
        return State.MISSING
    return impl.locate(scope).state


def at_site(ref, op: OpSpec, ev: Verdict) -> State:
    """What a reference holds at the site identified in the tree: where it was found, or,
    for a site found away from the op's named file and scope (a refactor, a checkout moved
    on), where the reference has it.  Provenance by content, not by location: upstream's own
    code that moved reads upstream, never "patchkit's edit: the release does not have it"."""
    found = pristine_state(ref, op, ev.file.logical, ev.scope, ev.impl)
    if found != State.DONE and (ev.file.logical, ev.scope) != (op.file, op.scope):
        if pristine_state(ref, op, op.file, op.scope) == State.DONE:
            return State.DONE
    return found


def _pristine(session: Session, recipe: Recipe, op: OpSpec, ev: _Draft, ours: bool) -> tuple:
    """The evidence of the pristine release for an edit that is there and that no record of
    patchkit's proves: (True: it, or a git checkout's committed code (HEAD), holds the edit at
    the identified site (``at_site``) / False: it lacks it / None: no release can be read,
    an upstream marker that matches then, what says so).  The third item names the release
    (or says why none can be read, or what HEAD holds)."""
    ref = session.reference(op.engine)
    found: Optional[State] = None
    if ref.available:
        if ref.read(ev.file.logical) == ev.file.original:
            found = State.DONE  # the release's own file, byte for byte: no parse needed
        else:
            found = at_site(ref, op, ev)
    head = session.head(op.engine) if not ours and found != State.DONE else None
    if head is not None and at_site(head, op, ev) == State.DONE:
        return True, "", f"{head.what} has this edit: it is the checkout's own code, not patchkit's"
    if found == State.DONE:
        if ours:
            ev.stale = True
            return True, "", f"{ref.what} has this edit (patchkit's record of it is from before an upgrade)"
        return True, "", ""
    if found is not None:
        return False, "", ref.what
    ev.searched = True  # not cacheable: a reference may be had later
    hit = markers.hit(session, op, anywhere=False, recipe=recipe) if not ours and op.markers else ""
    return None, hit or "", ref.why_not


def _stale_record(session: Session, op: OpSpec, f: Document) -> str:
    """Why the journal's record of an edit no longer holds, when the file is as it was
    before patchkit wrote it (restored by hand), or an installer put it there since (pip
    reinstalled or upgraded the engine: the bytes are those its RECORD lists, or the
    pristine release's); "" otherwise, and then a changed file is the user's edit."""
    if not f.exists:
        return ""
    j = session.journal(op.engine)
    entry = j.written(op.engine, f.logical)
    now = sha256(f.original)
    if entry is not None and entry["sha256"] == now:
        return ""  # exactly as patchkit wrote it
    t = session.targets[op.engine]
    was, is_ = j.version(op.engine), t.version
    upgraded = bool(was and is_ and was != is_)
    if upgraded:
        since = f"{op.engine} was upgraded from {was} to {is_} since patchkit last wrote it"
    elif was:
        since = f"{op.engine} {was} was reinstalled since patchkit last wrote it"
    else:  # a journal from before patchkit recorded the version
        since = f"{op.engine} was reinstalled or upgraded (now {is_ or 'of unknown version'}) since patchkit wrote it"
    if entry is not None and entry["pristine"] == now:
        return "the file is as it was before patchkit wrote it" + (f" ({since})" if upgraded else "")
    from patchkit.core import record

    listed = record.installed_as(t, f.logical, f.original) if entry is not None else ""
    if listed:
        return f"{since}: the file is as the installer wrote it ({listed} lists its bytes)"
    ref = session.reference(op.engine)
    if ref.available and ref.read(f.logical) == f.original:
        return f"{since}: the file is {ref.what}'s, byte for byte"
    return ""


def _add_lines(evals: list[_Draft]) -> None:
    """Line numbers for every verdict, one codegen pass per Python module read."""
    by_file: dict[tuple, list[_Draft]] = {}
    for ev in evals:
        by_file.setdefault((ev.file.path, ev.root[0] if ev.root else None), []).append(ev)
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
            if ev.state == State.AMBIGUOUS and ev.lines:
                ev.message += f" (candidates at lines {', '.join(map(str, ev.lines))})"


def _follow_anchors(session: Session, recipe: Recipe, evs: list[_Draft]) -> None:
    """Ops of a recipe whose file is gone follow an op of the same file that moved: they are
    looked for in the file it went to, and their message says they followed."""
    went = {}
    for ev in evs:
        if ev.state == State.MOVED and ev.file.logical != ev.op.file:
            went.setdefault((ev.op.engine, ev.op.file), ev)
    for ev in evs:
        anchor = went.get((ev.op.engine, ev.op.file))
        if anchor is None or ev.file.exists or ev.state != State.MISSING:
            continue
        there = anchor.file
        follow = f"followed {anchor.op.label}, which moved to {there.logical}"
        try:
            loc = _locate(ev.op, there, ev.op.scope)
        except PatchkitError:
            loc = Located(State.MISSING)
        if loc.state == State.PENDING:
            ev.file, ev.scope, ev.located, ev.state = there, ev.op.scope, loc, State.MOVED
            ev.message = f"{follow}; pending there"
        elif loc.state == State.DONE:
            ev.file, ev.scope, ev.located = there, ev.op.scope, loc
            ev.state, why, e, rule = _provenance(session, recipe, ev.op, ev, False)
            ev.evidence = e.to_json(rule)
            ev.message = f"{follow}; {why}" if why else follow
        else:
            ev.message = f"{ev.op.file} does not exist; {follow}, but this op's site is not there either"
        if ev.file.is_python and ev.op.impl.language == "python" and ev.file.exists and ev.located.nodes:
            ev.root = (ev.file.module, ev.file.view)


def target_versions(session: Session, recipe: Recipe) -> dict[str, Optional[str]]:
    return {e: (session.targets[e].version if e in session.targets else None) for e in recipe.engines}


def evaluate(session: Session, recipes: list[Recipe]) -> Evaluation:
    """Every op of each recipe judged, on the version variant of the targets' versions
    (``Recipe.for_versions``); the recipes come back cut down to those ops, each verdict
    frozen, with the blockers that stand and why a nearer variant was judged: a value
    (``Evaluation``); the Session is only read."""
    cut, notes = [], {}
    for r in recipes:
        variant, note = r.for_versions(target_versions(session, r))
        if note:
            notes[r.id] = note
        cut.append(variant)
    recipes = cut
    for r in recipes:  # what each Python file will be read for, before any is parsed
        for op in r.ops:
            if op.engine in session.targets and op.file.endswith(".py"):
                f = session.file(op.engine, op.file)
                if op.impl.language == "python":
                    f.want(op.scope, view.patterns(op.impl))
                else:  # a text op (a comment's hunk) reads and writes the whole file's text
                    f.whole()
    out = [(r, [judge(session, r, op) for op in r.ops]) for r in recipes]
    for r, evs in out:
        _follow_anchors(session, r, evs)
    _add_lines([ev for _, evs in out for ev in evs])
    blocked = {}
    for r, evs in out:
        # A blocker in the very scope one of the recipe's pending ops edits is what that op
        # takes away (apply checks it is gone afterwards): it does not block yet.
        pending = {(ev.file.logical, ev.scope) for ev in evs if ev.state == State.PENDING}
        blocked[r.id] = tuple(b for b in blockers.find(session, r) if (b.file, b.scope) not in pending)
    return Evaluation(tuple((r, tuple(ev.freeze() for ev in evs)) for r, evs in out), blocked, notes)
