"""`patchkit cache`: sizes by kind and release, `path`, and `prune` by age and size, which
keeps pinned releases, never follows a link planted in the cache, and refuses bad input
with one line (exit 2)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

PINS = """[sglang]
index = "sglang"
version = "0.5.9"
wheel = "sglang-0.5.9-py3-none-any.whl"
sha256 = "00"
repo = "https://github.com/sgl-project/sglang.git"
rev = "v0.5.9"
"""
OLD = time.time() - 90 * 86400


def _file(p: Path, size: int, mtime: float | None = None) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * size)
    if mtime is not None:
        os.utime(p, (mtime, mtime))
        os.utime(p.parent, (mtime, mtime))
    return p


@pytest.fixture
def store(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    _file(cache / "wheels/sglang/0.5.9/sglang-0.5.9-py3-none-any.whl", 3000, OLD)  # pinned
    _file(cache / "wheels/sglang/0.5.12/sglang-0.5.12-py3-none-any.whl", 2000, OLD)
    _file(cache / "wheels/flashinfer-python/0.6.3/fi.whl", 1000)  # new
    _file(cache / "trees/sglang-0.5.12/sglang/srt/a.py", 500, OLD)
    for d in ("trees/sglang-0.5.12/sglang", "trees/sglang-0.5.12"):  # unpacked 90 days ago
        os.utime(cache / d, (OLD, OLD))
    _file(cache / "plans/old.json", 40, OLD)
    _file(cache / "plans/new.json", 60)
    outside = _file(tmp_path / "precious" / "keep.txt", 10, OLD)
    (cache / "verdicts").mkdir()
    (cache / "verdicts" / "planted").symlink_to(outside.parent)  # a link planted in the cache
    os.utime(cache / "verdicts" / "planted", (OLD, OLD), follow_symlinks=False)
    project = tmp_path / "project"
    project.mkdir()
    (project / "upstream_pins.toml").write_text(PINS)
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    return cache, project, outside


def test_show_sizes_by_kind_and_release(store, run_cli):
    cache, project, _ = store
    code, out, _ = run_cli("cache", "--json", cwd=project)
    doc = json.loads(out)
    assert code == 0 and doc["path"] == str(cache)
    assert doc["bytes"] == 3000 + 2000 + 1000 + 500 + 40 + 60
    assert doc["releases"]["sglang==0.5.12"] == {"bytes": 2500, "kinds": {"wheels": 2000, "trees": 500}}
    assert doc["releases"]["flashinfer==0.6.3"]["bytes"] == 1000
    assert doc["kinds"]["plans"] == {"bytes": 100, "entries": 2, "what": "plans, keyed by their inputs"}
    code, out, _ = run_cli("cache", cwd=project)
    assert code == 0 and "sglang==0.5.12" in out and "by kind:" in out
    code, out, _ = run_cli("cache", "path", cwd=project)
    assert (code, out.strip()) == (0, str(cache))


def test_prune_by_age_keeps_pins_and_never_follows_a_planted_link(store, run_cli):
    cache, project, outside = store
    code, out, _ = run_cli("cache", "prune", "--older-than", "30d", "--dry-run", cwd=project)
    assert code == 0 and "would remove" in out
    assert (cache / "wheels/sglang/0.5.12").is_dir()  # a dry run removes nothing
    code, out, _ = run_cli("cache", "prune", "--older-than", "30d", "--json", cwd=project)
    doc = json.loads(out)
    assert code == 0 and "sglang==0.5.9" in doc["kept"]
    assert not (cache / "wheels/sglang/0.5.12").exists() and not (cache / "trees/sglang-0.5.12").exists()
    assert not (cache / "plans/old.json").exists() and (cache / "plans/new.json").exists()
    assert (cache / "wheels/sglang/0.5.9").is_dir()  # pinned
    assert (cache / "wheels/flashinfer-python/0.6.3").is_dir()  # young
    assert not os.path.lexists(cache / "verdicts/planted")  # the link is gone ...
    assert outside.read_bytes() == b"x" * 10  # ... and what it pointed at is not


def test_prune_by_size_goes_oldest_first_and_keeps_what_is_kept(store, run_cli):
    cache, project, _ = store
    code, out, _ = run_cli("cache", "prune", "--max-size", "0", "--keep", "flashinfer==0.6.3", cwd=project)
    assert code == 0
    left = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert left == ["wheels/flashinfer-python/0.6.3/fi.whl", "wheels/sglang/0.5.9/sglang-0.5.9-py3-none-any.whl"]


@pytest.mark.parametrize(
    "args, says",
    [
        (("prune",), "say what to remove"),
        (("prune", "--older-than", "soon"), "not an age"),
        (("prune", "--max-size", "big"), "not a size"),
        (("prune", "--max-size", "1G", "--keep", "sglang"), "not ENGINE==VERSION"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(store, run_cli, args, says):
    _, project, _ = store
    code, out, err = run_cli("cache", *args, cwd=project)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_show_says_when_the_store_is_not_trusted(store, run_cli):
    cache, project, _ = store
    os.chmod(cache, 0o775)  # the group may write it: the store reads and writes no derived entry
    code, out, _ = run_cli("cache", "--json", cwd=project)
    doc = json.loads(out)
    assert code == 0 and doc["trusted"] is False and "writable by group" in doc["untrusted_why"]
    code, out, _ = run_cli("cache", cwd=project)
    assert code == 0 and "not trusted" in out
    os.chmod(cache, 0o700)
    assert json.loads(run_cli("cache", "--json", cwd=project)[1])["trusted"] is True


def test_prune_keeps_the_release_a_recipe_was_written_from(store, run_cli):
    """A recipe of the project whose range starts at 0.5.12: that release is its home (the
    judge reads the site's identity there), so prune keeps it as it keeps a pin."""
    from tests.conftest import MINIMAL_RECIPE

    cache, project, _ = store
    (project / "recipes").mkdir()
    recipe = MINIMAL_RECIPE.format(id="mine").replace('">=0.5.9"', '">=0.5.12"')
    (project / "recipes" / "mine.toml").write_text(recipe)
    code, out, _ = run_cli("cache", "prune", "--older-than", "30d", "--json", cwd=project)
    doc = json.loads(out)
    assert code == 0 and "sglang==0.5.12" in doc["kept"] and "sglang==0.5.9" in doc["kept"]
    assert (cache / "wheels/sglang/0.5.12").is_dir() and (cache / "trees/sglang-0.5.12").is_dir()
    assert not (cache / "plans/old.json").exists()
