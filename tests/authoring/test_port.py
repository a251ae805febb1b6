"""`patchkit port ID --to ENGINE==VERSION`: the variant a recipe needs on a new release,
drafted from drift's findings, verified on the pristine release, written with tomlkit."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import OLD_FLAG, OLD_LAYER_GATE, mini_sglang, release_in_cache

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# The gate's old file lost it; a renamed function in another file holds the chain now.
GATE_OLD = """_is_a = True
_is_b = False


def helper():
    return 1
"""
GATE_NEW = """_is_a = True
_is_b = False
_is_c = False


def renamed_gate(n):
    return (_is_a or _is_b) and n > 0
"""
GATE_OP = """
[[ops]]  # the gate
kind = "or-operand"
engine = "sglang"
file = "sglang/srt/gate.py"
scope = "old_gate"
[ops.locator]
operands = ["_is_a", "_is_b"]
[ops.params]
operand = "_is_c"
"""
HEAD = """# widen: a comment the port must keep, byte for byte
id = "widen"
summary = "widen the gate"  # an inline comment
[engines]
sglang = ">=0.5"
"""


# The gate as released before it moved (sglang 0.5.8, in the recipes' range): where the
# site's identity comes from (patchkit/core/identity.py), so that renamed_gate is the site and
# not a look-alike.
GATE_RELEASED = "_is_a = True\n_is_b = False\n\n\ndef old_gate(n):\n    return (_is_a or _is_b) and n > 0\n"


@pytest.fixture(autouse=True)
def _released(request, tmp_path, monkeypatch):
    if request.node.get_closest_marker("real") is None:
        monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
        release_in_cache(tmp_path / "cache", "sglang", "0.5.8", {"sglang/srt/gate.py": GATE_RELEASED})


def _files_of(root: Path) -> list[tuple[str, str]]:
    return [(p.stem, p.read_text()) for p in sorted((root / "sglang/srt").glob("*.py"))]


def _recipes(tmp_path: Path, rid: str, text: str) -> Path:
    d = tmp_path / "recipes"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{rid}.toml").write_text(text)
    return d


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_moved_op_is_retargeted_and_verified(tmp_path, run_cli):
    root = mini_sglang(tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW})
    before = _files(root)
    recipes = _recipes(tmp_path, "widen", HEAD + GATE_OP)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}")
    assert code == 0, err
    assert "op #1 (or-operand): moved on sglang 0.5.9: moved: retargeted to sglang/srt/gate2.py::renamed_gate:7" in err
    draft = tomllib.loads(out)  # stdout is the drafted recipe, nothing else
    assert draft["ops"][0]["when"] == {"sglang": "<0.5.9"}  # the old op ends below the release
    (variant,) = draft["variants"]
    assert variant["when"] == {"sglang": ">=0.5.9"}
    (op,) = variant["ops"]
    assert (op["file"], op["scope"], op["params"]) == ("sglang/srt/gate2.py", "renamed_gate", {"operand": "_is_c"})
    for name in ("recipe", "range", "variant", "judge", "apply"):
        assert f"check {name}: ok" in err
    assert _files(root) == before  # verified in memory: the release is not touched
    assert (recipes / "widen.toml").read_text() == HEAD + GATE_OP  # no --write: nothing written

    code, out, _ = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["leftovers"] == [] and doc["written"] is None
    assert [(o["action"], o["now"], o["new_index"]) for o in doc["ops"]] == [
        ("retarget", "sglang/srt/gate2.py::renamed_gate:7", 2)
    ]
    assert all(c["ok"] for c in doc["checks"]) and tomllib.loads(doc["draft"]) == draft

    # Written, the recipe reads pending there at the new place, and applies.
    code, out, _ = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 0 and "wrote " in out
    code, out, _ = run_cli("--recipes", str(recipes), "status", "widen", "-t", f"sglang={root}", "--json")
    (op,) = json.loads(out)["recipes"][0]["ops"]
    assert (op["index"], op["state"], op["location"]) == (2, "pending", "sglang/srt/gate2.py::renamed_gate:7")


def test_write_keeps_every_comment_and_line(tmp_path, run_cli):
    root = mini_sglang(tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW})
    original = HEAD + "\n# before the op\n" + GATE_OP + "\n# the end: a trailing comment\n"
    recipes = _recipes(tmp_path, "widen", original)
    code, _, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 0, err
    new = (recipes / "widen.toml").read_text()
    # Every line of the recipe is still there, in order and byte for byte: the port only
    # inserted lines (the old op's `when`, the new variant).
    ops = difflib.SequenceMatcher(None, original.splitlines(True), new.splitlines(True)).get_opcodes()
    assert {tag for tag, *_ in ops} == {"equal", "insert"}, ops
    assert 'when = { sglang = "<0.5.9" }\n' in new
    assert new.endswith("\n# the end: a trailing comment\n")
    assert new.index("[[variants]]") < new.index("# the end")


OLD_ERA = """
# before 0.5: the gate had another name
[[variants]]
when = { sglang = "<0.5" }
[[variants.ops]]
kind = "or-operand"
engine = "sglang"
file = "sglang/srt/gate.py"
scope = "older_gate"
[variants.ops.locator]
operands = ["_is_a", "_is_b"]
[variants.ops.params]
operand = "_is_c"

# what defeats the recipe: a comment that leads to the blockers
[[blockers]]
engine = "sglang"
file = "sglang/srt/backend.py"
scope = "resolve"
contains = ["raise ValueError('only a or b')"]
message = "resolve refuses c"
"""


def test_the_variant_goes_after_the_others_and_a_second_port_ends_it(tmp_path, run_cli):
    root = mini_sglang(tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW})
    original = HEAD + GATE_OP + OLD_ERA
    recipes = _recipes(tmp_path, "widen", original)
    code, _, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 0, err
    new = (recipes / "widen.toml").read_text()
    ops = difflib.SequenceMatcher(None, original.splitlines(True), new.splitlines(True)).get_opcodes()
    assert {tag for tag, *_ in ops} == {"equal", "insert"}, ops
    # After the variant of the older era, before the comment that leads to the blockers.
    assert new.index('scope = "older_gate"') < new.index('when = { sglang = ">=0.5.9" }') < new.index("# what defeats")
    assert tomllib.loads(new)["variants"][0]["when"] == {"sglang": "<0.5"}  # not of this release: left alone

    # The gate moves again on the same release: the drafted variant ends, and is said to hold nothing.
    # (Its site's identity is read from 0.5.9 as released, with the gate in gate2.py.)
    release_in_cache(tmp_path / "cache", "sglang", "0.5.9", {f"sglang/srt/{n}.py": t for n, t in _files_of(root)})
    (root / "sglang/srt/gate3.py").write_text(GATE_NEW.replace("renamed_gate", "third_gate"))
    (root / "sglang/srt/gate2.py").write_text(GATE_OLD)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}")
    assert code == 0, err
    assert "note: variant #2 holds no release once its `when` ends below 0.5.9: delete it" in err
    draft = tomllib.loads(out)
    assert [v["when"] for v in draft["variants"]] == [
        {"sglang": "<0.5"},
        {"sglang": ">=0.5.9,<0.5.9"},
        {"sglang": ">=0.5.9"},
    ]
    assert (draft["variants"][2]["ops"][0]["file"], draft["variants"][2]["ops"][0]["scope"]) == (
        "sglang/srt/gate3.py",
        "third_gate",
    )


def test_a_blocker_standing_on_the_release_is_left_for_a_person(tmp_path, run_cli):
    backend = "def resolve(x):\n    if x not in ('a', 'b'):\n        raise ValueError('only a or b')\n"
    root = mini_sglang(
        tmp_path / "rel",
        {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW, "sglang/srt/backend.py": backend},
    )
    recipes = _recipes(tmp_path, "widen", HEAD + GATE_OP + OLD_ERA)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 1
    assert "blocker stands on sglang 0.5.9: blocker #1 at sglang/srt/backend.py:3: resolve refuses c" in err
    assert "check apply: FAILED" in err and "is blocked by blocker #1" in err
    assert (recipes / "widen.toml").read_text() == HEAD + GATE_OP + OLD_ERA


def test_a_missing_anchor_lists_its_three_nearest_statements(tmp_path, run_cli):
    flags = (
        "import os\n"
        "_ok = probe()\n"  # 2
        "_flag_a = _ok and platform().is_a\n"  # 3
        "_flag_b = _ok and platform().is_b\n"  # 4
        "x = 1\n"
    )
    root = mini_sglang(
        tmp_path / "rel",
        {
            "sglang/srt/flags.py": flags,
            "sglang/srt/other.py": "def f():\n    if _ok:\n        return check_b()\n",
            "sglang/srt/unrelated.py": "_flag_b_unrelated = 2\n",
        },
    )
    recipe = """id = "flag"
summary = "a flag beside its sibling"
[engines]
sglang = ">=0.5"

[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/old_flags.py"
[ops.locator]
anchor = "_flag_b = _ok and check_b()"
position = "after"
[ops.params]
code = "_flag_c = _ok and check_c()"
"""
    recipes = _recipes(tmp_path, "flag", recipe)
    code, out, err = run_cli("--recipes", str(recipes), "port", "flag", "--to", f"sglang={root}", "--json")
    assert code == 1
    doc = json.loads(out)
    (op,) = doc["ops"]
    assert (op["state"], op["action"], op["anchor"]) == ("missing", "left", "_flag_b = _ok and check_b()")
    got = [(c["file"], c["line"], c["scope"]) for c in op["candidates"]]
    assert got == [
        ("sglang/srt/flags.py", 4, ""),  # _flag_b = _ok and platform().is_b
        ("sglang/srt/flags.py", 3, ""),  # _flag_a = _ok and platform().is_a
        ("sglang/srt/other.py", 3, "f"),  # return check_b()
    ], op["candidates"]
    sims = [c["similarity"] for c in op["candidates"]]
    assert sims == sorted(sims, reverse=True) and 0 < sims[-1] < sims[0] < 1
    assert len(doc["leftovers"]) == 1 and "sglang/srt/flags.py:4" in doc["leftovers"][0]
    # The human report lists it for a person; --write writes nothing.
    code, out, err = run_cli("--recipes", str(recipes), "port", "flag", "--to", f"sglang={root}", "--write")
    assert code == 1
    assert "left for a person (1):" in err and "nearest: sglang/srt/flags.py:4 (" in err
    assert "nothing was written: something is left for a person" in err
    assert (recipes / "flag.toml").read_text() == recipe


def test_an_ambiguous_op_lists_its_tied_sites(tmp_path, run_cli):
    same = GATE_NEW.replace("renamed_gate", "gate_x")
    root = mini_sglang(
        tmp_path / "rel",
        {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate_x.py": same, "sglang/srt/gate_y.py": same},
    )
    recipes = _recipes(tmp_path, "widen", HEAD + GATE_OP)
    code, out, _ = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--json")
    (op,) = json.loads(out)["ops"]
    assert code == 1 and (op["state"], op["action"]) == ("ambiguous", "left")
    assert [(c["file"], c["line"], c["similarity"]) for c in op["candidates"][:2]] == [
        ("sglang/srt/gate_x.py", 7, 1.0),
        ("sglang/srt/gate_y.py", 7, 1.0),
    ]


def test_a_draft_that_does_not_apply_is_not_written(tmp_path, run_cli):
    """The names check fires: the gate moved to a file where its new operand is not defined."""
    new = GATE_NEW.replace("_is_c = False\n", "")
    root = mini_sglang(tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": new})
    recipes = _recipes(tmp_path, "widen", HEAD + GATE_OP)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 1
    assert "check judge: ok" in err
    assert "check apply: FAILED" in err and "`_is_c` is not defined" in err
    assert "nothing was written: the apply check failed" in err
    assert (recipes / "widen.toml").read_text() == HEAD + GATE_OP


def test_an_op_whose_when_still_holds_fails_the_variant_check(tmp_path, run_cli):
    """The release is above the recipe's range: the judge takes the newest variant, but an
    op of another era whose own `when` holds there too would stand beside the draft."""
    straggler = GATE_OP.replace("[[ops]]  # the gate", "[[ops]]").replace(
        'scope = "old_gate"', 'scope = "old_gate"\nwhen = { sglang = ">=0.5,<0.6" }'
    )
    text = HEAD.replace('">=0.5"', '">=0.5,<0.5.5"') + GATE_OP + straggler.replace("old_gate", "other_gate")
    root = mini_sglang(tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW})
    recipes = _recipes(tmp_path, "widen", text)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--json")
    doc = json.loads(out)
    assert code == 1 and not doc["ok"]
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["range"]["ok"] and 'sglang = ">=0.5,<0.5.10"' in doc["draft"]  # widened to the release
    assert not checks["variant"]["ok"] and "#2, whose `when` still holds there" in checks["variant"]["detail"]


def test_upstream_ops_end_and_an_all_upstream_recipe_retires(tmp_path, run_cli):
    root = mini_sglang(
        tmp_path / "rel",
        {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW, "sglang/srt/up.py": "_y = _x or _z\n"},
    )
    up = """
[[ops]]
kind = "or-operand"
engine = "sglang"
file = "sglang/srt/gone.py"
scope = "f"
[ops.locator]
operands = ["_x", "_w"]
[ops.params]
operand = "_z"
[[ops.markers]]
contains = ["_x or _z"]
"""
    recipes = _recipes(tmp_path, "widen", HEAD + up + GATE_OP)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}")
    assert code == 0, err
    assert "op #1 (or-operand): upstream on sglang 0.5.9: upstream: its `when` ends below the release" in err
    draft = tomllib.loads(out)
    assert [o.get("when") for o in draft["ops"]] == [{"sglang": "<0.5.9"}] * 2
    assert [o["file"] for o in draft["variants"][0]["ops"]] == ["sglang/srt/gate2.py"]  # the upstream op is not carried

    recipes = _recipes(tmp_path / "only", "widen", HEAD + up)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 0 and out == ""
    assert "every op reads upstream on sglang 0.5.9: the recipe can be retired there" in err
    assert (recipes / "widen.toml").read_text() == HEAD + up


def test_a_text_op_and_a_release_past_the_range(tmp_path, run_cli):
    """A C++ file: the nearest windows of lines to a find text that changed.  And ops that
    all still apply on a release past the range: the draft only widens [engines]."""
    kernel = (
        "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1300))\n"
        "int x;\n#endif\n#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800))\n"
    )
    root = mini_sglang(
        tmp_path / "rel",
        {"sglang/srt/kernel.cuh": kernel, "sglang/srt/gate.py": GATE_NEW.replace("renamed_gate", "old_gate")},
    )
    text_op = """
[[ops]]
kind = "text-replace"
engine = "sglang"
file = "sglang/srt/kernel.cuh"
[ops.params]
find = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
replace = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))"
count = 1
"""
    recipes = _recipes(tmp_path, "widen", HEAD + text_op)
    code, out, _ = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--json")
    (op,) = json.loads(out)["ops"]
    assert code == 1 and op["action"] == "left"
    assert [(c["file"], c["line"]) for c in op["candidates"]][:2] == [
        ("sglang/srt/kernel.cuh", 1),
        ("sglang/srt/kernel.cuh", 4),
    ]
    assert op["candidates"][0]["similarity"] > op["candidates"][1]["similarity"]

    recipes = _recipes(tmp_path / "past", "widen", HEAD.replace('">=0.5"', '">=0.5,<0.5.5"') + GATE_OP)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 0, err
    assert "every op still applies on sglang 0.5.9: only [engines] widens" in err
    assert "wrote " in out and "[engines] sglang widened to 0.5.9" in out
    assert (recipes / "widen.toml").read_text() == (HEAD + GATE_OP).replace('">=0.5"', '">=0.5,<0.5.10"')


@pytest.mark.parametrize(
    "args, said",
    [
        (("widen", "--to", "sglang"), "expected ENGINE==VERSION"),
        (("nope", "--to", "sglang==0.5.9"), "unknown recipe or bundle 'nope'"),
        (("gates", "--to", "sglang==0.5.9"), "'gates' is a bundle; port takes one recipe"),
        (("widen", "--to", "flashinfer==0.6.3"), "recipe widen has no flashinfer ops"),
    ],
)
def test_usage_errors_exit_2(tmp_path, run_cli, args, said):
    recipes = _recipes(tmp_path, "widen", HEAD.replace("[engines]", 'bundles = ["gates"]\n[engines]') + GATE_OP)
    code, _, err = run_cli("--recipes", str(recipes), "port", *args)
    assert code == 2 and said in err, err


def test_a_release_below_the_range_is_refused(tmp_path, run_cli):
    root = mini_sglang(tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD})
    recipes = _recipes(tmp_path, "widen", HEAD.replace('">=0.5"', '">=0.6"') + GATE_OP)
    code, _, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}")
    assert code == 2 and "0.5.9 is below the recipe's range >=0.6" in err


# -- a real release ------------------------------------------------------------------------------

ADD_NORM = "sglang/srt/layers/layer_boundary/residual/add_norm.py"
GATE_ONLY = (
    """# the SGLang half of allreduce-fusion as written for 0.5.9-0.5.13
id = "old-gate"
summary = "the layer gate before 0.5.14"
[engines]
sglang = ">=0.5.9,<0.5.14"
"""
    + OLD_FLAG
    + OLD_LAYER_GATE
)
# As written for 0.5.19-0.5.20, where the flags read get_platform() (allreduce-fusion's variant).
GATE_19 = """id = "gate-19"
summary = "the layer gate on 0.5.19-0.5.20"
[engines]
sglang = ">=0.5.19,<0.5.21"

[[ops]]  # the flag beside its siblings
kind = "insert"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
[ops.locator]
anchor = "_is_sm100_supported = _is_cuda and get_platform().is_sm100"
position = "after"
[ops.params]
code = "_is_sm120_supported = _is_cuda and get_platform().is_sm120"
""" + OLD_LAYER_GATE.replace("[[ops]]", "[[ops]]  # the gate")


@pytest.mark.real
def test_the_old_gate_ported_to_0_5_22(tmp_path, run_cli):
    """communicator.py is gone on 0.5.22 and the gate is add_norm.py::flashinfer_ar_fusion_applies:
    the gate is retargeted, the import follows it, the flag (written with is_sm100_supported(),
    which 0.5.22 spells get_platform().is_sm100) is left for a person with its nearest
    statement first; the 0.5.19 recipe, whose flag add_norm.py still has, ports completely."""
    from patchkit.upstream.drift import release_tree

    tree = release_tree("sglang", "0.5.22")
    lines = (tree / ADD_NORM).read_text().splitlines()
    gate = next(i for i, ln in enumerate(lines, 1) if "(_is_sm90_supported or" in ln)
    sibling = next(i for i, ln in enumerate(lines, 1) if ln.startswith("_is_sm100_supported = "))
    recipes = _recipes(tmp_path, "old-gate", GATE_ONLY)
    code, out, err = run_cli("--recipes", str(recipes), "port", "old-gate", "--to", "sglang==0.5.22", "--json")
    doc = json.loads(out)
    assert code == 1, err
    imp, flag, gate_op = doc["ops"]
    assert (gate_op["action"], gate_op["now"]) == ("retarget", f"{ADD_NORM}::flashinfer_ar_fusion_applies:{gate}")
    assert imp["action"] == "followed" and imp["file"] == ADD_NORM and "followed op #3" in imp["message"]
    assert flag["action"] == "left" and len(flag["candidates"]) == 3
    assert (flag["candidates"][0]["file"], flag["candidates"][0]["line"]) == (ADD_NORM, sibling)
    variant = tomllib.loads(doc["draft"])["variants"][-1]
    # not >=0.5.22: drift --bisect saw the gate and its import leave communicator.py at 0.5.21
    # (and the flag change at 0.5.19: that op, left for a person, ends there)
    assert variant["when"] == {"sglang": ">=0.5.21"}
    ops = tomllib.loads(doc["draft"])["ops"]
    assert [op["when"] for op in ops] == [{"sglang": "<0.5.21"}, {"sglang": "<0.5.19"}, {"sglang": "<0.5.21"}]
    assert [(o["file"], o.get("scope")) for o in variant["ops"]] == [
        (ADD_NORM, None),
        (ADD_NORM, "flashinfer_ar_fusion_applies"),
    ]
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["judge"]["ok"] and checks["variant"]["ok"]  # what was drafted reads pending there
    assert not checks["apply"]["ok"] and "`_is_sm120_supported` is not defined" in checks["apply"]["detail"]
    assert "the draft lacks op #2, left for a person" in checks["apply"]["detail"]  # the flag defines it

    recipes = _recipes(tmp_path / "19", "gate-19", GATE_19)
    code, out, err = run_cli("--recipes", str(recipes), "port", "gate-19", "--to", "sglang==0.5.22", "--write")
    assert code == 0, err
    code, out, _ = run_cli("--recipes", str(recipes), "drift", "gate-19", "--to", "sglang==0.5.22", "--json")
    ops = json.loads(out)["recipes"][0]["ops"]
    assert code == 0 and [(o["index"], o["state"]) for o in ops] == [(3, "pending"), (4, "pending")]
    assert ops[1]["location"] == f"{ADD_NORM}::flashinfer_ar_fusion_applies:{gate}"


# -- issue 20: any range, examples at the new place, unmoved ops left alone ------------------------

EXAMPLE = """
[[ops.examples]]
before = '''
def old_gate():
    return _is_a or _is_b
'''
after = '''
def old_gate():
    return _is_a or _is_b or _is_c
'''
"""
STAYS = """
[[ops]]  # a field that did not move
kind = "set-default"
engine = "sglang"
file = "sglang/srt/args.py"
scope = "Args"
[ops.locator]
field = "max_requests"
[ops.params]
value = "1024"
expect = "None"
"""
ARGS = "class Args:\n    max_requests: int = None\n"
GATE_IN_CLASS = GATE_NEW.replace(
    "def renamed_gate(n):\n    return", "class Gate:\n    def renamed(self, n):\n        return"
)


@pytest.mark.parametrize("pin", ['"==0.5.8"', '"~=0.5.8"', '">=0.5.8,<0.5.9"'])
def test_a_pinned_range_ports_examples_follow_and_unmoved_ops_stay(tmp_path, run_cli, pin):
    root = mini_sglang(
        tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW, "sglang/srt/args.py": ARGS}
    )
    text = HEAD.replace('">=0.5"', pin) + GATE_OP + EXAMPLE + STAYS
    recipes = _recipes(tmp_path, "widen", text)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 0, err
    assert "op #2 (set-default): pending on sglang 0.5.9: pending: stays as it is" in err
    assert "check examples: ok: 2 example(s)" in err  # the old op's and the new one's
    draft = tomllib.loads((recipes / "widen.toml").read_text())
    want = {'"~=0.5.8"': "~=0.5.8"}.get(pin, ">=0.5.8,<0.5.10")  # ~=0.5.8 holds 0.5.9 already
    assert draft["engines"]["sglang"] == want
    assert "when" not in draft["ops"][1]  # the unmoved op is not ended ...
    (variant,) = draft["variants"]
    (op,) = variant["ops"]  # ... nor repeated
    assert op["scope"] == "renamed_gate"
    assert op["examples"][0]["before"] == "def renamed_gate():\n    return _is_a or _is_b\n"
    code, out, err = run_cli("--recipes", str(recipes), "check", str(recipes / "widen.toml"))
    assert code == 0, out + err
    code, out, err = run_cli("--recipes", str(recipes), "apply", "widen", "-t", f"sglang={root}")
    assert code == 0, out + err
    assert "or _is_c" in (root / "sglang/srt/gate2.py").read_text()
    assert "= 1024" in (root / "sglang/srt/args.py").read_text()


def test_an_example_that_cannot_follow_is_dropped_with_a_note(tmp_path, run_cli):
    root = mini_sglang(tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_IN_CLASS})
    recipes = _recipes(tmp_path, "widen", HEAD + GATE_OP + EXAMPLE)
    code, out, err = run_cli("--recipes", str(recipes), "port", "widen", "--to", f"sglang={root}", "--write")
    assert code == 0, err
    assert "note: op #1 example #1 was written for old_gate and is dropped from the variant" in err
    draft = tomllib.loads((recipes / "widen.toml").read_text())
    (op,) = draft["variants"][0]["ops"]
    assert op["scope"] == "Gate.renamed" and "examples" not in op
    assert draft["ops"][0]["examples"]  # the old op keeps its own
    code, out, err = run_cli("--recipes", str(recipes), "check", str(recipes / "widen.toml"))
    assert code == 0, out + err


def test_when_bounds_come_from_the_release_bisect_saw_the_op_change(tmp_path):
    from patchkit.authoring import port as P
    from patchkit.base.target import open_target
    from patchkit.core.recipe import load_recipe

    recipes = _recipes(tmp_path, "widen", HEAD.replace('">=0.5"', '"==0.5.5"') + GATE_OP + STAYS)
    recipe = load_recipe(recipes / "widen.toml")
    releases = ["0.5.4", "0.5.5", "0.5.6", "0.5.7", "0.5.7.post1", "0.5.8", "0.5.9", "0.5.10"]
    judged = []

    def evaluate_at(vs):  # the gate leaves gate.py at 0.5.7; the field never moves
        judged.extend(vs)
        return {
            v: [
                {
                    "id": "widen",
                    "state": "pending",
                    "ops": [
                        {"index": 1, "state": "pending" if v < "0.5.7" else "moved", "location": "", "file": "g"},
                        {"index": 2, "state": "pending", "location": "", "file": "a"},
                    ],
                }
            ]
            for v in vs
        }

    changed = P.changed_at(recipe, "sglang", "0.5.9", evaluate_at, releases)
    assert changed == {1: "0.5.7"}
    assert "0.5.4" not in judged and "0.5.10" not in judged and len(judged) < 6  # the span, bisected
    root = mini_sglang(
        tmp_path / "rel", {"sglang/srt/gate.py": GATE_OLD, "sglang/srt/gate2.py": GATE_NEW, "sglang/srt/args.py": ARGS}
    )
    result = P.port(recipe, "sglang", open_target("sglang", root), changed)
    assert result.verified, result.checks
    draft = tomllib.loads(result.draft)
    assert draft["ops"][0]["when"] == {"sglang": "<0.5.7"}
    assert draft["variants"][0]["when"] == {"sglang": ">=0.5.7"}
    assert draft["engines"]["sglang"] == ">=0.5.5,<0.5.10"
    assert "when" not in draft["ops"][1]


# -- issue 19: port proposes the marker for upstream's fix in other words ------------------------

ARM_OP = """
[[ops]]  # the SM120 arm
kind = "insert"
engine = "sglang"
file = "sglang/srt/args.py"
scope = "handle"
[ops.locator]
anchor = 'if view.backend == "cutlass":'
position = "before"
[ops.params]
code = '''
if view.backend == "auto" and view.quant == "fp4" and is_sm120():
    view.backend = "cutlass"
'''
"""
ARGS_RELEASED = 'def handle(view):\n    if view.backend == "cutlass":\n        check(view)\n'
# 0.5.9: the choice moved into a pass that handle() hands on, and upstream made the arm there.
ARGS_NOW = (
    "from sglang.srt.passes import constraints\n\n\ndef handle(view):\n    run_pass(view, constraints)\n"
    '    if view.backend_name == "cutlass":\n        check(view)\n'
)
PASSES = (
    "def constraints(view):\n    backend = view.backend\n"
    '    if backend == "auto" and view.quant == "fp4" and is_sm120():  # SM120: the CUTLASS MoE\n'
    '        backend = "cutlass"\n    return backend\n'
)


def _arm_release(tmp_path: Path) -> Path:
    files = {"sglang/srt/args.py": ARGS_NOW, "sglang/srt/passes.py": PASSES}
    release_in_cache(tmp_path / "cache", "sglang", "0.5.8", {"sglang/srt/args.py": ARGS_RELEASED})
    release_in_cache(tmp_path / "cache", "sglang", "0.5.9", files)
    return mini_sglang(tmp_path / "rel", files)


def test_a_fix_in_other_words_is_proposed_as_a_marker_to_confirm(tmp_path, run_cli):
    """The arm's anchor is gone on 0.5.9, and handle() now hands on to passes.constraints,
    which holds upstream's own arm: port names the place and the marker it would add, writes
    it as *proposed* (it does not count, and `check` warns), and once a person deletes the
    `proposed` line the op reads upstream there."""
    root = _arm_release(tmp_path)
    recipes = _recipes(tmp_path, "arm", HEAD.replace('"widen"', '"arm"') + ARM_OP)
    code, out, err = run_cli("--recipes", str(recipes), "port", "arm", "--to", f"sglang={root}")
    assert code == 1, err  # not complete: a person must confirm the marker
    assert "upstream may have made it in other words at sglang/srt/passes.py:3:" in err
    assert '|     if backend == "auto" and view.quant == "fp4" and is_sm120():  # SM120' in err
    assert '      file = "sglang/srt/passes.py"\n      scope = "constraints"\n' in err
    assert "check proposal: ok: with its proposed marker confirmed, op #2 reads upstream on sglang 0.5.9" in err
    (op,) = tomllib.loads(out)["variants"][0]["ops"]
    (marker,) = op["markers"]
    assert marker["contains"] == ['backend == "auto"', 'view.quant == "fp4"', "is_sm120()"]
    assert "sglang/srt/passes.py:3" in marker["proposed"]

    code, out, _ = run_cli("--recipes", str(recipes), "port", "arm", "--to", f"sglang={root}", "--json")
    doc = json.loads(out)
    assert code == 1 and not doc["ok"] and doc["leftovers"] == [] and len(doc["proposals"]) == 1
    (p,) = doc["ops"]
    assert p["action"] == "propose" and p["state"] == "missing"
    assert (p["proposal"]["file"], p["proposal"]["line"], p["proposal"]["marker"]) == (
        "sglang/srt/passes.py",
        3,
        marker,
    )

    code, out, err = run_cli("--recipes", str(recipes), "port", "arm", "--to", f"sglang={root}", "--write")
    assert code == 1 and "wrote " in out and "1 proposed marker(s)" in err
    written = (recipes / "arm.toml").read_text()
    line = written.splitlines().index("[[variants.ops.markers]]") + 1
    code, _, err = run_cli("--recipes", str(recipes), "check")
    assert code == 0
    assert f"arm.toml:{line}: arm: op #2 > marker #1: WARNING: proposed, not counted until confirmed" in err

    def state() -> str:
        code, out, _ = run_cli("--recipes", str(recipes), "status", "arm", "-t", f"sglang={root}", "--json")
        return json.loads(out)["recipes"][0]["ops"][0]["state"]

    assert state() == "missing"  # never retired silently
    code, out, _ = run_cli("--recipes", str(recipes), "status", "arm", "-t", f"sglang={root}", "--json")
    said = json.loads(out)["recipes"][0]["ops"][0]["message"]
    assert f"confirm the proposed marker (recipe line {line}) by deleting its `proposed` line" in said, said
    (recipes / "arm.toml").write_text("".join(ln for ln in written.splitlines(True) if not ln.startswith("proposed")))
    assert state() == "upstream"


def test_a_proposed_marker_that_would_not_match_is_not_written(tmp_path, run_cli, monkeypatch):
    from patchkit.core import equivalent

    root = _arm_release(tmp_path)
    original = HEAD.replace('"widen"', '"arm"') + ARM_OP
    recipes = _recipes(tmp_path, "arm", original)
    monkeypatch.setattr(equivalent, "fragments", lambda place: ['backend == "auto"', "is_sm100()"])
    code, out, err = run_cli("--recipes", str(recipes), "port", "arm", "--to", f"sglang={root}", "--write")
    assert code == 1
    assert "check proposal: FAILED: the proposed marker of op #2 does not match on sglang 0.5.9" in err
    assert "nothing was written: the proposal, judge, apply check failed" in err
    assert (recipes / "arm.toml").read_text() == original


@pytest.mark.real
def test_upstreams_sm120_arm_is_proposed_when_porting_to_0_5_15(tmp_path, run_cli):
    """moe-backend-sm120's SGLang op as written for 0.5.9, without its markers: on 0.5.15 the
    anchor is gone from _handle_moe_kernel_config, which now runs the pass
    arg_groups/overrides.py::_moe_runner_backend_quant_constraints, where upstream wrote its
    own SM120 arm (0.5.13 on).  port proposes a marker for it, verified to match."""
    from patchkit.upstream.drift import release_tree

    shipped = (Path(__file__).parents[2] / "recipes/moe-backend-sm120.toml").read_text()
    head, rest = shipped.split("# sglang < 0.5.15", 1)
    op = rest.split("\n", 1)[1].split("[[ops.markers]]")[0].replace('when = { sglang = "<0.5.15" }\n', "")
    head = head.replace('"moe-backend-sm120"', '"moe-arm"').replace('bundles = ["sm120"]', "bundles = []")
    recipes = _recipes(tmp_path, "moe-arm", head.replace('">=0.5.9,<0.5.24"', '">=0.5.9,<0.5.13"') + op)
    overrides = release_tree("sglang", "0.5.15") / "sglang/srt/arg_groups/overrides.py"
    text = overrides.read_text()
    arm = text[: text.index('        moe_runner_backend == "auto"\n        and view.quantization')].count("\n")
    code, out, err = run_cli("--recipes", str(recipes), "port", "moe-arm", "--to", "sglang==0.5.15", "--json")
    doc = json.loads(out)
    assert code == 1, err
    (p,) = doc["ops"]
    assert (p["state"], p["action"]) == ("missing", "propose")
    assert (p["proposal"]["file"], p["proposal"]["line"]) == ("sglang/srt/arg_groups/overrides.py", arm)
    marker = p["proposal"]["marker"]
    assert marker["scope"] == "_moe_runner_backend_quant_constraints"
    assert 'view.quantization == "modelopt_fp4"' in marker["contains"] and "is_sm120_supported()" in marker["contains"]
    checks = {c["name"]: c for c in doc["checks"]}
    assert all(c["ok"] for c in checks.values()), checks
    assert "reads upstream on sglang 0.5.15" in checks["proposal"]["detail"]
