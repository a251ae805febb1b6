"""`port`: draft the `when` variant a recipe needs on a new release (patchkit/authoring/port.py),
verify it on the pristine release, and print it or write it into the recipe file."""

from __future__ import annotations

import hashlib
import json
import re

from patchkit.base.errors import PatchkitError
from patchkit.commands import NOT_THERE, OK, say
from patchkit.core.project import Project

ACTIONS = {
    "stay": "pending: stays as it is (its `when` holds there)",
    "keep": "pending: carried as it is",
    "retarget": "moved: retargeted",
    "followed": "followed its anchor: retargeted",
    "drop": "upstream: its `when` ends below the release",
    "propose": "carried with a proposed marker for a person to confirm",
    "left": "left for a person",
}


def _tree(to: str):
    from patchkit.base.target import open_target
    from patchkit.upstream import drift as D

    kind, engine, value = D.parse_spec(to)
    if kind == "release":
        return engine, open_target(engine, D.release_tree(engine, value, say=lambda s: say(s, err=True)))
    return engine, open_target(engine, value)


def _bisected(project: Project, catalog, recipe, engine: str, version: str) -> dict[int, str]:
    """op -> the release drift --bisect sees it change at, between the newest release of the
    recipe's range and ``version`` (only when the range ends below it)."""
    from patchkit.authoring import port as P
    from patchkit.base.target import ENGINES
    from patchkit.commands.drift import _pinned
    from patchkit.upstream import drift as D

    if P.widened(recipe.engines[engine], version) is None:
        return {}
    others = {e: v for e, v in _pinned(project).items() if e != engine and e in recipe.engines}
    releases = D.index_versions(ENGINES[engine].dist)

    def run(vs: list[str]) -> dict[str, list[dict]]:
        return D.across(
            catalog, project.recipe_dirs, (recipe.id,), engine, vs, others, jobs=1, say=lambda s: say(s, err=True)
        )

    return P.changed_at(recipe, engine, version, run, releases)


def port(project: Project, rid: str, to: str, write: bool, as_json: bool) -> int:
    from patchkit.authoring import port as P
    from patchkit.core.project import SHIPPED

    catalog = project.catalog()
    if rid in catalog.bundles and rid not in catalog.recipes:
        raise PatchkitError(
            f"{rid!r} is a bundle; port takes one recipe", f"port each of: {', '.join(catalog.bundles[rid])}"
        )
    (recipe,) = catalog.select((rid,))  # an unknown or broken one: its error
    if write and catalog.origin.get(recipe.id) == SHIPPED:
        raise PatchkitError(
            f"{recipe.path}: a shipped recipe is not written in place",
            "copy it into your project's recipes/ (or a --recipes DIR) and port that copy",
        )
    from patchkit.upstream import drift as D

    kind, engine, value = D.parse_spec(to)
    if not recipe.ops_for(engine):  # before a release is downloaded
        raise PatchkitError(f"recipe {recipe.id} has no {engine} ops", f"it edits {', '.join(recipe.engines)}")
    if kind == "release":
        P.widened(recipe.engines[engine], value)  # a release below the recipe's range: refused here too
    engine, tree = _tree(to)
    changed = _bisected(project, catalog, recipe, engine, tree.version) if kind == "release" else {}
    result = P.port(recipe, engine, tree, changed)
    written = ""
    complete = result.complete
    if write and result.writable and result.draft:
        data = recipe.path.read_bytes()
        if hashlib.sha256(data).hexdigest() != recipe.sha256:
            raise PatchkitError(f"{recipe.path}: changed while port was drafting", "run port again")
        from patchkit.base import fsio

        fsio.atomic_write(recipe.path, result.draft.encode("utf-8"))
        written = str(recipe.path)
    if as_json:
        doc = result.to_json()
        doc["written"] = written or None
        say(json.dumps(doc, indent=2))
        return OK if complete else NOT_THERE
    e, v = engine, result.version
    for p in result.ops:
        line = f"op #{p.index} ({p.kind}): {p.state} on {e} {v}: {ACTIONS[p.action]}"
        if p.action in ("retarget", "followed"):
            line += f" to {p.now}" + (f" ({p.message})" if p.action == "followed" else "")
        if p.new_index:
            line += f"; op #{p.new_index} of the draft"
        say(line, err=True)
        for c in p.candidates:
            say(f"    nearest: {c.where()} ({c.similarity:.2f}) {c.scope or '<module>'}: {c.text}", err=True)
        if p.proposal:
            pr = p.proposal
            say(f"    upstream may have made it in other words at {pr['file']}:{pr['line']}:", err=True)
            for ln in pr["text"].splitlines():
                say(f"      | {ln}", err=True)
            say("    proposed marker (counts only once you delete its `proposed` line):", err=True)
            for ln in P.proposal_toml("variants.ops", pr["marker"]):
                say(f"      {ln}", err=True)
    for c in result.checks:
        say(f"check {c.name}: {'ok' if c.ok else 'FAILED'}: {c.detail}", err=True)
    if result.note:
        say(result.note, err=True)
    for note in result.notes:
        say(f"note: {note}", err=True)
    if result.leftovers:
        say(f"\nleft for a person ({len(result.leftovers)}):", err=True)
        for i, left in enumerate(result.leftovers, 1):
            say(f"  {i}. {left}", err=True)
    if result.proposals:
        say(f"\nto confirm ({len(result.proposals)}):", err=True)
        for i, left in enumerate(result.proposals, 1):
            say(f"  {i}. {left}", err=True)
    failed = [c.name for c in result.checks if not c.ok]
    if written:
        starts = re.findall(r'^when = \{ [\w-]+ = "(>=[^"]+)" \}$', result.variant, flags=re.M)
        what = f"the {e} {', '.join(starts)} variant" if result.variant else f"[engines] {e} widened to {v}"
        say(f"wrote {written}: {what}, verified on the pristine release")
        if result.proposals:
            say(f"  with {len(result.proposals)} proposed marker(s) that count only once you confirm them", err=True)
    elif result.draft:
        import click

        click.echo(result.draft, nl=False)
        if write:
            why = "something is left for a person" if result.leftovers else f"the {', '.join(failed)} check failed"
            say(f"nothing was written: {why}", err=True)
    return OK if complete else NOT_THERE
