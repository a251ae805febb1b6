"""More of issue 32's rough edges, each held by a test that failed on the code before it:
the activated venv as the default target, doctor's exit code, progress off a terminal."""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

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


# -- doctor's exit code: the venv's alone ----------------------------------------------------


def _doctor_facts(name: str) -> dict:
    return json.loads((ROOT / "tests" / "fixtures" / name).read_text())["facts"]


def _beside_a_project(facts: dict) -> dict:
    """The same venv's facts as doctor collects them inside a checkout whose pins differ,
    whose workspace trees are patched, and whose patchkit.toml wants the whole sm120 bundle."""
    facts = copy.deepcopy(facts)
    facts["pins"] = {"sglang": "0.5.23", "flashinfer": "0.7.4"}
    ids = facts["bundles"]["sm120"]
    for engine in ("sglang", "flashinfer"):
        facts["workspace"][engine] = {
            "root": f"/src/proj/.patchkit/trees/{engine}",
            "recipes": dict.fromkeys(ids, "applied"),
        }
    facts["profile"] = {"path": "/src/proj/patchkit.toml", "bundles": ["sm120"], "wanted": ids, "own": False}
    return facts


@pytest.mark.parametrize("name", ["doctor_h200.json", "doctor_h200_patched.json"])
def test_doctors_exit_code_is_the_venvs_alone(name):
    from patchkit.fleet import doctor as D

    alone = _doctor_facts(name)
    beside = _beside_a_project(alone)
    found = D.judge(beside)
    assert D.exit_code(found) == D.exit_code(D.judge(alone))
    said = [f.message for f in found if f.project]  # still said, as the project's
    assert any("this directory's pin is 0.5.23" in m for m in said), said
    assert any("the workspace tree /src/proj/.patchkit/trees/" in m for m in said), said
    if D.exit_code(found) == 0:
        assert D.summary(found).startswith("nothing wrong found in the venv; this directory's project differs")


def test_an_unpatched_venv_without_a_profile_is_told_so():
    from patchkit.fleet import doctor as D

    found = D.judge(_doctor_facts("doctor_h200.json"))
    assert any(
        f.topic == "profile"
        and "have no profile of their own, so nothing says what they should carry" in f.message
        and "--save" in f.message
        for f in found
    )


# -- progress off a terminal -----------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_long_work_says_so_every_interval_off_a_terminal_only(monkeypatch):
    from patchkit.base import progress

    monkeypatch.setattr(progress, "EVERY", 0.05)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with progress.working("downloading x.whl", lambda: "1.0 of 2.0 MB"):
        time.sleep(0.4)
    lines = log.getvalue().splitlines()
    assert len(lines) >= 3, lines
    assert all(re.fullmatch(r"patchkit: still downloading x\.whl, 1\.0 of 2\.0 MB \(\d+ s\)", x) for x in lines), lines
    time.sleep(0.15)
    assert log.getvalue().splitlines() == lines  # nothing after the work ended
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    with progress.working("downloading x.whl"):
        time.sleep(0.2)
    assert tty.getvalue() == ""  # a terminal shows the work's own progress instead


def test_a_slow_download_into_a_log_is_never_silent(monkeypatch, tmp_path):
    """fetch's download, off a terminal: lines that say how far it got (the network is a
    stand-in that sends 64 KiB every 20 ms)."""
    from patchkit.base import progress
    from patchkit.upstream import fetch

    monkeypatch.setattr(progress, "EVERY", 0.05)
    chunks = [b"x" * (1 << 16)] * 12

    class Slow:
        headers = {"Content-Length": str(12 << 16)}

        def read(self, n):
            time.sleep(0.02)
            return chunks.pop() if chunks else b""

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(fetch, "_request", lambda url, *a, **k: Slow())
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    fetch._download("https://files.example/x-1.0-py3-none-any.whl", tmp_path / "x-1.0-py3-none-any.whl")
    lines = log.getvalue().splitlines()
    assert lines and all(
        re.fullmatch(r"patchkit: still downloading x-1\.0-py3-none-any\.whl, \d\.\d of 0\.8 MB \(\d+ s\)", x)
        for x in lines
    ), lines


# -- a host installed from patchkit's wheels can be guarded -----------------------------------


def _installed_from_wheels(site: Path, profile: dict | None) -> None:
    mini_sglang(site, {})
    for di in ("sglang-0.5.9+sm120.1a2b3c4d.dist-info", "flashinfer_python-0.6.3+sm120.5e6f7a8b.dist-info"):
        (site / di).mkdir(parents=True)
        doc = {"tool": "patchkit", "recipes": []} | ({"profile": profile} if profile else {})
        (site / di / "patchkit.json").write_text(json.dumps(doc))


def test_the_profile_a_patchkit_wheel_carries_is_the_guards(tmp_path, monkeypatch):
    from patchkit.fleet import profile as P

    monkeypatch.chdir(tmp_path)
    site = tmp_path / "site"
    _installed_from_wheels(site, {"bundles": ["sm120"], "recipes": []})
    found = P.find(None, [site])
    assert found.exists and found.wheel and (found.bundles, found.recipes, found.exclude) == (("sm120",), (), ())
    assert found.path == site / "flashinfer_python-0.6.3+sm120.5e6f7a8b.dist-info" / "patchkit.json"  # the first
    # the tree's own profile.toml (written by --save) comes first
    (site / ".patchkit").mkdir()
    (site / ".patchkit" / "profile.toml").write_text('recipes = ["autotune-cutlass"]\n')
    assert P.find(None, [site]).recipes == ("autotune-cutlass",)
    # a wheel built before the profile was carried, or another dist's patchkit.json: none
    other = tmp_path / "old"
    _installed_from_wheels(other, None)
    (other / "torch-2.9.1.dist-info").mkdir()
    (other / "torch-2.9.1.dist-info" / "patchkit.json").write_text('{"profile": {"bundles": ["x"]}}')
    assert P.wheel_profile([other]) is None and not P.find(None, [other]).exists


def test_save_on_a_wheel_profile_writes_the_trees_own_seeded_from_it(tmp_path, monkeypatch):
    from patchkit.core.project import Project
    from patchkit.fleet import profile as P

    monkeypatch.chdir(tmp_path)
    site = tmp_path / "site"
    _installed_from_wheels(site, {"bundles": ["sm120"], "recipes": []})
    before = {p: p.read_bytes() for p in site.glob("*.dist-info/patchkit.json")}
    catalog = Project.locate(None, (str(ROOT / "recipes"),), None).catalog()
    saved, changes = P.save(P.find(None, [site]), "revert", ["allreduce-fusion"], catalog)
    assert saved.path == site / ".patchkit" / "profile.toml"
    assert (saved.bundles, saved.exclude) == (("sm120",), ("allreduce-fusion",)), changes
    assert {p: p.read_bytes() for p in before} == before  # pip's files untouched
