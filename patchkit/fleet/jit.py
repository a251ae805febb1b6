"""FlashInfer's JIT cache, and what a C++ edit does to it.

Read from flashinfer/jit/core.py and env.py (0.6.3 .. 0.6.16): compiled modules live in
``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops/<module>/``
(the base defaults to ``~``).  ``JitSpec.build`` runs ninja there; ninja's depfiles rebuild
objects whose .cu/.cuh inputs are newer, **but build.ninja is written only when it does
not exist yet**, so changed nvcc flags (the arch list in flashinfer/jit/comm.py) are not
picked up until the module's directory is deleted.  An installed flashinfer-jit-cache
(AOT) package takes precedence over the JIT entirely.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def cache_base() -> Path:
    """The JIT cache of the engine that compiles at run time: its definition's ``cache``
    (relative to ``$<cache_env>``, default the home directory)."""
    from patchkit.base.target import ENGINES

    info = ENGINES.with_jit()
    if info is None or not info.jit.get("cache"):
        return Path(os.devnull)  # no engine compiles at run time: a path that holds no build
    base = os.environ.get(info.jit.get("cache_env", ""), "") or str(Path.home())
    return Path(base) / info.jit["cache"]


def module_dirs(version: str | None, module: str) -> list[Path]:
    base = cache_base()
    return sorted(base.glob(f"{version or '*'}/*/cached_ops/{module}"))


def note(version: str | None, modules: set[str], clear: bool) -> list[str]:
    lines = []
    for m in sorted(modules):
        dirs = module_dirs(version, m)
        pattern = f"{cache_base()}/{version or '*'}/*/cached_ops/{m}"
        if clear:
            from patchkit.base import fsio

            # FlashInfer's cache is the user's: a build directory reached through a link
            # planted inside it is left alone (the link may point anywhere).
            kept = [d for d in dirs if not fsio.below_without_links(cache_base(), d)]
            dirs = [d for d in dirs if d not in kept]
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
            for d in kept:
                lines.append(f"FlashInfer JIT: left {d} alone: it is reached through a link inside {cache_base()}")
            lines.append(
                f"FlashInfer JIT: removed {len(dirs)} cached build(s) of {m} ({pattern}); it is rebuilt on first use."
            )
        elif dirs:
            lines.append(
                f"FlashInfer JIT: {len(dirs)} cached build(s) of {m} are stale ({pattern}). ninja would rebuild "
                "the objects "
                "but keep the old nvcc arch flags, because FlashInfer writes build.ninja only once. Clear them: "
                f"rm -rf {pattern}  (or rerun with --clear-jit-cache)."
            )
        else:
            lines.append(
                f"FlashInfer JIT: no cached build of {m} under {cache_base()}; it will be compiled from the edited "
                "sources on first use."
            )
    if lines:
        lines.append(
            "FlashInfer JIT: if flashinfer-jit-cache (prebuilt AOT kernels) is installed, it is used instead and "
            "these source edits have no effect."
        )
    return lines
