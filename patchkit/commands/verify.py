"""`verify`: prove recipes on the real toolchain, without the GPU they target.

Python: apply is planned in memory (``--dry-run``), so every check of apply runs, the
names check among them (no edited scope is left with a name the edit made undefined).
CUDA (``--build``): the FlashInfer translation units the edits reach, and the JIT modules
the recipes name, are compiled pristine and patched for each arch, and their PTX is judged
against the recipes' ``[verify]`` expectations (patchkit/verify/)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Optional

from patchkit.base.errors import PatchkitError
from patchkit.base.states import State
from patchkit.base.target import ENGINES
from patchkit.commands import NOT_THERE, OK, Invocation, Options, say
from patchkit.core import learned
from patchkit.core.recipe import ARCH_RE

ENGINES_NONE = ENGINES.NONE  # no engine compiles at run time: nothing matches


def _session(opts: Options):
    """Recipes and a Session; with --target for some engines only, each recipe is cut down
    to its ops there (the device code is FlashInfer's: its tree alone can be verified)."""
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    catalog = opts.project.catalog()
    recipes = catalog.select(opts.names)
    needed = {e for r in recipes for e in r.engines}
    targets = opts.project.targets(opts.targets, needed)
    cut, left_out = [], []
    for r in recipes:
        if set(r.engines) <= set(targets):
            cut.append(r)
            continue
        ops = tuple(op for op in r.ops if op.engine in targets)
        left_out.append(
            f"{r.id}: no target for {', '.join(sorted(set(r.engines) - set(targets)))}; its ops there are not checked"
        )
        if ops:
            cut.append(
                dataclasses.replace(
                    r,
                    ops=ops,
                    blockers=tuple(b for b in r.blockers if b.engine in targets),
                    engines={e: s for e, s in r.engines.items() if e in targets},
                )
            )
    return cut, Session(targets, known=catalog.recipes, releases=RELEASES), left_out


def archs_and_why(arch: Optional[str], recipes) -> dict[str, str]:
    """{arch: why it is built}: --arch, else each recipe's [verify] arch; and the arch an
    expectation compares with (built though nobody asked: said up front)."""
    why: dict[str, str] = {}
    if arch:
        for a in (a.strip().removeprefix("sm_") for a in arch.split(",") if a.strip()):
            if not ARCH_RE.fullmatch(a):
                raise PatchkitError(f"--arch {arch}: {a!r} is not a CUDA arch", "e.g. --arch 120a,90a")
            why.setdefault(a, "--arch")
    else:
        for r in recipes:
            for a in r.verify.arch:
                why.setdefault(a, f"{r.id}'s [verify] arch")
    if not why:
        raise PatchkitError(
            "verify --build: no arch to build for", "pass --arch 120a (or declare arch under the recipe's [verify])"
        )
    for r in recipes:  # an expectation compares with another arch: build that one too
        for e in r.verify.expect:
            if e.as_arch and e.arch in why and e.as_arch not in why:
                why[e.as_arch] = f"{r.id}'s {e.kind} expectation compares sm_{e.arch} with it"
    return why


def _variants(session, recipes, plan, notes: list):
    """{real path: bytes} of the edited files of the FlashInfer target, pristine and patched:
    apply's plan gives the patched bytes of pending edits; for edits already applied, a
    revert plan gives the pristine ones."""
    from patchkit.core.planner import plan_revert
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    jit_engine = (ENGINES.with_jit() or ENGINES_NONE).name
    pristine, patched = {}, {}
    for f in plan.files:
        if f.target.engine == jit_engine:
            pristine[f.path], patched[f.path] = f.original, f.new
    if any(o.state in (State.APPLIED, State.APPLIED_UNSURE) for r in plan.results for o in r.ops):
        back = plan_revert(Session(session.targets, known=session.known, releases=RELEASES), recipes, dry_run=True)
        if back.blockers:
            notes.append(
                "verify --build: the applied edits cannot be taken back in memory ("
                + "; ".join(back.blockers)
                + "), so the pristine builds show them as they are"
            )
        for f in back.files:
            if f.target.engine == jit_engine and f.path not in patched:
                pristine[f.path], patched[f.path] = f.new, f.original
    return pristine, patched


def _jit_texts(fi, over: dict) -> dict[str, str]:
    specs = ENGINES[fi.engine].jit["specs"]  # the logical dir of the JIT spec modules
    jit = fi.root / fi.relpath(specs)
    out = {}
    for p in sorted(jit.rglob("*.py")):
        data = over.get(p)
        out[specs + p.relative_to(jit).as_posix()] = (
            data.decode("utf-8", "replace") if data is not None else p.read_text("utf-8", "replace")
        )
    return out


def build_report(session, recipes, pristine, patched, archs, nvcc, workers, progress, timeout) -> dict:
    """Compile what the edits reach, pristine and patched, per arch; the report's ``build``."""
    from patchkit.verify import build as B
    from patchkit.verify import jitspec, report

    count = tuple(
        dict.fromkeys(
            [
                "griddepcontrol",
                *(c for r in recipes for c in r.verify.count),
                *(e.instruction for r in recipes for e in r.verify.expect if e.instruction),
            ]
        )
    )
    expects = [report.expectation_json(r.id, e) for r in recipes for e in r.verify.expect]
    names = {m for r in recipes for op in r.ops for m in op.jit_modules}
    fi = session.targets.get((ENGINES.with_jit() or ENGINES_NONE).name)
    doc = {"archs": archs, "count": list(count), "jobs": workers, "units": [], "modules": [], "expectations": []}
    edited_cpp = [p for p in patched if p.suffix in B.C_SUFFIXES]
    if fi is None or not (edited_cpp or names):
        doc["note"] = "nothing to build: the recipes edit no FlashInfer C++ and name no JIT module"
        doc["expectations"] = report.judge(expects, [])
        return doc
    t0 = time.monotonic()
    nvcc_id = B.nvcc_version(nvcc)
    doc["nvcc"] = next((ln for ln in nvcc_id.splitlines() if "release" in ln), nvcc_id.splitlines()[-1]).strip()
    tvm_ffi = B.find_tvm_ffi(fi, progress)
    doc["nvcc_path"], doc["tvm_ffi"] = str(nvcc), str(tvm_ffi)
    tree = B.Tree(fi, tvm_ffi)
    mods = jitspec.find(_jit_texts(fi, patched), names)
    mods_before = jitspec.find(_jit_texts(fi, pristine), names)
    errors = [
        f"JIT module {n}: no gen_jit_spec({n!r}, ...) in {fi.root / fi.relpath(ENGINES[fi.engine].jit['specs'])}"
        for n in sorted(names - set(mods))
    ]
    unit_mods: dict[Path, list[str]] = {}
    for m in mods.values():
        before = mods_before.get(m.name)
        doc["modules"].append(
            {
                **m.to_json(),
                "admits": {
                    a: {"pristine": before.admits(a) if before else None, "patched": m.admits(a)} for a in archs
                },
            }
        )
        for src in m.sources:
            p = fi.root / fi.relpath(src)
            if p.suffix in B.UNIT_SUFFIXES:
                if not p.is_file():
                    errors.append(f"JIT module {m.name}: source {src} is not in the tree")
                    continue
                unit_mods.setdefault(p, []).append(m.name)
            else:  # host C++ (.cpp): no device code, no PTX to judge
                doc["modules"][-1].setdefault("not_built", []).append(src)
        errors += [f"JIT module {m.name}: source {s} not read statically" for s in m.unread]
    edited = set(edited_cpp)
    reach = {u for u in tree.units() if edited & set(tree.closure(u, patched, external=False))}
    units = sorted(set(unit_mods) | reach)
    variants = {"pristine": pristine, "patched": patched}
    jobs, index = [], {}
    for u in units:
        mflags = [f for name in unit_mods.get(u, []) for f in mods[name].flags]
        for arch in archs:
            flags = B.flags_for(arch, mflags)
            for v, over in variants.items():
                content = tree.digest(tree.closure(u, over), over)
                key = B.key_for(nvcc_id, tree.rel(u), arch, flags, content)
                jobs.append(B.Job(u, arch, v, flags, key))
                index[(u, arch, v)] = key
    results = B.run(nvcc, tree, jobs, variants, count, workers, progress, timeout)
    for u in units:
        doc["units"].append(
            {
                "unit": tree.logical(u) or tree.rel(u),
                "modules": unit_mods.get(u, []),
                "edited": u in reach,
                "flags": {a: B.flags_for(a, [f for n in unit_mods.get(u, []) for f in mods[n].flags]) for a in archs},
                "builds": {
                    a: {v: {**results[index[(u, a, v)]].to_json(), "key": index[(u, a, v)][:16]} for v in variants}
                    for a in archs
                },
            }
        )
    doc["expectations"] = report.judge(expects, doc["units"])
    doc["wall_seconds"] = round(time.monotonic() - t0, 2)
    doc["errors"] = errors
    return doc


def _check_applied(session, recipes, out: dict) -> None:
    """On an applied recipe apply plans no edit, so its checks would check nothing: take
    its edits back in memory instead (revert's plan, with the same checks on each edit) and
    say how many were checked that way."""
    from patchkit.core.planner import plan_revert
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    applied = [r for r in out["recipes"] if r["edits"] == 0 and r["python"] == "ok" and r["state"] == "applied"]
    if not applied:
        return
    ids = {r["id"] for r in applied}
    back = plan_revert(
        Session(session.targets, known=session.known, releases=RELEASES),
        [r for r in recipes if r.id in ids],
        dry_run=True,
    )
    for r in applied:
        mine = [b for b in back.blockers if b.startswith(f"{r['id']} > ")]
        r["reverted_edits"] = sum(1 for rec, _ in back.edits() if rec == r["id"])
        if mine:
            r["python"], r["errors"] = "FAILED", mine
            out["errors"] += mine


def _plan(session, recipes, left_out: list) -> dict:
    """Apply planned in memory with every check: the report's Python part, and the bytes of
    the edited FlashInfer files pristine and patched (``{path: bytes}``)."""
    from patchkit.core.planner import plan_apply

    plan = plan_apply(session, recipes, dry_run=True)
    learned.keep(session.learned)
    out: dict = {"recipes": [], "errors": list(plan.blockers), "notes": session.notes() + left_out}
    for r in plan.results:
        mine = [b for b in plan.blockers if b.startswith(f"{r.id} > ")]
        edits = sum(1 for rec, _ in plan.edits() if rec == r.id)
        out["recipes"].append(
            {
                "id": r.id,
                "state": str(r.state),
                "python": "ok" if not mine else "FAILED",
                "edits": edits,
                "errors": mine,
            }
        )
    _check_applied(session, recipes, out)
    out["pristine"], out["patched"] = _variants(session, recipes, plan, out["notes"])
    # what it depends on beyond the key: every file read, unless a tree was searched (relocation)
    # or who made an edit is unknown (applied?): then it is not cached
    unsure = any(o.state in (State.APPLIED_UNSURE, State.MOVED) for r in plan.results for o in r.ops)
    out["cacheable"] = not unsure and not session.swept
    return out


# -- the plan cache: a second verify of unchanged trees does not plan again -------------------
# Keyed on patchkit's code, the recipes as loaded, the targets and the environment that
# decides provenance; valid while every file the plan read (and each target's journal) has
# the same bytes.  It can make verify faster, never different.


def _plan_key(session, recipes) -> str:
    from patchkit.core.verdicts import code_hash, digest_of

    blob = json.dumps(
        [
            code_hash(),
            [(r.id, r.sha256, [op.index for op in r.ops]) for r in recipes],
            {e: [str(t.root), t.layout, t.version] for e, t in sorted(session.targets.items())},
            os.environ.get("PATCHKIT_OFFLINE", ""),
        ]
    )
    return digest_of(blob.encode())


def _inputs(session) -> list[Path]:
    from patchkit.base.journal import PATH as JOURNAL
    from patchkit.base.target import STATE_DIR

    files = [f.path for f in session.files.values()]
    return sorted({*files, *(t.root / STATE_DIR / JOURNAL for t in session.targets.values())})


PLAN_LIMIT = 1 << 30  # bytes of one cached plan (it holds the edited files' bytes, twice)


def _plan_shape() -> dict:
    from patchkit.base import shape

    recipe = {"id": str, "state": shape.STATES, "python": str, "edits": int, "errors": [str]}
    return {
        "recipes": [recipe],
        "errors": [str],
        "notes": [str],
        "cacheable": bool,
        "files": {str: shape.DIGEST},
        "pristine": {str: str},
        "patched": {str: str},
    }


def _plan_cached(key: str) -> Optional[dict]:
    """The plan cached under ``key`` while every file it read is unchanged, or None: a miss
    too when the entry cannot be read, is not a regular file, or is not the shape
    ``_plan_store`` writes (planned again, and replaced)."""
    import base64
    import binascii

    from patchkit.base import store
    from patchkit.core.verdicts import file_digest

    entry = store.get_json("verify/plans", key, _plan_shape(), limit=PLAN_LIMIT)
    if entry is None or any(file_digest(Path(p)) != d for p, d in entry["files"].items()):
        return None
    try:
        for side in ("pristine", "patched"):
            entry[side] = {Path(p): base64.b64decode(b, validate=True) for p, b in entry[side].items()}
    except binascii.Error:
        return None
    return entry


def _plan_store(key: str, session, planned: dict) -> None:
    import base64

    from patchkit.base import store
    from patchkit.core.verdicts import file_digest

    if not planned["cacheable"]:
        return
    entry = {k: v for k, v in planned.items() if k not in ("pristine", "patched")}
    entry["files"] = {str(p): file_digest(p) for p in _inputs(session)}
    for side in ("pristine", "patched"):
        entry[side] = {str(p): base64.b64encode(b).decode() for p, b in planned[side].items()}
    store.put_json("verify/plans", key, entry)


def verify(
    opts: Options,
    build: bool = False,
    arch: Optional[str] = None,
    nvcc: Optional[str] = None,
    jobs: Optional[int] = None,
    nvcc_timeout: Optional[float] = None,
) -> int:
    from patchkit.verify import build as B
    from patchkit.verify import report

    nvcc_path = B.find_nvcc(nvcc) if build else None  # no nvcc: exit 2 before anything is read
    if jobs is not None and jobs < 1:
        raise PatchkitError(f"--jobs {jobs}: must be at least 1", "e.g. --jobs 4 (default: every core)")
    if nvcc_timeout is not None and not nvcc_timeout > 0:
        raise PatchkitError(f"--nvcc-timeout {nvcc_timeout:g}: must be more than 0 seconds", "e.g. --nvcc-timeout 3600")
    recipes, session, left_out = _session(opts)
    why = archs_and_why(arch, recipes) if build else {}
    archs = list(why)
    key = _plan_key(session, recipes)
    planned = _plan_cached(key)
    if planned is None:
        planned = _plan(session, recipes, left_out)
        _plan_store(key, session, planned)
    doc: dict = {"command": "verify", **{k: planned[k] for k in ("recipes", "errors", "notes")}}
    doc["notes"] = list(doc["notes"])
    doc["errors"] = list(doc["errors"])
    if build:
        pristine, patched = planned["pristine"], planned["patched"]
        workers = jobs or os.cpu_count() or 1
        progress = (lambda s: say(f"verify: {s}", err=True)) if not opts.json else (lambda s: None)
        progress("building for " + "; ".join(f"sm_{a} ({w})" for a, w in why.items()) + f", on {workers} job(s)")
        timeout = nvcc_timeout or B.DEFAULT_TIMEOUT
        doc["build"] = build_report(session, recipes, pristine, patched, archs, nvcc_path, workers, progress, timeout)
        doc["build"]["why"] = why
        doc["errors"] += doc["build"].pop("errors", [])
    doc["ok"] = report.ok(doc)
    if opts.json:
        say(json.dumps(doc, indent=2))
    else:
        say(report.human(doc))
        for n in doc["notes"]:
            say(n)
    return OK if doc["ok"] else NOT_THERE


def verify_command(inv: Invocation, names: tuple[str, ...], target: tuple[str, ...], as_json: bool, **how) -> int:
    """`patchkit verify`: the recipes or bundles named (names are required)."""
    if not names:
        raise PatchkitError("verify needs recipe or bundle names", "e.g. `patchkit verify allreduce-fusion --build`")
    return verify(inv.options(names, target, as_json), **how)
