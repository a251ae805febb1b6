"""`patchkit gates --draft` on real releases: the gates behind a published SM120 patch (the
sm120 bundle's allreduce-fusion, on SGLang 0.5.9 + FlashInfer 0.6.3: the communicator's
layer gate, the auto-enable condition in server_args.py, FlashInfer's JIT arch list
`supported_major_versions=[9, 10]` and the 13 `__CUDA_ARCH__ < 1200` guards of
trtllm_allreduce.cuh) are drafted from the scan; the drafted recipe applies to a copy of the
release, reads `applied`, opens the gates, makes the same device code as the published
edit, and reverts byte for byte."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from patchkit.core.goals import cppeval
from tests.upstream.test_gates_real import BUNDLE_GATES, CUH, GUARD, _scan

pytestmark = [
    pytest.mark.real,
    pytest.mark.xdist_group("gates-real"),
    pytest.mark.skipif(not cppeval.available(), reason="tree-sitter-cpp not installed"),
]

# The guards' lines in FlashInfer 0.6.3 (read in the release; the scan reports each of them)
GUARD_LINES = (417, 455, 485, 533, 711, 895, 950, 991, 1053, 1207, 1265, 1335, 1444)
ONLY = [
    "sglang/srt/layers/communicator.py:95",
    "sglang/srt/server_args.py:1691",
    "flashinfer/jit/comm.py:61",
    *(f"include/flashinfer/comm/trtllm_allreduce.cuh:{n}" for n in GUARD_LINES),
]


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".patchkit" not in p.parts}


def test_draft_of_the_allreduce_fusion_gates_applies_reads_applied_and_reverts(tree, run_cli, tmp_path):
    sg, fi = tree("sglang", links=True), tree("flashinfer", links=True)
    t = ("-t", f"sglang={sg}", "-t", f"flashinfer={fi}")
    touched = {"sglang": ["sglang/srt/layers/communicator.py", "sglang/srt/server_args.py"],
               "flashinfer": ["flashinfer/jit/comm.py", CUH]}  # fmt: skip
    roots = {"sglang": sg, "flashinfer": fi}
    listing = {e: _listing(root) for e, root in roots.items()}
    pristine = {(e, f): (roots[e] / f).read_bytes() for e, fs in touched.items() for f in fs}
    code, out, err = run_cli(
        "gates", "--device", "12.0", *t, "--draft", "ar-draft", "--only", ",".join(ONLY), "-o", "rec", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["written"] and not doc["refused"] and len(doc["gates"]) == 16
    assert [c["check"] for c in doc["checks"] if c["ok"]] == ["check", "pending", "plan", "applied"]
    recipe = tomllib.loads((tmp_path / "rec" / "ar-draft.toml").read_text())
    ops = {(o["kind"], o["file"]): o for o in recipe["ops"]}
    # the op kinds the published recipe uses, on the same operands
    layer = ops[("or-operand", "sglang/srt/layers/communicator.py")]
    assert layer["scope"] == "apply_flashinfer_allreduce_fusion"
    assert layer["locator"]["operands"] == ["_is_sm90_supported", "_is_sm100_supported"]
    assert layer["params"]["operand"] == "_is_sm120_supported"
    assert ops[("insert", "sglang/srt/layers/communicator.py")]["locator"] == {
        "anchor": "_is_sm100_supported = _is_cuda and is_sm100_supported()",
        "position": "after",
    }
    assert ops[("ensure-import", "sglang/srt/layers/communicator.py")]["params"]["name"] == "is_sm120_supported"
    assert ops[("or-operand", "sglang/srt/server_args.py")]["params"]["operand"] == "is_sm120_supported()"
    assert ops[("list-element", "flashinfer/jit/comm.py")]["params"]["element"] == "12"
    assert ops[("list-element", "flashinfer/jit/comm.py")]["jit_modules"] == ["trtllm_comm"]  # what verify builds
    assert all("identity" in o for o in recipe["ops"] if o["kind"] in ("or-operand", "list-element", "insert"))
    assert "3,700 to 236 tok/s" in recipe["rationale"] and "patchkit verify ar-draft --build" in recipe["rationale"]

    r = ("--recipes", str(tmp_path / "rec"))
    code, out, err = run_cli("apply", "ar-draft", *r, *t, cwd=tmp_path)
    assert code == 0, out + err
    code, out, err = run_cli("status", "ar-draft", *r, *t, "--json", cwd=tmp_path)
    assert code == 0, out + err
    (rec,) = json.loads(out)["recipes"]
    assert rec["state"] == "applied" and {op["state"] for op in rec["ops"]} == {"applied"}
    # the gates read open now, and the device code is the published edit's
    closed = {
        (e, g.path, g.function, g.condition) for e, fs in touched.items() for g in _scan(e, roots[e], set(fs)).closed
    }
    assert not (BUNDLE_GATES & closed), BUNDLE_GATES & closed
    assert not [k for k in closed if k[1] == CUH]
    want = pristine[("flashinfer", CUH)].replace(GUARD.encode(), b"(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))")
    assert (fi / CUH).read_bytes() == want
    code, out, err = run_cli("revert", "ar-draft", *r, *t, cwd=tmp_path)
    assert code == 0, out + err
    for (e, f), data in pristine.items():
        assert (roots[e] / f).read_bytes() == data, f  # byte for byte
    assert {e: _listing(root) for e, root in roots.items()} == listing  # and nothing else left behind
