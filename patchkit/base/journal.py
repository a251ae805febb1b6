"""The journal: which ops patchkit itself wrote into a target, and the proof of it.

State comes from the code (ops locate their sites in the files as they are now); *who* made
an edit that is there comes from proof (patchkit/core/proof.py): an edit is patchkit's only
where this record proves it, by the digest of the file patchkit last wrote, or by the digest
of the code each op left at its site (``sites``).  Otherwise the pristine release tells
upstream's code from someone else's.  The journal is also the guard for the user's own later
edits (revert refuses a file changed since patchkit wrote it).  It is kept twice: in
``<target>/.patchkit/`` and, after every write, mirrored under the user's state directory
(``write_mirror``), so that losing ``.patchkit/`` loses no proof; with both lost, patchkit's
own edits read ``someone-else`` (``applied?`` offline), never ``upstream``, until adopted.
Each engine's entry also records the version of the tree patchkit last wrote against
(``version``; absent in journals written before it was kept), so that a file pip replaced
since reads as an upgrade from that version (patchkit/core/judge.py: _stale_record).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

FORMAT = 1
PATH = "journal.json"  # inside <target>/.patchkit/
BLOBS = "written"  # <target>/.patchkit/written/<sha256>: the bytes patchkit last wrote per file


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Journal:
    """What patchkit wrote into one target root.  Changed in memory; ``render`` gives the
    bytes the transaction writes (patchkit/core/transaction.py), with the files, as one set."""

    def __init__(self, root: Path, engines: dict | None = None) -> None:
        self.root = root
        self.dir = root / ".patchkit"
        self.path = self.dir / PATH
        self.engines: dict = engines or {}
        self.wheels = _wheel_provenance(root)
        self.blobs: dict[str, bytes] = {}  # sha -> bytes to store with the next write
        self.loaded: bytes | None = None  # the journal file's bytes when read
        self.damaged = ""  # why the journal file was unreadable (then read as empty)

    @classmethod
    def load(cls, root: Path) -> "Journal":
        j = cls(root)
        try:
            j.loaded = j.path.read_bytes() if j.path.is_file() else None
        except OSError as e:
            j.loaded, j.damaged = None, f"{j.path} cannot be read ({e.strerror})"
        if j.loaded is not None:
            j.engines, why = parse(j.loaded)
            if why:
                j.damaged = f"{j.path} is damaged ({why})"
        return j

    def copy(self) -> "Journal":
        """A journal to change without changing this one (the transaction computes the
        journal a write leaves on a copy: the Session the stages read stays as loaded)."""
        j = Journal.__new__(Journal)
        j.__dict__.update(self.__dict__)
        j.engines, j.blobs = copy.deepcopy(self.engines), dict(self.blobs)
        return j

    def _eng(self, engine: str) -> dict:
        return self.engines.setdefault(engine, {"applied": {}, "files": {}})

    # the release written against ----------------------------------------------------------
    def version(self, engine: str) -> str | None:
        """The engine's version when patchkit last wrote into it (None: never, or a journal
        written before patchkit recorded it)."""
        v = self.engines.get(engine, {}).get("version")
        return v if isinstance(v, str) else None

    def wrote_against(self, engine: str, version: str | None) -> None:
        """Record the version of the tree a write is made against (an upgrade since then is
        told apart from a hand edit: patchkit/core/judge.py)."""
        if version:
            self._eng(engine)["version"] = version

    # provenance ---------------------------------------------------------------------------
    def applied_ops(self, engine: str, recipe: str) -> set[int]:
        """Ops patchkit wrote: by an apply here, or into the patched wheel installed here."""
        mine = set(self.engines.get(engine, {}).get("applied", {}).get(recipe, {}).get("ops", []))
        return mine | self.by_wheel(engine, recipe)

    def by_wheel(self, engine: str, recipe: str) -> set[int]:
        """Ops written into the patched wheel installed here (immutable once installed)."""
        return self.wheels.get((engine, recipe), set())

    def mark_applied(self, engine: str, recipe: str, recipe_sha: str, op: int, file: str = "", site: str = "") -> None:
        """Record that patchkit wrote this op; ``site``: the digest of the code it left at the
        op's site in ``file`` (patchkit/core/proof.py), the proof a later reader checks."""
        entry = self._eng(engine)["applied"].setdefault(recipe, {"sha256": recipe_sha, "ops": []})
        entry["sha256"] = recipe_sha
        if op not in entry["ops"]:
            entry["ops"] = sorted([*entry["ops"], op])
        if site:
            entry.setdefault("sites", {})[str(op)] = {"file": file, "digest": site}

    def mark_reverted(self, engine: str, recipe: str, op: int) -> None:
        applied = self._eng(engine)["applied"]
        entry = applied.get(recipe)
        if entry:
            entry["ops"] = [i for i in entry["ops"] if i != op]
            entry.get("sites", {}).pop(str(op), None)
            if not entry["ops"]:
                del applied[recipe]

    def site(self, engine: str, recipe: str, op: int) -> dict | None:
        """{"file", "digest"}: what patchkit recorded it left at this op's site, or None."""
        return _site(self.engines, engine, recipe, op)

    # file guard ---------------------------------------------------------------------------
    def written(self, engine: str, logical: str) -> dict | None:
        return self.engines.get(engine, {}).get("files", {}).get(logical)

    def record_write(self, engine: str, logical: str, old: bytes, new: bytes) -> None:
        files = self._eng(engine)["files"]
        entry = files.get(logical)
        pristine = entry["pristine"] if entry else sha256(old)
        files[logical] = {"sha256": sha256(new), "pristine": pristine}
        self.blobs[sha256(new)] = new

    def forget_file(self, engine: str, logical: str) -> None:
        """Drop the record of a file the code shows patchkit's write no longer holds for."""
        self.engines.get(engine, {}).get("files", {}).pop(logical, None)

    def written_bytes(self, engine: str, logical: str) -> bytes | None:
        entry = self.written(engine, logical)
        if not entry:
            return None
        from patchkit.base import regular

        try:  # patchkit's own file: never through a link planted in .patchkit/written
            return regular.read_owned(self.root, f".patchkit/{BLOBS}/{entry['sha256']}")
        except (OSError, regular.NotRegular):
            return None

    def kept_blobs(self) -> set[str]:
        """Blobs some file entry still points at (the others can go)."""
        return {f["sha256"] for e in self.engines.values() for f in e.get("files", {}).values()}

    def render(self) -> bytes:
        return (json.dumps({"format": FORMAT, "engines": self.engines}, indent=1, sort_keys=True) + "\n").encode()


def parse(data: bytes) -> tuple[dict, str]:
    """(the ``engines`` of a journal's bytes, why they were refused or "").  A damaged
    journal is read as empty (its mirror, patchkit/core/proof.py, may still prove the edits
    patchkit made; without it they read ``someone-else``, never ``upstream``)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        return {}, f"not JSON: {str(e)[:80]}" if data.strip() else "empty"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return {}, f"not a patchkit journal of format {FORMAT}"
    why = shape_error(doc.get("engines"))
    return ({}, why) if why else (doc["engines"], "")


def shape_error(engines) -> str:
    """Why ``engines`` is not what ``render`` writes, or ""."""
    if not isinstance(engines, dict):
        return "engines is not a table"
    for eng, e in engines.items():
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("applied", {}), dict)
            or not isinstance(e.get("files", {}), dict)
        ):
            return f"engines.{eng} has the wrong shape"
        if not isinstance(e.get("version", ""), str):
            return f"engines.{eng}.version is not a string"
        for rid, entry in e.get("applied", {}).items():
            ops = entry.get("ops") if isinstance(entry, dict) else None
            if not isinstance(ops, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ops):
                return f"engines.{eng}.applied.{rid} has the wrong shape"
            if not isinstance(entry.get("sha256", ""), str):
                return f"engines.{eng}.applied.{rid}.sha256 is not a string"
            sites = entry.get("sites", {})
            if not isinstance(sites, dict) or not all(
                isinstance(v, dict) and all(isinstance(v.get(k), str) for k in ("file", "digest"))
                for v in sites.values()
            ):
                return f"engines.{eng}.applied.{rid}.sites has the wrong shape"
        for lf, f in e.get("files", {}).items():
            if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("sha256", "pristine")):
                return f"engines.{eng}.files.{lf} has the wrong shape"
            if "/" in f["sha256"] or "." in f["sha256"]:
                return f"engines.{eng}.files.{lf}.sha256 is not a digest"
    return ""


def _site(engines: dict, engine: str, recipe: str, op: int) -> dict | None:
    entry = engines.get(engine, {}).get("applied", {}).get(recipe, {})
    if op not in entry.get("ops", ()):
        return None
    return entry.get("sites", {}).get(str(op))


# -- the mirror -------------------------------------------------------------------------------
# The journal lives in the target, where `rm -rf .patchkit`, a `git clean -fdx` or a
# reinstall can take it.  A copy of it, keyed by the target's path, is kept in the user's
# state directory, so that one accident cannot lose the proof of patchkit's edits.  The
# mirror only ever proves an edit that is there: an op it records, whose site holds the very
# bytes it records (patchkit/core/judge.py); it never makes an absent edit read as patchkit's.


def mirror_path(root: Path) -> Path:
    from patchkit.base.paths import journal_mirror

    return journal_mirror(root)


def write_mirror(root: Path, engines: dict) -> None:
    """Best effort, after a commit: the mirror is a second copy, never the only one.  Written
    as patchkit's own file (no link followed), mode 0600."""
    from patchkit.base import fsio
    from patchkit.base.paths import state_dir

    doc = {"format": FORMAT, "root": str(Path(root).absolute()), "engines": engines}
    p = mirror_path(root)
    try:
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        fsio.write_owned(state_dir(), f"journals/{p.name}", data, mode=0o600)
        os.chmod(p.parent, 0o700)  # whatever the umask: read_mirror trusts only what nobody else can write
    except Exception:  # noqa: BLE001 - the commit is done; a copy that cannot be kept is no failure
        pass


def read_mirror(root: Path) -> bytes | None:
    """The mirror's bytes for this root, or None: when there is none, it cannot be read, or it
    is not trusted.  Trusted, as OpenSSH's StrictModes trusts a key file: a regular file (never
    through a link) of at most 4 MiB, in a directory that is no link, both owned by this user
    and writable by nobody else.  A mirror only ever proves an edit patchkit's, and so may let
    revert take it back: one someone else could plant is no proof."""
    import stat

    path = mirror_path(root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        from patchkit.base.store import strict  # the store's rule too: one test of trust

        if not all(strict(st) for st in (os.lstat(path.parent), os.fstat(fd))):
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 22:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read((1 << 22) + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def mirror_engines(root: Path, data: bytes | None) -> dict:
    """The mirrored journal's engines (``read_mirror``'s bytes) for this root: {} when there
    are none, or they are not of the right shape, or name another root."""
    if data is None:
        return {}
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(doc, dict) or doc.get("root") != str(Path(root).absolute()) or doc.get("format") != FORMAT:
        return {}
    return {} if shape_error(doc.get("engines")) else doc["engines"]


def mirrored_site(engines: dict, engine: str, recipe: str, op: int) -> dict | None:
    return _site(engines, engine, recipe, op)


def _wheel_provenance(root: Path) -> dict[tuple[str, str], set[int]]:
    """What `patchkit wheel` recorded in ``*.dist-info/patchkit.json`` of wheels installed here."""
    out: dict[tuple[str, str], set[int]] = {}
    for p in root.glob("*.dist-info/patchkit.json"):
        try:
            doc = json.loads(p.read_text())
            for r in doc.get("recipes", []):
                out.setdefault((doc["engine"], r["id"]), set()).update(r.get("ops", []))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # provenance only; a damaged file never hides code
    return out
