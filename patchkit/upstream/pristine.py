"""The pristine release: the bytes upstream shipped, where "upstream" verdicts come from.

An edit that is present in a target is upstream's only when the pristine release of the
target's version has it.  Never the journal's silence: a journal can be lost, damaged, or
left behind by an in-place upgrade, and then a patched tree would read "upstream" and
`revert` would change nothing.  The reference, per layout:

- a git checkout: the release's tagged commit (``v<version>`` or ``<version>``), or the
  revision `patchkit sync` checked out (``.patchkit/source.json``);
- a package layout (unpacked wheel, site-packages): the release's own wheel, from
  patchkit's cache or, unless ``PATCHKIT_OFFLINE=1``, downloaded from the package index;
- an engine whose definition says ``reference = "sdist"`` (vLLM: its wheels are ten times
  larger): the release's sdist, unpacked once into the cache (drift.release_tree), for a
  package layout and for a git layout that is no tagged checkout (an unpacked sdist).

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

from patchkit.base.errors import FetchError, PatchkitError
from patchkit.base.target import ENGINES, Target

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
        self._tree: Optional[Target] = None  # an unpacked sdist (git layout), for reference = "sdist"
        kind = ENGINES[target.engine].reference
        try:
            if target.layout == "git" and (kind != "sdist" or (target.root / ".git").exists()):
                self._open_git()
            elif kind == "sdist":
                self._open_sdist()
            elif kind == "git":
                raise PatchkitError(f"{target.engine}'s definition names no release to download (reference = git)")
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
        ref._files, ref._modules, ref._zip, ref._commit, ref._tree = {}, {}, None, "", None
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
        from patchkit.base import regular
        from patchkit.base.paths import wheels_dir
        from patchkit.upstream import recorded

        d = wheels_dir(dist) / public  # fetch.wheel_dir, without importing the index client
        # A cached wheel is used only as the bytes recorded when it was downloaded (recorded.py),
        # checked as it is opened, every time; a FIFO or a link there is not a wheel.
        opened, unchecked = None, []
        for w in sorted(d.glob("*.whl")) if d.is_dir() else []:
            try:
                opened = (w, recorded.open_checked(w))
                break
            except recorded.Unchecked as e:
                unchecked.append((w, str(e)))
            except regular.NotRegular as e:
                unchecked.append((w, f"it is {e.kind}, not a wheel"))
        if opened is None and unchecked and os.environ.get(OFFLINE_ENV) != "1":
            # online: checked against the index again (recorded where it is the index's file,
            # downloaded again over it where it is not)
            from patchkit.upstream import fetch

            try:
                w = fetch.fetch_wheel(dist, public, say=_say)
                opened = (w, recorded.open_checked(w))
            except FetchError as e:
                if "no such release" not in e.message:
                    raise
            except recorded.Unchecked:  # changed again since: not used
                pass
        installed = None if opened else installed_from(self.target.root, dist, public)
        if opened:
            whl, f = opened
            self._zip = zipfile.ZipFile(f)
            self.what = f"{dist} {public}'s wheel"
            return
        elif installed is not None:
            whl = installed
        elif self._lazy_or_sdist(dist, public):
            return
        elif os.environ.get(OFFLINE_ENV) == "1":
            if unchecked:
                raise recorded.refusal(*unchecked[0], OFFLINE_ENV)
            raise PatchkitError(f"{dist} {public}'s wheel is not in patchkit's cache, and {OFFLINE_ENV}=1")
        else:
            # pip installed it from an index: its HTTP cache holds the bytes under keys only pip
            # reads, and site-packages holds them patched.  Say why the release comes again.
            _say(
                f"{dist} {public}: downloading the release's wheel once into {d} to compare with (pip keeps no "
                "copy patchkit can read: only a wheel installed from a file, named in its direct_url.json)"
            )
            from patchkit.upstream import fetch

            try:
                whl = fetch.fetch_wheel(dist, public, say=_say)
            except FetchError as e:
                if "no such release" not in e.message:
                    raise
                self._open_sdist()  # PATCHKIT_LAZY=0: the sdist-only release, as _lazy_or_sdist reads it
                return
        try:  # checked as it is opened: a FIFO put there since never blocks; a download, against its record
            self._zip = zipfile.ZipFile(regular.open_file(whl) if whl == installed else recorded.open_checked(whl))
        except regular.NotRegular as e:
            raise PatchkitError(f"{whl}: is {e.kind}, not a wheel", "remove it from patchkit's cache") from None
        except recorded.Unchecked as e:  # changed since the download was checked
            raise PatchkitError(f"{whl}: not used as a pristine reference: {e}", "remove it") from None
        self.what = f"{dist} {public}'s wheel" + (f" ({whl}, as installed)" if whl == installed else "")

    def _lazy_or_sdist(self, dist: str, public: str) -> bool:
        """The release's wheel read lazily (``_open_lazy``); or, where the index has no wheel
        of the release but has its sdist (FlashInfer 0.3.1, 0.4.0), the sdist, unpacked as
        the repository lays it out (fetch.release_tree).  False: download the whole wheel."""
        try:
            return self._open_lazy(dist, public)
        except FetchError as e:
            if "no such release" not in e.message:
                raise
        self._open_sdist()
        return True

    def _open_lazy(self, dist: str, public: str) -> bool:
        """The release's wheel read member by member (patchkit/upstream/lazywheel.py): from a
        previous run's listing, else (unless offline) by HTTP ranges from the index.  False
        where it cannot be (PATCHKIT_LAZY=0, offline with nothing stored, an index that
        serves no ranges): the whole wheel is downloaded, as before."""
        from patchkit.upstream import lazywheel

        if not lazywheel.enabled():
            return False
        lw = lazywheel.LazyWheel.stored(dist, public, _say)
        if lw is None and os.environ.get(OFFLINE_ENV) != "1":
            _say(f"{dist} {public}: reading the release's wheel by ranges from the index (its directory, files judged)")
            lw = lazywheel.LazyWheel.open(dist, public, _say)
        if lw is None:
            return False
        self._zip = lw  # type: ignore[assignment]  (namelist and read, as a ZipFile's)
        self.what = f"{dist} {public}'s wheel"
        return True

    # -- the release's sdist, unpacked in the cache -------------------------------------------
    def _open_sdist(self) -> None:
        from packaging.version import InvalidVersion, Version

        v = self.target.version
        if not v:
            raise PatchkitError(f"the version of {self.target.root} is unknown")
        try:
            public = Version(v).public
        except InvalidVersion:
            raise PatchkitError(f"{v!r} is not a release version") from None
        from patchkit.upstream import fetch, recorded

        dest = fetch.cache_dir() / "trees" / f"{self.target.engine}-{public}"
        why = recorded.tree_why_not(dest, self.target.engine, public)
        offline = why is not None and os.environ.get(OFFLINE_ENV) == "1"
        if offline and not os.path.lexists(dest):
            raise PatchkitError(
                f"{self.target.engine} {public}'s sdist is not in patchkit's cache, and {OFFLINE_ENV}=1"
            )
        try:  # a tree not tied to a checked archive is made again from one (fetch.release_tree)
            root = fetch.release_tree(self.target.engine, public, say=_say)
        except FetchError:
            if offline:  # none here to make it from: the tree there is not used
                raise recorded.refusal(dest, str(why), OFFLINE_ENV) from None
            raise
        got = fetch.tree_source(root) or {}
        # the wheel where the index has no sdist of the release (drift.release_tree)
        self._tree = Target(self.target.engine, root, "git" if got.get("sdist") else "package", public)
        self.what = f"{self.target.engine} {public}'s {'sdist' if got.get('sdist') else 'wheel'}"

    # -- reading ------------------------------------------------------------------------------
    @property
    def commit(self) -> str:
        """The commit a git checkout's reference reads from ("" for a wheel, or none found)."""
        return self._commit

    def members(self) -> Optional[list[str]]:
        """The paths of the release's files (as they lie under the target's root); None for
        a git checkout's reference, or none found."""
        if self._tree is not None:
            out = []
            for dirpath, dirnames, files in os.walk(self._tree.root):
                dirnames[:] = [d for d in dirnames if d != ".patchkit"]
                for name in files:
                    rel = os.path.relpath(os.path.join(dirpath, name), self._tree.root).replace(os.sep, "/")
                    for lp, pp in self._tree_pairs():
                        if rel.startswith(pp):
                            mapped = self._mapped(lp + rel[len(pp) :])
                            if mapped is not None:
                                out.append(mapped)
                            break
            return sorted(out)
        return None if self._zip is None else [n for n in self._zip.namelist() if not n.endswith("/")]

    def _tree_pairs(self) -> list[tuple[str, str]]:
        return sorted(ENGINES[self.target.engine].layouts[self._tree.layout], key=lambda p: -len(p[1]))

    def _mapped(self, logical: str) -> Optional[str]:
        """A logical name's path in the target's layout, or None where that layout has none
        (an installed vllm has no csrc/)."""
        for lp, pp in ENGINES[self.target.engine].layouts[self.target.layout]:
            if logical.startswith(lp):
                return pp + logical[len(lp) :]
        return None

    def read(self, logical: str, keep: bool = True) -> Optional[bytes]:
        """The pristine bytes of a logical file (None when the release has no such file);
        remembered for the invocation unless ``keep`` is False (a caller reading every file
        of a release, as capture does, would hold the whole release in memory)."""
        if logical in self._files:
            return self._files[logical]
        data: Optional[bytes] = None
        if self._tree is not None:
            from patchkit.base import regular

            try:
                p: Optional[Path] = self._tree.root / self._tree.relpath(logical)
            except PatchkitError:  # a wheel in place of the sdist has no csrc/: not in the release
                p = None
            data = regular.read_file(p) if p is not None and p.is_file() else None
            if keep:
                self._files[logical] = data
            return data
        rel = self.target.relpath(logical)
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
            import ast

            import libcst as cst

            from patchkit.core.ops import _cst

            data = self.read(logical)
            try:
                # CPython's parser first: libcst's native one crashes the interpreter on
                # nesting that CPython refuses (a cached wheel or a commit is input too).
                if data is not None:
                    ast.parse(data)
                self._modules[logical] = None if data is None else _cst.parsed(data)
            except (SyntaxError, ValueError, MemoryError, RecursionError, cst.ParserSyntaxError):
                self._modules[logical] = None
        return self._modules[logical]


def installed_from(root: Path, dist: str, version: str) -> Optional[Path]:
    """The wheel file pip installed ``dist`` ``version`` from, when it was a local file: its
    ``direct_url.json`` (PEP 610) names it.  Used only when it still is that release: the
    file's name carries exactly ``version`` (a patched wheel's ``+label`` is not pristine), and
    its sha256 is the one pip recorded (``archive_info.hash``), when pip recorded one."""
    from urllib.parse import unquote, urlsplit

    stem = dist.replace("-", "_")
    info = root / f"{stem}-{version}.dist-info" / "direct_url.json"
    try:
        doc = json.loads(info.read_text(encoding="utf-8"))
        url = urlsplit(doc["url"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if url.scheme != "file":
        return None
    whl = Path(unquote(url.path))
    if not whl.name.startswith(f"{stem}-{version}-") or not whl.name.endswith(".whl") or not whl.is_file():
        return None
    want = ((doc.get("archive_info") or {}).get("hash") or "") if isinstance(doc, dict) else ""
    if want:
        algo, _, digest = want.partition("=")
        if algo != "sha256":
            return None
        from patchkit.upstream.fetch import file_sha256

        if file_sha256(whl) != digest:
            return None
    return whl


def _source(root: Path) -> dict:
    from patchkit.upstream import fetch

    return fetch.tree_source(root) or {}


def _say(msg: str) -> None:
    import sys

    print(f"pristine reference: {msg}", file=sys.stderr)


class Releases:
    """Pristine code as the judge asks for it (patchkit.core.judge.Releases): a target's
    release, a checkout's HEAD, another release by version.  Handed to every Session."""

    def of(self, target: Target) -> Reference:
        return Reference(target)

    def head(self, target: Target, other_than: str) -> Optional[Reference]:
        return Reference.head(target, other_than=other_than)

    def release(self, engine: str, version: str) -> Reference:
        return Reference(Target(engine, Path("/"), "package", version))


RELEASES = Releases()
