"""`gates --draft ID`: write a recipe that widens the chosen gates of the scan
(patchkit/authoring/draft.py drafts and proves it; this is the command around it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from patchkit.base.errors import PatchkitError, RecipeError
from patchkit.commands import NOT_THERE, OK, Invocation, say

ALL_AT_MOST = 100  # gates drafted without --only: past that, a person chooses


def _chosen(only: str, numbered: list) -> list:
    """The gates --only names: numbers as the report prints them (3,5,7-9), or FILE:LINE
    (the tree's path or the logical name), every closed gate of that line."""
    if not numbered:
        raise PatchkitError("gates --draft: no gate is closed for the device: nothing to draft", "")
    if not only:
        if len(numbered) > ALL_AT_MOST:
            raise PatchkitError(
                f"gates --draft: {len(numbered)} gates are closed; a recipe widens the ones you choose",
                "name them with --only N,... or FILE:LINE (the report's numbers)",
            )
        return list(numbered)
    want: list[int] = []
    top = len(numbered)
    for part in only.split(","):
        part = part.strip()
        if ":" in part:
            file, _, line = part.rpartition(":")
            got = [x.n for x in numbered if file in (x.gate.path, x.gate.file) and str(x.gate.line) == line.strip()]
            if not got:
                raise PatchkitError(
                    f"--only {part!r}: no closed gate at that line", "run `patchkit gates` with the same targets"
                )
        else:
            lo, sep, hi = part.partition("-")
            try:
                got = list(range(int(lo), int(hi) + 1)) if sep else [int(part)]
            except ValueError:
                raise PatchkitError(
                    f"--only {only!r}: {part!r} is not a gate number nor FILE:LINE", "e.g. --only 3,5,7-9"
                ) from None
            bad = [n for n in got if not 1 <= n <= top]
            if bad:
                raise PatchkitError(
                    f"--only {only!r}: no gate #{bad[0]} (the scan numbers its closed gates 1 to {top})",
                    "run `patchkit gates` with the same targets to read the numbers",
                )
        want += [n for n in got if n not in want]
    return [numbered[n - 1] for n in sorted(want)]


def _path(inv: Invocation, rid: str, out: Optional[str]) -> Path:
    from patchkit.commands.author import _recipe_path

    if out and not out.endswith(".toml"):
        out = str(Path(out) / f"{rid}.toml")
    path = _recipe_path(inv.project, rid, out)
    try:
        known = inv.project.catalog().recipes.get(rid)
    except PatchkitError:
        known = None
    if known is not None and os.path.realpath(known.path) != os.path.realpath(path):
        raise PatchkitError(f"{rid!r} is already a recipe in play ({known.path})", "choose another id")
    return path


def draft(inv: Invocation, rid: str, only: str, out: Optional[str], dev, cmp_, trees, scans, as_json: bool) -> int:
    from patchkit.authoring import draft as D
    from patchkit.commands.author import _write_new
    from patchkit.core.recipe import ID_HINT, ID_RE

    if not ID_RE.fullmatch(rid):
        raise RecipeError(f"--draft {rid!r} is not a valid recipe id", f"{ID_HINT}, e.g. 'gates-sm120'")
    targets = {t.engine: t for t in trees}
    numbered = D.numbered(scans)
    chosen = _chosen(only, numbered)
    for c in chosen:
        if not targets[c.engine].version:
            raise PatchkitError(
                f"gates --draft: the version of {targets[c.engine].root} is unknown",
                "a recipe names the releases it is for: scan a release or an installed package",
            )
    path = _path(inv, rid, out)
    from patchkit.base.progress import working

    done = [0]

    def said(s: str) -> None:
        done[0] += 1
        if not as_json:
            say(s, err=True)

    files = len({(c.engine, c.gate.path) for c in chosen})
    with working(f"drafting {len(chosen)} gate(s) in {files} file(s)", lambda: f"{done[0]} of {files} files"):
        d = D.make(rid, chosen, targets, dev, cmp_, progress=said)
    if d.files and not d.refused:
        with working("proving the draft (check, the judge, the planner)"):
            d.checks = D.prove(d, targets)
    proved = bool(d.files) and not d.refused and all(ok for _, ok, _ in d.checks)
    if proved:
        _write_new(path, out, d.text)
    if as_json:
        say(json.dumps(document(d, path, proved), indent=2), raw=True)
    else:
        for line in report(d, path, proved):
            say(line, err=not proved and line.startswith(("refused", "nothing", "  ")))
    return OK if proved else NOT_THERE


def document(d, path: Path, written: bool) -> dict:
    gates_of = {}
    for w in d.widened:
        for op in w.ops:
            gates_of.setdefault(id(op), []).append(w.n)
    return {
        "id": d.rid,
        "path": str(path),
        "written": written,
        "ops": [
            {
                "kind": op.kind,
                "engine": op.engine,
                "file": op.file,
                "scope": op.scope,
                "locator": op.locator,
                "params": op.params,
                "jit_modules": list(op.jit_modules),
                "gates": gates_of.get(id(op), []),
            }
            for op in d.ops
        ],
        "gates": [
            {
                "n": w.n,
                "engine": w.gate.engine,
                "path": w.gate.path,
                "line": w.gate.line,
                "condition": w.gate.condition,
                "how": w.how,
            }
            for w in d.widened
        ],  # fmt: skip
        "refused": [
            {
                "n": r.n,
                "engine": r.gate.engine,
                "path": r.gate.path,
                "line": r.gate.line,
                "condition": r.gate.condition,
                "why": r.why,
            }
            for r in d.refused
        ],  # fmt: skip
        "checks": [{"check": n, "ok": ok, "detail": detail} for n, ok, detail in d.checks],
        "recipe": d.text if written else "",
    }


def report(d, path: Path, written: bool) -> list[str]:
    out = []
    for w in d.widened:
        g = w.gate
        out.append(f"gate #{w.n} {g.path}:{g.line} `{g.condition}`: {w.how}")
    for r in d.refused:
        out.append(f"refused {r.line()}")
    for name, ok, detail in d.checks:
        out.append(f"  {'ok' if ok else 'FAILED'} {name}: {detail}")
    if written:
        kinds = ", ".join(sorted({op.kind for op in d.ops}))
        out.append(f"wrote {path}: {len(d.ops)} op(s) ({kinds}) widening {len(d.widened)} gate(s)")
        out.append(
            "Opening a gate does not make the code behind it work on the part: "
            + (f"prove the device code with `patchkit verify {d.rid} --build`, then measure."
               if d.reaches_cuda() else "measure before you keep it.")
        )  # fmt: skip
        return out
    if d.refused and d.widened:
        ok = ",".join(str(w.n) for w in d.widened)
        out.append(f"nothing was written ({len(d.refused)} chosen gate(s) refused); --only {ok} drafts the rest")
    elif d.refused:
        out.append(f"nothing was written: every chosen gate ({len(d.refused)}) was refused")
    else:
        out.append("nothing was written: the draft did not prove (above)")
    return out
