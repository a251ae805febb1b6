"""Progress off a terminal: while long work runs (a download, a wheel read by ranges,
releases judged in parallel), a line on stderr at least every ``EVERY`` seconds when stderr
is not a terminal (a log, a pipe, CI), so that a cold run is never silent for a minute.

On a terminal the work shows its own progress, rewritten in place (fetch's MB counter,
drift's ``k/N releases judged``); these lines are for where that is not shown.  Work inside
other work names the innermost; one beat runs however deep.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

EVERY = 10.0  # seconds between two lines, at most

_lock = threading.Lock()
_work: list[list] = []  # [what, status] of the work running, innermost last


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _beat(stop: threading.Event, start: float) -> None:
    while not stop.wait(EVERY):
        with _lock:
            if not _work:
                continue
            what, status = _work[-1]
        try:
            extra = status() if status else ""
        except Exception:  # a status that fails says nothing; the line still goes out
            extra = ""
        line = f"patchkit: still {what}{', ' + extra if extra else ''} ({time.monotonic() - start:.0f} s)"
        try:
            print(line, file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed under us: nothing to say it to
            return


@contextmanager
def working(what: str, status: Optional[Callable[[], str]] = None) -> Iterator[None]:
    """Run the body with a line every ``EVERY`` seconds off a terminal: ``patchkit: still
    WHAT, STATUS (N s)``; ``status()`` says how far it got (e.g. ``12.0 of 80.1 MB``)."""
    if _terminal():
        yield
        return
    entry = [what, status]
    with _lock:
        _work.append(entry)
        first = len(_work) == 1
    stop = threading.Event()
    beat = threading.Thread(target=_beat, args=(stop, time.monotonic()), daemon=True) if first else None
    if beat is not None:
        beat.start()
    try:
        yield
    finally:
        with _lock:
            _work.remove(entry)
        if beat is not None:
            stop.set()
            beat.join(1.0)
