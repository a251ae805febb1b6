"""The verdict cache (patchkit/core/verdicts.py) for verdicts that searched the whole tree.

A relocated op's verdict depends on every file that could hold its site, not only on the
files it names.  It is cached keyed on the tree's state, and any change to a file that could
hold a candidate (a new file, an in-place rewrite, an append that keeps the directory's
mtime) must be seen.  ``judge.evaluate`` is made to fail while the cache must answer, so a hit
is proven by the answer coming back, and a miss by the evaluation running again.
"""

from __future__ import annotations

import json
import os

import pytest

from patchkit.core import judge, verdicts
from tests.conftest import mini_sglang, release_in_cache
from tests.core.test_judge import GATE_NEW, GATE_OLD, GATE_RECIPE


@pytest.fixture
def moved(tmp_path, run_cli, monkeypatch):
    """A tree whose gate moved to gate2.py::renamed_gate, and status(...) -> op verdict.
    ``status(cached=True)`` fails the test if the verdict is judged instead of read back."""
    monkeypatch.setattr(verdicts, "RACY_NS", 0)  # the tree was written a moment ago
    # The gate as released before it moved (0.5.8, in the recipe's range): the site's identity.
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    released = "_is_a = True\n_is_b = False\n\n\ndef old_gate(n):\n    return (_is_a or _is_b) and n > 0\n"
    release_in_cache(tmp_path / "cache", "sglang", "0.5.8", {"sglang/srt/gate.py": released})
    root = mini_sglang(
        tmp_path / "site",
        {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW, "sglang/srt/other.py": "X = 1\n"},
    )
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(GATE_RECIPE)
    real = judge.evaluate

    def status(cached: bool = False) -> dict:
        def refuse(*a, **k):
            raise AssertionError("judged again: the cache did not answer")

        monkeypatch.setattr(judge, "evaluate", refuse if cached else real)
        code, out, err = run_cli("--recipes", str(recipes), "status", "widen", "-t", f"sglang={root}", "--json")
        monkeypatch.setattr(judge, "evaluate", real)
        assert code in (0, 1), err
        return json.loads(out)["recipes"][0]["ops"][0]

    return root, status


def test_a_searched_verdict_is_cached_and_read_back_unchanged(moved):
    root, status = moved
    first = status()
    assert first["state"] == "moved" and first["location"] == "sglang/srt/gate2.py::renamed_gate:6"
    assert status(cached=True) == first


def test_a_new_file_holding_a_candidate_is_seen(moved):
    root, status = moved
    status()
    (root / "sglang/srt/gate3.py").write_text(GATE_NEW.replace("renamed_gate", "other_gate"))
    op = status()
    assert op["state"] == "ambiguous", op
    assert "gate3.py" in op["message"] and "gate2.py" in op["message"]


def test_an_in_place_append_to_a_file_nobody_read_is_seen(moved):
    """An append keeps the directory's mtime: only the file's own stat tells."""
    root, status = moved
    status()
    d = root / "sglang/srt"
    before = os.stat(d).st_mtime_ns
    with open(d / "other.py", "a") as fh:
        fh.write("\n\ndef third(n):\n    return (_is_a or _is_b) and n > 1\n")
    assert os.stat(d).st_mtime_ns == before
    op = status()
    assert op["state"] == "ambiguous" and "other.py" in op["message"], op


def test_the_moved_site_rewritten_in_place_is_seen(moved):
    root, status = moved
    status()
    (root / "sglang/srt/gate2.py").write_text(GATE_OLD)
    op = status()
    assert op["state"] == "missing", op


def test_a_tree_changed_within_the_racy_window_is_not_cached(moved, monkeypatch):
    root, status = moved
    monkeypatch.setattr(verdicts, "RACY_NS", 3600 * 10**9)  # every file is "just changed"
    status()
    with pytest.raises(AssertionError, match="judged again"):
        status(cached=True)


@pytest.mark.parametrize("worktree", [False, True])
def test_a_commit_in_a_checkout_or_a_worktree_changes_the_key(tmp_path, worktree):
    """A checkout's committed code is its reference (Session.head), so a commit must
    change the verdict key; a worktree (``git worktree add``, `patchkit fork`) has a .git
    file naming its own git directory, whose HEAD and the repository's refs count."""
    import subprocess
    from types import SimpleNamespace

    def git(cwd, *args):
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
        env["GIT_COMMITTER_EMAIL"] = "t@t"
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.py").write_text("A = 1\n")
    git(repo, "add", "a.py")
    git(repo, "commit", "-q", "-m", "one")
    root = repo
    if worktree:
        root = tmp_path / "wt"
        git(repo, "worktree", "add", "-q", "-b", "patched", str(root))
        assert (root / ".git").is_file()
    t = SimpleNamespace(layout="git", root=root, version="0.5.9", engine="sglang")
    before = verdicts._references({"sglang": t})
    (root / "a.py").write_text("A = 2\n")
    git(root, "commit", "-q", "-am", "two")
    assert verdicts._references({"sglang": t}) != before
