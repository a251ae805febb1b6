"""`apply`, `revert` and `diff`: the commands that plan edits."""

from __future__ import annotations

from patchkit import jit, report, transaction
from patchkit.commands import NOT_THERE, OK, Options, open_session, say
from patchkit.planner import plan_apply, plan_revert, restored_notes, unified_diff
from patchkit.states import GOOD, State


def _finish(opts: Options, command: str, plan, session, ok: bool, dry_run: bool, clear_jit: bool, notes) -> int:
    notes = session.notes() + list(notes) + list(plan.notes)
    if plan.files and not dry_run:
        notes += restored_notes(session, plan)
    if plan.files and not dry_run and plan.jit_modules:
        fi = session.targets.get("flashinfer")
        notes += jit.note(fi.version if fi else None, plan.jit_modules, clear_jit)
    written = [str(f.path) for f in plan.files]
    if opts.json:
        say(
            report.as_json(
                command,
                plan.results,
                ok,
                session.targets,
                dry_run=dry_run,
                written=[] if dry_run else written,
                would_write=written if dry_run else [],
                errors=plan.blockers,
                notes=notes,
            )
        )
    else:
        say(report.human(plan.results, session.targets))
        for b in plan.blockers:
            say(f"error: {b}", err=True)
        if plan.blockers:
            say(f"{command}: nothing was written.", err=True)
        elif dry_run:
            say(f"\n{command} --dry-run: would write {len(written)} file(s); nothing was written.")
        elif written:
            say(f"\nwrote {len(written)} file(s):" + "".join(f"\n  {w}" for w in written))
        else:
            skipped = [r.id for r in plan.results if r.state == State.SKIPPED]
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


def apply(opts: Options, dry_run: bool = False, ignore_range: bool = False, clear_jit: bool = False) -> int:
    """Apply recipes to their targets: all edits or none."""

    def make():
        recipes, session = open_session(opts)
        return session, plan_apply(session, recipes, ignore_range=ignore_range, dry_run=dry_run)

    session, plan, notes = transaction.run(make, "apply", dry_run)
    edits = plan.edits()  # a dry run's edits count as made
    ok = not plan.blockers and all(
        r.state in GOOD
        or (
            r.state not in (State.SKIPPED, State.INTERRUPTED)
            and all(o.state in GOOD or (o.recipe, o.index) in edits for o in r.ops)
        )
        for r in plan.results
    )
    return _finish(opts, "apply", plan, session, ok, dry_run, clear_jit, notes)


def revert(opts: Options, dry_run: bool = False, force: bool = False, clear_jit: bool = False) -> int:
    """Take back what patchkit applied for these recipes, leaving everything else alone."""

    def make():
        recipes, session = open_session(opts)
        return session, plan_revert(session, recipes, force=force, dry_run=dry_run)

    session, plan, notes = transaction.run(make, "revert", dry_run)
    edits = plan.edits()  # a dry run's edits count as made
    ok = not plan.blockers and all(
        r.state != State.INTERRUPTED and all(o.state != State.APPLIED or (o.recipe, o.index) in edits for o in r.ops)
        for r in plan.results
    )
    return _finish(opts, "revert", plan, session, ok, dry_run, clear_jit, notes)


def diff(opts: Options, applied: bool = False, ignore_range: bool = False) -> int:
    """Print a unified diff: of what apply would write, or (--applied) of what is applied now."""
    recipes, session = open_session(opts)
    plan = plan_revert(session, recipes) if applied else plan_apply(session, recipes, ignore_range=ignore_range)
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
            say(text.rstrip("\n"))
            printed = True
    if not printed:
        what = "applied by patchkit" if applied else "to apply"
        say(f"nothing {what} for {', '.join(r.id for r in recipes)}", err=True)
    return OK
