"""Site identity: is a place where an op's pattern matches the op's site, or other code?

A pattern alone is a ``sed`` address: after a refactor or an upgrade it can match code the
recipe never meant (a new SM100-only check, a list of the same names in another function).
So an op's site also has an *identity*, taken from a release the recipe was written for
(its *home*): the context of each occurrence of the site there (context.py: the enclosing
scope, the site's own statement, NEAR statements or lines before and after it, like a
unified diff hunk's context lines, the rest of its block, and what its file imports).

The home is the target's own pristine release when its version is in the op's range (the
recipe's engines, the op's ``when``) and that release holds the site; else the oldest
release in range whose wheel is in patchkit's cache and holds the site; else the pinned
release (upstream_pins.toml), when it is in range.  A recipe may carry a Python op's
identity itself (``[ops.identity]``, written by `capture` and `port`: carried.py); then
that is the identity, and no release is read.  A derived identity is
cached on disk (``<cache>/identity``), keyed on patchkit's code, the recipe's bytes, the op
and the release; an entry that does not read back as one is a miss.

A candidate is the site when its similarity (``context.similarity``, in [0, 1]) reaches
THRESHOLD, the bar GumTree and Clang's ASTDiff set for matching subtrees and git for a
rename (50%); it has *moved* there only when it also leads the runner-up by MARGIN.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from patchkit.base.model import OpSpec, Recipe, holds
from patchkit.core import context, pyscope
from patchkit.core.learned import IDENTITY
from patchkit.core.ops import AMBIGUOUS, DONE, PENDING, Located

THRESHOLD = 0.5  # GumTree / Clang ASTDiff MinSimilarity, git -M50%
MARGIN = 0.15  # the best candidate leads the runner-up by this much, or it is a tie
MAX_SITES = 16  # occurrences of one site compared (a text op's 13 guards, say)
FORMAT = 7  # 4: a site's context lines run across its enclosing blocks (context.site_run); 5: JSON;
# 6: the arms and the fold around the site (folds.py); 7: the calls the site's names feed
SITE_DONE = 0.75  # a done site in its own scope: this share of the release's statement's tokens


@dataclass(frozen=True)
class Identity:
    """The site as it stood in its home release: one Context per occurrence."""

    release: str  # e.g. "sglang 0.5.9"
    sites: tuple[context.Context, ...]
    # The op could not single out its site there (its pattern stands at several places of its
    # scope): no place of another release can be shown to be the site either (``of``).
    ambiguous: bool = False


@dataclass(frozen=True)
class Candidate:
    """A place that may be the site, scored against the identity."""

    file: str
    scope: str
    line: Optional[int]
    score: float
    parts: tuple[str, ...]

    def where(self) -> str:
        return f"{self.file}::{self.scope or '<module>'}" + (f":{self.line}" if self.line else "")

    def describe(self) -> str:
        return f"{self.where()} ({self.score:.2f}: {', '.join(self.parts) or 'nothing matched'})"

    def to_json(self) -> dict:
        return {
            "location": f"{self.file}::{self.scope or '<module>'}",
            "line": self.line,
            "score": round(self.score, 3),
            "matched": list(self.parts),
        }


# -- scoring (pure) --------------------------------------------------------------------------


def score(ident: Identity, cands: tuple[context.Context, ...]) -> tuple[float, tuple[str, ...]]:
    """A candidate's similarity to the identity: every occurrence it has is matched to the
    most alike of the identity's, and the scores averaged (the parts are its first's)."""
    if not ident.sites or not cands:
        return 0.0, ()
    total, parts = 0.0, ()
    for i, c in enumerate(cands[:MAX_SITES]):
        best = max((context.similarity(o, c) for o in ident.sites), key=lambda sp: sp[0])
        total += best[0]
        if i == 0:
            parts = best[1]
    return total / min(len(cands), MAX_SITES), parts


def unchanged_in_scope(op: OpSpec, parts: tuple[str, ...], done: bool = False) -> bool:
    """The site's own statement, token for token, in the same qualified scope: that is the
    site, however much upstream rewrote around it (a Python op finds one match in its scope
    or reads ambiguous, so there is no other).  A site found done differs from the
    release's by the edit itself (and upstream may add an argument beside it), so there
    SITE_DONE of its tokens suffice.  Not for a text op: a file has no scope."""
    if op.impl.language != "python" or "scope" not in parts:
        return False
    if "site" in parts:
        return True
    if not done:
        return False
    ratios = [p[len("site ") : -1] for p in parts if p.startswith("site ") and p.endswith("%")]
    return any(r.isdigit() and int(r) / 100 >= SITE_DONE for r in ratios)


def decide(ranked: list[Candidate]) -> str:
    """ "moved" (the best passes THRESHOLD and leads by MARGIN), "ambiguous" (it passes but
    does not lead), or "missing" (nothing passes); ``ranked`` is best first."""
    if not ranked or ranked[0].score < THRESHOLD:
        return "missing"
    second = ranked[1].score if len(ranked) > 1 else 0.0
    return "moved" if ranked[0].score - second >= MARGIN else "ambiguous"


def _kept_name(site: str, cand: str) -> int:
    """How many names of the site's qualified scope a candidate's keeps, from the innermost
    out: ``A.f`` in ``B.f`` keeps 1, in ``A.f`` 2, in ``B.g`` 0."""
    mine, theirs = site.split(".") if site else [], cand.split(".") if cand else []
    n = 0
    while n < min(len(mine), len(theirs)) and mine[-1 - n] == theirs[-1 - n]:
        n += 1
    return n


def by_name(ident: Identity, ranked: list[Candidate]) -> Optional[Candidate]:
    """A tie (the best passes THRESHOLD, a runner-up within MARGIN) broken by the name of the
    def or class the site stood in, as git breaks a tie between rename sources by the file's
    basename: the best candidate, when its scope keeps more of the site's qualified name,
    from the innermost name out, than every tied one (``_kept_name``): a class renamed around
    a method that kept its own (``NativeSparseAttnBackend.init_forward_metadata`` ->
    ``DeepseekSparseAttnBackend.init_forward_metadata``, its twin call in
    ``_build_forward_metadata_cuda_graph`` within the margin), or a method moved with its
    class to a new module, beside a sibling class's method of the same name.  Never a
    runner-up over a better score, never where the best keeps no name, and never between
    places that keep as much of it: then the name tells nothing.  None when it does not
    decide."""
    if not ranked or ranked[0].score < THRESHOLD or not ident.sites:
        return None
    names = {c.scope for c in ident.sites if c.scope}
    if len(names) != 1:
        return None
    (site,) = names
    tied = [c for c in ranked[1:] if ranked[0].score - c.score < MARGIN]
    best = ranked[0]
    kept = _kept_name(site, best.scope)
    if not tied or not kept or any(_kept_name(site, c.scope) >= kept for c in tied):
        return None
    return Candidate(best.file, best.scope, best.line, best.score, (*best.parts, "its scope's name"))


# -- contexts of sites in code ----------------------------------------------------------------


def _text_nodes(loc: Located) -> bool:
    """A text op's nodes are line numbers (in a Python file too: a comment's hunk)."""
    return all(isinstance(n, int) for n in loc.nodes)


def _lines(f, loc: Located) -> list[int]:
    if not f.is_python or _text_nodes(loc):
        return sorted({n for n in loc.nodes if isinstance(n, int)})
    found = pyscope.line_numbers(f.module, f.view, loc.nodes, f.text)
    return sorted(set(found.values()))


def contexts_in(
    f, scope: str, loc: Located, imports: frozenset = frozenset()
) -> tuple[tuple[context.Context, ...], Optional[int]]:
    """The context of each occurrence of a site found in a Document, and its first line."""
    lines = _lines(f, loc)[:MAX_SITES] if loc.nodes else []
    if not lines:
        return (), None
    if not f.is_python or _text_nodes(loc):
        return tuple(context.of_lines(f.text, ln, f.logical) for ln in lines), lines[0]
    tree = f.tree
    if tree is None:
        return (), lines[0]
    return tuple(context.of_site(tree, ln, f.logical, scope, imports) for ln in lines), lines[0]


def _of_release(ref, op: OpSpec, line: Optional[int] = None) -> Optional[tuple[context.Context, ...]]:
    """The contexts of the op's site in a pristine release (pristine.Reference), or None
    when the release does not hold it in the op's file and scope.  ``line``: the one place
    of several in the scope that the judge singled out (port's retargeted op, whose pattern
    matches twice there: the identity is that place's; an op kind with one place in its
    scope, which lists no places, reads its site as without ``line``)."""
    data = ref.read(op.file)
    if data is None:
        return None
    text = data.decode("utf-8", "surrogateescape")
    if op.impl.language != "python":
        loc = op.impl.locate(text)
        if loc.state == AMBIGUOUS and line is None:
            return AMBIGUOUS_HOME
        lines = sorted({n for n in loc.nodes if isinstance(n, int)}) if loc.state in (DONE, PENDING) else []
        return tuple(context.of_lines(text, ln, op.file) for ln in lines[:MAX_SITES]) or None
    module = ref.module(op.file)
    if module is None:
        return None
    try:
        loc = op.impl.locate(pyscope.resolve(module, op.scope)[-1])
    except pyscope.ScopeError:
        return None
    if loc.state == AMBIGUOUS and line is None:
        return AMBIGUOUS_HOME
    found: set = set()
    if line is not None:  # the op's places in its scope (none for a kind that has one place)
        places = op.impl.occurrences(pyscope.resolve(module, op.scope)[-1])
        found = {n for one in places for n in pyscope.line_numbers(module, None, one.nodes, text).values()}
    if not found and (loc.state not in (DONE, PENDING) or not loc.nodes):
        return None
    from patchkit.core import pyast

    try:
        tree = pyast.parsed(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if found:  # one of the op's places in its scope, or none
        if line not in found:
            return None
        lines = [line]
    else:
        lines = sorted(set(pyscope.line_numbers(module, None, loc.nodes, text).values()))[:MAX_SITES]
    imports = context.imports_of(tree, op.file)
    return tuple(context.of_site(tree, ln, op.file, op.scope, imports) for ln in lines) or None


# -- the home release -------------------------------------------------------------------------


def in_range(recipe: Recipe, op: OpSpec, version: Optional[str]) -> bool:
    if not version:
        return False
    spec = recipe.engines.get(op.engine)
    return (spec is None or spec.contains(version, prereleases=True)) and holds(
        tuple(w for w in op.when if w[0] == op.engine), {op.engine: version}
    )


_UPPER = ("<", "<=", "==", "===", "~=")


def bounded_above(recipe: Recipe, op: OpSpec) -> bool:
    """The op's range ends somewhere (the recipe's engine range or the op's ``when``): its
    author vouched for every release inside it.  ``>=0.6.3`` vouches for none after the one
    it was written for: a later release in it may hold the pattern at unrelated new code."""
    specs = [recipe.engines.get(op.engine)] + [w[1] for w in op.when if w[0] == op.engine]
    return any(s is not None and any(x.operator in _UPPER for x in s) for s in specs)


def floor(recipe: Recipe, op: OpSpec) -> Optional[str]:
    """Where an open range starts: the highest ``>=``/``==`` version of the recipe's engine
    range and the op's ``when`` (the release the recipe was written from), or None."""
    from packaging.version import InvalidVersion, Version

    specs = [recipe.engines.get(op.engine)] + [w[1] for w in op.when if w[0] == op.engine]
    found = [x.version for s in specs if s is not None for x in s if x.operator in (">=", "==", "===")]
    try:
        # ``>=0`` is "any release": it names no release the recipe was written from (and no
        # release 0 is asked of the index)
        found = [v for v in found if Version(v) != Version("0")]
        return max(found, key=Version) if found else None
    except InvalidVersion:
        return None


def own_release_in_range(session, recipe: Recipe, op: OpSpec) -> bool:
    """The target's own release is the op's home: it is in the op's range, and the range is
    bounded above, or it is where the open range starts (or the range names no start).
    Decided by the recipe alone, never by what the cache happens to hold: a verdict must not
    change with the order releases were downloaded in."""
    t = session.targets[op.engine]
    own = t.version and t.version.split("+", 1)[0]
    if not in_range(recipe, op, own):
        return False
    start = floor(recipe, op)
    return bounded_above(recipe, op) or start is None or not _older(start, own)


def _older(v: str, than: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v) < Version(than)
    except InvalidVersion:
        return False


def _known_releases(engine: str) -> list[str]:
    pinned = _pinned(engine)
    cached = _cached_releases(engine)
    return [*cached, *([pinned] if pinned and pinned not in cached else [])]


def _cached_releases(engine: str) -> list[str]:
    """Versions of the engine whose release wheel is in patchkit's cache, oldest first: the
    whole file, or its listing read by ranges (``lazy/DIST/VERSION/manifest.json``,
    patchkit/upstream/lazywheel.py), which reads it as well."""
    import re

    from packaging.version import InvalidVersion, Version

    from patchkit.base.paths import cache_dir, wheels_dir
    from patchkit.base.target import ENGINES

    dist = ENGINES[engine].dist
    out = {}
    for d, has in (
        (wheels_dir(dist), _has_wheel),
        (cache_dir() / "lazy" / re.sub(r"[-_.]+", "-", dist).lower(), lambda p: (p / "manifest.json").is_file()),
    ):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for v in names:
            try:
                key = Version(v)
            except InvalidVersion:
                continue
            try:
                if v not in out and has(d / v):
                    out[v] = key
            except OSError:
                continue
    return sorted(out, key=lambda v: out[v])


def _has_wheel(version_dir) -> bool:
    """A release's directory under wheels/ holds its whole wheel (OSError where it is not there)."""
    return any(n.endswith(".whl") for n in os.listdir(version_dir))


def _wheel_at_hand(engine: str, version: str) -> bool:
    """The release's whole wheel is in patchkit's cache (its bytes read without the network;
    a listing read by ranges is not: each member it has not stored is one more request)."""
    from patchkit.base.paths import wheels_dir
    from patchkit.base.target import ENGINES

    try:
        return _has_wheel(wheels_dir(ENGINES[engine].dist) / version)
    except (OSError, KeyError):
        return False


def _pinned(engine: str) -> Optional[str]:
    """The engine's version in the project's upstream_pins.toml, or None (none found, or
    not readable: the pins are checked where they are used, not here)."""
    from patchkit.base.errors import PatchkitError
    from patchkit.core import pins, project

    try:
        path = project.find_pins()
        pin = pins.load(path).get(engine) if path is not None else None
    except PatchkitError:
        return None
    return pin.version if pin is not None else None


def _homes(session, recipe: Recipe, op: OpSpec):
    """(label, reference) of each release the identity may come from, best first: the
    target's own when it is the home (own_release_in_range), else the release the open range
    starts at (downloaded, unless PATCHKIT_OFFLINE=1); then, only where that cannot be read,
    the releases in range in the cache, oldest first, and the pinned one."""
    t = session.targets[op.engine]
    own = (t.version or "").split("+", 1)[0]
    home = own_release_in_range(session, recipe, op)
    if home:
        ref = session.reference(op.engine)
        if ref.available:
            yield f"{op.engine} {t.version}", ref
    start = floor(recipe, op)
    for v in dict.fromkeys([*([start] if start else []), *_known_releases(op.engine)]):
        if v == own or not in_range(recipe, op, v):
            continue
        ref = session.release(op.engine, v)
        if ref.available:
            yield f"{op.engine} {v}", ref
    if not home and in_range(recipe, op, own):
        # No release the range starts from can be read (``>=0`` names none; offline): the
        # target's own release is still a better identity than none.
        ref = session.reference(op.engine)
        if ref.available:
            yield f"{op.engine} {t.version}", ref


def _cache_path(session, recipe: Recipe, op: OpSpec, release: str) -> str:
    """The key of an op's identity in a release in patchkit's store (patchkit/base/store.py)."""
    from patchkit.base import store

    return store.key(FORMAT, session.code, recipe.sha256, op.index, op.engine, release)


def _load(path) -> Optional[tuple]:
    """A cached identity, or None (the store misses it, or not of the right shape).  JSON,
    as every cache patchkit reads back (marshal trusts the lengths it reads)."""
    import json

    from patchkit.base import store

    data = store.get("identity", path)
    if data is None:
        return None
    try:
        raw = json.loads(data)
        if raw is False:
            return False  # the release does not hold the site (also worth remembering)
        if raw == AMBIGUOUS_HOME:
            return AMBIGUOUS_HOME
        sites = tuple(
            context.Context(
                str(f),
                str(s),
                tuple((str(a), str(b)) for a, b in blk),
                at,
                frozenset((str(m), str(n)) for m, n in imp),
                _header(hdr),
                _near(near),
                tuple((str(t), bool(side)) for t, side in arms),
                _fold(fold),
                tuple(str(x) for x in fed),
            )
            for f, s, blk, at, imp, hdr, near, arms, fold, fed in raw
        )
        if any(c.at is not None and not (isinstance(c.at, int) and 0 <= c.at < len(c.block)) for c in sites):
            return None
        return sites
    except (ValueError, TypeError, RecursionError):
        return None


def _near(raw) -> tuple:
    if not raw:
        return ()
    return tuple(tuple((str(a), str(b)) for a, b in side) for side in raw)


def _fold(raw) -> tuple:
    if not raw:
        return ()
    cond, side, a, b, before, after = raw
    return str(cond), bool(side), str(a), str(b), tuple(int(k) for k in before), tuple(int(k) for k in after)


def _header(raw) -> tuple:
    if not raw:
        return ()
    words, params = raw
    return tuple(str(w) for w in words), str(params)


def _save(path, sites) -> None:
    import json

    raw = (
        False
        if sites is None
        else AMBIGUOUS_HOME
        if sites == AMBIGUOUS_HOME
        else [
            (c.file, c.scope, list(c.block), c.at, sorted(c.imports), c.header, c.near, c.arms, c.fold, c.feeds)
            for c in sites
        ]
    )
    from patchkit.base import store

    store.put("identity", path, json.dumps(raw).encode())


AMBIGUOUS_HOME = "ambiguous"  # _of_release: the op's pattern stands at several places there


def of(session, recipe: Recipe, op: OpSpec) -> Optional[Identity]:
    """The op's identity (once per invocation), or None when no release in range that
    patchkit can read holds the site.  The first home release that holds the op's pattern
    decides: where the op cannot single its site out there (ambiguous where it was written),
    the identity says so (``ambiguous``), and no other release is asked."""
    if op.identity is not None:  # carried in the recipe (capture, port; carried.py): as written
        return Identity(*op.identity)
    key = (recipe.id, recipe.sha256, op.index)
    if key in session.identities:
        return session.identities[key]
    found = None
    for label, ref in _homes(session, recipe, op):
        path = _cache_path(session, recipe, op, label)
        if session.learned.knows(IDENTITY, str(path)):  # learned earlier in this run
            sites = session.learned.get(IDENTITY, str(path))
            sites = False if sites is None else sites
        else:
            sites = _load(path)
        if sites is None:
            sites = _of_release(ref, op)
            session.learned.add(IDENTITY, str(path), sites)  # kept after judging (learned.keep)
        if sites == AMBIGUOUS_HOME:
            found = Identity(label, (), ambiguous=True)
            break
        if sites:
            found = Identity(label, sites)
            break
    session.identities[key] = found
    return found


def holds_as_released(session, recipe: Recipe, op: OpSpec, f) -> bool:
    """The file is its own release's, byte for byte (or, with that release's wheel not in
    the cache, the installed RECORD lists these bytes), and that release is in the op's
    range: wherever the op finds its site there, that is the site (no parse needed)."""
    if not own_release_in_range(session, recipe, op):
        return False
    t = session.targets[op.engine]
    if t.layout == "package" and not _wheel_at_hand(op.engine, (t.version or "").split("+", 1)[0]):
        # No release wheel at hand to compare with (none, or only its listing read by ranges,
        # whose members cost a request): rather than fetch one, believe the installer's RECORD
        # when it lists exactly these bytes (pip wrote the file and the row).
        from patchkit.core.record import installed_as

        if installed_as(t, f.logical, f.original):
            return True
    ref = session.reference(op.engine)
    return ref.available and ref.read(f.logical) == f.original
