"""The lazy wheel reader (patchkit/upstream/lazywheel.py) on real releases, served whole or by
ranges by a package index on 127.0.0.1 (tests/rangeserver.py) from the wheels in patchkit's
cache: `status sm120` on today's trees (SGLang 0.5.23, FlashInfer 0.7.4) with an empty cache
gives the same verdicts read by ranges as read from whole wheels, for a few percent of the
bytes."""

from __future__ import annotations

import json

import pytest

from patchkit.upstream import fetch, lazywheel

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("lazywheel")]

TODAY = {"sglang": "0.5.23", "flashinfer": "0.7.4"}


@pytest.fixture(scope="module")
def real_index():
    from tests.rangeserver import RangeIndex

    wheels = {
        "sglang": [fetch.fetch_wheel("sglang", TODAY["sglang"])],
        "flashinfer-python": [fetch.fetch_wheel("flashinfer-python", TODAY["flashinfer"])],
    }
    idx = RangeIndex(wheels)
    yield idx, sum(w[0].stat().st_size for w in wheels.values())
    idx.close()


def test_status_by_ranges_is_status_on_whole_wheels(tree, run_cli, tmp_path, monkeypatch, real_index):
    idx, wheel_bytes = real_index
    sg, fi = tree("sglang", TODAY["sglang"], links=True), tree("flashinfer", TODAY["flashinfer"], links=True)
    monkeypatch.setenv("PATCHKIT_INDEX_URL", idx.url)
    monkeypatch.delenv("PATCHKIT_OFFLINE", raising=False)
    monkeypatch.setattr(lazywheel, "_SAID", set())
    monkeypatch.setattr(lazywheel, "_WHOLE_ONLY", False)  # a wheel build earlier in this worker
    got = {}
    for lazy in ("0", "1", "1"):  # whole, by ranges, then by ranges from the store
        cache = tmp_path / f"cache-{lazy}"
        cache.mkdir(exist_ok=True)
        monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
        monkeypatch.setenv("PATCHKIT_LAZY", lazy)
        for d in ("verdicts", "confirmed", "identity", "plans", "memo"):  # judged afresh each time
            for f in (cache / d).rglob("*") if (cache / d).is_dir() else ():
                if f.is_file():
                    f.unlink()
        idx.reset()
        code, out, err = run_cli("status", "sm120", "-t", f"sglang={sg}", "-t", f"flashinfer={fi}", "--json")
        assert code in (0, 1), err
        verdicts = json.loads(out)["recipes"]
        if lazy in got:  # the second lazy run: nothing from the network
            assert idx.requests == 0, (idx.paths, err)
        else:
            served = idx.bytes
            if lazy == "1":
                assert served < 0.05 * wheel_bytes, (served, wheel_bytes)
                assert not list(cache.glob("wheels/*/*/*.whl")), "a whole wheel came"
            else:
                assert served >= wheel_bytes
        got.setdefault(lazy, verdicts)
        assert verdicts == got["0"]
