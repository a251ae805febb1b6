"""Profiles: the state a user wants their trees in, written down once.

A profile names bundles and recipes to apply, and recipes to leave out of those bundles::

    bundles = ["sm120"]
    exclude = ["allreduce-fusion"]   # 236 tok/s on SM120 with it (see `patchkit show allreduce-fusion`)
    recipes = []                      # recipes wanted on their own, outside any bundle

`apply` and `status` with no names, and `doctor`, use it; `apply NAME --save` and
`revert NAME --save` change it with tomlkit, so that its comments and layout stay.

Where it lives, nearest first (the one read is the one ``--save`` writes):

1. ``<target>/.patchkit/profile.toml``, for a tree given with ``--python`` or ``--target``:
   a serving venv's own desired state, beside patchkit's journal in its site-packages.  It
   outlives ``pip install -U sglang``, so ``patchkit apply --python PY`` after an upgrade
   patches the venv as it was, and two venvs can want different things.
2. ``patchkit.toml`` in the working directory or the nearest directory above it that has
   one: the workspace's, kept in its repository beside ``upstream_pins.toml``.

``--save`` with no profile creates the first of these that applies: in the target when the
command was given ``--python`` or ``--target``, else beside ``upstream_pins.toml`` (or in the
working directory).

Only the standard library and patchkit's start-up modules (errors, target) are imported
here: ``status`` reads a profile on its fast path.  tomllib parses only when there is a
file; tomlkit is imported by ``--save`` alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from patchkit.base.errors import PatchkitError
from patchkit.base.target import STATE_DIR

PROJECT_FILE = "patchkit.toml"
TARGET_FILE = "profile.toml"  # in <target>/.patchkit/
KEYS = ("bundles", "recipes", "exclude")
HINT = 'e.g. bundles = ["sm120"] and exclude = ["allreduce-fusion"]; keys: ' + ", ".join(KEYS)

NEW_PROJECT = """\
# patchkit's profile for this workspace: the state its trees should be in.
# `patchkit apply` and `patchkit status` with no names, and `patchkit doctor`, use it;
# `patchkit apply NAME --save` and `patchkit revert NAME --save` change it.
"""
NEW_TARGET = """\
# patchkit's profile for this environment: the recipes it should carry.  After
# `pip install -U sglang`, `patchkit apply --python PY` patches it again to this state.
"""


@dataclass(frozen=True)
class Profile:
    path: Path
    bundles: tuple[str, ...] = ()
    recipes: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    exists: bool = True
    # carried by a patchkit wheel (``path``: its dist-info's patchkit.json), not a file of
    # patchkit's own: read-only; ``--save`` writes the tree's profile.toml, seeded from it
    wheel: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """What `apply` with no names applies (bundles expand; ``exclude`` then leaves out)."""
        return self.bundles + self.recipes

    def left_out(self, ids: Iterable[str], named: Iterable[str]) -> list[str]:
        """Of the recipe ids a command selected, those the profile excludes and that were
        not named on their own (a bundle brought them in)."""
        named = set(named)
        return [i for i in ids if i in self.exclude and i not in named]

    def describe(self) -> str:
        parts = [f"{k} {', '.join(getattr(self, k))}" for k in KEYS if getattr(self, k)]
        return "; ".join(parts) or "empty"

    def to_json(self) -> dict:
        return {"path": str(self.path), "bundles": list(self.bundles), "recipes": list(self.recipes),
                "exclude": list(self.exclude)}  # fmt: skip


# -- where -----------------------------------------------------------------------------------


def project_file(pins_path: Optional[Path], start: Optional[Path] = None) -> tuple[Path, bool]:
    """(the workspace's patchkit.toml, whether it exists): the nearest in the working
    directory or above; else where --save creates it (beside the pins, or here)."""
    d = (start or Path.cwd()).resolve()
    for p in (d, *d.parents):
        if _there(p / PROJECT_FILE):
            return p / PROJECT_FILE, True
    base = pins_path.parent if pins_path else d
    p = base / PROJECT_FILE
    return p, _there(p)


def _there(path: Path) -> bool:
    """Is anything at ``path``?  Not only a regular file: a directory, a FIFO or a broken
    link named like a profile is the profile in play, and ``load`` refuses it (exit 2),
    rather than being passed over so that every recipe is judged."""
    return os.path.lexists(path)


def target_file(root: Path) -> Path:
    return Path(root) / STATE_DIR / TARGET_FILE


def find(pins_path: Optional[Path], roots: Sequence[Path] = ()) -> Profile:
    """The profile in play: a target's own (``roots``: the trees given with --python or
    --target, nearest first), else the workspace's.  With none, a Profile with
    ``exists=False`` whose path is where --save would create one."""
    for root in roots:
        p = target_file(root)
        if _there(p):
            return load(p)
    carried = wheel_profile(roots)
    if carried is not None:
        return carried
    proj, there = project_file(pins_path)
    if there:
        return load(proj)
    return Profile(path=target_file(roots[0]) if roots else proj, exists=False)


def wheel_profile(roots: Sequence[Path]) -> Optional[Profile]:
    """The profile patchkit wheels installed in ``roots`` carry (``<dist-info>/patchkit.json``'s
    ``profile``: the bundles and recipes `patchkit wheel` built), the lists of every such
    wheel there together; None when there is none.  Only an engine's own dist-info is read."""
    import json

    from patchkit.base.target import ENGINES

    stems = {re.sub(r"[-_.]+", "_", i.dist).lower() for i in ENGINES.values()}
    found: list[tuple[Path, dict]] = []
    for root in roots:
        try:
            entries = sorted(os.listdir(root))
        except OSError:
            continue
        for name in entries:
            if (
                not name.endswith(".dist-info")
                or re.sub(r"[-_.]+", "_", name[: -len(".dist-info")].rsplit("-", 1)[0]).lower() not in stems
            ):
                continue
            p = Path(root) / name / "patchkit.json"
            try:
                doc = json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None
            except (OSError, ValueError, RecursionError):
                continue
            prof = doc.get("profile") if isinstance(doc, dict) else None
            if not isinstance(prof, dict):
                continue
            lists = {k: prof.get(k, []) for k in ("bundles", "recipes")}
            if all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists.values()):
                found.append((p, lists))
    if not found:
        return None
    merged = {k: tuple(dict.fromkeys(x for _, lists in found for x in lists[k])) for k in ("bundles", "recipes")}
    return Profile(path=found[0][0], wheel=True, **merged)


def python_roots(facts: Optional[dict]) -> list[str]:
    """The roots an interpreter imports the engines from (``interp.probe_python``'s facts)."""
    from patchkit.base.target import ENGINES

    mods = (facts or {}).get("modules", {})
    return [mods[i.package]["root"] for i in ENGINES.values() if mods.get(i.package, {}).get("found")]


def target_roots(target_args: Sequence[str], python_roots: Sequence[str] = ()) -> list[Path]:
    """The roots of the trees a command was pointed at, in the order they were given."""
    out: list[Path] = []
    for arg in target_args:
        _, _, path = arg.partition("=")
        if path and "\0" not in path:
            out.append(Path(os.path.realpath(Path(path).expanduser())))
    out += [Path(os.path.realpath(r)) for r in python_roots]
    return list(dict.fromkeys(out))


# -- reading ---------------------------------------------------------------------------------


def load(path: Path) -> Profile:
    """A profile file, checked: only the known keys, each a list of names, none both wanted
    and excluded.  Whether each name exists is for ``check`` (it needs the catalog)."""
    from patchkit.base.config import decode_utf8, read_config

    hint = f"a profile holds {HINT}"
    where = "a profile is a small TOML file: move aside what is there, or put one there"
    data = read_config(path, "profile", where)
    text = decode_utf8(data, str(path), "profile")
    # The three lists, parsed once per content: tomllib is a tenth of the guard's start-up.
    from patchkit.base import memo

    rows = memo.remembered("profile", __file__, data, lambda: _parse(path, text, hint))
    if rows is None or len(rows) != len(KEYS):
        rows = _parse(path, text, hint)
    return Profile(path=path, **{k: tuple(v) for k, v in zip(KEYS, rows, strict=True)})


def _parse(path: Path, text: str, hint: str) -> list[list[str]]:
    """A profile's lists, in the order of KEYS, checked; a PatchkitError naming file:line."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PatchkitError(f"{path}: not TOML ({e})", hint) from None
    for key in data:
        if key not in KEYS:
            raise PatchkitError(f"{path}:{_line(text, key)}: unknown key {key!r}", hint)
    values = {}
    for key in KEYS:
        v = data.get(key, [])
        if not isinstance(v, list) or not all(isinstance(n, str) and n for n in v):
            raise PatchkitError(f"{path}:{_line(text, key)}: {key} must be a list of names", hint)
        values[key] = tuple(dict.fromkeys(v))
    both = [n for n in values["exclude"] if n in values["recipes"] or n in values["bundles"]]
    if both:
        raise PatchkitError(
            f"{path}:{_line(text, both[0])}: {both[0]!r} is both wanted and excluded",
            "keep it in one of the lists",
        )
    return [list(values[k]) for k in KEYS]


def _line(text: str, word: str) -> int:
    """The line of the first mention of ``word`` (a key or a quoted name), for messages."""
    m = re.search(rf"^[ \t]*{re.escape(word)}[ \t]*=|[\"']{re.escape(word)}[\"']", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def check(profile: Profile, catalog) -> None:
    """Every name of the profile is one the catalog knows, as the kind its list says."""
    if not profile.exists:
        return
    text = profile.path.read_text(encoding="utf-8", errors="replace")
    for key, known, what in (
        ("bundles", catalog.bundles, "bundle"),
        ("recipes", catalog.recipes, "recipe"),
        ("exclude", catalog.recipes, "recipe"),
    ):
        for name in getattr(profile, key):
            if name not in known:
                other = ""
                if key == "bundles" and name in catalog.recipes:
                    other = " (it is a recipe: list it under recipes)"
                elif key != "bundles" and name in catalog.bundles:
                    other = " (it is a bundle: list it under bundles)"
                raise PatchkitError(
                    f"{profile.path}:{_line(text, name)}: {key}: unknown {what} {name!r}{other}",
                    "`patchkit list` shows the recipes and bundles",
                )


def wanted(profile: Profile, catalog) -> list[str]:
    """The recipe ids the profile wants applied: its bundles and recipes, less ``exclude``."""
    ids: list[str] = []
    for name in profile.names:
        for i in catalog.bundles.get(name, [name] if name in catalog.recipes else []):
            if i not in ids and i not in profile.exclude:
                ids.append(i)
    return ids


# -- --save ----------------------------------------------------------------------------------


def save(profile: Profile, action: str, names: Sequence[str], catalog, seed=None) -> tuple[Profile, list[str]]:
    """Record in the profile that ``action`` ("apply" or "revert") of ``names`` is wanted.

    apply: a bundle joins ``bundles``; a recipe leaves ``exclude``, and joins ``recipes``
    unless a bundle of the profile brings it.  revert: a bundle leaves ``bundles`` (and its
    recipes ``recipes``); a recipe leaves ``recipes``, and joins ``exclude`` while a bundle of
    the profile brings it.  Edited with tomlkit: every other line, comment and blank keeps
    its bytes.  ``seed``: (bundles, recipes) the tree carries, recorded first (a profile
    made by `revert --save`, so that it says what stays, not only what left).  Returns the
    profile as saved and what changed, one line each."""
    import tomlkit

    if profile.wheel:  # the wheel's patchkit.json is pip's: the tree's own profile is made, from it
        seed = tuple(
            tuple(dict.fromkeys(a + b))
            for a, b in zip((profile.bundles, profile.recipes), seed or ((), ()), strict=True)
        )
        profile = Profile(path=target_file(profile.path.parent.parent), exists=False)
    text = profile.path.read_text(encoding="utf-8") if profile.exists else ""
    new = NEW_TARGET if profile.path.name == TARGET_FILE else NEW_PROJECT
    doc = tomlkit.parse(text or new)
    lists = {k: list(getattr(profile, k)) for k in KEYS}
    changes: list[str] = []

    def edit(key: str, name: str, add: bool) -> None:
        if (name in lists[key]) == add:
            return
        if key not in doc:
            doc[key] = tomlkit.array()
        arr = doc[key]
        if add:
            arr.append(name)
            lists[key].append(name)
        else:
            idx = [str(x) for x in arr].index(name)
            del arr[idx]
            lists[key].remove(name)
        changes.append(f"{key} {'+' if add else '-'}= {name}")

    def brought(rid: str) -> bool:
        return any(rid in catalog.bundles.get(b, []) for b in lists["bundles"])

    for key, seeded in zip(("bundles", "recipes"), seed or ((), ()), strict=True):
        for name in seeded:
            edit(key, name, True)
    for name in names:
        bundle = name in catalog.bundles and name not in catalog.recipes
        if action == "apply":
            if bundle:
                edit("bundles", name, True)
            else:
                edit("exclude", name, False)
                if not brought(name):
                    edit("recipes", name, True)
        else:
            if bundle:
                edit("bundles", name, False)
                for rid in catalog.bundles[name]:
                    if not brought(rid):
                        edit("recipes", rid, False)
            else:
                edit("recipes", name, False)
                if brought(name):
                    edit("exclude", name, True)
    if changes:
        _write(profile.path, tomlkit.dumps(doc).encode("utf-8"))
    saved = Profile(profile.path, *(tuple(lists[k]) for k in KEYS))
    return saved, changes


def _write(path: Path, data: bytes) -> None:
    from patchkit.base import fsio

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent.name == STATE_DIR:
        fsio.ensure_ignored(path.parent)
    fsio.atomic_write(path, data)


def no_names(prof) -> None:
    """A profile that names nothing to apply is an error of the profile (exit 2)."""
    if not prof.names:
        raise PatchkitError(f"{prof.path}: the profile names no bundle or recipe to apply", HINT)
