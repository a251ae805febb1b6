"""`apply`, `revert` and `diff`: the commands that plan edits."""

from __future__ import annotations

import re

from patchkit.base.errors import PatchkitError
from patchkit.base.states import GOOD, State
from patchkit.commands import NOT_THERE, OK, Invocation, Options, open_session, open_targets, say
from patchkit.core import learned, replay, report, transaction
from patchkit.core.replay import Outcome
from patchkit.fleet import jit


def _finish(
    opts: Options, command: str, o: Outcome, targets, ok: bool, dry_run: bool, clear_jit: bool, notes, extra=None
) -> int:
    notes = list(o.before) + list(notes) + list(o.after)
    if o.jit_modules:
        notes += jit.note(o.jit_version, set(o.jit_modules), clear_jit)
    written = list(o.written)
    if opts.json:
        say(
            report.as_json(
                command,
                o.results,
                ok,
                targets,
                dry_run=dry_run,
                written=[] if dry_run else written,
                would_write=written if dry_run else [],
                errors=list(o.blockers),
                notes=notes,
                **(extra or {}),
            )
        )
    else:
        say(report.human(o.results, targets))
        for b in o.blockers:
            say(f"error: {b}", err=True)
        if o.blockers:
            say(f"{command}: nothing was written.", err=True)
        elif dry_run:
            say(f"\n{command} --dry-run: would write {len(written)} file(s); nothing was written.")
        elif written:
            say(f"\nwrote {len(written)} file(s):" + "".join(f"\n  {w}" for w in written))
        else:
            skipped = [r.id for r in o.results if r.state == State.SKIPPED]
            if skipped:
                say(
                    f"\nnothing written: {', '.join(skipped)} skipped, out of the version range"
                    " of the targets (see above); --ignore-range applies anyway."
                )
            else:
                say(f"\nnothing to {command}: every recipe is already in the asked-for state.")
        for n in notes:
            say(n)
    return OK if ok else NOT_THERE


def _warn(said: list[str], w: str) -> None:
    """Tell a recipe's warning (on stderr) and note it in ``said`` (a plan kept tells it again)."""
    said.append(w)
    say(w, err=True)


def warning(recipe) -> str:
    """What a recipe warns of before it is applied: the paragraphs of its rationale that
    begin with ``WARNING:``, as one line ("" when none)."""
    paragraphs = re.split(r"\n\s*\n", recipe.rationale)
    said = [" ".join(p.split())[len("WARNING:") :].strip() for p in paragraphs if p.lstrip().startswith("WARNING:")]
    return " ".join(said)


def apply(
    opts: Options,
    dry_run: bool = False,
    ignore_range: bool = False,
    clear_jit: bool = False,
    profile=None,
    named: tuple[str, ...] = (),
    saving: bool = False,
) -> int:
    """Apply recipes to their targets: all edits or none.  With a ``profile``, the recipes it
    excludes are left out of the bundles named (a recipe in ``named`` is applied even so).
    A recipe whose rationale carries a warning has it printed, once, before its edits are
    written."""
    said: list[str] = []  # the warnings told, in order (the plan cache tells them again)
    left: list[str] = []
    insisted: list[str] = []  # named on their own although the profile excludes them
    look = replay.lookup(opts, "apply", dry_run, ignore_range=ignore_range, named=list(named), profile=profile)
    got = replay.served(look, "apply", lambda w: _warn(said, w))
    if got is not None:
        o, ok, targets, left[:], insisted[:] = got
        notes: list[str] = []
    else:
        from patchkit.core.planner import plan_apply  # libcst: only where the cache does not serve

        if profile is not None:  # its names, with its file and line, before the catalog selects them
            from patchkit.fleet import profile as P

            P.check(profile, opts.project.catalog())

        from patchkit.core.session import Session
        from patchkit.upstream.pristine import RELEASES

        recipes, targets, known = open_targets(opts)
        if profile is not None:
            left[:] = profile.left_out([r.id for r in recipes], named)
            insisted[:] = [r.id for r in recipes if r.id in profile.exclude and r.id not in left]
            recipes = [r for r in recipes if r.id not in left]
        with transaction.locked(targets, dry_run) as recovered:
            session = Session(targets, known=known, releases=RELEASES)
            plan = plan_apply(session, recipes, ignore_range=ignore_range, dry_run=dry_run)
            writing = {m.recipe for m in plan.marks if m.action == "applied"} if not plan.blockers else set()
            for r in recipes:  # before the write, once
                w = warning(r) if r.id in writing else ""
                if w:
                    _warn(said, f"warning: {r.id}: {w}")
            ran = transaction.finish(session, plan, "apply", dry_run, recovered)
        learned.keep(session.learned)  # what judging learned, cached once it is done
        notes = list(ran.notes)
        edits = plan.edits()  # a dry run's edits count as made
        ok = not plan.blockers and all(
            r.state in GOOD
            or (
                r.state not in (State.SKIPPED, State.INTERRUPTED)
                and all(o.state in GOOD or (o.recipe, o.index) in edits for o in r.ops)
            )
            for r in plan.results
        )
        o = Outcome.of(ran.session, plan, dry_run)
        replay.remember(look, ran, dry_run, said, o, ok, left, insisted)
    extra = {}
    if profile is not None:
        extra = {"profile": profile.to_json(), "excluded": list(left)}
        if left:
            notes = [
                f"left out {', '.join(left)}: excluded by the profile {profile.path}"
                " (name a recipe on its own to apply it anyway; --save then takes it out of exclude)",
                *notes,
            ]
        if insisted and not saving:
            notes.append(
                f"{', '.join(insisted)}: applied as named, but the profile {profile.path} excludes it, so `status`"
                " reads the tree as not matching the profile; --save takes it out of exclude"
            )
    return _finish(opts, "apply", o, targets, ok, dry_run, clear_jit, notes, extra)


def revert(opts: Options, dry_run: bool = False, force: bool = False, clear_jit: bool = False) -> int:
    """Take back what patchkit applied for these recipes, leaving everything else alone."""
    said: list[str] = []
    look = replay.lookup(opts, "revert", dry_run, force=force)
    got = replay.served(look, "revert", lambda w: _warn(said, w), force)
    if got is not None:
        o, ok, targets, _, _ = got
        return _finish(opts, "revert", o, targets, ok, dry_run, clear_jit, [])
    from patchkit.core.planner import plan_revert
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    recipes, targets, known = open_targets(opts)
    with transaction.locked(targets, dry_run) as recovered:
        session = Session(targets, known=known, releases=RELEASES)
        plan = plan_revert(session, recipes, force=force, dry_run=dry_run)
        ran = transaction.finish(session, plan, "revert", dry_run, recovered, force)
    learned.keep(session.learned)
    edits = plan.edits()  # a dry run's edits count as made
    ok = not plan.blockers and all(
        r.state != State.INTERRUPTED and all(o.state != State.APPLIED or (o.recipe, o.index) in edits for o in r.ops)
        for r in plan.results
    )
    o = Outcome.of(ran.session, plan, dry_run)
    replay.remember(look, ran, dry_run, said, o, ok)
    return _finish(opts, "revert", o, ran.session.targets, ok, dry_run, clear_jit, ran.notes)


def adopt(opts: Options, dry_run: bool = False) -> int:
    """Record edits someone else made (``someone-else``) as patchkit's: the journal alone
    is written.  Exit 0 when no op of the recipes is left someone else's."""
    from patchkit.core.planner import plan_adopt
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    recipes, targets, known = open_targets(opts)
    with transaction.locked(targets, dry_run) as recovered:
        session = Session(targets, known=known, releases=RELEASES)
        plan = plan_adopt(session, recipes, dry_run=dry_run)
        ran = transaction.finish(session, plan, "adopt", dry_run, recovered)
    learned.keep(session.learned)
    edits = plan.edits()
    ok = not plan.blockers and all(
        o.state != State.FOREIGN or (o.recipe, o.index) in edits for r in plan.results for o in r.ops
    )
    o = Outcome.of(ran.session, plan, dry_run)
    notes = list(ran.notes)
    if edits and not dry_run:
        notes.append(f"adopted {len(edits)} op(s): patchkit's journal now records them as patchkit's")
    elif not edits:
        notes.append("nothing to adopt: no op reads someone-else")
    return _finish(opts, "adopt", o, ran.session.targets, ok, dry_run, False, notes)


def diff(opts: Options, applied: bool = False, ignore_range: bool = False) -> int:
    """Print a unified diff: of what apply would write, or (--applied) of what is applied now."""
    from patchkit.core.planner import plan_apply, plan_revert, unified_diff

    recipes, session = open_session(opts)
    # dry_run: the verdicts say what would be done (`pending`, "would be applied"), not "applied now"
    if applied:
        plan = plan_revert(session, recipes, dry_run=True)
    else:
        plan = plan_apply(session, recipes, ignore_range=ignore_range, dry_run=True)
    learned.keep(session.learned)
    if opts.json:  # the verdicts (as `status --json`), and each file's diff
        files = [
            {"engine": e, "root": str(t.root), "path": t.relpath(f.logical), "diff": unified_diff([f], reverse=applied)}
            for e, t in session.targets.items()
            for f in plan.files
            if f.target is t
        ]
        ok = not plan.blockers
        say(
            report.as_json(
                "diff", plan.results, ok, session.targets, applied=applied, files=files, errors=plan.blockers
            )
        )
        return OK if ok else NOT_THERE
    for b in plan.blockers:
        say(f"error: {b}", err=True)
    if plan.blockers:
        return NOT_THERE
    printed = False
    for engine, t in session.targets.items():
        text = unified_diff([f for f in plan.files if f.target is t], reverse=applied)
        if text:
            # One block per target; paths are relative to its root (`git apply` / `patch -p1` there).
            say(f"# {engine}: {t.root}")
            say(text.rstrip("\n"), raw=True)  # the patch's own bytes (a form feed stays one)
            printed = True
    if not printed:
        what = "applied by patchkit" if applied else "to apply"
        say(f"nothing {what} for {', '.join(r.id for r in recipes)}", err=True)
    return OK


def apply_command(
    inv: Invocation,
    names: tuple[str, ...],
    target: tuple[str, ...],
    as_json: bool,
    dry_run: bool = False,
    ignore_range: bool = False,
    clear_jit: bool = False,
    save: bool = False,
) -> int:
    """`patchkit apply`: the names given, else what the profile names; with ``save``, the
    names given are recorded in the profile once applied."""
    prof = inv.profile(target)
    given = tuple(names)
    if not given:
        if save:
            raise PatchkitError("--save records the names given; there are none", "e.g. `patchkit apply sm120 --save`")
        if not prof.exists:
            raise PatchkitError(
                "apply needs recipe or bundle names, or a profile that names them",
                f"e.g. `patchkit apply sm120`; `patchkit apply sm120 --save` also records it in {prof.path}",
            )
        from patchkit.fleet.profile import no_names

        no_names(prof)
    opts = inv.options(given or prof.names, target, as_json)
    code = apply(
        opts,
        dry_run=dry_run,
        ignore_range=ignore_range,
        clear_jit=clear_jit,
        profile=prof if prof.exists else None,
        named=given or prof.recipes,
        saving=save,
    )
    return save_profile(prof, "apply", given, code, dry_run, opts) if save else code


def revert_command(
    inv: Invocation,
    names: tuple[str, ...],
    target: tuple[str, ...],
    as_json: bool,
    dry_run: bool = False,
    force: bool = False,
    clear_jit: bool = False,
    save: bool = False,
) -> int:
    """`patchkit revert`: names are required; with ``save``, the profile records the revert."""
    if not names:
        raise PatchkitError("revert needs recipe or bundle names", "e.g. `patchkit revert allreduce-fusion`")
    prof = inv.profile(target) if save else None
    opts = inv.options(names, target, as_json)
    code = revert(opts, dry_run=dry_run, force=force, clear_jit=clear_jit)
    return save_profile(prof, "revert", tuple(names), code, dry_run, opts) if prof is not None else code


def adopt_command(
    inv: Invocation, names: tuple[str, ...], target: tuple[str, ...], as_json: bool, dry_run: bool
) -> int:
    """`patchkit adopt`: names are required."""
    if not names:
        raise PatchkitError("adopt needs recipe or bundle names", "e.g. `patchkit adopt max-running-requests`")
    return adopt(inv.options(names, target, as_json), dry_run=dry_run)


def save_profile(profile, action: str, names: tuple[str, ...], code: int, dry_run: bool, opts: Options) -> int:
    """`--save`: record ``action`` of ``names`` in the profile, once the command reached the
    asked-for state (exit 0).  Prints what changed; returns the command's exit code."""
    from patchkit.fleet import profile as P

    out = opts.json  # stdout holds the one JSON document: this goes to stderr
    if dry_run:
        say(f"--save: --dry-run, so the profile {profile.path} was not changed", err=out)
        return code
    if code != OK:
        say(f"--save: {action} did not reach the asked-for state; the profile {profile.path} was not changed", err=out)
        return code
    catalog = opts.project.catalog()
    seed = None
    if not profile.exists and action == "revert":
        seed = _as_it_stands(opts, catalog, names)
    saved, changes = P.save(profile, action, names, catalog, seed=seed)
    what = "; ".join(changes) if changes else "nothing to change"
    if seed is not None and changes:
        what = f"there was none, so it records the tree as it now stands: {what}"
    say(f"profile {saved.path}: {what}", err=out)
    return code


def _as_it_stands(opts: Options, catalog, reverted: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(bundles, recipes) the targets carry, for `revert NAME --save` with no profile: a
    bundle whose every recipe is applied or upstream, the ones just reverted aside (they
    then join ``exclude``), with at least one of them patchkit's; and applied recipes no
    such bundle brings.  Only recipes of the engines the targets hold are judged."""
    from dataclasses import replace

    from patchkit.core.judge import evaluate
    from patchkit.core.verdict import results

    if opts.targets:
        engines = set(opts.project.targets(opts.targets, set()))
    else:
        from patchkit.base.target import ENGINES

        engines = {e for e in ENGINES if opts.project.tree(e).exists()}
    ids = tuple(r.id for r in catalog.select(()) if set(r.engines) <= engines)
    if not ids:
        return (), ()
    recipes, session = open_session(replace(opts, names=ids))
    states = {r.id: r.state for r in results(session, evaluate(session, recipes))}
    learned.keep(session.learned)
    gone = {i for n in reverted for i in catalog.bundles.get(n, [n])}
    mine = (State.APPLIED, State.APPLIED_UNSURE)
    bundles = tuple(
        b
        for b, members in catalog.bundles.items()
        if all(m in states for m in members)
        and all(states[m] in GOOD or m in gone for m in members)
        and any(states[m] in mine for m in members)
    )
    brought = {m for b in bundles for m in catalog.bundles[b]}
    lone = tuple(i for i, st in states.items() if st in mine and i not in brought)
    return bundles, lone
