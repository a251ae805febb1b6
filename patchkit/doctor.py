"""`doctor`: does the Python that will serve actually run the patched code, on a GPU it fits?

Two halves, so that the verdict can be tested from a recorded machine:

* ``collect`` gathers *facts* (plain JSON): the interpreter, where it imports sglang and
  flashinfer from (``find_spec``, in that interpreter, without importing the packages),
  their versions, the recipe states of those copies and of the workspace trees, the GPUs
  (torch, else nvidia-smi), FlashInfer's JIT cache and patchkit's last edits to FlashInfer.
* ``judge`` turns facts into findings (ok / info / warn / error).  It does no I/O.

Asking an interpreter what it imports (and ``--python`` targeting) is patchkit/interp.py.
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
from typing import Optional

from patchkit import __version__, jit
from patchkit.errors import PatchkitError
from patchkit.interp import _jit_name, _prebuilt, probe_python
from patchkit.states import State
from patchkit.target import ENGINES

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
    from patchkit.journal import Journal
    from patchkit.target import open_target

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
    from patchkit.fetch import file_sha256

    return file_sha256(p)


def _location(engine: str, root: Path, recipes) -> dict:
    """Recipe states of one copy of an engine, plus wheel provenance and journal health."""
    from patchkit.judge import Session, evaluate, results
    from patchkit.model import per_engine
    from patchkit.target import open_target

    loc: dict = {"root": str(root)}
    try:
        t = open_target(engine, root)
    except PatchkitError as e:
        loc["error"] = str(e)
        return loc
    loc.update(layout=t.layout, version=t.version)
    mine = per_engine(recipes, engine)
    try:
        s = Session({engine: t})
        loc["recipes"] = {r.id: r.state for r in results(s, evaluate(s, mine))}
        loc["journal_applied"] = sorted(s.journal(engine).engines.get(engine, {}).get("applied", {}))
    except PatchkitError as e:
        loc["error"] = str(e)
    norm = ENGINES[engine].dist.replace("-", "_")
    if t.layout == "package":
        from patchkit import record

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
    facts["aot_jit_cache"] = probe["modules"].get(_prebuilt(), {}).get("found", False)
    torch_m = probe["modules"].get("torch", {})
    facts["gpus"] = _gpus(probe["executable"], bool(torch_m.get("found")))
    fi = facts["engines"].get(_jit_name(), {})
    facts["jit"] = _jit_cache((fi.get("location") or {}).get("version") or fi.get("version"))
    return facts


def _profile(project, probe: dict, catalog) -> Optional[dict]:
    """The profile doctor judges against (patchkit/profile.py): the imported copies' own,
    else the workspace's; with the recipe ids it wants.  None when there is none."""
    from patchkit import profile as P

    prof = P.find(project.pins_path, P.target_roots((), P.python_roots(probe)))
    if not prof.exists:
        return None
    try:
        P.check(prof, catalog)
    except PatchkitError as e:
        return {"path": str(prof.path), "error": str(e)}
    return {**prof.to_json(), "wanted": P.wanted(prof, catalog)}


# -- judging ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    level: str
    topic: str
    message: str
    # A warning about what this machine lacks (no GPU to check a bundle against, no engine
    # importable by the probed Python) is shown, but is not something wrong: exit 0.
    fails: bool = True

    def to_json(self) -> dict:
        return {"level": self.level, "topic": self.topic, "message": self.message, "fails": self.fails}


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


def judge(facts: dict) -> list[Finding]:
    out: list[Finding] = []
    add = lambda level, topic, msg, fails=True: out.append(Finding(level, topic, msg, fails))  # noqa: E731
    py = facts["python"]
    add(
        INFO,
        "python",
        f"{py['executable']} (Python {py['python_version']}, "
        f"{'venv ' + py['prefix'] if py.get('in_venv') else 'not a venv'})",
    )

    gpus = facts.get("gpus", {})
    devs = gpus.get("devices", [])
    if devs:
        for d in devs:
            add(
                OK,
                "gpu",
                f"GPU {d['index']}: {d['name']}, compute capability {d['capability']} (via {gpus.get('source')})",
            )
    else:
        add(WARN, "gpu", "no GPU found (" + "; ".join(gpus.get("tried", [])) + ")", fails=False)
    majors = set()
    for d in devs:
        try:
            majors.add(int(str(d["capability"]).split(".")[0]))
        except ValueError:
            pass
    gpu_names = ", ".join(sorted({f"{d['name']} ({d['capability']})" for d in devs}))

    sha = facts.get("recipe_sha256", {})
    pins = facts.get("pins", {})
    # Judged against the profile when there is one: what it excludes is never asked for.
    profile = facts.get("profile") or {}
    if profile.get("error"):
        add(WARN, "profile", f"profile: {profile['error']}")
    wanted = profile.get("wanted")  # None: no profile
    excluded = set(profile.get("exclude", ()))
    if wanted is not None:
        add(INFO, "profile", f"profile {profile['path']}: " + _describe_profile(profile))
    engines = facts.get("engines", {})
    for engine, m in sorted(
        engines.items(), key=lambda kv: (list(ENGINES).index(kv[0]) if kv[0] in ENGINES else len(ENGINES), kv[0])
    ):
        if not m.get("found"):
            # Every engine defined is probed; one this interpreter lacks is only worth a
            # warning when it has none at all (a SGLang venv has no vLLM, and needs none).
            none = not any(x.get("found") for x in engines.values())
            add(
                WARN if none else INFO,
                engine,
                f"{engine}: not importable by {py['executable']}"
                + (f" ({m['error']})" if m.get("error") else "")
                + ("; if another interpreter serves, run `patchkit doctor --python PATH`" if none else ""),
                fails=False,
            )
            continue
        loc = m.get("location", {})
        version = m.get("version") or loc.get("version")
        pin = pins.get(engine)
        where = m.get("package_dir") or m.get("root")
        base_version = version.split("+", 1)[0] if version else None
        if pin and base_version and base_version != pin:
            add(
                WARN,
                engine,
                f"{engine} {version} imported from {where}; the pin is {pin}, so recipes were verified against "
                "another release",
            )
        else:
            add(
                OK,
                engine,
                f"{engine} {version or '(unknown version)'} imported from {where}" + (f" (pin {pin})" if pin else ""),
            )
        if loc.get("error"):
            add(WARN, engine, f"{engine}: cannot judge the recipes there: {loc['error']}")
            continue
        wheel = loc.get("wheel") or {}
        if wheel.get("recipes"):
            add(
                INFO,
                engine,
                f"{engine}: installed from a patchkit wheel {wheel.get('version')} (label {wheel.get('label')}): "
                + ", ".join(r["id"] for r in wheel["recipes"]),
            )
            for r in wheel["recipes"]:
                if r["id"] in sha and r.get("sha256") != sha[r["id"]]:
                    add(
                        WARN,
                        engine,
                        f"{engine}: the installed wheel was built with another version of recipe {r['id']} (sha256 "
                        f"{r.get('sha256', '')[:12]}, recipes/ has {sha[r['id']][:12]}); rebuild it",
                    )
        rec = loc.get("record") or {}
        if rec.get("problems"):
            add(
                WARN,
                engine,
                f"{engine}: {rec['dist_info']}/RECORD does not match the installed files "
                f"({'; '.join(rec['problems'][:3])}{'; ...' if len(rec['problems']) > 3 else ''}): edited outside "
                "pip and patchkit?",
            )
        stale = [e["file"] for e in loc.get("edits", []) if e.get("back_to_pristine")]
        lost = (State.MODIFIED, State.PENDING, State.PARTIAL)
        recorded = set(loc.get("journal_applied") or ())
        journal_says = {
            rid for rid, st in (loc.get("recipes") or {}).items() if st in lost and rid in recorded - excluded
        }
        upgraded = [e for e in loc.get("edits", []) if e.get("upgraded_from") and not e.get("back_to_pristine")]
        if upgraded and journal_says:
            add(
                WARN,
                engine,
                f"{engine} was upgraded from {upgraded[0]['upgraded_from']} to {loc.get('version')} since patchkit "
                f"last wrote it: {', '.join(e['file'] for e in upgraded)} are the new release's, so "
                f"{', '.join(sorted(journal_says))} are no longer applied; "
                + (
                    f"`patchkit apply --python {py['executable']}` patches it again to the profile"
                    if wanted is not None
                    else f"`patchkit apply {' '.join(sorted(journal_says))} --python {py['executable']}` applies them"
                    " again"
                ),
            )
        if stale and journal_says:
            names = " ".join(sorted(journal_says))
            add(
                WARN,
                engine,
                f"{engine}: patchkit's journal in {loc['root']}/.patchkit says {', '.join(sorted(journal_says))} "
                f"are applied, but {', '.join(stale)} are back to the released bytes (reinstalled?); the stale "
                f"record is dropped at the next write: `patchkit apply {names} --target {engine}={loc['root']}` "
                "applies them again",
            )
        # The loud one: the workspace tree carries recipes that the imported copy does not.
        ws = facts.get("workspace", {}).get(engine)
        if ws and Path(ws.get("root", "")).resolve() != Path(loc.get("root", "/nonexistent")).resolve():
            patched_ws = sorted(rid for rid, st in (ws.get("recipes") or {}).items() if st == State.APPLIED)
            lacking = [rid for rid in patched_ws if _carried(loc, rid, sha.get(rid)) is None and rid not in excluded]
            if lacking:
                add(
                    ERROR,
                    engine,
                    f"{engine}: the workspace tree {ws['root']} is patched ({', '.join(lacking)}), but "
                    f"{py['executable']} imports {engine} from {where}, which is NOT: the server runs unpatched "
                    f"code. Fix: `patchkit apply {' '.join(lacking)} --python {py['executable']}`, or install a "
                    "wheel from `patchkit wheel`",
                )
        states = loc.get("recipes") or {}
        if wanted is not None:
            lack = [rid for rid in wanted if rid in states and _carried(loc, rid, sha.get(rid)) is None]
            if lack:
                add(
                    WARN,
                    engine,
                    f"{engine}: the profile wants {', '.join(lack)}, which the copy {py['executable']} imports lacks "
                    f"({', '.join(f'{rid} {states[rid]}' for rid in lack)}): `patchkit apply --python "
                    f"{py['executable']}`",
                )
            unwanted = [rid for rid in sorted(excluded) if _carried(loc, rid, sha.get(rid)) in ("applied", "wheel")]
            for rid in unwanted:
                how = _carried(loc, rid, sha.get(rid))
                fix = (
                    f"`patchkit revert {rid} --python {py['executable']}`"
                    if how == "applied"
                    else "rebuild the wheel without it (`patchkit wheel` of the profile's recipes) and install that"
                )
                add(WARN, engine, f"{engine}: the profile excludes {rid}, but the imported copy carries it: {fix}")
        carried = sorted(rid for rid in states if _carried(loc, rid, sha.get(rid)))
        if carried:
            add(
                INFO,
                engine,
                f"{engine}: carries " + ", ".join(f"{rid} ({_carried(loc, rid, sha.get(rid))})" for rid in carried),
            )

    for engine, ws in sorted(facts.get("workspace", {}).items()):
        applied = sorted(rid for rid, st in (ws.get("recipes") or {}).items() if st == State.APPLIED)
        add(
            INFO,
            "workspace",
            f"workspace {engine} tree {ws.get('root')}: "
            + (f"patched with {', '.join(applied)}" if applied else "no recipe applied"),
        )

    # Bundles against the GPUs.
    for bundle, ids in sorted(facts.get("bundles", {}).items()):
        major = bundle_major(bundle)
        if major is None:
            continue
        carried_here = sorted(
            {
                rid
                for engine, m in facts.get("engines", {}).items()
                if m.get("found")
                for rid in ids
                if _carried(m.get("location", {}), rid, sha.get(rid)) in ("applied", "wheel")
            }
        )
        pending_here = sorted(
            {
                rid
                for engine, m in facts.get("engines", {}).items()
                if m.get("found")
                for rid, st in (m.get("location", {}).get("recipes") or {}).items()
                if rid in ids and st in (State.PENDING, State.PARTIAL) and rid not in excluded
            }
        )
        if wanted is not None:
            pending_here = []  # the profile decides what is wanted, and is judged above
        want = f"compute capability {major}.x"
        by_patchkit, by_wheel = False, []
        for engine, m in sorted(facts.get("engines", {}).items()):
            loc = m.get("location", {}) if m.get("found") else {}
            how = {_carried(loc, rid, sha.get(rid)) for rid in ids}
            by_patchkit |= "applied" in how
            if "wheel" in how:
                base = (loc.get("wheel") or {}).get("base") or {}
                by_wheel.append(f"{base.get('dist', ENGINES[engine].dist)}=={base.get('version', '?')}")
        if not devs:
            add(INFO, "bundle", f"{bundle}: for GPUs of {want} only; no GPU here to check it against")
        elif majors == {major}:
            add(OK, "bundle", f"{bundle}: fits this machine ({gpu_names})")
            if pending_here:
                add(
                    WARN,
                    "bundle",
                    f"{bundle} fits these GPUs, but the imported copies lack {', '.join(pending_here)}: `patchkit "
                    f"apply {bundle} --python {py['executable']}`",
                )
        else:
            add(
                INFO,
                "bundle",
                f"{bundle}: NOT for this GPU ({gpu_names}); it is for {want} only (SM{major}0: e.g. RTX PRO 6000 "
                "Blackwell). Do not apply it here",
            )
            if carried_here:
                fix = []
                if by_patchkit:
                    fix.append(f"`patchkit revert {bundle} --python {py['executable']}`")
                if by_wheel:
                    fix.append(
                        "reinstall the released wheels: pip install --force-reinstall --no-deps " + " ".join(by_wheel)
                    )
                add(
                    ERROR,
                    "bundle",
                    f"{bundle} recipes are applied here ({', '.join(carried_here)}) but this GPU is not {want}. "
                    "Undo them: " + "; ".join(fix),
                )

    # FlashInfer JIT cache vs patchkit's last edit to FlashInfer sources.
    j = facts.get("jit", {})
    # FlashInfer compiles the copy Python imports: patchkit's writes there (journal), and the
    # kernel sources of recipes that copy carries (a patched wheel's install time counts too).
    fi_loc = facts.get("engines", {}).get(_jit_name(), {}).get("location") or {}
    edits = list(fi_loc.get("edits", []))
    edits += [s for s in fi_loc.get("jit_sources", []) if _carried(fi_loc, s["recipe"], sha.get(s["recipe"]))]
    add(
        INFO,
        "jit",
        f"FlashInfer JIT cache: {j.get('base')}" + ("" if j.get("exists") else " (absent: nothing compiled yet)"),
    )
    if facts.get("aot_jit_cache"):
        add(
            WARN if edits else INFO,
            "jit",
            "flashinfer-jit-cache (prebuilt kernels) is installed: FlashInfer uses it instead of compiling, so "
            "patched FlashInfer C++ has no effect"
            if edits
            else "flashinfer-jit-cache (prebuilt kernels) is installed",
        )
    if edits:
        last = max(edits, key=lambda e: e["mtime"])
        relevant = set(facts.get("jit_modules", []))
        old = [
            b for b in j.get("builds", []) if b["mtime"] < last["mtime"] and (not relevant or b["module"] in relevant)
        ]
        if old:
            paths = " ".join(b["path"] for b in old)
            add(
                WARN,
                "jit",
                f"{len(old)} cached FlashInfer build(s) predate the patched FlashInfer sources ({last['file']}); "
                f"FlashInfer keeps their old nvcc flags. Remove them: rm -rf {paths}",
            )
        else:
            add(OK, "jit", f"no cached FlashInfer build predates the patched sources ({last['file']})")
    return out


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
    lacking = [f.topic for f in findings if f.level == WARN and not f.fails]
    if lacking:
        return f"nothing wrong found; this machine lacks what the WARN lines above say ({', '.join(lacking)})."
    return "all well."


def render(findings: list[Finding]) -> str:
    tag = {OK: "  ok  ", INFO: "  --  ", WARN: " WARN ", ERROR: "ERROR "}
    return "\n".join(f"[{tag[f.level]}] {f.message}" for f in findings)
