"""Confirmations: a cache of "this op reads pending (or done) in this complete scope".

The judge checks a view's ``pending`` or ``done`` on a parse of the op's complete scope (judge.py),
which costs more than the rest of ``apply`` together.  The answer depends only on the op
(its recipe's bytes and index), patchkit's code, and the scope's source text, so it is
cached by their digest: a release's pristine files give the same answer on every run.
Only answers that confirmed the view's are remembered; a miss parses again.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Optional

from patchkit import verdicts
from patchkit.paths import cache_dir


def _dir() -> Path:
    return cache_dir() / "confirmed"


def key(code: str, recipe_sha: str, op_index: int, scope: str, source: str) -> str:
    """``code`` is verdicts.code_hash(), computed once per invocation by the caller."""
    h = verdicts.digest_of(f"{code}|{recipe_sha}|{op_index}|{scope}|".encode())
    return verdicts.digest_of(h.encode() + source.encode("utf-8", "surrogateescape"))


def known(k: str) -> Optional[str]:
    """The state confirmed under ``k`` ("pending" or "done"), or None."""
    try:
        return (_dir() / k).read_text().strip() or None
    except OSError:
        return None


def remember(k: str, state: str) -> None:
    d = _dir()
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs speed
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{k}.{os.getpid()}"
        tmp.write_text(f"{state}\n")
        os.replace(tmp, d / k)
