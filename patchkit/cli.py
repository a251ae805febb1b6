"""The command line: a thin click layer over patchkit.commands.  Arguments in, exit code out.

Errors end in the one top-level handler (patchkit/toplevel.py): a PatchkitError (bad
recipe, bad target, bad flag) or a usage error click finds becomes one line on stderr,
``patchkit: error: WHAT (hint: WHAT TO DO)``, and exit 2, never a traceback; anything else
is a bug, exit 3.  With ``--json`` the same error is also one JSON document on stdout:
``{"error": {"message": ..., "hint": ..., "exit": 2}}``.

The console script enters at patchkit/main.py, which answers a plain `status` or `run`
without importing click, and hands every other command line to ``main`` here.
"""

from __future__ import annotations

import os
import sys

import click

from patchkit import __version__, term, toplevel
from patchkit.commands import Invocation
from patchkit.project import Project

EPILOG = """\b
Exit codes: 0 the tree is in the asked-for state; 1 it is not (a recipe is
pending, missing, ambiguous, modified, or an edit could not be made); 2 usage,
recipe or target error; 3 a bug in patchkit.
"""


GLOBAL_META = "patchkit.global"  # --pins/--recipes/--workspace given after the subcommand


def _inv(ctx: click.Context, python=None) -> Invocation:
    """What the command needs beside its own options: the project, from the global options
    wherever they were given: before the subcommand or after it (after wins for --pins and
    --workspace; --recipes adds up, in the order given, nearest first); and --python."""
    o = ctx.find_root().params
    late = ctx.meta.get(GLOBAL_META, {})
    recipes = tuple(o.get("recipes") or ()) + tuple(late.get("recipes", ()))
    pins, workspace = late.get("pins", o.get("pins")), late.get("workspace", o.get("workspace"))
    return Invocation(lambda: Project.locate(pins, recipes, workspace), python=python)


GLOBAL_HELP = {
    "pins": "upstream_pins.toml to use (default: $PATCHKIT_PINS, else found in . or above).",
    "recipes": "A directory of recipes to read first; repeatable, the first given is nearest. Then come "
    "$PATCHKIT_RECIPES, the project's recipes/ (found in . or above), ~/.config/patchkit/recipes and the "
    "shipped ones; a nearer recipe overrides one with the same id.",
    "workspace": "Where `sync` puts the pinned trees (default: .patchkit/ beside the pins).",
}
COLOR_HELP = "Colour the output: auto (on a terminal, unless NO_COLOR is set), always, or never."


def _keep(ctx, param, value):
    """A global option given after the subcommand: kept in ctx.meta for _inv."""
    if value not in (None, ()):
        got = ctx.meta.setdefault(GLOBAL_META, {})
        got[param.name] = got.get(param.name, ()) + value if param.multiple else value
    return value


def _color(ctx, param, value):
    """--color: the context's colour setting, which click.echo follows (and the contexts of
    subcommands inherit).  auto: on a terminal, unless NO_COLOR is set (no-color.org)."""
    if value == "auto":
        ctx.color = False if os.environ.get("NO_COLOR") else None
    elif value is not None:
        ctx.color = value == "always"
    term.set_color(value)  # what patchkit writes itself (patchkit/term.py) follows it too
    return value


def _late_params(cmd: click.Command) -> list[click.Parameter]:
    """--pins, --recipes, --workspace and --color, accepted after the subcommand as well as
    before it (`patchkit list --recipes DIR`), unless the command has its own."""
    out: list[click.Parameter] = []
    if not any(p.name == "recipes" for p in cmd.params):
        out += [
            click.Option(["--pins"], metavar="FILE", expose_value=False, callback=_keep, help=GLOBAL_HELP["pins"]),
            click.Option(
                ["--recipes"],
                metavar="DIR",
                multiple=True,
                expose_value=False,
                callback=_keep,
                help=GLOBAL_HELP["recipes"],
            ),
            click.Option(
                ["--workspace"], metavar="DIR", expose_value=False, callback=_keep, help=GLOBAL_HELP["workspace"]
            ),
        ]
    if not any(p.name == "color" for p in cmd.params):
        choice = click.Choice(["auto", "always", "never"])
        out.append(click.Option(["--color"], type=choice, expose_value=False, callback=_color, help=COLOR_HELP))
    return out


class _Late:
    """A command whose parameters end with _late_params, made when click first asks for
    them (a few dozen click.Options fewer to build at every start: `status` is a start-up)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        late = self.__dict__.get("_late_params")
        if late is None:
            late = self._late_params = _late_params(self)
        params = [*self.params, *late]
        help_option = self.get_help_option(ctx)
        return params if help_option is None else [*params, help_option]


class Command(_Late, click.Command):
    pass


class Group(_Late, click.Group):
    command_class = Command
    group_class = type  # a subgroup (fork) is a Group too


def _complete_names(ctx, param, incomplete):
    """Shell completion of RECIPE|BUNDLE: the ids and bundles of the recipes in play (never
    an error: a completion that fails offers nothing)."""
    from click.shell_completion import CompletionItem

    try:
        cat = _inv(ctx).project.catalog()
    except Exception:
        return []
    items = [(r.id, r.summary) for r in cat.recipes.values()]
    items += [(b, "bundle: " + " ".join(ids)) for b, ids in cat.bundles.items()]
    return [CompletionItem(n, help=h) for n, h in items if n.startswith(incomplete)]


def _complete_release(ctx, param, incomplete):
    """Shell completion of ENGINE=PATH, ENGINE==VERSION and ENGINE==A..B (never an error)."""
    try:
        from patchkit.completion import release_values

        return release_values(param.name, incomplete)
    except Exception:
        return []


def names_argument(metavar: str = "[RECIPE|BUNDLE]...", required: bool = False):
    """RECIPE|BUNDLE..., completed in the shell with the recipes and bundles in play."""
    return click.argument("names", nargs=-1, required=required, metavar=metavar, shell_complete=_complete_names)


def release_option(*decls, **kw):
    """An option whose value names an engine and a release or a tree: completed with the
    engines, then versions (ENGINE==V) or paths (ENGINE=PATH)."""
    return click.option(*decls, shell_complete=_complete_release, **kw)


SAVE_HELP = (
    "Also record it in the profile (the --python/--target tree's .patchkit/profile.toml, else the workspace's "
    "patchkit.toml; created if absent), keeping its comments and layout."
)


def target_options(f):
    f = click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document (the shape is stable; see README)."
    )(f)
    f = release_option(
        "--target",
        "-t",
        multiple=True,
        metavar="ENGINE=PATH",
        help="Work on this tree instead of the workspace: a git checkout of the upstream repo, an unpacked wheel, "
        "or site-packages. Repeat per engine.",
    )(f)
    f = click.option(
        "--python",
        metavar="PATH",
        help="Work on the sglang/flashinfer that this interpreter imports (e.g. a venv's bin/python); its RECORD "
        "is kept true, a system Python's site-packages is refused, and patchkit's journal stays in "
        "SITE/.patchkit (pip uninstall leaves it; delete it after).",
    )(f)
    f = names_argument()(f)
    return f


@click.group(cls=Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
@click.option("--pins", metavar="FILE", help=GLOBAL_HELP["pins"])
@click.option("--recipes", metavar="DIR", multiple=True, help=GLOBAL_HELP["recipes"])
@click.option("--workspace", metavar="DIR", help=GLOBAL_HELP["workspace"])
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    expose_value=False,
    callback=_color,
    help=COLOR_HELP,
)
def cli(pins, recipes, workspace):
    """Declarative, verifiable, revertible patches for LLM inference engines (SGLang, FlashInfer, vLLM).

    \b
    Typical use:
      patchkit sync                        fetch the pinned upstream trees
      patchkit diff sm120                  see what the sm120 bundle would change
      patchkit apply sm120                 apply it (all edits or none)
      patchkit status                      what is applied, pending, upstream, missing
      patchkit revert allreduce-fusion     take back exactly one recipe
      patchkit apply sm120 -t sglang=./sglang -t flashinfer=./flashinfer

    Recipes are TOML files: those shipped with patchkit, and your own in
    ~/.config/patchkit/recipes, a project's recipes/, $PATCHKIT_RECIPES or --recipes DIR
    (`patchkit list` says where each comes from).  A bundle is every recipe that lists it
    in `bundles`.  --pins, --recipes and --workspace may also follow the subcommand.
    """


@cli.command()
@target_options
@click.option("--dry-run", "-n", is_flag=True, help="Plan and verify every edit, write nothing.")
@click.option(
    "--ignore-range", is_flag=True, help="Apply recipes even where the target's version is outside their range."
)
@click.option(
    "--clear-jit-cache", is_flag=True, help="Delete FlashInfer's cached builds of the kernels whose sources changed."
)
@click.option("--save", is_flag=True, help=SAVE_HELP + " A bundle joins bundles; a recipe leaves exclude.")
@click.pass_context
def apply(ctx, names, target, python, as_json, dry_run, ignore_range, clear_jit_cache, save):
    """Apply recipes and bundles (default: what the profile names).

    Every edit of the invocation is planned in memory across all files and engines and
    checked (post-condition holds, a second apply is a no-op, revert restores the bytes,
    Python still parses) before anything is written; then all files are written
    atomically, or none.  Applying an applied recipe changes nothing.  Recipes the
    profile excludes are left out of the bundles named; a recipe whose rationale
    carries a WARNING has it printed before its edits are written.
    """
    from patchkit.commands.apply import apply_command

    sys.exit(apply_command(_inv(ctx, python), names, target, as_json, dry_run, ignore_range, clear_jit_cache, save))


@cli.command()
@target_options
@click.option("--dry-run", "-n", is_flag=True, help="Plan and verify, write nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Revert even if a file changed after patchkit wrote it; forget ops that can no longer be found.",
)
@click.option(
    "--clear-jit-cache", is_flag=True, help="Delete FlashInfer's cached builds of the kernels whose sources changed."
)
@click.option(
    "--save", is_flag=True, help=SAVE_HELP + " A recipe a bundle of the profile brings joins exclude; a bundle leaves."
)
@click.pass_context
def revert(ctx, names, target, python, as_json, dry_run, force, clear_jit_cache, save):
    """Take back recipes patchkit applied, leaving the others (and your own edits) alone.

    Refuses, with exit 1, when a file changed after patchkit wrote it, and says which
    lines; --force reverts anyway.  Code upstream already has is never touched.
    """
    from patchkit.commands.apply import revert_command

    sys.exit(revert_command(_inv(ctx, python), names, target, as_json, dry_run, force, clear_jit_cache, save))


@cli.command()
@target_options
@click.option(
    "--build", is_flag=True, help="Also compile the CUDA the edits reach, pristine and patched, with nvcc, to PTX."
)
@click.option("--arch", metavar="LIST", help="Archs to build for, e.g. 120a,90a (default: the recipe's [verify] arch).")
@click.option("--nvcc", metavar="PATH", help="The nvcc to use (default: $CUDA_HOME/bin/nvcc, else nvcc on PATH).")
@click.option("--jobs", "-j", type=int, metavar="N", help="nvcc processes at once (default: every core).")
@click.option(
    "--nvcc-timeout",
    type=float,
    metavar="SECONDS",
    help="Kill an nvcc run (with its process group) after this long and report it (default: 1800).",
)
@click.pass_context
def verify(ctx, names, target, python, as_json, build, arch, nvcc, jobs, nvcc_timeout):
    """Prove recipes on the real toolchain: names resolve, and (--build) the CUDA compiles.

    \b
    Python: apply is planned in memory with every check, the names check among them
    (no edited scope is left with a name the edit made undefined).  --build: the FlashInfer
    translation units that include an edited file, and the sources of the JIT modules the
    recipe names (read from flashinfer/jit/*.py, never imported), compiled pristine and
    patched for each arch, in parallel, cached in ~/.cache/patchkit/verify; per unit and
    kernel family: built or nvcc's first error, empty kernels (a lone `ret`), counts of PTX
    instructions (griddepcontrol, and what [verify] names), wall time.  Exit 1 when a
    patched build fails or an expectation of [verify] does not hold.

    \b
      patchkit verify allreduce-fusion --build --arch 120a,90a
    """
    from patchkit.commands.verify import verify_command

    inv = _inv(ctx, python)
    sys.exit(
        verify_command(
            inv, names, target, as_json, build=build, arch=arch, nvcc=nvcc, jobs=jobs, nvcc_timeout=nvcc_timeout
        )
    )


@cli.command()
@target_options
@click.option("--quiet", "-q", is_flag=True, help="Only show ops whose state differs from their recipe's.")
@click.pass_context
def status(ctx, names, target, python, as_json, quiet):
    """Judge recipes against the code as it is now (default: the profile's, else all recipes).

    \b
    States:
      applied      patchkit's edit is there (the pristine release lacks it)
      applied?     the edit is there; with no pristine release, who made it is unknown
      upstream     the release already does it: retire the recipe
      pending      the site is found, the edit is not made yet
      partial      some ops applied, some pending
      moved        found, but not in the named file or scope (see where)
      missing      the site is not found
      ambiguous    several candidate sites (listed)
      modified     patchkit wrote it, and the code changed since
      blocked      a blocker the recipe declares stands: its goal is not reached
      skipped      the target's version is outside the recipe's range
      interrupted  a kill stopped an apply/revert mid-write; the next one finishes it
    Exit 0 only if every named recipe is applied, applied? or upstream; a recipe the
    profile excludes counts as it should be while none of its edits is in the code.
    """
    from patchkit.commands.status import status_command

    sys.exit(status_command(_inv(ctx, python), names, target, as_json, quiet))


@cli.command()
@target_options
@click.option(
    "--applied",
    is_flag=True,
    help="Show what patchkit has applied (the patch to revert), instead of what apply would write.",
)
@click.option("--ignore-range", is_flag=True, help="Include recipes outside their version range.")
@click.pass_context
def diff(ctx, names, target, python, as_json, applied, ignore_range):
    """Print a unified diff of what apply would write; touches nothing.

    Paths are relative to each target's root, so the output applies with
    `git apply` or `patch -p1` there.  --json: one document, the verdicts of
    `status --json` plus each file's diff.
    """
    from patchkit.commands.apply import diff as run

    sys.exit(run(_inv(ctx, python).options(names, target, as_json), applied=applied, ignore_range=ignore_range))


@cli.command("list")
@names_argument()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_cmd(ctx, names, as_json):
    """List recipes and bundles."""
    from patchkit.commands.catalog import list_

    sys.exit(list_(_inv(ctx).options(names, (), as_json)))


@cli.command()
@names_argument("RECIPE|BUNDLE...", required=True)
@click.pass_context
def show(ctx, names):
    """Show recipes in full: rationale, version ranges, ops and upstream markers."""
    from patchkit.commands.catalog import show as run

    sys.exit(run(_inv(ctx).options(names, (), False)))


@cli.command()
@click.argument("engines", nargs=-1, metavar="[ENGINE]...")
@click.option(
    "--from",
    "source",
    type=click.Choice(["index", "git"]),
    default="index",
    show_default=True,
    help="Fetch release wheels from the package index, or clone the pinned git revision.",
)
@click.option(
    "--mirror",
    multiple=True,
    metavar="ENGINE=PATH",
    help="With --from git: clone from this local mirror instead of the pinned URL.",
)
@click.option(
    "--force", is_flag=True, help="Replace a workspace tree that holds something else (its patches are lost)."
)
@click.pass_context
def sync(ctx, engines, source, mirror, force):
    """Materialise the pinned upstream trees in the workspace (.patchkit/trees/ENGINE).

    Release wheels are downloaded once from the package index (its simple API; no pip
    needed; PATCHKIT_INDEX_URL, else uv's or pip's index URL, else PyPI), checked against
    the sha256 the index lists and the pinned one, cached in ~/.cache/patchkit
    (PATCHKIT_CACHE moves it) and unpacked.  A second sync is instant and works offline.
    """
    from patchkit.commands.sync import sync as run

    sys.exit(run(_inv(ctx).project, tuple(engines), source, tuple(mirror), force))


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
        run(_inv(ctx).project, tuple(names), tuple(sources), label, out, as_json=as_json, ignore_range=ignore_range)
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

    sys.exit(run(_inv(ctx).project, tuple(names), tuple(sources), url, label, out, dry_run, ignore_range))


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

    sys.exit(run(_inv(ctx).project, tuple(names), target, base=base, force=force, as_json=as_json))


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
        run(_inv(ctx).project, (name,) if name else (), target, to, move_pin=move_pin, force=force, as_json=as_json)
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

    sys.exit(run(_inv(ctx).project, (name,) if name else (), target, as_json=as_json))


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

    sys.exit(run(_inv(ctx).project, name, target, out, force=force, as_json=as_json))


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

    sys.exit(run(_inv(ctx).project, python=python, as_json=as_json, facts_file=facts_file))


@cli.command()
@names_argument()
@release_option(
    "--to",
    "to",
    multiple=True,
    metavar="ENGINE==VERSION|ENGINE=PATH",
    help="The release to judge (from the index, cached), or a local pristine tree. Repeatable; engines not named "
    "use their pin.",
)
@release_option(
    "--across", metavar="ENGINE==A..B", help="Judge every release from A to B that the index lists, and print a matrix."
)
@click.option(
    "--bisect",
    is_flag=True,
    help="With --across: find where each recipe changes state, evaluating O(log n) releases per change.",
)
@click.option("--jobs", "-j", type=int, default=2, show_default=True, help="Releases judged in parallel.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (the shape of `status --json`; a matrix with --across)."
)
@click.option(
    "--html",
    metavar="FILE",
    help="With --across: also write the matrix as one self-contained page (recipes and ops x releases, a colour "
    "per state, transitions marked, evidence on hover; works offline).",
)
@click.pass_context
def drift(ctx, names, to, across, bisect, jobs, as_json, html):
    """Before an upgrade: which recipes still apply, which did upstream merge, which moved.

    \b
    Every op is judged on the PRISTINE release: pending (still applies), upstream (the
    release already does it; retire the recipe), moved (found elsewhere: see location),
    missing, ambiguous.  Exit 0 when nothing is missing, ambiguous or moved.

    \b
      patchkit drift --to sglang==0.5.13
      patchkit drift sm120 --across sglang==0.5.9..0.5.23 --bisect
      patchkit drift sm120 --across sglang==0.5.9..0.5.23 --html drift.html
    """
    from patchkit.commands.drift import drift as run

    sys.exit(run(_inv(ctx).project, tuple(names), tuple(to), across, bisect, as_json, jobs, html=html))


@cli.command()
@click.argument("engine")
@click.argument("version")
@click.option("--force", is_flag=True, help="Move the pin even if a recipe would be missing, ambiguous or moved.")
@click.pass_context
def pin(ctx, engine, version, force):
    """Move ENGINE's pin in upstream_pins.toml to VERSION, after a drift preflight.

    Only the version, wheel, sha256 and rev lines change; comments and layout survive.
    """
    from patchkit.commands.drift import pin as run

    sys.exit(run(_inv(ctx).project, engine, version, force))


@cli.command("new")
@click.argument("rid", metavar="ID")
@click.option(
    "--engine",
    metavar="ENGINE",
    help="The engine the template's ops edit (one that patchkit/engines.toml or an engines/*.toml defines; "
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

    sys.exit(run(_inv(ctx).project, rid, engine, out))


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

    sys.exit(run(_inv(ctx).project, tuple(paths), as_json=as_json))


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

    sys.exit(run(_inv(ctx).project, rid, tuple(target), out, partial))


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

    sys.exit(run(_inv(ctx).project, rid, to, write, as_json))


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

    sys.exit(run_command(_inv(ctx), tuple(argv), python, apply=do_apply))


def _click(args: list[str], as_json: bool) -> None:
    """The command line through click; click's own errors as the top-level handler words them."""
    try:
        cli.main(args=args, prog_name="patchkit", standalone_mode=False)
    except click.exceptions.Abort:
        term.echo("patchkit: aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as e:  # `patchkit` or `patchkit fork` alone: the help
        e.show()
        sys.exit(2)
    except click.exceptions.ClickException as e:  # a usage error: an unknown option, a missing argument
        ctx = getattr(e, "ctx", None)
        hint = f"see `{ctx.command_path} --help`" if ctx is not None else "see `patchkit --help`"
        message = e.format_message()
        toplevel.fail(2, f"patchkit: error: {message} (hint: {hint})", message, hint, as_json)


def main(argv=None) -> None:
    """Every command through click (patchkit/main.py sends here all but the fast path)."""
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = toplevel.wants_json(args)
    toplevel.run(lambda: _click(args, as_json), as_json)
