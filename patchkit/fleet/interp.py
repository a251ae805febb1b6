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
from dataclasses import dataclass
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
# What the started command puts first on sys.path (its script's directory) in place of the
# probe's own '' (-c); none where the flags it was given (-I, -P, PYTHONSAFEPATH) put none.
PATH0 = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
if PATH0 is not None and sys.path[:1] == [""] and not getattr(sys.flags, "safe_path", 0) and not sys.flags.isolated:
    sys.path[0] = PATH0
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
       "purelib": sysconfig.get_path("purelib"), "sys_path": sys.path, "cwd": os.getcwd(), "modules": {}}
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


@dataclass(frozen=True)
class Launch:
    """How the command `run` starts runs its interpreter: the probe is run the same way, so
    that what it finds is what the command will import.  ``exe``: the interpreter (absolute,
    not resolved: a venv's python is a link); ``flags``: the interpreter options the command
    gives it (``-E``, ``-I``, ``-S``, ``-X ...``); ``path0``: what the command's form puts
    first on sys.path ("" for ``-c``/``-m``/stdin, the script's directory for a script, None
    where patchkit cannot tell: then the probe's own, the cwd); ``cwd``: the directory it
    starts in.  The environment is the one patchkit runs in, which exec hands on."""

    exe: str
    flags: tuple[str, ...] = ()
    path0: Optional[str] = None
    cwd: str = "/"

    def key(self) -> str:
        import json

        return json.dumps([self.exe, list(self.flags), self.path0, self.cwd])


def probe_python(python: str, timeout: float = 60, launch: Optional[Launch] = None) -> dict:
    """Where ``python`` imports each engine from (and torch), asked of that interpreter: from
    ``/`` with no flags, or, given the ``launch`` of a command, as that command will run it
    (its flags, its cwd, its first sys.path entry)."""
    import json  # here, not at the top: the guard's start-up answers from the cache (remembered_probe)
    import subprocess

    exe = launch.exe if launch is not None else _interpreter(python)
    flags, cwd = (list(launch.flags), launch.cwd) if launch is not None else ([], "/")
    extra = [json.dumps(launch.path0)] if launch is not None and launch.path0 is not None else []
    try:
        proc = subprocess.run(
            [exe, *flags, "-c", PROBE, json.dumps(modules()), *extra],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
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


def _interpreter(python: str) -> str:
    """``python`` as an absolute path (found on PATH when it holds no slash); a TargetError if
    there is no such file."""
    import shutil

    exe = shutil.which(python) if os.sep not in python else python
    if not exe or not os.path.exists(exe):
        raise TargetError(
            f"--python {python}: no such interpreter",
            "give the path of the python that runs the server, e.g. --python ~/venvs/serve/bin/python",
        )
    return os.path.abspath(exe)  # absolute, not resolved (a venv's python is a link)


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
    "stamp": str,
    "facts": {"executable": str, "prefix": str, "sys_path": [str], "modules": {str: dict}},
}

# Environment that changes what an interpreter's sys.path holds (a probe from /, for
# --python; a launch's probe keys on the whole environment, which exec hands on).
PATH_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONUSERBASE", "HOME")
# Files of a sys.path directory that site.py runs or reads at start-up, read for their bytes,
# not their mtime (rewritten in place, a file keeps its directory's mtime, and may keep its own).
_READ = ("sitecustomize.py", "usercustomize.py")
_PROBE_MAX = 1 << 20


def _stamp(facts: dict, exe: str, launch: Optional[Launch]) -> str:
    """What decides where ``exe`` imports the engines from, as it stands now, as one digest:
    the interpreter (its link and its file), the pyvenv.cfg next to it (by its bytes), the
    environment (the whole of it for a launch), the launch (flags, cwd, first sys.path
    entry), and every directory of the probed sys.path: each of its entries by name and kind
    (a directory by inode and mtime too: ``_entry``), and the bytes of its ``.pth`` files,
    of the modules their ``import`` lines name, and of sitecustomize/usercustomize.  An
    install, upgrade or removal renames, adds or drops an entry; a ``.pth`` or a finder
    rewritten in place changes its bytes.

    ``exe`` and ``launch`` are the caller's, never a kept entry's; the directories come from
    the facts, which are only taken from an entry this user's key authenticates
    (``remembered_probe``)."""
    h = _hash()
    cwd = launch.cwd if launch is not None else "/"

    def add(*parts) -> None:
        h.update(repr(parts).encode("utf-8", "surrogateescape") + b"\0")

    if launch is not None:
        add("launch", launch.key(), sorted(os.environ.items()))
    else:
        add("env", [os.environ.get(k, "") for k in PATH_ENV])
    exe_dir = os.path.dirname(exe)
    for p in (exe, os.path.join(facts["prefix"], "pyvenv.cfg"), os.path.join(exe_dir, "pyvenv.cfg"),
              os.path.join(os.path.dirname(exe_dir), "pyvenv.cfg")):  # fmt: skip
        add("file", p, _lstat(p), _stat(p), _bytes(p) if p.endswith(".cfg") else None)
    for entry in facts["sys_path"]:
        if not entry and launch is None:
            continue  # the probe's own cwd (/): a command run with --python imports from its own
        d = os.path.join(cwd, entry)
        try:
            listing = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            add("path", d, _stat(d))
            continue
        add("dir", d, _stat(d))
        names = {e.name for e in listing}
        read = set(_READ)
        for e in listing:
            if e.name.endswith(".pth"):
                data = _bytes(e.path)
                add("pth", e.name, data)
                read |= {f"{m}.py" for m in _pth_imports(data)}
            add("entry", e.name, _entry(e))
        for name in sorted(read & names):
            add("read", name, _bytes(os.path.join(d, name)))
    return h.hexdigest()


def _entry(e: os.DirEntry):
    """What of a sys.path directory's entry decides what is imported from it: its name (the
    listing), whether it is a directory, and a directory's inode and mtime (an
    ``__init__.py`` added or removed makes a namespace package a regular one); a file's
    bytes matter only for those ``_stamp`` reads."""
    try:
        if e.is_dir():
            st = e.stat()
            return ("dir", st.st_ino, st.st_mtime_ns)
        return ("file", e.is_symlink())
    except OSError:
        return None


def _stat(p: str):
    try:
        st = os.stat(p)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)


def _lstat(p: str):
    try:
        st = os.lstat(p)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _bytes(p: str) -> Optional[bytes]:
    from patchkit.base import regular

    try:
        return regular.read(Path(p), _PROBE_MAX)
    except (OSError, regular.NotRegular, regular.TooBig):
        return None


def _pth_imports(data: Optional[bytes]) -> set[str]:
    """The modules the ``import`` lines of a .pth file name (site.py runs those lines), e.g.
    an editable install's ``import __editable___x_finder``."""
    out = set()
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        if line.startswith(("import ", "import\t")):
            for part in line[7:].replace(";", ",").split(","):
                word = part.strip().split(" ")[0].split(".")[0]
                if word.isidentifier():
                    out.add(word)
    return out


def _hash():
    """A BLAKE2b of 32 bytes, without hashlib (which loads OpenSSL)."""
    try:
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover
        from hashlib import blake2b
    return blake2b(digest_size=32)


def remembered_probe(python: str, launch: Optional[Launch] = None) -> dict:
    """probe_python's facts for ``python`` (as ``launch`` runs it), from patchkit's store
    while nothing that decides them changed: the guard's start-up runs no second interpreter.

    An entry is used only when (1) the store holds it (patchkit/base/store.py: authenticated
    under this user's key, in a trusted cache: a crafted entry, its stamp computed from its
    own facts, is refused, for only the interpreter knows its sys.path, so only an entry
    patchkit wrote from a real probe may say which directories to fingerprint), (2) it has the
    shape a probe gives, (3) it was asked of this interpreter this way (``asked``), and (4)
    the fingerprint ``_stamp`` computes *now*, from the interpreter, the environment, the
    launch and those directories, equals the one kept.  Else the interpreter is asked again."""
    from patchkit.base import store

    exe = launch.exe if launch is not None else (which(python) or python)
    asked = launch.key() if launch is not None else exe
    k = store.key(asked)
    entry = store.get_json("probes", k, PROBE_ENTRY, limit=_PROBE_MAX)
    try:
        if (
            entry is not None
            and entry["asked"] == asked
            and entry["facts"]["executable"]
            and entry["stamp"] == _stamp(entry["facts"], exe, launch)
        ):
            return entry["facts"]
    except (ValueError, TypeError):
        pass
    facts = probe_python(python, launch=launch)
    store.put_json("probes", k, {"asked": asked, "stamp": _stamp(facts, exe, launch), "facts": facts})
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
