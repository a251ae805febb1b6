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
    if not opts.names:  # every recipe: those of engines at hand (an SGLang venv has no vLLM)
        recipes = at_hand(recipes, opts.project.engines_at_hand(opts.targets))
    needed = {e for r in recipes for e in r.engines}
    targets = opts.project.targets(opts.targets, needed)
    return recipes, Session(targets, known=catalog.recipes)


def at_hand(recipes: list, have: set[str]) -> list:
    """With no recipe named: the recipes whose engines all have a tree (a --target, a
    workspace tree), the others named on stderr.  With no engine at hand at all, all of
    them: the command then says which tree is missing, as it does for a named recipe."""
    if not have:
        return recipes
    left = [r for r in recipes if not set(r.engines) <= have]
    for r in left:
        lacking = ", ".join(sorted(set(r.engines) - have))
        say(
            f"note: {r.id} not judged: it edits {lacking} (no tree of it here; name the recipe to be told why)",
            err=True,
        )
    return [r for r in recipes if set(r.engines) <= have]


def say(msg: str = "", err: bool = False) -> None:
    click.echo(msg, err=err)
