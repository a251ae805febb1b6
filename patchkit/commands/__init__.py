"""One module per subcommand.  Each exposes a plain function that returns an exit code;
only patchkit/cli.py knows about argument parsing."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from patchkit.project import Project

OK, NOT_THERE, USAGE = 0, 1, 2


@dataclass
class Options:
    """What every target-taking command shares."""

    names: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    json: bool = False
    project: Project = field(default_factory=Project.locate)


def open_session(opts: Options):
    """(recipes, Session): recipes validated first (a bad recipe fails before any target
    is read), then targets.  The engine (and libcst) is imported here, not at start-up."""
    from patchkit.judge import Session

    catalog = opts.project.catalog()
    recipes = catalog.select(opts.names)
    needed = {e for r in recipes for e in r.engines}
    targets = opts.project.targets(opts.targets, needed)
    return recipes, Session(targets, known=catalog.recipes)


def say(msg: str = "", err: bool = False) -> None:
    click.echo(msg, err=err)
