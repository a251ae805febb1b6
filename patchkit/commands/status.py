from __future__ import annotations

from patchkit.base.errors import PatchkitError
from patchkit.base.states import GOOD, State
from patchkit.base.target import STATE_DIR, TXN_PENDING
from patchkit.commands import NOT_THERE, OK, Invocation, Options, open_session, say
from patchkit.core import learned, report, verdicts


def _fast(opts: Options, code: str):
    """Cached verdicts for an unchanged tree, or None.  Imports no parser.  ``code`` is
    verdicts.code_hash(), computed once per invocation by ``status``."""
    if not opts.targets and not opts.project.workspace.exists():
        return None
    try:
        targets = opts.project.targets(opts.targets, _engines(opts))
    except PatchkitError:
        # A user's error (bad --target, no workspace tree): the full path reports it, after
        # the recipes, as it always does.  Only these: anything else is a bug in patchkit,
        # and must reach the top-level handler (exit 3), not turn into a slow `status`.
        return None
    if any(t.root.joinpath(STATE_DIR, TXN_PENDING).exists() for t in targets.values()):
        return None  # a write was interrupted: judge it for real
    k = verdicts.key(opts.project.recipe_dirs, opts.names, targets, code=code)
    res = verdicts.load(k, targets)
    return (res, targets) if res is not None else None


def _engines(opts: Options) -> set[str]:
    """The engines with a tree here (every engine when none has one: the error says which)."""
    from patchkit.base.target import ENGINES
    from patchkit.core.project import engines_at_hand

    return engines_at_hand(opts.project, opts.targets) or set(ENGINES)


# An excluded recipe is as the profile wants while none of its edits is in the code.
_PRESENT = (State.APPLIED, State.APPLIED_UNSURE, State.MODIFIED, State.FOREIGN)


def _as_excluded(r, profile):
    """(the result of a recipe the profile excludes, with why; whether it is as wanted)."""
    ok = r.state != State.INTERRUPTED and not any(o.state in _PRESENT for o in r.ops)
    said = f"excluded by the profile {profile.path}" + (
        "" if ok else f", but its edits are here: `patchkit revert {r.id}`"
    )
    return r._replace(message="; ".join(m for m in (said, r.message) if m)), ok


def _upgraded(targets, res) -> list[dict]:
    """Engines whose version changed since patchkit last wrote into them (the journal's
    record), while it still records files it wrote there: an upgrade to patch again.
    Only asked when some recipe is not as it should be (an upgrade shows as pending ops)
    and a journal is there: an applied, unchanged tree's `status` loads no journal."""
    if all(r.state in GOOD for r in res):
        return []
    roots = {e: t for e, t in targets.items() if t.root.joinpath(STATE_DIR, "journal.json").exists()}
    if not roots:
        return []
    from patchkit.base.journal import Journal

    out = []
    for engine, t in roots.items():
        j = Journal.load(t.root)
        was = j.version(engine)
        if was and t.version and was != t.version and j.engines.get(engine, {}).get("files"):
            out.append({"engine": engine, "from": was, "to": t.version})
    return out


def status(opts: Options, verbose: bool = True, profile=None, named: tuple[str, ...] = (), guards: bool = True) -> int:
    """Judge each recipe against the code as it is; exit 0 only if all are applied or upstream.
    With a ``profile``, a recipe it excludes (not in ``named``) is as wanted while none of
    its edits is in the code: pending, reverted, skipped or missing.  ``guards``: name the
    guarded servers holding each tree (read from /proc/locks: `run`, which is about to
    become one, does without)."""
    code = verdicts.code_hash()  # once: the key the cache is read with is the key it is saved with
    hit = _fast(opts, code)
    if hit is not None:
        res, targets = hit
    else:
        from patchkit.core.judge import evaluate
        from patchkit.core.verdict import cacheable, results

        if profile is not None:  # its names, with its file and line, before the catalog selects them
            from patchkit.fleet import profile as P

            P.check(profile, opts.project.catalog())
        recipes, session = open_session(opts)
        evaluated = evaluate(session, recipes)
        res = results(session, evaluated)
        learned.keep(session.learned)  # what judging learned, cached once it is done
        for n in session.notes():
            say(n, err=True)
        targets = session.targets
        full = set(targets) == set(opts.project.targets(opts.targets, _engines(opts)))
        if full and cacheable(session, evaluated) and not session.interrupted:
            verdicts.save(verdicts.key(opts.project.recipe_dirs, opts.names, targets, code=code), session, res)
    res = list(res)
    excluded = set(profile.left_out([r.id for r in res], named)) if profile is not None else set()
    oks = []
    for i, r in enumerate(res):
        if r.id in excluded:
            res[i], fine = _as_excluded(r, profile)
        else:
            fine = r.state in GOOD
        oks.append(fine)
    ok = all(oks)
    retire = [r.id for r in res if r.state == State.UPSTREAM]
    extra = {"profile": profile.to_json(), "excluded": sorted(excluded)} if profile is not None else {}
    upgraded = _upgraded(targets, res)
    if upgraded:
        extra["upgraded"] = upgraded
    if opts.json:
        say(report.as_json("status", res, ok, targets, retire=retire, **extra))
    else:
        say(report.human(res, targets, verbose))
        if retire:
            say(f"\nupstream already does {', '.join(retire)}: these recipes can be retired.")
        for u in upgraded:
            say(
                f"\n{u['engine']} was upgraded from {u['from']} to {u['to']} since patchkit last wrote it:"
                " `patchkit apply` on it (the same --python or --target) patches it again."
            )
        if profile is not None:
            say(f"\nprofile {profile.path}: {profile.describe()}")
        from patchkit.base import guardlock

        for root in sorted({t.root for t in targets.values()}) if guards else ():
            pids = guardlock.holders(root)
            if pids:
                held = f"held by a guarded server ({guardlock.said(pids)})"
                say(f"\n{root}: {held}: apply and revert refuse until it exits")
    return OK if ok else NOT_THERE


def status_command(inv: Invocation, names: tuple[str, ...], target: tuple[str, ...], as_json: bool, quiet: bool) -> int:
    """`patchkit status`: the names given, else the profile's (what it names and what it
    excludes), else every recipe."""
    prof = inv.profile(target)
    given = tuple(names)
    if not given and prof.exists:
        names = prof.names + prof.exclude
    profile = prof if prof.exists else None
    found = None
    if inv.python and not target:
        # The copies that interpreter imports, found as the serving guard finds them (its
        # probe remembered, no catalog): an unchanged venv answers from the verdict cache.
        from patchkit.fleet.interp import targets_named

        found = targets_named(inv.probe(), inv.project, tuple(names))
    if found is not None:
        opts = Options(names=tuple(names), targets=found, json=as_json, project=inv.project)
    else:
        opts = inv.options(names, target, as_json)
    return status(opts, verbose=not quiet, profile=profile, named=given or prof.recipes)
