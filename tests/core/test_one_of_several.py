"""An op whose pattern stands several times in its named scope, end to end, offline: the
place the site's identity singles out (judge._singled_out: the threshold and margin a move
is decided by, a tie in one scope broken by aligning the home scope's statements) reads
pending there, apply edits it alone, status then reads applied there, a lost journal still
applied (the pristine release holds the pattern at that place), revert restores the bytes;
upstream's own edit of that place reads upstream.  Where identity does not single one out,
the op stays ambiguous and apply refuses.

The scope is SGLang's ``_set_default_nsa_backends`` in miniature: written for 0.5.9 (one
``"trtllm"``, the bf16 branch's decode default), judged on a release that added an fp8 branch
with two more above it (as 0.5.12 did, server_args.py:1724/1726/1739)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import mini_sglang, release_in_cache

FILE = "sglang/srt/server_args.py"
RECIPE = f"""
id = "nsa"
summary = "NSA decode backend trtllm -> flashinfer"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "{FILE}"
scope = "ServerArgs._set_default_nsa_backends"
[ops.locator]
match = '"trtllm"'
[ops.params]
with = '"flashinfer"'
"""

HOME = """
class ServerArgs:
    def _set_default_nsa_backends(self, kv_cache_dtype, major):
        user_set_prefill = self.nsa_prefill_backend is not None
        user_set_decode = self.nsa_decode_backend is not None

        if kv_cache_dtype == "fp8_e4m3":
            if not user_set_prefill:
                self.nsa_prefill_backend = "flashmla_auto"
            if not user_set_decode:
                self.nsa_decode_backend = "flashmla_kv"
        else:
            if major >= 10:
                if not user_set_prefill:
                    self.nsa_prefill_backend = "flashmla_sparse"
                if not user_set_decode:
                    self.nsa_decode_backend = "trtllm"
            else:
                if not user_set_prefill:
                    self.nsa_prefill_backend = "flashmla_sparse"
                if not user_set_decode:
                    self.nsa_decode_backend = "fa3"
        return self.nsa_decode_backend
"""

# 0.5.12's shape: an fp8 branch for major >= 10 above, with two "trtllm" of its own.
LATER = HOME.replace(
    """            if not user_set_prefill:
                self.nsa_prefill_backend = "flashmla_auto"
            if not user_set_decode:
                self.nsa_decode_backend = "flashmla_kv"
""",
    """            if major >= 10:
                if not user_set_prefill:
                    self.nsa_prefill_backend = "trtllm"
                if not user_set_decode:
                    self.nsa_decode_backend = "trtllm"
            else:
                if not user_set_prefill:
                    self.nsa_prefill_backend = "flashmla_kv"
                if not user_set_decode:
                    self.nsa_decode_backend = "flashmla_kv"
""",
)
AT = LATER.rindex('self.nsa_decode_backend = "trtllm"')  # the bf16 branch's, the last
DONE = LATER[:AT] + LATER[AT:].replace('"trtllm"', '"flashinfer"', 1)
LINE = 1 + LATER[:AT].count("\n")


def _world(tmp_path, run_cli, monkeypatch, now: str, released: str | None = None):
    """A 0.5.12 tree holding ``now``; the 0.5.9 release (the identity's home) and the 0.5.12
    release (holding ``released``, default ``now``) in patchkit's cache."""
    root = mini_sglang(tmp_path / "site", {FILE: now, "sglang/version.py": '__version__ = "0.5.12"\n'})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "nsa.toml").write_text(RECIPE)
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    release_in_cache(cache, "sglang", "0.5.9", {"sglang/__init__.py": "", FILE: HOME})
    release_in_cache(cache, "sglang", "0.5.12", {"sglang/__init__.py": "", FILE: released or now})

    def cli(*args):
        return run_cli("--recipes", str(tmp_path / "recipes"), *args, "-t", f"sglang={root}")

    def op(*args):
        code, out, _ = cli(*args, "--json")
        return code, json.loads(out)["recipes"][0]["ops"][0]

    return root, cli, op


def test_the_place_identity_singles_out_is_pending_applied_alone_and_reverted(tmp_path, run_cli, monkeypatch):
    root, cli, op = _world(tmp_path, run_cli, monkeypatch, LATER)
    path = root / FILE
    code, o = op("status", "nsa")
    assert (code, o["state"]) == (1, "pending"), o
    assert o["location"].endswith(f":{LINE}"), o
    assert "3 places" in o["message"] and "the others" in o["message"], o
    code, out, err = cli("apply", "nsa")
    assert code == 0, (out, err)
    assert path.read_text() == DONE  # that place alone: the fp8 branch's two stay
    code, o = op("status", "nsa")
    assert (code, o["state"], o["location"].rsplit(":", 1)[-1]) == (0, "applied", str(LINE)), o
    # With the journal lost, the pristine release decides who made it, at the same place.
    shutil.move(root / ".patchkit", tmp_path / "journal")
    code, o = op("status", "nsa")
    assert (code, o["state"]) == (0, "applied"), o
    shutil.move(tmp_path / "journal", root / ".patchkit")
    code, out, err = cli("revert", "nsa")
    assert code == 0, (out, err)
    assert path.read_text() == LATER


def test_upstream_made_the_edit_at_that_place(tmp_path, run_cli, monkeypatch):
    """The release itself holds the replacement at the identified place (the fp8 branch's
    two `"trtllm"` still there): upstream, never "patchkit's edit"."""
    _, _, op = _world(tmp_path, run_cli, monkeypatch, DONE)
    code, o = op("status", "nsa")
    assert (code, o["state"]) == (0, "upstream"), o
    assert o["location"].endswith(f":{LINE}"), o


def test_upstream_at_that_place_in_a_file_changed_elsewhere(tmp_path, run_cli, monkeypatch):
    """The file is not the release's byte for byte (a user's line elsewhere): the release is
    read at the identified place, by the op bound to it."""
    _, _, op = _world(tmp_path, run_cli, monkeypatch, DONE + "\nLOCAL = 1\n", released=DONE)
    code, o = op("status", "nsa")
    assert (code, o["state"]) == (0, "upstream"), o


def test_the_same_edit_by_hand_reads_someone_elses_not_upstream(tmp_path, run_cli, monkeypatch):
    """Made by someone (no journal) where the release has the pattern: the release does not
    have it there, so it is not upstream's; nothing proves it patchkit's either."""
    _, _, op = _world(tmp_path, run_cli, monkeypatch, DONE, released=LATER)
    code, o = op("status", "nsa")
    assert (code, o["state"]) == (0, "someone-else"), o


# Where identity does not single one out, the op stays ambiguous (and apply writes nothing).
TWINS = HOME.replace(  # two places on the site's own line: no context tells them apart
    'self.nsa_decode_backend = "trtllm"', 'self.nsa_decode_backend = "trtllm" if major == 10 else "trtllm"'
)
UNRELATED = HOME.replace(  # the site is gone; two unrelated "trtllm" are left
    """                if not user_set_decode:
                    self.nsa_decode_backend = "trtllm"
""",
    """                if not user_set_decode:
                    self.nsa_decode_backend = "fa3"
""",
).replace(
    "        return self.nsa_decode_backend",
    """        supported = ["trtllm", "fa3"]
        logger.info("known: %s", "trtllm")
        return self.nsa_decode_backend""",
)


@pytest.mark.parametrize("now", [TWINS, UNRELATED], ids=["twins", "unrelated"])
def test_no_place_singled_out_stays_ambiguous(tmp_path, run_cli, monkeypatch, now):
    root, cli, op = _world(tmp_path, run_cli, monkeypatch, now)
    code, o = op("status", "nsa")
    assert o["state"] == "ambiguous", o
    code, out, err = cli("apply", "nsa")
    assert code != 0 and (root / FILE).read_text() == now, (out, err)


PREFILL = """
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "sglang/srt/server_args.py"
scope = "ServerArgs._set_default_nsa_backends"
[ops.locator]
match = '"flashmla_sparse"'
count = 2
[ops.params]
with = '"flashinfer"'
"""


def test_a_sibling_writing_the_same_replacement_is_told_apart_after_apply(tmp_path, run_cli, monkeypatch):
    """The guide's recipe: another op of the scope writes `"flashinfer"` too.  After apply,
    that op's done sites are told by the release with this op's edit made at its one place
    (judge._siblings_bound), so both read applied and revert restores the bytes."""
    root, cli, _ = _world(tmp_path, run_cli, monkeypatch, LATER)
    (tmp_path / "recipes" / "nsa.toml").write_text(RECIPE + PREFILL)
    code, out, err = cli("apply", "nsa")
    assert code == 0, (out, err)
    assert (root / FILE).read_text() == DONE.replace('"flashmla_sparse"', '"flashinfer"')
    code, out, _ = cli("status", "nsa", "--json")
    assert [o["state"] for o in json.loads(out)["recipes"][0]["ops"]] == ["applied", "applied"], out
    code, out, err = cli("revert", "nsa")
    assert code == 0 and (root / FILE).read_text() == LATER, (out, err)


@pytest.mark.real
def test_on_sglang_0_5_12_apply_edits_the_bf16_default_alone_and_reverts(tmp_path, run_cli):
    """The corpus recipe (GLM-5 guide, patch 3, with patch 2's prefill op) on the real 0.5.12:
    of the three `"trtllm"` of `_set_default_nsa_backends` (1724, 1726, 1739) apply edits 1739
    alone, status then reads both ops applied, revert restores the release's bytes."""
    from patchkit.upstream import drift
    from tests.conftest import ROOT, copy_linked

    tree = copy_linked(drift.release_tree("sglang", "0.5.12"), tmp_path / "sglang")
    path = tree / FILE
    before = path.read_text()
    args = ("--recipes", str(ROOT / "tests" / "corpus" / "recipes"))
    target = ("-t", f"sglang={tree}")
    code, out, err = run_cli(*args, "apply", "corpus-glm5guide-nsa-backends", *target)
    assert code == 0, (out, err)
    changed = [
        i for i, (a, b) in enumerate(zip(before.splitlines(), path.read_text().splitlines(), strict=True), 1) if a != b
    ]
    assert changed == [1737, 1739, 1743], changed  # the two prefill defaults of op #1, and 1739
    assert path.read_text().splitlines()[1738].strip() == 'self.nsa_decode_backend = "flashinfer"'
    code, out, _ = run_cli(*args, "status", "corpus-glm5guide-nsa-backends", *target, "--json")
    assert [o["state"] for o in json.loads(out)["recipes"][0]["ops"]] == ["applied", "applied"], out
    code, out, err = run_cli(*args, "revert", "corpus-glm5guide-nsa-backends", *target)
    assert code == 0 and path.read_text() == before, (out, err)


# 0.5.17's shape (arg_groups/overrides.py::_dsa_split_backend_resolution): the bf16 branch's
# `if major >= 10:` / `else:` folded into one conditional expression, in the else of the
# fp8 test, whose own arm holds another "trtllm" (folds.py).
OVERRIDES = "sglang/srt/arg_groups/overrides.py"
FOLDED = """
def _dsa_split_backend_resolution(view, kv_cache_dtype, major):
    declared = {}
    user_set_prefill = view.dsa_prefill_backend is not None
    user_set_decode = view.dsa_decode_backend is not None
    if view.is_hip:
        declared["dsa_decode_backend"] = "triton"
    elif kv_cache_dtype == "fp8_e4m3":
        default = "trtllm" if major >= 10 else "flashmla_kv"
        if not user_set_prefill:
            declared["dsa_prefill_backend"] = default
        if not user_set_decode:
            declared["dsa_decode_backend"] = default
    else:
        if not user_set_prefill:
            declared["dsa_prefill_backend"] = "flashmla_sparse"
        if not user_set_decode:
            declared["dsa_decode_backend"] = "trtllm" if major >= 10 else "fa3"
    return declared
"""
FOLDED_LINE = 1 + FOLDED[: FOLDED.index('"trtllm" if major >= 10 else "fa3"')].count("\n")


def test_a_folded_site_reads_moved_and_its_port_applies_there_alone(tmp_path, run_cli, monkeypatch):
    """Offline, the 0.5.20 refactor in miniature: the op reads moved to the folded statement
    (never to the fp8 arm's default); `port` retargets it with that place's identity, whose
    arms tell the two "trtllm" of the new scope apart: apply edits the folded statement's true
    arm alone, status reads applied, revert restores the bytes."""
    files = {FILE: "class ServerArgs:\n    pass\n", OVERRIDES: FOLDED, "sglang/version.py": '__version__ = "0.5.20"\n'}
    root = mini_sglang(tmp_path / "site", files)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "nsa.toml").write_text(RECIPE)
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    release_in_cache(cache, "sglang", "0.5.9", {"sglang/__init__.py": "", FILE: HOME})
    release_in_cache(cache, "sglang", "0.5.20", {"sglang/__init__.py": "", **files})
    recipes = ("--recipes", str(tmp_path / "recipes"))
    target = ("-t", f"sglang={root}")
    code, out, _ = run_cli(*recipes, "status", "nsa", *target, "--json")
    o = json.loads(out)["recipes"][0]["ops"][0]
    assert o["state"] == "moved" and o["location"] == f"{OVERRIDES}::_dsa_split_backend_resolution:{FOLDED_LINE}", o
    assert "folded `if major >= 10`" in o["message"], o
    code, out, err = run_cli(*recipes, "port", "nsa", "--to", f"sglang={root}", "--write")
    assert code == 0, (out, err)
    assert "arms = [" in (tmp_path / "recipes" / "nsa.toml").read_text()
    code, out, err = run_cli(*recipes, "apply", "nsa", *target)
    assert code == 0, (out, err)
    path = root / OVERRIDES
    assert path.read_text() == FOLDED.replace(
        '"trtllm" if major >= 10 else "fa3"', '"flashinfer" if major >= 10 else "fa3"'
    )
    code, out, _ = run_cli(*recipes, "status", "nsa", *target, "--json")
    states = [(o["state"], o["location"]) for o in json.loads(out)["recipes"][0]["ops"]]
    assert ("applied", f"{OVERRIDES}::_dsa_split_backend_resolution:{FOLDED_LINE}") in states, out
    code, out, err = run_cli(*recipes, "revert", "nsa", *target)
    assert code == 0 and path.read_text() == FOLDED, (out, err)
