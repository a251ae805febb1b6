"""Recipes: TOML files under recipes/, parsed into frozen values and validated completely
before any target is read.  Every error names ``file:line > op #n > field``, the bad value
and what to do, and raises RecipeError (exit 2)."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import hashlib
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from patchkit.base import term
from patchkit.base.config import decode_utf8, read_config
from patchkit.base.errors import RecipeError
from patchkit.base.model import Blocker, Example, Expectation, Marker, OpSpec, Recipe, VerifySpec, When
from patchkit.base.target import ENGINES, logical_prefixes
from patchkit.core.ops import KINDS, OpParamError

TOP_KEYS = {
    "id": "str",
    "summary": "str",
    "rationale": "str",
    "bundles": "list[str]",
    "engines": "table",
    "ops": "list[table]",
    "variants": "list[table]",
    "blockers": "list[table]",
    "verify": "table",
    "device": "str",
}
VERIFY_KEYS = {"arch": "list[str]", "count": "list[str]", "expect": "list[table]"}
EXPECT_KEYS = {"kind": "str", "arch": "str", "module": "str", "instruction": "str", "as_arch": "str"}
# expectation kind -> (its required keys, its optional keys), beside `kind`
EXPECT_KINDS = {
    "no-empty-kernels": (("arch",), ("module",)),
    "same-count": (("arch", "instruction", "as_arch"), ("module",)),
}
ARCH_RE = re.compile(r"^[1-9][0-9]{1,2}[af]?$")  # "120a", "90a", "100f", "89"
PTX_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")  # "griddepcontrol", "mma.sync"
OP_KEYS = {
    "kind": "str",
    "engine": "str",
    "file": "str",
    "scope": "str",
    "locator": "table",
    "params": "table",
    "markers": "list[table]",
    "jit_modules": "list[str]",
    "when": "table",
    "examples": "list[table]",
    "identity": "table",
}
# A Python op's site identity as `capture` and `port` write it (patchkit/core/carried.py).
IDENTITY_KEYS = {"release": "str", "imports": "list[str]", "sites": "list[table]"}
SITE_KEYS = {
    "enclosing": "list[str]",
    "params": "str",
    "block": "list[str]",
    "at": "int",
    "before": "list[str]",  # the context lines across the blocks around the site, nearest first
    "after": "list[str]",
    "arms": "list[str]",  # "if C" / "else C": the ifs around the site (folds.py)
    "fold": "list[str]",  # ["if C" / "else C", its value, the other arm's]
    "folded": "list[str]",  # "before N" / "after N": the context lines the fold takes in
    "feeds": "list[str]",  # "callee(keyword=)" / "callee(#i)": the calls its names feed (context.feeds)
}
IMPORT_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:([A-Za-z_]\w*|\*))?$")
EXAMPLE_KEYS = {"before": "str", "after": "str"}
VARIANT_KEYS = {"when": "table", "ops": "list[table]"}
BLOCKER_KEYS = {
    "engine": "str",
    "file": "str",
    "scope": "str",
    "contains": "list[str]",
    "message": "str",
    "when": "table",
}
MARKER_KEYS = {"file": "str", "scope": "str", "contains": "list[str]", "proposed": "str"}
ID_MAX = 100  # an id names files (ID.toml, state entries): well inside a file name's 255 bytes
ID_RE = re.compile(rf"^[a-z0-9][a-z0-9-]{{0,{ID_MAX - 1}}}$")
ID_HINT = f"use at most {ID_MAX} lowercase letters, digits and dashes"
SCOPE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z_][A-Za-z0-9_]*)*$")


# libcst's native parser overflows the C stack on a few thousand levels of nesting (a crash,
# not an exception), so Python snippets nesting deeper than this are refused before it sees
# them.  CPython itself refuses more than 200 nested brackets.
MAX_BRACKETS = 200
MAX_AST_DEPTH = 1000


def _nesting(src: str) -> str:
    """Why a Python snippet nests too deeply to parse safely, or ""."""
    depth = top = 0
    for c in src:
        if c in "([{":
            depth += 1
            top = max(top, depth)
        elif c in ")]}":
            depth -= 1
    if top > MAX_BRACKETS:
        return f"nests {top} levels of brackets deep (at most {MAX_BRACKETS})"
    try:
        tree = ast.parse(textwrap.dedent(src))
    except (RecursionError, MemoryError):
        return "nests too deeply for Python's own parser"
    except (SyntaxError, ValueError):
        return ""  # not a complete snippet (or a NUL byte): the op kind says what is wrong
    stack = [(tree, 1)]
    while stack:  # no recursion: the tree may be thousands of levels deep
        node, d = stack.pop()
        if d > MAX_AST_DEPTH:
            return f"nests more than {MAX_AST_DEPTH} levels deep"
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return ""


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _type_ok(value: Any, t: str) -> bool:
    return {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "table": lambda v: isinstance(v, dict),
        "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "list[table]": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    }[t](value)


def _tname(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "table"}.get(
        type(value), type(value).__name__
    )


_TYPE_WORDS = {
    "str": "a string",
    "int": "an integer",
    "bool": "true or false",
    "table": "a table",
    "list[str]": "a list of strings",
    "list[table]": "an array of tables",
}


_TYPE_EXAMPLES = {
    "str": '"..."',
    "int": "1",
    "bool": "true",
    "table": "{ ... }",
    "list[str]": '["..."]',
    "list[table]": "[{ ... }]",
}


class _Lines:
    """Where each key of a TOML file stands, for error messages (tomllib gives no positions).
    Arrays of tables are numbered from 1, as in messages: ("variants", 2, "ops", 1, "kind")."""

    _KEY = re.compile(r'^\s*("?)([A-Za-z0-9_.-]+)\1\s*=')

    def __init__(self, text: str) -> None:
        self.at: dict[tuple, int] = {}
        section: tuple = ()
        counts: dict[str, int] = {}
        arrays: set[str] = set()
        for lineno, line in enumerate(text.splitlines(), 1):
            s = line.strip()
            if s.startswith("[["):
                name = s[2:].split("]]")[0].strip()
                arrays.add(name)
                counts[name] = counts.get(name, 0) + 1
                for k in [k for k in counts if k.startswith(name + ".")]:
                    counts[k] = 0
                section = self._path(name, counts, arrays)
            elif s.startswith("["):
                section = self._path(s[1:].split("]")[0].strip(), counts, arrays)
            else:
                m = self._KEY.match(line)
                if m:
                    self.at.setdefault((*section, m.group(2)), lineno)
                    continue
            self.at.setdefault(section, lineno)

    @staticmethod
    def _path(name: str, counts: dict[str, int], arrays: set[str]) -> tuple:
        out: list = []
        parts = name.split(".")
        for i, part in enumerate(parts):
            out.append(part)
            prefix = ".".join(parts[: i + 1])
            if prefix in arrays:
                out.append(counts.get(prefix, 0))
        return tuple(out)

    def line(self, *path) -> int | None:
        path = tuple(path)
        while path:
            if path in self.at:
                return self.at[path]
            path = path[:-1]
        return None


def _display(path: Path) -> str:
    """A recipe file as the user named its directory (``--recipes DIR``, or the project's
    recipes/ found from the pins), so that messages do not depend on the working directory."""
    return str(path)


class _Stop(Exception):
    """A part of a recipe that already reported its errors (``_Ctx.errors``): skip the rest."""


class _Ctx:
    """Where a recipe's errors go.  Strict (``errors`` None, every command): the first error
    is raised.  Collecting (``patchkit check``): each part of the recipe (a top-level key, an
    op, a marker, an example, a blocker) records its errors and the next part is read."""

    def __init__(self, path: Path, text: str, errors: list | None = None) -> None:
        self.path, self.lines = path, _Lines(text)
        self.errors = errors

    def fail(self, where: tuple, crumbs: list[str], message: str, hint: str = "") -> RecipeError:
        line = self.lines.line(*where)
        loc = f"{_display(self.path)}:{line}" if line else _display(self.path)
        return _error(loc, crumbs, message, hint)

    @contextlib.contextmanager
    def part(self):
        """One part of the recipe: in collecting mode, its error is recorded and reading goes on."""
        try:
            yield
        except RecipeError as e:
            if self.errors is None:
                raise
            self.errors.append(e)
        except _Stop:
            if self.errors is None:  # pragma: no cover - strict mode raises before a _Stop
                raise

    def check_keys(
        self, table: dict, allowed: dict[str, str], where: tuple, crumbs: list[str], what: str, go_on: bool = False
    ) -> set:
        """Unknown keys and values of the wrong type.  Collecting, every one is recorded; then
        the part stops (_Stop), unless ``go_on``: the caller leaves the bad keys (returned) out
        and reads the rest."""
        bad = set()
        for key, value in table.items():
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"{what} keys are: {', '.join(allowed)}"
                err = self.fail((*where, key), [*crumbs, key], f"unknown key {key!r}", hint)
            elif not _type_ok(value, allowed[key]):
                shown = repr(value)
                if len(shown) > 60:
                    shown = shown[:57] + "..."
                err = self.fail(
                    (*where, key),
                    [*crumbs, key],
                    f"must be {_TYPE_WORDS[allowed[key]]}, not {_tname(value)} {shown}",
                    f"e.g. {key} = {_TYPE_EXAMPLES[allowed[key]]}",
                )
            else:
                continue
            if self.errors is None:
                raise err
            self.errors.append(err)
            bad.add(key)
        if bad and not go_on:
            raise _Stop
        return bad

    def mark(self) -> int:
        return len(self.errors or ())

    def stop_if_failed(self, since: int) -> None:
        """After the parts of a unit: if any of them failed, the unit is not built."""
        if self.errors is not None and len(self.errors) > since:
            raise _Stop


def _error(loc: str, crumbs: list[str], message: str, hint: str = "") -> RecipeError:
    """A recipe error, carrying its parts for `patchkit check`'s breadcrumb line."""
    e = RecipeError(" > ".join([loc, *crumbs]) + f": {message}", hint)
    e.loc, e.crumbs, e.what = loc, list(crumbs), message
    return e


NOT_A_RECIPE = "a recipe is a regular UTF-8 .toml file of a few KiB; move anything else out of the recipes directory"


def load_recipe(path: Path) -> Recipe:
    """A recipe, validated; the first error is raised (RecipeError, exit 2)."""
    return _load(path, None)


def check_recipe(path: Path) -> tuple[Recipe | None, list[RecipeError]]:
    """Every error of a recipe file (``patchkit check``), and the recipe when there is none."""
    errors: list[RecipeError] = []
    try:
        recipe = _load(path, errors)
    except _Stop:
        recipe = None
    except RecipeError as e:
        errors.append(e)
        recipe = None
    return (None if errors else recipe), errors


def _load(path: Path, errors: list | None) -> Recipe:
    raw_bytes = read_config(path, "recipe", NOT_A_RECIPE, RecipeError)
    text = decode_utf8(raw_bytes, _display(path), "recipe", RecipeError)
    ctx = _Ctx(path, text, errors)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        loc = f"{_display(path)}:{m.group(1)}" if m else _display(path)
        raise _error(
            loc,
            [],
            f"invalid TOML: {str(e).split(' (at')[0]}",
            "check quoting; code snippets are easiest in '''literal strings'''",
        ) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise _error(
            _display(path),
            [],
            "invalid TOML: arrays or inline tables nested too deeply to read",
            "a recipe needs only a few levels of nesting; fix the file",
        ) from None
    bad = ctx.check_keys(data, TOP_KEYS, (), [], "recipe", go_on=True)
    data = {k: v for k, v in data.items() if k not in bad}
    for key in ("id", "summary", "engines", "ops"):
        with ctx.part():
            if key not in data and key not in bad:
                raise ctx.fail(
                    (),
                    [],
                    f"missing required key {key!r}",
                    "a recipe needs id, summary, rationale, bundles, [engines] and [[ops]]",
                )
    rid = data.get("id", path.stem)
    with ctx.part():
        if not ID_RE.fullmatch(rid):
            raise ctx.fail(
                ("id",),
                ["id"],
                f"{rid!r} is not a valid recipe id",
                f"{ID_HINT}, e.g. 'allreduce-fusion'",
            )
        if rid != path.stem:
            raise ctx.fail(
                ("id",),
                ["id"],
                f"{rid!r} does not match the file name {path.name!r}",
                f"rename the file to {rid}.toml or set id = {path.stem!r}",
            )
    with ctx.part():
        if "summary" in data and not data["summary"].strip():
            raise ctx.fail(("summary",), ["summary"], "is empty", "say in one line what the recipe does")
    for b in data.get("bundles", ()):
        with ctx.part():
            if not ID_RE.fullmatch(b):
                raise ctx.fail(
                    ("bundles",),
                    ["bundles"],
                    f"{b!r} is not a valid bundle name",
                    f"{ID_HINT}, e.g. 'sm120'",
                )
    engines: dict[str, SpecifierSet] = {}
    for eng, spec in data.get("engines", {}).items():
        with ctx.part():
            if eng not in ENGINES:
                raise ctx.fail(
                    ("engines", eng), ["engines", eng], f"unknown engine {eng!r}", f"engines: {', '.join(ENGINES)}"
                )
            engines[eng] = _specifier(
                ctx,
                ("engines", eng),
                ["engines", eng],
                spec,
                'e.g. sglang = ">=0.5.9,<0.5.13"',
                'use PEP 440, e.g. ">=0.5.9,<0.5.13"',
            )
    with ctx.part():
        if "engines" in data and not data["engines"]:
            raise ctx.fail(("engines",), ["engines"], "names no engine", 'e.g. [engines] sglang = ">=0.5.9"')
    with ctx.part():
        if "ops" in data and not data["ops"]:
            raise ctx.fail(("ops",), ["ops"], "recipe has no ops", "add at least one [[ops]] table")
    ops: list[OpSpec] = []
    n = 0  # op numbers run through the file, whether or not an op loads
    for raw in data.get("ops", ()):
        n += 1
        with ctx.part():
            ops.append(_load_op(ctx, n, raw, engines))
    for vi, var in enumerate(data.get("variants", ()), 1):
        vw, vc = ("variants", vi), [f"variant #{vi}"]
        vbad = ctx.check_keys(var, VARIANT_KEYS, vw, vc, "variant", go_on=True)
        var = {k: v for k, v in var.items() if k not in vbad}
        when: When = ()
        with ctx.part():
            for key in ("when", "ops"):
                if not var.get(key) and key not in vbad:
                    raise ctx.fail(
                        vw, [*vc, key], "is required", "a [[variants]] table has `when` and its [[variants.ops]]"
                    )
            if var.get("when"):
                when = _load_when(ctx, (*vw, "when"), [*vc, "when"], var["when"], engines)
        for j, raw in enumerate(var.get("ops", ()), 1):
            n += 1
            with ctx.part():
                if "when" in raw:
                    raise ctx.fail(
                        (*vw, "ops", j, "when"),
                        [*vc, f"op #{n}", "when"],
                        "an op of a variant takes the variant's `when`",
                        "move the op out of [[variants]], or into a variant with its own `when`",
                    )
                op = _load_op(ctx, n, raw, engines, where=(*vw, "ops", j))
                ops.append(dataclasses.replace(op, when=when))
    blockers_: list[Blocker] = []
    for k, raw in enumerate(data.get("blockers", ()), 1):
        with ctx.part():
            blockers_.append(_load_blocker(ctx, k, raw, engines))
    ctx.stop_if_failed(0)
    blockers = tuple(blockers_)
    verify = _load_verify(ctx, data["verify"], ops) if "verify" in data else VerifySpec()
    device = data.get("device", "").strip()
    if device:
        from patchkit.core.goals.device import Device

        try:
            Device.parse(device)
        except ValueError as e:
            raise ctx.fail(
                ("device",),
                ["device"],
                str(e),
                'name a compute capability: "sm120", "12.0"',
            ) from None
    return Recipe(
        id=rid,
        summary=data["summary"].strip(),
        rationale=data.get("rationale", "").strip(),
        bundles=tuple(data.get("bundles", ())),
        engines=engines,
        ops=tuple(ops),
        path=path,
        sha256=hashlib.sha256(raw_bytes).hexdigest(),
        blockers=blockers,
        verify=verify,
        device=device,
    )


def _arch(ctx: _Ctx, where: tuple, crumbs: list[str], value: str) -> str:
    if not ARCH_RE.fullmatch(value):
        raise ctx.fail(
            where,
            crumbs,
            f"{value!r} is not a CUDA arch",
            'write the compute capability\'s digits and its suffix, e.g. "120a" (sm_120a) or "90a"',
        )
    return value


def _load_verify(ctx: _Ctx, raw: dict, ops: list[OpSpec]) -> VerifySpec:
    """``[verify]``: what `patchkit verify --build` builds by default and must find there."""
    ctx.check_keys(raw, VERIFY_KEYS, ("verify",), ["verify"], "[verify]")
    archs = tuple(_arch(ctx, ("verify", "arch"), ["verify", "arch"], a) for a in raw.get("arch", ()))
    for name in raw.get("count", ()):
        if not PTX_RE.fullmatch(name):
            raise ctx.fail(
                ("verify", "count"),
                ["verify", "count"],
                f"{name!r} is not a PTX instruction name",
                'e.g. count = ["griddepcontrol", "mma.sync"]',
            )
    modules = sorted({m for op in ops for m in op.jit_modules})
    expect = []
    for k, e in enumerate(raw.get("expect", ()), 1):
        where, crumbs = ("verify", "expect", k), ["verify", f"expect #{k}"]
        ctx.check_keys(e, EXPECT_KEYS, where, crumbs, "[[verify.expect]]")
        kind = e.get("kind")
        if kind not in EXPECT_KINDS:
            raise ctx.fail(
                (*where, "kind"),
                [*crumbs, "kind"],
                "is required" if kind is None else f"unknown expectation {kind!r}",
                f"kinds: {', '.join(EXPECT_KINDS)}",
            )
        required, optional = EXPECT_KINDS[kind]
        for key in e:
            if key != "kind" and key not in required + optional:
                raise ctx.fail(
                    (*where, key),
                    [*crumbs, key],
                    f"{kind} takes no {key}",
                    f"{kind} takes {', '.join(required + optional)}",
                )
        for key in required:
            if not e.get(key):
                raise ctx.fail(where, [*crumbs, key], "is required", f"{kind} needs {', '.join(required)}")
        arch = _arch(ctx, (*where, "arch"), [*crumbs, "arch"], e["arch"])
        as_arch = _arch(ctx, (*where, "as_arch"), [*crumbs, "as_arch"], e["as_arch"]) if "as_arch" in e else ""
        if as_arch == arch:
            raise ctx.fail(
                (*where, "as_arch"), [*crumbs, "as_arch"], "is the arch itself", "compare with another arch, e.g. 90a"
            )
        instruction = e.get("instruction", "")
        if instruction and not PTX_RE.fullmatch(instruction):
            raise ctx.fail(
                (*where, "instruction"),
                [*crumbs, "instruction"],
                f"{instruction!r} is not a PTX instruction name",
                'e.g. instruction = "griddepcontrol"',
            )
        module = e.get("module", "")
        if module and module not in modules:
            raise ctx.fail(
                (*where, "module"),
                [*crumbs, "module"],
                f"{module!r} is not a JIT module any op of the recipe names",
                f"the ops' jit_modules: {', '.join(modules)}" if modules else "name it in an op's jit_modules first",
            )
        expect.append(Expectation(k, kind, arch, module, instruction, as_arch))
    return VerifySpec(archs, tuple(raw.get("count", ())), tuple(expect))


def _specifier(ctx: _Ctx, where: tuple, crumbs: list[str], spec, type_hint: str, syntax_hint: str) -> SpecifierSet:
    """A PEP 440 range ([engines] or a `when`), or the error naming where it stands."""
    if not isinstance(spec, str):
        raise ctx.fail(where, crumbs, f"must be a PEP 440 specifier string, not {_tname(spec)} {spec!r}", type_hint)
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier:
        raise ctx.fail(where, crumbs, f"{spec!r} is not a valid version specifier", syntax_hint) from None


def _check_engine(ctx: _Ctx, where: tuple, crumbs: list[str], engine: str, engines: dict) -> None:
    """An op's or a blocker's engine must be one the recipe names in [engines]."""
    if engine not in engines:
        raise ctx.fail(
            (*where, "engine"),
            [*crumbs, "engine"],
            f"engine {engine!r} is not in the recipe's [engines]",
            f'add {engine} = "<versions>" under [engines]',
        )


def _load_when(ctx: _Ctx, where: tuple, crumbs: list[str], raw: dict, engines: dict) -> When:
    """``when = { sglang = ">=0.5.19" }``: the releases an op, a variant or a blocker is for."""
    out = []
    for eng, spec in sorted(raw.items()):
        if eng not in engines:
            raise ctx.fail(
                (*where, eng),
                [*crumbs, eng],
                f"engine {eng!r} is not in the recipe's [engines]",
                f"name one of {', '.join(engines)}",
            )
        hint = f'e.g. when = {{ {eng} = ">=0.5.19" }}'
        out.append((eng, _specifier(ctx, (*where, eng), [*crumbs, eng], spec, hint, 'e.g. ">=0.5.19,<0.5.21"')))
    if not out:
        raise ctx.fail(where, crumbs, "names no engine", 'e.g. when = { sglang = ">=0.5.19" }')
    return tuple(out)


def _load_blocker(ctx: _Ctx, k: int, raw: dict, engines: dict) -> Blocker:
    where, crumbs = ("blockers", k), [f"blocker #{k}"]
    ctx.check_keys(raw, BLOCKER_KEYS, where, crumbs, "blocker")
    for key in ("engine", "file", "contains", "message"):
        if not raw.get(key):
            raise ctx.fail(
                where,
                [*crumbs, key],
                "is required and must not be empty",
                "a blocker needs engine, file, contains (code fragments, in order) and message;"
                " scope and when are optional",
            )
    engine = raw["engine"]
    _check_engine(ctx, where, crumbs, engine, engines)
    _check_file(ctx, (*where, "file"), [*crumbs, "file"], engine, raw["file"])
    scope = raw.get("scope", "")
    if scope and not SCOPE_RE.fullmatch(scope):
        raise ctx.fail(
            (*where, "scope"), [*crumbs, "scope"], f"{scope!r} is not a qualified name", "e.g. '_resolve_backend'"
        )
    if any(not c.strip() for c in raw["contains"]):
        raise ctx.fail(
            (*where, "contains"), [*crumbs, "contains"], "holds an empty fragment", "every file contains it; remove it"
        )
    when = _load_when(ctx, (*where, "when"), [*crumbs, "when"], raw["when"], engines) if "when" in raw else ()
    return Blocker(k, engine, raw["file"], scope, tuple(raw["contains"]), raw["message"].strip(), when)


def _check_file(ctx: _Ctx, where: tuple, crumbs: list[str], engine: str | None, file: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 for c in file):
        raise ctx.fail(
            where,
            crumbs,
            f"{file!r} holds a control character",
            "name the file relative to the package, e.g. 'sglang/srt/server_args.py'",
        )
    if "\\" in file:
        raise ctx.fail(
            where,
            crumbs,
            f"{file!r} uses backslashes",
            f"use forward slashes, e.g. {file.replace(chr(92), '/').lstrip('/')!r}",
        )
    if file.startswith("/") or re.match(r"^[A-Za-z]:", file):
        raise ctx.fail(
            where,
            crumbs,
            f"{file!r} is an absolute path",
            "name the file relative to the package, e.g. 'sglang/srt/server_args.py'",
        )
    if ".." in Path(file).parts:
        raise ctx.fail(
            where, crumbs, f"{file!r} climbs out of the target with '..'", "name the file relative to the package"
        )
    if engine is not None and not file.startswith(logical_prefixes(engine)):  # None: an unknown engine, said
        raise ctx.fail(
            where,
            crumbs,
            f"{file!r} is not a {engine} file",
            f"{engine} files start with {', '.join(logical_prefixes(engine))}",
        )


def _load_op(ctx: _Ctx, i: int, raw: dict, engines: dict, where: tuple = ()) -> OpSpec:
    where, crumbs = where or ("ops", i), [f"op #{i}"]
    since = ctx.mark()
    bad = ctx.check_keys(raw, OP_KEYS, where, crumbs, "op", go_on=True)
    raw = {k: v for k, v in raw.items() if k not in bad}
    absent = [key for key in ("kind", "engine", "file") if key not in raw]
    for key in absent:  # each one said (a key of the wrong type is said already)
        with ctx.part():
            if key not in bad:
                raise ctx.fail(
                    where,
                    crumbs,
                    f"missing required key {key!r}",
                    "an op needs kind, engine, file, and usually scope, locator and params",
                )
    if absent and ctx.errors is None:  # pragma: no cover - strict mode raised above
        raise _Stop
    # What is there is still read, so `check` names every error of the op in one run.
    kind = raw.get("kind")
    cls = KINDS.get(kind) if kind is not None else None
    with ctx.part():
        if cls is None and kind is not None:
            close = difflib.get_close_matches(kind, KINDS, n=1)
            raise ctx.fail(
                (*where, "kind"),
                [*crumbs, "kind"],
                f"unknown op kind {kind!r}",
                f"did you mean {close[0]!r}?" if close else f"kinds: {', '.join(sorted(KINDS))}",
            )
    engine = raw.get("engine")
    file = raw.get("file")
    with ctx.part():
        if engine is not None:
            _check_engine(ctx, where, crumbs, engine, engines)
    with ctx.part():
        if file is not None:
            _check_file(ctx, (*where, "file"), [*crumbs, "file"], engine if engine in ENGINES else None, file)
    with ctx.part():
        if (
            file is not None
            and cls is not None
            and not cls.ANY_FILE
            and (cls.language == "python") != file.endswith(".py")
        ):
            raise ctx.fail(
                (*where, "file"),
                [*crumbs, "file"],
                f"{kind} edits {'Python' if cls.language == 'python' else 'non-Python'} files, and {file!r} is "
                f"{'not ' if cls.language == 'python' else ''}one",
                "use text-hunk (or text-replace) for C++/CUDA/CMake files"
                if cls.language == "python"
                else "use a Python op (or text-hunk, which edits any file) for .py files",
            )
    scope = raw.get("scope", "")
    with ctx.part():
        if scope and not SCOPE_RE.fullmatch(scope):
            raise ctx.fail(
                (*where, "scope"),
                [*crumbs, "scope"],
                f"{scope!r} is not a qualified name",
                "e.g. 'ServerArgs._handle_moe_kernel_config', or leave it out for module level",
            )
        if scope and cls is not None and not cls.SCOPED:
            raise ctx.fail(
                (*where, "scope"),
                [*crumbs, "scope"],
                f"{kind} works on the whole file and takes no scope",
                "remove scope",
            )
    impl = None
    if cls is not None:
        with ctx.part():
            impl = _load_impl(ctx, cls, kind, raw, where, crumbs)
    markers = []
    for j, m in enumerate(raw.get("markers", []) if engine in engines else (), 1):  # else: said above
        with ctx.part():
            markers.append(_load_marker(ctx, m, j, cls, where, crumbs, engine, file, scope))
    examples = []
    for j, ex in enumerate(raw.get("examples", []), 1):
        with ctx.part():
            examples.append(_load_example(ctx, ex, j, where, crumbs, str(file).endswith(".py")))
    when: When = ()
    with ctx.part():
        when = _load_when(ctx, (*where, "when"), [*crumbs, "when"], raw["when"], engines) if "when" in raw else ()
    ident = None
    if "identity" in raw and engine is not None and file is not None:
        with ctx.part():
            ident = _load_identity(ctx, raw["identity"], cls, kind, where, crumbs, engine, file, scope)
    ctx.stop_if_failed(since)
    return OpSpec(
        index=i,
        kind=kind,
        engine=engine,
        file=file,
        scope=scope,
        impl=impl,
        markers=tuple(markers),
        jit_modules=tuple(raw.get("jit_modules", ())),
        when=when,
        examples=tuple(examples),
        identity=ident,
    )


def _check_fold(ctx: _Ctx, s: dict, sw: tuple, sc: list) -> None:
    """An identity site's ``arms``, ``fold`` and ``folded`` (carried.py, folds.py)."""
    arm = re.compile(r"(if|else) \S.*", re.S)
    bad = next((a for a in s.get("arms", ()) if not arm.fullmatch(a)), None)
    if bad is not None:
        raise ctx.fail((*sw, "arms"), [*sc, "arms"], f"{bad!r} is not an arm", "e.g. \"else kv == 'fp8'\"")
    if "fold" in s and (len(s["fold"]) != 3 or not arm.fullmatch(s["fold"][0]) or "at" not in s):
        why = "a fold is [arm, the site's value, the other arm's], at a site with `at`"
        raise ctx.fail((*sw, "fold"), [*sc, "fold"], "is not a fold", why)
    for f in s.get("folded", ()):
        side, _, n = f.partition(" ")
        if (
            "fold" not in s
            or side not in ("before", "after")
            or not n.isdigit()
            or not 1 <= int(n) <= len(s.get(side, ()))
        ):
            raise ctx.fail(
                (*sw, "folded"), [*sc, "folded"], f"{f!r} is not a context line of the fold", '"after 1" to "after 3"'
            )


def _load_identity(ctx: _Ctx, t: dict, cls, kind: str, where, crumbs, engine: str, file: str, scope: str):
    """``[ops.identity]``: the site as in the release the op was written for (carried.py)."""
    from packaging.version import InvalidVersion, Version

    from patchkit.core import carried

    iw, ic = (*where, "identity"), [*crumbs, "identity"]
    if cls is not None and (cls.language != "python" or not cls.RELOCATABLE):
        raise ctx.fail(iw, ic, f"{kind} carries no identity", "remove [ops.identity]: only Python ops that move do")
    ctx.check_keys(t, IDENTITY_KEYS, iw, ic, "identity")
    for key in ("release", "sites"):
        if not t.get(key):
            raise ctx.fail(iw, [*ic, key], "is required", "capture and port write it; delete the whole table instead")
    eng, _, version = t["release"].partition(" ")
    try:
        Version(version)
        ok = eng == engine
    except InvalidVersion:
        ok = False
    if not ok:
        raise ctx.fail(
            (*iw, "release"),
            [*ic, "release"],
            f"{t['release']!r} is not a release of {engine}",
            f'e.g. "{engine} 0.5.9"',
        )
    bad = next((i for i in t.get("imports", ()) if not IMPORT_RE.fullmatch(i)), None)
    if bad is not None:
        raise ctx.fail((*iw, "imports"), [*ic, "imports"], f"{bad!r} is not an import", 'e.g. "sglang.srt.utils:name"')
    if len(t["sites"]) > carried.MAX_SITES:
        raise ctx.fail((*iw, "sites"), [*ic, "sites"], f"lists {len(t['sites'])} sites", f"at most {carried.MAX_SITES}")
    for j, s in enumerate(t["sites"], 1):
        sw, sc = (*iw, "sites", j), [*ic, f"site #{j}"]
        ctx.check_keys(s, SITE_KEYS, sw, sc, "identity site")
        if not s.get("block"):
            raise ctx.fail(sw, [*sc, "block"], "is required and must not be empty", "the statements around the site")
        if "at" in s and not 1 <= s["at"] <= len(s["block"]):
            raise ctx.fail(
                (*sw, "at"), [*sc, "at"], f"{s['at']} is not a statement of block", f"1 to {len(s['block'])}"
            )
        if ("enclosing" in s) != ("params" in s):
            missing = "params" if "enclosing" in s else "enclosing"
            why = "enclosing (the def's name words) and params go together; neither at module level"
            raise ctx.fail(sw, [*sc, missing], "is required with the other", why)
        if ("before" in s or "after" in s) and "at" not in s:
            raise ctx.fail(sw, [*sc, "before"], "context lines need the site's place", "give at, or drop before/after")
        for side in ("before", "after"):
            if len(s.get(side, ())) > carried.NEAR:
                raise ctx.fail((*sw, side), [*sc, side], f"lists {len(s[side])} statements", f"at most {carried.NEAR}")
        _check_fold(ctx, s, sw, sc)
        if any(not re.fullmatch(r"[a-z0-9]+", w) for w in s.get("enclosing", ())):
            raise ctx.fail((*sw, "enclosing"), [*sc, "enclosing"], "must be lower-case name words",
                           'e.g. ["handle", "moe", "kernel", "config"]')  # fmt: skip
    return carried.build(t["release"], file, scope, t.get("imports", []), t["sites"])


def _load_impl(ctx: _Ctx, cls, kind: str, raw: dict, where: tuple, crumbs: list[str]):
    """The op kind's object, built from its locator and params."""
    since = ctx.mark()
    tables = {}
    for section, allowed in (("locator", cls.LOCATOR), ("params", cls.PARAMS)):
        table = raw.get(section, {})
        bad = ctx.check_keys(table, allowed, (*where, section), [*crumbs, section], f"{kind} {section}", go_on=True)
        tables[section] = {k: v for k, v in table.items() if k not in bad}
    ctx.stop_if_failed(since)
    if cls.language == "python":
        for section in ("locator", "params"):
            for key, value in tables[section].items():
                for src in _strings(value):
                    why = _nesting(src)
                    if why:
                        raise ctx.fail(
                            (*where, section, key),
                            [*crumbs, f"{section}.{key}"],
                            why,
                            "a snippet in a recipe is a few lines of ordinary code; fix the recipe",
                        )
    for req in cls.REQUIRED:
        section, key = req.split(".")
        if key not in tables[section]:
            raise ctx.fail((*where, section), [*crumbs, req], "is required", f"{kind} needs {', '.join(cls.REQUIRED)}")
    try:
        return cls(tables["locator"], tables["params"])
    except OpParamError as e:
        section = e.field.split(".")[0]
        raise ctx.fail(
            (*where, section, e.field.split(".")[-1].split("[")[0]),
            [*crumbs, e.field],
            e.message,
            e.hint or f"see the {kind} row of the op table in docs/recipes.md",
        ) from None


def _load_marker(ctx: _Ctx, m: dict, j: int, cls, where, crumbs, engine: str, file: str, scope: str) -> Marker:
    mw, mc = (*where, "markers", j), [*crumbs, f"marker #{j}"]
    ctx.check_keys(m, MARKER_KEYS, mw, mc, "marker")
    if not m.get("contains"):
        raise ctx.fail(
            mw,
            [*mc, "contains"],
            "is required and must not be empty",
            "list code fragments that upstream's version must all contain",
        )
    python = cls is None or cls.language == "python"
    why = next((w for w in map(_nesting, m["contains"]) if w), "") if python else ""
    if why:
        raise ctx.fail(
            (*mw, "contains"),
            [*mc, "contains"],
            why,
            "a marker lists short fragments of upstream's code; fix the recipe",
        )
    if not all(m["contains"]):
        raise ctx.fail(
            (*mw, "contains"),
            [*mc, "contains"],
            "holds an empty string, which every file contains",
            "list code fragments that upstream's version must all contain",
        )
    mfile = m.get("file", file)
    _check_file(ctx, (*mw, "file"), [*mc, "file"], engine, mfile)
    mscope = m.get("scope", scope)
    if mscope and not SCOPE_RE.fullmatch(mscope):
        raise ctx.fail(
            (*mw, "scope"),
            [*mc, "scope"],
            f"{mscope!r} is not a qualified name",
            "e.g. 'ServerArgs._handle_moe_kernel_config', or leave it out for the op's scope",
        )
    if "proposed" in m and not m["proposed"].strip():
        raise ctx.fail(
            (*mw, "proposed"),
            [*mc, "proposed"],
            "is empty",
            "`proposed` says what a person must read before the marker counts: delete the line to confirm it",
        )
    return Marker(
        file=mfile,
        scope=mscope,
        contains=tuple(m["contains"]),
        proposed=m.get("proposed", ""),
        line=ctx.lines.line(*mw) or 0,
    )


def _load_example(ctx: _Ctx, ex: dict, j: int, where: tuple, crumbs: list[str], python: bool) -> Example:
    """``[[ops.examples]] before = ... after = ...``: a small file (or the op's scope in one)
    that `patchkit check` applies the op to (with libcst, for a Python file: so its nesting
    is checked here, as a snippet's is)."""
    ew, ec = (*where, "examples", j), [*crumbs, f"example #{j}"]
    ctx.check_keys(ex, EXAMPLE_KEYS, ew, ec, "example")
    for key in ("before", "after"):
        if key not in ex:
            raise ctx.fail(
                ew,
                [*ec, key],
                "is required",
                "an example has `before` (code the op finds pending) and `after` (exactly what apply makes of it)",
            )
    if ex["before"] == ex["after"]:
        raise ctx.fail((*ew, "after"), [*ec, "after"], "equals before", "an example shows the edit the op makes")
    for key in ("before", "after") if python else ():
        why = _nesting(ex[key]) if isinstance(ex[key], str) else ""
        if why:
            raise ctx.fail((*ew, key), [*ec, key], why, "an example is a small ordinary file; fix the recipe")
    line = ctx.lines.line(*ew)
    return Example(before=ex["before"], after=ex["after"], line=line or 0)


class Catalog:
    """Every recipe of the recipe directories in play, and the bundles they name.  A recipe
    in a nearer directory overrides one with the same id farther away; ``origin[id]`` says
    where each comes from (config.PATH, PROJECT, USER, SHIPPED) and ``shadowed[id]`` lists
    the farther files it overrides."""

    def __init__(
        self, recipes: list[Recipe], broken: dict[str, "Broken"] | None = None, origin: dict[str, str] | None = None
    ) -> None:
        self.recipes = {r.id: r for r in recipes}
        self.origin: dict[str, str] = dict(origin or {})
        self.shadowed: dict[str, list[Path]] = {}
        self.dirs: list = []  # the RecipeDirs read, nearest first
        self.bundles: dict[str, list[str]] = {}
        for r in recipes:
            for b in r.bundles:
                self.bundles.setdefault(b, []).append(r.id)
        # Recipe files that do not load, by the id their file name gives: a command that
        # names one (or a bundle it claims) fails with its error; any other warns and goes on.
        self.broken: dict[str, Broken] = broken or {}

    @classmethod
    def load(cls, dirs) -> "Catalog":
        """The catalog of ``dirs``: one recipes directory (a Path), or the project's
        RecipeDir list, nearest first.  An explicit directory (``--recipes``,
        PATCHKIT_RECIPES) must exist; the project's, the user's and the shipped ones are
        read where they exist."""
        from patchkit.base.config import PATH, RecipeDir

        if isinstance(dirs, (str, Path)):
            dirs = [RecipeDir(Path(dirs), PATH, True)]
        ENGINES.add_dirs(rd.path for rd in dirs)  # engines/*.toml beside the recipes (engines.py)
        recipes: list[Recipe] = []
        origin: dict[str, str] = {}
        seen: dict[str, Path] = {}
        shadowed: dict[str, list[Path]] = {}
        broken: dict[str, Broken] = {}
        for rd in dirs:
            names = _listdir(rd)
            if names is None:
                continue
            for name in sorted(n for n in names if n.endswith(".toml")):
                path = rd.path / name
                rid = name[: -len(".toml")]
                if rid in seen or rid in broken:  # a nearer directory has this id: it overrides this file
                    shadowed.setdefault(rid, []).append(path)
                    continue
                try:
                    r = load_recipe(path)
                except RecipeError as e:  # commands that do not name it warn and go on
                    broken[rid] = Broken(path, e, _claimed_bundles(path))
                    continue
                recipes.append(r)
                origin[r.id] = rd.origin
                seen[r.id] = path
        recipes.sort(key=lambda r: r.id)  # by id wherever each comes from: an override keeps its place in a bundle
        cat = cls(recipes, broken, origin)
        cat.shadowed = shadowed
        cat.dirs = list(dirs)
        for b in cat.bundles:
            if b in cat.recipes:
                raise RecipeError(
                    f"{_display(seen[b])}: bundle name {b!r} is also a recipe id", "rename the bundle or the recipe"
                )
        return cat

    def select(self, names: tuple[str, ...] | list[str]) -> list[Recipe]:
        """Recipes named by ids or bundle names, in catalog order; no names = all."""
        for name in names:  # a broken recipe named, or a bundle it claims: its error
            for b in self.broken.values():
                if name == b.path.stem or (name in b.bundles and name not in self.recipes):
                    raise b.error
        self.warn()
        if not names:
            return list(self.recipes.values())
        wanted: list[str] = []
        for name in names:
            if name in self.recipes:
                ids = [name]
            elif name in self.bundles:
                ids = self.bundles[name]
            else:
                choices = [*self.recipes, *self.bundles]
                close = difflib.get_close_matches(name, choices, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(choices)} (see `patchkit list`)"
                raise RecipeError(f"unknown recipe or bundle {name!r}", hint)
            wanted += [i for i in ids if i not in wanted]
        return [r for r in self.recipes.values() if r.id in wanted]

    def warn(self) -> None:
        """One line on stderr per broken recipe file (once per process): the commands that
        do not name it go on without it."""
        for b in self.broken.values():
            line = f"patchkit: warning: {b.error} (skipped; `patchkit check` lists every error)"
            if line not in _WARNED:
                _WARNED.add(line)
                term.echo(line, err=True)


_WARNED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Broken:
    """A recipe file that does not load: where, why, and the bundles it seems to claim."""

    path: Path
    error: RecipeError
    bundles: tuple[str, ...] = ()


def _claimed_bundles(path: Path) -> tuple[str, ...]:
    """The bundles a recipe file that does not load says it belongs to, as far as can be
    told: its ``bundles`` if the TOML reads, else the names on a ``bundles = [...]`` line."""
    try:  # only a regular file, never blocking (a FIFO), as load_recipe reads it
        text = read_config(path, "recipe", NOT_A_RECIPE, RecipeError).decode("utf-8", "replace")
    except RecipeError:
        return ()
    try:
        value = tomllib.loads(text).get("bundles", ())
    except (tomllib.TOMLDecodeError, RecursionError):
        m = re.search(r"^\s*bundles\s*=\s*\[([^\]]*)\]", text, re.M)
        value = re.findall(r"""["']([^"']+)["']""", m.group(1)) if m else ()
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _listdir(rd) -> list[str] | None:
    """The names in a recipe directory; None for an implicit one that is not there.  Not
    glob(): it would read an unreadable directory as empty."""
    directory = rd.path
    env = rd.named.split("=", 1)[0] if rd.named.startswith("PATCHKIT_") else ""
    where = f"fix or unset {env}" if env else "run from the project, or pass --recipes DIR"
    if "\0" in str(directory):
        raise RecipeError(f"{str(directory)!r}: the recipes directory's path holds a NUL byte", "pass --recipes DIR")
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        if not rd.explicit:
            return None
        named = f" (named by {env})" if env else ""
        raise RecipeError(f"{directory}: recipes directory not found{named}", where) from None
    except NotADirectoryError:
        if not rd.explicit:
            return None
        raise RecipeError(
            f"{directory}: is not a directory; recipes live in a directory of .toml files",
            where if env else "pass --recipes DIR",
        ) from None
    except OSError as e:
        raise RecipeError(
            f"{directory}: the recipes directory cannot be read ({e.strerror or e})",
            "fix its permissions, or pass --recipes DIR",
        ) from None
