"""Asking an interpreter which copies of the engines it imports, and making them the targets.

``probe_python`` runs a small standard-library script in that interpreter (``find_spec``,
without importing the packages): where each engine (and torch) is, its version and
dist-info.  ``remembered_probe`` keeps the answer in patchkit's cache while nothing that
decides it changed (the guard of `patchkit run` starts no second interpreter).
``python_targets`` and ``targets_of`` turn the answer into ``ENGINE=ROOT`` target arguments
for ``--python`` on apply/revert/status/diff/verify, for `run`, and for `doctor`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from patchkit.base import shape
from patchkit.base.errors import TargetError
from patchkit.base.target import ENGINES


def modules() -> dict[str, list[str]]:
    """What the interpreter is asked to find: import name -> distribution names (every
    engine's, torch, and the prebuilt kernels of an engine that compiles at run time)."""
    out = {i.package: [i.dist] for i in ENGINES.values()}
    out["torch"] = ["torch"]
    jit = ENGINES.with_jit()
    if jit is not None and jit.jit.get("prebuilt"):
        out[prebuilt_module()] = [jit.jit["prebuilt"]]
    return out


def prebuilt_module() -> str:
    """The import name of the prebuilt kernels of the engine that compiles at run time ("" if none)."""
    jit = ENGINES.with_jit()
    return jit.jit.get("prebuilt", "").replace("-", "_") if jit is not None else ""


def jit_engine() -> str:
    """The engine that compiles kernels at run time (engines.toml's ``[jit]``; "" if none)."""
    jit = ENGINES.with_jit()
    return jit.name if jit is not None else ""


# Runs inside the probed interpreter: standard library only, imports none of the packages.
PROBE = r"""
import importlib.util, json, os, sys, sysconfig
MODULES = json.loads(sys.argv[1])
try:
    import importlib.metadata as md
except ImportError:
    md = None
def dist_at(root, names):
    if md is None:
        return None, None
    for d in md.distributions(path=[root]):
        n = (d.metadata["Name"] or "").lower().replace("_", "-")
        if n in names:
            return d.version, str(getattr(d, "_path", "") or "")
    return None, None
out = {"executable": sys.executable, "python_version": sys.version.split()[0], "prefix": sys.prefix,
       "base_prefix": sys.base_prefix, "in_venv": sys.prefix != sys.base_prefix,
       "purelib": sysconfig.get_path("purelib"), "sys_path": sys.path, "modules": {}}
for mod, names in MODULES.items():
    info = {"found": False}
    try:
        spec = importlib.util.find_spec(mod)
    except Exception as e:
        spec = None
        info["error"] = "%s: %s" % (type(e).__name__, e)
    if spec is not None:
        locs = list(spec.submodule_search_locations or [])
        pkg = locs[0] if locs else os.path.dirname(spec.origin or "")
        root = os.path.dirname(pkg)
        v, di = dist_at(root, names)
        info.update(found=True, origin=spec.origin, package_dir=pkg, root=root, version=v, dist_info=di)
    out["modules"][mod] = info
print(json.dumps(out))
"""

# -- probing an interpreter ------------------------------------------------------------------


def probe_python(python: str, timeout: float = 60) -> dict:
    """Where ``python`` imports each engine from (and torch), asked of that interpreter."""
    import json  # here, not at the top: the guard's start-up answers from the cache (remembered_probe)
    import shutil
    import subprocess

    exe = shutil.which(python) if os.sep not in python else python
    if not exe or not os.path.exists(exe):
        raise TargetError(
            f"--python {python}: no such interpreter",
            "give the path of the python that runs the server, e.g. --python ~/venvs/serve/bin/python",
        )
    exe = os.path.abspath(exe)  # the probe runs from /; absolute, not resolved (a venv's python is a link)
    try:
        proc = subprocess.run(
            [exe, "-c", PROBE, json.dumps(modules())], capture_output=True, text=True, timeout=timeout, cwd="/"
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TargetError(f"--python {python}: could not run it ({e})", "is it a Python 3 interpreter?") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise TargetError(f"--python {python}: the probe failed ({last})", "is it a Python 3.8+ interpreter?")
    try:
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError):
        facts = None
    if not shape.fits(facts, PROBE_ENTRY["facts"]):  # e.g. /bin/echo: it exits 0, and echoes JSON
        raise TargetError(f"--python {python}: unexpected probe output", "is it a Python 3 interpreter?")
    return facts


def python_targets(
    python: str, project, names: tuple[str, ...], explicit: tuple[str, ...] = (), facts: Optional[dict] = None
) -> tuple[str, ...]:
    """``ENGINE=ROOT`` target arguments for the copies ``python`` imports (``facts``: its
    probe, when the caller has it already).

    Every engine the named recipes edit must come from that interpreter (or an explicit
    --target): quietly falling back to the workspace tree for one of them would patch a
    copy the server never loads."""
    facts = facts or probe_python(python)
    given = {a.split("=", 1)[0].strip() for a in explicit}
    recipes = project.catalog().select(names)
    if not names:
        # Every recipe, but not those of engines this interpreter lacks (a serving venv with
        # SGLang has no vLLM): the command leaves them out and says so (commands.at_hand).
        have = given | {e for e in ENGINES if facts["modules"].get(ENGINES[e].package, {}).get("found")}
        if have:
            recipes = [r for r in recipes if set(r.engines) & have]
    needed = sorted({op.engine for r in recipes for op in r.ops})
    out = []
    for engine in needed:
        if engine in given:
            continue
        m = facts["modules"].get(ENGINES[engine].package, {})
        if not m.get("found"):
            users = sorted(r.id for r in recipes if any(op.engine == engine for op in r.ops))
            raise TargetError(
                f"{facts['executable']} does not import {engine}, which {', '.join(users)} "
                f"{'edits' if len(users) == 1 else 'edit'}",
                f"install {ENGINES[engine].dist} into that environment, pass --target {engine}=PATH, or name only "
                "recipes of the engines it has",
            )
        out.append(f"{engine}={m['root']}")
    return tuple(out)


def which(prog: str) -> str | None:
    """``prog`` as an absolute path: itself when it holds a slash, else found on PATH; None if no file."""
    if os.sep in prog:
        exe: Optional[str] = prog
    else:
        import shutil  # only for a bare name: shutil costs the guard's start-up its compression modules

        exe = shutil.which(prog)
    return os.path.abspath(exe) if exe and os.path.isfile(exe) else None


# -- what the interpreter imports, remembered -------------------------------------------------

# What a kept probe must hold to be used (patchkit/base/shape.py): the rest of a probe's facts
# is read with .get() where it is used.
PROBE_ENTRY = {
    "asked": str,
    "stamp": list,
    "facts": {"executable": str, "prefix": str, "sys_path": [str], "modules": {str: dict}},
}

# Environment that changes what an interpreter's sys.path holds.
PATH_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONUSERBASE")


def _stamp(facts: dict) -> tuple:
    """What decides where ``facts``' interpreter imports the engines from, as it stands now:
    the executable (and its link), the venv's pyvenv.cfg, these variables, and every
    directory of its sys.path by inode, size and mtime.  Installing, upgrading or removing
    a package, or adding a .pth file, adds or renames an entry of one of those directories
    and changes its mtime."""
    exe = facts["executable"]
    paths = [exe, os.path.join(facts["prefix"], "pyvenv.cfg"), *(p for p in facts["sys_path"] if p)]
    out = [tuple(os.environ.get(k, "") for k in PATH_ENV)]
    for p in paths:
        try:
            st, lst = os.stat(p), os.lstat(p)
        except OSError:
            out.append((p, None))
            continue
        out.append((p, st.st_ino, st.st_size, st.st_mtime_ns, lst.st_ino, lst.st_mtime_ns))
    return tuple(out)


def remembered_probe(python: str) -> dict:
    """probe_python's facts for ``python``, from patchkit's cache while nothing that
    decides them changed (``_stamp``): the guard's start-up runs no second interpreter.
    The entry is JSON (as the verdicts are: marshal trusts the lengths it reads) and is
    used only when it has the shape a probe gives."""
    import json

    from patchkit.base.paths import cache_dir

    exe = which(python) or python
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in exe)[-150:] + ".json"
    from patchkit.base import regular

    raw = regular.read_cached(cache_dir(), f"probes/{name}", 1 << 20)  # a link, FIFO or device: a miss
    try:
        entry = json.loads(raw) if raw is not None else None
        if (
            shape.fits(entry, PROBE_ENTRY)
            and entry["asked"] == exe
            and entry["stamp"] == json.loads(json.dumps(_stamp(entry["facts"])))
        ):
            return entry["facts"]
    except (ValueError, RecursionError):
        pass
    facts = probe_python(python)
    from patchkit.base import fsio

    fsio.store_cached(
        cache_dir(), f"probes/{name}", json.dumps({"asked": exe, "stamp": _stamp(facts), "facts": facts}).encode()
    )
    return facts


def targets_of(facts: dict, python: str, project, names: tuple[str, ...]) -> tuple[str, ...]:
    """``ENGINE=ROOT`` for the copies ``python`` imports: every engine, when it has them all
    (then no recipe can fall back on a workspace tree, and status may answer from its
    cache); else only those the recipes need, each one required (python_targets)."""
    found = _found(facts)
    if len(found) == len(ENGINES):
        return tuple(found.values())
    needed = _engines_named(project, names)
    if needed is not None and needed <= set(found):
        return tuple(found.values())
    return python_targets(python, project, names, facts=facts)


def targets_named(facts: dict, project, names: tuple[str, ...]) -> Optional[tuple[str, ...]]:
    """python_targets' answer (the copies of the engines the named recipes' ops edit, by
    engine name), read without the catalog (and libcst): the engines from the recipe files
    (``_engines_named``).  None where that cannot tell or an engine is not there: then
    python_targets, which loads the catalog, says why."""
    found = _found(facts)
    needed = _engines_named(project, names) if names else None
    if not needed or not needed <= set(found):
        return None
    return tuple(found[e] for e in sorted(needed))


def _found(facts: dict) -> dict[str, str]:
    """engine -> ``ENGINE=ROOT`` for each engine the probed interpreter imports, in the
    engine table's order."""
    mods = {e: facts["modules"].get(ENGINES[e].package, {}) for e in ENGINES}
    return {e: f"{e}={m['root']}" for e, m in mods.items() if m.get("found")}


def _engines_named(project, names: tuple[str, ...]) -> Optional[set[str]]:
    """The engines the recipes (or bundles) ``names`` edit, read from the recipe files' ops
    and ``bundles`` alone (tomllib; no libcst, no validation), nearest place
    first as the catalog reads them; None when that cannot tell (a name not found, a file
    that does not read): then the catalog, which validates, says why.

    The answer depends on the recipe files' bytes and the names alone: the guard's start-up
    reads the files and parses none while they are unchanged (patchkit/base/memo.py)."""
    from patchkit.base import memo, regular

    files: list[tuple[Path, bytes]] = []
    for d in project.recipe_dirs:
        try:
            found = sorted(d.path.glob("*.toml"))
        except OSError:
            return None
        for f in found:
            try:
                files.append((f, regular.read(f, 1 << 20)))
            except (OSError, regular.NotRegular, regular.TooBig):
                return None
    said = memo.framed([os.fsencode(n) for n in names])
    inputs = memo.framed([said, *(memo.framed([os.fsencode(f), b]) for f, b in files)])
    got = memo.remembered("engines", __file__, inputs, lambda: _listed(_parse_engines_named(files, names)))
    if got is None or len(got) != 1 or not set(got[0]) <= set(ENGINES):
        return None
    return set(got[0])


def _listed(engines: Optional[set[str]]) -> Optional[list]:
    return None if engines is None else [sorted(engines)]


def _op_engines(raw: dict) -> Optional[set[str]]:
    """The engines a recipe's ops edit (its variants' too), as the catalog's ``op.engine``
    gives them; None for a recipe whose ops do not read (the catalog says why)."""
    ops = raw.get("ops")
    if not isinstance(ops, list):
        return None
    for v in raw.get("variants", []):
        if not isinstance(v, dict) or not isinstance(v.get("ops", []), list):
            return None
        ops = ops + v.get("ops", [])
    out = set()
    for o in ops:
        if not isinstance(o, dict) or not isinstance(o.get("engine"), str):
            return None
        out.add(o["engine"])
    return out or None


def _parse_engines_named(files: list, names: tuple[str, ...]) -> Optional[set[str]]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    seen: dict[str, tuple[set[str], tuple[str, ...]]] = {}
    for _, data in files:
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except ValueError:
            return None
        rid, engines, bundles = raw.get("id"), _op_engines(raw), raw.get("bundles", [])
        if not isinstance(rid, str) or engines is None or not isinstance(bundles, list):
            return None
        seen.setdefault(rid, (engines, tuple(b for b in bundles if isinstance(b, str))))
    out: set[str] = set()
    for n in names:
        hits = [e for rid, (e, bundles) in seen.items() if rid == n or n in bundles]
        if not hits:
            return None
        for e in hits:
            out |= e
    return out
