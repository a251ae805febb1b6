"""`sync`: pinned trees from the package index (cached, hash-checked) or from git."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import ROOT, git, git_layout

pytestmark = pytest.mark.real  # every test here syncs a release from the index


def project(tmp_path, sha=None):
    pins = tmp_path / "upstream_pins.toml"
    text = (ROOT / "upstream_pins.toml").read_text()
    if sha is not None:
        text = text.replace(
            'sha256 = "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"', f'sha256 = "{sha}"'
        )
    pins.write_text(text)
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    return pins


def test_sync_then_instant_and_offline(tmp_path, run_cli, monkeypatch):
    project(tmp_path)
    code, out, err = run_cli("sync", cwd=tmp_path)
    assert code == 0, err
    assert "sglang 0.5.9: synced into" in out and "flashinfer 0.6.3: synced into" in out
    src = json.loads((tmp_path / ".patchkit/trees/sglang/.patchkit/source.json").read_text())
    assert (
        src["sha256"] == "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"
        and src["version"] == "0.5.9"
    )
    # Offline: an unreachable index must not matter the second time.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    code, out, err = run_cli("sync", cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines() == [
        f"sglang 0.5.9: up to date in {tmp_path}/.patchkit/trees/sglang",
        f"flashinfer 0.6.3: up to date in {tmp_path}/.patchkit/trees/flashinfer",
    ]
    # And the workspace trees are what commands use without --target.
    code, out, err = run_cli("status", "max-running-requests", "--json", cwd=tmp_path)
    assert json.loads(out)["targets"]["sglang"]["root"] == str((tmp_path / ".patchkit/trees/sglang").resolve())


def test_hash_mismatch_is_refused_loudly(tmp_path, run_cli):
    project(tmp_path, sha="0" * 64)
    code, out, err = run_cli("sync", "sglang", cwd=tmp_path)
    assert code == 2
    assert (
        err.splitlines()[0] == "downloading sglang==0.5.9 from the package index (sglang-0.5.9-py3-none-any.whl) ..."
    )  # progress
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "patchkit: error: sglang-0.5.9-py3-none-any.whl: sha256 mismatch: pinned "
            + "0" * 64
            + ", downloaded 8a936c4d25fea605"
        )
    )
    assert not (tmp_path / ".patchkit/trees/sglang").exists()


def test_sync_from_a_git_mirror(tmp_path, run_cli, release_dir):
    project(tmp_path)
    mirror = git_layout("sglang", release_dir("sglang", "0.5.9"), tmp_path / "mirror")
    git(mirror, "init", "-q")
    git(mirror, "add", "-A")
    git(mirror, "commit", "-qm", "sglang 0.5.9")
    git(mirror, "tag", "v0.5.9")
    git(mirror, "commit", "-q", "--allow-empty", "-m", "later work on main")
    code, out, err = run_cli("sync", "sglang", "--from", "git", "--mirror", f"sglang={mirror}", cwd=tmp_path)
    assert code == 0, err
    tree = tmp_path / ".patchkit/trees/sglang"
    assert git(tree, "describe", "--tags").strip() == "v0.5.9"
    code, out, err = run_cli("apply", "autotune-cutlass", "--json", cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["targets"]["sglang"]["layout"] == "git"
    assert git(tree, "status", "--porcelain").strip() == "M python/sglang/srt/model_executor/model_runner.py"


def test_a_patched_workspace_is_not_replaced_silently(tmp_path, run_cli):
    project(tmp_path)
    assert run_cli("sync", "sglang", cwd=tmp_path)[0] == 0
    (tmp_path / ".patchkit/trees/sglang/.patchkit/source.json").write_text(
        json.dumps({"engine": "sglang", "source": "index", "version": "0.5.8"})
    )
    code, out, err = run_cli("sync", "sglang", cwd=tmp_path)
    assert code == 2
    assert "holds 0.5.8 from index, not sglang 0.5.9 from index" in err and "--force" in err
