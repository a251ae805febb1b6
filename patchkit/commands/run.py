"""`run`: serve under a guard.  ``patchkit run [--apply] -- CMD ARGS...`` judges the profile
against the copies of the engines that CMD's interpreter imports; if they differ it refuses
(exit 1, saying what differs) or, with --apply, patches them first; then it execs CMD.

pip has no post-install hook, so a host restarted after ``pip install -U sglang`` would serve
unpatched code until someone ran ``apply``.  Put the guard in the command that starts the
server (a Dockerfile's CMD, a systemd ExecStart=) and the restart itself checks.  ``exec``
replaces patchkit's process with CMD's: the guard costs its start-up once, nothing after,
and CMD keeps the pid, the signals and the exit code a supervisor expects.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from dataclasses import replace

from patchkit.commands import NOT_THERE, OK, Options, say
from patchkit.errors import PatchkitError

PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")
# pip writes a console script whose interpreter path is too long for a shebang (or holds a
# space) as a shell script: `#!/bin/sh` then `'''exec' /path/to/python "$0" "$@"`.
SH_EXEC = re.compile(rb"""^'''exec' (?:"([^"]+)"|(\S+)) "\$0" "\$@"\s*$""")
HINT = "name the interpreter: `patchkit run --python /path/to/venv/bin/python -- CMD ...`"


def _which(prog: str) -> str | None:
    exe = shutil.which(prog) if os.sep not in prog else prog
    return os.path.abspath(exe) if exe and os.path.isfile(exe) else None


def interpreter_of(argv: tuple[str, ...]) -> str:
    """The Python ``argv`` will run: argv[0] itself when it is a python (``python -m
    sglang.launch_server``), else the interpreter of its shebang (a console script such as
    ``sglang``, which pip writes with its venv's python in the first line)."""
    prog = argv[0]
    exe = _which(prog)
    if exe is None:
        raise PatchkitError(f"run: {prog}: no such command (not a file, not on PATH)", "give CMD as you would run it")
    if PYTHON_NAME.fullmatch(os.path.basename(exe)):
        return exe
    try:
        with open(exe, "rb") as f:
            head = f.read(1024).split(b"\n")
    except OSError as e:
        raise PatchkitError(f"run: {exe}: cannot read it ({e.strerror})", HINT) from None
    first = head[0]
    if first.startswith(b"#!"):
        words = first[2:].decode("utf-8", "replace").split()
        if words and os.path.basename(words[0]) == "env":  # #!/usr/bin/env python3
            words = [w for w in words[1:] if not w.startswith("-")]
            found = _which(words[0]) if words else None
            if found and PYTHON_NAME.fullmatch(os.path.basename(found)):
                return found
        elif words and PYTHON_NAME.fullmatch(os.path.basename(words[0])):
            return words[0]
        elif words and os.path.basename(words[0]) == "sh" and len(head) > 1:
            m = SH_EXEC.match(head[1])
            if m:
                return os.fsdecode(m.group(1) or m.group(2))
    raise PatchkitError(f"run: cannot tell which Python {prog} ({exe}) runs: it is not python, nor a script whose "
                        "first line names one", HINT)  # fmt: skip


# -- what the interpreter imports, remembered -------------------------------------------------

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


def probe(python: str) -> dict:
    """doctor.probe_python's facts for ``python``, from patchkit's cache while nothing that
    decides them changed (``_stamp``): the guard's start-up runs no second interpreter."""
    import marshal

    from patchkit.paths import cache_dir

    exe = _which(python) or python
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in exe)[-150:] + ".marshal"
    from patchkit import fsio, regular

    raw = regular.read_cached(cache_dir(), f"probes/{name}", 1 << 20)  # a link, FIFO or device: a miss
    try:
        entry = marshal.loads(raw) if raw is not None else None
        if isinstance(entry, dict) and entry.get("asked") == exe and entry.get("stamp") == _stamp(entry["facts"]):
            return entry["facts"]
    except (ValueError, EOFError, TypeError, KeyError, AttributeError):
        pass
    from patchkit.doctor import probe_python

    facts = probe_python(python)
    try:  # a cache that cannot be written costs a probe next time, nothing more
        fsio.store_cached(
            cache_dir(), f"probes/{name}", marshal.dumps({"asked": exe, "stamp": _stamp(facts), "facts": facts})
        )
    except ValueError:
        pass
    return facts


def targets_of(facts: dict, python: str, project, names: tuple[str, ...]) -> tuple[str, ...]:
    """``ENGINE=ROOT`` for the copies ``python`` imports: every engine, when it has them all
    (then no recipe can fall back on a workspace tree, and status may answer from its
    cache); else only those the recipes need, each one required (doctor.python_targets)."""
    from patchkit.target import ENGINES

    mods = {e: facts["modules"].get(ENGINES[e].package, {}) for e in ENGINES}
    found = [f"{e}={m['root']}" for e, m in mods.items() if m.get("found")]
    if len(found) == len(ENGINES):
        return tuple(found)
    from patchkit.doctor import python_targets

    return python_targets(python, project, names, facts=facts)


def guard(opts: Options, profile, argv: tuple[str, ...], python: str, apply: bool = False) -> int:
    """Judge (and with ``apply``, patch) the trees ``opts`` names against ``profile``, then
    exec ``argv``.  Returns only when it refuses (exit 1) or the command cannot be started."""
    from patchkit.commands.status import status

    # The report goes to stderr: stdout is the server's.
    with contextlib.redirect_stdout(sys.stderr):
        code = status(opts, verbose=False, profile=profile, named=profile.recipes)
        if code != OK and apply:
            from patchkit.commands.apply import apply as do_apply

            say(f"patchkit run: {python}'s engines are not as the profile {profile.path} wants: applying it")
            code = do_apply(replace(opts, names=profile.names), profile=profile, named=profile.recipes)
    if code != OK:
        how = "" if apply else f"; `patchkit run --apply` patches first, or `patchkit apply --python {python}`"
        say(f"patchkit run: refusing to start {argv[0]}: {python}'s engines are not as the profile "
            f"{profile.path} wants (see above){how}", err=True)  # fmt: skip
        return NOT_THERE
    say(f"patchkit run: {python}'s engines are as the profile {profile.path} wants; starting {argv[0]}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], list(argv))
    except OSError as e:
        raise PatchkitError(f"run: could not start {argv[0]} ({e.strerror})", "give CMD as you would run it") from None
    return OK  # not reached
