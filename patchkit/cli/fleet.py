"""Commands for the fleet: wheel, publish, fork, doctor, run (the serving guard)."""

from __future__ import annotations

import sys

import click

from patchkit.cli.base import cli, invocation, names_argument, release_option


@cli.command()
@names_argument("RECIPE|BUNDLE...", required=True)
@release_option(
    "--from",
    "sources",
    multiple=True,
    required=True,
    metavar="ENGINE==VERSION",
    help="Release to patch, e.g. sglang==0.5.9 (ENGINE alone: the pinned version). Repeat per engine; a recipe "
    "that edits two engines needs both.",
)
@click.option(
    "--label",
    metavar="LABEL",
    help="PEP 440 local version label (default: the names given), followed by a digest of the recipes' content "
    "(sm120 -> 0.5.9+sm120.1a2b3c4d): a changed recipe is a new version.",
)
@click.option(
    "--out", "-o", required=True, metavar="DIR", help="Directory to write the wheels into (created if absent)."
)
@click.option("--ignore-range", is_flag=True, help="Patch even where the release is outside a recipe's version range.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: the wheels, their sha256 and recipes.")
@click.pass_context
def wheel(ctx, names, sources, label, out, ignore_range, as_json):
    """Build patched wheels from the released ones, to pip install across a fleet.

    Fetches each release wheel (cached; hash-checked against the pin), applies the
    recipes with the same engine as `apply` (every edit verified, or no wheel), and
    writes NAME-VERSION+LABEL-....whl: dist-info, METADATA and RECORD updated, and
    .dist-info/patchkit.json naming the recipes and their sha256.  The same inputs
    give byte-identical wheels (fixed timestamps, or SOURCE_DATE_EPOCH).
    Once installed, `status` reads its edits as applied (from patchkit.json) and
    `doctor` names the wheel and its recipes.

    \b
      patchkit wheel sm120 --from sglang==0.5.9 --from flashinfer==0.6.3 -o dist/
      pip install --no-deps dist/sglang-0.5.9+sm120.*-py3-none-any.whl
    """
    from patchkit.commands.wheel import wheel as run

    sys.exit(
        run(
            invocation(ctx).project,
            tuple(names),
            tuple(sources),
            label,
            out,
            as_json=as_json,
            ignore_range=ignore_range,
        )
    )


@cli.command()
@names_argument("RECIPE|BUNDLE...", required=True)
@release_option(
    "--from",
    "sources",
    multiple=True,
    required=True,
    metavar="ENGINE==VERSION",
    help="Release to patch, as for `wheel`. Repeat per engine.",
)
@click.option(
    "--repository-url",
    "url",
    required=True,
    metavar="URL",
    help="The index to upload to (twine's option), e.g. http://index:8080/. Credentials: TWINE_USERNAME and "
    "TWINE_PASSWORD or ~/.pypirc, never in the URL.",
)
@click.option("--label", metavar="LABEL", help="PEP 440 local version label, as for `wheel`.")
@click.option(
    "--out",
    "-o",
    metavar="DIR",
    help="Where the wheels are built (default: publish/ in patchkit's cache).",
)
@click.option("--dry-run", "-n", is_flag=True, help="Build the wheels and print the twine command; upload nothing.")
@click.option("--ignore-range", is_flag=True, help="Patch even where the release is outside a recipe's version range.")
@click.pass_context
def publish(ctx, names, sources, url, label, out, dry_run, ignore_range):
    """Build patched wheels (as `wheel` does) and upload them to a package index with twine.

    \b
    Hosts then install them as they install anything: pip or uv, --index-url, the exact
    version (sglang==0.5.9+sm120.1a2b3c4d), --no-deps.  Authentication is twine's and
    pip's own (environment, ~/.pypirc, ~/.netrc, keyring); a URL with a password in it
    is refused, and the password twine was given never appears in patchkit's output.

    \b
      patchkit publish sm120 --from sglang==0.5.9 --from flashinfer==0.6.3 --repository-url http://index:8080/
    """
    from patchkit.commands.publish import publish as run

    sys.exit(run(invocation(ctx).project, tuple(names), tuple(sources), url, label, out, dry_run, ignore_range))


FORK_TARGET_HELP = (
    "The fork's git repository: a clone of the upstream repo of ENGINE (sglang or flashinfer). "
    "Its checkout, index and other branches are never touched; only a clean checkout of the "
    "fork branch itself follows it."
)


@cli.group()
def fork():
    """Keep recipes as a git branch, patchkit/NAME, on an upstream tag.

    \b
    One commit per recipe that edits the engine, in recipe order, each exactly
    what `apply` of that recipe alone writes.  Commits have a fixed author and
    the base's date, so the same base and recipes give the same SHAs.  They are
    built in a temporary worktree: your checkout, index and other branches are
    never touched, and the branch moves only when the whole build succeeds.

    \b
      patchkit fork sync sm120 -t sglang=./sglang          build patchkit/sm120 on the pinned tag
      patchkit fork status -t sglang=./sglang              carried recipes, stale commits
      patchkit fork export sm120 -t sglang=./sglang --out patches/
      patchkit fork upgrade sm120 -t sglang=./sglang --to v0.5.12 --move-pin

    A recipe that spans engines (allreduce-fusion) contributes only its ops for
    the target's engine; its other ops belong in the other engine's fork.
    """


@fork.command("sync")
@names_argument("RECIPE|BUNDLE...", required=True)
@release_option("--target", "-t", "target", required=True, metavar="ENGINE=REPO", help=FORK_TARGET_HELP)
@click.option(
    "--base",
    metavar="REV",
    help="Tag or commit to build on (default: the rev pinned for ENGINE in upstream_pins.toml).",
)
@click.option(
    "--force", is_flag=True, help="Rebuild even if the branch has commits patchkit did not make and no other ref holds."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def fork_sync(ctx, names, target, base, force, as_json):
    """Create or rebuild branch patchkit/NAME from recipes.

    Each recipe is judged on the base's pristine tree first: upstream already
    does it -> no commit (reported); moved -> carried to the one place it was
    found; missing or ambiguous -> nothing is built and the branch stays as it
    was (exit 1).  Running it again with nothing changed leaves the branch as is.
    """
    from patchkit.commands.fork import sync as run

    sys.exit(run(invocation(ctx).project, tuple(names), target, base=base, force=force, as_json=as_json))


@fork.command("upgrade")
@click.argument("name", required=False, metavar="[NAME]")
@release_option("--target", "-t", "target", required=True, metavar="ENGINE=REPO", help=FORK_TARGET_HELP)
@click.option(
    "--to", "to", required=True, metavar="REV", help="The new upstream tag or commit to rebuild the branch on."
)
@click.option(
    "--move-pin",
    is_flag=True,
    help="Also set ENGINE's rev (and version) in upstream_pins.toml, editing only those lines.",
)
@click.option(
    "--force", is_flag=True, help="Rebuild even if the branch has commits patchkit did not make and no other ref holds."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def fork_upgrade(ctx, name, target, to, move_pin, force, as_json):
    """Rebuild an existing fork branch on a new upstream revision.

    NAME (patchkit/NAME) defaults to the repository's only fork branch.  Recipes upstream
    now has are dropped and reported (they can be retired); moved ones are
    carried where they went; a missing or ambiguous one stops the upgrade with
    the old branch intact (exit 1).  The pin moves only with --move-pin.
    """
    from patchkit.commands.fork import upgrade as run

    sys.exit(
        run(
            invocation(ctx).project,
            (name,) if name else (),
            target,
            to,
            move_pin=move_pin,
            force=force,
            as_json=as_json,
        )
    )


@fork.command("status")
@click.argument("name", required=False, metavar="[NAME]")
@release_option("--target", "-t", "target", required=True, metavar="ENGINE=REPO", help=FORK_TARGET_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def fork_status(ctx, name, target, as_json):
    """Show what fork branches carry and whether they are current (default: every patchkit/* branch).

    Reads each commit's Patchkit-Recipe trailer: a commit is stale when its
    recipe file changed since (sha256 differs).  Then rebuilds in a temporary
    worktree on the same base to tell whether `fork sync` would change the
    branch.  Exit 0 only if every branch is up to date.
    """
    from patchkit.commands.fork import status as run

    sys.exit(run(invocation(ctx).project, (name,) if name else (), target, as_json=as_json))


@fork.command("export")
@click.argument("name", metavar="NAME")
@release_option("--target", "-t", "target", required=True, metavar="ENGINE=REPO", help=FORK_TARGET_HELP)
@click.option(
    "--out", "-o", required=True, metavar="DIR", help="Directory for the patches and the series file (new or empty)."
)
@click.option("--force", is_flag=True, help="Replace a patch series already in DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def fork_export(ctx, name, target, out, force, as_json):
    """Write patchkit/NAME as numbered patches (git format-patch) plus a quilt series.

    Every patch is parsed back as a unified diff before success is reported.
    Apply them on the base with `git am DIR/*.patch`, `quilt push -a`, or
    `patch -p1` in series order.
    """
    from patchkit.commands.fork import export as run

    sys.exit(run(invocation(ctx).project, name, target, out, force=force, as_json=as_json))


def _facts_file(ctx, param, value):
    from patchkit.commands.doctor import facts_file

    return facts_file(value)


@cli.command()
@click.option("--python", metavar="PATH", help="Check this interpreter (default: the one patchkit runs in).")
@click.option(
    "--facts",
    "facts_file",
    metavar="FILE",
    callback=_facts_file,
    help="Judge facts recorded earlier with --json (e.g. on another machine) instead of collecting them.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the findings and the raw facts as one JSON document.")
@click.pass_context
def doctor(ctx, python, facts_file, as_json):
    """Check the runtime: does the Python that serves run the patched engines, on a GPU they fit?

    \b
    Reports: the interpreter; where it imports sglang and flashinfer from, their
    versions against the pins, and which recipes those copies carry (loudly when
    the workspace tree is patched but the imported copy is not); the GPUs and their
    compute capability (torch, else nvidia-smi); which bundles fit them (sm120 is for
    capability 12.x only); FlashInfer's JIT cache and builds older than patchkit's
    last FlashInfer edit.  With a profile (the imported copies' .patchkit/profile.toml,
    else the workspace's patchkit.toml) the copies are judged against it: what it wants
    and they lack, what it excludes and they carry; an upgrade since patchkit last wrote
    is named.  Exit 0 if all is well, 1 if something is off.
    """
    from patchkit.commands.doctor import doctor as run

    sys.exit(run(invocation(ctx).project, python=python, as_json=as_json, facts_file=facts_file))


@cli.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--apply", "do_apply", is_flag=True, help="Patch the engines to the profile first, instead of refusing.")
@click.option(
    "--python",
    metavar="PATH",
    help="The interpreter CMD runs, when CMD is neither python nor a script whose first line names one.",
)
@click.argument("argv", nargs=-1, required=True, metavar="-- CMD [ARGS]...")
@click.pass_context
def run_cmd(ctx, do_apply, python, argv):
    """Start a server only on patched engines: judge the profile, then exec CMD.

    \b
    The interpreter is CMD itself when it is python (`python -m sglang.launch_server`),
    else the one the first line of the script names (a console script such as `sglang`).
    The copies of the engines it imports are judged against their profile (their own
    .patchkit/profile.toml, else the workspace's patchkit.toml).  If they differ, exit 1
    saying what differs (--apply: patch them first).  Then CMD replaces patchkit's process
    (exec): same pid, signals and exit code, and nothing of patchkit left running.

    \b
      patchkit run -- python -m sglang.launch_server --model-path M
      patchkit run --apply -- /opt/serve/bin/sglang serve --model-path M
    """
    from patchkit.commands.run import run_command

    sys.exit(run_command(invocation(ctx), tuple(argv), python, apply=do_apply))
