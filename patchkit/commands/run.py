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
import sys
from dataclasses import replace

from patchkit.base.errors import PatchkitError
from patchkit.commands import NOT_THERE, OK, Invocation, Options, say

# What the interpreter imports, remembered, and those copies as targets: patchkit/fleet/interp.py.
from patchkit.fleet.interp import remembered_probe as probe
from patchkit.fleet.interp import targets_of
from patchkit.fleet.interp import which as _which

PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")
# pip writes a console script whose interpreter path is too long for a shebang (or holds a
# space) as a shell script: `#!/bin/sh` then `'''exec' /path/to/python "$0" "$@"`.
SH_EXEC = re.compile(rb"""^'''exec' (?:"([^"]+)"|(\S+)) "\$0" "\$@"\s*$""")
HINT = "name the interpreter: `patchkit run --python /path/to/venv/bin/python -- CMD ...`"


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


def run_command(inv: Invocation, argv: tuple[str, ...], python: str | None = None, apply: bool = False) -> int:
    """`patchkit run`: the interpreter CMD runs (``python``, else CMD's own), its copies of
    the engines judged against their profile, then CMD exec'd (see ``guard``)."""
    from patchkit.fleet.profile import no_names

    python = python or interpreter_of(tuple(argv))
    inv.facts = facts = probe(python)
    inv.python = python
    prof = inv.profile()
    if not prof.exists:
        raise PatchkitError(
            f"run: no profile says what {python}'s engines should carry",
            f"record it once: `patchkit apply sm120 --python {python} --save`",
        )
    no_names(prof)
    names = prof.names + prof.exclude
    opts = Options(names=names, targets=targets_of(facts, python, inv.project, names), project=inv.project)
    return guard(opts, prof, tuple(argv), python, apply=apply)
