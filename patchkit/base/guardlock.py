"""The guard's lock: a server started by `patchkit run` holds its trees, and apply and revert
refuse to write them while it runs.

Each target root has a lock file of its own for this, ``ROOT/.patchkit/guard``, beside the
transaction's lock (the root directory's flock, patchkit/base/fsio.py):

- `run` takes a *shared* flock of it on every root it judges, then takes and drops the
  transaction's lock (so that a write begun before the guard file existed has finished),
  judges, and execs the server with the fd inherited (``os.set_inheritable``): the lock is
  held by the server's own process, under its own pid, until it exits (or closes the fd).
  Several guarded servers on one venv share it.
- apply and revert, holding the transaction's lock, take an *exclusive* flock of it without
  waiting (``exclude``), and refuse with one line naming the pids that hold it; ``revert
  --force`` writes anyway (the server keeps serving what it loaded).  Held through the
  write, so a guard starting meanwhile waits for it.
- status says which pids hold it (``holders``, read from /proc/locks).

A lock file, not the root directory's flock: a guard's shared lock there would make every
apply wait its timeout and then fail as if another patchkit were writing, and could not be
stepped over with --force.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Iterator

from patchkit.base.errors import TargetError

NAME = "guard"
STATE = ".patchkit"


def path(root: Path) -> Path:
    return Path(root) / STATE / NAME


def _open(root: Path, create: bool) -> int | None:
    """An fd of the guard file (no link followed; a FIFO never blocks), made when ``create``
    and missing; None when it is not there (or cannot be opened) and not to be made."""
    d = Path(root) / STATE
    p = d / NAME
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = None
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):  # a link there is not patchkit's: never followed
            return None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    if create:
        try:
            if not os.path.lexists(d):
                os.mkdir(d)
                with contextlib.suppress(OSError):
                    from patchkit.base import fsio

                    fsio.ensure_ignored(d)
            fd = os.open(p, os.O_RDWR | os.O_CREAT | flags, 0o644)
        except OSError:
            fd = None
    if fd is None:
        try:
            fd = os.open(p, os.O_RDONLY | flags)  # flock needs no write access
        except OSError:
            return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def hold(roots: list[Path], timeout: float) -> tuple[list[int], list[Path]]:
    """Shared locks of every root's guard file, for `run` (waiting up to ``timeout`` for an
    apply or revert that holds one).  The fds are not inheritable yet: ``inherit`` them just
    before exec.  (fds, roots not held): a root whose guard file cannot be made or opened
    (another user's read-only venv) is not held."""
    fds: list[int] = []
    missed: list[Path] = []
    try:
        for root in sorted(set(roots)):
            fd = _open(root, create=True)
            if fd is None:
                missed.append(root)
                continue
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    fds.append(fd)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        os.close(fd)
                        raise TargetError(
                            f"{root}: patchkit is writing this tree (waited {timeout:g}s)",
                            "wait for the apply or revert to finish, then run again; "
                            "PATCHKIT_LOCK_TIMEOUT sets the wait",
                        ) from None
                    time.sleep(0.05)
                except OSError:
                    os.close(fd)
                    missed.append(root)
                    break
    except BaseException:
        release(fds)
        raise
    return fds, missed


def inherit(fds: list[int]) -> None:
    for fd in fds:
        os.set_inheritable(fd, True)


def release(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def holders(root: Path) -> list[int]:
    """The pids (other than this one) that hold a shared lock of ``root``'s guard file: the
    guarded servers running on it.  [0] when one holds it but /proc/locks cannot say who."""
    try:
        st = os.stat(path(root), follow_symlinks=False)
    except OSError:
        return []
    if not stat.S_ISREG(st.st_mode):
        return []
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return [0] if _taken(root) else []
    pids = set()
    for line in lines:
        words = line.split()
        if len(words) < 6 or words[1] == "->" or words[1] != "FLOCK" or words[3] != "READ":
            continue
        try:
            maj, mnr, ino = words[5].split(":")
            if (int(maj, 16), int(mnr, 16), int(ino)) == want and int(words[4]) != os.getpid():
                pids.add(int(words[4]))
        except ValueError:
            continue
    return sorted(pids)


def _taken(root: Path) -> bool:
    fd = _open(root, create=False)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError as e:
        return e.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
    finally:
        os.close(fd)


def said(pids: list[int]) -> str:
    known = [str(p) for p in pids if p]
    if not known:
        return "a server started by `patchkit run`"
    return f"{'pid' if len(known) == 1 else 'pids'} {', '.join(known)}, started by `patchkit run`"


@contextlib.contextmanager
def exclude(roots: list[Path], action: str, force: bool = False) -> Iterator[None]:
    """For a write (apply, revert), under the transaction's lock: an exclusive lock of each
    root's guard file that is there, taken without waiting, held through the write.  One a
    guarded server holds is a TargetError naming it; with ``force`` the write goes on."""
    fds: list[int] = []
    try:
        for root in sorted(set(roots)):
            fd = _open(root, create=False)  # none there: no guard holds it, and a new one waits for our lock
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fds.append(fd)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK) or force:
                    continue
                raise TargetError(
                    f"{root}: a guarded server is running on this tree ({said(holders(root))}); "
                    f"{action} refuses to change the code it was started on",
                    "stop it first" + ("; `revert --force` reverts anyway" if action == "revert" else ""),
                ) from None
        yield
    finally:
        release(fds)
