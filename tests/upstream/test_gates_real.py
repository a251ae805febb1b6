"""`patchkit gates` on real releases: the gates the sm120 bundle widens read closed for 12.0
and open for 10.0 on SGLang 0.5.9 + FlashInfer 0.6.3, and open after `apply sm120`; and a
hand-checked sample of reported gates on SGLang 0.5.23, FlashInfer 0.7.4 and vLLM 0.33.0
(tests/data/gates_sample.json: each row read in the release's code and judged a real arch
gate, or not) still reads as it was checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.core.goals import cppeval
from patchkit.core.goals.device import Device
from patchkit.upstream import fetch
from patchkit.upstream import gates as G
from tests.conftest import ROOT, pk

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("gates-real")]
SM120, SM100 = Device.parse("12.0"), Device.parse("10.0")
SAMPLE = Path(__file__).parents[1] / "data" / "gates_sample.json"

BUNDLE_GATES = {  # (engine, path, function, condition)
    ("sglang", "sglang/srt/layers/communicator.py", "apply_flashinfer_allreduce_fusion",
     "_is_sm90_supported or _is_sm100_supported"),
    ("sglang", "sglang/srt/server_args.py", "ServerArgs._handle_model_specific_adjustments",
     "is_sm90_supported() or is_sm100_supported()"),
    ("flashinfer", "flashinfer/jit/comm.py", "gen_trtllm_comm_module", "supported_major_versions=[9, 10]"),
}  # fmt: skip
GUARD = "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
CUH = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"


def _scan(engine: str, root: Path, only=None):
    from patchkit.base.target import open_target

    t = open_target(engine, root)
    return G.scan(engine, t.root, t.layout, t.version, SM120, SM100, only=only)


def _keys(res) -> set:
    return {(res.engine, g.path, g.function, g.condition) for g in res.closed}


@pytest.mark.skipif(not cppeval.available(), reason="tree-sitter-cpp not installed")
def test_the_bundles_gates_close_for_sm120_and_open_after_apply(tree):
    sg, fi = tree("sglang", links=True), tree("flashinfer", links=True)
    before = {e: _scan(e, p) for e, p in (("sglang", sg), ("flashinfer", fi))}
    found = _keys(before["sglang"]) | _keys(before["flashinfer"])
    assert BUNDLE_GATES <= found, BUNDLE_GATES - found
    guards = [g for g in before["flashinfer"].closed if g.path == CUH]
    assert len(guards) == 13 and {g.condition for g in guards} == {GUARD}
    assert all(g.kind == "#if" and "__CUDA_ARCH__ is 1200" in g.why for g in guards)
    assert all(g.open_why.startswith("true for 10.0") for g in before["flashinfer"].closed)
    r = pk("apply", "sm120", "-t", f"sglang={sg}", "-t", f"flashinfer={fi}", cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    after = _keys(_scan("sglang", sg)) | _keys(_scan("flashinfer", fi))
    assert not (BUNDLE_GATES & after), BUNDLE_GATES & after
    assert not [k for k in after if k[1] == CUH]


def test_recipes_in_play_are_named_on_the_bundles_gates(tree):
    sg, fi = tree("sglang", links=True), tree("flashinfer", links=True)
    r = pk("gates", "--device", "12.0", "-t", f"sglang={sg}", "-t", f"flashinfer={fi}", "--json", cwd=ROOT)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    marked = {(g["path"], g["condition"]): g["recipes"] for t in doc["trees"] for g in t["closed"]}
    for _, path, _, cond in BUNDLE_GATES:
        assert marked[(path, cond)] == ["allreduce-fusion"], (path, cond)


def _release_scan(engine: str, version: str, only=None):
    root = fetch.release_tree(engine, version)
    return _scan(engine, root, only)


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("flashinfer", "0.7.4"), ("vllm", "0.33.0")])
def test_the_hand_checked_sample_still_reads_as_checked(engine, version):
    rows = [r for r in json.loads(SAMPLE.read_text())["rows"] if r["engine"] == engine]
    assert len(rows) >= 20
    # SGLang's and vLLM's whole trees (seconds, cold: only files that name a device check are
    # parsed), so each row is found by a whole scan; FlashInfer 0.7.4's sample files alone
    # (its whole tree parses 340 MB of CUDA and Python: half a minute cold, past CI's budget),
    # each scanned whole, so a row still reads as the whole tree's scan reads it.
    res = _release_scan(engine, version, {r["path"] for r in rows} if engine == "flashinfer" else None)
    got = {(g.path, g.line): g for g in res.closed}
    for row in rows:
        g = got.get((row["path"], row["line"]))
        assert g is not None, f"{row['path']}:{row['line']} is no longer reported closed"
        assert g.condition == row["condition"], (row, g.condition)
        assert g.function == row["function"], (row, g.function)
    real = sum(r["real"] for r in rows)
    assert real / len(rows) >= 0.9, f"{real}/{len(rows)} real arch gates"


def test_the_report_folds_a_releases_gates_and_keeps_every_number():
    """SGLang 0.5.23's arg_groups/ and kernels/ (68 closed gates; its arg groups repeat their
    checks): the folded report names each closed gate's number exactly once (what --draft --only
    reads), in fewer rows than --all, with a summary per component."""
    from patchkit.commands import gates as C

    root = fetch.release_tree("sglang", "0.5.23")
    dirs = ("sglang/srt/arg_groups", "sglang/kernels")
    only = {p.relative_to(root).as_posix() for d in dirs for p in (root / d).rglob("*") if p.is_file()}
    res = _scan("sglang", root, only)
    assert res.closed
    scans = [(res, 0.0)]
    fs = C.folds(C._numbers(scans, res))
    assert sorted(n for f in fs for n in f.numbers) == list(range(1, len(res.closed) + 1))
    assert sum(len(f.gates) for f in fs) == len(res.closed) and len(fs) < len(res.closed)
    folded, every = C.report(SM120, SM100, scans, False), C.report(SM120, SM100, scans, False, every=True)
    assert len(folded) < len(every)
    assert any(t.startswith("  sglang/kernels/ ") for t in folded)  # the summary's rows
    assert sum(t.startswith("    #") for t in every) == len(res.closed)


def test_a_runtime_check_reads_open_for_the_part_it_admits():
    """SGLang 0.5.23's TRT-LLM MoE launcher checks ``TVM_FFI_ICHECK(major == 10 || major == 12)``
    on the major it binds with cudaDeviceGetAttribute: open for 12.0 (not reported), closed for
    9.0 against 10.0."""
    from patchkit.base.target import open_target

    path = "sglang/kernels/ops/lora/moe/trtllm_lora_temp/data/csrc/trtllm_fused_moe_kernel_launcher.cu"
    root = fetch.release_tree("sglang", "0.5.23")
    assert "TVM_FFI_ICHECK(major == 10 || major == 12)" in (root / path).read_text()
    t = open_target("sglang", root)
    res = _scan("sglang", root, {path})
    assert res.parsed == 1 and not [g for g in res.closed if not g.kind.startswith("#")]
    old = G.scan("sglang", t.root, t.layout, t.version, Device.parse("9.0"), SM100, only={path})
    got = [(g.kind, g.condition, g.function) for g in old.closed if not g.kind.startswith("#")]
    assert ("check", "major == 10 || major == 12", "FusedMoeLauncher::init_common") in got, got


def test_flashinfer_generated_backends_read_as_a_few_mechanisms():
    """Three of FlashInfer 0.7.4's generated backends (a cake_jit.py of JIT specs each, and a
    kernel per .cu file, each guarded by ``#if __CUDA_ARCH__ == 1000``): hundreds of closed
    gates read as a few rows, one per arch list or guard however spelled, every number kept."""
    from patchkit.commands import gates as C

    root = fetch.release_tree("flashinfer", "0.7.4")
    dirs = ("cake_rmsnorm_train_backend", "cake_rmsnorm_det_train_backend", "cake_gdp_backend")
    only = {p.relative_to(root).as_posix() for d in dirs for p in (root / "flashinfer" / d).rglob("*") if p.is_file()}
    res = _scan("flashinfer", root, only)
    scans = [(res, 0.0)]
    mech, rest = C.mechanisms(C.folds(C._numbers(scans, res)))
    assert sorted(n for f in mech + rest for n in f.numbers) == list(range(1, len(res.closed) + 1))
    guards = [f for f in mech if f.gates[0].kind == "#if"]
    assert len(guards) == 1 and C.shape(guards[0].gates[0]) == ("#if", "__CUDA_ARCH__==1000")
    assert len({g.path for g in guards[0].gates}) > 250  # a kernel file each
    assert [C.shape(f.gates[0])[1] for f in mech if f.gates[0].kind == "arch-list"] == ["sm_100a,sm_103a"]  # 3 specs
    rows = [t for t in C.report(SM120, SM100, scans, False) if t.startswith("    #")]
    assert len(res.closed) > 600 and len(rows) < 15, (len(res.closed), len(rows))
