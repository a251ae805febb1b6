"""`drift` (upgrade preflight) and `pin` (move a pin after the preflight)."""

from __future__ import annotations

import json
import shutil

from patchkit.base import term
from patchkit.base.errors import PatchkitError
from patchkit.base.states import State
from patchkit.commands import NOT_THERE, OK, say
from patchkit.core import pins as pins_mod
from patchkit.core.project import Project
from patchkit.core.report import COLORS, human
from patchkit.upstream import drift as D
from patchkit.upstream import fetch

ABBR = {  # matrix cells: what needs attention is in capitals
    State.APPLIED: "applied",
    State.PENDING: "pending",
    State.UPSTREAM: "UPSTREAM",
    State.MOVED: "MOVED",
    State.MISSING: "MISSING",
    State.AMBIGUOUS: "AMBIG",
    State.PARTIAL: "partial",
    State.FOREIGN: "someone-else",
    State.MODIFIED: "modified",
    State.SKIPPED: "skipped",
    State.INTERRUPTED: "INTERRUPTED",
}


def _err(s: str) -> None:
    say(s, err=True)


def _pinned(project: Project) -> dict[str, str]:
    """The pinned versions, or none where there is no upstream_pins.toml (a broken one is
    still an error)."""
    if project.pins_path is None:
        return {}
    return {e: p.version for e, p in project.pins().items()}


def _required_by(tree, engine: str) -> str | None:
    """The exact version of ``engine`` that a release unpacked in ``tree`` requires
    (``Requires-Dist: NAME==0.6.12`` in its dist-info or, for an sdist, PKG-INFO; extras
    allowed), or None."""
    import re

    from patchkit.base.target import ENGINES

    name = re.sub(r"[-_.]+", "[-_.]", ENGINES[engine].dist)  # a project name: letters, digits, - _ .
    pattern = re.compile(rf"^Requires-Dist:\s*{name}\s*(?:\[[^]]*\])?\s*==\s*([^\s;,]+)\s*$", re.I | re.M)
    for meta in [
        *sorted(tree.glob("*.dist-info/METADATA")),
        *([tree / "PKG-INFO"] if (tree / "PKG-INFO").is_file() else []),
    ]:
        m = pattern.search(meta.read_text(errors="replace"))
        if m:
            return m.group(1)
    return None


def _missing_engines(catalog, names, have: set[str], what: str) -> None:
    """Fail before any download when a selected recipe edits an engine that nothing gives a
    release of (no --to, no pin), naming the recipes and the way out.  With no recipe
    named, such recipes are left out (named on stderr) unless that leaves none."""
    from patchkit.base.target import ENGINES
    from patchkit.commands import at_hand, say_left

    need: dict[str, list[str]] = {}
    selected = catalog.select(names)
    if not names:
        selected, left = at_hand(list(selected), have)
        if not any(set(r.engines) - have for r in selected):
            say_left(left)
    for r in selected:
        for e in r.engines:
            if e not in have:
                need.setdefault(e, []).append(r.id)
    for e, ids in sorted(need.items()):
        raise PatchkitError(
            f"{what}: no {e} release to judge {', '.join(ids)} on (no --to {e}==VERSION, and no upstream_pins.toml)",
            f"add --to {e}==VERSION, name recipes that edit only "
            f"{' and '.join(x for x in ENGINES if x != e)}, or run where upstream_pins.toml is",
        )


def drift(
    project: Project,
    names: tuple[str, ...],
    to: tuple[str, ...],
    across: str | None,
    bisect: bool,
    as_json: bool,
    jobs: int,
    html: str | None = None,
) -> int:
    catalog = project.catalog()
    catalog.select(names)  # unknown names fail before any download
    if across:
        return _across(project, catalog, names, across, bisect, as_json, jobs, to, html)
    if html:
        raise PatchkitError("--html draws the matrix of --across", "e.g. patchkit drift sm120 --across "
                            "sglang==0.5.9..0.5.23 --html drift.html")  # fmt: skip
    if bisect:
        raise PatchkitError(
            "--bisect goes with --across", "e.g. patchkit drift --across sglang==0.5.9..0.5.23 --bisect"
        )
    if not to:
        raise PatchkitError(
            "drift needs --to ENGINE==VERSION (or ENGINE=PATH) or --across ENGINE==A..B",
            "e.g. patchkit drift --to sglang==0.5.13",
        )
    specs = [D.parse_spec(spec) for spec in to]
    given = {engine for _, engine, _ in specs}
    needed = {e for r in catalog.select(names) for e in r.engines}
    # An engine a given release pins exactly (its definition's `requires`, read from the
    # release's Requires-Dist) is judged at that release, over the pin, as `--across` pairs
    # them: the preflight judges the pair the release installs (and `pin` moves).  --to
    # overrides; anything else fails here, before a byte is downloaded.
    from patchkit.base.target import ENGINES

    by = {r: e for k, e, _ in specs if k == "release" for r in ENGINES[e].requires if r not in given}
    derive = set(by)
    # pinned releases of engines the recipes edit (a vLLM recipe downloads no SGLang)
    pins = {e: v for e, v in _pinned(project).items() if e not in given and e in needed}
    pinned = {e: v for e, v in pins.items() if e not in derive}
    _missing_engines(catalog, names, given | set(pinned) | derive, "drift")
    trees = {}
    releases: dict[str, str] = {}  # engine -> version, where the tree is a release
    for kind, engine, value in specs:
        if kind == "path":
            from patchkit.base.target import open_target

            trees[engine] = open_target(engine, value).root
        else:
            trees[engine], releases[engine] = D.tree(engine, value, say=_err), value
    for engine, version in pinned.items():
        trees[engine], releases[engine] = D.tree(engine, version, say=_err), version
    for engine in sorted(derive - set(trees)):
        if not any(engine in r.engines for r in catalog.select(names)):
            continue
        version = _required_by(trees[by[engine]], engine)
        if version is None and engine in pins:  # the release names no exact one: the pin stands
            version = pins[engine]
        elif version is None:
            raise PatchkitError(
                f"drift: no {engine} release given or pinned, and this {by[engine]} release names no exact one",
                f"add --to {engine}==VERSION",
            )
        else:
            where = f"over the pin {pins[engine]}" if engine in pins else "no pin here"
            what = f"the version this {by[engine]} release requires"
            _err(f"{engine} {version}: {what} ({where}; --to {engine}==V to choose)")
        trees[engine], releases[engine] = D.tree(engine, version, say=_err), version
    # releases only: the verdicts `--across` keeps answer a repeat; a path is judged as it is now
    res = (
        D.judge_releases(catalog, names, releases)
        if set(releases) == set(trees)
        else D.judge_release(catalog, names, trees)
    )
    good = D.ok(res)
    retire = [r.id for r in res if r.state == State.UPSTREAM]
    from patchkit.base.target import open_target
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    targets = Session({e: open_target(e, p) for e, p in trees.items()}, releases=RELEASES).targets
    if as_json:
        from patchkit.core.report import as_json as dump

        # how far the judge's reads of each release went (a sparse tree: files, searches)
        say(dump("drift", res, good, targets, retire=retire, reads={e: D.reads(e, v) for e, v in releases.items()}))
    else:
        say(human(res, targets))
        if retire:
            say(f"\nupstream already does {', '.join(retire)}: retire these recipes before moving the pin.")
        say("\n" + summary(res))
    return OK if good else NOT_THERE


def summary(res) -> str:
    """drift's last line: ``ok: every recipe still applies or is upstream`` only when apply
    would apply every recipe there (none moved, missing, ambiguous, modified, blocked or
    interrupted: ``drift.FINE``) and the release is in every recipe's range; else what is
    left, by recipe and state."""
    bad = [r for r in res if r.state not in D.FINE]
    if bad:
        return "needs work: " + ", ".join(f"{r.id} ({r.state})" for r in bad) + " must be fixed before upgrading"
    outside = D.out_of_range(res)
    if outside:
        return (
            f"ok, but out of range: {', '.join(outside)} (this release is outside the recipe's [engines] range: "
            "its nearest variant was judged, and apply skips it without --ignore-range; widen the range or "
            "`patchkit port` it)"
        )
    return "ok: every recipe still applies or is upstream"


def table(shown: list[str], matrix: dict[str, list[dict]], columns: int, with_: dict | None = None) -> list[str]:
    """The --across matrix as lines of at most ``columns`` characters (the terminal's width):
    the releases that do not fit beside the recipe column go on in another block below.
    ``with_``: the other engines' release per column ({version: {engine: {"version": ..}}}),
    a row under the header for each engine."""
    with_ = with_ or {}
    ids = list(dict.fromkeys(r["id"] for v in shown for r in matrix[v]))
    extra = sorted({e for v in shown for e in with_.get(v, {})})
    paired = {(e, v): with_[v][e]["version"] if e in with_.get(v, {}) else "-" for e in extra for v in shown}
    text: dict[tuple[str, str], str] = {}
    state: dict[tuple[str, str], str] = {}
    for v in shown:
        for rid in ids:
            r = next((r for r in matrix[v] if r["id"] == rid), None)
            st = D.cell(r) if r else "-"
            base = st.split("+")[0]
            text[(rid, v)], state[(rid, v)] = ABBR.get(base, base) + st[len(base) :], base
    name_w = max([len(i) for i in ids] + [len(e) + 1 for e in extra]) + 1 if ids or extra else 1
    width = {
        v: max(len(v), *(len(text[(rid, v)]) for rid in ids), *(len(paired[(e, v)]) for e in extra)) for v in shown
    }
    blocks: list[list[str]] = [[]]
    used = name_w
    for v in shown:
        if blocks[-1] and used + width[v] + 1 > columns:
            blocks.append([])
            used = name_w
        blocks[-1].append(v)
        used += width[v] + 1
    out: list[str] = []
    for n, block in enumerate(blocks):
        if n:
            out.append("")
        out.append(" " * name_w + " ".join(f"{v:<{width[v]}}" for v in block).rstrip())
        for e in extra:
            out.append(f"{'+' + e:<{name_w}}" + " ".join(f"{paired[(e, v)]:<{width[v]}}" for v in block).rstrip())
        for rid in ids:
            cells = [term.style(f"{text[(rid, v)]:<{width[v]}}", fg=COLORS.get(state[(rid, v)])) for v in block]
            out.append(f"{rid:<{name_w}}" + " ".join(cells))
    return out


def _write_html(path: str, engine: str, spec: str, shown, matrix, changes, with_=None) -> None:
    from pathlib import Path

    from patchkit.base.fsio import atomic_write
    from patchkit.upstream.drift_html import render

    atomic_write(Path(path), render(engine, spec, shown, matrix, changes, with_).encode())
    _err(f"wrote {path}: {len(shown)} releases; open it in a browser (it fetches nothing)")


def _across(project, catalog, names, spec, bisect, as_json, jobs, to=(), html=None) -> int:
    from patchkit.base.target import ENGINES

    engine, a, b = D.parse_range(spec)
    pinned = {e: v for e, v in _pinned(project).items() if e != engine}
    given: dict[str, str] = {}
    for s in to:  # --to OTHER==VERSION: the release of the other engine, for every column
        kind, e, v = D.parse_spec(s)
        if kind != "release" or e == engine:
            raise PatchkitError(
                f"--to {s!r} with --across {spec}: only a release of the other engine goes with --across",
                "e.g. --across sglang==0.5.9..0.5.23 --to flashinfer==0.6.3",
            )
        given[e] = v
    needed = {e for r in catalog.select(names) for e in r.engines}
    # An engine the release pins exactly (its definition's `requires`: SGLang's Requires-Dist
    # on flashinfer-python) is paired per release with the version that release requires;
    # --to overrides; the pin stands only for an engine no release pins.
    derive = [e for e in ENGINES[engine].requires if e != engine and e not in given and e in needed]
    fixed = {**{e: v for e, v in pinned.items() if e not in derive}, **given}
    _missing_engines(catalog, names, {engine, *fixed, *derive}, f"drift --across {spec}")
    versions = D.versions_between(engine, a, b)
    paired: dict[str, dict[str, dict[str, str]]] = {}  # version -> engine -> {version, by}

    def others(v: str) -> dict[str, str]:
        if v not in paired:
            got = {e: {"version": ov, "by": "--to" if e in given else "pin"} for e, ov in fixed.items()}
            if derive:
                tree = D.tree(engine, v, say=_err)
                for e in derive:
                    req = _required_by(tree, e)
                    if req is not None:
                        got[e] = {"version": req, "by": "required"}
                    elif e in pinned:
                        got[e] = {"version": pinned[e], "by": "pin"}
                    else:
                        raise PatchkitError(
                            f"drift --across {spec}: {engine} {v} names no exact {e} release it requires, "
                            f"and there is no pin",
                            f"add --to {e}==VERSION",
                        )
            paired[v] = got
        return {e: x["version"] for e, x in sorted(paired[v].items())}

    def run(vs: list[str]) -> dict[str, list[dict]]:
        return D.across(catalog, project.recipe_dirs, names, engine, vs, others, jobs=jobs, say=_err)

    changes = None
    if bisect:
        matrix, changes = D.bisect(run, versions)
        shown = [v for v in versions if v in matrix]
    else:
        matrix = run(versions)
        shown = versions
    good = all(not D.bad(matrix[v]) for v in shown)
    for v in shown:
        others(v)  # filled while judging; a cached column fills it here
    with_ = {v: paired[v] for v in shown}
    if html:
        _write_html(html, engine, spec, shown, matrix, changes, with_)
    if as_json:
        doc = {
            "command": "drift",
            "engine": engine,
            "ok": good,
            "versions": shown,
            "evaluated": len(shown),
            "of": len(versions),
            "matrix": {v: matrix[v] for v in shown},
            # the other engines' release each column was judged with, and why that one:
            # "required" (the release's Requires-Dist), "--to" or "pin"
            "with": with_,
            # how far the judge's reads of each release went: for a sparse tree (read by
            # ranges) the files it holds of the wheel's, and the searches that read every
            # file of a kind ("sglang/*.py"); null for a whole tree
            "reads": {
                v: {engine: D.reads(engine, v), **{e: D.reads(e, x["version"]) for e, x in with_[v].items()}}
                for v in shown
            },
        }
        if changes is not None:
            doc["changes"] = [
                {"recipe": c[0], "op": c[1] or None, "from": c[2], "to": c[3], "old": c[4], "new": c[5]}
                for c in changes
            ]
        say(json.dumps(doc, indent=2))
        return OK if good else NOT_THERE
    say(
        f"{engine} releases {a}..{b}: {len(versions)} on the index"
        + (f", {len(shown)} evaluated (bisect)" if bisect else "")
    )
    for _e, why in D.pairing_lines(engine, shown, with_):
        say(why)
    for line in table(shown, matrix, shutil.get_terminal_size().columns, with_):
        say(line)
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
            f"\npin not moved: a recipe would be moved, missing, ambiguous, modified or blocked on {engine} "
            f"{version}; fix the recipes, or pass --force",
            err=True,
        )
        return NOT_THERE
    from patchkit.base.target import ENGINES

    # A pinned engine this release requires exactly (SGLang's FlashInfer) moves with it: the
    # preflight judged that pair, and it is the pair the release installs.
    tree = D.release_tree(engine, version, say=_err)
    moves = {engine: version}
    for other in ENGINES[engine].requires:
        required = _required_by(tree, other) if other in pins else None
        if required is not None and required != pins[other].version:
            moves[other] = required
    wheels = {e: fetch.fetch_wheel(pins[e].index, v, say=_err) for e, v in moves.items()}  # all, before a write
    path = project.pins_path
    say("")
    for e, v in moves.items():
        pins_mod.set_value(path, e, "version", v)
        pins_mod.set_value(path, e, "wheel", wheels[e].name)
        pins_mod.set_value(path, e, "sha256", fetch.file_sha256(wheels[e]))
        pins_mod.set_value(path, e, "rev", f"v{v}", comment="# tag matching the release")
        why = "" if e == engine else f" (the version {engine} {version} requires)"
        say(f"{path.name}: {e} pinned to {v}{why}")
    say("run `patchkit sync --force` to refresh the workspace")
    return OK
