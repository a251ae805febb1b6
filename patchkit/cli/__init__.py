"""The command line: a thin click layer over patchkit.commands.  Arguments in, exit code out.

Errors end in the one top-level handler (patchkit/toplevel.py): a PatchkitError (bad
recipe, bad target, bad flag) or a usage error click finds becomes one line on stderr,
``patchkit: error: WHAT (hint: WHAT TO DO)``, and exit 2, never a traceback; anything else
is a bug, exit 3.  With ``--json`` the same error is also one JSON document on stdout:
``{"error": {"message": ..., "hint": ..., "exit": 2}}``.

The console script enters at ``main`` here.  The commands live in the modules of this
package by what they work on (tree.py: a tree's recipes; recipes.py: recipe files;
upstream.py: releases; fleet.py: venvs, wheels, forks and the guard).  Each registers its
commands on ``cli`` when imported, and ``cli`` imports a command's module only when the
command is asked for (base.LAZY), so a start-up pays for one module, not all.
"""

from patchkit.cli.base import cli, main

__all__ = ["cli", "main"]
