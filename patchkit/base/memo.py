"""Answers that depend only on some files' bytes, kept in the cache under their digest.

The serving guard (`patchkit run`) and an unchanged `status` are start-ups: what they read
from small TOML files (a profile's three lists, which engines the named recipes edit) is
the same answer as last time while those bytes are, and tomllib alone costs a tenth of the
budget.  ``remembered`` keys an answer on the bytes it is derived from and on the module
that derives it (its path, size and mtime, as Python checks a .pyc), so a changed file or a
new patchkit is a miss, never a stale answer.

Kept in patchkit's store (patchkit/base/store.py).  An entry is a list of lists of strings
(``encode``/``decode``): lengths and UTF-8, no pickle or marshal.  Only answers are kept;
an input that is refused is refused again each time, with its message.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

from patchkit.base import store

LIMIT = 1 << 16  # bytes of one entry


def remembered(kind: str, module: str, inputs: bytes, derive: Callable[[], Optional[list]]) -> Optional[list]:
    """``derive()``'s answer (a list of lists of str, or None) for ``inputs``, from the cache
    when ``module``'s code derived it before from the same bytes."""
    try:
        st = os.stat(module)
        code = f"{module}|{st.st_size}|{st.st_mtime_ns}".encode("utf-8", "surrogateescape")
    except OSError:
        return derive()
    k = f"{kind}-{store.key(code, inputs)}"
    raw = store.get("memo", k, limit=LIMIT)
    if raw is not None:
        got = decode(raw)
        if got is not False:
            return got
    out = derive()
    store.put("memo", k, encode(out))
    return out


def framed(parts: Sequence[bytes]) -> bytes:
    """``parts`` as one byte string in which no two sequences of parts look alike."""
    return b"".join(b"%d:" % len(p) + p for p in parts)


def encode(value: Optional[list]) -> bytes:
    if value is None:
        return b"-"
    rows = [framed([s.encode("utf-8", "surrogatepass") for s in row]) for row in value]
    return b"+" + framed(rows)


def _unframe(data: bytes) -> Optional[list[bytes]]:
    out, i = [], 0
    while i < len(data):
        j = data.find(b":", i)
        if j < 0 or not data[i:j].isdigit() or j - i > 8:
            return None
        n = int(data[i:j])
        if j + 1 + n > len(data):
            return None
        out.append(data[j + 1 : j + 1 + n])
        i = j + 1 + n
    return out


def decode(raw: bytes):
    """An entry's value, or False when the bytes are not an entry (a miss)."""
    if raw == b"-":
        return None
    if not raw.startswith(b"+"):
        return False
    rows = _unframe(raw[1:])
    if rows is None:
        return False
    out = []
    for row in rows:
        cells = _unframe(row)
        if cells is None:
            return False
        try:
            out.append([c.decode("utf-8", "surrogatepass") for c in cells])
        except UnicodeDecodeError:
            return False
    return out
