"""The pristine release: the bytes upstream shipped, where "upstream" verdicts come from.

An edit that is present in a target is upstream's only when the pristine release of the
target's version has it.  Never the journal's silence: a journal can be lost, damaged, or
left behind by an in-place upgrade, and then a patched tree would read "upstream" and
`revert` would change nothing.  The reference, per layout:

- a git checkout: the release's tagged commit (``v<version>`` or ``<version>``), or the
  revision `patchkit sync` checked out (``.patchkit/source.json``);
- a package layout (unpacked wheel, site-packages): the release's own wheel, from
  patchkit's cache or, unless ``PATCHKIT_OFFLINE=1``, downloaded from the package index.

Where none can be had (offline, unknown version, a commit with no tag), ``Reference`` says
why, and the judge says ``applied?`` rather than guess.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path
from typing import Optional

from patchkit.errors import PatchkitError
from patchkit.target import ENGINES, Target

OFFLINE_ENV = "PATCHKIT_OFFLINE"  # "1": never reach the package index for a reference
FORK_EMAIL = "patchkit@localhost"  # the author of `patchkit fork`'s commits (fork.AUTHOR_EMAIL)


class Reference:
    """One target's pristine release.  ``read`` gives a file's pristine bytes (None when the
    release has no such file); ``why_not`` is set, and ``read`` unusable, when there is no
    reference."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.what = ""  # e.g. "sglang 0.5.9's wheel", for messages
        self.why_not = ""
        self._files: dict[str, Optional[bytes]] = {}
        self._modules: dict[str, object] = {}  # logical -> libcst Module, or None
        self._zip: Optional[zipfile.ZipFile] = None
        self._commit = ""
        try:
            if target.layout == "git":
                self._open_git()
            else:
                self._open_wheel()
        except PatchkitError as e:
            self.why_not = e.message
        except (OSError, zipfile.BadZipFile) as e:
            self.why_not = f"the pristine release could not be read ({e})"

    @classmethod
    def head(cls, target: Target, other_than: str = "") -> Optional["Reference"]:
        """A git checkout's HEAD commit as a reference: code committed there is the
        checkout's own (upstream's, or its maintainers'), never an edit patchkit left in the
        work tree.  None when there is no such commit, or it is ``other_than`` (the tag)."""
        ref = cls.__new__(cls)
        ref.target, ref.what, ref.why_not = target, "", ""
        ref._files, ref._modules, ref._zip, ref._commit = {}, {}, None, ""
        try:
            # The newest commit of HEAD's first-parent line that `patchkit fork` did not make:
            # a fork branch's commits hold patchkit's edits, not the checkout's own code.
            got = ref._git("log", "--first-parent", "-n", "200", "--format=%H %ae", "HEAD")
        except (OSError, subprocess.SubprocessError):
            return None
        rows = [ln.split(" ", 1) for ln in got.stdout.decode().splitlines()] if got.returncode == 0 else []
        commit = next((h for h, *email in rows if email != [FORK_EMAIL]), "")
        if not commit or commit == other_than:
            return None
        ref._commit, ref.what = commit, f"{target.engine}'s committed code (HEAD {commit[:12]})"
        return ref

    @property
    def available(self) -> bool:
        return not self.why_not

    # -- git: the tagged commit ---------------------------------------------------------------
    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(self.target.root), *args], capture_output=True, timeout=60, check=False)

    def _open_git(self) -> None:
        v = self.target.version
        revs = [f"refs/tags/v{v}", f"refs/tags/{v}"] if v else []
        src = _source(self.target.root)
        if src.get("rev"):
            revs.append(str(src["rev"]))
        for rev in revs:
            try:
                got = self._git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
            except (OSError, subprocess.SubprocessError):
                raise PatchkitError("git is not available to read the release's tagged commit") from None
            if got.returncode == 0:
                self._commit = got.stdout.decode().strip()
                self.what = f"{self.target.engine} {v or ''} at {rev.removeprefix('refs/tags/')}".replace("  ", " ")
                return
        raise PatchkitError(
            f"no tag v{v} (or {v}) in {self.target.root}" if v else f"the version of {self.target.root} is unknown"
        )

    # -- package layout: the release's wheel --------------------------------------------------
    def _open_wheel(self) -> None:
        from packaging.version import InvalidVersion, Version

        v = self.target.version
        if not v:
            raise PatchkitError(f"the version of {self.target.root} is unknown")
        try:
            public = Version(v).public  # a patched wheel is <version>+<label>
        except InvalidVersion:
            raise PatchkitError(f"{v!r} is not a release version") from None
        dist = ENGINES[self.target.engine].dist
        from patchkit import fetch

        d = fetch.cache_dir() / "wheels" / dist.replace("_", "-").lower() / public
        cached = sorted(d.glob("*.whl")) if d.is_dir() else []
        if cached:
            whl = cached[0]
        elif os.environ.get(OFFLINE_ENV) == "1":
            raise PatchkitError(f"{dist} {public}'s wheel is not in patchkit's cache, and {OFFLINE_ENV}=1")
        else:
            whl = fetch.fetch_wheel(dist, public, say=_say)
        self._zip = zipfile.ZipFile(whl)
        self.what = f"{dist} {public}'s wheel"

    # -- reading ------------------------------------------------------------------------------
    @property
    def commit(self) -> str:
        """The commit a git checkout's reference reads from ("" for a wheel, or none found)."""
        return self._commit

    def members(self) -> Optional[list[str]]:
        """The paths of the release wheel's files (as they lie under the target's root); None
        for a git checkout's reference, or none found."""
        return None if self._zip is None else [n for n in self._zip.namelist() if not n.endswith("/")]

    def read(self, logical: str, keep: bool = True) -> Optional[bytes]:
        """The pristine bytes of a logical file (None when the release has no such file);
        remembered for the invocation unless ``keep`` is False (a caller reading every file
        of a release, as capture does, would hold the whole release in memory)."""
        if logical in self._files:
            return self._files[logical]
        rel = self.target.relpath(logical)
        data: Optional[bytes] = None
        if self._zip is not None:
            try:
                data = self._zip.read(rel)
            except KeyError:
                data = None
        elif self._commit:
            got = self._git("cat-file", "blob", f"{self._commit}:{rel}")
            data = got.stdout if got.returncode == 0 else None
        if keep:
            self._files[logical] = data
        return data

    def module(self, logical: str):
        """The pristine Python file parsed (libcst), once per invocation however many ops
        ask; None when the release has no such file or it does not parse."""
        if logical not in self._modules:
            import libcst as cst

            data = self.read(logical)
            try:
                self._modules[logical] = None if data is None else cst.parse_module(data)
            except cst.ParserSyntaxError:
                self._modules[logical] = None
        return self._modules[logical]


def _source(root: Path) -> dict:
    try:
        doc = json.loads((root / ".patchkit" / "source.json").read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def _say(msg: str) -> None:
    import sys

    print(f"pristine reference: {msg}", file=sys.stderr)
