"""Sparse release trees: a release in patchkit's cache (``trees/ENGINE-VERSION``) that holds
only the members a command has read so far (patchkit/upstream/lazytree.py makes them, from
the wheel by HTTP ranges).  Whoever reads a target's files asks here first, so that a read of
a member not yet there brings it in, and a search of the tree (relocate.py's grep and walk)
brings in every member it would read, before it looks:

- ``need(root, rels)``: the files at these paths (relative to the root), where the release
  has them;
- ``need_suffix(root, prefixes, suffix)``: every file under these directories ending in
  ``suffix`` (the judge's search for a moved site reads no others).

A tree is sparse while ``.patchkit/sparse.json`` is there; on any other tree both are a stat
and nothing else.  The provider (patchkit.upstream.lazytree, which may reach the index) is
installed by the layers above; a sparse tree read without one, or a copy of one outside the
cache (its missing files would be read as absent), is a TargetError, never a verdict from a
partial tree."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from patchkit.base.errors import TargetError

MARK = ".patchkit/sparse.json"

# (root, [relative paths]) -> None; (root, [directory prefixes], suffix) -> None
_need: Optional[Callable[[Path, list[str]], None]] = None
_need_suffix: Optional[Callable[[Path, list[str], str], None]] = None


def install(need: Callable[[Path, list[str]], None], need_suffix: Callable[[Path, list[str], str], None]) -> None:
    global _need, _need_suffix
    _need, _need_suffix = need, need_suffix


def is_sparse(root: Path) -> bool:
    return os.path.isfile(os.path.join(root, MARK))


def _check(root: Path) -> None:
    from patchkit.base.paths import cache_dir

    trees = cache_dir() / "trees"
    if Path(root).parent != trees and Path(os.path.realpath(root)).parent != Path(os.path.realpath(trees)):
        raise TargetError(
            f"{root}: a copy of a sparse release tree (it holds only the files a `drift` read, {MARK} says so);"
            " a file it lacks would be judged absent",
            "copy a whole release instead (`PATCHKIT_LAZY=0 patchkit drift ...` makes whole trees), or judge the"
            " release with `patchkit drift --to ENGINE==VERSION`",
        )
    if _need is None or _need_suffix is None:
        raise TargetError(
            f"{root}: a sparse release tree ({MARK}), and nothing in this process can fetch its other files",
            "read it through patchkit's commands (drift), or remove it from the cache (patchkit makes it again)",
        )


def need(root: Path, rels: list[str]) -> None:
    """Bring in the files at ``rels`` (paths relative to ``root``) where the release has them."""
    if not rels or not is_sparse(root):
        return
    _check(root)
    _need(Path(root), list(rels))  # type: ignore[misc]


def need_suffix(root: Path, prefixes: list[str], suffix: str) -> None:
    """Bring in every file under the directories ``prefixes`` (relative to ``root``, ``/``
    ended) whose name ends with ``suffix``: what a search of the tree would read."""
    if not is_sparse(root):
        return
    _check(root)
    _need_suffix(Path(root), list(prefixes), suffix)  # type: ignore[misc]
