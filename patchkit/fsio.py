"""Where files are written.  All-or-nothing across files, atomic per file, and locked.

Every byte patchkit writes to a target goes through ``write_all``: each new file is first
written to a temp file beside its target and fsynced; only when all are ready are they
renamed into place.  If anything fails on the way, files already renamed are put back as
they were, so a failed invocation leaves every file as it found it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

from patchkit.errors import TargetError

LOCK_TIMEOUT_S = float(os.environ.get("PATCHKIT_LOCK_TIMEOUT", "10"))


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_temp(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.patchkit-{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise TargetError(
                f"{path}: cannot write here ({e.strerror})",
                "the location is read-only or belongs to another user; patch a copy, or a venv you own",
            ) from None
        raise
    return tmp


def atomic_write(path: Path, data: bytes) -> None:
    tmp = _write_temp(path, data)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_all(changes: list[tuple[Path, bytes, bytes]]) -> None:
    """Write every (path, new, old) or none of them."""
    temps: list[tuple[Path, Path, bytes]] = []
    done: list[tuple[Path, bytes]] = []
    try:
        for path, new, old in changes:
            temps.append((path, _write_temp(path, new), old))
        for path, tmp, old in temps:
            os.replace(tmp, path)
            done.append((path, old))
    except BaseException:
        for path, old in reversed(done):
            atomic_write(path, old)
        for _, tmp, _ in temps:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    for d in {p.parent for p, _, _ in changes}:
        _fsync_dir(d)


@contextlib.contextmanager
def locked(roots: list[Path], timeout: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on each target root (sorted, so two invocations cannot deadlock)."""
    timeout = LOCK_TIMEOUT_S if timeout is None else timeout
    handles = []
    try:
        for root in sorted(set(roots)):
            d = root / ".patchkit"
            try:
                d.mkdir(exist_ok=True)
                ensure_ignored(d)
                f = open(d / "lock", "a+")
            except OSError as e:
                raise TargetError(
                    f"{root}: cannot lock the target ({e.strerror})",
                    "the location is read-only or belongs to another user; patch a copy, or a venv you own",
                ) from None
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        f.close()
                        raise TargetError(
                            f"{root}: another patchkit is working on this target (waited {timeout:g}s)",
                            "wait for it to finish, then run again; PATCHKIT_LOCK_TIMEOUT sets the wait",
                        ) from None
                    time.sleep(0.05)
            handles.append(f)
        yield
    finally:
        for f in handles:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()


def ensure_ignored(state_dir: Path) -> None:
    """A `*` .gitignore inside .patchkit/ keeps patchkit's state out of the user's git status."""
    gi = state_dir / ".gitignore"
    if not gi.exists():
        gi.write_text("*\n")
