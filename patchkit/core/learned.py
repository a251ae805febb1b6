"""What judging learns that is worth keeping for later runs, and the one stage that keeps it.

The judge writes nothing while it judges (patchkit/core/judge.py): an answer that costs a
parse and depends only on bytes is put in its Session's ``Learned`` (a value per kind and
key, read back within the run, so a second look costs nothing either):

- ``confirmed``: a view's ``pending`` or ``done`` confirmed on the op's complete scope
  (patchkit/core/confirm.py);
- ``outline``: a Python file's outline (patchkit/core/outline.py);
- ``identity``: a site's identity in a release (patchkit/core/identity.py);
- ``edit``: the words an op's edit changes in its home release (patchkit/core/edited.py).

``keep`` writes them into the cache, each through the module that owns its format, once
judging is done: the command runs it (apply, revert, status, diff, ...), outside any
judgement, so that a read-only cache or target leaves the verdicts as they are and a run
that judges only reads.
"""

from __future__ import annotations

from typing import Any

CONFIRMED, OUTLINE, IDENTITY, EDIT = "confirmed", "outline", "identity", "edit"
_ABSENT = object()


class Learned:
    """What one invocation's judging learned: kind -> key -> value, in the order learned."""

    def __init__(self) -> None:
        self.facts: dict[tuple[str, str], Any] = {}

    def get(self, kind: str, key: str, default: Any = None) -> Any:
        return self.facts.get((kind, key), default)

    def knows(self, kind: str, key: str) -> bool:
        return self.facts.get((kind, key), _ABSENT) is not _ABSENT

    def add(self, kind: str, key: str, value: Any) -> None:
        self.facts[(kind, key)] = value

    def __len__(self) -> int:
        return len(self.facts)


def keep(learned: Learned) -> None:
    """Write what was learned into the cache (each entry as its module writes it: a cache
    that cannot be written is passed over, as every cache write is), then forget it.  The
    one place judging's answers reach the disk; call it once judging is done."""
    from patchkit.core import confirm, edited, identity, outline

    write = {
        CONFIRMED: confirm.remember,
        OUTLINE: lambda _, v: outline.remember(*v),
        IDENTITY: identity._save,
        EDIT: edited._save,
    }
    facts, learned.facts = learned.facts, {}
    for (kind, key), value in facts.items():
        write[kind](key, value)
