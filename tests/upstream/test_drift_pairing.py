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


# -- in a clone: `drift --to` and `pin` pair the same way --------------------------------------

PINS = """# the pins
[sglang]
index = "sglang"                      # package-index name
version = "0.5.9"
wheel = "sglang-0.5.9-py3-none-any.whl"
sha256 = "0"
rev = "v0.5.9"                        # tag matching the release

[flashinfer]
index = "flashinfer-python"
version = "0.6.3"
wheel = "flashinfer_python-0.6.3-py3-none-any.whl"
sha256 = "0"
rev = "v0.6.3"                        # commit d0886ce (flashinfer/_build_meta.py)
"""


def _in_a_clone(tmp_path, monkeypatch):
    args = _releases(tmp_path, monkeypatch)
    (tmp_path / "cwd" / "upstream_pins.toml").write_text(PINS)
    return args[:2]


def test_drift_to_in_a_clone_judges_the_flashinfer_the_release_requires(tmp_path, monkeypatch, run_cli):
    """In a clone, `drift --to sglang==0.5.10` judged 0.5.10 with the pinned FlashInfer 0.6.3,
    where `--across` (and 0.5.10 itself) takes 0.6.4: the README's upgrade flow read a
    preflight of a pair that is never installed.  The pin stands only for an engine the
    release does not pin exactly; `--to flashinfer==V` still chooses."""
    common = _in_a_clone(tmp_path, monkeypatch)
    code, out, err = run_cli(*common, "drift", "both", "--to", "sglang==0.5.10", "--json", cwd=tmp_path / "cwd")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["targets"]["flashinfer"]["root"].endswith("flashinfer-0.6.4"), doc["targets"]  # hand-made: no version
    assert "flashinfer 0.6.4: the version this sglang release requires (over the pin 0.6.3" in err, err
    code, out, err = run_cli(*common, "drift", "both", "--to", "sglang==0.5.10", "--to", "flashinfer==0.6.3",
                             "--json", cwd=tmp_path / "cwd")  # fmt: skip
    assert json.loads(out)["targets"]["flashinfer"]["root"].endswith("flashinfer-0.6.3")


def test_pin_moves_the_flashinfer_the_release_requires_with_it(tmp_path, monkeypatch, run_cli):
    """`patchkit pin sglang 0.5.10` moved SGLang alone: `sync` then made 0.5.10 beside
    FlashInfer 0.6.3, a pair 0.5.10 does not install and the preflight did not judge."""
    common = _in_a_clone(tmp_path, monkeypatch)
    pins = tmp_path / "cwd" / "upstream_pins.toml"
    code, out, err = run_cli(*common, "pin", "sglang", "0.5.10", cwd=tmp_path / "cwd")
    assert code == 0, out + err
    new = pins.read_text()
    assert 'version = "0.5.10"' in new and 'version = "0.6.4"' in new, new
    assert 'rev = "v0.6.4"                        # tag matching the release' in new  # not the old commit
    assert 'rev = "v0.5.10"                       # tag matching the release' in new
    assert "flashinfer pinned to 0.6.4 (the version sglang 0.5.10 requires)" in out, out
    assert new.startswith("# the pins\n")  # comments and layout survive
