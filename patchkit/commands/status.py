from __future__ import annotations

from patchkit import report, verdicts
from patchkit.commands import NOT_THERE, OK, Options, open_session, say
from patchkit.results import APPLIED, UPSTREAM


def _fast(opts: Options):
    """Cached verdicts for an unchanged tree, or None.  Imports no parser."""
    if not opts.targets and not opts.project.workspace.exists():
        return None
    try:
        targets = opts.project.targets(opts.targets, _engines(opts))
    except Exception:
        return None  # the full path reports the error properly
    k = verdicts.key(opts.project.recipes_dir, opts.names, targets)
    res = verdicts.load(k, targets)
    return (res, targets) if res is not None else None


def _engines(opts: Options) -> set[str]:
    from patchkit.target import ENGINES

    return set(ENGINES)


def status(opts: Options, verbose: bool = True) -> int:
    """Judge each recipe against the code as it is; exit 0 only if all are applied or upstream."""
    hit = _fast(opts)
    if hit is not None:
        res, targets = hit
    else:
        from patchkit.engine import evaluate, results

        recipes, session = open_session(opts)
        res = results(session, evaluate(session, recipes))
        targets = session.targets
        if set(targets) == set(opts.project.targets(opts.targets, _engines(opts))):
            verdicts.save(verdicts.key(opts.project.recipes_dir, opts.names, targets), session, res)
    ok = all(r.state in (APPLIED, UPSTREAM) for r in res)
    retire = [r.id for r in res if r.state == UPSTREAM]
    if opts.json:
        say(report.as_json("status", res, ok, targets, retire=retire))
    else:
        say(report.human(res, targets, verbose))
        if retire:
            say(f"\nupstream already does {', '.join(retire)}: these recipes can be retired.")
    return OK if ok else NOT_THERE
