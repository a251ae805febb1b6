"""`drift --across` pairs each release with the other engine's release it requires (its
Requires-Dist), says so in the text, the JSON and the page; `--to` overrides.  Offline:
hand-made releases in patchkit's cache, outside any project (no upstream_pins.toml)."""

from __future__ import annotations

import json

import pytest

from patchkit.upstream import drift
from tests.conftest import release_in_cache

pytestmark = pytest.mark.xdist_group("drift")

RECIPE = """
id = "both"
summary = "one list in each engine"
[engines]
sglang = ">=0"
flashinfer = ">=0"
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/x.py"
scope = "f"
[ops.locator]
contains = ['"a"']
[ops.params]
element = '"b"'
[[ops]]
kind = "list-element"
engine = "flashinfer"
file = "flashinfer/y.py"
scope = "g"
[ops.locator]
contains = ['"a"']
[ops.params]
element = '"b"'
"""

LIST = 'def f():\n    return ["a"]\n'
PENDING_G = 'def g():\n    return ["a"]\n'
DONE = 'def g():\n    return ["a", "b"]\n'  # flashinfer 0.6.4 already does it


def _releases(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    for v, fi in (("0.5.9", "0.6.3"), ("0.5.10", "0.6.4")):
        release_in_cache(cache, "sglang", v, {
            "sglang/__init__.py": "", "sglang/version.py": f'__version__ = "{v}"\n', "sglang/srt/x.py": LIST,
            f"sglang-{v}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {v}\n"
            f"Requires-Dist: flashinfer_python=={fi}\nRequires-Dist: torch==2.9.1\n",
        })  # fmt: skip
    release_in_cache(cache, "flashinfer", "0.6.3", {"flashinfer/__init__.py": "", "flashinfer/y.py": PENDING_G})
    release_in_cache(cache, "flashinfer", "0.6.4", {"flashinfer/__init__.py": "", "flashinfer/y.py": DONE})
    monkeypatch.setattr(drift, "index_versions", lambda dist, kind="wheel": ["0.5.9", "0.5.10"])
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "both.toml").write_text(RECIPE)
    (tmp_path / "cwd").mkdir()
    return ("--recipes", str(tmp_path / "recipes"), "drift", "both", "--across", "sglang==0.5.9..0.5.10", "-j", "1")


def _fi_state(doc, v):
    return next(o["state"] for o in doc["matrix"][v][0]["ops"] if o["engine"] == "flashinfer")


def test_across_pairs_each_release_with_the_flashinfer_it_requires(tmp_path, monkeypatch, run_cli):
    args = _releases(tmp_path, monkeypatch)
    code, out, err = run_cli(*args, "--json", "--html", str(tmp_path / "d.html"), cwd=tmp_path / "cwd")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["with"] == {
        "0.5.9": {"flashinfer": {"version": "0.6.3", "by": "required"}},
        "0.5.10": {"flashinfer": {"version": "0.6.4", "by": "required"}},
    }
    # judged on the flashinfer each requires: 0.6.4 holds the edit (applied? here, where a
    # hand-made release has no pristine reference to tell upstream's edit from patchkit's)
    assert (_fi_state(doc, "0.5.9"), _fi_state(doc, "0.5.10")) == ("pending", "applied?")
    page = (tmp_path / "d.html").read_text()
    assert '<th class="row">with flashinfer</th>' in page
    assert '<th data-engine="flashinfer" data-version="0.5.10" title="required">0.6.4</th>' in page
    assert "flashinfer: the release each sglang release requires" in page

    code, out, err = run_cli(*args, cwd=tmp_path / "cwd")
    lines = out.splitlines()
    assert (
        "flashinfer: the release each sglang release requires (its Requires-Dist; --to flashinfer==V to choose one)"
        in lines
    )
    assert any(line.split() == ["+flashinfer", "0.6.3", "0.6.4"] for line in lines), out


def test_to_still_overrides_the_pairing(tmp_path, monkeypatch, run_cli):
    args = _releases(tmp_path, monkeypatch)
    code, out, err = run_cli(*args, "--to", "flashinfer==0.6.3", "--json", cwd=tmp_path / "cwd")
    assert code == 0, err
    doc = json.loads(out)
    assert {v: w["flashinfer"] for v, w in doc["with"].items()} == {
        "0.5.9": {"version": "0.6.3", "by": "--to"},
        "0.5.10": {"version": "0.6.3", "by": "--to"},
    }
    assert _fi_state(doc, "0.5.10") == "pending"
    code, out, err = run_cli(*args, "--to", "flashinfer==0.6.3", cwd=tmp_path / "cwd")
    assert "flashinfer: 0.6.3 for every release (--to)" in out.splitlines()
