"""`patchkit gates --across` (patchkit/upstream/gates_across.py) on hand-made releases in
patchkit's cache, offline: which gates appeared, closed, opened (as written or widened), went
undecided or gone, release to release; a moved file followed only where unique; the JSON, the
page, the cache and the one-line errors."""

from __future__ import annotations

import json

import pytest

from patchkit.core.goals import cppeval
from patchkit.upstream import drift
from patchkit.upstream import gates as G
from patchkit.upstream import gates_across as GA
from tests.conftest import release_in_cache
from tests.upstream.test_drift_html import parse

pytestmark = pytest.mark.xdist_group("drift")

IMPORTS = "from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported\nimport torch\n"

A_10 = (
    IMPORTS
    + """
_major = torch.cuda.get_device_capability()[0]


def fusion(n):
    if is_sm90_supported() or is_sm100_supported():
        return launch(n)
    return 0


def backend():
    if is_sm100_supported():
        return trtllm()
    return "triton"


def jit():
    return gen_jit_spec("comm", archs=["sm_90a", "sm_100a"])


def narrowed():
    if is_sm100_supported() or is_sm120_supported():
        fast()


def decided():
    if _major == 10:
        fast()


def twin():
    if is_sm100_supported():
        fast()


def single():
    if is_sm100_supported():
        fast()


def logged():
    if is_sm100_supported():
        fast()
"""
)

A_11 = (
    IMPORTS
    + """
_major = read_major()


def fusion(n):
    if is_sm90_supported() or is_sm100_supported() or is_sm120_supported():
        return launch(n)
    return 0


def backend():
    return "triton"


def jit():
    return gen_jit_spec("comm", archs=["sm_90a", "sm_100a", "sm_120a"])


def narrowed():
    if is_sm100_supported():
        fast()


def decided():
    if _major == 10:
        fast()


def fresh():
    if is_sm100_supported():
        fresh_kernel()


def twin():
    if is_sm100_supported():
        fast()


def single():
    if is_sm100_supported() or is_sm120_supported():
        fast()


def logged():  # the gate is gone; what stands in an f-string is no gate, and no site of one
    log(f"sm100: {is_sm100_supported()}")
"""
)

# 1.2: a.py is gone; fresh() went to b.py (its function and condition are unique: moved);
# twin() went to b.py too, but c.py holds a twin() with the same condition: gone + appeared.
B_12 = (
    IMPORTS
    + """

def fresh():
    if is_sm100_supported():
        fresh_kernel()


def twin():
    if is_sm100_supported():
        fast()
"""
)
C = IMPORTS + "\n\ndef twin():\n    if is_sm100_supported():\n        other()\n"

CUH_10 = """\
__global__ void rms_norm_kernel(float* out) {
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  pdl_wait();
#endif
}
__global__ void other_kernel(float* out) {
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  pdl_wait();
#endif
}
"""
# 1.1: the bound is dropped in rms_norm_kernel (opened); other_kernel's guard is replaced by a
# look-alike that only tests for device code (not a widening of the gate: gone).
CUH_11 = """\
__global__ void rms_norm_kernel(float* out) {
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))
  pdl_wait();
#endif
}
__global__ void other_kernel(float* out) {
#if defined(__CUDA_ARCH__)
  pdl_wait();
#endif
}
"""


def _release(cache, v: str, files: dict, flashinfer: str = "") -> None:
    meta = {}
    if flashinfer:  # the flashinfer release it requires, as a real sglang wheel says so
        meta[f"sglang-{v}.dist-info/METADATA"] = (
            f"Metadata-Version: 2.1\nName: sglang\nVersion: {v}\nRequires-Dist: flashinfer_python=={flashinfer}\n"
        )
    release_in_cache(
        cache,
        "sglang",
        v,
        {"sglang/__init__.py": "", "sglang/version.py": f'__version__ = "{v}"\n', **files, **meta},
    )


@pytest.fixture
def releases(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    cuh = "sglang/jit_kernel/csrc/allreduce.cuh"
    _release(cache, "1.0", {"sglang/srt/a.py": A_10, "sglang/srt/c.py": C, cuh: CUH_10}, "0.6.3")
    _release(cache, "1.1", {"sglang/srt/a.py": A_11, "sglang/srt/c.py": C, cuh: CUH_11}, "0.6.3")
    _release(cache, "1.2", {"sglang/srt/b.py": B_12, "sglang/srt/c.py": C, cuh: CUH_11}, "0.7.4")
    monkeypatch.setattr(drift, "index_versions", lambda dist, kind="wheel": ["1.0", "1.1", "1.2"])
    (tmp_path / "cwd").mkdir()
    return tmp_path


def _across(run_cli, tmp_path, *extra):
    args = ("gates", "--device", "12.0", "--across", "sglang==1.0..1.2", "-j", "1", *extra)
    return run_cli(*args, cwd=tmp_path / "cwd")


def _doc(run_cli, tmp_path, *extra):
    code, out, err = _across(run_cli, tmp_path, "--json", *extra)
    assert out.strip().startswith("{"), err
    return code, json.loads(out), err


def _changes(doc, to):
    return sorted(
        (c["change"], c["file"], c["function"], c["condition"], tuple(c["lines"]))
        for c in doc["changes"]
        if c["to"] == to
    )


A, B = "sglang/srt/a.py", "sglang/srt/b.py"
CUH = "sglang/jit_kernel/csrc/allreduce.cuh"
GUARD = "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"


def test_appeared_closed_opened_undecided_and_gone_release_to_release(releases, run_cli):
    code, doc, _ = _doc(run_cli, releases)
    assert code == 1  # gates appeared and closed in the range
    assert doc["versions"] == ["1.0", "1.1", "1.2"] and doc["device"] == "12.0" and doc["compare"] == "10.0"
    want = [
        ("appeared", A, "fresh", "is_sm100_supported()", (32,)),
        ("closed", A, "narrowed", "is_sm100_supported()", (22,)),
        ("gone", A, "backend", "is_sm100_supported()", (14,)),
        ("opened", A, "fusion", "is_sm90_supported() or is_sm100_supported()", (8,)),
        ("opened", A, "jit", 'archs=["sm_90a", "sm_100a"]', (20,)),
        ("undecided", A, "decided", "_major == 10", (29,)),
        ("opened", A, "single", "is_sm100_supported()", (39,)),
        ("gone", A, "logged", "is_sm100_supported()", (44,)),
    ]
    if cppeval.available():
        want += [("gone", CUH, "other_kernel", GUARD, (7,)), ("opened", CUH, "rms_norm_kernel", GUARD, (2,))]
    assert _changes(doc, "1.1") == sorted(want)
    by = {(c["change"], c["function"]): c for c in doc["changes"] if c["to"] == "1.1"}
    assert by[("opened", "fusion")]["why"] == f"still stands at {A}:8 (as written or widened), not closed"
    assert by[("opened", "jit")]["why"] == f"still stands at {A}:18 (as written or widened), not closed"
    # one site: the operand and the `or` that widens it are not two
    assert by[("opened", "single")]["why"] == f"still stands at {A}:42 (as written or widened), not closed"
    assert by[("gone", "backend")]["why"] == "not in backend as written (removed or rewritten)"
    assert by[("closed", "narrowed")]["before"] == "open" and by[("appeared", "fresh")]["before"] == "none"
    assert by[("undecided", "decided")]["after"] == "unknown"
    why = f"unknown at {A}:27: unknown for 12.0: `read_major()` is no known check"
    assert by[("undecided", "decided")]["why"] == why
    if cppeval.available():
        assert by[("opened", "rms_norm_kernel")]["why"].startswith(f"still stands at {CUH}:2 ")
        assert by[("gone", "other_kernel")]["why"] == "not in other_kernel as written (removed or rewritten)"


def test_a_moved_file_is_followed_only_where_function_and_condition_are_unique(releases, run_cli):
    _, doc, _ = _doc(run_cli, releases)
    got = _changes(doc, "1.2")
    # fresh() moved a.py -> b.py: one gate, still closed; twin() has a namesake in c.py:
    # its move is not guessed (gone from a.py, appeared in b.py)
    assert ("moved", B, "fresh", "is_sm100_supported()", (6,)) in got
    assert ("gone", A, "twin", "is_sm100_supported()", (37,)) in got
    assert ("appeared", B, "twin", "is_sm100_supported()", (11,)) in got
    assert not [c for c in got if c[0] in ("opened", "closed") or c[2] == "fresh" and c[0] != "moved"]
    fresh = next(g for g in doc["gates"] if g["function"] == "fresh")
    assert fresh["file"] == B and fresh["files"] == [A, B]
    assert [fresh["states"][v]["state"] for v in doc["versions"]] == ["none", "closed", "closed"]
    assert [fresh["states"][v]["path"] for v in ("1.1", "1.2")] == [A, B]
    # c.py's twin is unchanged throughout: in the matrix, never in the changes
    c_twin = next(g for g in doc["gates"] if g["file"] == "sglang/srt/c.py")
    assert [c_twin["states"][v]["state"] for v in doc["versions"]] == ["closed"] * 3
    assert not [c for c in doc["changes"] if c["file"] == "sglang/srt/c.py"]
    assert doc["releases"]["1.2"]["changes"] == {"appeared": 1, "gone": 2, "moved": 1}  # a.py's narrowed() went with it


def test_the_report_for_people_names_each_pair_and_change(releases, run_cli):
    code, out, err = _across(run_cli, releases)
    assert code == 1, err
    # drift's pairing: the flashinfer each release requires, and how to scan those
    assert (
        "flashinfer: the release each sglang release requires (its Requires-Dist): 0.6.3 (1.0, 1.1), 0.7.4 (1.2); "
        "not scanned here: patchkit gates --device 12.0 --across flashinfer==0.6.3..0.7.4\n"
    ) in out
    assert "release   closed unknown  |  appeared    closed    opened undecided      gone     moved\n" in out
    cpp = cppeval.available()  # the .cuh's guards: one opened, one gone
    assert f"1.1            4       1  |         1         1         {3 + cpp}         1         {2 + cpp}\n" in out
    assert "sglang 1.0: " in err and "(scanned in" in err
    assert "1.0 -> 1.1:" in out and "1.1 -> 1.2:" in out
    assert "  opened (still there, no longer read closed): " in out
    assert f"    {A}\n" in out
    assert "        8 (1.0)  fusion: is_sm90_supported() or is_sm100_supported()" in out
    assert "        6 (1.2)  fresh: is_sm100_supported()\n              its file moved from sglang/srt/a.py" in out


def test_a_repeat_scans_and_parses_nothing_and_says_the_same(releases, run_cli, monkeypatch):
    first = _across(run_cli, releases, "--json")

    def scanned(*a, **k):
        raise AssertionError("scanned again")

    monkeypatch.setattr(G, "scan", scanned)
    monkeypatch.setattr(GA, "_PyFile", scanned)  # where each gate stands is cached too: no file is parsed
    monkeypatch.setattr(GA, "_CppFile", scanned)
    again = _across(run_cli, releases, "--json")
    assert again[0] == first[0]
    a, b = json.loads(first[1]), json.loads(again[1])
    assert all(r["cached"] for r in b["releases"].values()) and not any(r["cached"] for r in a["releases"].values())
    for r in (*a["releases"].values(), *b["releases"].values()):
        r.pop("cached")
    assert a == b
    assert "from the cache" in again[2]


def test_the_page_shows_what_json_says(releases, run_cli):
    page = releases / "gates.html"
    code, doc, err = _doc(run_cli, releases, "--html", str(page))
    assert f"wrote {page}: {len(doc['gates'])} gates x 3 releases" in err
    shown = parse(page.read_text())
    assert shown.fetches == []
    got = {(int(c["data-gate"]), c["data-version"]): c for c in shown.cells}
    assert len(got) == 3 * len(doc["gates"])
    for n, g in enumerate(doc["gates"]):
        for v in doc["versions"]:
            assert got[(n, v)]["data-state"] == got[(n, v)]["text"] == g["states"][v]["state"]
    fusion = next(n for n, g in enumerate(doc["gates"]) if g["function"] == "fusion")
    # closed, then open (widened), then none (a.py is gone in 1.2): two transitions
    assert [got[(fusion, v)]["data-state"] for v in doc["versions"]] == ["closed", "open", "none"]
    assert [got[(fusion, v)].get("class") for v in doc["versions"]] == [None, "transition", "transition"]
    assert "still stands" not in got[(fusion, "1.1")]["title"]
    assert got[(fusion, "1.1")]["title"].startswith(f"1.1: open\nat {A}:8")
    assert got[(fusion, "1.0")]["title"].startswith(f"1.0: closed\nat {A}:8\nif: ")
    html = page.read_text()
    assert "<h2>Changes</h2>" in html and "1.0 &rarr; 1.1: <b>opened</b>" in html
    assert "position:sticky" in html and "w.scrollLeft=w.scrollWidth" in html
    assert doc["with"]["1.2"] == {"flashinfer": {"version": "0.7.4", "by": "required"}}
    row = '<tr class="with"><th class="row">with flashinfer</th><th data-engine="flashinfer" data-version="1.0"'
    assert row in html


def test_bad_input_is_one_line_exit_2(releases, run_cli, monkeypatch):
    cases = [
        (("--across", "sglang==1.0..1.2", "--to", "sglang==1.0"), "--across sglang==1.0..1.2 scans releases from"),
        (("--to", "sglang==1.0", "--html", "x.html"), "--html draws the matrix of --across"),
        (("--across", "sglang=1.0..1.2"), "--across 'sglang=1.0..1.2': expected ENGINE==A..B"),
        (("--across", "sglang==1.1..1.1"), "the index lists one sglang release in that range (1.1)"),
    ]
    for args, said in cases:
        code, out, err = run_cli("gates", "--device", "12.0", *args, cwd=releases / "cwd")
        assert code == 2 and out == "", (args, out, err)
        assert err.count("\n") == 1 and said in err and "Traceback" not in err, (args, err)
    assert not (releases / "cwd" / "x.html").exists()


def test_no_gate_appearing_or_closing_exits_0(tmp_path, monkeypatch, run_cli):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    _release(cache, "1.0", {"sglang/srt/a.py": A_10})
    _release(cache, "1.1", {"sglang/srt/a.py": A_10.replace("return trtllm()", "return trtllm_v2()")})
    monkeypatch.setattr(drift, "index_versions", lambda dist, kind="wheel": ["1.0", "1.1"])
    code, out, err = run_cli("gates", "--device", "12.0", "--across", "sglang==1.0..1.1", "-j", "1", cwd=tmp_path)
    assert code == 0, err
    assert "no gate appeared, closed, opened or went away across the range" in out


BOTH_10 = (
    IMPORTS
    + """

def both(flag):
    if is_sm100_supported():
        a()
    if flag and is_sm100_supported():
        b()
"""
)


def test_a_gate_removed_beside_its_namesake_is_gone_not_opened(tmp_path, monkeypatch, run_cli):
    """Two gates of one identity (the same condition in one function), one removed: the
    other still stands but is itself read closed, so it is no open site of the first."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    _release(cache, "1.0", {A: BOTH_10})
    _release(cache, "1.1", {A: BOTH_10.replace("    if is_sm100_supported():\n        a()\n", "")})
    monkeypatch.setattr(drift, "index_versions", lambda dist, kind="wheel": ["1.0", "1.1"])
    code, out, err = run_cli("gates", "--device", "12.0", "--across", "sglang==1.0..1.1", "--json", cwd=tmp_path)
    doc = json.loads(out)
    assert code == 0, err
    ((g,),) = [doc["gates"]]
    assert [(g["states"][v]["closed"], g["states"][v]["open"]) for v in ("1.0", "1.1")] == [(2, 0), (1, 0)]
    (c,) = doc["changes"]
    assert (c["change"], c["count"], c["lines"], c["exact"]) == ("gone", 1, [6, 8], False)
    human = run_cli("gates", "--device", "12.0", "--across", "sglang==1.0..1.1", cwd=tmp_path)[1]
    assert "6,8 (1.0) (one of these lines)  both: is_sm100_supported()" in human


def test_a_long_scan_off_a_terminal_says_so(releases, run_cli, monkeypatch):
    import time

    from patchkit.base import progress

    monkeypatch.setattr(progress, "EVERY", 0.05)
    real = G.scan

    def slow(*a, **k):
        time.sleep(0.2)
        return real(*a, **k)

    monkeypatch.setattr(G, "scan", slow)
    code, out, err = _across(run_cli, releases)
    assert code == 1
    assert "patchkit: still scanning sglang 1.0 (1/3) (0 s)" in err and "still scanning sglang 1.2 (3/3)" in err


def test_the_scan_cache_key_follows_the_engine_definition_and_devices(monkeypatch):
    """A project's own predicates (or layouts), another device, --vendored or `only` make
    another key: a cached scan is never read for inputs it was not made from."""
    from patchkit.base import engines
    from patchkit.core.goals.device import Device

    d, c = Device.parse("12.0"), Device.parse("10.0")
    base = GA.scan_key("sglang", "1.0", d, c, False, None)
    assert base == GA.scan_key("sglang", "1.0", d, c, False, None)
    others = {
        GA.scan_key("sglang", "1.1", d, c, False, None),
        GA.scan_key("sglang", "1.0", Device.parse("12.1"), c, False, None),
        GA.scan_key("sglang", "1.0", d, Device.parse("9.0"), False, None),
        GA.scan_key("sglang", "1.0", d, c, True, None),
        GA.scan_key("sglang", "1.0", d, c, False, {"sglang/srt/a.py"}),
    }
    info = engines.ENGINES["sglang"]
    more = info._replace(predicates=(*info.predicates, ("is_sm130_supported()", "major == 13", "")))
    monkeypatch.setattr(engines, "ENGINES", {**{e: engines.ENGINES[e] for e in engines.ENGINES}, "sglang": more})
    others.add(GA.scan_key("sglang", "1.0", d, c, False, None))
    assert base not in others and len(others) == 6


RUNTIME_10 = """\
void launch_check(int dev) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  TORCH_CHECK(major == 10, "SM100 only");
}
void other_check(int dev) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  TORCH_CHECK(major == 10, "SM100 only");
}
"""


@pytest.mark.skipif(not cppeval.available(), reason="tree-sitter-cpp not installed")
def test_a_runtime_check_widened_is_opened_one_rewritten_is_gone(tmp_path, monkeypatch, run_cli):
    """A run-time C++ check (cppgates.py) followed across releases: ``major == 10`` widened to
    ``major == 10 || major == 12`` still stands (opened); one rewritten to a macro the scan
    does not read as the same check is gone, never opened."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    cu = "sglang/jit_kernel/csrc/moe.cu"
    _release(cache, "1.0", {cu: RUNTIME_10})
    widened = RUNTIME_10.replace("TORCH_CHECK(major == 10,", "TORCH_CHECK(major == 10 || major == 12,", 1)
    _release(cache, "1.1", {cu: widened.replace("TORCH_CHECK(major == 10, ", "TORCH_CHECK(IS_SM100(major), ")})
    monkeypatch.setattr(drift, "index_versions", lambda dist, kind="wheel": ["1.0", "1.1"])
    code, out, err = run_cli("gates", "--device", "12.0", "--across", "sglang==1.0..1.1", "--json", cwd=tmp_path)
    doc = json.loads(out)
    got = sorted((c["change"], c["function"], c["condition"], tuple(c["lines"])) for c in doc["changes"])
    assert got == [("gone", "other_check", "major == 10", (9,)), ("opened", "launch_check", "major == 10", (4,))]
    (opened,) = [c for c in doc["changes"] if c["change"] == "opened"]
    assert opened["why"] == f"still stands at {cu}:4 (as written or widened), not closed"
