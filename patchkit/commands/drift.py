"""`drift` (upgrade preflight) and `pin` (move a pin after the preflight)."""

from __future__ import annotations

import json

import click

from patchkit import drift as D
from patchkit import fetch
from patchkit import pins as pins_mod
from patchkit.commands import NOT_THERE, OK, say
from patchkit.errors import PatchkitError
from patchkit.project import Project
from patchkit.report import COLORS, human
from patchkit.states import State

ABBR = {  # matrix cells: what needs attention is in capitals
    State.APPLIED: "applied",
    State.PENDING: "pending",
    State.UPSTREAM: "UPSTREAM",
    State.MOVED: "MOVED",
    State.MISSING: "MISSING",
    State.AMBIGUOUS: "AMBIG",
    State.PARTIAL: "partial",
    State.MODIFIED: "modified",
    State.SKIPPED: "skipped",
    State.INTERRUPTED: "INTERRUPTED",
}


def _err(s: str) -> None:
    say(s, err=True)


def _pinned(project: Project) -> dict[str, str]:
    return {e: p.version for e, p in project.pins().items()}


def drift(
    project: Project,
    names: tuple[str, ...],
    to: tuple[str, ...],
    across: str | None,
    bisect: bool,
    as_json: bool,
    jobs: int,
) -> int:
    catalog = project.catalog()
    catalog.select(names)  # unknown names fail before any download
    if across:
        return _across(project, catalog, names, across, bisect, as_json, jobs)
    if bisect:
        raise PatchkitError(
            "--bisect goes with --across", "e.g. patchkit drift --across sglang==0.5.9..0.5.23 --bisect"
        )
    if not to:
        raise PatchkitError(
            "drift needs --to ENGINE==VERSION (or ENGINE=PATH) or --across ENGINE==A..B",
            "e.g. patchkit drift --to sglang==0.5.13",
        )
    trees = {}
    for spec in to:
        kind, engine, value = D.parse_spec(spec)
        if kind == "path":
            from patchkit.target import open_target

            trees[engine] = open_target(engine, value).root
        else:
            trees[engine] = D.release_tree(engine, value, say=_err)
    for engine, version in _pinned(project).items():
        if engine not in trees:
            trees[engine] = D.release_tree(engine, version, say=_err)
    res = D.judge_release(catalog, names, trees)
    good = D.ok(res)
    retire = [r.id for r in res if r.state == State.UPSTREAM]
    from patchkit.judge import Session
    from patchkit.target import open_target

    targets = Session({e: open_target(e, p) for e, p in trees.items()}).targets
    if as_json:
        from patchkit.report import as_json as dump

        say(dump("drift", res, good, targets, retire=retire))
    else:
        say(human(res, targets))
        if retire:
            say(f"\nupstream already does {', '.join(retire)}: retire these recipes before moving the pin.")
        bad = [r.id for r in res if r.state in D.BAD]
        say(
            f"\n{'ok' if good else 'needs work'}: "
            + (
                f"{', '.join(bad)} must be fixed before upgrading"
                if bad
                else "every recipe still applies or is upstream"
            )
        )
    return OK if good else NOT_THERE


def _across(project, catalog, names, spec, bisect, as_json, jobs) -> int:
    engine, a, b = D.parse_range(spec)
    versions = D.versions_between(engine, a, b)
    others = {e: v for e, v in _pinned(project).items() if e != engine}

    def run(vs: list[str]) -> dict[str, list[dict]]:
        return D.across(catalog, project.recipe_dirs, names, engine, vs, others, jobs=jobs, say=_err)

    changes = None
    if bisect:
        matrix, changes = D.bisect(run, versions)
        shown = [v for v in versions if v in matrix]
    else:
        matrix = run(versions)
        shown = versions
    good = all(r["state"] not in D.BAD for v in shown for r in matrix[v])
    if as_json:
        doc = {
            "command": "drift",
            "engine": engine,
            "ok": good,
            "versions": shown,
            "evaluated": len(shown),
            "of": len(versions),
            "matrix": {v: matrix[v] for v in shown},
        }
        if changes is not None:
            doc["changes"] = [
                {"recipe": c[0], "op": c[1] or None, "from": c[2], "to": c[3], "old": c[4], "new": c[5]}
                for c in changes
            ]
        say(json.dumps(doc, indent=2))
        return OK if good else NOT_THERE
    ids = [r["id"] for r in matrix[shown[0]]]
    width = max(8, *(len(v) for v in shown))
    say(
        f"{engine} releases {a}..{b}: {len(versions)} on the index"
        + (f", {len(shown)} evaluated (bisect)" if bisect else "")
    )
    say(" " * 24 + " ".join(f"{v:<{width}}" for v in shown))
    for rid in ids:
        cells = []
        for v in shown:
            r = next((r for r in matrix[v] if r["id"] == rid), None)
            st = D.cell(r) if r else "-"
            base = st.split("+")[0]
            cells.append(click.style(f"{ABBR.get(base, base) + st[len(base) :]:<{width}}", fg=COLORS.get(base)))
        say(f"{rid:<24}" + " ".join(cells))
    if any("+" in D.cell(r) for v in shown for r in matrix[v]):
        say("(+Nup: N of the recipe's ops are already upstream in that release)")
    if changes is not None:
        say("")
        for rid, what, v0, v1, s0, s1 in changes:
            say(f"{rid}{' ' + what if what else ''}: {v0} -> {v1}: {s0}  =>  {s1}")
        if not changes:
            say("no recipe, op or blocker changes across the range")
    return OK if good else NOT_THERE


def pin(project: Project, engine: str, version: str, force: bool) -> int:
    pins = project.pins()
    if engine not in pins:
        raise PatchkitError(f"no pin for {engine!r} in {project.pins_path}", f"pinned: {', '.join(pins)}")
    say(f"preflight: drift --to {engine}=={version}")
    code = drift(project, (), (f"{engine}=={version}",), None, False, False, 2)
    if code != OK and not force:
        say(
            f"\npin not moved: a recipe would be missing, ambiguous or moved on {engine} {version}; fix the "
            "recipes, or pass --force",
            err=True,
        )
        return NOT_THERE
    whl = fetch.fetch_wheel(pins[engine].index, version, say=_err)
    path = project.pins_path
    pins_mod.set_value(path, engine, "version", version)
    pins_mod.set_value(path, engine, "wheel", whl.name)
    pins_mod.set_value(path, engine, "sha256", fetch.file_sha256(whl))
    pins_mod.set_value(path, engine, "rev", f"v{version}")
    say(f"\n{path.name}: {engine} pinned to {version} (run `patchkit sync --force` to refresh the workspace)")
    return OK
