"""Shared fixtures.  Real upstream releases come from the package index through patchkit's
own cache (``PATCHKIT_CACHE``, default ~/.cache/patchkit), unpacked once per session and
copied per test, so every test works on a pristine tree of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit import fetch
from patchkit.target import ENGINES

ROOT = Path(__file__).resolve().parents[1]
PINNED = {"sglang": "0.5.9", "flashinfer": "0.6.3"}

_unpacked: dict[tuple[str, str], Path] = {}


@pytest.fixture(scope="session")
def release_dir(tmp_path_factory):
    """release_dir(engine, version) -> a pristine unpacked wheel (shared; do not modify)."""
    base = tmp_path_factory.mktemp("releases")

    def get(engine: str, version: str) -> Path:
        key = (engine, version)
        if key not in _unpacked:
            whl = fetch.fetch_wheel(ENGINES[engine].dist, version)
            dest = base / f"{engine}-{version}"
            with zipfile.ZipFile(whl) as z:
                z.extractall(dest)
            _unpacked[key] = dest
        return _unpacked[key]

    return get


@pytest.fixture
def tree(release_dir, tmp_path):
    """tree(engine, version=pinned) -> a private copy of a real release (wheel layout)."""

    def make(engine: str, version: str | None = None, name: str | None = None) -> Path:
        src = release_dir(engine, version or PINNED[engine])
        dest = tmp_path / (name or f"{engine}-{version or PINNED[engine]}")
        shutil.copytree(src, dest, symlinks=True)
        return dest

    return make


def git_layout(engine: str, wheel_tree: Path, dest: Path) -> Path:
    """Rearrange an unpacked wheel into the upstream repository layout (python/sglang, include/...)."""
    dest.mkdir(parents=True, exist_ok=True)
    if engine == "sglang":
        shutil.copytree(wheel_tree / "sglang", dest / "python" / "sglang")
    else:
        shutil.copytree(wheel_tree / "flashinfer", dest / "flashinfer", ignore=shutil.ignore_patterns("data"))
        for sub in ("include", "csrc"):
            src = wheel_tree / "flashinfer" / "data" / sub
            if src.exists():
                shutil.copytree(src, dest / sub)
    return dest


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """run_cli(*args, cwd=None) -> (exit_code, stdout, stderr), through patchkit.cli.main."""
    from patchkit.cli import main

    def run(*args: str, cwd: Path | None = None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def recipes_dir():
    return ROOT / "recipes"


def pk(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real `patchkit` console entry (python -m patchkit) as a subprocess."""
    return subprocess.run([sys.executable, "-m", "patchkit", *args], cwd=cwd, capture_output=True, text=True)
