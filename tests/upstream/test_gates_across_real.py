"""`patchkit gates --across` on real releases the tier already downloads (FlashInfer 0.6.3 and
0.7.4, SGLang 0.5.9 and 0.5.23), the index's listing fixed to those two, and the scan kept to
a few files (`only`): each transition asserted here was read in the releases' code.  And the
page in a real browser: at 1400 px the newest release is in view beside the gate column."""

from __future__ import annotations

import json
import re

import pytest

from patchkit.commands.gates_across import run
from patchkit.core.goals import cppeval
from patchkit.core.goals.device import Device
from patchkit.upstream import drift
from patchkit.upstream.gates_across import Across, Release, Row
from patchkit.upstream.gates_across_html import render
from tests.upstream.test_drift_html import ARTIFACTS, browse, chromium

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("drift")]
SM120, SM100 = Device.parse("12.0"), Device.parse("10.0")


def _across(capsys, monkeypatch, spec: str, listed: list[str], only: set) -> tuple[int, dict]:
    monkeypatch.setattr(drift, "index_versions", lambda dist, kind="wheel": list(listed))
    capsys.readouterr()
    code = run(spec, SM120, SM100, True, None, False, 1, only=only)
    return code, json.loads(capsys.readouterr().out)


def _change(doc: dict, change: str, file: str, function: str) -> dict:
    (c,) = [c for c in doc["changes"] if (c["change"], c["file"], c["function"]) == (change, file, function)]
    return c


@pytest.mark.skipif(not cppeval.available(), reason="tree-sitter-cpp not installed")
def test_flashinfer_0_7_4_opened_the_comm_gates_and_closed_mnnvl(capsys, monkeypatch):
    """Read in the releases' code:
    - flashinfer/jit/comm.py, gen_trtllm_comm_module: ``supported_major_versions=[9, 10]`` at
      0.6.3:61 is ``[9, 10, 12]`` at 0.7.4:200 (a list element added): opened;
    - the same file, gen_trtllm_mnnvl_comm_module: no arch list in 0.6.3 (lines 33-39), and
      ``supported_major_versions=[9, 10]`` at 0.7.4:49 ("RTX/consumer (SM12x) are intentionally
      excluded here"): appeared;
    - include/flashinfer/comm/trtllm_allreduce.cuh, rms_norm_kernel: ``#if (defined(__CUDA_ARCH__)
      && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))`` at 0.6.3:417 and 455 is
      ``(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))`` at 0.7.4:417 and 455 (the SM120
      bound dropped): opened."""
    cuh = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
    code, doc = _across(capsys, monkeypatch, "flashinfer==0.6.3..0.7.4", ["0.6.3", "0.7.4"],
                        {"flashinfer/jit/comm.py", cuh})  # fmt: skip
    assert code == 1 and doc["versions"] == ["0.6.3", "0.7.4"]
    jit = _change(doc, "opened", "flashinfer/jit/comm.py", "gen_trtllm_comm_module")
    assert (jit["condition"], jit["lines"]) == ("supported_major_versions=[9, 10]", [61])
    assert jit["why"] == "still stands at flashinfer/jit/comm.py:200 (as written or widened), not closed"
    mnnvl = _change(doc, "appeared", "flashinfer/jit/comm.py", "gen_trtllm_mnnvl_comm_module")
    assert (mnnvl["condition"], mnnvl["lines"], mnnvl["before"]) == ("supported_major_versions=[9, 10]", [49], "none")
    rms = _change(doc, "opened", "include/flashinfer/comm/trtllm_allreduce.cuh", "rms_norm_kernel")
    assert rms["condition"] == "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
    assert (rms["lines"], rms["count"]) == ([417, 455], 2)
    assert rms["why"].startswith(f"still stands at {cuh}:417,455 ")
    # the whole file's guards opened: none of them closed in 0.7.4, none called gone
    assert not [c for c in doc["changes"] if c["file"].endswith(".cuh") and c["change"] != "opened"]
    assert doc["releases"]["0.7.4"]["changes"] == {"appeared": 1, "opened": 14}


def test_sglang_0_5_23_rewrote_its_checks_on_get_platform(capsys, monkeypatch):
    """Read in the releases' code: sglang/srt/layers/quantization/modelopt_quant.py's module
    level ``if is_cuda() and (not is_sm120_supported()) and ...`` at 0.5.9:146 reads
    ``(not get_platform().is_sm120)`` at 0.5.23:187, and FlashInferAttnBackend.__init__'s
    ``if is_sm100_supported():`` (flashinfer_backend.py, 0.5.9:243) reads ``if
    get_platform().is_sm100:`` at 0.5.23:502: each a rewrite, so gone and appeared (a gate
    is its condition as written: never matched to a look-alike)."""
    quant = "sglang/srt/layers/quantization/modelopt_quant.py"
    attn = "sglang/srt/layers/attention/flashinfer_backend.py"
    code, doc = _across(capsys, monkeypatch, "sglang==0.5.9..0.5.23", ["0.5.9", "0.5.23"], {quant, attn})
    assert code == 1
    gone = _change(doc, "gone", quant, "")
    assert (gone["condition"], gone["lines"]) == ("not is_sm120_supported()", [146])
    assert gone["why"] == "not in the module as written (removed or rewritten)"
    new = _change(doc, "appeared", quant, "")
    assert (new["condition"], new["lines"]) == ("not get_platform().is_sm120", [187])
    gone = _change(doc, "gone", attn, "FlashInferAttnBackend.__init__")
    assert (gone["condition"], gone["lines"]) == ("is_sm100_supported()", [243])
    new = _change(doc, "appeared", attn, "FlashInferAttnBackend.__init__")
    assert (new["condition"], new["lines"]) == ("get_platform().is_sm100", [502])
    assert not [c for c in doc["changes"] if c["change"] in ("opened", "closed", "moved")]


def _wide(n: int) -> Across:
    """``n`` releases of three gates with long files and conditions: wider than 1400 px."""
    versions = [f"0.5.{i}" for i in range(9, 9 + n)]
    cond = "get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm100_or_sm110"
    rows = []
    for i, f in enumerate(["sglang/srt/arg_groups/model_overrides/deepseek_v2.py", "sglang/srt/server_args.py",
                           "sglang/srt/layers/attention/flashinfer_backend.py"]):  # fmt: skip
        key = (f, "ServerArgs._handle_model_specific_adjustments", cond)
        cell = {"state": "closed", "closed": 1, "unknown": 0, "open": 0, "path": f, "lines": [10 + i], "why": "x"}
        rows.append(Row([(0, key)], "if", [dict(cell) for _ in versions]))
    scan = {"closed": [], "unknown": [], "files": 0, "parsed": 0, "vendored_skipped": 0, "cpp": True, "errors": []}
    releases = [Release(v, ARTIFACTS, scan, True, 0.0, {}) for v in versions]
    return Across("sglang", SM120, SM100, versions, releases, rows, [])


def test_at_1400_px_the_newest_release_is_in_view_beside_the_gate_column(tmp_path):
    exe = chromium()
    page = tmp_path / "wide.html"
    page.write_text(render(_wide(40), "sglang==0.5.9..0.5.48"))  # wider than the window: scrolled
    dom = browse(exe, page, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    seen = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r'<span id="layout"([^>]*)>', dom.stdout).group(1)))
    assert seen["newest"] == "0.5.48" and int(seen["viewport"]) <= 1400, seen
    assert int(seen["names-right"]) <= int(seen["newest-left"]) < int(seen["newest-right"]) <= int(seen["viewport"]), (
        seen
    )
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "gates-across-1400.png"
    shot.unlink(missing_ok=True)
    p = browse(exe, page, tmp_path / "profile", f"--screenshot={shot}")
    assert p.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p.stderr[-2000:]
