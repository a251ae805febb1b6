"""Whom patchkit's own files on disk are trusted from: one rule, one key, for every cache.

A cache only ever saves time, but some of its entries lead to a write (a plan, which
`apply` replays) or to a verdict (`status` on an unchanged tree).  So:

* **The cache root is trusted only as OpenSSH's StrictModes trusts ``~/.ssh``**
  (``trusted_dir``): the directory and every directory above it, up to the user's home (or
  ``/``), belong to this user (or root) and none is writable by group or others; an
  ancestor that others may write is accepted only when it is sticky (``/tmp``), where they
  cannot rename or remove what is ours.  An untrusted cache is neither read from nor
  written to for derived entries; patchkit says so once on stderr and computes every answer
  again (``cache_trusted``).
* **Every derived entry is authenticated** (``seal``/``unseal``): an HMAC-SHA256 under a
  per-user key (``key``: 32 random bytes in ``config_dir()/cache.key``, made with O_EXCL,
  mode 0600, refused unless it is a regular file owned by this user that nobody else may
  read or write, in a directory nobody else may write).  The MAC covers the entry's name
  too, so an entry moved to another key (a verdict of an applied tree renamed to the
  pristine tree's key) fails.  One that fails is a miss, never used.
* ``strict`` is the test both use for one file or directory, and the journal's mirror uses
  it too (patchkit/base/journal.py).

Standard library only, and no hashlib (which loads OpenSSL): ``status`` starts with it.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Optional

try:  # SHA-256 without hashlib (which loads OpenSSL)
    from _sha256 import sha256 as _sha256
except ImportError:  # pragma: no cover - other Pythons
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[no-redef]
    except ImportError:
        from hashlib import sha256 as _sha256  # type: ignore[no-redef]

try:  # a constant-time comparison without hmac (which imports hashlib)
    from _operator import _compare_digest as _equal
except ImportError:  # pragma: no cover - other Pythons
    from hmac import compare_digest as _equal  # type: ignore[no-redef]

KEY_NAME = "cache.key"
KEY_SIZE = 32
TAG = b"patchkit-mac1 "  # then 64 hex digits and a newline, then the entry
OVERHEAD = 14 + 65  # TAG, the MAC in hex and a newline
_BLOCK = 64

_said: set[str] = set()
_trusted: dict[str, Optional[str]] = {}
_key: dict[str, Optional[bytes]] = {}


def strict(st: os.stat_result, *, sticky_ok: bool = False) -> bool:
    """May this file or directory (its ``lstat``) be trusted?  Owned by this user (or root),
    not a link, and writable by nobody else (a sticky directory others may write, when
    ``sticky_ok``: an ancestor such as ``/tmp``)."""
    if stat.S_ISLNK(st.st_mode) or st.st_uid not in (os.getuid(), 0):
        return False
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return sticky_ok and stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_ISVTX)
    return True


def why_untrusted(path) -> Optional[str]:
    """None when the directory ``path`` is trusted (``trusted_dir``), else the reason."""
    real = os.path.realpath(os.path.abspath(os.fspath(path)))
    while not os.path.lexists(real):  # not made yet: patchkit makes the rest itself
        parent = os.path.dirname(real)
        if parent == real:
            break
        real = parent
    home = os.path.realpath(os.path.expanduser("~"))
    first = True
    while True:
        try:
            st = os.lstat(real)
        except OSError as e:
            return f"{real} cannot be examined ({e.strerror or e})"
        if not strict(st, sticky_ok=not first):
            if st.st_uid not in (os.getuid(), 0):
                return f"{real} belongs to uid {st.st_uid}, not this user"
            return f"{real} is writable by {'group' if st.st_mode & stat.S_IWGRP else 'others'}"
        first = False
        parent = os.path.dirname(real)
        if real == home or parent == real:
            return None
        real = parent


def trusted_dir(path) -> bool:
    return why_untrusted(path) is None


def say_once(what: str, line: str) -> None:
    if what not in _said:
        _said.add(what)
        sys.stderr.write(f"patchkit: {line}\n")


def cache_trusted() -> bool:
    """Is patchkit's cache directory trusted (``why_untrusted``)?  When it is not, says so
    once on stderr; the caller then reads and writes no derived entry there."""
    from patchkit.base.paths import cache_dir

    root = str(cache_dir())
    if root not in _trusted:
        _trusted[root] = why_untrusted(root)
    why = _trusted[root]
    if why is not None:
        say_once(
            "cache:" + root,
            f"cache {root} is not trusted ({why}); no cached result is read or written there,"
            f" every answer is computed afresh (chmod go-w, or set PATCHKIT_CACHE to a directory of your own)",
        )
    return why is None


def _read_key(d: str) -> Optional[bytes]:
    path = os.path.join(d, KEY_NAME)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise PermissionError(f"{path} is not a 0600 file of this user's")
        if st.st_size != KEY_SIZE:
            raise PermissionError(f"{path} is not {KEY_SIZE} bytes")
        return os.read(fd, KEY_SIZE + 1)
    finally:
        os.close(fd)


def key() -> Optional[bytes]:
    """This user's cache key, made on first use; None (said once) when it cannot be made or
    is not trusted: then no entry is authenticated, so none is read or written."""
    from patchkit.base.paths import config_dir

    d = str(config_dir())
    if d in _key:
        return _key[d]
    got: Optional[bytes] = None
    why = ""
    try:
        os.makedirs(d, 0o700, exist_ok=True)
        if not strict(os.lstat(d)):
            raise PermissionError(f"{d} is writable by others or not this user's")
        try:
            got = _read_key(d)
        except FileNotFoundError:
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(os.path.join(d, KEY_NAME), flags, 0o600)
            except FileExistsError:  # another patchkit made it just now
                got = _read_key(d)
            else:
                try:
                    new = os.urandom(KEY_SIZE)
                    os.write(fd, new)
                    os.fchmod(fd, 0o600)
                finally:
                    os.close(fd)
                got = new
    except OSError as e:
        why = str(e) if isinstance(e, PermissionError) and not e.errno else (e.strerror or str(e))
        got = None
    if got is not None and len(got) != KEY_SIZE:
        got, why = None, "short key"
    _key[d] = got
    if got is None:
        say_once(
            "key:" + d,
            f"the cache key in {d} cannot be used ({why}); no cached result is read or written"
            f" (remove {os.path.join(d, KEY_NAME)} to make a new one)",
        )
    return got


def mac(k: bytes, name: str, data: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of the entry ``name`` holding ``data``, under ``k``."""
    k = k.ljust(_BLOCK, b"\0")
    inner = _sha256(bytes(b ^ 0x36 for b in k))
    inner.update(b"%d:" % len(name.encode("utf-8", "surrogateescape")))
    inner.update(name.encode("utf-8", "surrogateescape"))
    inner.update(data)
    outer = _sha256(bytes(b ^ 0x5C for b in k))
    outer.update(inner.digest())
    return outer.digest()


def seal(name: str, data: bytes) -> Optional[bytes]:
    """The bytes to store as the entry ``name``: its MAC, then ``data``; None when there is
    no key (nothing is stored)."""
    k = key()
    if k is None:
        return None
    return TAG + mac(k, name, data).hex().encode() + b"\n" + data


def unseal(name: str, raw: bytes) -> Optional[bytes]:
    """The data of the stored entry ``name`` when its MAC is this user's, else None (a miss)."""
    head = len(TAG) + 65
    if not raw.startswith(TAG) or len(raw) < head or raw[head - 1 : head] != b"\n":
        return None
    k = key()
    if k is None:
        return None
    data = raw[head:]
    try:
        want = bytes.fromhex(raw[len(TAG) : head - 1].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    return data if _equal(want, mac(k, name, data)) else None


def entry_name(base, rel: str) -> str:
    """The name an entry's MAC covers: its path under the cache root (the absolute path of
    one kept elsewhere), so that a cache moved whole keeps its entries."""
    from patchkit.base.paths import cache_dir

    full = os.path.join(os.path.abspath(os.fspath(base)), rel)
    root = os.path.abspath(os.fspath(cache_dir()))
    return full[len(root) + 1 :] if full.startswith(root + "/") else full


def read_entry(raw: Optional[bytes], base, rel: str) -> Optional[bytes]:
    """A stored entry's data, or None (a miss): the cache is not trusted, or the MAC fails."""
    if raw is None or not cache_trusted():
        return None
    return unseal(entry_name(base, rel), raw)


def entry_bytes(base, rel: str, data: bytes) -> Optional[bytes]:
    """What to store as the entry, or None (store nothing): untrusted cache, no key."""
    if not cache_trusted():
        return None
    return seal(entry_name(base, rel), data)


def stored(path) -> bytes:
    """The data of the entry stored at ``path`` (its MAC not checked): for tests and
    debugging, which change an entry and ``restore`` it as this user's."""
    raw = open(path, "rb").read()
    return raw[len(TAG) + 65 :] if raw.startswith(TAG) else raw


def restore(path, data: bytes) -> None:
    """Store ``data`` at ``path`` as an entry under this user's key (what a holder of the key
    could write: the checks past the MAC are then what stands)."""
    sealed = seal(entry_name(os.path.dirname(os.path.abspath(path)), os.path.basename(path)), data)
    if sealed is None:
        raise PermissionError("no cache key")
    with open(path, "wb") as f:
        f.write(sealed)
