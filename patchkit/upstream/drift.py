"""Upgrade preflight: judge recipes on pristine upstream releases.

Releases come from the package index through the same cache as `sync`, unpacked once
under ``<cache>/trees/<engine>-<version>`` and never written to afterwards, so every
judgement is made on pristine code.  ``across`` evaluates a range of releases on both
cores and caches each verdict; ``bisect`` evaluates only the releases needed to find where
each recipe's state changes.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

from packaging.version import InvalidVersion, Version

from patchkit.base import shape, store
from patchkit.base.errors import FetchError, PatchkitError
from patchkit.base.results import RecipeResult
from patchkit.base.states import State
from patchkit.base.target import ENGINES, open_target
from patchkit.core import learned
from patchkit.core.judge import evaluate
from patchkit.core.recipe import Catalog
from patchkit.core.session import Session
from patchkit.core.verdict import results
from patchkit.core.verdicts import code_hash
from patchkit.upstream import fetch
from patchkit.upstream.fetch import release_tree  # noqa: F401  (drift's name for it, kept for its callers)
from patchkit.upstream.pristine import RELEASES


def tree(engine: str, version: str, say: Callable[[str], None] = lambda s: None) -> Path:
    """The release as drift judges it: a sparse tree, each file fetched by range when the
    judge reads it (patchkit/upstream/lazytree.py), unless ``PATCHKIT_LAZY=0`` or the index
    serves no ranges (a whole tree, as ``release_tree`` gives every other caller)."""
    from patchkit.upstream import lazytree  # noqa: F401  (installs what a sparse tree is read through)

    return release_tree(engine, version, say=say, lazy=True)


def reads(engine: str, version: str) -> "dict | None":
    """How far the judge's reads of a release went (lazytree.extent): None for a whole tree."""
    from patchkit.upstream import lazytree

    d = fetch.cache_dir() / "trees" / f"{engine}-{version}"
    return lazytree.extent(d) if d.is_dir() else None


# A recipe in one of these would be applied by `apply` on that release, or needs nothing
# there: its ops read pending or upstream (applied, on a tree given by path), none moved,
# missing, ambiguous or modified (results.recipe_state folds those into the recipe), and no
# blocker stands.  Anything else (moved, missing, ambiguous, modified, blocked, interrupted)
# is what apply refuses or cannot vouch for: drift exits 1.
FINE = (State.PENDING, State.PARTIAL, State.UPSTREAM, State.APPLIED, State.APPLIED_UNSURE, State.FOREIGN)


def parse_spec(value: str) -> tuple[str, str, str]:
    """ENGINE==VERSION -> ("release", engine, version); ENGINE=PATH -> ("path", engine, path)."""
    if "==" in value:
        engine, version = value.split("==", 1)
        kind = "release"
    elif "=" in value:
        engine, version = value.split("=", 1)
        kind = "path"
    else:
        raise PatchkitError(f"--to {value!r}: expected ENGINE==VERSION or ENGINE=PATH", "e.g. --to sglang==0.5.13")
    engine = engine.strip()
    if engine not in ENGINES:
        raise PatchkitError(f"--to {value!r}: unknown engine {engine!r}", f"engines: {', '.join(ENGINES)}")
    if kind == "release":
        try:
            Version(version)
        except InvalidVersion:
            raise PatchkitError(f"--to {value!r}: {version!r} is not a version", "e.g. --to sglang==0.5.13") from None
    return kind, engine, version.strip()


def judge_release(catalog: Catalog, names: tuple[str, ...], trees: dict[str, Path]) -> list[RecipeResult]:
    recipes = [r for r in catalog.select(names) if set(r.engines) <= set(trees)]
    session = Session({e: open_target(e, p) for e, p in trees.items()}, releases=RELEASES)
    out = results(session, evaluate(session, recipes))
    learned.keep(session.learned)  # what judging learned, cached once it is done
    return out


def ok(res: list[RecipeResult]) -> bool:
    """Would apply apply every recipe on that release (or find it done)?  (``FINE``)"""
    return all(r.state in FINE for r in res)


def bad(res: "list[RecipeResult] | list[dict]") -> list[str]:
    """The recipes that keep ``ok`` from holding (results, or their JSON)."""
    return [r["id"] if isinstance(r, dict) else r.id for r in res if _state(r) not in FINE]


def out_of_range(res: list[RecipeResult]) -> list[str]:
    """The recipes whose version range leaves the release out: judged on their nearest
    variant, which apply skips there (without --ignore-range)."""
    return [r.id for r in res if r.in_range is False]


def _state(r) -> State:
    return State(r["state"] if isinstance(r, dict) else r.state)


# -- across releases --------------------------------------------------------------------------


def index_versions(dist: str, kind: str = "wheel") -> list[str]:
    """Every release the index has a wheel of for ``dist`` (``kind="any"``: or an sdist),
    oldest first; the releases in patchkit's cache when the index cannot be asked
    (offline, unreachable)."""
    try:
        return fetch.versions(dist, kind)
    except FetchError as e:
        places = [(fetch.wheel_dir(dist, "x").parent, "*.whl")]
        if kind == "any":
            places.append((fetch.sdist_dir(dist, "x").parent, "*.tar.gz"))
        found = {p.name for d, pat in places if d.is_dir() for p in d.iterdir() if any(p.glob(pat))}
        got = sorted(found, key=Version)
        if got:
            return got
        raise PatchkitError(f"cannot list the releases of {dist}: {e.message}", e.hint) from None


def parse_range(value: str) -> tuple[str, str, str]:
    m = re.match(r"^([a-z_-]+)==([^.][^ ]*?)\.\.([^ ]+)$", value)
    if not m or m.group(1) not in ENGINES:
        raise PatchkitError(f"--across {value!r}: expected ENGINE==A..B", "e.g. --across sglang==0.5.9..0.5.23")
    return m.group(1), m.group(2), m.group(3)


def versions_between(engine: str, a: str, b: str) -> list[str]:
    lo, hi = Version(a), Version(b)
    info = ENGINES[engine]
    listed = index_versions(info.dist, "any") if info.reference == "sdist" else index_versions(info.dist)
    allv = [v for v in listed if lo <= Version(v) <= hi]
    allv = [v for v in allv if not Version(v).is_prerelease or v in (a, b)]
    if not allv:
        raise PatchkitError(f"no {engine} release between {a} and {b} on the index")
    return allv


def _cache_key(catalog: Catalog, names, engine: str, version: str, others: dict[str, str]) -> str:
    """The key of one combination of releases' verdicts: the same whether `--across` or
    `--to` asks for it (the releases as one sorted set, not which engine was walked)."""
    h = hashlib.sha256(
        json.dumps(
            [
                code_hash(),
                sorted((r.id, r.sha256) for r in catalog.select(names)),
                sorted({**others, engine: version}.items()),
            ]
        ).encode()
    )
    return h.hexdigest()[:24]


def judge_releases(catalog: Catalog, names: tuple[str, ...], versions: dict[str, str]) -> list[RecipeResult]:
    """The recipes judged on these releases ({engine: version}, each unpacked by
    release_tree), answered from the cache `--across` keeps when this combination was
    judged before: a repeated `drift --to` costs a lookup, not a judgement."""
    engine = min(versions)
    others = {e: v for e, v in versions.items() if e != engine}
    key = _cache_key(catalog, names, engine, versions[engine], others)
    hit = _cached(key)
    if hit is not None:
        return [RecipeResult.from_json(d) for d in hit]
    res = judge_release(catalog, names, {e: tree(e, v) for e, v in versions.items()})
    store.put_json("drift", key, [r.to_json() for r in res])
    return res


def _worker(args) -> tuple[str, list[dict]]:
    recipe_dirs, names, engine, version, others = args
    catalog = Catalog.load(recipe_dirs)
    trees = {e: tree(e, v) for e, v in others.items()}
    trees[engine] = tree(engine, version)
    return version, [r.to_json() for r in judge_release(catalog, names, trees)]


def across(
    catalog: Catalog,
    recipe_dirs: "Path | list",
    names: tuple[str, ...],
    engine: str,
    versions: list[str],
    others: "dict[str, str] | Callable[[str], dict[str, str]]",
    jobs: int = 2,
    say: Callable[[str], None] = lambda s: None,
) -> dict[str, list[dict]]:
    """{version: recipe results as JSON} for each version, cached, on ``jobs`` processes.
    ``others``: the other engines' releases ({engine: version}), the same for every
    version, or a function of the version (the releases that version requires)."""
    with_ = others if callable(others) else (lambda v, o=others: o)
    out: dict[str, list[dict]] = {}
    todo = []
    for v in versions:
        hit = _cached(_cache_key(catalog, names, engine, v, with_(v)))
        if hit is not None:
            out[v] = hit
        else:
            todo.append(v)
    # Download in this process (one progress line each), judge in parallel.
    for v in todo:
        tree(engine, v, say=say)
        for e, ov in with_(v).items():
            tree(e, ov, say=say)
    # Newest first: later releases hold more code and take longer to judge, and the longest
    # started first leave no long one running alone at the end (results are by version).
    args = [(recipe_dirs, names, engine, v, with_(v)) for v in _newest_first(todo)]  # the workers load the same catalog
    from patchkit.base.progress import working

    tick = _progress(len(args))
    with working(f"judging {len(args)} {engine} release(s)", lambda: f"{tick.count[0]} done"):
        if len(args) > 1 and jobs > 1:
            with ProcessPoolExecutor(max_workers=min(jobs, len(args))) as pool:
                done = [tick(r) for r in pool.map(_worker, args)]
        else:
            done = [tick(_worker(a)) for a in args]
    for v, res in done:
        out[v] = res
        key = _cache_key(catalog, names, engine, v, with_(v))
        store.put_json("drift", key, res)
    return {v: out[v] for v in versions}


def _newest_first(versions: list[str]) -> list[str]:
    """The versions, newest first (as given where one does not parse)."""
    try:
        return sorted(versions, key=Version, reverse=True)
    except InvalidVersion:
        return list(versions)


def _cached(key: str) -> "list[dict] | None":
    """A release's cached verdicts, or None: nothing there, not a regular file (a link, a
    FIFO), not JSON, or not the shape ``across`` writes (judged again, and replaced)."""
    return store.get_json("drift", key, shape.RESULTS)


def _progress(total: int):
    """A ``k/N releases judged`` line on stderr, rewritten in place, when stderr is a
    terminal (never in logs or pipes); returns the function that counts one done."""
    shown = total > 1 and sys.stderr.isatty()
    count = [0]

    def tick(result):
        count[0] += 1
        if shown:
            end = "\n" if count[0] == total else ""
            print(f"\r{count[0]}/{total} releases judged", end=end, file=sys.stderr, flush=True)
        return result

    tick.count = count  # type: ignore[attr-defined]  (how many are done, for progress off a terminal)
    return tick


def pairing_lines(engine: str, shown: list[str], with_: dict) -> list[tuple[str, str]]:
    """One line per other engine: which of its releases each column was judged with."""
    out = []
    for e in sorted({e for v in shown for e in with_.get(v, {})}):
        by = {with_[v][e]["by"] for v in shown if e in with_[v]}
        vs = sorted({with_[v][e]["version"] for v in shown if e in with_[v]})
        if by == {"required"}:
            why = f"{e}: the release each {engine} release requires (its Requires-Dist; --to {e}==V to choose one)"
        elif by == {"--to"}:
            why = f"{e}: {vs[0]} for every release (--to)"
        elif by == {"pin"}:
            why = f"{e}: {vs[0]} for every release (the pin in upstream_pins.toml)"
        else:
            why = f"{e}: the release each {engine} release requires, the pin where it names none"
        out.append((e, why))
    return out


def cell(r: dict) -> str:
    """A recipe's state for a matrix cell; ``pending+2up`` when some ops are upstream already."""
    up = sum(1 for o in r["ops"] if o["state"] == State.UPSTREAM)
    if r["state"] != State.UPSTREAM and up:
        return f"{r['state']}+{up}up"
    return r["state"]


def signature(results: list[dict]) -> dict[tuple[str, str], str]:
    """What bisect compares between releases: each recipe's cell, each op's state and where
    it stands (file::scope, without the line, which moves with every edit upstream), and the
    blockers standing.  Keys are (recipe, "" | "op #n" | "blockers")."""
    out: dict[tuple[str, str], str] = {}
    for r in results:
        out[(r["id"], "")] = cell(r)
        for o in r["ops"]:
            where = o["location"].rsplit(":", 1)[0] if o["location"].count(":") >= 3 else o["location"]
            out[(r["id"], f"op #{o['index']}")] = f"{o['state']} at {where or o['file']}"
        stand = sorted(f"{b['blocker']} at {b['file']}" for b in r.get("blockers", ()))
        if stand:
            out[(r["id"], "blockers")] = ", ".join(stand)
    return out


def bisect(
    evaluate_at: Callable[[list[str]], dict[str, list[dict]]], versions: list[str]
) -> tuple[dict[str, list[dict]], list[tuple[str, str, str, str, str, str]]]:
    """Find each change between consecutive releases, of a recipe's state, of an op's state
    or place, or of the blockers standing, evaluating O(log n) releases per change.
    Returns (the evaluated releases, [(recipe, what, from_version, to_version, old, new)])
    where ``what`` is "" for the recipe, "op #n", or "blockers"."""
    seen: dict[str, list[dict]] = {}

    def at(idxs: list[int]) -> None:
        need = [versions[i] for i in idxs if versions[i] not in seen]
        if need:
            seen.update(evaluate_at(need))

    def sig(i: int) -> dict:
        return signature(seen[versions[i]])

    changes = []
    at([0, len(versions) - 1])
    stack = [(0, len(versions) - 1)]
    while stack:
        lo, hi = stack.pop()
        if sig(lo) == sig(hi):
            continue  # assume no change in between (the bisect premise)
        if hi - lo == 1:
            a, b = sig(lo), sig(hi)
            changes += [
                (k[0], k[1], versions[lo], versions[hi], a.get(k, "-"), b.get(k, "-"))
                for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)
            ]
            continue
        mid = (lo + hi) // 2
        at([mid])
        stack += [(mid, hi), (lo, mid)]
    changes.sort(key=lambda c: (c[0], Version(c[3]), c[1]))
    return seen, changes
