"""`gates --across ENGINE==A..B`: what changed, release to release, among the gates that shut a
device out (patchkit/upstream/gates_across.py follows them)."""

from __future__ import annotations

import json

from patchkit.base.errors import PatchkitError
from patchkit.commands import NOT_THERE, OK, say
from patchkit.core.goals.device import Device
from patchkit.upstream import gates_across as GA

SHOWN = {  # what each change says in the report for people
    "appeared": "appeared (closed, new)",
    "closed": "closed (was open or unknown)",
    "opened": "opened (still there, no longer read closed)",
    "undecided": "undecided (now unknown)",
    "gone": "gone (removed or rewritten)",
    "moved": "moved (its file)",
}


def _err(s: str) -> None:
    say(s, err=True)


def run(
    spec: str,
    dev: Device,
    cmp_: Device,
    as_json: bool,
    html: str | None,
    vendored: bool,
    jobs: int,
    only: set | None = None,
) -> int:
    """Exit 1 when some gate appeared or closed in the range (the device is shut out where it
    was not), else 0."""
    from patchkit.upstream import drift as D
    from patchkit.upstream import fetch

    engine, a, b = D.parse_range(spec)
    versions = D.versions_between(engine, a, b)
    if len(versions) < 2:
        raise PatchkitError(
            f"--across {spec}: the index lists one {engine} release in that range ({versions[0]}): nothing to compare",
            f"widen the range, or scan it alone: patchkit gates --device {dev} --to {engine}=={versions[0]}",
        )
    res = GA.across(
        engine,
        versions,
        dev,
        cmp_,
        lambda v: fetch.release_tree(engine, v, say=_err),
        vendored=vendored,
        jobs=jobs,
        only=only,
        say=_err,
    )
    with_ = _paired(engine, versions)
    if html:
        from pathlib import Path

        from patchkit.base.fsio import atomic_write
        from patchkit.upstream.gates_across_html import render

        atomic_write(Path(html), render(res, spec, with_).encode())
        _err(
            f"wrote {html}: {len(res.rows)} gates x {len(versions)} releases; open it in a browser (it fetches nothing)"
        )
    shut = [c for c in res.changes if c["change"] in ("appeared", "closed")]
    if as_json:
        say(json.dumps(GA.document(res, spec, with_), indent=2), raw=True)
    else:
        for line in report(res, spec, a, b, with_):
            say(line)
    return NOT_THERE if shut else OK


def _paired(engine: str, versions: list[str]) -> dict:
    """{version: {engine: {"version", "by": "required"}}}: the release of each engine the
    ranged one requires exactly (its Requires-Dist), as drift pairs them."""
    from patchkit.base.target import ENGINES
    from patchkit.commands.drift import _required_by
    from patchkit.upstream import fetch

    out: dict[str, dict] = {}
    for v in versions:
        for e in ENGINES[engine].requires:
            req = _required_by(fetch.release_tree(engine, v), e) if e != engine else None
            if req is not None:
                out.setdefault(v, {})[e] = {"version": req, "by": "required"}
    return out


def report(res: GA.Across, spec: str, a: str, b: str, with_: dict | None = None) -> list[str]:
    out = [
        f"{res.engine} releases {a}..{b}: {len(res.versions)} on the index; "
        f"gates closed for {res.device} and open for {res.compare}, release to release",
        *(GA.pairing_lines(res, with_ or {}) or [f"(only {res.engine} is scanned)"]),
        "",
    ]
    width = max(len("release"), *(len(v) for v in res.versions))
    # the release's gates (closed, unknown), then what changed since the release before
    out.append(f"{'release':<{width}}  {'closed':>7} {'unknown':>7}  | " + " ".join(f"{h:>9}" for h in GA.CHANGES))
    for r in res.releases:
        n = {k: sum(c["count"] for c in res.changes if c["to"] == r.version and c["change"] == k) for k in GA.CHANGES}
        now = f"{r.version:<{width}}  {len(r.scan['closed']):>7} {len(r.scan['unknown']):>7}  |"
        first = r is res.releases[0]
        out.append((now + " " + " ".join(f"{'' if first else n[k] or '':>9}" for k in GA.CHANGES)).rstrip())
    pairs: dict[tuple[str, str], list[dict]] = {}
    for c in res.changes:
        pairs.setdefault((c["from"], c["to"]), []).append(c)
    for (v0, v1), cs in pairs.items():
        out.append("")
        out.append(f"{v0} -> {v1}:")
        for kind in GA.CHANGES:
            these = [c for c in cs if c["change"] == kind]
            if not these:
                continue
            out.append(f"  {SHOWN[kind]}: {sum(c['count'] for c in these)}")
            last = None
            for c in these:
                if c["file"] != last:
                    out.append(f"    {c['file']}")
                    last = c["file"]
                lines = ",".join(str(x) for x in c["lines"]) or "?"
                at = v1 if c["after"] == "closed" else v0
                mark = "" if c.get("exact", True) else " (one of these lines)"
                cond = c["condition"] if len(c["condition"]) <= 90 else c["condition"][:87] + "..."
                out.append(f"      {lines:>7} ({at}){mark}  {c['function'] or '(module level)'}: {cond}")
                if c["change"] in ("opened", "undecided", "gone", "moved") and c.get("why"):
                    out.append(f"              {c['why']}")
    if not res.changes:
        out.append("")
        out.append("no gate appeared, closed, opened or went away across the range")
    for r in res.releases:
        for e in r.scan["errors"]:
            out.append(f"  {r.version}: not scanned: {e}")
    out.append("")
    out.append(
        "A gate is the same gate across releases by its file, function and condition as written; one rewritten "
        "reads as gone and appeared. Opened says only that the condition admits the device: the code behind it "
        "may not work there; see `patchkit verify --build`."
    )
    return out
