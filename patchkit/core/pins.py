"""upstream_pins.toml: read it, and change one value without reformatting the file."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from patchkit.base.errors import PatchkitError
from patchkit.base.fsio import atomic_write
from patchkit.base.target import ENGINES


@dataclass(frozen=True)
class Pin:
    engine: str
    index: str
    version: str
    wheel: str
    sha256: str
    repo: str
    rev: str


KEYS = ("index", "version", "wheel", "sha256", "repo", "rev")
FORMAT_HINT = "each engine is a table of strings: [sglang] version, wheel, sha256, index, repo, rev"


def load(path: Path) -> dict[str, Pin]:
    from patchkit.base.config import decode_utf8, read_config

    raw = read_config(path, "pins file", "run from the patchkit project, or pass --pins FILE")
    text = decode_utf8(raw, str(path), "pins file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+)", str(e))
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise PatchkitError(f"{where}: invalid TOML: {str(e).split(' (at')[0]}", FORMAT_HINT) from None
    except RecursionError:
        raise PatchkitError(f"{path}: invalid TOML: nested too deeply", FORMAT_HINT) from None
    pins = {}
    for engine, t in data.items():
        if engine not in ENGINES:
            raise PatchkitError(f"{path}: [{engine}]: unknown engine", f"engines: {', '.join(ENGINES)}")
        if not isinstance(t, dict) or "version" not in t:
            raise PatchkitError(f'{path}: [{engine}]: needs at least version = "..."', FORMAT_HINT)
        for key in KEYS:
            value = t.get(key, "")
            if not isinstance(value, str):
                raise PatchkitError(
                    f"{path}: [{engine}] {key}: must be a string, not {type(value).__name__} {value!r}",
                    f'e.g. {key} = "..."',
                )
        pins[engine] = Pin(
            engine,
            t.get("index", ENGINES[engine].dist),
            t["version"],
            t.get("wheel", ""),
            t.get("sha256", ""),
            t.get("repo", ""),
            t.get("rev", ""),
        )
    return pins


def set_value(path: Path, engine: str, key: str, value: str, comment: str | None = None) -> None:
    """Rewrite only the ``key = ...`` line of ``[engine]`` (comments and layout survive; a
    trailing comment keeps its column).  ``comment``: the line's trailing comment instead,
    where the old one described the old value."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    section, start = None, None
    for i, line in enumerate(lines):
        m = re.match(r"^\s*\[([^\]]+)\]\s*(#.*)?$", line)
        if m:
            section = m.group(1).strip()
            if section == engine:
                start = i
            continue
        if section == engine:
            km = re.match(rf'^(\s*{re.escape(key)}\s*=\s*)("[^"]*"|\'[^\']*\')(.*)$', line, re.S)
            if km:
                rest = km.group(3)
                cm = re.match(r"^(\s+)(#[^\n]*)(\n?)$", rest)
                if cm:  # a trailing comment keeps its column (at least one space before it)
                    pad = len(km.group(2)) + len(cm.group(1)) - len(value) - 2
                    rest = " " * max(1, pad) + (comment if comment is not None else cm.group(2)) + cm.group(3)
                lines[i] = f'{km.group(1)}"{value}"{rest}'
                atomic_write(path, "".join(lines).encode())
                return
    if start is None:
        raise PatchkitError(f"{path}: no [{engine}] section")
    # Key absent: add it at the end of the section.
    end = start + 1
    while end < len(lines) and not re.match(r"^\s*\[", lines[end]):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    lines.insert(end, f'{key} = "{value}"\n')
    atomic_write(path, "".join(lines).encode())
