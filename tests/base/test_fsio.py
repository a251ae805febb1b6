"""patchkit/base/fsio.py: the filesystem primitives the cache and the transaction stand on."""

from __future__ import annotations

import os

import pytest

from patchkit.base import fsio


def test_clear_entry_takes_a_tree_another_process_is_removing_too(tmp_path, monkeypatch):
    """Two processes making the same release both clear the stale tree: the files the other
    removed first are gone already, not an error."""
    tree = tmp_path / "trees" / "sglang-0.5.9"
    (tree / "pkg").mkdir(parents=True)
    for n in ("a.py", "b.py"):
        (tree / "pkg" / n).write_text("x\n")
    real = os.unlink

    def raced(path, *a, **k):
        real(path, *a, **k)  # the other process got there first ...
        real(path, *a, **k)  # ... so ours finds nothing

    monkeypatch.setattr(os, "unlink", raced)
    fsio.clear_entry(tree)
    monkeypatch.setattr(os, "unlink", real)
    assert not tree.exists()


def test_clear_entry_still_refuses_what_it_may_not_remove(tmp_path, monkeypatch):
    tree = tmp_path / "t"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_text("x\n")

    def denied(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "unlink", denied)
    with pytest.raises(PermissionError):
        fsio.clear_entry(tree)
