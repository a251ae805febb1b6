"""Confirmations: a cache of "this op reads pending (or done) in this complete scope".

The judge checks a view's ``pending`` or ``done`` on a parse of the op's complete scope (judge.py),
which costs more than the rest of ``apply`` together.  The answer depends only on the op
(its recipe's bytes and index), patchkit's code, and the scope's source text, so it is
cached by their digest: a release's pristine files give the same answer on every run.
Only answers that confirmed the view's are remembered; a miss parses again, and so does an
entry that is not one of the two answers (patchkit's store misses it, or it holds another
word: patchkit/base/store.py).
"""

from __future__ import annotations

from typing import Optional

from patchkit.base import store
from patchkit.core import verdicts

STATES = ("pending", "done")


def key(code: str, recipe_sha: str, op_index: int, scope: str, source: str) -> str:
    """``code`` is verdicts.code_hash(), computed once per invocation by the caller."""
    h = verdicts.digest_of(f"{code}|{recipe_sha}|{op_index}|{scope}|".encode())
    return verdicts.digest_of(h.encode() + source.encode("utf-8", "surrogateescape"))


def known(k: str) -> Optional[str]:
    """The state confirmed under ``k`` ("pending" or "done"), or None."""
    data = store.get("confirmed", k, limit=64)
    state = data.decode("ascii", "replace").strip() if data is not None else None
    return state if state in STATES else None


def remember(k: str, state: str) -> None:
    store.put("confirmed", k, f"{state}\n".encode())
