"""Upstream releases from the package index: download with pip (cached, hash-checked) and
unpack into a tree.  The cache is ``~/.cache/patchkit`` (``PATCHKIT_CACHE`` moves it); a
wheel in the cache is reused without touching the network."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Optional

from patchkit.errors import FetchError
from patchkit.paths import cache_dir  # noqa: F401  (re-exported: fetch.cache_dir is the public name)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(dist: str, version: str, sha256: str = "", say: Callable[[str], None] = lambda s: None) -> Path:
    """The release wheel of ``dist==version``, from the cache or the index."""
    d = cache_dir() / "wheels" / dist.replace("_", "-").lower() / version
    cached = sorted(d.glob("*.whl")) if d.is_dir() else []
    for w in cached:
        if not sha256 or file_sha256(w) == sha256:
            return w
    d.mkdir(parents=True, exist_ok=True)
    say(f"downloading {dist}=={version} from the package index (pip, no dependencies) ...")
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--progress-bar",
            "on",
            f"{dist}=={version}",
            "-d",
            tmp,
        ]
        # pip draws its own progress bar on the terminal; its output goes to our stderr
        # (never stdout, which may be carrying --json).
        try:
            err = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            err = subprocess.DEVNULL  # e.g. under a test runner that captured stderr in memory
        proc = subprocess.run(cmd, stdout=err, stderr=err)
        got = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not got:
            raise FetchError(
                f"pip could not download {dist}=={version} (exit {proc.returncode})",
                "check the version exists (`pip index versions " + dist + "`) and that the package index is reachable",
            )
        whl = got[0]
        actual = file_sha256(whl)
        if sha256 and actual != sha256:
            raise FetchError(
                f"{whl.name}: sha256 mismatch: pinned {sha256}, downloaded {actual}; refusing to use it",
                "the index served a different artifact than the pin records; investigate before updating the pin",
            )
        dest = d / whl.name
        os.replace(whl, dest)
    say(f"cached {dest}")
    return dest


def unpack(wheel: Path, dest: Path, source: dict) -> None:
    """Unpack a wheel into ``dest`` (atomically: a temp dir beside it, then a rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
        (tmp / ".patchkit").mkdir(exist_ok=True)
        (tmp / ".patchkit" / ".gitignore").write_text("*\n")
        (tmp / ".patchkit" / "source.json").write_text(json.dumps(source, indent=1, sort_keys=True) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def tree_source(dest: Path) -> Optional[dict]:
    p = dest / ".patchkit" / "source.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None
