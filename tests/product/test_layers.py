"""Imports point one way: cli -> commands -> features -> core -> base, with no circles.

The contract is import-linter's (pyproject.toml [tool.importlinter], run by `make lint`); it
counts imports inside functions too.  These tests run it here as well, so that CI holds it,
show that it fires on a planted upward import, and that no module escapes it: every module
of patchkit sits in a package or module the contract names."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, capture_output=True, text=True)


def _layers() -> list[str]:
    (contract,) = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return [m.strip() for layer in contract["layers"] for m in layer.split("|")]


def test_the_layer_contract_is_kept():
    got = _lint(ROOT)
    assert got.returncode == 0, got.stdout + got.stderr


def test_the_contract_fires_on_an_upward_import(tmp_path):
    shutil.copytree(ROOT / "patchkit", tmp_path / "patchkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    errors = tmp_path / "patchkit" / "base" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _up():\n    from patchkit.core import judge  # noqa\n")
    got = _lint(tmp_path)
    assert got.returncode == 1
    assert "patchkit.base.errors -> patchkit.core.judge" in got.stdout


def test_every_module_is_in_a_layer():
    layers = _layers()
    top = sorted(
        f"patchkit.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "patchkit").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    )
    assert [m for m in top if m not in layers] == []
