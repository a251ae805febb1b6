"""`wheel`: build patched wheels of the released engines, for a fleet to pip install."""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.base.errors import PatchkitError
from patchkit.base.states import State
from patchkit.commands import NOT_THERE, OK, say
from patchkit.core.project import Project
from patchkit.fleet import wheel as W


def build(project: Project, names, sources, label, out, ignore_range: bool, log) -> list[W.Built]:
    """The patched wheels of ``names`` on ``sources`` (``ENGINE==VERSION``), into ``out``
    (wheel.build: all or none; W.WheelBlocked when the recipes do not apply cleanly).  What
    it builds is installed: pristine releases are whole wheels, checked against the index's
    sha256, never members read by ranges (patchkit/upstream/lazywheel.py)."""
    from patchkit.upstream import lazywheel

    lazywheel.whole_only()
    catalog = project.catalog()
    recipes = catalog.select(names)
    try:
        pins = project.pins()
    except PatchkitError:
        pins = {}
    srcs = [W.parse_from(s, pins) for s in sources]
    # What the guard (`patchkit run`) judges a host installed from these wheels against: the
    # names built, as a profile in each wheel's patchkit.json (fleet/profile.wheel_profile).
    profile = {
        "bundles": [n for n in names if n in catalog.bundles and n not in catalog.recipes],
        "recipes": [n for n in names if not (n in catalog.bundles and n not in catalog.recipes)],
    }
    return W.build(
        recipes, srcs, label or ".".join(names), Path(out), pins=pins, ignore_range=ignore_range, say=log,
        profile=profile,
    )  # fmt: skip


def wheel(
    project: Project,
    names: tuple[str, ...],
    sources: tuple[str, ...],
    label: str | None,
    out: str,
    as_json: bool = False,
    ignore_range: bool = False,
) -> int:
    label = label or ".".join(names)
    log = (lambda s: None) if as_json else (lambda s: say(s, err=True))
    try:
        built = build(project, names, sources, label, out, ignore_range, log)
    except W.WheelBlocked as e:
        src = e.source
        if as_json:
            say(
                json.dumps(
                    {
                        "command": "wheel",
                        "ok": False,
                        "wheels": [],
                        "errors": [f"{src.engine}=={src.version}: {r}" for r in e.reasons],
                    },
                    indent=2,
                )
            )
        else:
            for r in e.reasons:
                say(f"error: {src.engine}=={src.version}: {r}", err=True)
            say(
                f"wheel: the recipes do not apply cleanly to {src.engine} {src.version}; no wheel was built (see "
                "`patchkit status` on that release).",
                err=True,
            )
        return NOT_THERE
    if as_json:
        say(
            json.dumps(
                {
                    "command": "wheel",
                    "ok": True,
                    "label": W.local_label(label),
                    "wheels": [b.to_json() for b in built],
                    "errors": [],
                },
                indent=2,
            )
        )
        return OK
    for b in built:
        say(f"built {b.path}  ({b.dist} {b.base_version} -> {b.version}, {b.seconds:.1f}s)")
        say(f"  sha256 {b.sha256}")
        say(f"  recipes digest {b.recipes_digest}: the label's last part; a changed recipe is a new version")
        for r in b.recipes:
            how = "already upstream" if r["state"] == State.UPSTREAM else f"ops {', '.join(f'#{i}' for i in r['ops'])}"
            say(f"  {r['id']:<24} {how}  (recipe sha256 {r['sha256'][:12]})")
    say("\ninstall with: pip install --no-deps " + " ".join(str(b.path) for b in built))
    return OK
