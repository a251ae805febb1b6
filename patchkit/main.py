"""The `patchkit` command's entry point.

`status` on an unchanged tree and the serving guard (`patchkit run -- CMD`) are start-ups
that users pay on every check and every server start, and importing click is most of
their time.  A plain command line of either is read here, with the same meaning click
gives it, and run without importing click; anything else (help, completion, an option
this reader does not know, a value it is unsure of, any other command) goes to click
(patchkit/cli/), which parses it and reports its errors as always.

"The same meaning" is held by a test that reads a table of command lines both ways
(tests/test_main.py); this reader only ever declines, it never guesses.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple, Optional

COLORS = ("auto", "always", "never")
GLOBAL = ("--pins", "--recipes", "--workspace", "--color")


class Call(NamedTuple):
    """A command line this reader understood: what click would have passed the command."""

    command: str  # "status" or "run"
    pins: Optional[str] = None
    recipes: tuple[str, ...] = ()
    workspace: Optional[str] = None
    color: Optional[str] = None  # the last --color given (click's default: auto)
    python: Optional[str] = None
    names: tuple[str, ...] = ()  # status: RECIPE|BUNDLE...; run: CMD ARGS...
    targets: tuple[str, ...] = ()
    as_json: bool = False
    quiet: bool = False
    apply: bool = False


def _option(args: list[str], i: int, names: tuple[str, ...]) -> Optional[tuple[str, str, int]]:
    """(option, value, next index) when ``args[i]`` is one of ``names`` with its value, as
    ``--opt VALUE`` or ``--opt=VALUE`` (or ``-t VALUE``); None otherwise, and None for a
    value that starts with '-' (click would take it; this reader declines)."""
    arg = args[i]
    opt, eq, value = arg.partition("=")
    if opt not in names or (eq and not opt.startswith("--")):
        return None
    if not eq:
        if i + 1 >= len(args):
            return None
        value, i = args[i + 1], i + 1
    if value.startswith("-"):
        return None
    return opt, value, i + 1


def _global(args: list[str], i: int, got: dict) -> Optional[int]:
    """--pins/--recipes/--workspace/--color at ``args[i]``: recorded; the next index, or None."""
    hit = _option(args, i, GLOBAL)
    if hit is None:
        return None
    opt, value, nxt = hit
    if opt == "--recipes":
        got["recipes"].append(value)
    elif opt == "--color":
        if value not in COLORS:
            return None
        got["color"] = value
    else:
        got[opt[2:]] = value
    return nxt


def parse(args: list[str]) -> Optional[Call]:
    """The Call for a plain `status` or `run` command line; None for anything else."""
    if os.environ.get("_PATCHKIT_COMPLETE"):  # shell completion is click's
        return None
    got: dict = {"pins": None, "recipes": [], "workspace": None, "color": None}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        nxt = _global(args, i, got)
        if nxt is None:
            return None
        i = nxt
    if i >= len(args) or args[i] not in ("status", "run"):
        return None
    command, rest = args[i], args[i + 1 :]
    kw = _status(rest, got) if command == "status" else _run(rest, got)
    if kw is None:
        return None
    return Call(command, got["pins"], tuple(got["recipes"]), got["workspace"], got["color"], **kw)


def _status(args: list[str], got: dict) -> Optional[dict]:
    names: list[str] = []
    targets: list[str] = []
    kw: dict = {"as_json": False, "quiet": False, "python": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            names += args[i + 1 :]
            break
        if a in ("", "-"):
            return None
        if not a.startswith("-"):
            names.append(a)
            i += 1
        elif a == "--json":
            kw["as_json"], i = True, i + 1
        elif a in ("-q", "--quiet"):
            kw["quiet"], i = True, i + 1
        elif (hit := _option(args, i, ("-t", "--target", "--python"))) is not None:
            opt, value, i = hit
            if opt == "--python":
                kw["python"] = value
            else:
                targets.append(value)
        else:
            nxt = _global(args, i, got)
            if nxt is None:
                return None
            i = nxt
    return {**kw, "names": tuple(names), "targets": tuple(targets)}


def _run(args: list[str], got: dict) -> Optional[dict]:
    kw: dict = {"apply": False, "python": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-"):
            break
        if a == "--apply":
            kw["apply"], i = True, i + 1
        elif (hit := _option(args, i, ("--python",))) is not None:
            _, kw["python"], i = hit
        else:
            nxt = _global(args, i, got)
            if nxt is None:
                return None
            i = nxt
    if i >= len(args) or args[i] == "":
        return None  # no CMD: click says so
    return {**kw, "names": tuple(args[i:])}


def _execute(call: Call) -> None:
    from patchkit.base import term
    from patchkit.commands import Invocation
    from patchkit.core.project import Project

    term.set_color(call.color or "auto")

    def locate() -> Project:
        return Project.locate(call.pins, call.recipes, call.workspace)

    if call.command == "status":
        from patchkit.commands.status import status_command

        sys.exit(status_command(Invocation(locate, python=call.python), call.names, call.targets, call.as_json,
                                call.quiet))  # fmt: skip
    from patchkit.commands.run import run_command

    sys.exit(run_command(Invocation(locate), call.names, call.python, apply=call.apply))


def main(argv: Optional[list[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    call = parse(args)
    if call is None:
        from patchkit.cli import main as through_click

        through_click(args)
        return
    from patchkit import toplevel

    toplevel.run(lambda: _execute(call), toplevel.wants_json(args))
