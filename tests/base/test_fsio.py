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


def test_clear_entry_never_touches_a_tree_put_in_its_place_meanwhile(tmp_path, monkeypatch):
    """The stale tree is renamed aside before it is emptied: a new tree another process puts
    at the same path while ours is being removed is left whole (removing by name would empty
    it, or fail on it with `Directory not empty`)."""
    tree = tmp_path / "trees" / "sglang-0.5.9"
    (tree / "pkg").mkdir(parents=True)
    for n in ("a.py", "b.py"):
        (tree / "pkg" / n).write_text("old\n")
    real = os.unlink
    placed: list[bool] = []

    def other_process_places_its_tree(path, *a, **k):
        if not placed:
            placed.append(True)
            (tree / "pkg").mkdir(parents=True)
            (tree / "pkg" / "new.py").write_text("new\n")
        real(path, *a, **k)

    monkeypatch.setattr(os, "unlink", other_process_places_its_tree)
    fsio.clear_entry(tree)
    monkeypatch.setattr(os, "unlink", real)
    assert placed and (tree / "pkg" / "new.py").read_text() == "new\n"
    assert sorted(os.listdir(tree.parent)) == ["sglang-0.5.9"]  # nothing left aside


def test_clear_entry_still_refuses_what_it_may_not_remove(tmp_path, monkeypatch):
    tree = tmp_path / "t"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_text("x\n")

    def denied(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "unlink", denied)
    with pytest.raises(PermissionError):
        fsio.clear_entry(tree)
