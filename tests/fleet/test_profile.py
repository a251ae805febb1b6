"""Profiles (patchkit/fleet/profile.py): the state a user wants, written down once.

The real tier: "sm120 without allreduce-fusion" over real SGLang 0.5.9 / FlashInfer 0.6.3
trees, as the GLM-5 deployment needed it.  The offline tier: reading, checking and
--save-ing profiles, where they are found, and the WARNING a recipe's rationale carries.
"""

from __future__ import annotations

import copy
import json
import os
from types import SimpleNamespace

import pytest

from patchkit.base.errors import PatchkitError
from patchkit.commands.apply import warning
from patchkit.fleet import doctor as D
from patchkit.fleet import profile as P
from tests.conftest import ROOT

PROFILE = """\
# GLM-5-NVFP4 on 8x RTX PRO 6000: the sm120 bundle, less the allreduce fusion
bundles = ["sm120"]  # the bundle

exclude = ["allreduce-fusion"]  # ~3,700 -> 236 tok/s with it
"""
SM120_GPU = [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "capability": "12.0"}]


def _recipes(out: str) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(out)["recipes"]}


def _asks_to_apply(findings, rid: str) -> list[str]:
    return [f.message for f in findings if rid in f.message and "apply" in f.message]


@pytest.mark.real
def test_sm120_without_allreduce_fusion(tree, run_cli, tmp_path, monkeypatch):
    sg, fi = tree("sglang", links=True), tree("flashinfer", links=True)
    T = ("-t", f"sglang={sg}", "-t", f"flashinfer={fi}")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "patchkit.toml").write_text(PROFILE)
    monkeypatch.chdir(ws)
    monkeypatch.setenv("PATCHKIT_RECIPES", str(ROOT / "recipes"))  # the workspace has no recipes/ of its own
    communicator = sg / "sglang/srt/layers/communicator.py"
    comm = fi / "flashinfer/jit/comm.py"
    pristine = {p: p.read_bytes() for p in (communicator, comm)}

    # apply with no names: the profile's bundle, less what it excludes (nor its warning).
    code, out, err = run_cli("apply", *T)
    assert code == 0, out + err
    assert f"left out allreduce-fusion: excluded by the profile {ws / 'patchkit.toml'}" in out
    assert "allreduce-fusion" not in err
    assert {p: p.read_bytes() for p in pristine} == pristine
    # status (no names, or the bundle named) exits 0: the tree is as the profile wants.
    for names in ((), ("sm120",)):
        code, out, err = run_cli("status", *names, *T, "--json")
        assert code == 0, out + err
        doc = json.loads(out)
        assert doc["excluded"] == ["allreduce-fusion"] and doc["profile"]["exclude"] == ["allreduce-fusion"]
        states = {rid: r["state"] for rid, r in _recipes(out).items()}
        assert states == {
            "allreduce-fusion": "pending",
            "autotune-cutlass": "applied",
            "max-running-requests": "applied",
            "moe-backend-sm120": "applied",
        }
        assert _recipes(out)["allreduce-fusion"]["message"].startswith("excluded by the profile")
    assert run_cli("apply", "sm120", *T)[1].count("nothing to apply") == 1  # the bundle named: still left out

    # doctor judges against the profile: never asks to apply allreduce-fusion.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(sg), str(fi)]))
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "fiws"))
    code, out, err = run_cli("doctor", "--workspace", str(tmp_path / "nows"), "--json")
    facts = json.loads(out)["facts"]
    assert facts["profile"]["wanted"] == ["autotune-cutlass", "max-running-requests", "moe-backend-sm120"]
    facts["gpus"]["devices"] = SM120_GPU  # the machine it is for (derived from this run's facts)
    findings = D.judge(facts)
    assert _asks_to_apply(findings, "allreduce-fusion") == []
    assert D.exit_code(findings) == 0, D.render(findings)

    # Named on its own, it is applied, its warning printed once before the write; the tree
    # no longer matches the profile, and status and doctor say so.
    code, out, err = run_cli("apply", "allreduce-fusion", *T)
    assert code == 0, out + err
    assert err.count("warning: allreduce-fusion: ") == 1 and "~3,700 to 236 tok/s" in err, err
    assert "allreduce-fusion: applied as named, but the profile" in out
    code, out, err = run_cli("status", *T, "--json")
    assert code == 1
    assert "but its edits are here: `patchkit revert allreduce-fusion`" in _recipes(out)["allreduce-fusion"]["message"]
    facts = json.loads(run_cli("doctor", "--workspace", str(tmp_path / "nows"), "--json")[1])["facts"]
    facts["gpus"]["devices"] = SM120_GPU
    # said, of this directory's patchkit.toml, which is not the venv's own profile: it never
    # decides doctor's exit code (a property of the venv alone)
    said = [f for f in D.judge(facts) if "profile excludes allreduce-fusion, but" in f.message]
    assert said and all(f.project and not f.fails for f in said), said

    # --save edits only what changes: every comment and blank line keeps its bytes.
    profile = ws / "patchkit.toml"
    code, out, err = run_cli("apply", "allreduce-fusion", "--save", *T)
    assert code == 0 and f"profile {profile}: exclude -= allreduce-fusion" in out, out + err
    assert profile.read_text() == PROFILE.replace('exclude = ["allreduce-fusion"]', "exclude = []")
    code, out, err = run_cli("revert", "allreduce-fusion", "--save", *T)
    assert code == 0 and f"profile {profile}: exclude += allreduce-fusion" in out, out + err
    assert profile.read_text() == PROFILE
    assert {p: p.read_bytes() for p in pristine} == pristine
    assert run_cli("status", *T)[0] == 0
    # Without the profile, applying the bundle brings allreduce-fusion, and its warning, once.
    profile.unlink()
    code, out, err = run_cli("apply", "sm120", "--dry-run", *T)
    assert code == 0 and err.count("warning: allreduce-fusion: ") == 1, out + err


# -- offline: reading and checking ------------------------------------------------------------


def _catalog():
    """What P.check, P.wanted and P.save read of a catalog: recipes by id, and bundles."""
    recipes = {"a": ["b1"], "b": ["b1"], "c": ["b2"], "d": []}
    bundles: dict[str, list[str]] = {}
    for rid, bs in recipes.items():
        for b in bs:
            bundles.setdefault(b, []).append(rid)
    return SimpleNamespace(recipes={rid: SimpleNamespace(id=rid) for rid in recipes}, bundles=bundles)


@pytest.mark.parametrize(
    "text, said",
    [
        ('bundles = ["b1"]\nrecipes = ["d"]\nexclde = ["a"]\n', "profile.toml:3: unknown key 'exclde'"),
        ('bundles = "b1"\n', "profile.toml:1: bundles must be a list of names"),
        ('bundles = ["b1"]\n\nexclude = [""]\n', "profile.toml:3: exclude must be a list of names"),
        ('recipes = ["d"]\nexclude = ["d"]\n', "profile.toml:1: 'd' is both wanted and excluded"),
        ("bundles = [\n", "profile.toml: not TOML"),
    ],
)
def test_a_bad_profile_is_one_error_naming_file_and_line(tmp_path, text, said):
    (tmp_path / "profile.toml").write_text(text)
    with pytest.raises(PatchkitError) as e:
        P.load(tmp_path / "profile.toml")
    assert str(e.value).startswith(str(tmp_path / said)), str(e.value)


@pytest.mark.parametrize(
    "text, said",
    [
        ('bundles = ["b1", "a"]\n', "profile.toml:1: bundles: unknown bundle 'a' (it is a recipe: list it under"),
        ('bundles = ["b1"]\n# x\nexclude = ["zz"]\n', "profile.toml:3: exclude: unknown recipe 'zz'"),
        ('recipes = ["b2"]\n', "profile.toml:1: recipes: unknown recipe 'b2' (it is a bundle: list it under"),
    ],
)
def test_unknown_names_are_named_with_their_line(tmp_path, text, said):
    (tmp_path / "profile.toml").write_text(text)
    with pytest.raises(PatchkitError) as e:
        P.check(P.load(tmp_path / "profile.toml"), _catalog())
    assert str(e.value).startswith(str(tmp_path / said)), str(e.value)


@pytest.mark.parametrize("command", ["apply", "status"])
def test_a_profile_naming_an_unknown_bundle_is_exit_2_at_its_line(tmp_path, run_cli, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "patchkit.toml").write_text('# mine\nbundles = ["sm12"]\n')
    code, out, err = run_cli("--recipes", str(ROOT / "recipes"), command, "-t", f"sglang={tmp_path}")
    assert (code, err.strip()) == (
        2,
        f"patchkit: error: {tmp_path}/patchkit.toml:2: bundles: unknown bundle 'sm12' (hint: `patchkit list` shows"
        " the recipes and bundles)",
    )


def test_wanted_is_the_bundles_and_recipes_less_exclude(tmp_path):
    (tmp_path / "p.toml").write_text('bundles = ["b1", "b2"]\nrecipes = ["d"]\nexclude = ["b"]\n')
    prof = P.load(tmp_path / "p.toml")
    assert P.wanted(prof, _catalog()) == ["a", "c", "d"]
    assert prof.left_out(["a", "b", "c"], named=()) == ["b"]
    assert prof.left_out(["a", "b", "c"], named=("b",)) == []  # named on its own: applied even so


# -- offline: where ---------------------------------------------------------------------------


def test_a_target_profile_comes_before_the_workspace_one(tmp_path, monkeypatch):
    ws, site = tmp_path / "ws", tmp_path / "venv-site"
    (ws / "sub").mkdir(parents=True)
    site.mkdir()
    monkeypatch.chdir(ws / "sub")
    pins = ws / "upstream_pins.toml"
    # None yet: --save would create the workspace's beside the pins, or the target's.
    assert P.find(pins, []) == P.Profile(ws / "patchkit.toml", exists=False)
    assert P.find(pins, [site]) == P.Profile(site / ".patchkit/profile.toml", exists=False)
    (ws / "patchkit.toml").write_text('bundles = ["b1"]\n')
    assert P.find(pins, []).path == ws / "patchkit.toml"  # found upward from the working directory
    assert P.find(pins, [site]).path == ws / "patchkit.toml"  # a target without its own uses it
    (site / ".patchkit").mkdir()
    (site / ".patchkit/profile.toml").write_text('recipes = ["d"]\n')
    got = P.find(pins, [tmp_path / "elsewhere", site])
    assert (got.path, got.recipes) == (site / ".patchkit/profile.toml", ("d",))


def test_apply_with_no_names_and_no_profile_says_how_to_make_one(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("--pins", str(ROOT / "upstream_pins.toml"), "apply")
    assert code == 2
    assert err.strip() == (
        "patchkit: error: apply needs recipe or bundle names, or a profile that names them (hint: e.g. `patchkit "
        f"apply sm120`; `patchkit apply sm120 --save` also records it in {ROOT / 'patchkit.toml'})"
    )


# -- offline: --save --------------------------------------------------------------------------

SAVES = [
    # (profile before, action, names, profile after, changes)
    ('bundles = ["b1"]\n', "apply", ["b2"], 'bundles = ["b1", "b2"]\n', ["bundles += b2"]),
    ('bundles = ["b1"]\nexclude = ["b"]\n', "apply", ["b"], 'bundles = ["b1"]\nexclude = []\n', ["exclude -= b"]),
    ('bundles = ["b1"]\n', "apply", ["d"], 'bundles = ["b1"]\nrecipes = ["d"]\n', ["recipes += d"]),
    ('bundles = ["b1"]\n', "apply", ["a"], 'bundles = ["b1"]\n', []),  # the bundle brings it already
    ('bundles = ["b1"]\n', "revert", ["a"], 'bundles = ["b1"]\nexclude = ["a"]\n', ["exclude += a"]),
    ('recipes = ["d", "c"]\n', "revert", ["d"], 'recipes = ["c"]\n', ["recipes -= d"]),
    ('bundles = ["b1", "b2"]\nrecipes = ["d"]\n', "revert", ["b2"], 'bundles = ["b1"]\nrecipes = ["d"]\n',
     ["bundles -= b2"]),
    ('bundles = ["b1"]\nrecipes = ["c"]\n', "revert", ["b2"], 'bundles = ["b1"]\nrecipes = []\n', ["recipes -= c"]),
]  # fmt: skip


@pytest.mark.parametrize("before, action, names, after, changes", SAVES)
def test_save(tmp_path, before, action, names, after, changes):
    path = tmp_path / "patchkit.toml"
    path.write_text(before)
    saved, said = P.save(P.load(path), action, names, _catalog())
    assert (path.read_text(), said) == (after, changes)
    assert saved == P.load(path)


def test_save_keeps_comments_and_layout_byte_for_byte(tmp_path):
    path = tmp_path / "patchkit.toml"
    text = (
        "# the fleet's state\n\n"
        "bundles = [\n"
        '    "b1",  # first\n'
        '    "b2",  # second\n'
        "]\n"
        '  exclude   =   ["a"]   # slow\n'
    )
    path.write_bytes(text.encode())
    P.save(P.load(path), "apply", ["a"], _catalog())
    assert path.read_bytes() == text.replace('["a"]', "[]").encode()
    P.save(P.load(path), "revert", ["a"], _catalog())
    assert path.read_bytes() == text.encode()


def test_save_creates_a_commented_profile_where_find_says(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    saved, said = P.save(P.find(None, [site]), "apply", ["b1"], _catalog())
    assert said == ["bundles += b1"] and saved.bundles == ("b1",)
    text = (site / ".patchkit/profile.toml").read_text()
    assert text.startswith(P.NEW_TARGET) and text.endswith('bundles = ["b1"]\n')
    assert (site / ".patchkit/.gitignore").read_text() == "*\n"
    # Nothing to record (a revert, with no profile): no file is made.
    other = tmp_path / "other"
    other.mkdir()
    assert P.save(P.find(None, [other]), "revert", ["a"], _catalog())[1] == []
    assert not (other / ".patchkit").exists()


# -- offline: warnings and doctor ---------------------------------------------------------------


def test_a_recipe_warns_with_the_warning_paragraph_of_its_rationale():
    from patchkit.core.recipe import load_recipe

    said = warning(load_recipe(ROOT / "recipes" / "allreduce-fusion.toml"))
    assert said.startswith("on 8x RTX PRO 6000 (SM120) with GLM-5-NVFP4 this took throughput from ~3,700 to 236")
    assert "\n" not in said and "WARNING" not in said
    assert warning(load_recipe(ROOT / "recipes" / "autotune-cutlass.toml")) == ""
    assert warning(SimpleNamespace(rationale="Why.\n\nWARNING: one\nline.\n\nMore.\n\nWARNING: two")) == "one line. two"


def test_doctor_never_asks_to_apply_what_the_profile_excludes():
    facts = copy.deepcopy(json.loads((ROOT / "tests/fixtures/doctor_h200.json").read_text())["facts"])
    facts["gpus"]["devices"] = SM120_GPU
    without = D.judge(facts)  # no profile: the whole bundle is asked for
    assert _asks_to_apply(without, "allreduce-fusion")
    wanted = ["autotune-cutlass", "max-running-requests", "moe-backend-sm120"]
    facts["profile"] = {"path": "/p/patchkit.toml", "bundles": ["sm120"], "exclude": ["allreduce-fusion"]}
    facts["profile"]["wanted"] = wanted
    findings = D.judge(facts)
    assert _asks_to_apply(findings, "allreduce-fusion") == []
    assert "profile /p/patchkit.toml: bundles sm120; exclude allreduce-fusion" in [f.message for f in findings]
    lack = [f.message for f in findings if f.level == D.WARN]
    assert len(lack) == 1 and lack[0].startswith(
        "sglang: the profile wants autotune-cutlass, max-running-requests, moe-backend-sm120, which the copy"
    )
    assert lack[0].endswith(f"`patchkit apply --python {facts['python']['executable']}`")
