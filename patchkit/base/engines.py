"""Engines as data: what patchkit knows of each engine comes from definitions, never code.

The shipped definitions are ``patchkit/base/engines.toml``; a user adds one in ``engines/*.toml``
under any recipe directory on the search path (``--recipes``, PATCHKIT_RECIPES, the
project's recipes/, the user's).  Both are checked strictly: an unknown key, a missing one
or a value of the wrong shape is one line naming file:line and the fix (exit 2).

``status`` runs at start-up speed, and tomllib alone costs more than the rest of an
unchanged ``status``: the shipped file's parsed form is kept in patchkit's cache (JSON,
keyed by the file's size and mtime), so it is parsed once per installed patchkit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple, Optional

from patchkit.base.errors import PatchkitError

SHIPPED = Path(__file__).with_name("engines.toml")
USER_DIR = "engines"  # beside the recipes of a recipe directory: RECIPES/engines/*.toml
REFERENCES = ("wheel", "sdist", "git")
LAYOUTS = ("git", "package")
_KEYS = {
    "dist": 'the package-index name, e.g. dist = "vllm"',
    "package": 'the import package, e.g. package = "vllm"',
    "reference": f"one of {', '.join(REFERENCES)}",
    "git_marker": 'a path only a checkout has, e.g. git_marker = "csrc"',
    "layouts": 'a table: git = [["vllm/", "vllm/"]], package = [["vllm/", "vllm/"]]',
}
_OPTIONAL = {
    "requires": "a list of engine names",
    "template": "[python file, class, function, C++ file]",
    "jit": "a table: specs = LOGICAL_DIR, prebuilt = DIST, cache = DIR, cache_env = VAR",
    "predicates": 'a table: "is_sm100_supported()" = "major == 10" (or = { means = "...", cuda = "12.8" })',
}
_JIT_KEYS = ("specs", "prebuilt", "cache", "cache_env")
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
# What a predicate's meaning may name besides its parameters and the other predicates it calls:
# the device (patchkit/core/goals/device.py) in capability terms.
DEVICE_NAMES = ("major", "minor", "capability", "sm", "platform")
_PREDICATE_KEYS = ("means", "cuda")
_CUDA = re.compile(r"^\d+\.\d+$")
# A package-index name (PEP 508): one path component of the cache (wheels/DIST/...), never
# "..", "/" or a leading dot.
_DIST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _relative(p: str) -> bool:
    """A path that stays inside the directory it is joined to: relative, no ".." part."""
    return bool(p) and not p.startswith("/") and "\\" not in p and ".." not in p.split("/")


class EngineInfo(NamedTuple):  # NamedTuples: `status` imports this module at start-up
    name: str  # as recipes and --target say it
    dist: str  # package-index name
    package: str  # import name
    # logical prefix -> path prefix, per layout ("git", "package"), in order
    layouts: dict[str, tuple[tuple[str, str], ...]]
    git_marker: str  # a path that exists only in a git-checkout layout
    reference: str = "wheel"  # wheel | sdist | git
    requires: tuple[str, ...] = ()
    template: tuple[str, ...] = ()
    jit: Optional[dict] = None
    source: str = ""  # the file it was defined in
    # device predicates: (pattern, meaning, CUDA it needs or ""), in the file's order; read by
    # patchkit/core/goals/pyeval.py (the engines.toml comments say what each one means)
    predicates: tuple[tuple[str, str, str], ...] = ()


class EngineError(PatchkitError):
    pass


def _line(text: str, table: str, key: str = "") -> int:
    """The line of ``[table]`` (or of ``key = `` inside it, or of ``[table.key]``)."""
    lines = text.splitlines()
    head = re.compile(rf"^\s*\[\s*{re.escape(table)}\s*\]")
    sub = re.compile(rf"^\s*\[\s*{re.escape(table)}\.{re.escape(key)}\s*\]") if key else None
    kre = re.compile(rf'^\s*"?{re.escape(key)}"?\s*=') if key else None
    inside, start = False, 0
    for n, line in enumerate(lines, 1):
        if sub is not None and sub.match(line):
            return n
        if head.match(line):
            inside, start = True, n
            continue
        if line.strip().startswith("["):
            inside = False
        elif inside and kre is not None and kre.match(line):
            return n
    return start or 1


def parse(text: str, path: str, known: tuple[str, ...] = ()) -> dict[str, EngineInfo]:
    """The definitions of one file, checked; EngineError (file:line, why, the fix) otherwise."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise EngineError(
            f"{path}:{m.group(1) if m else 1}: not valid TOML ({e})", "fix the syntax; see docs/engines.md"
        ) from None
    out: dict[str, EngineInfo] = {}
    for name, t in doc.items():

        def fail(key: str, why: str, fix: str, name: str = name) -> EngineError:
            crumb = f"[{name}]" + (f" {key}" if key else "")
            return EngineError(f"{path}:{_line(text, name, key)}: {crumb}: {why}", fix)

        if not isinstance(t, dict):
            raise fail("", "an engine is a table", f"write [{name}] and its keys (dist, package, ...)")
        if not _NAME.match(name):
            raise fail("", "an engine's name is lower-case letters, digits, - and _", "rename the table")
        for k in t:
            if k not in _KEYS and k not in _OPTIONAL:
                raise fail(k, f"unknown key {k!r}", f"keys: {', '.join([*_KEYS, *_OPTIONAL])}")
        for k, what in _KEYS.items():
            if k not in t:
                raise fail("", f"no {k}", f"add {k}: {what}")
        for k in ("dist", "package", "git_marker"):
            if not isinstance(t[k], str) or not t[k].strip() or "\0" in t[k]:
                raise fail(k, f"{k} must be a non-empty string", _KEYS[k])
        if not re.match(r"^[A-Za-z0-9_]+$", t["package"]):
            raise fail("package", f"{t['package']!r} is not an import name", _KEYS["package"])
        if not _DIST.match(t["dist"]):
            raise fail("dist", f"{t['dist']!r} is not a package-index name (letters, digits, . _ -)", _KEYS["dist"])
        if not _relative(t["git_marker"]):
            raise fail("git_marker", f"{t['git_marker']!r} leads outside the tree", _KEYS["git_marker"])
        if t["reference"] not in REFERENCES:
            raise fail("reference", f"{t['reference']!r} is not a reference kind", _KEYS["reference"])
        layouts = t["layouts"]
        if not isinstance(layouts, dict) or set(layouts) != set(LAYOUTS):
            raise fail("layouts", "layouts must give exactly git and package", _KEYS["layouts"])
        lay: dict[str, tuple[tuple[str, str], ...]] = {}
        for ln in LAYOUTS:
            pairs = layouts[ln]
            ok = (
                isinstance(pairs, list)
                and pairs
                and all(isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) and s for s in p) for p in pairs)
            )
            if not ok:
                raise fail("layouts", f"layouts.{ln} must be a list of [logical prefix, path prefix]", _KEYS["layouts"])
            for lp, pp in pairs:
                if lp.startswith("/") or ".." in lp.split("/") or pp.startswith("/") or ".." in pp.split("/"):
                    raise fail("layouts", f"layouts.{ln}: {lp!r} -> {pp!r} leads outside the tree", "relative paths")
            lay[ln] = tuple((lp, pp) for lp, pp in pairs)
        if {lp for lp, _ in lay["package"]} - {lp for lp, _ in lay["git"]}:
            raise fail("layouts", "every logical prefix of the package layout needs one in the git layout", "add it")
        if lay["package"][0][1] != t["package"] + "/":
            raise fail("layouts", f"the package layout's first prefix must map onto {t['package']}/", "reorder")
        requires = t.get("requires", [])
        if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
            raise fail("requires", "requires must be a list of engine names", _OPTIONAL["requires"])
        template = t.get("template", [])
        if (
            not isinstance(template, list)
            or (template and len(template) != 4)
            or not all(isinstance(s, str) for s in template)
        ):
            raise fail("template", "template must list 4 strings", _OPTIONAL["template"])
        jit = t.get("jit")
        if jit is not None and (
            not isinstance(jit, dict) or set(jit) - set(_JIT_KEYS) or not all(isinstance(v, str) for v in jit.values())
        ):
            raise fail("jit", f"jit must be a table of strings ({', '.join(_JIT_KEYS)})", _OPTIONAL["jit"])
        predicates = _predicates(
            t.get("predicates", {}),
            lambda why, key: fail("predicates", f"{key}: {why}" if key else why, _OPTIONAL["predicates"]),
        )
        for k, ok, why in (
            ("prebuilt", _DIST.match, "is not a package-index name"),
            ("specs", _relative, "leads outside the tree"),
            ("cache", _relative, "leads outside its directory"),
            ("cache_env", _VAR.match, "is not an environment variable's name"),
        ):
            if jit and k in jit and not ok(jit[k]):
                raise fail("jit", f"jit.{k} {jit[k]!r} {why}", _OPTIONAL["jit"])
        if name in known or name in out:
            raise fail("", f"engine {name!r} is defined twice", "give each engine one definition")
        out[name] = EngineInfo(
            name=name,
            dist=t["dist"],
            package=t["package"],
            layouts=lay,
            git_marker=t["git_marker"],
            reference=t["reference"],
            requires=tuple(requires),
            template=tuple(template),
            jit=dict(jit) if jit else None,
            source=path,
            predicates=predicates,
        )
    return out


def _predicates(table, fail) -> tuple[tuple[str, str, str], ...]:
    """The ``predicates`` table, checked: each key a pattern (a name, attribute or call whose
    arguments are parameter names: ``is_device_capability(cap)``, ``get_platform().is_sm120``),
    each value a Python expression over the device's names, the pattern's parameters and the
    other predicates, or a table ``{ means = EXPR, cuda = "X.Y" }``."""
    import ast

    if not isinstance(table, dict):
        raise fail("predicates must be a table", "")
    out = []
    for key, value in table.items():
        try:
            pat = ast.parse(key, mode="eval").body
        except SyntaxError:
            raise fail("not a Python expression", repr(key)) from None
        params: list[str] = []
        node = pat
        while isinstance(node, (ast.Call, ast.Attribute)):
            if isinstance(node, ast.Call):
                if node.keywords or not all(isinstance(a, ast.Name) for a in node.args):
                    raise fail("a pattern's call takes parameter names only", repr(key))
                params += [a.id for a in node.args]
                node = node.func
            else:
                node = node.value
        if not isinstance(node, ast.Name):
            raise fail("a pattern is a name, attribute or call (is_sm90_supported())", repr(key))
        if isinstance(value, str):
            means, cuda = value, ""
        elif isinstance(value, dict) and set(value) <= set(_PREDICATE_KEYS) and "means" in value:
            means, cuda = value["means"], value.get("cuda", "")
        else:
            raise fail(f"a predicate is an expression or a table of {', '.join(_PREDICATE_KEYS)}", repr(key))
        if not isinstance(means, str) or not isinstance(cuda, str) or (cuda and not _CUDA.match(cuda)):
            raise fail('means is an expression, cuda a version "X.Y"', repr(key))
        try:
            tree = ast.parse(means, mode="eval")
        except SyntaxError:
            raise fail(f"its meaning {means!r} is not a Python expression", repr(key)) from None
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        free = sorted(
            {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}
            - set(DEVICE_NAMES)
            - set(params)
        )
        if free:
            raise fail(f"its meaning names {', '.join(free)}: not the device ({', '.join(DEVICE_NAMES)})", repr(key))
        out.append((key, means, cuda))
    return tuple(out)


def _shipped() -> dict[str, EngineInfo]:
    """The shipped table, parsed once per version of the file and kept in the cache as JSON
    (marshal trusts the lengths it reads); an entry that does not read back as engines is a
    miss, parsed again and replaced."""
    import json

    from patchkit.base import store

    st = SHIPPED.stat()
    k = store.key(SHIPPED, st.st_size, st.st_mtime_ns)
    raw = store.get("engines", k, limit=1 << 20)
    if raw is not None:
        try:
            return {r[0]: _from_row(r) for r in json.loads(raw)}
        except (ValueError, RecursionError, TypeError, IndexError, KeyError, AttributeError):
            pass
    got = parse(SHIPPED.read_text(encoding="utf-8"), str(SHIPPED))
    store.put("engines", k, json.dumps([list(i) for i in got.values()]).encode())
    return got


def _from_row(r: list) -> EngineInfo:
    """An EngineInfo from its JSON row (lists where the value holds tuples), every field typed."""
    name, dist, package, layouts, marker, reference, requires, template, jit, source, predicates = r
    info = EngineInfo(
        name,
        dist,
        package,
        {k: tuple((a, b) for a, b in v) for k, v in layouts.items()},
        marker,
        reference,
        tuple(requires),
        tuple(template),
        jit,
        source,
        tuple((p, m, c) for p, m, c in predicates),
    )
    texts = (name, dist, package, marker, reference, source, *requires, *template)
    texts += tuple(x for row in info.predicates for x in row)
    if not all(isinstance(x, str) for x in texts) or not (jit is None or isinstance(jit, dict)):
        raise TypeError("not an engine row")
    if not _DIST.match(dist):  # a planted entry must not lead downloads out of the cache either
        raise TypeError("not an engine row")
    if not all(isinstance(x, str) for v in info.layouts.values() for pair in v for x in pair):
        raise TypeError("not an engine row")
    return info


class Engines(Mapping):
    """Every engine known to this invocation, by name: the shipped ones, read on first use,
    then the user's (``add_dirs``)."""

    def __init__(self) -> None:
        self._d: Optional[dict[str, EngineInfo]] = None
        self._dirs: set[str] = set()

    def _all(self) -> dict[str, EngineInfo]:
        if self._d is None:
            self._d = _shipped()
        return self._d

    def __getitem__(self, name: str) -> EngineInfo:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def add_dirs(self, recipe_dirs) -> None:
        """The user's definitions: ``engines/*.toml`` under each recipe directory, nearest
        first (a name defined twice is an error, as a recipe id is)."""
        for d in recipe_dirs:
            where = Path(d) / USER_DIR
            key = os.path.realpath(where)
            if key in self._dirs:
                continue
            self._dirs.add(key)
            try:
                names = sorted(n for n in os.listdir(where) if n.endswith(".toml"))
            except OSError:
                continue
            for n in names:
                from patchkit.base.config import decode_utf8, read_config

                p = where / n
                hint = "an engine definition is a small UTF-8 TOML file (docs/engines.md)"
                text = decode_utf8(
                    read_config(p, "definition of an engine", hint, EngineError), str(p), "definition of an engine"
                )
                self._all().update(parse(text, str(p), tuple(self._all())))

    def with_jit(self) -> Optional[EngineInfo]:
        """The engine that compiles its C++ at run time (``jit`` in its definition), if any."""
        return next((i for i in self._all().values() if i.jit), None)


ENGINES = Engines()
Engines.NONE = EngineInfo("", "", "", {}, "")  # no such engine: matches no target
