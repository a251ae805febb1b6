"""Where things are: the project (upstream_pins.toml + recipes/), the workspace of pinned
trees (.patchkit/ beside the pins), and the targets of an invocation."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from patchkit.errors import PatchkitError
from patchkit.target import ENGINES, Target, open_target, parse_target_arg

PINS_FILE = "upstream_pins.toml"


def find_pins(start: Optional[Path] = None) -> Optional[Path]:
    env = os.environ.get("PATCHKIT_PINS")
    if env:
        return Path(env)
    d = (start or Path.cwd()).resolve()
    for p in (d, *d.parents):
        if (p / PINS_FILE).is_file():
            return p / PINS_FILE
    # An editable install run from elsewhere: the checkout holding this package.
    here = Path(__file__).resolve().parents[1] / PINS_FILE
    return here if here.is_file() else None


@dataclass
class Project:
    pins_path: Optional[Path]
    recipes_dir: Path
    workspace: Path

    @classmethod
    def locate(
        cls, pins: Optional[str] = None, recipes: Optional[str] = None, workspace: Optional[str] = None
    ) -> "Project":
        pins_path = Path(pins) if pins else find_pins()
        base = pins_path.parent if pins_path else Path.cwd()
        return cls(
            pins_path=pins_path,
            recipes_dir=Path(recipes) if recipes else base / "recipes",
            workspace=Path(workspace) if workspace else base / ".patchkit",
        )

    def catalog(self):
        from patchkit.recipe import Catalog  # validating recipes needs libcst; load it only then

        return Catalog.load(self.recipes_dir)

    def pins(self) -> dict:
        if self.pins_path is None:
            raise PatchkitError(
                "upstream_pins.toml not found here or above", "run inside the patchkit project, or pass --pins FILE"
            )
        from patchkit import pins as pins_mod

        return pins_mod.load(self.pins_path)

    def tree(self, engine: str) -> Path:
        return self.workspace / "trees" / engine

    def targets(self, target_args: tuple[str, ...], needed: set[str]) -> dict[str, Target]:
        """The --target ENGINE=PATH trees if any are given (and only those), else the
        workspace trees of the engines the recipes need."""
        targets: dict[str, Target] = {}
        for arg in target_args:
            engine, path = parse_target_arg(arg)
            if engine in targets:
                raise PatchkitError(f"--target {engine}= given twice")
            targets[engine] = open_target(engine, path)
        if target_args:
            return targets  # never mix a given tree with a workspace one silently
        for engine in sorted(needed & set(ENGINES)):
            tree = self.tree(engine)
            if not tree.exists():
                raise PatchkitError(
                    f"no {engine} tree in the workspace {self.workspace}",
                    f"run `patchkit sync` first, or pass --target {engine}=PATH",
                )
            targets[engine] = open_target(engine, tree)
        return targets
