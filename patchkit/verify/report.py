"""verify's report: the expectations judged on the builds, and the document printed.

Everything here works on the JSON document ``verify --json`` prints, so a report recorded on
another machine (tests/fixtures/verify_h200.json) is judged and printed the same way."""

from __future__ import annotations

from typing import Optional

from patchkit.base.model import Expectation


def expectation_json(recipe: str, e: Expectation) -> dict:
    return {
        "recipe": recipe,
        "label": e.label,
        "kind": e.kind,
        "arch": e.arch,
        "module": e.module,
        "instruction": e.instruction,
        "as_arch": e.as_arch,
        "describe": e.describe(),
    }


def _scope(e: dict, units: list[dict]) -> list[dict]:
    """The units an expectation speaks of: its module's, else those that include an edited file."""
    if e["module"]:
        return [u for u in units if e["module"] in u["modules"]]
    return [u for u in units if u["edited"]]


def _patched(u: dict, arch: str) -> Optional[dict]:
    return u["builds"].get(arch, {}).get("patched")


def judge_one(e: dict, units: list[dict]) -> tuple[Optional[bool], str]:
    """(ok, why): True, False, or None when it cannot be judged (an arch not built)."""
    scope = _scope(e, units)
    if not scope:
        return False, "no unit to judge (" + (
            f"module {e['module']} built nothing" if e["module"] else "no unit includes an edited file"
        ) + ")"
    bad, good = [], []
    for u in scope:
        b = _patched(u, e["arch"])
        if b is None:
            return None, f"{e['arch']} was not built"
        if not b["built"]:
            bad.append(f"{u['unit']} does not build for {e['arch']}")
            continue
        if e["kind"] == "no-empty-kernels":
            if b["empty"]:
                fams = [f"{f['name']} ({f['empty']})" for f in b["families"] if f["empty"]]
                bad.append(f"{u['unit']}: {b['empty']} of {b['kernels']} kernels empty: {', '.join(fams)}")
            else:
                good.append(f"{u['unit']}: {b['kernels']} kernels, none empty")
        else:
            other = _patched(u, e["as_arch"])
            if other is None:
                return None, f"{e['as_arch']} was not built"
            if not other["built"]:
                bad.append(f"{u['unit']} does not build for {e['as_arch']}")
                continue
            n, m = b["counts"].get(e["instruction"], 0), other["counts"].get(e["instruction"], 0)
            line = f"{u['unit']}: {n} {e['instruction']} on {e['arch']}, {m} on {e['as_arch']}"
            (good if n == m else bad).append(line)
    return (not bad), "; ".join(bad or good)


def judge(expects: list[dict], units: list[dict]) -> list[dict]:
    out = []
    for e in expects:
        ok, why = judge_one(e, units)
        out.append({**e, "ok": ok, "detail": why})
    return out


def ok(doc: dict) -> bool:
    """Exit 0 or 1: the Python check passed, every patched build built, and no expectation failed."""
    if doc.get("errors"):
        return False
    b = doc.get("build")
    if not b:
        return True
    if any(not v["patched"]["built"] for u in b["units"] for v in u["builds"].values()):
        return False
    return all(e["ok"] is not False for e in b["expectations"])


# -- printing ---------------------------------------------------------------------------------


def _cell(b: Optional[dict], count: list[str]) -> str:
    if b is None:
        return "-"
    if not b["built"]:
        return f"FAILED: {b['error']}"
    figures = ", ".join(f"{c} {b['counts'].get(c, 0)}" for c in count)
    took = f"{b['seconds']:.0f} s" + (", cached" if b["cached"] else "")
    return f"{b['kernels']} kernels, {b['empty']} empty, {figures} ({took})"


CHECKS = "post-condition, idempotence, round-trip, compile"


def _python(r: dict) -> str:
    """What the Python check did for one recipe, in words that do not claim more."""
    if r["python"] != "ok":
        return "FAILED"
    if r["edits"]:
        return f"ok: {r['edits']} edit(s) planned in memory and checked ({CHECKS}, names)"
    if r.get("reverted_edits"):
        return (f"ok: already applied, so apply has no edit to make; its {r['reverted_edits']} edit(s) were "
                f"checked by taking them back in memory ({CHECKS})")  # fmt: skip
    if r["state"] == "upstream":
        return "nothing to check: the release already does it (retire the recipe)"
    return f"nothing checked: {r['state']}, so apply plans no edit"


def human(doc: dict) -> str:
    lines = []
    for r in doc["recipes"]:
        lines.append(f"{r['id']} ({r['state']}): Python: {_python(r)}")
    for e in doc.get("errors", ()):
        lines.append(f"error: {e}")
    b = doc.get("build")
    if b is None:
        return "\n".join(lines)
    if not b["units"]:
        lines.append(f"build: {b['note']}")
        return "\n".join(lines)
    lines.append(
        f"build: {b['nvcc']}; sm_{', sm_'.join(b['archs'])}; counting {', '.join(b['count'])}; {b['jobs']} jobs;"
        f" {b['wall_seconds']:.1f} s wall"
    )
    for m in b["modules"]:
        gate = ", ".join(
            f"{a} {'yes' if v['patched'] else 'no'}"
            + ("" if v["pristine"] == v["patched"] else f" (pristine {'yes' if v['pristine'] else 'no'})")
            for a, v in m["admits"].items()
        )
        host = f" ({len(m['not_built'])} host .cpp not built)" if m.get("not_built") else ""
        lines.append(
            f"JIT module {m['name']} ({m['file']}): {len(m['sources'])} sources{host}; JIT builds it for {gate}"
        )
    for u in b["units"]:
        mark = "  <- includes an edited file" if u["edited"] else ""
        lines.append(f"{u['unit']} [{', '.join(u['modules']) or 'no JIT module'}]{mark}")
        for arch, v in u["builds"].items():
            lines.append(f"  sm_{arch}  pristine: {_cell(v['pristine'], b['count'])}")
            same = v["patched"].get("key") is not None and v["patched"].get("key") == v["pristine"].get("key")
            said = "the same inputs: one build, the same PTX" if same else _cell(v["patched"], b["count"])
            lines.append(f"  sm_{arch}  patched:  {said}")
    for e in b["expectations"]:
        said = {True: "ok", False: "FAILED", None: "not judged"}[e["ok"]]
        lines.append(f"{e['recipe']} > {e['label']}: {e['describe']}: {said} ({e['detail']})")
    return "\n".join(lines)
