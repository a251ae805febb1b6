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
import io
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from patchkit.base.errors import PatchkitError
from patchkit.commands import NOT_THERE, OK, Invocation, Options, say

# What the interpreter imports, remembered, and those copies as targets: patchkit/fleet/interp.py.
from patchkit.fleet.interp import Launch, targets_of
from patchkit.fleet.interp import remembered_probe as probe
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
    return python_line(argv)[1][0]


def python_line(argv: tuple[str, ...]) -> tuple[str, list[str]]:
    """(the file exec starts, the command line of the Python it runs): ``argv`` itself for a
    python; for a script, its interpreter, the one argument a shebang may give it, the
    script, then ``argv[1:]``, as the kernel (or pip's sh trampoline) hands them on."""
    prog = argv[0]
    exe = _which(prog)
    if exe is None:
        raise PatchkitError(f"run: {prog}: no such command (not a file, not on PATH)", "give CMD as you would run it")
    if PYTHON_NAME.fullmatch(os.path.basename(exe)):
        return exe, [exe, *argv[1:]]
    try:
        with open(exe, "rb") as f:
            head = f.read(1024).split(b"\n")
    except OSError as e:
        raise PatchkitError(f"run: {exe}: cannot read it ({e.strerror})", HINT) from None
    first = head[0]
    if first.startswith(b"#!"):
        line = first[2:].decode("utf-8", "replace").strip()
        interp, _, optarg = line.partition(" ") if " " in line else line.partition("\t")
        words = line.split()
        if words and os.path.basename(words[0]) == "env":  # #!/usr/bin/env python3 (or env -S python3 -E)
            words = [w for w in words[1:] if not w.startswith("-") or w == "-"]
            found = _which(words[0]) if words else None
            if found and PYTHON_NAME.fullmatch(os.path.basename(found)):
                return exe, [found, *words[1:], exe, *argv[1:]]
        elif words and PYTHON_NAME.fullmatch(os.path.basename(interp)):
            return exe, [interp, *([optarg.strip()] if optarg.strip() else []), exe, *argv[1:]]
        elif words and os.path.basename(words[0]) == "sh" and len(head) > 1:
            m = SH_EXEC.match(head[1])
            if m:
                return exe, [os.fsdecode(m.group(1) or m.group(2)), exe, *argv[1:]]
    raise PatchkitError(f"run: cannot tell which Python {prog} ({exe}) runs: it is not python, nor a script whose "
                        "first line names one", HINT)  # fmt: skip


# Interpreter options that take a value (the next argument, or the rest of this one).
_VALUED = "WX"
# Options the probe leaves out: they print and exit (-h, -V), enter the prompt (-i), or skip
# a script's first line (-x); none changes what is imported.
_LEFT_OUT = {"-h", "-?", "-V", "-i", "-x", "--help", "--version", "--help-env", "--help-xoptions", "--help-all"}


def launch_of(line: list[str], cwd: str) -> Launch:
    """How the Python command line ``line`` (python_line's) starts its interpreter: the
    options before ``-c``/``-m``/the script (given to the probe as they are), and what that
    form puts first on sys.path: "" for ``-c``, ``-m`` and stdin (the cwd), the script's own
    directory (links resolved, as Python does) for a script."""
    exe, args = line[0], line[1:]
    flags: list[str] = []
    path0 = ""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or a == "-" or not a.startswith("-"):
            script = args[i + 1] if a == "--" and i + 1 < len(args) else (a if a != "--" else "-")
            if script != "-":
                full = os.path.realpath(os.path.join(cwd, script))
                path0 = full if os.path.isdir(full) else os.path.dirname(full)
            break
        if a.startswith("--"):
            name, eq, _ = a.partition("=")
            take = name == "--check-hash-based-pycs" and not eq
            if name not in _LEFT_OUT:
                flags += args[i : i + 1 + take]
            i += 1 + take
            continue
        j, done = 1, False
        while j < len(a):
            c = a[j]
            if c in "cm":  # the rest is the command or module: the probe's own -c stands in
                done = True
                break
            if c in _VALUED:
                value = a[j + 1 :] if j + 1 < len(a) else (args[i + 1] if i + 1 < len(args) else "")
                i += 0 if j + 1 < len(a) else 1
                flags += [f"-{c}", value]
                break
            if f"-{c}" not in _LEFT_OUT:
                flags.append(f"-{c}")
            j += 1
        if done:
            break
        i += 1
    return Launch(exe=os.path.abspath(exe), flags=tuple(flags), path0=path0, cwd=cwd)


def _same(a: str, b: str) -> bool:
    """Whether the interpreters at ``a`` and ``b`` are one: the same path, or the same file
    in the same directory (a venv's python and python3.11).  A link to it elsewhere is
    another interpreter: where the link lies decides the venv."""
    a, b = os.path.abspath(a), os.path.abspath(b)
    if a == b:
        return True
    try:
        return os.path.dirname(a) == os.path.dirname(b) and os.path.samefile(a, b)
    except OSError:
        return False


def guard(opts: Options, profile, argv: tuple[str, ...], python: str, apply: bool = False, exe: str = "") -> int:
    """Judge (and with ``apply``, patch) the trees ``opts`` names against ``profile``, then
    exec ``argv`` (the file ``exe``).  Returns only when it refuses (exit 1) or the command
    cannot be started.

    The trees are held from before the judgement until the server exits: a shared lock of
    each root's guard file (patchkit/base/guardlock.py), its fd inherited across exec, so
    that no apply or revert changes what was judged (they refuse; ``revert --force`` aside)."""
    from patchkit.base import fsio, guardlock
    from patchkit.commands.status import status

    roots = sorted({Path(os.path.realpath(t.partition("=")[2])) for t in opts.targets})

    def held() -> list[int]:
        fds, missed = guardlock.hold(roots, fsio.lock_timeout())
        with fsio.locked(roots, create=False):  # a write begun before the guard file was there is done
            pass
        for root in missed:
            say(f"patchkit run: {root}: cannot hold the guard's lock there (not writable, no "
                f"{guardlock.STATE}/{guardlock.NAME}): apply and revert will not know of this server",
                err=True)  # fmt: skip
        return fds

    fds = held()
    # The report goes to stderr: stdout is the server's.
    with contextlib.redirect_stdout(sys.stderr):
        code = status(opts, verbose=False, profile=profile, named=profile.recipes, guards=False)
        if code != OK and apply:
            from patchkit.commands.apply import apply as do_apply

            say(f"patchkit run: {python}'s engines are not as the profile {profile.path} wants: applying it")
            guardlock.release(fds)  # apply takes the guard's lock itself
            code = do_apply(replace(opts, names=profile.names), profile=profile, named=profile.recipes)
            fds = held()
            if code == OK:  # judged again, under the lock: what starts is what was judged
                with contextlib.redirect_stdout(io.StringIO()):
                    code = status(opts, verbose=False, profile=profile, named=profile.recipes, guards=False)
    if code != OK:
        guardlock.release(fds)
        how = "" if apply else f"; `patchkit run --apply` patches first, or `patchkit apply --python {python}`"
        say(f"patchkit run: refusing to start {argv[0]}: {python}'s engines are not as the profile "
            f"{profile.path} wants (see above){how}", err=True)  # fmt: skip
        return NOT_THERE
    say(f"patchkit run: {python}'s engines are as the profile {profile.path} wants; starting {argv[0]}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    guardlock.inherit(fds)  # the server holds the trees until it exits
    try:
        # The file judged, not a second PATH lookup: what it starts is what was judged.
        os.execv(exe, list(argv)) if exe else os.execvp(argv[0], list(argv))
    except OSError as e:
        guardlock.release(fds)
        raise PatchkitError(f"run: could not start {argv[0]} ({e.strerror})", "give CMD as you would run it") from None
    return OK  # not reached


def run_command(inv: Invocation, argv: tuple[str, ...], python: str | None = None, apply: bool = False) -> int:
    """`patchkit run`: the interpreter CMD runs (CMD's own; ``python`` names it when CMD does
    not tell, and must be it when CMD does), probed as CMD will run it (its options, its
    cwd, this environment), its copies of the engines judged against their profile, then
    the file judged exec'd (see ``guard``)."""
    from patchkit.fleet.interp import _interpreter
    from patchkit.fleet.profile import no_names

    cwd = os.getcwd()
    try:
        exe, line = python_line(tuple(argv))
    except PatchkitError:
        if not python:
            raise
        # CMD does not say (a shell script that starts python): --python names it, probed in
        # CMD's cwd and environment with no options of its own.
        exe, line = (_which(argv[0]) or argv[0]), [_interpreter(python)]
    if python and not _same(_interpreter(python), line[0]):
        raise PatchkitError(
            f"run: --python {python} is not the interpreter {argv[0]} runs ({line[0]}); patchkit judges only "
            "what it starts",
            "leave --python out (patchkit finds CMD's own), or give that one",
        )
    python = python or line[0]
    launch = launch_of(line, cwd)
    inv.facts = facts = probe(python, launch)
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
    return guard(opts, prof, tuple(argv), python, apply=apply, exe=exe)
