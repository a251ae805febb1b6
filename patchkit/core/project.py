"""Where things are: the project (upstream_pins.toml + recipes/), the workspace of pinned
trees (.patchkit/ beside the pins), and the targets of an invocation."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from patchkit.base import paths, regular

# The config files' readers and the recipe directories live in config.py, below recipe.py and
# pins.py (which this module imports); they are re-exported here, where callers knew them.
from patchkit.base.config import (  # noqa: F401
    MAX_CONFIG_BYTES,
    PATH,
    PROJECT,
    SHIPPED,
    USER,
    RecipeDir,
    decode_utf8,
    read_config,
)
from patchkit.base.errors import PatchkitError
from patchkit.base.target import ENGINES, Target, open_target, parse_target_arg

PINS_FILE = "upstream_pins.toml"
PINS_ENV = "PATCHKIT_PINS"

_KINDS = regular.KINDS


def _explicit_pins(value: str, label: str, hint: str) -> Path:
    """A pins file the user named (``--pins``, ``PATCHKIT_PINS``): it must be there, and be a
    regular file; it is never silently replaced by the one the upward search would find."""
    if "\0" in value:
        raise PatchkitError(f"{label}{value!r}: the path holds a NUL byte", hint)
    path = Path(value)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            why = f"the pins file is a broken symlink (to {os.readlink(path)})"
            raise PatchkitError(f"{label}{path}: {why}", hint) from None
        raise PatchkitError(f"{label}{path}: the pins file does not exist", hint) from None
    except OSError as e:
        raise PatchkitError(f"{label}{path}: the pins file cannot be read ({e.strerror or e})", hint) from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise PatchkitError(f"{label}{path}: is {kind}, not a pins file", hint)
    return path


def find_pins(start: Optional[Path] = None) -> Optional[Path]:
    """``PATCHKIT_PINS``, else the nearest upstream_pins.toml in ``start`` (the working
    directory) or above, else None (commands that need no workspace work without one)."""
    env = paths.env_value(PINS_ENV)
    if env:
        return _explicit_pins(
            env,
            f"{PINS_ENV}=",
            f"set {PINS_ENV} to an existing upstream_pins.toml, or unset it to find one in . or above",
        )
    d = (start or Path.cwd()).resolve()
    for p in (d, *d.parents):
        if (p / PINS_FILE).is_file():
            return p / PINS_FILE
    return None


RECIPES_ENV = "PATCHKIT_RECIPES"
NO_SHIPPED_ENV = "PATCHKIT_NO_SHIPPED_RECIPES"  # "1": only the recipes named or found, none of patchkit's own


def _has_recipes(d: Path) -> bool:
    try:
        return any(n.endswith(".toml") for n in os.listdir(d))
    except OSError:
        return False


def find_project_recipes(start: Optional[Path] = None) -> Optional[Path]:
    """The nearest project's ``recipes/`` in ``start`` (the working directory) or above: the
    first directory that holds upstream_pins.toml or a recipes/ with a .toml file in it."""
    d = (start or Path.cwd()).resolve()
    for p in (d, *d.parents):
        if (p / PINS_FILE).is_file() or _has_recipes(p / "recipes"):
            return p / "recipes"
    return None


def recipe_dirs(
    given: tuple[str, ...] = (), pins_path: Optional[Path] = None, explicit_pins: bool = False
) -> list[RecipeDir]:
    """Every place recipes are read from, nearest first: ``--recipes`` (in the order given),
    PATCHKIT_RECIPES (os.pathsep-separated, in order), the project's recipes/ (beside pins
    named with --pins or PATCHKIT_PINS, else found upward from the working directory), the
    user's (``$XDG_CONFIG_HOME/patchkit/recipes``), the ones shipped with patchkit (unless
    PATCHKIT_NO_SHIPPED_RECIPES=1).  A directory reached twice counts once, at its nearest
    place."""
    out: list[RecipeDir] = [RecipeDir(Path(g), PATH, True, f"--recipes {g}") for g in given]
    for entry in (paths.env_value(RECIPES_ENV) or "").split(os.pathsep):
        if entry:
            if "\0" in entry:
                raise PatchkitError(f"{RECIPES_ENV}={entry!r}: a path holds a NUL byte", "name the path without it")
            out.append(RecipeDir(Path(entry), PATH, True, f"{RECIPES_ENV}={entry}"))
    project = pins_path.parent / "recipes" if explicit_pins and pins_path else find_project_recipes()
    if project is not None:
        out.append(RecipeDir(project, PROJECT))
    out.append(RecipeDir(paths.user_recipes_dir(), USER))
    shipped = None if os.environ.get(NO_SHIPPED_ENV) == "1" else paths.shipped_recipes_dir()
    if shipped is not None:
        out.append(RecipeDir(shipped, SHIPPED))
    seen: set[str] = set()
    unique = []
    for rd in out:
        try:
            real = os.path.realpath(rd.path)
        except (OSError, ValueError):
            real = str(rd.path)
        if real not in seen:
            seen.add(real)
            unique.append(rd)
    return unique


def engines_at_hand(project, target_args: tuple[str, ...]) -> set[str]:
    """The engines with a tree: those of --target arguments if any are given, else those
    with a workspace tree (``project.workspace/trees/ENGINE``)."""
    if target_args:
        return {parse_target_arg(a)[0] for a in target_args}
    return {e for e in ENGINES if (Path(project.workspace) / "trees" / e).exists()}


@dataclass
class Project:
    pins_path: Optional[Path]
    recipe_dirs: list[RecipeDir]
    workspace: Path

    @classmethod
    def locate(
        cls,
        pins: Optional[str] = None,
        recipes: "str | tuple[str, ...] | list[str] | None" = None,
        workspace: Optional[str] = None,
    ) -> "Project":
        given = (recipes,) if isinstance(recipes, str) else tuple(recipes or ())
        for option, value in (("--pins", pins), *(("--recipes", g) for g in given), ("--workspace", workspace)):
            if value is not None and not value:
                raise PatchkitError(f"{option}: the path is empty", f"name a path after {option}, or leave it out")
            if value and "\0" in value:
                raise PatchkitError(f"{option} {value!r}: the path holds a NUL byte", "name the path without it")
        if pins:
            pins_path: Optional[Path] = _explicit_pins(
                pins, "--pins ", "pass an existing upstream_pins.toml, or leave --pins out to find one in . or above"
            )
        else:
            pins_path = find_pins()
        explicit = bool(pins or paths.env_value(PINS_ENV))
        base = pins_path.parent if pins_path else Path.cwd()
        dirs = recipe_dirs(given, pins_path, explicit)
        ENGINES.add_dirs(rd.path for rd in dirs)  # the user's engine definitions (engines.py)
        return cls(
            pins_path=pins_path,
            recipe_dirs=dirs,
            workspace=Path(workspace) if workspace else base / ".patchkit",
        )

    @property
    def recipes_dir(self) -> Path:
        """The nearest recipe directory (where a new recipe would go)."""
        return self.recipe_dirs[0].path

    def new_recipes_dir(self) -> Path:
        """Where `new` and `capture` write a recipe without --out: the nearest --recipes or
        PATCHKIT_RECIPES directory, else the project's recipes/, else ./recipes, which the
        recipe then makes a project.  Never the user's ~/.config/patchkit/recipes: a draft
        there would count in every `status` anywhere."""
        for rd in self.recipe_dirs:
            if rd.origin in (PATH, PROJECT):
                return rd.path
        return Path.cwd() / "recipes"

    def catalog(self):
        from patchkit.core.recipe import Catalog  # validating recipes needs libcst; load it only then

        return Catalog.load(self.recipe_dirs)

    def pins(self) -> dict:
        if self.pins_path is None:
            raise PatchkitError(
                "upstream_pins.toml not found here or above", "run inside the patchkit project, or pass --pins FILE"
            )
        from patchkit.core import pins as pins_mod

        return pins_mod.load(self.pins_path)

    def tree(self, engine: str) -> Path:
        return self.workspace / "trees" / engine

    def targets(self, target_args: tuple[str, ...], needed: set[str]) -> dict[str, Target]:
        """The --target ENGINE=PATH trees if any are given (and only those), else the
        workspace trees of the engines the recipes need."""
        targets: dict[str, Target] = {}
        for arg in target_args:
            engine, path = parse_target_arg(arg)
            if not path:
                raise PatchkitError(
                    f"--target {arg!r}: no path after '='",
                    f"e.g. --target {engine or next(iter(ENGINES))}=./{engine or next(iter(ENGINES))}",
                )
            if "\0" in path:
                raise PatchkitError(f"--target {arg!r}: the path holds a NUL byte", "name the path without it")
            if engine in targets:
                raise PatchkitError(f"--target {engine}= given twice", "give one --target per engine")
            targets[engine] = open_target(engine, path)
        if target_args:
            return targets  # never mix a given tree with a workspace one silently
        for engine in sorted(needed & set(ENGINES)):
            tree = self.tree(engine)
            if not tree.exists() and self.pins_path is None:
                # No pins, no workspace: `sync` would fail here too.  Name what works.
                raise PatchkitError(
                    f"no {engine} tree to work on: no --target or --python, and no upstream_pins.toml here or "
                    "above (so no workspace)",
                    f"name the tree: --target {engine}=PATH (a checkout, an unpacked wheel, site-packages) or "
                    "--python PY (the interpreter that imports it)",
                )
            if not tree.exists():
                raise PatchkitError(
                    f"no {engine} tree in the workspace {self.workspace}",
                    f"run `patchkit sync` first, or pass --target {engine}=PATH",
                )
            targets[engine] = open_target(engine, tree)
        return targets
