"""Imports point one way: cli -> commands -> features -> core -> primitives, with no circles.

The graph is built statically (``ast`` over patchkit/**/*.py), counting imports at the top
of a module and inside functions alike: a function-level import is still a dependency, only
a later one.  Every module must be named in LAYERS, so a new module is placed on purpose."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "patchkit"

# Lowest first.  A module may import its own layer and the layers below it, never above.
LAYERS: dict[str, tuple[str, ...]] = {
    "primitives": (
        "patchkit",  # __version__ only
        "patchkit.errors",
        "patchkit.regular",
        "patchkit.fsio",
        "patchkit.paths",
        "patchkit.states",
        "patchkit.shape",
        "patchkit.results",
        "patchkit.gitcli",
        "patchkit.engines",
        "patchkit.target",
        "patchkit.config",
        "patchkit.model",
        "patchkit.journal",
        "patchkit.memo",  # answers kept under the digest of the bytes they come from
        "patchkit.term",  # echo and colour, click's bytes without click
    ),
    "core": (
        # recipes: reading and the catalog; the project (pins, recipe dirs, targets)
        "patchkit.recipe",
        "patchkit.pins",
        "patchkit.project",
        # ops and the documents they edit
        "patchkit.ops",
        "patchkit.ops.*",
        "patchkit.pyscope",
        "patchkit.view",
        "patchkit.document",
        # judging, planning, writing
        "patchkit.folds",
        "patchkit.context",
        "patchkit.carried",
        "patchkit.identity",
        "patchkit.edited",
        "patchkit.follow",
        "patchkit.fuzzed",
        "patchkit.equivalent",
        "patchkit.provenance",
        "patchkit.markers",
        "patchkit.relocate",
        "patchkit.blockers",
        "patchkit.confirm",
        "patchkit.verdicts",
        "patchkit.verdict",  # the judge's answer, a value (what the planner and commands read)
        "patchkit.session",  # the inputs of one invocation, read once (targets, journals, documents)
        "patchkit.judge",
        "patchkit.planner",
        "patchkit.verify.names",
        "patchkit.transaction",
        "patchkit.txnrecord",
        "patchkit.plancache",  # a plan made before, replayed by the transaction
        # RECORD upkeep is part of a write (the transaction keeps an installed copy's RECORD
        # true), so it sits in the core, though wheels and doctor use it too
        "patchkit.record",
        "patchkit.report",  # verdicts as text and JSON, for every command that judges
    ),
    "features": (
        # knowledge of upstream
        "patchkit.fetch",
        "patchkit.pristine",
        "patchkit.gitsrc",
        "patchkit.drift",
        "patchkit.drift_html",
        "patchkit.port",
        # the fleet
        "patchkit.wheel",
        "patchkit.fork",
        "patchkit.doctor",
        "patchkit.interp",
        "patchkit.profile",
        "patchkit.jit",
        # authoring
        "patchkit.hunks",
        "patchkit.capture",
        "patchkit.pycapture",
        "patchkit.examples",
        # verify's builds
        "patchkit.verify",
        "patchkit.verify.*",
    ),
    "commands": ("patchkit.commands", "patchkit.commands.*"),
    "cli": (
        "patchkit.cli",
        "patchkit.cli.*",
        "patchkit.main",
        "patchkit.toplevel",
        "patchkit.__main__",
        "patchkit.completion",
    ),
}

# Known exceptions, each with its reason; an entry that no longer holds fails the test, so the
# list only shrinks.  Edges are (importer, imported).
KNOWN_UPWARD: dict[tuple[str, str], str] = {
    ("patchkit.judge", "patchkit.pristine"): (
        "the judge reads pristine references itself (issue 22, item 1: judge(recipes, trees, "
        "references) is to be given them)"
    ),
    ("patchkit.session", "patchkit.pristine"): (
        "the session opens the pristine references the judge reads (moved out of judge.py with the "
        "Session; it goes with the judge's references above)"
    ),
    ("patchkit.identity", "patchkit.pristine"): (
        "a site's identity is read from a release in the recipe's range, opened where it is "
        "needed; it goes with the judge's references above"
    ),
}
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
    assert "patchkit.ops" in edges["patchkit.ops._cst"]  # `from . import ...` style or absolute
    assert _layer("patchkit.cli") > _layer("patchkit.commands.apply") > _layer("patchkit.doctor")
    assert _layer("patchkit.doctor") > _layer("patchkit.judge") > _layer("patchkit.target")
