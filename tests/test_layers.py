"""Imports point one way: cli -> commands -> features -> core -> primitives, with no circles.

The graph is built statically (``ast`` over patchkit/**/*.py), counting imports at the top
of a module and inside functions alike: a function-level import is still a dependency, only
a later one.  Every module sits in a layer's package, so the tree shows the layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "patchkit"

# Lowest first.  A module may import its own layer and the layers below it, never above.  A
# layer is a set of packages, so the tree shows the layering: a new module is placed on purpose
# by the directory it is put in (each package's docstring says what belongs there).
LAYERS: dict[str, tuple[str, ...]] = {
    "primitives": ("patchkit", "patchkit.base", "patchkit.base.*"),  # patchkit: __version__ only
    "core": ("patchkit.core", "patchkit.core.*"),
    "features": tuple(
        f"patchkit.{part}{tail}" for part in ("upstream", "fleet", "authoring", "verify") for tail in ("", ".*")
    ),
    "commands": ("patchkit.commands", "patchkit.commands.*"),
    "cli": (
        "patchkit.cli",
        "patchkit.cli.*",
        "patchkit.toplevel",
        "patchkit.__main__",
        "patchkit.completion",
    ),
}

# Known exceptions, each with its reason; an entry that no longer holds fails the test, so the
# list only shrinks.  Edges are (importer, imported).
KNOWN_UPWARD: dict[tuple[str, str], str] = {}  # none: the core is handed pristine code (session.Releases)
KNOWN_CYCLES: dict[frozenset, str] = {}  # none: pristine reads releases from fetch, not drift


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _graph() -> dict[str, set[str]]:
    """module -> the patchkit modules it imports (a ``from X import name`` of a submodule
    counts as importing the submodule)."""
    mods = _modules()

    def owner(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        got: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                got |= {owner(a.name) for a in node.names if a.name.split(".")[0] == "patchkit"}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if base.split(".")[0] != "patchkit":
                    continue
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    got.add(sub if sub in mods else owner(base))
        got.discard(mod)
        edges[mod] = got
    return edges


def _layer(mod: str) -> int:
    for rank, (_, names) in enumerate(LAYERS.items()):
        for n in names:
            if mod == n or (n.endswith(".*") and mod.startswith(n[:-1])):
                return rank
    raise KeyError(mod)


def _cycles(edges: dict[str, set[str]]) -> list[frozenset]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    unplaced = [m for m in sorted(_modules()) if not _placed(m)]
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"


def _placed(mod: str) -> bool:
    try:
        _layer(mod)
    except KeyError:
        return False
    return True


def test_no_module_imports_a_higher_layer():
    names = list(LAYERS)
    upward = {
        (m, d): f"{m} ({names[_layer(m)]}) imports {d} ({names[_layer(d)]})"
        for m, deps in _graph().items()
        for d in deps
        if _layer(d) > _layer(m)
    }
    new = sorted(v for k, v in upward.items() if k not in KNOWN_UPWARD)
    assert not new, "imports that climb a layer:\n" + "\n".join(new)
    gone = sorted(set(KNOWN_UPWARD) - set(upward))
    assert not gone, f"known exceptions that no longer hold; delete them from KNOWN_UPWARD: {gone}"


def test_no_import_cycles():
    cycles = _cycles(_graph())
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"import cycles: {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"known cycles that no longer hold; delete them from KNOWN_CYCLES: {gone}"


@pytest.mark.parametrize(
    "edges, cycle",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, frozenset("abc")),
        ({"a": {"b"}, "b": set()}, None),
    ],
)
def test_the_cycle_finder_finds_a_cycle_and_only_one(edges, cycle):
    assert _cycles(edges) == ([cycle] if cycle else [])


def test_the_graph_counts_function_level_and_relative_imports():
    edges = _graph()
    assert "patchkit.commands.apply" in edges["patchkit.cli.tree"]  # imported inside a command function
    assert "patchkit.core.ops" in edges["patchkit.core.ops._cst"]  # `from . import ...` style or absolute
    assert _layer("patchkit.cli") > _layer("patchkit.commands.apply") > _layer("patchkit.fleet.doctor")
    assert _layer("patchkit.fleet.doctor") > _layer("patchkit.core.judge") > _layer("patchkit.base.target")
