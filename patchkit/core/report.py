"""Rendering results: one table for people, one JSON document for machines, from the same values."""

from __future__ import annotations

from typing import Iterable

from patchkit.base import term
from patchkit.base.results import RecipeResult
from patchkit.base.states import State
from patchkit.base.target import Target

COLORS = {
    State.APPLIED: "green",
    State.UPSTREAM: "cyan",
    State.PENDING: "yellow",
    State.PARTIAL: "yellow",
    State.SKIPPED: "bright_black",
    State.MOVED: "magenta",
    State.MISSING: "red",
    State.AMBIGUOUS: "red",
    State.MODIFIED: "red",
    State.INTERRUPTED: "red",
}


def _state(s: State) -> str:
    return term.style(f"{s:<9}", fg=COLORS.get(s))


def _range(v) -> str:
    return {True: "in range", False: "OUT OF RANGE", None: "range unknown"}[v]


def human(results: Iterable[RecipeResult], targets: dict[str, Target], verbose: bool = True) -> str:
    out = [f"  {t.describe()}" for t in targets.values()]
    if out:
        out.append("")
    for r in results:
        line = f"{r.id:<24} {_state(r.state)} {_range(r.in_range)}"
        if r.message:
            line += f"  ({r.message})"
        out.append(line)
        for op in r.ops:
            if not verbose and op.state == r.state and not op.message:
                continue
            # Where the code is now: a moved op as file::scope:line of the place it moved to.
            now = op.location.split("::", 1)[0] or op.file
            if op.location and (now != op.file or op.state == State.MOVED):
                where = op.location
            else:
                where = f"{now}:{op.line}" if op.line else now
            msg = f"  {op.message}" if op.message else ""
            out.append(f"    #{op.index} {op.kind:<14} {_state(op.state)} {where}{msg}")
    return "\n".join(out)


def as_json(command: str, results: Iterable[RecipeResult], ok: bool, targets: dict[str, Target], **extra) -> str:
    doc = {
        "command": command,
        "ok": ok,
        "targets": {e: {"root": str(t.root), "layout": t.layout, "version": t.version} for e, t in targets.items()},
        "recipes": [r.to_json() for r in results],
        **extra,
    }
    import json  # only --json pays for it

    return json.dumps(doc, indent=2)
