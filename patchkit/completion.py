"""Shell completion of the values that name an engine and a release or a tree (click's own
completion protocol; cli.release_option declares it): ``-t/--target ENGINE=PATH``, ``--to`` (a release
or a tree), ``--from ENGINE==VERSION`` and ``--across ENGINE==A..B``.

Engines first (``sglang=``/``sglang==``), then the versions patchkit's cache holds wheels of,
and the pins' (offline, instant); with none of those, the package index's list.  Paths are
completed as ``ENGINE=PATH`` by listing the directory (a shell's own file completion would
take ``sglang=`` for part of the name).
"""

from __future__ import annotations

import os
from pathlib import Path

from click.shell_completion import CompletionItem

from patchkit.base import paths
from patchkit.base.target import ENGINES

TREE_ONLY = {"target"}  # ENGINE=PATH
RELEASE_ONLY = {"sources", "across"}  # ENGINE==VERSION (or A..B)


def _versions(engine: str) -> list[str]:
    from packaging.version import InvalidVersion, Version

    from patchkit.upstream import fetch

    dist = ENGINES[engine].dist
    d = paths.wheels_dir(dist)
    found = {p.name for p in d.iterdir() if any(p.glob("*.whl"))} if d.is_dir() else set()
    if not found and not fetch.offline():
        try:
            found = set(fetch.versions(dist))
        except Exception:  # unreachable: nothing to offer, never an error
            found = set()

    def key(v: str):
        try:
            return (0, Version(v))
        except InvalidVersion:
            return (1, v)

    return sorted(found, key=key)


def _paths(engine: str, partial: str) -> list[CompletionItem]:
    head, _, tail = partial.rpartition("/")
    base = Path(os.path.expanduser(head or ".")) if head or not partial.startswith("/") else Path("/")
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith(tail) and (tail or not n.startswith(".")))
    except OSError:
        return []
    out = []
    for n in names:
        shown = f"{head}/{n}" if head or partial.startswith("/") else n
        if (base / n).is_dir():
            shown += "/"
        out.append(CompletionItem(f"{engine}={shown}", type="plain"))
    return out


def release_values(option: str, incomplete: str) -> list[CompletionItem]:
    sep = "=" if option in TREE_ONLY else "=="
    if "=" not in incomplete:
        return [CompletionItem(e + sep, help=ENGINES[e].dist) for e in ENGINES if e.startswith(incomplete)]
    engine, _, value = incomplete.partition("=")
    if engine not in ENGINES:
        return []
    if value.startswith("=") and option not in TREE_ONLY:
        value = value[1:]
        if option == "across" and ".." in value:
            first, _, last = value.partition("..")
            return [CompletionItem(f"{engine}=={first}..{v}") for v in _versions(engine) if v.startswith(last)]
        return [CompletionItem(f"{engine}=={v}") for v in _versions(engine) if v.startswith(value)]
    if option in RELEASE_ONLY:
        return []
    return _paths(engine, value)
