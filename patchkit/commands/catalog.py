"""`list` and `show`: what recipes and bundles exist.  They read no target."""

from __future__ import annotations

import json

from patchkit.base.model import describe_when
from patchkit.commands import OK, Options, say


def list_(opts: Options) -> int:
    cat = opts.project.catalog()
    recipes = cat.select(opts.names)
    if opts.json:
        say(
            json.dumps(
                {
                    "recipes": [
                        {
                            "id": r.id,
                            "summary": r.summary,
                            "bundles": list(r.bundles),
                            "engines": {e: str(s) for e, s in r.engines.items()},
                            "ops": len(r.ops),
                            "source": cat.origin.get(r.id, ""),
                            "path": str(r.path),
                            "overrides": [str(p) for p in cat.shadowed.get(r.id, ())],
                        }
                        for r in recipes
                    ],
                    "bundles": cat.bundles,
                },
                indent=2,
            )
        )
        return OK
    for r in recipes:
        engines = ", ".join(f"{e}{s}" for e, s in r.engines.items())
        say(f"{r.id:<24} {engines}  [{_source(cat, r)}]")
        say(f"    {r.summary}")
    if cat.bundles:
        say("\nbundles:")
        for b, ids in cat.bundles.items():
            say(f"  {b:<10} {' '.join(ids)}")
    return OK


def _source(cat, r) -> str:
    """Where a recipe comes from, as `list` shows it: shipped, user, project or path, and
    what it overrides (``project, overrides shipped``)."""
    from patchkit.base.config import PATH, PROJECT, SHIPPED, USER

    where = {str(rd.path): rd.origin for rd in getattr(cat, "dirs", ())}
    over = [where.get(str(p.parent), str(p)) for p in cat.shadowed.get(r.id, ())]
    origin = cat.origin.get(r.id, "")
    known = (PATH, PROJECT, USER, SHIPPED)
    return origin + (f", overrides {', '.join(over)}" if over else "") if origin in known else str(r.path.parent)


def show(opts: Options) -> int:
    cat = opts.project.catalog()
    for r in cat.select(opts.names):
        say(f"{r.id}  ({r.path}, {_source(cat, r)})")
        say(f"  summary:   {r.summary}")
        say(f"  bundles:   {', '.join(r.bundles) or '-'}")
        say("  engines:   " + ", ".join(f"{e} {s}" for e, s in r.engines.items()))
        say(f"  sha256:    {r.sha256}")
        if r.rationale:
            say("  rationale:")
            for line in r.rationale.splitlines():
                say(f"    {line}")
        variants = r.variants()
        say("  ops:" if len(variants) == 1 else "  ops, per version variant:")
        by_index = {op.index: op for op in r.ops}
        for when, indices in variants:
            indent = "    "
            if len(variants) > 1:
                say(f"    for {describe_when(when)}:")
                indent = "      "
            for i in indices:
                op = by_index[i]
                say(f"{indent}#{op.index} {op.kind} on {op.engine}:{op.file}" + (f" in {op.scope}" if op.scope else ""))
                for m in op.markers:
                    say(f"{indent}   upstream marker: {m.file}::{m.scope or '<module>'} contains {list(m.contains)}")
        if r.blockers:
            say("  blockers (while one stands, the recipe is `blocked`):")
            for b in r.blockers:
                where = f"{b.engine}:{b.file}" + (f"::{b.scope}" if b.scope else "")
                say(f"    {b.label} for {describe_when(b.when)}: {where} contains {list(b.contains)}")
                say(f"       {b.message}")
        say("")
    return OK
