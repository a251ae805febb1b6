"""One module per subcommand.  Each exposes a plain function that returns an exit code;
only patchkit/cli/ parses arguments.
The rules of a command (what it does with no names, what a profile supplies) live here,
in its module, not in the cli."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from patchkit.base import sparse, term
from patchkit.core.project import Project


def _need(root, rels) -> None:  # the provider, imported only when a sparse tree is read
    from patchkit.upstream import lazytree

    lazytree.need(root, rels)


def _need_suffix(root, prefixes, suffix) -> None:
    from patchkit.upstream import lazytree

    lazytree.need_suffix(root, prefixes, suffix)


# a sparse release tree read by any command fetches what it lacks (patchkit/upstream/lazytree.py)
sparse.install(_need, _need_suffix)

OK, NOT_THERE, USAGE = 0, 1, 2


@dataclass
class Options:
    """What every target-taking command shares."""

    names: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    json: bool = False
    project: Project = field(default_factory=Project.locate)


@dataclass
class Invocation:
    """What the command line gives a command beside its own options: the project (located
    when first needed, so that a bad --python is reported before a bad --pins, as the
    commands ask for them), and the interpreter --python names, probed once."""

    locate: Callable[[], Project] = Project.locate
    python: Optional[str] = None
    facts: Optional[dict] = None  # what ``python`` imports (interp.probe_python), once asked
    _project: Optional[Project] = field(default=None, repr=False)

    @property
    def project(self) -> Project:
        if self._project is None:
            self._project = self.locate()
        return self._project

    def probe(self) -> Optional[dict]:
        """What the --python interpreter imports; None without --python.  Remembered in the
        cache while nothing that decides it changed (interp.remembered_probe): no second
        interpreter starts for a `status --python` of a venv nobody touched."""
        if self.python and self.facts is None:
            from patchkit.fleet.interp import remembered_probe

            self.facts = remembered_probe(self.python)
        return self.facts

    def profile(self, target: tuple[str, ...] = ()):
        """The profile in play (patchkit/fleet/profile.py): the --python or --target tree's own,
        else the workspace's patchkit.toml; ``exists`` is False when there is none."""
        from patchkit.fleet import profile

        roots = profile.target_roots(target, profile.python_roots(self.probe()))
        return profile.find(self.project.pins_path, roots)

    def options(self, names, target=(), as_json: bool = False) -> Options:
        """The Options of a target-taking command; with --python, the copies that
        interpreter imports become targets (interp.python_targets)."""
        if self.python:
            from patchkit.fleet.interp import python_targets

            found = python_targets(self.python, self.project, tuple(names), tuple(target), facts=self.probe())
            target = tuple(target) + found
        return Options(names=tuple(names), targets=tuple(target), json=as_json, project=self.project)


def open_session(opts: Options):
    """(recipes, Session): recipes validated first (a bad recipe fails before any target
    is read), then targets.  The engine (and libcst) is imported here, not at start-up."""
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    recipes, targets, known = open_targets(opts)
    return recipes, Session(targets, known=known, releases=RELEASES)


def open_targets(opts: Options):
    """(recipes, targets, every recipe of the catalog by id): what a Session is opened on,
    found before it is (apply and revert lock the targets first, then read)."""
    from patchkit.core.project import engines_at_hand

    catalog = opts.project.catalog()
    recipes = catalog.select(opts.names)
    left: list = []
    if not opts.names:  # every recipe, but not those of engines with no tree here (a SGLang venv has no vLLM)
        recipes, left = at_hand(recipes, engines_at_hand(opts.project, opts.targets))
    needed = {e for r in recipes for e in r.engines}
    targets = opts.project.targets(opts.targets, needed)
    say_left(left)
    return recipes, targets, catalog.recipes


def at_hand(recipes: list, have: set[str]) -> tuple[list, list]:
    """With no recipe named: (the recipes to judge, those left out).  A recipe is left out
    when none of the engines it edits has a tree here (a --target, a workspace tree, a
    release given); one that edits an engine at hand and lacks another is kept, and the
    command says which tree it lacks, as it does for a named recipe.  With no engine at
    hand at all, nothing is left out (the same error)."""
    if not have:
        return recipes, []
    left = [r for r in recipes if not set(r.engines) & have]
    return [r for r in recipes if r not in left], left


def say_left(left: list) -> None:
    for r in left:
        engines = ", ".join(sorted(r.engines))
        say(f"note: {r.id} not judged: it edits {engines}, which has no tree here (name it to be told why)", err=True)


def say(msg: str = "", err: bool = False, raw: bool = False) -> None:
    """One line for the user (control characters escaped: term.echo), or ``raw`` data."""
    term.echo(msg, err=err, raw=raw)
