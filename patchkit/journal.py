"""The journal: which ops patchkit itself wrote into a target, and the bytes it left.

State comes from the code (ops locate their sites in the files as they are now).  The
journal only answers what the code cannot: *who* wrote an edit that is present (patchkit:
"applied", or upstream: "upstream"), and whether a file changed after patchkit wrote it
(so revert never overwrites the user's own edits).  Deleting it loses no patch.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FORMAT = 1
PATH = "journal.json"  # inside <target>/.patchkit/
BLOBS = "written"  # <target>/.patchkit/written/<sha256>: the bytes patchkit last wrote per file


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Journal:
    """What patchkit wrote into one target root.  Changed in memory; ``render`` gives the
    bytes the transaction writes (patchkit/transaction.py), with the files, as one set."""

    def __init__(self, root: Path, engines: dict | None = None) -> None:
        self.root = root
        self.dir = root / ".patchkit"
        self.path = self.dir / PATH
        self.engines: dict = engines or {}
        self.wheels = _wheel_provenance(root)
        self.blobs: dict[str, bytes] = {}  # sha -> bytes to store with the next write
        self.loaded: bytes | None = None  # the journal file's bytes when read

    @classmethod
    def load(cls, root: Path) -> "Journal":
        j = cls(root)
        j.loaded = j.path.read_bytes() if j.path.is_file() else None
        j.engines = parse(j.loaded) if j.loaded is not None else {}
        return j

    def _eng(self, engine: str) -> dict:
        return self.engines.setdefault(engine, {"applied": {}, "files": {}})

    # provenance ---------------------------------------------------------------------------
    def applied_ops(self, engine: str, recipe: str) -> set[int]:
        """Ops patchkit wrote: by an apply here, or into the patched wheel installed here."""
        mine = set(self.engines.get(engine, {}).get("applied", {}).get(recipe, {}).get("ops", []))
        return mine | self.wheels.get((engine, recipe), set())

    def mark_applied(self, engine: str, recipe: str, recipe_sha: str, op: int) -> None:
        entry = self._eng(engine)["applied"].setdefault(recipe, {"sha256": recipe_sha, "ops": []})
        entry["sha256"] = recipe_sha
        if op not in entry["ops"]:
            entry["ops"] = sorted([*entry["ops"], op])

    def mark_reverted(self, engine: str, recipe: str, op: int) -> None:
        applied = self._eng(engine)["applied"]
        entry = applied.get(recipe)
        if entry:
            entry["ops"] = [i for i in entry["ops"] if i != op]
            if not entry["ops"]:
                del applied[recipe]

    # file guard ---------------------------------------------------------------------------
    def written(self, engine: str, logical: str) -> dict | None:
        return self.engines.get(engine, {}).get("files", {}).get(logical)

    def record_write(self, engine: str, logical: str, old: bytes, new: bytes) -> None:
        files = self._eng(engine)["files"]
        entry = files.get(logical)
        pristine = entry["pristine"] if entry else sha256(old)
        files[logical] = {"sha256": sha256(new), "pristine": pristine}
        self.blobs[sha256(new)] = new

    def written_bytes(self, engine: str, logical: str) -> bytes | None:
        entry = self.written(engine, logical)
        if not entry:
            return None
        p = self.dir / BLOBS / entry["sha256"]
        return p.read_bytes() if p.is_file() else None

    def kept_blobs(self) -> set[str]:
        """Blobs some file entry still points at (the others can go)."""
        return {f["sha256"] for e in self.engines.values() for f in e.get("files", {}).values()}

    def render(self) -> bytes:
        return (json.dumps({"format": FORMAT, "engines": self.engines}, indent=1, sort_keys=True) + "\n").encode()


def parse(data: bytes) -> dict:
    """The ``engines`` of a journal's bytes; a corrupt one is read as empty (it loses
    provenance only, never a patch)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("engines"), dict):
        return {}
    return doc["engines"]


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
