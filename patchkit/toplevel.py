"""The one top-level error handler: every run of `patchkit` ends here (patchkit/cli/
reads the command line with click and calls ``run``).

A user's error (PatchkitError: a bad recipe, target or option) is one line on stderr and
exit 2 (or the error's own code); with --json also one JSON document on stdout.  A bug in
patchkit is exit 3 with one line, never a traceback unless PATCHKIT_DEBUG asks for it.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from patchkit.base import term
from patchkit.base.errors import OpBug, PatchkitError


def wants_json(args: list[str]) -> bool:
    """Whether the command line asks for --json (before any ``--``), even one click refused."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def one_line(text: str) -> str:
    """A message as one line: a newline or other control character in a value is shown escaped."""
    return "".join(c if c == "\t" or ord(c) >= 32 and ord(c) != 127 else repr(c)[1:-1] for c in text)


def fail(code: int, line: str, message: str, hint: str, as_json: bool) -> None:
    """Report an error that ends the command: one line on stderr and, with --json, one JSON
    document on stdout (``{"error": {"message", "hint", "exit"}}``), then exit ``code``."""
    if as_json:
        import json

        term.echo(json.dumps({"error": {"message": message, "hint": hint, "exit": code}}, indent=2))
    term.echo(one_line(line), err=True)
    sys.exit(code)


def run(call: Callable[[], object], as_json: bool) -> None:
    """``call()``, then exit 0; its errors as above.  A command exits with its own code
    (sys.exit) from inside ``call``."""
    try:
        call()
    except PatchkitError as e:
        fail(e.exit_code, f"patchkit: error: {e}", e.message, e.hint, as_json)
    except KeyboardInterrupt:
        term.echo("patchkit: interrupted; files are written all-or-nothing, so none was left half-written", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
    except Exception as e:  # a bug in patchkit, not in the user's input
        if os.environ.get("PATCHKIT_DEBUG"):
            raise
        what = str(e) if isinstance(e, OpBug) else f"{type(e).__name__}: {e}"
        hint = "this is a bug; rerun with PATCHKIT_DEBUG=1 for the traceback and report it"
        fail(3, f"patchkit: internal error: {what} ({hint})", what, hint, as_json)
    sys.exit(0)
