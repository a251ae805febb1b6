"""Porting a recipe to a new release: the ``when`` variant it needs there, drafted from
drift's findings and verified on the pristine release before it is written.

The recipe's ops of one engine that the judge picks for the release (the variant drift
judges there) are judged on the release's tree (judge.py: relocation, companion ops that
follow their anchor, upstream markers, blockers).  Each op then is

* ``pending``: carried into the draft as it is;
* ``upstream``: left out (its ``when`` ends below the release; all upstream: retire);
* ``moved``: carried with the file and scope the verdict found (``followed`` when it
  followed its anchor op to the anchor's new file);
* ``missing`` where upstream may have made the edit in other words (equivalent.py finds
  code at the identified place that mentions the edit's key words): carried with a
  *proposed* marker for that code (``[[ops.markers]]`` with ``proposed = "..."``), which
  counts only once a person has read the code and deleted the ``proposed`` line; the
  draft is verified with it confirmed (the op must then read upstream there);
* ``missing`` / ``ambiguous`` (or any other state): left for a person, with the three
  statements of the release's tree nearest to its anchor by token similarity
  (``nearest``).

The draft is a new ``[[variants]]`` block with ``when = { ENGINE = ">=VERSION" }`` holding
those ops; the ops it replaces get their ``when`` (or their variant's) ended below VERSION,
and ``[engines]`` is widened to the release when it is outside.  The drafted recipe is
parsed and validated (recipe.py), judged and planned with every check of `apply`
(planner.py, in memory: nothing is written to the release) before `port --write` puts it
into the recipe file, with tomlkit, so that every comment and line of layout stays.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from packaging.specifiers import Specifier, SpecifierSet
from packaging.version import Version

from patchkit.base.errors import PatchkitError, RecipeError
from patchkit.base.model import OpSpec, Recipe
from patchkit.base.states import State
from patchkit.base.target import Target
from patchkit.core import relocate
from patchkit.core.ops._cst import tokens, words

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NEAREST = 3  # candidates shown per missing anchor
MAX_FILES = 200  # a word in more files than this does not say where code went
FILES_READ = 60  # files parsed per missing anchor (those holding most of its words)


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A statement of the release's tree that resembles a missing op's anchor."""

    file: str
    line: int
    scope: str
    similarity: float  # difflib ratio of the two token sequences, 0..1
    text: str  # the statement's first line

    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class OpPort:
    """What port does with one op of the recipe at the release."""

    index: int
    kind: str
    state: str  # the verdict on the release
    was: str  # file::scope as the recipe says
    now: str  # file::scope:line where the code is on the release ("" when nowhere)
    # "stay" | "keep" | "retarget" | "followed" | "drop" (upstream) | "propose" (a marker to
    # confirm) | "left" (for a person)
    action: str
    message: str = ""
    anchor: str = ""
    candidates: list[Candidate] = field(default_factory=list)
    file: str = ""  # where the drafted op points
    scope: str = ""
    new_index: Optional[int] = None  # its number in the drafted recipe
    proposal: dict = field(default_factory=dict)  # the marker port proposes ("propose")
    identity: dict = field(default_factory=dict)  # its site as the release holds it (carried.py)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["candidates"] = [c.to_json() for c in self.candidates]
        return d


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Port:
    recipe: Recipe
    engine: str
    version: str
    ops: list[OpPort] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)  # what a person must do, one line each
    proposals: list[str] = field(default_factory=list)  # proposed markers a person must confirm
    checks: list[Check] = field(default_factory=list)
    draft: str = ""  # the recipe file as drafted ("" when there is nothing to change)
    variant: str = ""  # the new [[variants]] block(s) alone
    note: str = ""  # the one-line outcome when no variant is needed
    notes: list[str] = field(default_factory=list)  # worth knowing, not in the way of writing
    changed: dict[int, str] = field(default_factory=dict)  # op -> the release drift --bisect saw it change at

    def starts(self, raws: dict) -> dict[int, str]:
        """op -> the release its new place starts at (and its old one ends below): where
        drift --bisect saw it change (this release when bisect did not run).  The ops of a
        variant that ends restart together, where the first of its ops changed."""
        own = {p.index: self.changed.get(p.index, self.version) for p in self.ops}
        var_end: dict[int, str] = {}
        for p in self.ops:
            vi = raws[p.index][1]
            if vi is not None and p.action not in ("keep", "stay"):
                var_end[vi] = min(var_end.get(vi, own[p.index]), own[p.index], key=Version)
        out = {}
        for p in self.ops:
            vi = raws[p.index][1]
            out[p.index] = own[p.index] if vi is None else var_end.get(vi, self.version)
        return out

    @property
    def verified(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def writable(self) -> bool:
        """The draft may be written: verified, and nothing left for a person but proposed
        markers to confirm (they count only once confirmed)."""
        return not self.leftovers and (not self.draft or self.verified)

    @property
    def complete(self) -> bool:
        return self.writable and not self.proposals

    def to_json(self) -> dict:
        return {
            "command": "port",
            "recipe": self.recipe.id,
            "engine": self.engine,
            "version": self.version,
            "ok": self.complete,
            "note": self.note,
            "notes": self.notes,
            "ops": [o.to_json() for o in self.ops],
            "checks": [dataclasses.asdict(c) for c in self.checks],
            "leftovers": self.leftovers,
            "proposals": self.proposals,
            "variant": self.variant,
            "draft": self.draft,
        }


# -- versions -----------------------------------------------------------------------------------


def _release(version: str) -> Version:
    return Version(Version(version).base_version)


def next_release(version: str) -> str:
    """The release after ``version``'s: 0.5.22 -> 0.5.23 (0.5.22.post1 -> 0.5.23)."""
    rel = list(_release(version).release)
    rel[-1] += 1
    return ".".join(map(str, rel))


def _upper(s: Specifier) -> bool:
    return s.operator in ("<", "<=")


def _lowers(spec: SpecifierSet) -> list[str]:
    """The lower bounds of a range, any range: ``>=``, ``>`` and ``!=`` as they are; a pin
    (``==V``, ``===V``), a prefix (``==V.*``) and a compatible release (``~=V``) are each a
    lower bound ``>=V`` plus an upper one, which port replaces."""
    out = []
    for s in spec:
        if s.operator in (">=", ">", "!="):
            out.append(str(s))
        elif s.operator in ("==", "===", "~="):
            out.append(f">={Version(s.version.rstrip('.*').rstrip('.')).public}")
    return sorted(dict.fromkeys(out))


def end_below(spec: str, version: str) -> str:
    """``spec`` ended below ``version``: its upper bounds (and a pin's) replaced by ``<version``."""
    keep = _lowers(SpecifierSet(spec)) if spec else []
    return ",".join(keep + [f"<{_release(version)}"])


def widened(spec: SpecifierSet, version: str) -> Optional[str]:
    """A recipe range that also holds ``version`` (its upper bounds, a pin's included, replaced
    by one below the next release), or None when it holds it already."""
    if spec.contains(version, prereleases=True):
        return None
    keep = _lowers(spec)
    if not SpecifierSet(",".join(keep)).contains(version, prereleases=True):
        raise PatchkitError(
            f"{version} is below the recipe's range {spec}",
            "port drafts a variant for a newer release; an older one needs its own `when` by hand",
        )
    return ",".join(keep + [f"<{next_release(version)}"])


# -- anchors and their nearest statements -------------------------------------------------------


def anchor_of(op: OpSpec) -> str:
    """The code an op looks for where it is still to be applied, as one fragment ("" when
    it names none: an import is placed after the module's imports, wherever they are)."""
    pats = op.impl.reads.patterns
    if not pats:
        return ""
    return (" or " if op.kind == "or-operand" else " ").join(pats[0])


def _tokens(text: str, python: bool) -> tuple[str, ...]:
    if python:
        return tokens(text)
    return tuple(re.findall(r"\w+|[^\w\s]", text))


def _words(text: str, python: bool) -> list[str]:
    got = words(text) if python else re.findall(r"[A-Za-z_]\w{2,}", text)
    return list(dict.fromkeys(got))


def _files(target: Target, suffix: str, ws: list[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """The files holding most of the anchor's distinctive words (at least half of them),
    most first, and those words: a word in more than MAX_FILES files (``self``, ``torch``)
    tells nothing about where the code went, unless every word is that common (then the
    rarest one is kept)."""
    where: dict[str, dict[str, Path]] = {w: dict(relocate.candidates(target, suffix, (w.encode(),))) for w in ws}
    rare = [w for w in ws if len(where[w]) <= MAX_FILES] or [min(ws, key=lambda w: len(where[w]))]
    count: dict[str, int] = {}
    paths: dict[str, Path] = {}
    for w in rare:
        for lf, p in where[w].items():
            count[lf] = count.get(lf, 0) + 1
            paths[lf] = p
    need = max(1, (len(rare) + 1) // 2)
    ranked = sorted((lf for lf, n in count.items() if n >= need), key=lambda lf: (-count[lf], lf))
    return [(lf, paths[lf]) for lf in ranked[:FILES_READ]], rare


def _statements(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line of its own text, innermost def/class) of every statement: a
    compound statement by its header (up to its body), a simple one whole."""
    out: list[tuple[int, int, str]] = []

    def visit(body: list, scope: str) -> None:
        for s in body:
            if not isinstance(s, ast.stmt):
                continue
            nested = [c for name in ("body", "orelse", "finalbody") for c in getattr(s, name, ()) or ()]
            nested += [b for h in getattr(s, "handlers", ()) for b in h.body]
            nested += [b for c in getattr(s, "cases", ()) for b in c.body]
            if nested:
                first_body = min(c.lineno for c in nested)
                out.append((s.lineno, max(s.lineno, first_body - 1), scope))
                inner = scope
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    inner = f"{scope}.{s.name}" if scope else s.name
                visit(nested, inner)
            else:
                out.append((s.lineno, s.end_lineno or s.lineno, scope))

    visit(tree.body, "")
    return out


def nearest(target: Target, op: OpSpec, anchor: str, n: int = NEAREST) -> list[Candidate]:
    """The ``n`` statements of the target's tree whose tokens are most like the anchor's
    (difflib's ratio over the two token sequences: the whole statement's, or that of its
    best window of as many tokens as the anchor), among the files that hold at least half
    of the anchor's words; a text op compares windows of as many lines as its anchor."""
    python = op.impl.language == "python"
    want = _tokens(anchor, python)
    ws = _words(anchor, python)
    if not want or not ws:
        return []
    suffix = ".py" if python else os.path.splitext(op.file)[1]
    best: list[tuple[float, str, int, str, str]] = []  # (ratio, file, line, scope, text)
    sm = difflib.SequenceMatcher(None, autojunk=False)
    sm.set_seq2(want)

    def ratio(toks: tuple, floor: float) -> float:
        sm.set_seq1(toks)
        if sm.real_quick_ratio() <= floor or sm.quick_ratio() <= floor:
            return -1.0
        return sm.ratio()

    def consider(toks: tuple, lf: str, line: int, scope: str, text: str) -> None:
        floor = best[n - 1][0] if len(best) >= n else -1.0
        r = ratio(toks, floor)
        # An anchor that is an expression (an or-chain, a call) stands inside a longer
        # statement: its best window of as many tokens counts too.
        k = len(want)
        for i in range(len(toks) - k + 1 if len(toks) > k else 0):
            if toks[i] in want or toks[i + k - 1] in want:
                r = max(r, ratio(toks[i : i + k], max(floor, r)))
        if r > floor:
            best.append((r, lf, line, scope, text))
            best.sort(key=lambda b: (-b[0], b[1], b[2]))
            del best[n:]

    files, ws = _files(target, suffix, ws)
    for lf, path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines = text.splitlines()
        if python:
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            for first, last, scope in _statements(tree):
                own = "\n".join(lines[first - 1 : last])
                if not any(w in own for w in ws):
                    continue
                consider(_tokens(own, True), lf, first, scope, lines[first - 1].strip())
        else:
            k = max(1, anchor.count("\n") + 1)
            for i in range(len(lines)):
                if not any(w in lines[i] for w in ws):
                    continue
                own = "\n".join(lines[i : i + k])
                consider(_tokens(own, False), lf, i + 1, "", lines[i].strip())
    return [Candidate(lf, line, scope, round(r, 2), t[:120]) for r, lf, line, scope, t in best]


# -- judging the release ------------------------------------------------------------------------


def chosen_ops(recipe: Recipe, engine: str, version: str) -> tuple[list[OpSpec], str]:
    """The recipe's ops of ``engine`` that the judge takes for ``version`` (the variant drift
    judges there: the newest one above the recipe's range), and its note."""
    cut, note = recipe.for_versions({engine: version})
    return [op for op in cut.ops if op.engine == engine], note


def _flat(recipe: Recipe, engine: str, ops: list[OpSpec], version: str) -> Recipe:
    """``recipe`` cut down to these ops, with no `when` left (the judge takes them all), and
    to the blockers of ``engine`` that hold at ``version``."""
    from patchkit.base.model import holds

    blockers = tuple(
        dataclasses.replace(b, when=())
        for b in recipe.blockers
        if b.engine == engine and holds(_on(b.when, engine), {engine: version})
    )
    return dataclasses.replace(
        recipe,
        ops=tuple(dataclasses.replace(op, when=()) for op in ops),
        blockers=blockers,
        engines={engine: SpecifierSet()},
    )


def _on(when, engine: str):
    return tuple((e, s) for e, s in when if e == engine)


def _session(engine: str, tree: Target):
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    return Session({engine: tree}, releases=RELEASES)


def judge_at(recipe: Recipe, engine: str, tree: Target) -> tuple[list[OpPort], list[str]]:
    """Each chosen op's verdict on the release, as what port does with it, and the
    blockers standing there (described)."""
    from patchkit.core.judge import evaluate

    version = tree.version or ""
    ops, _ = chosen_ops(recipe, engine, version)
    flat = _flat(recipe, engine, ops, version)
    session = _session(engine, tree)
    judged = evaluate(session, [flat])
    ((_, evs),) = judged
    out = []
    for ev in evs:
        op = ev.op
        was = f"{op.file}::{op.scope or '<module>'}"
        now = ev.location() + (f":{ev.line}" if ev.line else "") if ev.file.exists else ""
        p = OpPort(op.index, op.kind, str(ev.state), was, now, "keep", ev.message, file=op.file, scope=op.scope)
        if ev.state == State.PENDING:
            pass
        elif ev.state == State.UPSTREAM:
            p.action = "drop"
        elif ev.state == State.MOVED:
            p.action = "followed" if ev.message.startswith("followed ") else "retarget"
            p.file, p.scope = ev.file.logical, ev.scope
        else:
            p.action = "left"
            p.anchor = anchor_of(op)
            if p.anchor:
                p.candidates = nearest(tree, op, p.anchor)
            if ev.state == State.MISSING:
                p.proposal = proposal(session, op, ev, version)
                if p.proposal:
                    p.action = "propose"
        if p.action in ("keep", "retarget", "followed"):  # carried: its site as it stands there
            from patchkit.core import carried

            drafted = dataclasses.replace(op, file=p.file, scope=p.scope)
            at = ev.line if p.action == "retarget" else None  # the one place the judge singled out
            p.identity = identity_table(carried.TreeFiles(tree), drafted, f"{engine} {version}", at) or {}
        out.append(p)
    # A blocker in the scope a moved op edits at its new place is what that op takes away
    # there, as for a pending op in its own scope (judge.evaluate).
    edited = {(p.file, p.scope) for p in out if p.action in ("retarget", "followed")}
    standing = [
        f"{b.label} at {b.file}:{b.line}: {b.message}"
        for b in judged.blocked.get(flat.id, ())
        if (b.file, b.scope) not in edited
    ]
    return out, standing


def identity_table(ref, op: OpSpec, label: str, line: Optional[int] = None) -> Optional[dict]:
    """The ``[ops.identity]`` table (carried.py) of the op's site in a release
    (pristine.Reference, or carried.TreeFiles), or None when the release does not hold the
    site in the op's file and scope, or the op is not a Python op that moves with its site."""
    from patchkit.base.target import ENGINES
    from patchkit.core import carried, identity

    if op.impl.language != "python" or not op.impl.RELOCATABLE:
        return None
    sites = identity._of_release(ref, op, line)
    return carried.table(label, sites, ENGINES[op.engine].package) if sites else None


def proposal(session, op: OpSpec, ev, version: str) -> dict:
    """The marker port proposes for a missing op whose edit upstream may have made in other
    words (equivalent.py), as a table of the recipe (``marker``) and as TOML; {} when there
    is no such place."""
    from patchkit.core import equivalent

    place = equivalent.find(session, op, [c.to_json() for c in ev.candidates])
    if place is None:
        return {}
    where = f"{place.file}:{place.line}"
    marker: dict[str, Any] = {"file": place.file}
    if place.file.endswith(".py"):
        marker["scope"] = place.scope
    marker["contains"] = equivalent.fragments(place)
    marker["proposed"] = (
        f"by `patchkit port` on {op.engine} {version}: upstream may have made this edit in other words at"
        f" {where}; read it, and delete this line to confirm (until then the marker does not count)"
    )
    return {
        "file": place.file,
        "scope": place.scope,
        "line": place.line,
        "text": place.text,
        "keys": list(place.keys),
        "marker": marker,
    }


def proposal_toml(prefix: str, marker: dict) -> list[str]:
    return [f"[[{prefix}.markers]]"] + [f"{_key(k)} = {toml_value(v)}" for k, v in marker.items()]


def _stays(recipe: Recipe, engine: str, version: str, ops: list[OpPort]) -> None:
    """A pending top-level op whose own `when` holds on the release needs nothing: it is
    left as it is ("stay"), not ended and repeated in the new variant.  An op of a variant
    that ends is carried ("keep"), as the variant's other ops are."""
    from patchkit.base.model import holds

    data = tomllib.loads(recipe.path.read_text(encoding="utf-8"))
    raws = raw_ops(data)
    by_index = {op.index: op for op in recipe.ops}
    for p in ops:
        if p.action != "keep" or raws.get(p.index, (None, 0))[1] is not None:
            continue
        op = by_index.get(p.index)
        if op is not None and holds(_on(op.when, engine), {engine: version}):
            p.action = "stay"


# -- the draft ----------------------------------------------------------------------------------


def toml_value(v: Any) -> str:
    from patchkit.authoring.hunks import toml_str

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):  # "..." as recipes write them, where no escape is needed
        plain = not any(c in v for c in '"\\\n') and all(32 <= ord(c) != 127 for c in v)
        return f'"{v}"' if plain else toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_value(k)


def op_toml(raw: dict, prefix: str, file: str, scope: str, comment: str = "") -> list[str]:
    """One op as TOML lines under ``[[prefix]]``: its keys as the recipe had them (without
    `when`), with ``file`` and ``scope`` as drafted."""
    body = {k: v for k, v in raw.items() if k not in ("when", "identity")}
    simple = {"kind": body.get("kind"), "engine": body.get("engine"), "file": file}
    if scope:
        simple["scope"] = scope
    for k, v in body.items():
        if k in ("kind", "engine", "file", "scope") or isinstance(v, dict):
            continue
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            continue
        simple[k] = v
    out = [f"[[{prefix}]]" + (f"  # {comment}" if comment else "")]
    out += [f"{_key(k)} = {toml_value(v)}" for k, v in simple.items()]
    for k, v in body.items():
        if isinstance(v, dict):
            out.append(f"[{prefix}.{k}]")
            out += [f"{_key(kk)} = {toml_value(vv)}" for kk, vv in v.items()]
    for k, v in body.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                out.append(f"[[{prefix}.{k}]]")
                out += [f"{_key(kk)} = {toml_value(vv)}" for kk, vv in item.items()]
    if raw.get("identity"):
        from patchkit.core.carried import toml_lines

        out += toml_lines(prefix, raw["identity"], toml_value)
    return out


def raw_ops(data: dict) -> dict[int, tuple[dict, Optional[int]]]:
    """op number -> (its table as parsed, the index of its variant in the file or None),
    numbered as recipe.py numbers them: top-level ops first, then each variant's."""
    out: dict[int, tuple[dict, Optional[int]]] = {}
    n = 0
    for raw in data.get("ops", ()):
        n += 1
        out[n] = (raw, None)
    for vi, var in enumerate(data.get("variants", ())):
        for raw in var.get("ops", ()):
            n += 1
            out[n] = (raw, vi)
    return out


def _variant_blocks(port: Port, raws: dict, first_index: int) -> str:
    """One new ``[[variants]]`` per release where carried ops start (usually one)."""
    e, v = port.engine, port.version
    starts = port.starts(raws)
    carried = [p for p in port.ops if p.action in ("keep", "retarget", "followed", "propose")]
    left = [p for p in port.ops if p.action == "left"]
    groups = sorted({_release(starts[p.index]) for p in carried}) or [_release(v)]
    blocks, n = [], first_index
    for k, rel in enumerate(groups):
        seen = f" (drift --bisect: changed at {rel})" if str(rel) != str(_release(v)) else ""
        lines = [
            f"# {e} {rel} on: drafted by `patchkit port {port.recipe.id} --to {e}=={v}` from drift's findings{seen}",
            "[[variants]]",
            f'when = {{ {e} = ">={rel}" }}',
        ]
        for p in carried:
            if _release(starts[p.index]) != rel:
                continue
            why = {
                "keep": f"op #{p.index}, pending on {e} {v}",
                "retarget": f"op #{p.index}, moved from {p.was}",
                "followed": f"op #{p.index}, followed its anchor from {p.was}",
                "propose": f"op #{p.index}, missing on {e} {v}: confirm or delete its proposed marker",
            }[p.action]
            p.new_index = n
            n += 1
            raw = _examples_for(port, p, raws[p.index][0])
            if p.identity:  # the site as this release holds it, not as the old one did
                raw = {**raw, "identity": p.identity}
            if p.proposal:  # after the op's own markers, so that their numbers stay
                raw = {**raw, "markers": [*raw.get("markers", ()), p.proposal["marker"]]}
            lines += op_toml(raw, "variants.ops", p.file, p.scope, why)
        for p in left if k == len(groups) - 1 else ():
            lines.append(f"# op #{p.index} ({p.kind}) is left for a person: {p.state} on {e} {v}.")
            if p.anchor:
                lines.append(f"#   its anchor: {_one_line(p.anchor)}")
            for c in p.candidates:
                lines.append(f"#   nearest: {c.where()} ({c.similarity:.2f}) {c.text}")
            lines += ["# " + ln for ln in op_toml(raws[p.index][0], "variants.ops", p.file, p.scope)]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def _examples_for(port: Port, p: OpPort, raw: dict) -> dict:
    """The op's table with its ``[[ops.examples]]`` made for where it now points: kept where
    the scope is the same, retargeted (the scope's class and def names renamed in `before`
    and `after`) where the op then still runs on them both ways, dropped with a note where not."""
    exs = raw.get("examples")
    old_scope = raw.get("scope", "")
    if not exs or p.scope == old_scope:
        return raw
    from patchkit.authoring.examples import run_example
    from patchkit.base.model import Example

    spec = next(op for op in port.recipe.ops if op.index == p.index)
    moved = dataclasses.replace(spec, file=p.file, scope=p.scope)
    kept = []
    for j, ex in enumerate(exs, 1):
        new = {k: _rename_scope(v, old_scope, p.scope) if k in ("before", "after") else v for k, v in ex.items()}
        bad = run_example(moved, Example(before=new["before"], after=new["after"], line=0))
        if bad is None:
            kept.append(new)
        else:
            port.notes.append(
                f"op #{p.index} example #{j} was written for {old_scope or '<module>'} and is dropped from the"
                f" variant ({bad[0]} at {p.scope or '<module>'}); write one for the new place"
            )
    out = {k: v for k, v in raw.items() if k != "examples"}
    if kept:
        out["examples"] = kept
    return out


def _rename_scope(text: str, old: str, new: str) -> str:
    """``text`` with the class/def names of scope ``old`` renamed to those of ``new``, part
    by part (the parts beyond the shorter of the two left as they are)."""
    for a, b in zip(old.split(".") if old else [], new.split(".") if new else [], strict=False):
        if a != b:
            text = re.sub(rf"^(\s*(?:async\s+)?(?:class|def)\s+){re.escape(a)}\b", rf"\g<1>{b}", text, flags=re.M)
    return text


def _one_line(s: str) -> str:
    return " ".join(s.split())


_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?")


def _insert_at(text: str, family: tuple[str, ...]) -> Optional[int]:
    """The offset after the last table of ``family`` (and its own lines), before the comments
    and blank lines that lead to the next table; None when the file has none of them."""
    lines = text.splitlines(keepends=True)
    heads: list[tuple[int, str]] = []
    quote = None
    for i, ln in enumerate(lines):
        if quote is None:
            m = _HEADER.match(ln)
            if m:
                heads.append((i, m.group(1)))
        for q in ("'''", '"""'):
            if ln.count(q) % 2 and (quote is None or quote == q):
                quote = None if quote == q else q
    last = max((k for k, (_, name) in enumerate(heads) if name.split(".")[0] in family), default=None)
    if last is None:
        return None
    end = heads[last + 1][0] if last + 1 < len(heads) else len(lines)
    while end > heads[last][0] + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return sum(len(x) for x in lines[:end])


def draft_text(port: Port, original: str) -> tuple[str, list[str]]:
    """The recipe file with the drafted variant, and what the draft could not say (a
    variant that would end for another engine's ops too)."""
    import tomlkit

    data = tomllib.loads(original)
    raws = raw_ops(data)
    doc = tomlkit.parse(original)
    e = port.engine
    starts = port.starts(raws)  # each old op ends where its new place starts
    problems = []
    tables: dict[int, Any] = {}
    n = 0
    for t in doc.get("ops", ()):
        n += 1
        tables[n] = t
    variants = list(doc.get("variants", ()))
    ended: set[int] = set()
    for p in port.ops:
        if p.action == "stay":
            continue
        raw, vi = raws[p.index]
        v = starts[p.index]
        if vi is None:
            if _end_when(tables[p.index], e, v):
                port.notes.append(f"op #{p.index} holds no release once its `when` ends below {v}: delete it")
            continue
        if vi in ended:
            continue
        ended.add(vi)
        others = sorted({op.get("engine") for op in data["variants"][vi].get("ops", ())} - {e})
        if others:
            problems.append(
                f"variant #{vi + 1} also holds ops of {', '.join(others)}: ending its `when` below {v} would end"
                " them too; split it by hand"
            )
        if _end_when(variants[vi], e, v):
            port.notes.append(f"variant #{vi + 1} holds no release once its `when` ends below {v}: delete it")
    wide = widened(port.recipe.engines[e], port.version)
    if wide is not None:
        doc["engines"][e] = wide
    text = tomlkit.dumps(doc)
    block = _variant_blocks(port, raws, len(raws) + 1)
    if not any(p.new_index for p in port.ops):
        return text, problems  # nothing is carried: the old ops end, no variant starts
    at = _insert_at(text, ("variants",))
    if at is None:
        at = _insert_at(text, ("ops",))
    if at is None:
        at = len(text)
    head, tail = text[:at], text[at:]
    sep = "" if head.endswith("\n\n") or not head else ("\n" if head.endswith("\n") else "\n\n")
    out = head + sep + block + ("\n" if tail and not tail.startswith("\n") else "") + tail
    want = tomllib.loads(text)
    want.setdefault("variants", []).extend(tomllib.loads(block)["variants"])
    if tomllib.loads(out) != want:  # a header look-alike in a string fooled the scan: append at the end
        out = text + ("\n" if text.endswith("\n") else "\n\n") + block
    port.variant = block
    return out, problems


def _end_when(table, engine: str, version: str) -> bool:
    """End the `when` of an op or variant table below ``version``; True when it then holds
    no release at all (it started at ``version`` or later)."""
    import tomlkit

    when = table.get("when")
    if when is None:
        item = tomlkit.parse(f'when = {{ {engine} = "<{_release(version)}" }}\n')["when"]
        keys = list(table.keys())
        after = "scope" if "scope" in keys else "file" if "file" in keys else None
        try:
            if after is None:
                raise KeyError(after)
            table.value._insert_after(after, "when", item)  # beside file and scope, before sub-tables
        except (AttributeError, KeyError, TypeError):  # pragma: no cover - another tomlkit
            table["when"] = item
        return False
    when[engine] = end_below(str(when.get(engine, "")), version)
    floor = _release(version)
    return any(
        s.operator in (">=", ">", "==", "~=", "===") and _release(s.version.rstrip(".*")) >= floor
        for s in SpecifierSet(when[engine])
    )


# -- verifying ----------------------------------------------------------------------------------


def verify(port: Port, text: str, tree: Target) -> list[Check]:
    """The drafted recipe, parsed and validated, then judged and planned on the release (in
    memory): every op it holds there reads pending or upstream, exactly the drafted ops
    hold there, no blocker stands, and apply's checks pass."""
    from patchkit.core.planner import plan_apply
    from patchkit.core.recipe import load_recipe

    e, v, rid = port.engine, port.version, port.recipe.id
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="patchkit-port-") as tmp:
        path = Path(tmp) / f"{rid}.toml"
        path.write_text(text, encoding="utf-8")
        try:
            drafted = load_recipe(path)
        except RecipeError as err:
            checks.append(Check("recipe", False, f"the draft does not load: {err}"))
            return checks
    checks.append(Check("recipe", True, "the draft parses and validates"))
    checks.append(_examples_check(drafted))
    in_range = drafted.engines[e].contains(v, prereleases=True)
    checks.append(
        Check("range", in_range, f"[engines] {e} = {str(drafted.engines[e])!r} {'holds' if in_range else 'misses'} {v}")
    )
    ops, _ = chosen_ops(drafted, e, v)
    if port.variant:
        want = {p.new_index for p in port.ops if p.new_index} | {p.index for p in port.ops if p.action == "stay"}
    else:  # no variant: the ops that hold there are the recipe's own
        want = {p.index for p in port.ops if p.action in ("keep", "stay")}
    got = {op.index for op in ops}
    extra, lost = sorted(got - want), sorted(want - got)
    detail = f"on {e} {v} the draft holds ops {', '.join(f'#{i}' for i in sorted(got)) or '(none)'}"
    if extra:
        detail += f"; also {', '.join(f'#{i}' for i in extra)}, whose `when` still holds there"
    if lost:
        detail += f"; not {', '.join(f'#{i}' for i in lost)}"
    checks.append(Check("variant", not extra and not lost, detail))
    if not ops:
        return checks
    # A proposed marker does not count until a person confirms it; the draft is judged as
    # it reads then, so that a proposal whose marker would not match is never written.
    flat = _flat(drafted, e, [_confirmed(op) for op in ops], v)
    plan = plan_apply(_session(e, tree), [flat], ignore_range=True, dry_run=True)
    (res,) = plan.results
    bad = [
        f"op #{o.index}: {o.state}" + (f" ({o.message})" if o.message else "")
        for o in res.ops
        if o.state not in (State.PENDING, State.UPSTREAM)
    ]
    proposed = {p.new_index for p in port.ops if p.action == "propose"}
    if proposed:
        states = {o.index: o.state for o in res.ops}
        wrong = [f"#{i}" for i in sorted(proposed) if states.get(i) != State.UPSTREAM]
        checks.append(
            Check(
                "proposal",
                not wrong,
                f"the proposed marker of op {', '.join(wrong)} does not match on {e} {v}"
                if wrong
                else f"with its proposed marker confirmed, op {', '.join(f'#{i}' for i in sorted(proposed))}"
                f" reads upstream on {e} {v}",
            )
        )
    checks.append(
        Check(
            "judge",
            not bad,
            "; ".join(bad) if bad else f"every drafted op reads pending or upstream on {e} {v}",
        )
    )
    left = [f"#{p.index}" for p in port.ops if p.action == "left"]
    without = f" (the draft lacks op {', '.join(left)}, left for a person)" if left else ""
    checks.append(
        Check(
            "apply",
            not plan.blockers,
            "; ".join(plan.blockers) + without
            if plan.blockers
            else "apply's checks pass in memory (post-condition, idempotence, round-trip, compile, names, blockers)",
        )
    )
    return checks


def _confirmed(op: OpSpec) -> OpSpec:
    """The op as it reads once a person has confirmed its proposed markers."""
    if not any(m.proposed for m in op.markers):
        return op
    return dataclasses.replace(op, markers=tuple(dataclasses.replace(m, proposed="") for m in op.markers))


def _examples_check(drafted: Recipe) -> Check:
    """Every op's examples of the draft run both ways, as `patchkit check` runs them."""
    from patchkit.authoring.examples import run_example

    bad, n = [], 0
    for op in drafted.ops:
        for j, ex in enumerate(op.examples, 1):
            n += 1
            why = run_example(op, ex)
            if why:
                bad.append(f"op #{op.index} example #{j}: {why[0]}")
    return Check("examples", not bad, "; ".join(bad) if bad else f"{n} example(s) run both ways, as `check` runs them")


def changed_at(recipe: Recipe, engine: str, version: str, evaluate_at, releases: list[str]) -> dict[int, str]:
    """op -> the first release after the recipe's range where its state or place differs from
    the range's newest release (drift's bisect over ``releases``, O(log n) of them judged);
    {} when the range has no release below ``version`` to start from."""
    from patchkit.upstream import drift as D

    spec = recipe.engines[engine]
    held = [r for r in releases if spec.contains(r, prereleases=True) and Version(r) < Version(version)]
    if not held:
        return {}
    base = max(held, key=Version)
    span = [r for r in releases if Version(base) <= Version(r) <= Version(version)]
    if len(span) < 2:
        return {}
    _, changes = D.bisect(evaluate_at, span)
    out: dict[int, str] = {}
    for rid, what, _, to, _, _ in changes:
        if rid == recipe.id and what.startswith("op #"):
            out.setdefault(int(what[4:]), to)
    return out


# -- the whole port -----------------------------------------------------------------------------


def port(recipe: Recipe, engine: str, tree: Target, changed: Optional[dict[int, str]] = None) -> Port:
    """Draft, check and describe the variant ``recipe`` needs on the release in ``tree``;
    ``changed``: op -> the release where drift --bisect saw it change (the variant starts
    at the first of them, not at this release)."""
    version = tree.version
    if not version:
        raise PatchkitError(
            f"{tree.root}: cannot tell which {engine} release this is", "port it with --to ENGINE==VERSION"
        )
    if engine not in recipe.engines or not recipe.ops_for(engine):
        raise PatchkitError(f"recipe {recipe.id} has no {engine} ops", f"it edits {', '.join(recipe.engines)}")
    widened(recipe.engines[engine], version)  # a release below the range: refused here
    out = Port(recipe, engine, version, changed=dict(changed or {}))
    out.ops, standing = judge_at(recipe, engine, tree)
    for p in out.ops:
        if p.action == "left":
            near = "; ".join(f"{c.where()} ({c.similarity:.2f}) {c.text}" for c in p.candidates)
            out.leftovers.append(
                f"op #{p.index} ({p.kind}): {p.state} on {engine} {version}"
                + (f": {p.message}" if p.message else "")
                + (f"; nearest to its anchor: {near}" if near else "")
            )
    out.leftovers += [f"blocker stands on {engine} {version}: {b}" for b in standing]
    for p in out.ops:
        if p.action == "propose":
            pr = p.proposal
            out.proposals.append(
                f"op #{p.index} ({p.kind}): missing on {engine} {version}; upstream may have made it in other"
                f" words at {pr['file']}:{pr['line']}: read it, then delete the marker's `proposed` line to"
                " confirm (or the marker, if not)"
            )
    _stays(recipe, engine, version, out.ops)
    at = {out.changed[p.index] for p in out.ops if p.action not in ("keep", "stay") and p.index in out.changed}
    if len(at) > 1:
        out.notes.append(
            f"the ops changed at different releases ({', '.join(sorted(at, key=Version))}): each ends and starts"
            f" at its own; check the releases between with `drift --across {engine}=={min(at, key=Version)}..{version}`"
        )
    if all(p.action == "drop" for p in out.ops):
        out.note = f"every op reads upstream on {engine} {version}: the recipe can be retired there"
        return out
    if all(p.action in ("keep", "stay") for p in out.ops) and widened(recipe.engines[engine], version) is None:
        out.note = f"nothing to port: every op still applies on {engine} {version} as written"
        return out
    original = recipe.path.read_text(encoding="utf-8")
    if all(p.action in ("keep", "stay") for p in out.ops):
        import tomlkit

        doc = tomlkit.parse(original)
        doc["engines"][engine] = widened(recipe.engines[engine], version)
        out.draft = tomlkit.dumps(doc)
        out.note = f"every op still applies on {engine} {version}: only [engines] widens"
    else:
        out.draft, problems = draft_text(out, original)
        out.leftovers += problems
    out.checks = verify(out, out.draft, tree)
    return out
