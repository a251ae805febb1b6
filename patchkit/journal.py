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

from patchkit.fsio import atomic_write, ensure_ignored

FORMAT = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Journal:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / ".patchkit"
        self.path = self.dir / "journal.json"
        data = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                data = {}  # a corrupt journal loses provenance only, never a patch
        self.engines: dict = data.get("engines", {}) if data.get("format") == FORMAT else {}
        self.wheels = _wheel_provenance(root)

    def _eng(self, engine: str) -> dict:
        return self.engines.setdefault(engine, {"applied": {}, "files": {}})

    # provenance ---------------------------------------------------------------------------
    def applied_ops(self, engine: str, recipe: str) -> set[int]:
        """Ops patchkit wrote: by an apply here, or into the patched wheel installed here."""
        mine = set(self.engines.get(engine, {}).get("applied", {}).get(recipe, {}).get("ops", []))
        return mine | self.wheels.get((engine, recipe), set())

    def recipe_sha(self, engine: str, recipe: str) -> str | None:
        return self.engines.get(engine, {}).get("applied", {}).get(recipe, {}).get("sha256")

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
        self._blob(new)

    def written_bytes(self, engine: str, logical: str) -> bytes | None:
        entry = self.written(engine, logical)
        if not entry:
            return None
        p = self.dir / "written" / entry["sha256"]
        return p.read_bytes() if p.is_file() else None

    def _blob(self, data: bytes) -> None:
        d = self.dir / "written"
        d.mkdir(parents=True, exist_ok=True)
        p = d / sha256(data)
        if not p.exists():
            atomic_write(p, data)

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        ensure_ignored(self.dir)
        # Drop blobs no file points at any more.
        keep = {f["sha256"] for e in self.engines.values() for f in e.get("files", {}).values()}
        blobs = self.dir / "written"
        if blobs.is_dir():
            for b in blobs.iterdir():
                if b.name not in keep:
                    b.unlink()
        atomic_write(
            self.path,
            (json.dumps({"format": FORMAT, "engines": self.engines}, indent=1, sort_keys=True) + "\n").encode(),
        )


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
