"""The sm120 bundle on every release: each SGLang release 0.5.9..0.5.23 with the FlashInfer it
pins, and each FlashInfer release 0.6.3..0.7.4 that none of them pins (with SGLang 0.5.9).

Per pair: ``apply sm120`` exits 0; ``status sm120 --json`` exits 0 with every recipe and op
``applied`` or ``upstream`` (``upstream`` exactly where the release already has the change,
and then apply wrote nothing for it); ``revert sm120`` exits 0 and both trees are the
pristine releases again, byte for byte.  Then the blockers: the old gate-only
allreduce-fusion recipe (the layer gate alone) is refused on SGLang 0.5.14 and 0.5.20, whose
``_resolve_backend`` still raises on SM120, and reads ``blocked`` once its edit is made.

43 pairs take minutes, so a run samples them (the CI budget for the real tier is ~7 min):

* ``PATCHKIT_RELEASES_SEED=N`` picks the sample (default: a new one per run, the same on
  every pytest-xdist worker; it is printed in the skip reason and in every failure, so a
  failed pair replays with that seed).  The newest pair (SGLang 0.5.23) is always in it.
* ``PATCHKIT_ALL_RELEASES=1`` runs every pair."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest
from packaging.version import Version

from tests.conftest import OLD_FLAG, OLD_LAYER_GATE

pytestmark = pytest.mark.real

# (sglang, flashinfer).  The first 19: every SGLang release with the flashinfer-python its
# wheel pins (METADATA `Requires-Dist: flashinfer_python==X`, from 0.5.13 `flashinfer_python[cu13]==X`).
# The other 24: every FlashInfer release of 0.6.3..0.7.4 none of them pins (there is no
# 0.7.3), with SGLang 0.5.9.
PAIRS = [
    ("0.5.9", "0.6.3"),
    ("0.5.10", "0.6.7.post2"),
    ("0.5.10.post1", "0.6.7.post3"),
    ("0.5.11", "0.6.8.post1"),
    ("0.5.12", "0.6.11.post1"),
    ("0.5.12.post1", "0.6.11.post1"),
    ("0.5.13", "0.6.12"),
    ("0.5.13.post1", "0.6.12"),
    ("0.5.14", "0.6.12"),
    ("0.5.15", "0.6.12"),
    ("0.5.15.post1", "0.6.12"),
    ("0.5.16", "0.6.14"),
    ("0.5.17", "0.6.15.post1"),
    ("0.5.18", "0.6.17"),
    ("0.5.19", "0.6.18"),
    ("0.5.20", "0.6.18"),
    ("0.5.21", "0.6.18"),
    ("0.5.22", "0.7.1"),
    ("0.5.23", "0.7.2"),
    # FlashInfer releases no SGLang release pins:
    ("0.5.9", "0.6.4"),
    ("0.5.9", "0.6.5"),
    ("0.5.9", "0.6.6"),
    ("0.5.9", "0.6.7"),
    ("0.5.9", "0.6.7.post1"),
    ("0.5.9", "0.6.8"),
    ("0.5.9", "0.6.9"),
    ("0.5.9", "0.6.10"),
    ("0.5.9", "0.6.10.post1"),
    ("0.5.9", "0.6.11"),
    ("0.5.9", "0.6.11.post2"),
    ("0.5.9", "0.6.11.post3"),
    ("0.5.9", "0.6.13"),
    ("0.5.9", "0.6.15"),
    ("0.5.9", "0.6.16"),
    ("0.5.9", "0.6.16.post1"),
    ("0.5.9", "0.6.16.post2"),
    ("0.5.9", "0.6.16.post3"),
    ("0.5.9", "0.6.16.post4"),
    ("0.5.9", "0.6.18.post1"),
    ("0.5.9", "0.7.0"),
    ("0.5.9", "0.7.0.post1"),
    ("0.5.9", "0.7.2.post1"),
    ("0.5.9", "0.7.4"),
]
PINNED = dict(PAIRS[:19])  # sglang -> the flashinfer its wheel pins
NEWEST = ("0.5.23", "0.7.2")
SAMPLE = 3  # pairs per run, NEWEST included

ALL = os.environ.get("PATCHKIT_ALL_RELEASES") == "1"
# One seed for every pytest-xdist worker of a run (each imports this module on its own).
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
SEED = int(os.environ.get("PATCHKIT_RELEASES_SEED") or (int(_RUN, 16) % 10**6 if _RUN else random.randrange(10**6)))
SAMPLED = set(PAIRS) if ALL else {NEWEST, *random.Random(SEED).sample([p for p in PAIRS if p != NEWEST], SAMPLE - 1)}
REPLAY = f"PATCHKIT_RELEASES_SEED={SEED} replays this sample, PATCHKIT_ALL_RELEASES=1 runs every pair"

# Where upstream has the change: the FlashInfer half of allreduce-fusion from FlashInfer
# 0.6.17, autotune-cutlass and moe-backend-sm120 from SGLang 0.5.13.
FI_UPSTREAM = Version("0.6.17")
SG_UPSTREAM = Version("0.5.13")
SGLANG_UPSTREAM_RECIPES = {"autotune-cutlass", "moe-backend-sm120"}

# allreduce-fusion's ops per SGLang era, as (the first release after the era, op numbers as
# `patchkit show allreduce-fusion` lists them): every gate on the path, FlashInfer's two (#4, #5) always.
ALLREDUCE_OPS = [
    ("0.5.14", {1, 2, 3, 4, 5, 6}),  # layer gate, auto-enable in ServerArgs
    ("0.5.15", {1, 2, 3, 4, 5, 6, 7, 8}),  # + _resolve_backend
    ("0.5.19", {1, 2, 3, 4, 5, 7, 8, 9}),  # auto-enable in arg_groups/overrides.py
    ("0.5.21", {3, 4, 5, 10, 11, 12}),  # get_platform() flags
    ("0.5.22", {4, 5, 11, 12, 13, 14}),  # the gate in add_norm.py
    ("99", {4, 5, 11, 12, 13, 15}),  # flashinfer_ar_fusion_applies
]


def allreduce_ops(sg: str) -> set[int]:
    return next(ops for below, ops in ALLREDUCE_OPS if Version(sg) < Version(below))


def expected_state(recipe: str, engine: str, sg: str, fi: str) -> str:
    if engine == "flashinfer":
        return "upstream" if Version(fi) >= FI_UPSTREAM else "applied"
    return "upstream" if recipe in SGLANG_UPSTREAM_RECIPES and Version(sg) >= SG_UPSTREAM else "applied"


def differences(tree: Path, pristine: Path) -> list[str]:
    """Files of ``tree`` (outside ``.patchkit/``) missing, extra or not byte-identical to ``pristine``."""

    def files(root: Path) -> set[str]:
        out = set()
        for dirpath, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d != ".patchkit"]
            out.update(os.path.relpath(os.path.join(dirpath, n), root) for n in names)
        return out

    ours, theirs = files(tree), files(pristine)
    out = sorted(f"missing: {r}" for r in theirs - ours) + sorted(f"extra: {r}" for r in ours - theirs)
    for rel in sorted(ours & theirs):
        a, b = tree / rel, pristine / rel
        if os.path.samefile(a, b):  # a hard link the test tree still shares with the release
            continue
        if a.read_bytes() != b.read_bytes():
            out.append(f"differs: {rel}")
    return out


def site(op: dict) -> str:
    """An op's ``file::scope``, without the line (apply reports lines before its edits, status after)."""
    return op["location"].rpartition(":")[0] if op["line"] is not None else op["location"]


def physical(root: Path, engine: str, location: str) -> Path:
    """The file an op's ``location`` (``logical/file.py::scope:line``) names, in a package layout."""
    rel = location.split("::")[0]
    if engine == "flashinfer" and rel.startswith(("include/", "csrc/")):
        rel = "flashinfer/data/" + rel
    return root / rel


def pin_of(sglang_tree: Path) -> str:
    """The flashinfer-python version the sglang wheel's METADATA pins."""
    (meta,) = sglang_tree.glob("sglang-*.dist-info/METADATA")
    (pin,) = re.findall(r"^Requires-Dist: flashinfer_python(?:\[[^]]*\])?==(\S+)$", meta.read_text(), re.M)
    return pin


@pytest.mark.parametrize("sg,fi", PAIRS, ids=[f"sglang{s}-flashinfer{f}" for s, f in PAIRS])
def test_sm120_on_release_pair(sg, fi, tree, release_dir, run_cli):
    if (sg, fi) not in SAMPLED:
        pytest.skip(f"not in this run's sample of {SAMPLE} pairs ({REPLAY})")
    print(f"sglang {sg} + flashinfer {fi}: {REPLAY}")
    ctx = f"sglang {sg} + flashinfer {fi} ({REPLAY})"
    s, f = tree("sglang", sg, links=True), tree("flashinfer", fi, links=True)
    if sg in PINNED and PINNED[sg] == fi:
        assert pin_of(s) == fi, f"{ctx}: the sglang wheel pins flashinfer {pin_of(s)}: fix PAIRS"
    else:
        assert sg == "0.5.9" and fi not in PINNED.values(), f"{ctx}: fix PAIRS"
    t = ["-t", f"sglang={s}", "-t", f"flashinfer={f}"]

    code, out, err = run_cli("apply", "sm120", *t, "--json")
    assert code == 0, f"{ctx}: apply\n{out}{err}"
    applied = json.loads(out)

    code, out, err = run_cli("status", "sm120", *t, "--json")
    assert code == 0, f"{ctx}: status\n{out}{err}"
    status = json.loads(out)
    assert status["targets"]["sglang"]["version"] == sg and status["targets"]["flashinfer"]["version"] == fi
    want_recipes, got_recipes, want_ops, got_ops = {}, {}, {}, {}
    for r in status["recipes"]:
        assert r["blockers"] == [] and r["in_range"], f"{ctx}: {r['id']}: {r}"
        for op in r["ops"]:
            key = (r["id"], op["index"], site(op))
            want_ops[key], got_ops[key] = expected_state(r["id"], op["engine"], sg, fi), op["state"]
        ops = {want_ops[k] for k in want_ops if k[0] == r["id"]}
        want_recipes[r["id"]], got_recipes[r["id"]] = ("upstream" if ops == {"upstream"} else "applied"), r["state"]
    assert got_recipes == want_recipes, ctx
    assert got_ops == want_ops, ctx
    assert sorted(got_recipes) == ["allreduce-fusion", "autotune-cutlass", "max-running-requests", "moe-backend-sm120"]
    allreduce = {op["index"] for r in status["recipes"] if r["id"] == "allreduce-fusion" for op in r["ops"]}
    assert allreduce == allreduce_ops(sg), ctx

    # apply saw the same states, and wrote exactly the files of the ops it applied: nothing
    # for an op upstream already has.
    assert {(r["id"], op["index"], site(op)): op["state"] for r in applied["recipes"] for op in r["ops"]} == want_ops, (
        ctx
    )
    ours = [(r["id"], op) for r in applied["recipes"] for op in r["ops"] if op["state"] == "applied"]
    assert all(op["message"] == "applied now" for _, op in ours), ctx
    for r in applied["recipes"]:
        for op in r["ops"]:
            if op["state"] == "upstream":
                assert op["message"] != "applied now", f"{ctx}: {r['id']} op #{op['index']}"
    roots = {"sglang": s, "flashinfer": f}
    assert sorted(applied["written"]) == sorted(
        {str(physical(roots[op["engine"]], op["engine"], op["location"])) for _, op in ours}
    ), ctx
    if Version(fi) >= FI_UPSTREAM:
        assert differences(f, release_dir("flashinfer", fi)) == [], ctx

    code, out, err = run_cli("revert", "sm120", *t)
    assert code == 0, f"{ctx}: revert\n{out}{err}"
    assert differences(s, release_dir("sglang", sg)) == [], ctx
    assert differences(f, release_dir("flashinfer", fi)) == [], ctx


# -- blockers: the old gate-only allreduce-fusion recipe -----------------------------------------

# Ops #1-#3 of recipes/allreduce-fusion.toml without their `when` (the recipe as it was before
# SGLang 0.5.14: the layer gate alone, SGLang's half), and the current recipe's two blockers.
GATE_ONLY = """
id = "gate-only"
summary = "the old allreduce-fusion, SGLang's half: widen the layer gate alone"
rationale = "what allreduce-fusion did before SGLang 0.5.14 added a second gate"
bundles = []

[engines]
sglang = ">=0.5.9,<0.5.24"
{ops}
[[blockers]]
engine = "sglang"
file = "sglang/srt/layers/flashinfer_comm_fusion.py"
scope = "_resolve_backend"
when = {{ sglang = ">=0.5.14,<0.5.19" }}
contains = ["if not (is_sm90_supported() or is_sm100_supported()):", "requires SM90 or SM10X"]
message = "_resolve_backend raises ValueError on SM120 at warm-up; with only the layer gate widened the server crashes"

[[blockers]]
engine = "sglang"
file = "sglang/srt/layers/flashinfer_comm_fusion.py"
scope = "_resolve_backend"
when = {{ sglang = ">=0.5.19" }}
contains = ["if not (get_platform().is_sm90 or get_platform().is_sm100):", "requires SM90 or SM10X"]
message = "_resolve_backend raises ValueError on SM120 at warm-up; with only the layer gate widened the server crashes"
"""
# 0.5.19 on, the flags read get_platform() (the recipe's 0.5.19-0.5.20 variant).
PLATFORM_FLAG = """
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
[ops.locator]
anchor = "_is_sm100_supported = _is_cuda and get_platform().is_sm100"
position = "after"
[ops.params]
code = "_is_sm120_supported = _is_cuda and get_platform().is_sm120"
"""
FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"


def gate_only(tmp_path: Path, sg: str, blockers: bool = True) -> Path:
    """A recipes directory holding the gate-only recipe for ``sg`` (``blockers=False``: without them)."""
    text = GATE_ONLY.format(ops=(OLD_FLAG if Version(sg) < Version("0.5.19") else PLATFORM_FLAG) + OLD_LAYER_GATE)
    if not blockers:
        text = text[: text.index("[[blockers]]")]
    d = tmp_path / ("recipes" if blockers else "recipes-no-blockers")
    d.mkdir()
    (d / "gate-only.toml").write_text(text)
    return d


@pytest.mark.parametrize(
    "sg,blocker,line", [("0.5.14", "blocker #1", "is_sm90_supported()"), ("0.5.20", "blocker #2", "get_platform()")]
)
def test_the_gate_alone_is_blocked(sg, blocker, line, tree, release_dir, tmp_path, run_cli):
    s = tree("sglang", sg, links=True)
    t = ["-t", f"sglang={s}"]
    recipes = gate_only(tmp_path, sg)
    # The line of _resolve_backend's refusal in the release.
    src = (s / FUSION).read_text().splitlines()
    (at,) = [i for i, text in enumerate(src, 1) if text.strip().startswith("if not (") and line in text]

    code, out, err = run_cli("--recipes", str(recipes), "apply", "gate-only", "--ignore-range", *t)
    assert code == 1, out + err
    assert differences(s, release_dir("sglang", sg)) == [], "nothing may be written"
    assert f"gate-only is blocked by {blocker} at {s / FUSION}:{at}: _resolve_backend raises ValueError" in err
    assert "nothing was written" in err

    # The gate widened anyway (the recipe without its blockers): blocked, naming the blocker.
    code, out, err = run_cli("--recipes", str(gate_only(tmp_path, sg, blockers=False)), "apply", "gate-only", *t)
    assert code == 0, out + err
    assert "_is_sm120_supported" in (s / "sglang/srt/layers/communicator.py").read_text()
    code, out, err = run_cli("--recipes", str(recipes), "status", "gate-only", *t, "--json")
    assert code == 1, out + err
    (r,) = json.loads(out)["recipes"]
    assert r["state"] == "blocked", r
    assert {op["state"] for op in r["ops"]} == {"applied"}
    assert [(b["blocker"], b["file"], b["line"]) for b in r["blockers"]] == [(blocker, FUSION, at)]


def test_a_blocker_stands_outside_the_recipe_range(tree, tmp_path, run_cli):
    s = tree("sglang", "0.5.14", links=True)
    recipes = gate_only(tmp_path, "0.5.14")
    toml = recipes / "gate-only.toml"
    toml.write_text(toml.read_text().replace('sglang = ">=0.5.9,<0.5.24"', 'sglang = ">=0.5.9,<0.5.13"'))
    code, out, err = run_cli("--recipes", str(recipes), "status", "gate-only", "-t", f"sglang={s}", "--json")
    assert [b["blocker"] for b in json.loads(out)["recipes"][0]["blockers"]] == ["blocker #1"]
    code, out, err = run_cli("--recipes", str(recipes), "apply", "gate-only", "--ignore-range", "-t", f"sglang={s}")
    assert code == 1 and "blocked by blocker #1" in err, out + err
