"""`drift --across ... --html FILE`: the page is loaded in a real headless browser (Debian's
chromium, driven directly: --dump-dom after its script ran, --screenshot), and every cell it
shows holds the state `--json` gives, for each recipe and op on each release.

The screenshot is kept in tests/artifacts/ (git-ignored).  Without chromium the real test is
skipped with the reason, except under CI, where .ci/run installs it and its absence fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from patchkit.upstream import drift
from patchkit.upstream.drift_html import render, rows
from tests.conftest import ROOT

ARTIFACTS = ROOT / "tests" / "artifacts"


class Cells(HTMLParser):
    """Every <td> of the page: its data-* attributes, title and text; and the summary line."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict] = []
        self.summary = ""
        self._in: str | None = None
        self.fetches: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href"):
            if a.get(k):
                self.fetches.append(f"{tag} {k}={a[k]}")
        if tag == "link":
            self.fetches.append("link")
        if tag == "td":
            self.cells.append({**a, "text": ""})
            self._in = "td"
        elif a.get("id") == "summary":
            self._in = "summary"

    def handle_endtag(self, tag):
        if tag in ("td", "span"):
            self._in = None

    def handle_data(self, data):
        if self._in == "td":
            self.cells[-1]["text"] += data
        elif self._in == "summary":
            self.summary += data


def parse(html: str) -> Cells:
    p = Cells()
    p.feed(html)
    return p


def _matrix():
    op = {"kind": "list-element", "engine": "sglang", "file": "f.py", "line": 3, "location": "", "message": ""}

    def rec(state, ops, **kw):
        return {"id": "r", "state": state, "message": kw.get("msg", ""), "blockers": kw.get("blockers", []), "ops": ops}

    return {
        "1.0": [rec("pending", [{**op, "index": 1, "state": "pending"}])],
        "1.1": [rec("pending", [{**op, "index": 1, "state": "pending"}])],
        "1.2": [
            rec(
                "ambiguous",
                [{**op, "index": 1, "state": "ambiguous", "message": "2 places: a.py::f:3 (4.0), b.py::g:9 (4.0)"}],
                blockers=[{"blocker": "#1", "file": "x.py", "line": 7, "message": "raises on SM120"}],
            )
        ],
    }


def test_the_page_marks_transitions_and_carries_the_evidence_on_hover():
    m = _matrix()
    page = parse(render("sglang", "sglang==1.0..1.2", ["1.0", "1.1", "1.2"], m))
    by = {(c["data-recipe"], c["data-op"], c["data-version"]): c for c in page.cells}
    assert [by[("r", "", v)]["data-state"] for v in ("1.0", "1.1", "1.2")] == ["pending", "pending", "ambiguous"]
    assert [by[("r", "op #1", v)].get("class") for v in ("1.0", "1.1", "1.2")] == [None, None, "transition"]
    assert "2 places: a.py::f:3 (4.0), b.py::g:9 (4.0)" in by[("r", "op #1", "1.2")]["title"]
    assert "blocker #1 at x.py:7 raises on SM120" in by[("r", "", "1.2")]["title"]
    assert all(c["text"] == c["data-state"] for c in page.cells)
    assert page.fetches == []  # nothing to fetch: it works offline
    assert rows(["1.0"], m)[1] == ("r", "op #1", [("pending", "op #1 list-element: pending\nat f.py:3")])


def test_html_without_across_is_one_line(run_cli, tmp_path):
    code, out, err = run_cli("drift", "--to", "sglang==0.5.9", "--html", str(tmp_path / "d.html"))
    assert code == 2 and not (tmp_path / "d.html").exists()
    assert err.strip() == (
        "patchkit: error: --html draws the matrix of --across (hint: e.g. patchkit drift sm120 --across "
        "sglang==0.5.9..0.5.23 --html drift.html)"
    )


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); .ci/run installs it for CI")
    return exe


def browse(exe: str, page: Path, profile: Path, *what: str) -> subprocess.CompletedProcess:
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", f"--user-data-dir={profile}", "--window-size=1400,900", *what,
           page.as_uri()]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.real
@pytest.mark.xdist_group("drift")  # drift's release trees and verdicts are shared in the cache
def test_the_page_in_a_real_browser_shows_what_json_says(run_cli, tmp_path, monkeypatch):
    exe = chromium()
    listed = ["0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14"]
    monkeypatch.setattr(drift, "index_versions", lambda dist: list(listed))
    page = tmp_path / "drift.html"
    names = ("autotune-cutlass", "moe-backend-sm120")
    code, out, err = run_cli("drift", *names, "--across", "sglang==0.5.12..0.5.14", "--json", "--html", str(page))
    assert code == 0 and f"wrote {page}: 5 releases" in err, err
    doc = json.loads(out)

    dom = browse(exe, page, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0 and "<td" in dom.stdout, dom.stderr[-2000:]
    shown = parse(dom.stdout)
    assert shown.fetches == []
    # Its script ran, offline: it counted the rows, releases and transitions.
    transitions = sum(1 for c in shown.cells if c.get("class") == "transition")
    assert shown.summary == f"5 rows x 5 releases, {transitions} transitions"
    got = {(c["data-recipe"], c["data-op"], c["data-version"]): c["data-state"] for c in shown.cells}
    want = {}
    for v, results in doc["matrix"].items():
        for r in results:
            want[(r["id"], "", v)] = r["state"]
            for o in r["ops"]:
                want[(r["id"], f"op #{o['index']}", v)] = o["state"]
    assert {k: s for k, s in got.items() if s != "none"} == want
    assert got[("autotune-cutlass", "", "0.5.13")] == "upstream"
    # autotune-cutlass reads upstream from 0.5.13; at 0.5.14 it hands over to its variant
    # (op #1 leaves play, op #2 enters): a hand-over, no transition
    assert {c["data-version"] for c in shown.cells if c.get("class") == "transition"} == {"0.5.13"}
    handed = {(c["data-recipe"], c["data-op"], c["data-version"]) for c in shown.cells if c.get("class") == "handover"}
    assert {("autotune-cutlass", "op #1", "0.5.14"), ("autotune-cutlass", "op #2", "0.5.14")} <= handed, handed

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "drift-across.png"
    shot.unlink(missing_ok=True)
    p = browse(exe, page, tmp_path / "profile", f"--screenshot={shot}")
    assert p.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p.stderr[-2000:]


def _wide_matrix(n: int) -> tuple[list[str], dict[str, list[dict]]]:
    """``n`` releases of three recipes with long op files: wider than 1400 px laid out flat."""
    versions = [f"0.5.{i}" for i in range(9, 9 + n)]
    ops = [
        {"index": i, "kind": k, "engine": "sglang", "file": f, "line": 3, "location": "", "message": "",
         "state": "pending"}
        for i, (k, f) in enumerate([
            ("list-element", "sglang/srt/model_executor/runner/flashinfer_autotune.py"),
            ("or-operand", "sglang/srt/layers/flashinfer_comm_fusion.py"),
            ("set-default", "sglang/srt/server_args.py"),
        ], 1)
    ]  # fmt: skip
    recs = [{"id": rid, "state": "pending", "message": "", "blockers": [], "ops": ops} for rid in
            ("allreduce-fusion", "autotune-cutlass", "moe-backend-sm120")]  # fmt: skip
    with_ = {v: {"flashinfer": {"version": "0.6.3", "by": "required"}} for v in versions}
    return versions, {v: recs for v in versions}, with_


def test_rows_are_named_by_recipe_op_kind_and_file():
    versions, m, with_ = _wide_matrix(3)
    page = render("sglang", "sglang==0.5.9..0.5.11", versions, m, None, with_)
    assert (
        '<th class="row" title="autotune-cutlass op #2 or-operand sglang/srt/layers/flashinfer_comm_fusion.py">'
        'autotune-cutlass op #2 <span class="kind">or-operand</span> '
        '<span class="file">sglang/srt/layers/flashinfer_comm_fusion.py</span></th>'
    ) in page


@pytest.mark.real  # a browser: light (one page of 19 releases rendered here, no download)
def test_at_1400_px_the_newest_release_is_in_view_beside_the_row_names(tmp_path):
    exe = chromium()
    versions, m, with_ = _wide_matrix(19)
    page = tmp_path / "wide.html"
    page.write_text(render("sglang", "sglang==0.5.9..0.5.27", versions, m, None, with_))
    dom = browse(exe, page, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    import re

    seen = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r'<span id="layout"([^>]*)>', dom.stdout).group(1)))
    assert seen["newest"] == "0.5.27" and int(seen["viewport"]) <= 1400, seen
    # the newest column lies whole inside the viewport, right of the sticky row names
    assert int(seen["names-right"]) <= int(seen["newest-left"]) < int(seen["newest-right"]) <= int(seen["viewport"]), (
        seen
    )
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "drift-wide-1400.png"
    shot.unlink(missing_ok=True)
    p = browse(exe, page, tmp_path / "profile", f"--screenshot={shot}")
    assert p.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p.stderr[-2000:]


def test_a_variant_hand_over_is_not_a_transition():
    """At 1.2 the recipe hands over from op #1 to its variant's op #2: both rows change to or
    from `none` there, which is no change of either op's verdict (a dashed hand-over, not
    counted); op #2's own change at 1.3 is a transition."""
    op = {"kind": "set-default", "engine": "sglang", "file": "f.py", "line": 3, "location": "", "message": ""}

    def rec(*ops):
        return [{"id": "r", "state": ops[0][1], "message": "", "blockers": [], "ops": [
            {**op, "index": i, "state": st} for i, st in ops
        ]}]  # fmt: skip

    m = {
        "1.0": rec((1, "pending")),
        "1.1": rec((1, "pending")),
        "1.2": rec((2, "pending")),
        "1.3": rec((2, "upstream")),
    }
    page = parse(render("sglang", "sglang==1.0..1.3", ["1.0", "1.1", "1.2", "1.3"], m))
    by = {(c["data-op"], c["data-version"]): c.get("class") for c in page.cells}
    assert [by[("op #1", v)] for v in ("1.0", "1.1", "1.2", "1.3")] == [None, None, "handover", None]
    assert [by[("op #2", v)] for v in ("1.0", "1.1", "1.2", "1.3")] == [None, None, "handover", "transition"]
    assert [by[("", v)] for v in ("1.0", "1.1", "1.2", "1.3")] == [None, None, None, "transition"]
