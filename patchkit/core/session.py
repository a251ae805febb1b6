"""The Session: the inputs of one invocation, read once, for the stages to read.

The targets, their journals (as loaded: nothing here changes them; the transaction
computes the journal a write leaves on copies), the documents read so far, and the pristine
references opened (through the ``Releases`` the command hands it).  Every method reads, or
memoizes a read; the judge's answers are its own value (verdict.Evaluation).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

from patchkit.base.errors import TargetError
from patchkit.base.journal import Journal
from patchkit.base.model import Recipe
from patchkit.base.target import Target
from patchkit.core import txnrecord, verdicts
from patchkit.core.document import Document
from patchkit.core.learned import Learned

if TYPE_CHECKING:
    from patchkit.core import identity


class Releases(Protocol):
    """Where the stages get pristine code (``patchkit.upstream.pristine.RELEASES``): the core
    reads releases only through what the command hands it, so it imports nothing above it."""

    def of(self, target: Target) -> Any:
        """The pristine release of a target (``read``, ``module``, ``available``, ``commit``)."""

    def head(self, target: Target, other_than: str) -> Any:
        """A git checkout's HEAD as a reference, or None (see pristine.Reference.head)."""

    def release(self, engine: str, version: str) -> Any:
        """Another release of an engine, by version (a site's identity, identity.py)."""


class Session:
    """The targets of one invocation, their journals, and the documents read so far.
    ``releases``: where pristine code comes from (``Releases``)."""

    def __init__(
        self, targets: dict[str, Target], known: Optional[dict[str, Recipe]] = None, *, releases: Releases
    ) -> None:
        self.targets = targets
        self.provider = releases
        # Every recipe the catalog holds, by id: the planner checks a plan's edits against
        # those of recipes applied earlier (two recipes must not edit the same code).
        self.known: dict[str, Recipe] = known or {}
        self.journals: dict[Path, Journal] = {}
        self.mirror_read: dict[Path, dict] = {}  # root -> the mirrored journal's engines
        self.mirrors: dict[str, Optional[str]] = {}  # the mirror files read: path -> digest
        self.files: dict[tuple[str, str], Document] = {}
        # Per (engine, root): one site-packages holds both engines, each with its own release.
        self.references: dict[tuple[str, Path], Any] = {}
        self.heads: dict[tuple[str, Path], Any] = {}  # a checkout's HEAD, or None
        self.releases: dict[tuple[str, str], Any] = {}  # other releases (identity.py)
        self.identities: dict[tuple, Optional[identity.Identity]] = {}
        # What judging learned that is worth caching: written after judging (learned.keep).
        self.learned = Learned()
        # engine -> the fingerprint of its tree taken before a search read it (Session.sweep);
        # None when a file changed too recently for its timestamps to tell a later change.
        self.swept: dict[str, Optional[str]] = {}
        # Recipes an interrupted apply/revert was writing when it was killed (per root).
        self.interrupted: dict[Path, txnrecord.Interrupted] = {}
        roots = {t.root for t in targets.values()}
        for t in targets.values():
            found = txnrecord.interrupted(t.root, roots)
            if found is not None:
                self.interrupted[t.root] = found

    @functools.cached_property
    def code(self) -> str:
        """The digest of patchkit's own code, for caches keyed on it (once per invocation)."""
        return verdicts.code_hash()

    def target(self, engine: str, recipe: Recipe) -> Target:
        if engine not in self.targets:
            raise TargetError(
                f"recipe {recipe.id} edits {engine}, but there is no {engine} target",
                f"pass --target {engine}=PATH, or run `patchkit sync` to use the pinned workspace",
            )
        return self.targets[engine]

    def journal(self, engine: str) -> Journal:
        root = self.targets[engine].root
        if root not in self.journals:
            self.journals[root] = Journal.load(root)
        return self.journals[root]

    def mirror(self, engine: str) -> dict:
        """The engines of the target's journal mirror (patchkit/base/journal.py), read once;
        what was read is kept in ``mirrors`` (path -> digest or None), so that a cached
        verdict or plan that leaned on it is keyed on its bytes."""
        from patchkit.base import journal

        root = self.targets[engine].root
        if root not in self.mirror_read:
            data = journal.read_mirror(root)
            self.mirrors[verdicts.mirror_input(root)] = verdicts.digest_of(data) if data is not None else None
            self.mirror_read[root] = journal.mirror_engines(root, data)
        return self.mirror_read[root]

    def mid_write(self, engine: str, recipe: str) -> Optional[Journal]:
        """The journal an interrupted write of this recipe would have left, or None."""
        found = self.interrupted.get(self.targets[engine].root)
        return found.journal if found is not None and recipe in found.recipes else None

    def reference(self, engine: str):
        """The pristine release of a target (``Releases.of``), opened once per invocation."""
        t = self.targets[engine]
        if (engine, t.root) not in self.references:
            self.references[(engine, t.root)] = self.provider.of(t)
        return self.references[(engine, t.root)]

    def release(self, engine: str, version: str):
        """Another release of an engine (``Releases.release``), opened once per invocation."""
        if (engine, version) not in self.releases:
            self.releases[(engine, version)] = self.provider.release(engine, version)
        return self.releases[(engine, version)]

    def head(self, engine: str):
        """A git checkout's committed code (HEAD), when it is not the release's tagged
        commit; None otherwise.  Code committed there is the checkout's own, not patchkit's."""
        t = self.targets[engine]
        if (engine, t.root) not in self.heads:
            ref = self.reference(engine)
            head = self.provider.head(t, ref.commit) if t.layout == "git" else None
            self.heads[(engine, t.root)] = head
        return self.heads[(engine, t.root)]

    def sweep(self, engine: str) -> Target:
        """A search of the engine's whole tree is about to read files nobody named: its
        state is fingerprinted first (verdicts.tree_state), once, so that cached verdicts
        are reused only while no file of the tree has changed.  Returns the target."""
        t = self.targets[engine]
        if engine not in self.swept:
            self.swept[engine] = verdicts.tree_state(t)
        return t

    def file(self, engine: str, logical: str) -> Document:
        key = (engine, logical)
        if key not in self.files:
            self.files[key] = Document(self.targets[engine], logical, learned=self.learned)
        return self.files[key]

    def as_planned(self, files: dict, journals: dict) -> "Session":
        """This session as a plan would leave the targets: ``files`` ((engine, logical) ->
        the bytes planned) read as if written, ``journals`` (root -> Journal) as the write
        would leave them; every other file is read from disk, and the pristine references and
        identities already opened are shared (they do not depend on the targets' bytes).
        Nothing is written: the planner judges a plan's bytes on it before they are."""
        s = Session(self.targets, self.known, releases=self.provider)
        s.references, s.heads, s.releases, s.identities = self.references, self.heads, self.releases, self.identities
        s.learned = self.learned
        s.interrupted = {}
        s.journals = dict(journals)
        for key, data in files.items():
            s.files[key] = Document(self.targets[key[0]], key[1], planned=data, learned=self.learned)
        return s

    def notes(self) -> list[str]:
        """What the user should know about the state patchkit keeps (a damaged journal)."""
        return [
            f"warning: {j.damaged}; read as empty (its mirror in the state directory still proves patchkit's edits),"
            " and the next apply or revert rewrites it"
            for j in self.journals.values()
            if j.damaged
        ]

    def interrupted_recipes(self) -> dict[str, str]:
        """recipe id -> what was interrupted ("apply" or "revert")."""
        return {r: i.action for i in self.interrupted.values() for r in i.recipes}
