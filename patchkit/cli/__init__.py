"""The command line: a thin click layer over patchkit.commands.  Arguments in, exit code out.

Errors end in the one top-level handler (patchkit/toplevel.py): a PatchkitError (bad
recipe, bad target, bad flag) or a usage error click finds becomes one line on stderr,
``patchkit: error: WHAT (hint: WHAT TO DO)``, and exit 2, never a traceback; anything else
is a bug, exit 3.  With ``--json`` the same error is also one JSON document on stdout:
``{"error": {"message": ..., "hint": ..., "exit": 2}}``.

The console script enters at patchkit/main.py, which answers a plain `status` or `run`
without importing click, and hands every other command line to ``main`` here.
"""

from patchkit.cli import fleet, recipes, tree, upstream  # noqa: F401  (each registers its commands)
from patchkit.cli.base import cli, main

__all__ = ["cli", "main"]
