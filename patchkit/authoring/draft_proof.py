"""`gates --draft`, the proofs: a drafted recipe is written only where `check` validates it,
every op reads `pending` on the scanned tree, the planner (apply's checks, in memory) makes
exactly the drafted bytes, and on those bytes every op reads `applied`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.authoring.draft import Draft


def prove(d: Draft, targets: dict) -> list[tuple[str, bool, str]]:
    """The draft, proved before it is written: `check` (recipe validation), every op
    `pending` on the scanned tree, the planner's edit (apply's checks, in memory) equal to the
    drafted bytes, and those bytes judged: every op `applied`."""
    import tempfile

    from patchkit.base.states import State
    from patchkit.core.judge import evaluate
    from patchkit.core.planner import Plan, plan_apply
    from patchkit.core.recipe import check_recipe
    from patchkit.core.session import Session
    from patchkit.core.transaction import journals_after
    from patchkit.upstream.pristine import RELEASES

    checks: list[tuple[str, bool, str]] = []
    with tempfile.TemporaryDirectory(prefix="patchkit-draft-") as tmp:
        path = Path(tmp) / f"{d.rid}.toml"
        path.write_text(d.text, encoding="utf-8")
        recipe, errors = check_recipe(path)
    if recipe is None or errors:
        checks.append(("check", False, "; ".join(str(e) for e in errors) or "the draft does not load"))
        return checks
    checks.append(("check", True, f"the recipe validates ({len(recipe.ops)} op(s))"))
    used = {op.engine for op in recipe.ops}
    session = Session({e: t for e, t in targets.items() if e in used}, releases=RELEASES)
    judged = evaluate(session, [recipe])
    bad = [
        f"op #{ev.op.index} ({ev.op.kind} {ev.op.file}): {ev.state}" + (f" ({ev.message})" if ev.message else "")
        for _, evs in judged
        for ev in evs
        if ev.state != State.PENDING
    ]
    checks.append(("pending", not bad, "; ".join(bad) or "every op reads pending on the scanned tree"))
    if bad:
        return checks
    plan = plan_apply(session, [recipe], ignore_range=True, dry_run=True)
    if plan.blockers:
        checks.append(("plan", False, "; ".join(plan.blockers)))
        return checks
    made = {(f.target.engine, f.logical): f.new for f in plan.files}
    wrong = [
        f"{fd.engine}:{fd.logical}: the planner's bytes are not the drafted edit"
        for fd in d.files
        if made.pop((fd.engine, fd.logical), None) != fd.new
    ] + [f"{e}:{lg}: the planner edits a file the draft did not" for e, lg in made]
    checks.append(
        ("plan", not wrong, "; ".join(wrong) or "apply's checks pass in memory and give exactly the drafted bytes")
    )
    if wrong:
        return checks
    trial = Plan((), (), plan.files, plan.marks, plan.forget, plan.versions)
    after = session.as_planned(
        {(f.target.engine, f.logical): f.new for f in plan.files}, journals_after(session, trial)
    )
    bad = [
        f"op #{ev.op.index} ({ev.op.kind} {ev.op.file}): {ev.state}" + (f" ({ev.message})" if ev.message else "")
        for _, evs in evaluate(after, [recipe])
        for ev in evs
        if ev.state != State.APPLIED
    ]
    checks.append(("applied", not bad, "; ".join(bad) or "on the planned bytes every op reads applied"))
    return checks
