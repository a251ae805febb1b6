"""`cache`: patchkit's cache, shown, pruned, and its path."""

from __future__ import annotations

import sys

import click

from patchkit.cli.base import cli, invocation, release_option

JSON_HELP = "Print one JSON document."


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def cache(ctx, as_json):
    """Show patchkit's cache: its path, and its size by kind and by release.

    \b
    Releases (their wheels, sdists, listings read by ranges, unpacked trees) are
    named ENGINE==V; the rest (verdicts, plans, identities, outlines, blobs) is
    derived and computed again when needed, so any of it may go.

    \b
      patchkit cache                              sizes by kind and by release
      patchkit cache path                         where it is ($PATCHKIT_CACHE, else ~/.cache/patchkit)
      patchkit cache prune --older-than 30d       remove what was not written for 30 days
      patchkit cache prune --max-size 2G          remove oldest first down to 2 GiB
      patchkit cache prune --max-size 0 --dry-run what would go (pinned releases stay)
    """
    if ctx.invoked_subcommand is None:
        from patchkit.commands import cache as C

        sys.exit(C.show(as_json))


@cache.command("path")
def cache_path():
    """Print the cache's directory."""
    from patchkit.commands import cache as C

    sys.exit(C.path())


@cache.command("prune")
@click.option("--older-than", metavar="AGE", help="Remove entries last written longer ago than AGE (12h, 30d, 2w).")
@click.option(
    "--max-size", metavar="SIZE", help="Then remove the oldest entries until the cache holds SIZE (500M, 2G)."
)
@release_option(
    "--keep",
    multiple=True,
    metavar="ENGINE==V",
    help="Keep this release too (repeatable); the releases upstream_pins.toml pins are always kept.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def cache_prune(ctx, older_than, max_size, keep, dry_run, as_json):
    """Remove cache entries by age or size, never a pinned release.

    Nothing outside the cache is touched, and no link in it is followed: a link
    planted there is removed, not what it points to.  What is removed is fetched
    or computed again when a command needs it.
    """
    from patchkit.commands import cache as C

    inv = invocation(ctx)
    sys.exit(C.prune(lambda: inv.project, older_than, max_size, tuple(keep), dry_run, as_json))
