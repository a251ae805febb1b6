"""Reading a file only when it is a regular file: opened non-blocking and checked before a
byte is read, so a FIFO never blocks and a device (``/dev/zero``) is never read, with an
optional size limit.  The one primitive under fsio.read_file (target files),
config.read_config (recipes, pins) and every read of patchkit's own files (its caches,
its state in ``.patchkit/``); each caller turns these exceptions into its own message.

Paths patchkit owns (the cache's entries, ``.patchkit/`` and what it holds) are opened from
the directory the user named, one component at a time with ``O_NOFOLLOW`` (``open_dir``),
so a symlink planted at any of them is refused, never followed.
Standard library only: ``status`` imports it at start-up."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Optional, Sequence

from patchkit.base.errors import TargetError

KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


class NotRegular(Exception):
    """Something other than a regular file stands at the path; ``kind`` says what."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class TooBig(Exception):
    """The file is larger than the limit."""


def _open(path, dir_fd: Optional[int], follow: bool) -> int:
    """A descriptor of the regular file at ``path``, opened non-blocking and checked before
    anything is read (then blocking again); NotRegular, or the OSError of open."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket, or a FIFO that cannot be opened
            raise NotRegular("not a regular file") from None
        if e.errno == errno.ELOOP and not follow:
            raise NotRegular("a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file"))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path, *, follow: bool = True) -> BinaryIO:
    """The regular file at ``path``, open for reading (a large one read in parts: a wheel);
    NotRegular or OSError as ``read``."""
    return os.fdopen(_open(path, None, follow), "rb")


def read(path, limit: Optional[int] = None, *, dir_fd: Optional[int] = None, follow: bool = True) -> bytes:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` when given).
    NotRegular (a symlink too, when ``follow`` is false), TooBig, or the OSError of
    open/read (FileNotFoundError when nothing is there)."""
    fd = _open(path, dir_fd, follow)
    try:
        st = os.fstat(fd)
        if limit is not None and st.st_size > limit:
            raise TooBig()
        chunks, size = [], 0
        while True:
            b = os.read(fd, 1 << 16 if limit is not None else max(st.st_size + 1, 1 << 16))
            if not b:
                break
            chunks.append(b)
            size += len(b)
            if limit is not None and size > limit:  # it grew, or stat does not know its size
                raise TooBig()
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_dir(base, parts: Sequence[str] = (), create: bool = False, mode: int = 0o777) -> int:
    """A descriptor of the directory ``base/parts...``: ``base`` (the user's: a target root,
    the cache, an output directory) as named, links followed; each of ``parts`` (patchkit's
    own) opened with ``O_NOFOLLOW``, made first (with ``mode``) when ``create``.  A symlink
    or anything but a directory at one of ``parts`` is an OSError (ELOOP, ENOTDIR), never
    followed."""
    if create:
        os.makedirs(base, mode, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_owned(base, rel: str, limit: Optional[int] = None) -> bytes:
    """The bytes of patchkit's own file ``base/rel`` (``rel`` with ``/``), every component
    of ``rel`` opened without following a link: read's exceptions."""
    *parts, name = rel.split("/")
    fd = open_dir(base, parts)
    try:
        return read(name, limit, dir_fd=fd, follow=False)
    finally:
        os.close(fd)


def read_small(base, rel: str, limit: int) -> Optional[bytes]:
    """A small file's bytes (git's HEAD), or None: nothing there, a link, a FIFO, a device,
    a directory, too big, unreadable."""
    try:
        return read_owned(base, rel, limit)
    except (OSError, NotRegular, TooBig):
        return None


def read_file(path: Path) -> bytes | None:
    """The bytes of a regular file, or None when there is nothing at ``path``.  Anything
    else there (a directory, a FIFO, a device) or a file that cannot be read is a
    TargetError: the file is opened non-blocking and checked before a byte is read, so a
    FIFO in the tree never hangs patchkit (patchkit/base/regular.py)."""
    try:
        return read(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegular as e:
        raise not_regular(path, e.kind) from None
    except OSError as e:
        raise cannot_read(path, e) from None


def not_regular(path: Path, kind: str) -> TargetError:
    return TargetError(
        f"{path}: is {kind}, where patchkit expects a source file; patchkit will not read or edit it",
        "put the file there (e.g. `patchkit sync --force` for a workspace tree, or reinstall the package)",
    )


def unreadable_hint(e: OSError, otherwise: str = "") -> str:
    """What to do about a file that cannot be read, by the error's errno (``otherwise`` is
    added to the permissions hint: another way round it)."""
    if e.errno in (errno.EACCES, errno.EPERM):
        return "this user may not read it; fix its permissions" + (f", or {otherwise}" if otherwise else "")
    if e.errno == errno.ELOOP:
        return "a symlink loop; replace the symlink with the real file"
    return "fix the cause, then run the command again"


def cannot_read(path: Path, e: OSError) -> TargetError:
    return TargetError(f"{path}: cannot be read ({e.strerror or e})", unreadable_hint(e, "patch a copy you own"))
