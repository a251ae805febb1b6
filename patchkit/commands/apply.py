"""`apply`, `revert` and `diff`: the commands that plan edits."""

from __future__ import annotations

from patchkit import jit, report
from patchkit.commands import NOT_THERE, OK, Options, open_session, say
from patchkit.engine import commit, plan_apply, plan_revert, unified_diff
from patchkit.fsio import locked
from patchkit.results import APPLIED, PENDING, UPSTREAM, recipe_state


def _as_planned(results, command: str):
    """Dry-run results: what would be written reads as still to do, not as done."""
    now, then = ("applied now", "would be applied") if command == "apply" else ("reverted now", "would be reverted")
    state = PENDING if command == "apply" else APPLIED
    out = []
    for r in results:
        ops = tuple(o._replace(state=state, message=then) if o.message == now else o for o in r.ops)
        out.append(r._replace(ops=ops, state=recipe_state([o.state for o in ops]) if ops != r.ops else r.state))
    return out


def _finish(opts: Options, command: str, plan, session, ok: bool, dry_run: bool, clear_jit: bool) -> int:
    if dry_run:
        plan.results = _as_planned(plan.results, command)
    notes = list(plan.notes)
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
            say(f"\nnothing to {command}: every recipe is already in the asked-for state.")
        for n in notes:
            say(n)
    return OK if ok else NOT_THERE


def _locked_plan(session, make_plan, dry_run: bool):
    """Plan under the targets' locks and, unless dry-running, write it before letting go."""
    with locked([t.root for t in session.targets.values()]):
        plan = make_plan()
        if not plan.blockers and not dry_run:
            commit(session, plan)
    return plan


def apply(opts: Options, dry_run: bool = False, ignore_range: bool = False, clear_jit: bool = False) -> int:
    """Apply recipes to their targets: all edits or none."""
    recipes, session = open_session(opts)
    plan = _locked_plan(session, lambda: plan_apply(session, recipes, ignore_range=ignore_range), dry_run)
    ok = not plan.blockers and all(r.state in (APPLIED, UPSTREAM) for r in plan.results)
    return _finish(opts, "apply", plan, session, ok, dry_run, clear_jit)


def revert(opts: Options, dry_run: bool = False, force: bool = False, clear_jit: bool = False) -> int:
    """Take back what patchkit applied for these recipes, leaving everything else alone."""
    recipes, session = open_session(opts)
    plan = _locked_plan(session, lambda: plan_revert(session, recipes, force=force), dry_run)
    ok = not plan.blockers and all(o.state != APPLIED for r in plan.results for o in r.ops)
    return _finish(opts, "revert", plan, session, ok, dry_run, clear_jit)


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
