"""More of issue 32's rough edges, each held by a test that failed on the code before it:
the activated venv as the default target, doctor's exit code, progress off a terminal."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, mini_sglang

R = ("--recipes", str(ROOT / "recipes"))


@pytest.fixture(scope="module")
def serving_venv(tmp_path_factory):
    """A venv (no pip) whose site-packages holds a hand-made sglang 0.5.9: a serving venv
    without flashinfer, and the clone's kind of venv beside it: one without an engine."""
    root = tmp_path_factory.mktemp("venvs")
    for name in ("serve", "plain"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / name)], check=True)
    (site,) = (root / "serve").glob("lib/python*/site-packages")
    mini_sglang(site, {})
    return root


def _first_error(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("patchkit: error:"))


def test_an_activated_serving_venv_is_the_default_target(serving_venv, tmp_path, run_cli, monkeypatch):
    venv = serving_venv / "serve"
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    code, out, err = run_cli(*R, "diff", "sm120", cwd=tmp_path)
    assert code == 2
    assert err.splitlines()[0] == (
        f"patchkit: --python {venv}/bin/python: the activated venv ($VIRTUAL_ENV); -t or --python names another"
    )
    assert _first_error(err).startswith(f"patchkit: error: {venv}/bin/python does not import flashinfer"), err
    code, out, err = run_cli(*R, "apply", "sm120", "--dry-run", cwd=tmp_path)
    assert f"{venv}/bin/python does not import flashinfer" in _first_error(err), err


def test_a_named_target_or_a_venv_without_an_engine_is_not_replaced(serving_venv, tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", str(serving_venv / "plain"))  # the clone's .venv: patchkit, no engine
    code, out, err = run_cli(*R, "diff", "sm120", cwd=tmp_path)
    assert code == 2 and "activated venv" not in err and "no --target or --python" in _first_error(err), err
    monkeypatch.setenv("VIRTUAL_ENV", str(serving_venv / "serve"))
    site = tmp_path / "site"
    mini_sglang(site, {})
    code, out, err = run_cli(*R, "diff", "sm120", "-t", f"sglang={site}", cwd=tmp_path)
    assert "activated venv" not in err and str(serving_venv) not in err, err
