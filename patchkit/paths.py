"""Where patchkit keeps what it downloads and computes (a module of its own so that a
fast `status` can find its cache without importing the download machinery)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """~/.cache/patchkit, or $PATCHKIT_CACHE."""
    return Path(os.environ.get("PATCHKIT_CACHE", Path.home() / ".cache" / "patchkit"))
