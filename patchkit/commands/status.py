from __future__ import annotations

from patchkit import report
from patchkit.commands import NOT_THERE, OK, Options, open_session, say
from patchkit.engine import evaluate, results
from patchkit.model import APPLIED, UPSTREAM


def status(opts: Options, verbose: bool = True) -> int:
    """Judge each recipe against the code as it is; exit 0 only if all are applied or upstream."""
    recipes, session = open_session(opts)
    res = results(session, evaluate(session, recipes))
    ok = all(r.state in (APPLIED, UPSTREAM) for r in res)
    retire = [r.id for r in res if r.state == UPSTREAM]
    if opts.json:
        say(report.as_json("status", res, ok, session.targets, retire=retire))
    else:
        say(report.human(res, session.targets, verbose))
        if retire:
            say(f"\nupstream already does {', '.join(retire)}: these recipes can be retired.")
    return OK if ok else NOT_THERE
