"""`doctor`: does the Python that will serve actually run the patched code, on a GPU it fits?

Two halves, so that the verdict can be tested from a recorded machine:

* ``collect`` gathers *facts* (plain JSON): the interpreter, where it imports sglang and
  flashinfer from (``find_spec``, in that interpreter, without importing the packages),
  their versions, the recipe states of those copies and of the workspace trees, the GPUs
  (torch, else nvidia-smi), FlashInfer's JIT cache and patchkit's last edits to FlashInfer.
* ``judge`` turns facts into findings (ok / info / warn / error).  It does no I/O.

Asking an interpreter what it imports (and ``--python`` targeting) is patchkit/fleet/interp.py.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from patchkit import __version__
from patchkit.base.errors import PatchkitError
from patchkit.base.states import State
from patchkit.base.target import ENGINES
from patchkit.fleet import jit
from patchkit.fleet.interp import jit_engine, prebuilt_module, probe_python

OK, INFO, WARN, ERROR = "ok", "info", "warn", "error"
LEVELS = (OK, INFO, WARN, ERROR)


TORCH_PROBE = r"""
import json, torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available(), "devices": []}
if out["available"]:
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        name = torch.cuda.get_device_name(i)
        out["devices"].append({"index": i, "name": name, "capability": "%d.%d" % (major, minor)})
print(json.dumps(out))
"""


# -- collecting facts ------------------------------------------------------------------------


def _gpus(python_exe: str, has_torch: bool) -> dict:
    tried = []
    if has_torch:
        try:
            proc = subprocess.run([python_exe, "-c", TORCH_PROBE], capture_output=True, text=True, timeout=300, cwd="/")
            if proc.returncode == 0:
                t = json.loads(proc.stdout.strip().splitlines()[-1])
                if t["devices"]:
                    return {
                        "source": "torch",
                        "torch": t["torch"],
                        "cuda": t["cuda"],
                        "devices": t["devices"],
                        "tried": tried,
                    }
                tried.append(
                    f"torch {t['torch']}: torch.cuda.is_available() is {t['available']}, {len(t['devices'])} device(s)"
                )
            else:
                tried.append("torch: " + ((proc.stderr.strip().splitlines() or ["failed"])[-1]))
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as e:
            tried.append(f"torch: {e}")
    else:
        tried.append("torch: not importable")
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run(
                [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            devs = []
            for i, line in enumerate(proc.stdout.strip().splitlines()):
                name, _, cap = line.rpartition(",")
                if name.strip():
                    devs.append({"index": i, "name": name.strip(), "capability": cap.strip()})
            if proc.returncode == 0 and devs:
                return {"source": "nvidia-smi", "devices": devs, "tried": tried}
            tried.append(f"nvidia-smi: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            tried.append(f"nvidia-smi: {e}")
    else:
        tried.append("nvidia-smi: not on PATH")
    return {"source": None, "devices": [], "tried": tried}


def _journal_edits(root: Path, engine: str) -> list[dict]:
    """Files patchkit wrote into an engine's tree, with their mtime now, from its journal."""
    from patchkit.base.journal import Journal
    from patchkit.base.target import open_target

    try:
        t = open_target(engine, root)
    except PatchkitError:
        return []
    j = Journal.load(t.root)
    was = j.version(engine)
    out = []
    for logical, entry in sorted(j.engines.get(engine, {}).get("files", {}).items()):
        p = t.path(logical)
        if p.is_file():
            sha = _sha(p)
            out.append(
                {
                    "file": logical,
                    "path": str(p),
                    "mtime": p.stat().st_mtime,
                    "back_to_pristine": sha == entry.get("pristine") and sha != entry.get("sha256"),
                    # the engine was upgraded since patchkit wrote it, and the file is not its write
                    "upgraded_from": was
                    if was and t.version and was != t.version and sha != entry.get("sha256")
                    else None,
                }
            )
    return out


def _sha(p: Path) -> str:
    from patchkit.upstream.fetch import file_sha256

    return file_sha256(p)


def _location(engine: str, root: Path, recipes) -> dict:
    """Recipe states of one copy of an engine, plus wheel provenance and journal health."""
    from patchkit.base.model import per_engine
    from patchkit.base.target import open_target
    from patchkit.core.judge import evaluate
    from patchkit.core.session import Session
    from patchkit.core.verdict import results
    from patchkit.upstream.pristine import RELEASES

    loc: dict = {"root": str(root)}
    try:
        t = open_target(engine, root)
    except PatchkitError as e:
        loc["error"] = str(e)
        return loc
    loc.update(layout=t.layout, version=t.version)
    mine = per_engine(recipes, engine)
    try:
        s = Session({engine: t}, releases=RELEASES)
        loc["recipes"] = {r.id: r.state for r in results(s, evaluate(s, mine))}
        from patchkit.core import learned

        learned.keep(s.learned)
        loc["journal_applied"] = sorted(s.journal(engine).engines.get(engine, {}).get("applied", {}))
    except PatchkitError as e:
        loc["error"] = str(e)
    norm = ENGINES[engine].dist.replace("-", "_")
    if t.layout == "package":
        from patchkit.core import record

        for di in sorted(t.root.glob(f"{norm}-*.dist-info")):
            if (di / "RECORD").is_file():
                # .pyc rows are caches Python rewrites; only sources and data must match.
                loc["record"] = {
                    "dist_info": di.name,
                    "problems": [p for p in record.verify(di) if not p.split(":", 1)[0].endswith(".pyc")][:20],
                }
    prov = sorted(t.root.glob(f"{norm}-*.dist-info/patchkit.json"))
    if prov:
        try:
            loc["wheel"] = json.loads(prov[0].read_text())
        except (OSError, ValueError):
            loc["wheel"] = {"error": f"{prov[0]}: unreadable"}
    loc["edits"] = _journal_edits(t.root, engine)
    # Sources FlashInfer compiles at run time, as they are on disk now (a wheel install sets their mtime).
    loc["jit_sources"] = []
    for r in mine:
        for op in r.ops:
            if op.jit_modules:
                p = t.path(op.file)
                if p.is_file():
                    loc["jit_sources"].append(
                        {
                            "recipe": r.id,
                            "file": op.file,
                            "path": str(p),
                            "mtime": p.stat().st_mtime,
                            "modules": list(op.jit_modules),
                        }
                    )
    return loc


def _jit_cache(version: Optional[str]) -> dict:
    base = jit.cache_base()
    builds = []
    if base.is_dir():
        for d in sorted(base.glob("*/*/cached_ops/*")):
            if d.is_dir():
                newest = max((f.stat().st_mtime for f in d.rglob("*") if f.is_file()), default=d.stat().st_mtime)
                rel = d.relative_to(base).parts
                builds.append(
                    {"path": str(d), "flashinfer_version": rel[0], "archs": rel[1], "module": rel[-1], "mtime": newest}
                )
    return {"base": str(base), "exists": base.is_dir(), "builds": builds}


def collect(project, python: Optional[str] = None) -> dict:
    """Every fact the judge needs, as plain JSON."""
    probe = probe_python(python or sys.executable)
    catalog = project.catalog()
    recipes = list(catalog.recipes.values())
    pins = {}
    try:
        pins = {e: p.version for e, p in project.pins().items()}
    except PatchkitError:
        pass
    facts: dict = {
        "patchkit": __version__,
        "host": platform.node(),
        "python": {
            k: probe[k] for k in ("executable", "python_version", "prefix", "base_prefix", "in_venv", "purelib")
        },
        "pins": pins,
        "bundles": {b: sorted(ids) for b, ids in catalog.bundles.items()},
        "recipe_sha256": {r.id: r.sha256 for r in recipes},
        "jit_modules": sorted({m for r in recipes for op in r.ops for m in op.jit_modules}),
        "engines": {},
        "workspace": {},
    }
    for engine, info in ENGINES.items():
        m = dict(probe["modules"].get(info.package, {"found": False}))
        if m.get("found"):
            m["location"] = _location(engine, Path(m["root"]), recipes)
        facts["engines"][engine] = m
        tree = project.tree(engine)
        if tree.exists():
            facts["workspace"][engine] = _location(engine, tree, recipes)
    facts["profile"] = _profile(project, probe, catalog)
    facts["aot_jit_cache"] = probe["modules"].get(prebuilt_module(), {}).get("found", False)
    torch_m = probe["modules"].get("torch", {})
    facts["gpus"] = _gpus(probe["executable"], bool(torch_m.get("found")))
    fi = facts["engines"].get(jit_engine(), {})
    facts["jit"] = _jit_cache((fi.get("location") or {}).get("version") or fi.get("version"))
    return facts


def _profile(project, probe: dict, catalog) -> Optional[dict]:
    """The profile doctor judges against (patchkit/fleet/profile.py): the imported copies' own,
    else the workspace's; with the recipe ids it wants.  None when there is none."""
    from patchkit.fleet import profile as P

    roots = P.target_roots((), P.python_roots(probe))
    prof = P.find(project.pins_path, roots)
    if not prof.exists:
        return None
    # the venv's own (SITE/.patchkit/profile.toml), or the workspace's of the directory doctor
    # runs in, which shows what that project wants but never decides the exit code
    own = prof.wheel or any(Path(prof.path).resolve() == P.target_file(r).resolve() for r in roots)
    try:
        P.check(prof, catalog)
    except PatchkitError as e:
        return {"path": str(prof.path), "error": str(e), "own": own}
    return {**prof.to_json(), "wanted": P.wanted(prof, catalog), "own": own}


# -- judging ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    level: str
    topic: str
    message: str
    # A warning about what this machine lacks (no GPU to check a bundle against, no engine
    # importable by the probed Python) is shown, but is not something wrong: exit 0.
    fails: bool = True
    # Said against the project of the directory doctor runs in (its pins, its workspace
    # trees, its patchkit.toml), not the venv: shown, never the exit code, which is a
    # property of the venv alone (the same venv exits the same from / and from a checkout).
    project: bool = False

    def to_json(self) -> dict:
        out = {"level": self.level, "topic": self.topic, "message": self.message, "fails": self.fails}
        if self.project:
            out["project"] = True
        return out


def bundle_major(bundle: str) -> Optional[int]:
    """The compute-capability major a bundle named after an SM is for: sm120 -> 12, sm90 -> 9."""
    m = re.fullmatch(r"sm_?(\d)(\d)?(\d)?", bundle)
    if not m:
        return None
    digits = "".join(g for g in m.groups() if g)
    return int(digits[:-1]) if len(digits) > 1 else int(digits)


def _carried(loc: dict, rid: str, sha: Optional[str]) -> Optional[str]:
    """How a copy carries a recipe: 'applied', 'wheel' (built in by `patchkit wheel`), 'upstream', or None."""
    state = (loc.get("recipes") or {}).get(rid)
    if state == State.APPLIED:
        return "applied"
    if state == State.UPSTREAM:
        built = {r.get("id"): r for r in (loc.get("wheel") or {}).get("recipes", [])}
        return "wheel" if rid in built else "upstream"
    return None


@dataclass(frozen=True)
class _Seen:
    """What every check reads: the facts, and what is derived from them once."""

    facts: dict
    py: dict  # the interpreter
    devs: list  # the GPUs found
    majors: frozenset  # their compute-capability majors
    gpu_names: str
    sha: dict  # recipe id -> sha256 of the recipe as it is now
    wanted: Optional[list]  # what the profile wants; None: no profile
    excluded: frozenset  # what the profile excludes
    own: bool  # the profile is the venv's own (not the workspace's of the current directory)

    def carried(self, loc: dict, rid: str) -> Optional[str]:
        return _carried(loc, rid, self.sha.get(rid))


def _seen(facts: dict) -> _Seen:
    devs = facts.get("gpus", {}).get("devices", [])
    majors = set()
    for d in devs:
        try:
            majors.add(int(str(d["capability"]).split(".")[0]))
        except ValueError:
            pass
    profile = facts.get("profile") or {}
    return _Seen(
        facts=facts,
        py=facts["python"],
        devs=devs,
        majors=frozenset(majors),
        gpu_names=", ".join(sorted({f"{d['name']} ({d['capability']})" for d in devs})),
        sha=facts.get("recipe_sha256", {}),
        wanted=profile.get("wanted"),
        excluded=frozenset(profile.get("exclude", ())),
        own=bool(profile.get("own", True)),  # facts recorded before "own": the venv's own
    )


def judge(facts: dict) -> list[Finding]:
    """The findings of ``facts``, in the order the report prints them: one check at a time."""
    s = _seen(facts)
    out: list[Finding] = []
    for check in (_check_python, _check_gpus, _check_profile, _check_engines, _check_workspace, _check_bundles):
        out += check(s)
    out += _check_jit(s)
    return out


def _check_python(s: _Seen) -> Iterator[Finding]:
    py = s.py
    yield Finding(
        INFO,
        "python",
        f"{py['executable']} (Python {py['python_version']}, "
        f"{'venv ' + py['prefix'] if py.get('in_venv') else 'not a venv'})",
    )


def _check_gpus(s: _Seen) -> Iterator[Finding]:
    gpus = s.facts.get("gpus", {})
    for d in s.devs:
        yield Finding(
            OK, "gpu", f"GPU {d['index']}: {d['name']}, compute capability {d['capability']} (via {gpus.get('source')})"
        )
    if not s.devs:
        yield Finding(WARN, "gpu", "no GPU found (" + "; ".join(gpus.get("tried", [])) + ")", fails=False)


def _check_profile(s: _Seen) -> Iterator[Finding]:
    """Judged against the profile when there is one: what it excludes is never asked for."""
    profile = s.facts.get("profile") or {}
    whose = "" if s.own else "this directory's project's "
    if profile.get("error"):
        yield Finding(WARN, "profile", f"{whose}profile: {profile['error']}", fails=s.own, project=not s.own)
    if s.wanted is not None:
        yield Finding(INFO, "profile", f"{whose}profile {profile['path']}: " + _describe_profile(profile))
    if not profile or not s.own:
        yield Finding(
            INFO,
            "profile",
            f"{s.py['executable']}'s copies have no profile of their own, so nothing says what they should "
            f"carry: `patchkit apply BUNDLE --python {s.py['executable']} --save` records one",
        )


def _check_engines(s: _Seen) -> Iterator[Finding]:
    engines = s.facts.get("engines", {})
    order = lambda kv: (list(ENGINES).index(kv[0]) if kv[0] in ENGINES else len(ENGINES), kv[0])  # noqa: E731
    for engine, m in sorted(engines.items(), key=order):
        if not m.get("found"):
            yield _not_importable(s, engine, m)
            continue
        yield _imported(s, engine, m)
        loc = m.get("location", {})
        if loc.get("error"):
            yield Finding(WARN, engine, f"{engine}: cannot judge the recipes there: {loc['error']}")
            continue
        for check in (_check_wheel, _check_record, _check_journal, _check_workspace_ahead, _check_wanted):
            yield from check(s, engine, m, loc)
        carried = sorted(rid for rid in loc.get("recipes") or {} if s.carried(loc, rid))
        if carried:
            yield Finding(
                INFO, engine, f"{engine}: carries " + ", ".join(f"{rid} ({s.carried(loc, rid)})" for rid in carried)
            )


def _not_importable(s: _Seen, engine: str, m: dict) -> Finding:
    """Every engine defined is probed; one this interpreter lacks is only worth a warning
    when it has none at all (a SGLang venv has no vLLM, and needs none)."""
    none = not any(x.get("found") for x in s.facts.get("engines", {}).values())
    return Finding(
        WARN if none else INFO,
        engine,
        f"{engine}: not importable by {s.py['executable']}"
        + (f" ({m['error']})" if m.get("error") else "")
        + ("; if another interpreter serves, run `patchkit doctor --python PATH`" if none else ""),
        fails=False,
    )


def _imported(s: _Seen, engine: str, m: dict) -> Finding:
    """Where the engine is imported from, and its version against the pin."""
    version = m.get("version") or m.get("location", {}).get("version")
    pin = s.facts.get("pins", {}).get(engine)
    where = m.get("package_dir") or m.get("root")
    base_version = version.split("+", 1)[0] if version else None
    if pin and base_version and base_version != pin:
        return Finding(
            WARN,
            engine,
            f"{engine} {version} imported from {where}; this directory's pin is {pin}, so its recipes were "
            "verified against another release",
            fails=False,
            project=True,
        )
    return Finding(
        OK,
        engine,
        f"{engine} {version or '(unknown version)'} imported from {where}" + (f" (pin {pin})" if pin else ""),
    )


def _check_wheel(s: _Seen, engine: str, m: dict, loc: dict) -> Iterator[Finding]:
    """A copy installed from a patchkit wheel: its recipes, and any built from another version."""
    wheel = loc.get("wheel") or {}
    if not wheel.get("recipes"):
        return
    yield Finding(
        INFO,
        engine,
        f"{engine}: installed from a patchkit wheel {wheel.get('version')} (label {wheel.get('label')}): "
        + ", ".join(r["id"] for r in wheel["recipes"]),
    )
    for r in wheel["recipes"]:
        if r["id"] in s.sha and r.get("sha256") != s.sha[r["id"]]:
            yield Finding(
                WARN,
                engine,
                f"{engine}: the installed wheel was built with another version of recipe {r['id']} (sha256 "
                f"{r.get('sha256', '')[:12]}, recipes/ has {s.sha[r['id']][:12]}); rebuild it",
            )


def _check_record(s: _Seen, engine: str, m: dict, loc: dict) -> Iterator[Finding]:
    rec = loc.get("record") or {}
    if rec.get("problems"):
        yield Finding(
            WARN,
            engine,
            f"{engine}: {rec['dist_info']}/RECORD does not match the installed files "
            f"({'; '.join(rec['problems'][:3])}{'; ...' if len(rec['problems']) > 3 else ''}): edited outside "
            "pip and patchkit?",
        )


def _check_journal(s: _Seen, engine: str, m: dict, loc: dict) -> Iterator[Finding]:
    """The journal says recipes are applied that are not: the engine was upgraded, or its
    files are back to the released bytes (reinstalled)."""
    py = s.py
    stale = [e["file"] for e in loc.get("edits", []) if e.get("back_to_pristine")]
    lost = (State.MODIFIED, State.PENDING, State.PARTIAL)
    recorded = set(loc.get("journal_applied") or ())
    journal_says = {
        rid for rid, st in (loc.get("recipes") or {}).items() if st in lost and rid in recorded - s.excluded
    }
    upgraded = [e for e in loc.get("edits", []) if e.get("upgraded_from") and not e.get("back_to_pristine")]
    if upgraded and journal_says:
        yield Finding(
            WARN,
            engine,
            f"{engine} was upgraded from {upgraded[0]['upgraded_from']} to {loc.get('version')} since patchkit "
            f"last wrote it: {', '.join(e['file'] for e in upgraded)} are the new release's, so "
            f"{', '.join(sorted(journal_says))} are no longer applied; "
            + (
                f"`patchkit apply --python {py['executable']}` patches it again to the profile"
                if s.wanted is not None
                else f"`patchkit apply {' '.join(sorted(journal_says))} --python {py['executable']}` applies them again"
            ),
        )
    if stale and journal_says:
        names = " ".join(sorted(journal_says))
        yield Finding(
            WARN,
            engine,
            f"{engine}: patchkit's journal in {loc['root']}/.patchkit says {', '.join(sorted(journal_says))} "
            f"are applied, but {', '.join(stale)} are back to the released bytes (reinstalled?); the stale "
            f"record is dropped at the next write: `patchkit apply {names} --target {engine}={loc['root']}` "
            "applies them again",
        )


def _check_workspace_ahead(s: _Seen, engine: str, m: dict, loc: dict) -> Iterator[Finding]:
    """The loud one: the workspace tree carries recipes that the imported copy does not."""
    ws = s.facts.get("workspace", {}).get(engine)
    if not ws or Path(ws.get("root", "")).resolve() == Path(loc.get("root", "/nonexistent")).resolve():
        return
    patched_ws = sorted(rid for rid, st in (ws.get("recipes") or {}).items() if st == State.APPLIED)
    lacking = [rid for rid in patched_ws if s.carried(loc, rid) is None and rid not in s.excluded]
    if lacking:
        exe, where = s.py["executable"], m.get("package_dir") or m.get("root")
        yield Finding(
            ERROR,
            engine,
            f"{engine}: the workspace tree {ws['root']} is patched ({', '.join(lacking)}), but "
            f"{exe} imports {engine} from {where}, which is NOT: the server runs unpatched "
            f"code. Fix: `patchkit apply {' '.join(lacking)} --python {exe}`, or install a "
            "wheel from `patchkit wheel`",
            fails=False,
            project=True,
        )


def _check_wanted(s: _Seen, engine: str, m: dict, loc: dict) -> Iterator[Finding]:
    """Against the profile: what it wants and the copy lacks, what it excludes and the copy carries."""
    if s.wanted is None:
        return
    exe = s.py["executable"]
    states = loc.get("recipes") or {}
    lack = [rid for rid in s.wanted if rid in states and s.carried(loc, rid) is None]
    whose = "the profile" if s.own else "this directory's project's profile"
    if lack:
        yield Finding(
            WARN,
            engine,
            f"{engine}: {whose} wants {', '.join(lack)}, which the copy {exe} imports lacks "
            f"({', '.join(f'{rid} {states[rid]}' for rid in lack)}): `patchkit apply --python "
            f"{exe}`",
            fails=s.own,
            project=not s.own,
        )
    for rid in sorted(s.excluded):
        how = s.carried(loc, rid)
        if how not in ("applied", "wheel"):
            continue
        fix = (
            f"`patchkit revert {rid} --python {exe}`"
            if how == "applied"
            else "rebuild the wheel without it (`patchkit wheel` of the profile's recipes) and install that"
        )
        yield Finding(
            WARN,
            engine,
            f"{engine}: {whose} excludes {rid}, but the imported copy carries it: {fix}",
            fails=s.own,
            project=not s.own,
        )


def _check_workspace(s: _Seen) -> Iterator[Finding]:
    for engine, ws in sorted(s.facts.get("workspace", {}).items()):
        applied = sorted(rid for rid, st in (ws.get("recipes") or {}).items() if st == State.APPLIED)
        yield Finding(
            INFO,
            "workspace",
            f"workspace {engine} tree {ws.get('root')}: "
            + (f"patched with {', '.join(applied)}" if applied else "no recipe applied"),
        )


def _check_bundles(s: _Seen) -> Iterator[Finding]:
    """Bundles named after an SM against the GPUs."""
    for bundle, ids in sorted(s.facts.get("bundles", {}).items()):
        major = bundle_major(bundle)
        if major is not None:
            yield from _check_bundle(s, bundle, ids, major)


def _check_bundle(s: _Seen, bundle: str, ids: list, major: int) -> Iterator[Finding]:
    exe = s.py["executable"]
    found = {e: m for e, m in s.facts.get("engines", {}).items() if m.get("found")}
    carried_here = sorted(
        {rid for m in found.values() for rid in ids if s.carried(m.get("location", {}), rid) in ("applied", "wheel")}
    )
    pending_here = sorted(
        {
            rid
            for m in found.values()
            for rid, st in (m.get("location", {}).get("recipes") or {}).items()
            if rid in ids and st in (State.PENDING, State.PARTIAL) and rid not in s.excluded
        }
    )
    if s.wanted is not None and s.own:
        pending_here = []  # the venv's profile decides what is wanted, and is judged above
    want = f"compute capability {major}.x"
    if not s.devs:
        yield Finding(INFO, "bundle", f"{bundle}: for GPUs of {want} only; no GPU here to check it against")
    elif s.majors == {major}:
        yield Finding(OK, "bundle", f"{bundle}: fits this machine ({s.gpu_names})")
        if pending_here:
            yield Finding(
                WARN,
                "bundle",
                f"{bundle} fits these GPUs, but the imported copies lack {', '.join(pending_here)}: `patchkit "
                f"apply {bundle} --python {exe}`",
            )
    else:
        yield Finding(
            INFO,
            "bundle",
            f"{bundle}: NOT for this GPU ({s.gpu_names}); it is for {want} only (SM{major}0: e.g. RTX PRO 6000 "
            "Blackwell). Do not apply it here",
        )
        if carried_here:
            yield Finding(
                ERROR,
                "bundle",
                f"{bundle} recipes are applied here ({', '.join(carried_here)}) but this GPU is not {want}. "
                "Undo them: " + "; ".join(_undo_bundle(s, bundle, ids)),
            )


def _undo_bundle(s: _Seen, bundle: str, ids: list) -> list[str]:
    """How to take a bundle's recipes back: revert what patchkit applied, reinstall the
    released wheels where a patchkit wheel brought them."""
    by_patchkit, by_wheel = False, []
    for engine, m in sorted(s.facts.get("engines", {}).items()):
        loc = m.get("location", {}) if m.get("found") else {}
        how = {s.carried(loc, rid) for rid in ids}
        by_patchkit |= "applied" in how
        if "wheel" in how:
            base = (loc.get("wheel") or {}).get("base") or {}
            by_wheel.append(f"{base.get('dist', ENGINES[engine].dist)}=={base.get('version', '?')}")
    fix = []
    if by_patchkit:
        fix.append(f"`patchkit revert {bundle} --python {s.py['executable']}`")
    if by_wheel:
        fix.append("reinstall the released wheels: pip install --force-reinstall --no-deps " + " ".join(by_wheel))
    return fix


def _check_jit(s: _Seen) -> Iterator[Finding]:
    """FlashInfer's JIT cache against patchkit's last edit to the FlashInfer sources."""
    j = s.facts.get("jit", {})
    # FlashInfer compiles the copy Python imports: patchkit's writes there (journal), and the
    # kernel sources of recipes that copy carries (a patched wheel's install time counts too).
    fi_loc = s.facts.get("engines", {}).get(jit_engine(), {}).get("location") or {}
    edits = list(fi_loc.get("edits", []))
    edits += [src for src in fi_loc.get("jit_sources", []) if s.carried(fi_loc, src["recipe"])]
    yield Finding(
        INFO,
        "jit",
        f"FlashInfer JIT cache: {j.get('base')}" + ("" if j.get("exists") else " (absent: nothing compiled yet)"),
    )
    if s.facts.get("aot_jit_cache"):
        yield Finding(
            WARN if edits else INFO,
            "jit",
            "flashinfer-jit-cache (prebuilt kernels) is installed: FlashInfer uses it instead of compiling, so "
            "patched FlashInfer C++ has no effect"
            if edits
            else "flashinfer-jit-cache (prebuilt kernels) is installed",
        )
    if not edits:
        return
    last = max(edits, key=lambda e: e["mtime"])
    relevant = set(s.facts.get("jit_modules", []))
    old = [b for b in j.get("builds", []) if b["mtime"] < last["mtime"] and (not relevant or b["module"] in relevant)]
    if old:
        paths = " ".join(b["path"] for b in old)
        yield Finding(
            WARN,
            "jit",
            f"{len(old)} cached FlashInfer build(s) predate the patched FlashInfer sources ({last['file']}); "
            f"FlashInfer keeps their old nvcc flags. Remove them: rm -rf {paths}",
        )
    else:
        yield Finding(OK, "jit", f"no cached FlashInfer build predates the patched sources ({last['file']})")


def _describe_profile(profile: dict) -> str:
    parts = [f"{k} {', '.join(profile.get(k) or ())}" for k in ("bundles", "recipes", "exclude") if profile.get(k)]
    return "; ".join(parts) or "empty"


def exit_code(findings: list[Finding]) -> int:
    """1 when a finding says something is wrong; what the machine lacks (no GPU) only warns."""
    return 1 if any(f.level in (WARN, ERROR) and f.fails for f in findings) else 0


def summary(findings: list[Finding]) -> str:
    """The last line of the human report."""
    if exit_code(findings):
        return "something is off (see WARN / ERROR above)."
    lacking = [f.topic for f in findings if f.level == WARN and not f.fails and not f.project]
    beside = [f.topic for f in findings if f.level in (WARN, ERROR) and f.project]
    said = []
    if lacking:
        said.append(f"this machine lacks what the WARN lines above say ({', '.join(lacking)})")
    if beside:
        said.append(
            f"this directory's project differs from the venv ({', '.join(dict.fromkeys(beside))}): shown above, "
            "not the exit code, which is the venv's alone"
        )
    if said:
        return "nothing wrong found" + (" in the venv" if beside else "") + "; " + "; ".join(said) + "."
    return "all well."


def render(findings: list[Finding]) -> str:
    tag = {OK: "  ok  ", INFO: "  --  ", WARN: " WARN ", ERROR: "ERROR "}
    return "\n".join(f"[{tag[f.level]}] {f.message}" for f in findings)
