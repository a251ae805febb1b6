"""patchkit's store: every derived entry it keeps on disk, under one schema, one miss rule and
one writer; and the content-addressed blobs.

**What is kept.** A *derived entry* is an answer patchkit computed (a plan, a verdict, an
interpreter probe, an outline, a gates scan, ...), kept under a *kind* (``plans``,
``verdicts``, ...: a directory of the cache) and a *key*, the digest of every input the
answer was derived from (``key()``), at ``CACHE/KIND/KEY``.  A few entries describe a file
they sit beside (a release archive's recorded sha256, the record an unpacked tree carries):
they live at that place (``get_at``/``put_at``), and their key is the digest of that place's
name under the cache.  A *blob* is bytes kept under their own sha256 (``blobs/sha256/``):
self-checking, read back only when they still have it.

**One schema.**  An entry is one header line, then the payload::

    #patchkit-store kind=plans schema=1 key=<hex> mac=<64 hex>\\n<payload>

``mac`` is HMAC-SHA256 under this user's key over the kind, the schema version, the key and
the payload, so an entry moved to another key or kind, or edited, fails.

**One miss rule** (``look``): an entry is used only when it is there, a regular file (no
link, FIFO or device), of this user's, in a kind directory of this user's that nobody else
may write, of the kind and schema version asked, and its MAC is this user's.  Anything else
is a miss, computed again and replaced: ``absent``, ``stale`` (another schema, another
kind, an older patchkit's format, damaged), ``untrusted`` (the trust rule below),
``foreign`` (the entry or its directory is another user's, or others may write it),
``forged`` (the MAC fails), ``no-key``.  Those that mean someone else's hand is said once
on stderr.  What the payload means (its shape, and that the inputs it names are unchanged)
the cache's own module checks after.

**One writer** (``put``): a temp file (0600, O_EXCL) beside the entry, then a rename over
whatever stands at the name (a planted link is replaced, never followed); directories made
0700, every component opened with O_NOFOLLOW.  Best effort: a store that cannot be written
costs speed only.

**The trust rule** (``trusted``).  The store's directory, and each directory above it up to
the user's home (or ``/``), must belong to this user (or root) and be writable by nobody
else, as OpenSSH's StrictModes asks of ``~/.ssh``; an ancestor others may write is accepted
only when it is sticky (``/tmp``), where they cannot rename what is ours.  Otherwise
patchkit reads no derived entry there and writes none, says so once, and computes every
answer afresh.

**The key** (``secret``): 32 random bytes in ``config_dir()/cache.key``, made with O_EXCL,
mode 0600, refused unless it is a regular file of this user's that nobody else may read or
write, in a directory nobody else may write.

**Threat model.**  Who can write the store: this user; anyone who can write the cache
directory or one above it (they can rename it and put their own in its place); anyone who
gives the user a cache (a copied or shared one).  The trust rule refuses the second; the
MAC refuses the third and anything planted past the rule.  An entry that leads to a write
(a plan) is authenticated *and* verified before use (patchkit/core/plancache.py reads
every input again under the lock and checks each file's new bytes against the digest the
entry records): whatever is planted, patchkit writes only bytes the recipe makes, into
files the recipe names.  Out of scope: someone who can read the key (this user's account,
root) can forge entries; the key protects against other users and planted or copied
caches, not against one's own account.  Release archives are not derived entries: each is
checked against its recorded sha256 on every use (patchkit/upstream/recorded.py).

Standard library only, and no hashlib (which loads OpenSSL): ``status`` starts with it.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any, Optional

try:  # SHA-256 without hashlib (which loads OpenSSL)
    from _sha256 import sha256 as _sha256
except ImportError:  # pragma: no cover - other Pythons
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[no-redef]
    except ImportError:
        from hashlib import sha256 as _sha256  # type: ignore[no-redef]

try:  # BLAKE2 for keys, without hashlib
    from _blake2 import blake2b as _blake2b
except ImportError:  # pragma: no cover - other Pythons
    from hashlib import blake2b as _blake2b

try:  # a constant-time comparison without hmac (which imports hashlib)
    from _operator import _compare_digest as _equal
except ImportError:  # pragma: no cover - other Pythons
    from hmac import compare_digest as _equal  # type: ignore[no-redef]

MAGIC = b"#patchkit-store "
KEY_NAME = "cache.key"
KEY_SIZE = 32
LIMIT = 64 << 20  # bytes of one entry's payload, unless the kind says less
_BLOCK = 64
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_NAME = _LOWER | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_.-")
_HEX = frozenset(b"0123456789abcdef")

# The kinds of derived entry, and what `patchkit cache` says each holds.
KINDS = {
    "plans": "plans, keyed by their inputs",
    "verdicts": "verdicts, keyed by their inputs",
    "probes": "interpreter probes",
    "outlines": "file outlines, by their bytes",
    "gates": "gates scanned: by file bytes, by tree, each release's for --across",
    "confirmed": "confirmed views",
    "identity": "sites identified in releases, and their edits",
    "drift": "each release's verdicts for drift",
    "memo": "small files' answers, by their bytes",
    "engines": "the shipped engine table, parsed",
    "verify": "verify --build results and plans",
    "blobs": "members read by ranges, by sha256",
}
# Misses that mean someone else's hand (said once); "absent" and "stale" are ordinary.
LOUD = ("untrusted", "foreign", "forged", "no-key")

_said: set[str] = set()
_trusted: dict[str, Optional[str]] = {}
_key: dict[str, Optional[bytes]] = {}


def root() -> Path:
    from patchkit.base.paths import cache_dir

    return cache_dir()


def key(*parts) -> str:
    """The key of an entry derived from ``parts`` (str or bytes): a BLAKE2b-256 of them,
    framed so that no two sequences of parts look alike."""
    h = _blake2b(digest_size=32)
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogateescape")
        h.update(b"%d:" % len(b))
        h.update(b)
    return h.hexdigest()


# -- the trust rule ---------------------------------------------------------------------------


def strict(st: os.stat_result, *, sticky_ok: bool = False) -> bool:
    """May this file or directory (its ``lstat``) be trusted?  Owned by this user (or root),
    not a link, and writable by nobody else (a sticky directory others may write, when
    ``sticky_ok``: an ancestor such as ``/tmp``).  The journal's mirror uses it too."""
    if stat.S_ISLNK(st.st_mode) or st.st_uid not in (os.getuid(), 0):
        return False
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return sticky_ok and stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_ISVTX)
    return True


def why_untrusted(path) -> Optional[str]:
    """None when the directory ``path`` is trusted (the trust rule), else the reason."""
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


def say_once(what: str, line: str) -> None:
    if what not in _said:
        _said.add(what)
        sys.stderr.write(f"patchkit: {line}\n")


def trusted() -> bool:
    """Is the store's directory trusted?  When it is not, says so once on stderr; then no
    derived entry is read or written."""
    where = str(root())
    if where not in _trusted:
        _trusted[where] = why_untrusted(where)
    why = _trusted[where]
    if why is not None:
        say_once(
            "untrusted:" + where,
            f"cache {where} is not trusted ({why}); no cached result is read or written there,"
            f" every answer is computed afresh (chmod go-w, or set PATCHKIT_CACHE to a directory of your own)",
        )
    return why is None


# -- the key and the MAC ----------------------------------------------------------------------


def _read_key(d: str) -> bytes:
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


def secret() -> Optional[bytes]:
    """This user's store key, made on first use; None (said once) when it cannot be made or
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
            "no-key:" + d,
            f"the cache key in {d} cannot be used ({why}); no cached result is read or written"
            f" (remove {os.path.join(d, KEY_NAME)} to make a new one)",
        )
    return got


def mac(k: bytes, kind: str, schema: int, name: str, payload: bytes) -> str:
    """HMAC-SHA256 (RFC 2104), in hex, of the entry ``kind``/``name`` of ``schema`` holding
    ``payload``, under ``k``."""
    k = k.ljust(_BLOCK, b"\0")
    inner = _sha256(bytes(b ^ 0x36 for b in k))
    inner.update(b"%s\0%d\0%s\0" % (kind.encode(), schema, name.encode()))
    inner.update(payload)
    outer = _sha256(bytes(b ^ 0x5C for b in k))
    outer.update(inner.digest())
    return outer.hexdigest()


def seal(kind: str, schema: int, name: str, payload: bytes, k: bytes) -> bytes:
    """The bytes stored for the entry: its header, then ``payload``."""
    head = f"kind={kind} schema={schema} key={name} mac={mac(k, kind, schema, name, payload)}\n"
    return MAGIC + head.encode() + payload


# -- where an entry lives, and reading it ------------------------------------------------------


def _where(kind: str, k) -> Optional[tuple[list[str], str, str]]:
    """(directories under the root, file name, key) of the entry ``kind``/``k``, ``k`` a key
    (a plain name: never ``..`` or a dot file) or a path under the root where the entry is
    kept beside what it describes (its key: the digest of that place); None for a path
    outside the root."""
    if isinstance(k, os.PathLike):
        rel = os.path.relpath(os.path.abspath(k), os.path.abspath(root()))
        parts = rel.split(os.sep)
        return None if any(p in ("", ".", "..") for p in parts) else (parts[:-1], parts[-1], key(rel))
    dirs = kind.split("/")
    if not all(d and d[0] != "-" and _LOWER.issuperset(d.replace("-", "")) for d in dirs) or not (
        0 < len(k) <= 128 and k[0] not in ".-_" and _NAME.issuperset(k)
    ):
        raise ValueError(f"not a store entry: {kind}/{k}")
    return dirs, k, k


def _header(raw: bytes) -> Optional[tuple[str, int, str, bytes, int]]:
    """(kind, schema, key, mac, where the payload starts) of a stored entry; None when its
    bytes do not start with the store's header."""
    end = raw.find(b"\n", 0, 512)
    fields = raw[len(MAGIC) : end].split(b" ") if raw.startswith(MAGIC) and end > 0 else []
    if [f[: f.find(b"=") + 1] for f in fields] != [b"kind=", b"schema=", b"key=", b"mac="]:
        return None
    kind, schema, name, sig = (f[f.find(b"=") + 1 :] for f in fields)
    if not schema.isdigit() or len(schema) > 9 or len(sig) != 64 or not _HEX.issuperset(sig):
        return None
    try:
        return kind.decode(), int(schema), name.decode(), sig, end + 1
    except UnicodeDecodeError:
        return None


class Look(tuple):
    """(payload, miss): ``miss`` is None on a hit; else absent, stale, untrusted, foreign,
    forged or no-key."""

    payload = property(lambda self: self[0])
    miss = property(lambda self: self[1])


def _raw(dirs: list[str], name: str, limit: int) -> Look:
    """The stored bytes of an entry, or why not: absent, foreign, stale (not a file)."""
    from patchkit.base import regular

    try:
        d = regular.open_dir(root(), dirs)
    except (FileNotFoundError, NotADirectoryError):
        return Look((None, "absent"))
    except OSError:
        return Look((None, "stale"))  # a link or a file in the way: not patchkit's
    try:
        st = os.stat(name, dir_fd=d, follow_symlinks=False)
        if not strict(os.fstat(d)) or (stat.S_ISREG(st.st_mode) and (not strict(st) or st.st_uid != os.getuid())):
            return Look((None, "foreign"))
        return Look((regular.read(name, limit + 512, dir_fd=d, follow=False), None))
    except FileNotFoundError:
        return Look((None, "absent"))
    except (OSError, regular.NotRegular, regular.TooBig):
        return Look((None, "stale"))  # a link, a FIFO, a device, too big, unreadable
    finally:
        os.close(d)


def look(kind: str, k, schema: int = 1, limit: int = LIMIT) -> Look:
    """The payload of the entry ``kind``/``k`` (a key, or a path: ``_where``) of ``schema``,
    or why it is a miss: the one miss rule."""
    where = _where(kind, k)
    if where is None:
        return Look((None, "absent"))
    if not trusted():
        return Look((None, "untrusted"))
    dirs, name, k = where
    raw, why = _raw(dirs, name, limit)
    head = _header(raw) if raw is not None else None
    if raw is not None and (head is None or head[0] != kind or head[1] != schema):
        why = "stale"  # another schema or kind, an older patchkit's, damaged
    elif raw is not None and secret() is None:
        why = "no-key"
    elif raw is not None and not _equal(head[3], mac(secret(), kind, schema, k, raw[head[4] :]).encode()):
        why = "forged"
    elif raw is not None:
        return Look((raw[head[4] :], None))
    if why in ("foreign", "forged"):
        said = "is another user's or others may write it" if why == "foreign" else "is not this user's (its MAC fails)"
        say_once(why, f"cache entry {'/'.join([*dirs, name])} {said}; ignored, computed afresh (said once)")
    return Look((None, why))


def get(kind: str, k, schema: int = 1, limit: int = LIMIT) -> Optional[bytes]:
    return look(kind, k, schema, limit).payload


def get_json(kind: str, k, fits=None, schema: int = 1, limit: int = LIMIT) -> Any:
    """The JSON value of the entry, when it ``fits`` (a shape.fits schema); None otherwise
    (a miss)."""
    payload = get(kind, k, schema, limit)
    if payload is None:
        return None
    import json

    from patchkit.base import shape

    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return doc if fits is None or shape.fits(doc, fits) else None


# -- writing ----------------------------------------------------------------------------------


def _keep(dirs: list[str], name: str, data: bytes) -> bool:
    """The one writer: a temp (0600, O_EXCL) beside the entry, then a rename; its
    directories made 0700.  Whether it wrote: a full or read-only store, a link in the way,
    cost only speed."""
    from patchkit.base import regular

    try:
        d = regular.open_dir(root(), dirs, create=True, mode=0o700)
    except OSError:
        return False
    tmp = f".{name[:24]}.{os.urandom(8).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        return True
    except OSError:
        try:
            os.unlink(tmp, dir_fd=d)
        except OSError:
            pass
        return False
    finally:
        os.close(d)


def sealed(kind: str, k, payload: bytes, schema: int = 1) -> Optional[bytes]:
    """The bytes the entry is stored as, or None: keep none (an untrusted store, no key, a
    path outside the store).  For a caller that puts them in place itself (a record inside
    a tree being made elsewhere, renamed into place)."""
    where = _where(kind, k)
    s = secret() if where is not None and trusted() else None
    return seal(kind, schema, where[2], payload, s) if s is not None else None


def put(kind: str, k, payload: bytes, schema: int = 1) -> None:
    """Keep ``payload`` as the entry ``kind``/``k`` (a key, or a path: ``_where``) of
    ``schema``; nothing, in an untrusted store or without a key."""
    data = sealed(kind, k, payload, schema)
    if data is not None:
        dirs, name, _ = _where(kind, k)
        _keep(dirs, name, data)


def put_json(kind: str, k, value, schema: int = 1) -> None:
    import json

    put(kind, k, json.dumps(value, separators=(",", ":")).encode(), schema)


# -- blobs ------------------------------------------------------------------------------------


def blob_path(digest: str) -> Path:
    return root() / "blobs" / "sha256" / digest[:2] / digest[2:]


def get_blob(digest: str, limit: int = 256 << 20) -> Optional[bytes]:
    """The blob of sha256 ``digest``, when it is there and still has it."""
    import hashlib

    raw, _ = _raw(["blobs", "sha256", digest[:2]], digest[2:], limit)
    return raw if raw is not None and hashlib.sha256(raw).hexdigest() == digest else None


def put_blob(digest: str, data: bytes) -> bool:
    """Keep ``data`` (whose sha256 is ``digest``) as a blob, unless it is kept intact
    already; whether it is kept.  Plain bytes, no header: a tree may hold it by a hard link."""
    return get_blob(digest) is not None or _keep(["blobs", "sha256", digest[:2]], digest[2:], data)


# -- for tests and debugging ------------------------------------------------------------------


def payload(path) -> bytes:
    """The payload of the entry stored at ``path``, its MAC not checked."""
    raw = open(path, "rb").read()
    head = _header(raw)
    return raw[head[4] :] if head else raw


def reseal(path, data: bytes, kind: Optional[str] = None) -> None:
    """Store ``data`` at ``path`` as the entry there, under this user's key (what a holder of
    the key could write: the checks past the MAC are then what stands)."""
    s = secret()
    if s is None:
        raise PermissionError("no cache key")
    forge(path, data, s, kind)


def forge(path, data: bytes, k: bytes, kind: Optional[str] = None, schema: int = 1) -> None:
    """Store ``data`` at ``path`` under the key ``k`` (a planter's): as the entry there, or,
    where none is, as the entry ``kind`` kept at that place."""
    head = _header(open(path, "rb").read()) if os.path.isfile(path) else None
    if head is not None:
        kind, schema, name = head[:3]
    else:
        where = _where(kind or "", Path(path))
        if where is None or kind is None:
            raise ValueError(f"{path}: not an entry, nor a place in the store")
        name = where[2]
    with open(path, "wb") as f:
        f.write(seal(kind, schema, name, data, k))
