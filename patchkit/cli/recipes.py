"""Commands on recipes: list, show, new, check, capture, port."""

from __future__ import annotations

import sys

import click

from patchkit.cli.base import cli, invocation, names_argument, release_option


@cli.command("list")
@names_argument()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_cmd(ctx, names, as_json):
    """List recipes and bundles."""
    from patchkit.commands.catalog import list_

    sys.exit(list_(invocation(ctx).options(names, (), as_json)))


@cli.command()
@names_argument("RECIPE|BUNDLE...", required=True)
@click.pass_context
def show(ctx, names):
    """Show recipes in full: rationale, version ranges, ops and upstream markers."""
    from patchkit.commands.catalog import show as run

    sys.exit(run(invocation(ctx).options(names, (), False)))


@cli.command("new")
@click.argument("rid", metavar="ID")
@click.option(
    "--engine",
    metavar="ENGINE",
    help="The engine the template's ops edit (one that patchkit/base/engines.toml or an engines/*.toml defines; "
    "default: the first).",
)
@click.option(
    "--out", "-o", metavar="FILE", help="Where to write it (default: ID.toml in the project's recipes/; - for stdout)."
)
@click.pass_context
def new_cmd(ctx, rid, engine, out):
    """Write a commented template recipe: every key explained, one op of each kind to uncomment.

    The template passes `patchkit check` as written; its one live op is a placeholder
    that applies nowhere until you change it.
    """
    from patchkit.commands.author import new as run

    sys.exit(run(invocation(ctx).project, rid, engine, out))


@cli.command()
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: every error, with file and line.")
@click.pass_context
def check(ctx, paths, as_json):
    """Validate recipes and run their examples; report every error in every file.

    \b
    PATH is a recipe file or a directory of them (default: every recipe in play).  Each
    error is one line, FILE:LINE: RECIPE: WHERE: WHAT (hint: ...); a failing example
    ([[ops.examples]] before/after, run both ways) is followed by a unified diff.
    Exit 0 when there is none, 2 otherwise.
    """
    from patchkit.commands.author import check as run

    sys.exit(run(invocation(ctx).project, tuple(paths), as_json=as_json))


@cli.command()
@click.argument("rid", metavar="ID")
@release_option(
    "--target",
    "-t",
    multiple=True,
    required=True,
    metavar="ENGINE=PATH",
    help="The hand-edited tree (a git checkout, an unpacked wheel, site-packages). Repeat per engine.",
)
@click.option(
    "--out", "-o", metavar="FILE", help="Where to write the recipe (default: ID.toml in the project's recipes/)."
)
@click.option(
    "--partial", is_flag=True, help="Write the changes it can express; list the rest with file:line (exit 1)."
)
@click.pass_context
def capture(ctx, rid, target, out, partial):
    """Turn a hand edit of a tree into a recipe.

    The tree is compared with the pristine release of its version (the release's wheel,
    from the cache or the index; a checkout's tag).  Each changed hunk becomes the op that
    makes it (a list element added, an or-operand, a default changed, statements
    inserted, deleted or replaced, a branch, a call argument, a dict entry, an import; for
    C++ and other text, and comments, a text-hunk of whole lines with context).  The recipe
    is applied to the pristine release in memory first and written only if it gives exactly
    the edited bytes; otherwise capture names each hunk it could not express (the nearest
    op kind and why it did not fit) and writes nothing (exit 1), or with --partial writes
    the rest.
    """
    from patchkit.commands.author import capture as run

    sys.exit(run(invocation(ctx).project, rid, tuple(target), out, partial))


@cli.command()
@click.argument("rid", metavar="ID")
@release_option(
    "--to",
    "to",
    required=True,
    metavar="ENGINE==VERSION",
    help="The release to port to (ENGINE=PATH: a pristine tree of it).",
)
@click.option("--write", is_flag=True, help="Write the verified draft into the recipe file (comments and layout kept).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: the draft, the checks, the leftovers.")
@click.pass_context
def port(ctx, rid, to, write, as_json):
    """Draft the `when` variant a recipe needs on a new release, from drift's findings.

    \b
    Each op of the recipe's variant is judged on the pristine release: pending ops are
    carried, moved ones retargeted (companion ops follow their anchor), upstream ones end
    there; for a missing anchor the three nearest statements of the release (token
    similarity, file:line) are listed for a person.  The draft is a [[variants]] block with
    when = { ENGINE = ">=VERSION" }, the ops it replaces ending below VERSION; it is parsed,
    judged and planned on the release (apply's checks, in memory) before it is printed, or
    written with --write.  Exit 0 when complete and verified, 1 when something is left.

    \b
      patchkit port allreduce-fusion --to sglang==0.5.24
      patchkit port allreduce-fusion --to sglang==0.5.24 --write
    """
    from patchkit.commands.port import port as run

    sys.exit(run(invocation(ctx).project, rid, to, write, as_json))
