"""The click group, its global options and what every command shares (options, completion,
the project from the global options), and ``main``: the command line through click."""

from __future__ import annotations

import importlib
import os
import sys

import click

from patchkit import __version__, toplevel
from patchkit.base import term
from patchkit.commands import Invocation
from patchkit.core.project import Project

EPILOG = """\b
Exit codes: 0 the tree is in the asked-for state; 1 it is not (a recipe is
pending, missing, ambiguous, modified, or an edit could not be made); 2 usage,
recipe or target error; 3 a bug in patchkit.
"""


GLOBAL_META = "patchkit.global"  # --pins/--recipes/--workspace given after the subcommand


def activated_venv() -> "str | None":
    """The interpreter of the venv the user activated (``$VIRTUAL_ENV/bin/python``), when it
    holds an engine (an sglang, flashinfer or vllm package in its site-packages); else None.
    Not the interpreter patchkit runs in: an installed patchkit runs in a venv of its own,
    and the clone's .venv (patchkit, no engine) leaves the workspace the default."""
    from pathlib import Path

    venv = os.environ.get("VIRTUAL_ENV")
    if not venv:
        return None
    exe = Path(venv) / "bin" / "python"
    if not exe.is_file():
        return None
    from patchkit.base.target import ENGINES

    for site in sorted(Path(venv).glob("lib/python*/site-packages")):
        if any((site / info.package).is_dir() for info in ENGINES.values()):
            return str(exe)
    return None


def default_python(python, target) -> "str | None":
    """--python as given; where no target is named (no --python, no -t), the activated venv
    that holds an engine (said on stderr), so that `patchkit apply sm120` inside a serving
    venv patches that venv."""
    if python is not None or target:  # --python= (empty) is click's to refuse, as given
        return python
    found = activated_venv()
    if found:
        term.echo(
            f"patchkit: --python {found}: the activated venv ($VIRTUAL_ENV); -t or --python names another",
            err=True,
        )
    return found


def invocation(ctx: click.Context, python=None, target=None) -> Invocation:
    """What the command needs beside its own options: the project, from the global options
    wherever they were given: before the subcommand or after it (after wins for --pins and
    --workspace; --recipes adds up, in the order given, nearest first); and --python (for a
    command that takes targets, ``target`` given: the activated venv where none is named,
    ``default_python``)."""
    if target is not None:
        python = default_python(python, target)
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
    term.set_color(value)  # what patchkit writes itself (patchkit/base/term.py) follows it too
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


# Which module of patchkit/cli/ defines each command (click's lazily loaded subcommands): a
# start-up imports click, this module and the one module its command is in.  A test checks
# the table against the commands the modules register.
LAZY = {
    "tree": ("apply", "revert", "adopt", "verify", "status", "diff"),
    "recipes": ("list", "show", "new", "check", "capture", "port"),
    "upstream": ("sync", "drift", "pin", "gates"),
    "fleet": ("wheel", "publish", "fork", "doctor", "run"),
    "cache": ("cache",),
}


class Root(Group):
    """The `patchkit` group: each command's module is imported when click first asks for
    the command (``LAZY``); listing them (help, completion) imports them all."""

    def get_command(self, ctx: click.Context, cmd_name: str):
        if cmd_name not in self.commands:
            for module, names in LAZY.items():
                if cmd_name in names:
                    importlib.import_module(f"patchkit.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in LAZY:
            importlib.import_module(f"patchkit.cli.{module}")
        return super().list_commands(ctx)


def _complete_names(ctx, param, incomplete):
    """Shell completion of RECIPE|BUNDLE: the ids and bundles of the recipes in play (never
    an error: a completion that fails offers nothing)."""
    from click.shell_completion import CompletionItem

    try:
        cat = invocation(ctx).project.catalog()
    except Exception:
        return []
    items = [(r.id, term.printable(r.summary)) for r in cat.recipes.values()]  # zsh and fish show it
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
        help="Work on the sglang/flashinfer/vllm that this interpreter imports (e.g. a venv's bin/python); its RECORD "
        "is kept true, a system Python's site-packages is refused, and patchkit's journal stays in "
        "SITE/.patchkit (pip uninstall leaves it; delete it after).",
    )(f)
    f = names_argument()(f)
    return f


@click.group(cls=Root, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
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
    """The console script `patchkit`: every command line through click."""
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = toplevel.wants_json(args)
    toplevel.run(lambda: _click(args, as_json), as_json)
