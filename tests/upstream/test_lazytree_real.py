"""`drift`'s sparse release trees (patchkit/upstream/lazytree.py) on real releases: the
verdicts, op by op, are those of the whole trees, on SGLang 0.5.9, 0.5.16 and 0.5.23 with
FlashInfer 0.6.3 and 0.7.4, for the sm120 bundle and for a recipe whose op names the file
of SGLang's 0.5.9-0.5.14 era (on 0.5.16 and 0.5.23 the judge must search the tree for it:
its site moved to arg_groups/overrides.py).  The sparse trees are made in a cache of their
own from the index; the whole ones are the real tier's."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from patchkit.core.recipe import Catalog
from patchkit.upstream import drift, fetch, lazytree, lazywheel

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.real

# (SGLang, FlashInfer): the releases the real tier reads already
PAIRS = [("0.5.9", "0.6.3"), ("0.5.16", "0.6.3"), ("0.5.23", "0.7.4")]
# the era's recipe where its op stands in its file, and where the judge must search (one
# search of SGLang's ~4,700 .py files is enough to show; 0.5.16 would be a second)
ERA = {"0.5.9", "0.5.23"}


def _names(sglang: str) -> tuple[str, ...]:
    return ("sm120", "moe-era-0-5-9") if sglang in ERA else ("sm120",)


def _recipes(tmp_path: Path) -> Path:
    """The repository's recipes, and the moe-backend-sm120 op of 0.5.9-0.5.14 with no `when`:
    a recipe written before its site moved."""
    d = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", d)
    text = (ROOT / "recipes" / "moe-backend-sm120.toml").read_text()
    head, _, ops = text.partition("[[ops]]")
    first = "[[ops]]" + ops.split("\n[[")[0] + "\n"  # up to the next op or variant
    first = re.sub(r"^when = .*\n", "", first, flags=re.M)
    head = head.replace('id = "moe-backend-sm120"', 'id = "moe-era-0-5-9"')
    head = head.replace('bundles = ["sm120"]', "bundles = []")
    (d / "moe-era-0-5-9.toml").write_text(head + first)
    return d


def test_drift_verdicts_from_sparse_trees_are_those_of_whole_trees(tmp_path, monkeypatch):
    catalog = Catalog.load(_recipes(tmp_path))
    whole = {
        pair: drift.judge_release(catalog, _names(pair[0]), {"sglang": drift.release_tree("sglang", pair[0]),
                                                   "flashinfer": drift.release_tree("flashinfer", pair[1])})
        for pair in PAIRS
    }  # fmt: skip
    wheels = sum(
        fetch.fetch_wheel(d, v).stat().st_size
        for pair in PAIRS
        for d, v in (("sglang", pair[0]), ("flashinfer-python", pair[1]))
    )
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(lazywheel, "STATS", {"requests": 0, "bytes": 0, "fallbacks": 0})
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.delenv("PATCHKIT_LAZY", raising=False)
    monkeypatch.setattr(lazywheel, "_WHOLE_ONLY", False)
    searched = {}
    for pair in PAIRS:
        trees = {"sglang": drift.tree("sglang", pair[0]), "flashinfer": drift.tree("flashinfer", pair[1])}
        lazy = drift.judge_release(catalog, _names(pair[0]), trees)
        assert [r.to_json() for r in lazy] == [r.to_json() for r in whole[pair]], pair
        reads = lazytree.extent(trees["sglang"])
        assert reads is not None, "not a sparse tree"
        searched[pair[0]] = reads["searched"]
        if not reads["searched"]:
            assert reads["files"] < reads["of"] / 50, reads
        assert not [p for t in trees.values() for p in t.rglob("*.so")]  # never fetched: no op reads one
    moved = {
        pair[0]: next(o["state"] for r in whole[pair] if r.id == "moe-era-0-5-9" for o in r.to_json()["ops"])
        for pair in PAIRS
        if pair[0] in ERA
    }
    # the era's op is where it names on 0.5.9; on 0.5.23 the judge searched the tree
    assert moved["0.5.9"] == "pending" and searched["0.5.9"] == []
    assert moved["0.5.23"] != "pending" and searched["0.5.23"] == ["sglang*.py"]
    assert searched["0.5.16"] == []
    assert not list(cache.glob("wheels/*/*/*.whl")) and lazywheel.STATS["fallbacks"] == 0
    # searches included (every .py of two SGLang releases), well under the wheels' bytes
    assert lazywheel.STATS["bytes"] < wheels / 3, (lazywheel.STATS, wheels)
