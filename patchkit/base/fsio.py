"""File primitives for every write patchkit makes: temp files, fsync, locks, and its own
files (caches, ``.patchkit/``).

Nothing here decides *what* to write.  A temp file is created beside its target with a
random name and ``O_CREAT|O_EXCL|O_NOFOLLOW`` (``write_temp``, the one temp-name scheme),
so a name planted in advance, a symlink included, can never redirect a write; then it is
renamed over the target, which replaces a link standing there rather than following it.
The lock file is opened with ``O_NOFOLLOW`` for the same reason.  Inside the directories
patchkit owns every component is opened with ``O_NOFOLLOW`` too (regular.open_dir).
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import math
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

from patchkit.base.errors import TargetError

# Reading is regular.py's (status imports it at start-up, and not this module); callers that
# write as well find it here.
from patchkit.base.regular import cannot_read, not_regular, open_dir, read_file  # noqa: F401

LOCK_TIMEOUT_ENV = "PATCHKIT_LOCK_TIMEOUT"
STATE_DIR_NAME = ".patchkit"  # target.STATE_DIR (not imported: the engine table, under target, writes its cache here)
CRASH_ENV = "PATCHKIT_TEST_CRASH_AT"  # fault injection for the kill tests (tests/product/test_kill.py)

_NOT_HERE = (errno.EACCES, errno.EPERM, errno.EROFS)
_FULL = (errno.ENOSPC, errno.EDQUOT)


def cannot_write(path: Path, e: OSError) -> TargetError:
    """One clear line for an environment error met while writing."""
    if e.errno in _FULL:
        return TargetError(f"{path}: the disk is full ({e.strerror})", "free some space, then run the command again")
    if e.errno in _NOT_HERE:
        return TargetError(
            f"{path}: cannot write here ({e.strerror})",
            "the location is read-only, immutable (chattr +i) or belongs to another user;"
            " patch a copy, or a venv you own",
        )
    return TargetError(f"{path}: cannot write here ({e.strerror or e})", "fix the cause, then run the command again")


# Linux inode attributes (chattr(1), linux/fs.h) that refuse a rename over, or into, what
# carries them, even to root: checked before a transaction's commit point.
FS_IOC_GETFLAGS = 0x80086601  # _IOR('f', 1, long)
FS_IMMUTABLE_FL, FS_APPEND_FL = 0x10, 0x20


def inode_flags(path: Path) -> int:
    """``path``'s inode flags (FS_IOC_GETFLAGS), 0 where they cannot be read: another OS, a
    filesystem without them, a link (never followed), nothing there."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        buf = array.array("i", [0])  # the kernel reads and writes an int, whatever the macro says
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
        return buf[0]
    except OSError:
        return 0
    finally:
        os.close(fd)


def refusing_attribute(path: Path) -> Optional[str]:
    """What stops a rename over or into ``path``, said for a message ("append-only (chattr
    +a)", "immutable (chattr +i)"), or None."""
    flags = inode_flags(path)
    if flags & FS_IMMUTABLE_FL:
        return "immutable (chattr +i)"
    if flags & FS_APPEND_FL:
        return "append-only (chattr +a)"
    return None


def crash_point(label: str) -> None:
    """SIGKILL this process at the N-th write step when PATCHKIT_TEST_CRASH_AT=N: lets the
    tests kill a real apply exactly between two writes, as SQLite's crash tests do."""
    want = os.environ.get(CRASH_ENV)
    if not want:
        return
    n = int(os.environ.get("_PATCHKIT_CRASH_SEEN", "0")) + 1
    os.environ["_PATCHKIT_CRASH_SEEN"] = str(n)
    if want == "count":  # how many write steps a run has (the kill tests sample from them)
        os.write(2, f"patchkit-crash-point {n} {label}\n".encode())
    elif n == int(want):
        import signal  # only under the kill tests: not a module of every start-up

        os.kill(os.getpid(), signal.SIGKILL)


def fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


TEMP_SUFFIX = ".patchkit-tmp"


def temp_name(name: str) -> str:
    """patchkit's one temp-name form for a file called ``name``: ``.NAME.RANDOM.patchkit-tmp``
    (what a sweep of a kill's leftovers looks for: transaction._temps)."""
    return f".{name}.{os.urandom(6).hex()}{TEMP_SUFFIX}"


# temp_name's form: what sweep_temps may remove, and nothing else.
_TEMP_FORM = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{12}" + re.escape(TEMP_SUFFIX))


def new_temp(path: Path, dir_fd: Optional[int] = None, hold: bool = False) -> tuple[int, Path]:
    """A new, empty temp file beside ``path`` (a bare name when ``dir_fd`` is given), made
    with O_EXCL|O_NOFOLLOW: nothing planted under its name can be written through.  With
    ``hold``, flock'd until its fd is closed: sweep_temps never removes it (a directory
    another run may be writing into at the same time, as `wheel -o`'s)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = path.with_name(temp_name(path.name))
        name = tmp.name if dir_fd is not None else tmp
        try:
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        if not hold:
            return fd, tmp
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:  # a sweep between the open and the lock removed it: take another name
            if os.path.samestat(os.fstat(fd), os.stat(name, dir_fd=dir_fd, follow_symlinks=False)):
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)
    raise FileExistsError(errno.EEXIST, "no free temp name", str(path))


def sweep_temps(d: Path, suffix: str) -> None:
    """Remove from ``d`` the temp files a killed patchkit left there for files named
    ``*suffix`` (a SIGKILL runs no cleanup).  Only what patchkit itself made: a name of
    temp_name's form, a regular file (a link, directory or FIFO is never opened, followed
    or removed), owned by this user, and not held by a live writer (new_temp's ``hold``).
    Best effort: what cannot be checked stays."""
    try:
        dir_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in os.listdir(dir_fd):
            m = _TEMP_FORM.fullmatch(name)
            if m is None or not m["name"].endswith(suffix):
                continue
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    continue
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    if not os.path.samestat(os.fstat(fd), st):
                        continue  # replaced since it was looked at
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live run's
                    if os.path.samestat(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), st):
                        os.unlink(name, dir_fd=dir_fd)
                finally:
                    os.close(fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _write_temp(path: Path, data: bytes, mode: Optional[int], dir_fd: Optional[int], durable: bool) -> Path:
    fd, tmp = new_temp(path, dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is None:
                try:
                    mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode & 0o7777
                except FileNotFoundError:
                    mode = 0o644
            os.fchmod(f.fileno(), mode)
            if durable:
                crash_point("write")
            f.write(data)
            f.flush()
            if durable:
                crash_point("fsync")
                os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp.name if dir_fd is not None else tmp, dir_fd=dir_fd)
        raise
    return tmp


def write_temp(path: Path, data: bytes, mode: int | None = None) -> Path:
    """``data`` in a new temp file beside ``path`` (random name, O_EXCL), fsynced, with
    ``mode`` (default: the mode ``path`` has now, or 0644)."""
    try:
        return _write_temp(path, data, mode, None, durable=True)
    except OSError as e:  # EPERM, EROFS, ENOSPC, EIO...: the environment, never a bug
        raise cannot_write(path, e) from None


def write_owned(base: Path, rel: str, data: bytes, mode: int = 0o644) -> None:
    """``data`` as patchkit's own file ``base/rel`` (``rel`` with ``/``; its directories are
    made): every component of ``rel`` opened with O_NOFOLLOW, a temp beside the file, then a
    rename over whatever stands at the name (a planted link is replaced, not followed).
    Not fsynced: for caches, whose torn entry is a miss.  OSError when it cannot."""
    *parts, name = rel.split("/")
    fd = open_dir(base, parts, create=True)
    try:
        tmp = _write_temp(Path(name), data, mode, fd, durable=False)
        try:
            os.replace(tmp.name, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp.name, dir_fd=fd)
            raise
    finally:
        os.close(fd)


def owned_dir(base: Path, rel: str) -> Path:
    """``base/rel``, a directory patchkit owns (``rel`` with ``/``), made where missing:
    every component of ``rel`` checked with O_NOFOLLOW, so what is written below it next
    lands there and nowhere else.  A link or a file in the way is a TargetError."""
    parts = rel.split("/")
    try:
        os.close(open_dir(base, parts, create=True))
    except OSError as e:
        at = [base.joinpath(*parts[: i + 1]) for i in range(len(parts))]
        if e.errno in _NOT_HERE or e.errno in _FULL:  # read-only, immutable, another user's, full
            here = next((p.parent for p in [base, *at] if not os.path.lexists(p)), base / rel)
            raise TargetError(
                f"{here}: patchkit's cache cannot be written ({e.strerror})",
                "make it writable (chmod u+w; chattr -i), free space, or set PATCHKIT_CACHE to a directory you can"
                " write",
            ) from None
        bad = next((p for p in at if p.is_symlink() or (p.exists() and not p.is_dir())), base / rel)
        what = "a symlink" if bad.is_symlink() else "not a directory" if bad.exists() else e.strerror
        raise TargetError(
            f"{bad}: not a directory patchkit made ({what}); patchkit keeps its own files there",
            "remove it (patchkit makes it again)",
        ) from None
    return base / rel


def remove_owned(dir_fd: int, name: str, form: Callable[[str], bool]) -> None:
    """Delete the entry ``name`` of a directory patchkit owns (``dir_fd``, from open_dir),
    only when it is patchkit's: its name has patchkit's ``form``, and it is a regular file
    (a link is never followed, nor removed).  Best effort."""
    if not form(name):
        return
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            os.unlink(name, dir_fd=dir_fd)


def clear_entry(path: Path) -> None:
    """Make room at ``path``, a directory entry patchkit owns (a tree it unpacked into its
    cache or workspace): a directory there is first renamed aside (one step: a tree another
    process puts at ``path`` afterwards is never touched, where removing by name would
    empty it or fail on it) and then removed with everything in it (shutil.rmtree, which
    never follows a link inside); a link, file, FIFO or socket there is unlinked itself,
    never followed, so a link planted in place of the tree costs its target nothing."""
    import shutil

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    aside = path.with_name(f".{path.name}-gone-{os.urandom(6).hex()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:  # another process cleared it first
        return

    def gone_already(func, p, exc_info) -> None:  # another process removing the same tree
        if not isinstance(exc_info[1], FileNotFoundError):
            raise exc_info[1]

    shutil.rmtree(aside, onerror=gone_already)


def below_without_links(base: Path, path: Path) -> bool:
    """Whether ``path`` lies under ``base`` with no link among the components between them
    (``base`` itself may be one: a user's cache moved to a bigger disk), so that removing it
    removes what sits under ``base`` and nothing a planted link points at."""
    try:
        rel = path.relative_to(base)
    except ValueError:
        return False
    here = base
    for part in rel.parts:
        if part in ("", ".", ".."):
            return False
        here = here / part
        if here.is_symlink():
            return False
    return True


def replace(tmp: Path, path: Path) -> None:
    crash_point("rename")
    os.replace(tmp, path)


def atomic_write(path: Path, data: bytes) -> None:
    """One file, atomically (temp, fsync, rename, fsync the directory).  The file is
    either as it was or written; a failure is a TargetError and leaves no temp behind."""
    tmp = write_temp(path, data)
    try:
        replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise cannot_write(path, e) from None
    fsync_dir(path.parent)


def lock_timeout() -> float:
    """Seconds to wait for another patchkit's lock (read when a lock is taken, not at import)."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV, "10")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isnan(value) or value < 0:
        raise TargetError(
            f"{LOCK_TIMEOUT_ENV}={raw!r} is not a number of seconds",
            f"set {LOCK_TIMEOUT_ENV} to the seconds to wait for another patchkit's lock, a number >= 0"
            " (e.g. 10, 0.5; 0 fails at once), or unset it for the default of 10",
        )
    return value


# What a filesystem answers when it will not flock a directory (NFS, some FUSE mounts).
_NO_DIR_LOCK = (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)


@contextlib.contextmanager
def locked(roots: list[Path], timeout: float | None = None, create: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on each target root (sorted, so two invocations cannot deadlock).

    The lock is a ``flock`` of the root directory itself, which creates nothing: a dry run
    or a refused apply takes it and leaves the target as it was.  A ``.patchkit/lock`` that
    is there already (an earlier patchkit's) is locked too, so a run of that release
    excludes this one; it is opened without following a link, never created.  Where the
    filesystem refuses to flock a directory (``_NO_DIR_LOCK``), ``.patchkit/lock`` is the
    lock, made when missing; with ``create`` False (a dry run) it is locked only when there,
    and the run reads unlocked otherwise: it writes nothing."""
    timeout = lock_timeout() if timeout is None else timeout
    handles: list[int] = []
    try:
        for root in sorted(set(roots)):
            fd = _open_root(root)
            if fd is not None and not _flock(fd, root, timeout, handles):
                fd = None  # this filesystem refuses a directory lock: the lock file is the lock
            lock = _open_lock_file(root, make=fd is None and create)
            if lock is not None and not _flock(lock, root, timeout, handles):
                os.close(lock)
                raise TargetError(
                    f"{root}: cannot lock the target (this filesystem refuses flock)",
                    "patch a copy on a local disk",
                )
        yield
    finally:
        for fd in reversed(handles):
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _cannot_lock(root: Path, e: OSError) -> TargetError:
    return TargetError(
        f"{root}: cannot lock the target ({e.strerror})",
        "the location is read-only or belongs to another user (or .patchkit/lock is a symlink);"
        " patch a copy, or a venv you own",
    )


def _open_root(root: Path) -> Optional[int]:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise _cannot_lock(root, e) from None


def _open_lock_file(root: Path, make: bool) -> Optional[int]:
    """An fd of ``root/.patchkit/lock`` to flock: None when it is not there and not to be
    made.  Never through a symlink (at .patchkit, or at the lock): a .patchkit that is one
    is not patchkit's, and holds no lock of its own (a write refuses it: transaction.check)."""
    d = root / STATE_DIR_NAME
    try:
        if d.is_symlink() and not make:
            return None
        if d.is_symlink():
            raise TargetError(
                f"{d}: is a symlink; patchkit keeps its journal and lock inside the target only",
                "remove the symlink (patchkit recreates the directory)",
            )
        if not make and not os.path.lexists(d / "lock"):
            return None
        if make:
            d.mkdir(exist_ok=True)
            ensure_ignored(d)
            return os.open(d / "lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CREAT, 0o644)
        # Only to flock it: read access is enough, and a FIFO planted there must not block.
        fd = os.open(d / "lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise _cannot_lock(root, e) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _cannot_lock(root, OSError(errno.EISDIR, "not a regular file"))
    return fd


def _flock(fd: int, root: Path, timeout: float, handles: list[int]) -> bool:
    """Wait (up to ``timeout``) for an exclusive flock of ``fd``; held, it joins ``handles``.
    False, with ``fd`` closed, when the filesystem refuses to flock it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            handles.append(fd)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise TargetError(
                    f"{root}: another patchkit is working on this target (waited {timeout:g}s)",
                    f"wait for it to finish, then run again; {LOCK_TIMEOUT_ENV} sets the wait",
                ) from None
            time.sleep(0.05)
        except OSError as e:
            if e.errno not in _NO_DIR_LOCK:
                os.close(fd)
                raise _cannot_lock(root, e) from None
            os.close(fd)
            return False


def ensure_ignored(state_dir: Path) -> None:
    """A `*` .gitignore inside .patchkit/ keeps patchkit's state out of the user's git status."""
    gi = state_dir / ".gitignore"
    if not gi.exists():
        atomic_write(gi, b"*\n")
