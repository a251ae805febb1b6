"""Upgrade preflight on real releases from the package index: exact states per recipe and op."""

from __future__ import annotations

import json
import shutil

import pytest

from patchkit.base.errors import PatchkitError
from patchkit.upstream import drift
from tests.conftest import OLD_FLAG, ROOT

# One worker under pytest-xdist: drift unpacks releases into, and caches verdicts in, the
# shared ~/.cache/patchkit (trees/, drift/), which two processes must not fill at once.
pytestmark = pytest.mark.xdist_group("drift")

# A fixed listing of sglang releases around 0.5.11..0.5.15 (0.5.15rc0 is made up, to have a
# pre-release inside the range): the range tests read it instead of the live index, so a new
# post-release, or a yanked one, upstream changes nothing here.
LISTED = ["0.5.10", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15rc0", "0.5.15"]


OLD_GATE = (
    """
id = "gate"
summary = "the layer gate as it stood in 0.5.9-0.5.20"
[engines]
sglang = ">=0.5.9,<0.5.13"
"""
    + OLD_FLAG
)


def drift_json(run_cli, *args):
    code, out, err = run_cli("drift", *args, "--json")
    assert out.strip().startswith("{"), err
    return code, json.loads(out)


def states(doc):
    return {r["id"]: (r["state"], r["in_range"]) for r in doc["recipes"]}


def recipe(doc, rid):
    return next(r for r in doc["recipes"] if r["id"] == rid)


def ops(doc, rid):
    return [(o["engine"], o["state"], o["location"]) for o in recipe(doc, rid)["ops"]]


@pytest.mark.real
def test_sglang_0_5_13_two_recipes_already_upstream(run_cli):
    code, doc = drift_json(run_cli, "--to", "sglang==0.5.13")
    assert code == 0
    assert states(doc) == {
        "allreduce-fusion": ("pending", True),
        "autotune-cutlass": ("upstream", True),
        "max-running-requests": ("pending", True),
        "moe-backend-sm120": ("upstream", True),
    }
    assert doc["retire"] == ["autotune-cutlass", "moe-backend-sm120"]
    ((engine, state, location),) = ops(doc, "autotune-cutlass")
    assert (engine, state) == ("sglang", "upstream")
    assert location.startswith(
        "sglang/srt/model_executor/model_runner.py::ModelRunner._should_run_flashinfer_autotune:"
    )
    moe = recipe(doc, "moe-backend-sm120")["ops"][0]
    assert moe["message"] == "upstream marker matched at sglang/srt/server_args.py:3351"
    # judged with the FlashInfer 0.5.13 requires, over the pin (0.6.3), as `--across` pairs them
    assert doc["targets"]["sglang"]["version"] == "0.5.13" and doc["targets"]["flashinfer"]["version"] == "0.6.12"


@pytest.mark.real
def test_a_repeated_drift_to_is_answered_from_the_store(run_cli, monkeypatch):
    """The second `drift --to` of the same releases and recipes judges nothing: its verdicts
    come from the store `--across` keeps, and its output is the same, text and JSON."""
    from patchkit.upstream import drift as D

    first = run_cli("drift", "--to", "sglang==0.5.13")
    first_json = drift_json(run_cli, "--to", "sglang==0.5.13")

    def judged(*a, **k):
        raise AssertionError("judged again")

    monkeypatch.setattr(D, "judge_release", judged)
    assert run_cli("drift", "--to", "sglang==0.5.13")[:2] == first[:2]
    assert drift_json(run_cli, "--to", "sglang==0.5.13") == first_json


@pytest.mark.real
def test_sglang_0_5_15_variants_name_the_moved_and_renamed_places(run_cli):
    """0.5.15 moved ModelRunner._should_run_flashinfer_autotune to a module function
    should_run_flashinfer_autotune in runner/flashinfer_autotune.py, and the SM120 MoE arm
    to arg_groups/overrides.py: the recipes' variants name both places, where both read
    upstream in place (finding moved code by content: tests/core/test_moves.py,
    tests/core/test_relocate_rank.py)."""
    code, doc = drift_json(run_cli, "--to", "sglang==0.5.15")
    assert code == 0
    assert states(doc) == {
        "allreduce-fusion": ("pending", True),
        "autotune-cutlass": ("upstream", True),
        "max-running-requests": ("pending", True),
        "moe-backend-sm120": ("upstream", True),
    }
    # Both recipes name the 0.5.15 places in a variant of their own: found in place, no search.
    (at,) = recipe(doc, "autotune-cutlass")["ops"]
    where = "sglang/srt/model_executor/runner/flashinfer_autotune.py::should_run_flashinfer_autotune:"
    assert at["index"] == 3 and at["location"].startswith(where) and at["location"][len(where) :].isdigit()
    assert at["file"] == "sglang/srt/model_executor/runner/flashinfer_autotune.py" and at["message"] == ""
    moe = recipe(doc, "moe-backend-sm120")["ops"][0]
    assert moe["message"].startswith("upstream marker matched at sglang/srt/arg_groups/overrides.py:")


@pytest.mark.real
def test_sglang_0_5_20_is_judged_with_its_own_variants(run_cli):
    """0.5.20 moved ServerArgs' fields into arg_groups and rewrote communicator.py's gates on
    get_platform(): the recipes' 0.5.19+ variants name the new places, and the look-alikes of
    max_running_requests (MemoryPoolConfig) are never candidates."""
    code, doc = drift_json(run_cli, "--to", "sglang==0.5.20")
    assert code == 0
    assert states(doc) == {
        "allreduce-fusion": ("pending", True),
        "autotune-cutlass": ("upstream", True),
        "max-running-requests": ("pending", True),
        "moe-backend-sm120": ("upstream", True),
    }
    (mrr,) = recipe(doc, "max-running-requests")["ops"]
    assert mrr["index"] == 2 and mrr["location"].startswith("sglang/srt/arg_groups/fields/schedule.py::Schedule:")
    ar = recipe(doc, "allreduce-fusion")["ops"]
    # FlashInfer's half (ops 4, 5) is upstream in 0.6.18, the FlashInfer 0.5.20 requires
    assert [(o["index"], o["state"]) for o in ar] == [
        (3, "pending"),
        (4, "upstream"),
        (5, "upstream"),
        (10, "pending"),
        (11, "pending"),
        (12, "pending"),
    ]
    assert [o["location"].split("::")[0] for o in ar if o["index"] in (10, 11, 12)] == [
        "sglang/srt/layers/communicator.py",
        "sglang/srt/layers/flashinfer_comm_fusion.py",
        "sglang/srt/arg_groups/overrides.py",
    ]


@pytest.mark.real
def test_flashinfer_0_6_17_has_the_flashinfer_half_upstream(run_cli):
    code, doc = drift_json(run_cli, "allreduce-fusion", "--to", "flashinfer==0.6.17")
    assert code == 0
    assert states(doc) == {"allreduce-fusion": ("pending", True)}
    assert [(e, s) for e, s, _ in ops(doc, "allreduce-fusion")] == [
        ("sglang", "pending"),
        ("sglang", "pending"),
        ("sglang", "pending"),
        ("flashinfer", "upstream"),
        ("flashinfer", "upstream"),
        ("sglang", "pending"),  # the auto-enable condition (SGLang < 0.5.15)
    ]


@pytest.mark.real
def test_status_on_a_pristine_newer_tree_answers_like_drift(run_cli, tree):
    s, f = tree("sglang", "0.5.15", links=True), tree("flashinfer", "0.6.3", links=True)
    code, out, _ = run_cli("status", "-t", f"sglang={s}", "-t", f"flashinfer={f}", "--json")
    st = json.loads(out)
    _, dr = drift_json(run_cli, "--to", "sglang==0.5.15", "--to", "flashinfer==0.6.3")  # the pair status reads

    def strip(doc):
        return [
            (r["id"], r["state"], [(o["state"], o["location"], o["message"]) for o in r["ops"]]) for r in doc["recipes"]
        ]

    assert strip(st) == strip(dr)


def test_versions_between_keeps_the_range_and_drops_prereleases_inside_it(monkeypatch):
    monkeypatch.setattr(drift, "index_versions", lambda dist: list(LISTED))
    assert drift.versions_between("sglang", "0.5.11", "0.5.15") == LISTED[1:7] + ["0.5.15"]
    assert drift.versions_between("sglang", "0.5.12.post1", "0.5.15rc0") == LISTED[3:8]  # an end is kept
    with pytest.raises(PatchkitError, match=r"^no sglang release between 0\.5\.16 and 0\.5\.20 on the index$"):
        drift.versions_between("sglang", "0.5.16", "0.5.20")


@pytest.mark.real
def test_bisect_finds_where_states_change_with_few_evaluations(run_cli, monkeypatch):
    monkeypatch.setattr(drift, "index_versions", lambda dist: list(LISTED))
    code, out, err = run_cli("drift", "--across", "sglang==0.5.11..0.5.15", "--bisect", "--json")
    doc = json.loads(out)
    assert doc["of"] == 7  # 0.5.11, 0.5.12, 0.5.12.post1, 0.5.13, 0.5.13.post1, 0.5.14, 0.5.15
    assert doc["versions"][0] == "0.5.11" and doc["versions"][-1] == "0.5.15"
    changes = {(c["recipe"], c["op"], c["from"], c["to"], c["old"], c["new"]) for c in doc["changes"]}
    assert ("autotune-cutlass", None, "0.5.12.post1", "0.5.13", "pending", "upstream") in changes
    assert ("moe-backend-sm120", None, "0.5.12.post1", "0.5.13", "pending", "upstream") in changes
    # Per op: the autotune list moved in 0.5.14 (to BaseRunner) and in 0.5.15 (to its own module)
    # while the recipe stayed upstream; allreduce-fusion gained its _resolve_backend ops.
    ops = {(c["recipe"], c["op"], c["to"]): c["new"] for c in doc["changes"] if c["op"]}
    assert ops[("autotune-cutlass", "op #2", "0.5.14")] == (
        "upstream at sglang/srt/model_executor/runner/base_runner.py::BaseRunner._should_run_flashinfer_autotune"
    )
    assert ops[("autotune-cutlass", "op #3", "0.5.15")] == (
        "upstream at sglang/srt/model_executor/runner/flashinfer_autotune.py::should_run_flashinfer_autotune"
    )
    assert ops[("allreduce-fusion", "op #8", "0.5.14")] == (
        "pending at sglang/srt/layers/flashinfer_comm_fusion.py::_resolve_backend"
    )


@pytest.mark.real
def test_bisect_skips_releases_where_nothing_changes(run_cli, monkeypatch):
    later = ["0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18"]
    monkeypatch.setattr(drift, "index_versions", lambda dist: list(later))
    # one FlashInfer for all (--to overrides the pairing with each release's required one,
    # whose own changes would be changes here)
    code, out, err = run_cli(
        "drift", "--across", "sglang==0.5.15..0.5.18", "--bisect", "--to", "flashinfer==0.6.3", "--json"
    )
    doc = json.loads(out)
    assert doc["of"] == 5 and doc["evaluated"] == 2, doc["versions"]  # both ends agree on every op
    assert doc["changes"] == []


@pytest.mark.real
def test_pin_moves_only_its_lines_after_preflight(run_cli, tmp_path):
    """Its lines, and those of the FlashInfer the release requires (0.5.12.post1: 0.6.11.post1),
    which the preflight judged it with: `sync` then makes the pair the release installs."""
    pins = tmp_path / "upstream_pins.toml"
    shutil.copy(ROOT / "upstream_pins.toml", pins)
    original = pins.read_text()
    code, out, err = run_cli("--pins", str(pins), "--recipes", str(ROOT / "recipes"), "pin", "sglang", "0.5.12.post1")
    assert code == 0, out + err
    assert "flashinfer pinned to 0.6.11.post1 (the version sglang 0.5.12.post1 requires)" in out
    new = pins.read_text()
    assert len(original.splitlines()) == len(new.splitlines())
    changed = [(a, b) for a, b in zip(original.splitlines(), new.splitlines(), strict=True) if a != b]
    assert [a.split("=")[0].strip() for a, _ in changed] == ["version", "wheel", "sha256", "rev"] * 2
    assert 'version = "0.5.12.post1"' in new and 'version = "0.6.11.post1"' in new
    # the comment keeps its column; FlashInfer's named the old commit, and now says what rev is
    assert 'rev = "v0.5.12.post1"                 # tag matching the release' in new
    assert 'rev = "v0.6.11.post1"                 # tag matching the release' in new
    assert "# The upstream releases" in new  # comments survive
    # A release where a recipe goes missing is refused, and the file is left alone (0.5.22
    # judged with recipes written before communicator.py went away).
    old = tmp_path / "old-recipes"
    old.mkdir()
    (old / "gate.toml").write_text(OLD_GATE)
    code, out, err = run_cli("--pins", str(pins), "--recipes", str(old), "pin", "sglang", "0.5.22")
    assert code == 1
    assert "pin not moved" in err
    assert pins.read_text() == new


def test_progress_is_shown_on_a_terminal_only(monkeypatch, capsys):
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    tick = drift._progress(3)
    assert [tick(v) for v in "abc"] == ["a", "b", "c"]  # results pass through
    assert term.getvalue() == "\r1/3 releases judged\r2/3 releases judged\r3/3 releases judged\n"
    pipe = io.StringIO()  # a log or a pipe: nothing
    monkeypatch.setattr(sys, "stderr", pipe)
    tick = drift._progress(3)
    [tick(v) for v in "abc"]
    assert pipe.getvalue() == ""
