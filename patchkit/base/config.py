"""Reading the small configuration files the user writes (recipes, the pins, engine
definitions, profiles) and naming the directories recipes come from.  Below project.py,
recipe.py and pins.py, which all need it: it imports only primitives."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from patchkit.base import regular
from patchkit.base.errors import PatchkitError

MAX_CONFIG_BYTES = 1 << 20  # a recipe or a pins file is a few KiB; anything past 1 MiB is not one


def read_config(path: Path, what: str, hint: str, error: type[PatchkitError] = PatchkitError) -> bytes:
    """The bytes of a small configuration file the user wrote (a recipe, the pins): only a
    regular file, opened non-blocking and checked before a byte is read (a FIFO never
    blocks, /dev/zero is refused), and at most MAX_CONFIG_BYTES.  Anything else is ``error``
    (exit 2) naming ``path`` and what is wrong; ``hint`` says where such a file belongs."""
    if "\0" in str(path):
        raise error(f"{str(path)!r}: the path of a {what} holds a NUL byte", "name the file without it")
    try:
        return regular.read(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        if os.path.islink(path):
            raise error(f"{path}: is a broken symlink (to {os.readlink(path)}), not a {what}", hint) from None
        raise error(f"{path}: {what} not found", hint) from None
    except regular.NotRegular as e:
        raise error(f"{path}: is {e.kind}, not a {what}", hint) from None
    except regular.TooBig:
        raise _too_big(path, what, error) from None
    except OSError as e:
        raise _unreadable(path, what, e, error) from None


def _too_big(path: Path, what: str, error: type[PatchkitError]) -> PatchkitError:
    return error(
        f"{path}: is larger than {MAX_CONFIG_BYTES // (1 << 20)} MiB, the limit for a {what}",
        f"a {what} is a few KiB; point at the right file",
    )


def _unreadable(path: Path, what: str, e: OSError, error: type[PatchkitError]) -> PatchkitError:
    return error(f"{path}: the {what} cannot be read ({e.strerror or e})", regular.unreadable_hint(e))


def decode_utf8(raw: bytes, shown: str, what: str, error: type[PatchkitError] = PatchkitError) -> str:
    """A configuration file's text; a byte that is not UTF-8 is ``error`` naming its line and
    column (never a silent U+FFFD).  A leading byte-order mark is dropped."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(
            f"{shown}:{line}: byte 0x{raw[e.start]:02x} at column {col} is not UTF-8; a {what} must be UTF-8 text",
            "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)",
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


# Where a recipe directory comes from, nearest first (``patchkit list`` shows it).
PATH, PROJECT, USER, SHIPPED = "path", "project", "user", "shipped"


@dataclass(frozen=True)
class RecipeDir:
    """One place recipes are read from: ``origin`` is PATH (``--recipes``, PATCHKIT_RECIPES),
    PROJECT, USER or SHIPPED; an ``explicit`` one (named by the user) must exist."""

    path: Path
    origin: str
    explicit: bool = False
    named: str = ""  # how the user named it, for messages: "--recipes DIR", "PATCHKIT_RECIPES=..."
