"""Where patchkit keeps what it downloads and computes, and where it finds recipes outside a
project (a module of its own, standard library only, so that a fast `status` can find its
cache and recipe directories without importing the download machinery or a parser)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

CACHE_ENV = "PATCHKIT_CACHE"


def env_value(name: str) -> Optional[str]:
    """An environment variable that names a path or a URL, or None when it is unset, empty
    or only blanks: ``PATCHKIT_CACHE=`` means the default, never the working directory (the
    one reading of every such variable: PATCHKIT_CACHE, PATCHKIT_PINS, PATCHKIT_RECIPES,
    the index URLs, XDG_CONFIG_HOME, NETRC, PIP_CERT, CUDA_HOME)."""
    value = os.environ.get(name, "")
    return value if value.strip() else None


def cache_dir() -> Path:
    """~/.cache/patchkit, or $PATCHKIT_CACHE (set and not empty)."""
    return Path(env_value(CACHE_ENV) or Path.home() / ".cache" / "patchkit")


def wheels_dir(dist: str) -> Path:
    """Where a distribution's release wheels are cached, one directory per version (fetch.py
    downloads into it; the verdict cache, identity and pristine references read it)."""
    return cache_dir() / "wheels" / dist.replace("_", "-").lower()


def config_dir() -> Path:
    """$XDG_CONFIG_HOME/patchkit, default ~/.config/patchkit (a relative XDG_CONFIG_HOME is
    ignored, as the XDG base directory specification says)."""
    base = env_value("XDG_CONFIG_HOME") or ""
    return (Path(base) if os.path.isabs(base) else Path.home() / ".config") / "patchkit"


def state_dir() -> Path:
    """$XDG_STATE_HOME/patchkit, default ~/.local/state/patchkit: what patchkit must not lose
    (the mirror of each target's journal, patchkit/base/journal.py)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state") / "patchkit"


def journal_mirror(root: Path) -> Path:
    """Where the copy of a target's journal is kept (patchkit/base/journal.py): one file per
    target root, named by a digest of its absolute path."""
    try:  # BLAKE2 without hashlib: the fast `status` keys its cache on this path
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover - other Pythons
        from hashlib import blake2b
    key = blake2b(str(Path(root).absolute()).encode(), digest_size=16).hexdigest()
    return state_dir() / "journals" / f"{key}.json"


def user_recipes_dir() -> Path:
    """The user's own recipes, for every project: ``config_dir()/recipes``."""
    return config_dir() / "recipes"


def shipped_recipes_dir() -> Optional[Path]:
    """The recipes installed with patchkit (the package ``patchkit.recipes``, which the
    build maps from the checkout's ``recipes/``), or the checkout's ``recipes/`` when
    patchkit runs from a source tree that was not installed.  None when neither exists."""
    beside = Path(__file__).parents[1] / "recipes"  # installed: patchkit/recipes, found without importlib
    if beside.is_dir():
        return beside
    from importlib.util import find_spec  # an editable install maps the package elsewhere

    try:
        spec = find_spec("patchkit.recipes")
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or ()) if spec is not None else ():
        if os.path.isdir(loc):
            return Path(loc)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "recipes").is_dir():
        return checkout / "recipes"
    return None
