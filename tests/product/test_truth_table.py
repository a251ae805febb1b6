"""The truth table (tests/truth_table.toml) against ``patchkit drift --across ... --json``.

The table holds the verdict every op of the sm120 bundle should get on every pristine
release, written from upstream's code; this compares every cell with what patchkit says:
the state, and for a cell with evidence (``file:line`` where upstream has the edit) that
patchkit places the op in that file and scope, and that the line still shows what the
table says it shows.  Each release also reports exactly the ops the table has cells for,
the ops of the other engine (judged on its pinned release) as their cells for that release
say, and no blocker the table does not list.

The SGLang axis (19 releases) runs whole every time.  The FlashInfer axis (36 releases)
costs ~4 s a release cold (unpacking a 20 MB wheel, then judging), so a run judges a
seeded sample: 0.6.3, 0.6.16.post4, 0.6.17 and 0.7.4 always, and FI_EXTRA others.

* ``PATCHKIT_RELEASES_SEED=N`` picks the sample (printed in the skip reasons).
* ``PATCHKIT_ALL_RELEASES=1`` judges every FlashInfer release.

A cell with ``xfail = "why"`` is a disagreement read from the code and reported; it is a
strict xfail, so the cell fails once patchkit agrees with the table.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import json
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from patchkit.base import sparse
from patchkit.upstream import drift
from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.xdist_group("truth-table")

TABLE = Path(__file__).parents[1] / "truth_table.toml"
STATES = ("pending", "upstream", "applied", "moved", "missing", "ambiguous")
NEAR = 40  # lines: at module level (or in C++), the evidence is this close to patchkit's line

ALWAYS_FI = ("0.6.3", "0.6.16.post4", "0.6.17", "0.7.4")
FI_EXTRA = 2
ALL = os.environ.get("PATCHKIT_ALL_RELEASES") == "1"
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
SEED = int(os.environ.get("PATCHKIT_RELEASES_SEED") or (int(_RUN, 16) % 10**6 if _RUN else random.randrange(10**6)))
REPLAY = f"PATCHKIT_RELEASES_SEED={SEED} replays this sample, PATCHKIT_ALL_RELEASES=1 judges every release"

real = pytest.mark.real


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One expectation: an op (``what`` = "op #n") or a blocker ("blocker #n") on one release."""

    recipe: str
    what: str
    engine: str
    release: str
    state: str = ""  # "" for a blocker (it stands)
    file: str = ""
    line: Optional[int] = None
    shows: str = ""
    xfail: str = ""

    @property
    def name(self) -> str:
        return f"{self.recipe} {self.what} on {self.engine} {self.release}"

    @property
    def evidence(self) -> str:
        return f"{self.file}:{self.line}" if self.file else ""


@dataclass
class Table:
    releases: dict[str, list[str]]
    ops: dict[tuple[str, str], dict[tuple[str, str], Cell]]  # (engine, release) -> (recipe, "op #n") -> cell
    blockers: dict[tuple[str, str], dict[tuple[str, str], Cell]]


class TableError(ValueError):
    pass


def _span(releases: list[str], spec: str, where: str) -> list[str]:
    a, _, b = spec.partition("..")
    b = b or a
    for v in (a, b):
        if v not in releases:
            raise TableError(f"{where}: {v!r} is not in [releases]")
    i, j = releases.index(a), releases.index(b)
    if i > j:
        raise TableError(f"{where}: {spec!r} runs backwards")
    return releases[i : j + 1]


def _cells(raw: dict, what: str, where: str, releases: dict, op: bool) -> list[Cell]:
    engine = raw.get("engine")
    if engine not in releases:
        raise TableError(f"{where}: engine {engine!r} has no [releases] list")
    out, seen = [], set()
    for k, row in enumerate(raw.get("cell", ()), 1):
        at = f"{where} cell #{k}"
        vs = _span(releases[engine], row.get("releases", ""), at)
        state = row.get("state", "")
        if op and state not in STATES:
            raise TableError(f"{at}: state {state!r} is not one of {', '.join(STATES)}")
        evidence = "file" in row or "line" in row or "lines" in row
        if (op and state != "pending" or not op) and not ("file" in row and ("line" in row or "lines" in row)):
            raise TableError(f"{at}: a cell that is not pending carries its evidence: file and line")
        if op and state == "pending" and evidence:
            raise TableError(f"{at}: a pending cell carries no evidence")
        lines = row.get("lines", {})
        if set(lines) - set(vs):
            raise TableError(f"{at}: lines for releases outside the row: {sorted(set(lines) - set(vs))}")
        for v in vs:
            if v in seen:
                raise TableError(f"{at}: {v} has two rows")
            seen.add(v)
            line = lines.get(v, row.get("line"))
            if evidence and line is None:
                raise TableError(f"{at}: no line for {v}")
            file, shows, xfail = row.get("file", ""), row.get("shows", ""), row.get("xfail", "")
            out.append(Cell(raw["recipe"], what, engine, v, state, file, line, shows, xfail))
    return out


def load(path: Path = TABLE) -> Table:
    """The table, every cell expanded to one release; TableError names what is malformed."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    releases = raw.get("releases", {})
    t = Table(releases, {}, {})
    for kind, key, into in (("op", "op", t.ops), ("blocker", "blocker", t.blockers)):
        for i, entry in enumerate(raw.get(kind, ()), 1):
            what = f"{kind} #{entry.get(key)}"
            where = f"{path.name} [[{kind}]] #{i} ({entry.get('recipe')} {what})"
            for c in _cells(entry, what, where, releases, kind == "op"):
                slot = into.setdefault((c.engine, c.release), {})
                if (c.recipe, c.what) in slot:
                    raise TableError(f"{where}: {c.name} is in the table twice")
                slot[(c.recipe, c.what)] = c
    return t


# -- comparing ---------------------------------------------------------------------------------


def physical(root: Path, engine: str, logical: str) -> Path:
    """A logical file name in an unpacked wheel (FlashInfer's C++ lives under flashinfer/data/)."""
    if engine == "flashinfer" and logical.startswith(("include/", "csrc/")):
        logical = "flashinfer/data/" + logical
    return root / logical


@functools.lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@functools.lru_cache(maxsize=None)
def _scopes(path: Path) -> dict[str, tuple[int, int]]:
    """Qualified def/class name -> (first line, last line), for a Python file."""
    out: dict[str, tuple[int, int]] = {}

    def walk(node, prefix):
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}{n.name}"
                out.setdefault(q, (n.lineno, n.end_lineno or n.lineno))
                walk(n, q + ".")

    walk(ast.parse(_text(path)), "")
    return out


def split_location(location: str) -> tuple[str, str, Optional[int]]:
    """``file::scope:line`` -> (file, scope, line)."""
    file, _, rest = location.partition("::")
    scope, _, line = rest.rpartition(":")
    if not line.isdigit():
        return file, rest, None
    return file, scope, int(line)


def evidence_tree(engine: str, release: str, file: str = "") -> Path:
    """The release as drift judged it (a sparse tree: the files read so far, each checked
    against the wheel's RECORD), with the evidence ``file`` brought in by range: reading one
    line of it downloads no whole wheel."""
    tree = drift.tree(engine, release)
    if file:
        sparse.need(tree, [physical(tree, engine, file).relative_to(tree).as_posix()])
    return tree


def check_op(cell: Cell, op: Optional[dict], tree: Path) -> list[str]:
    """What is wrong with patchkit's verdict for this cell ([] when it agrees)."""
    ev = f" (evidence {cell.evidence})" if cell.evidence else ""
    if op is None:
        return [f"{cell.name}: expected {cell.state}{ev}, but patchkit does not report the op there"]
    got = f"{op['state']} at {op['location'] or op['file']}" + (f" ({op['message']})" if op["message"] else "")
    if op["state"] != cell.state:
        return [f"{cell.name}: expected {cell.state}{ev}, got {got}"]
    if not cell.file:
        return []
    file, scope, line = split_location(op["location"])
    if file != cell.file:
        return [f"{cell.name}: evidence {cell.evidence} is in another file than patchkit's {got}"]
    path = physical(tree, cell.engine, cell.file)
    lines = _text(path).splitlines()
    problems = []
    if cell.shows and not (cell.line <= len(lines) and cell.shows in lines[cell.line - 1]):
        read = lines[cell.line - 1].strip() if cell.line <= len(lines) else "<past the end>"
        problems.append(f"{cell.name}: evidence {cell.evidence} does not show {cell.shows!r}; the line reads {read!r}")
    if file.endswith(".py") and scope != "<module>":
        lo, hi = _scopes(path).get(scope, (0, -1))
        inside = f"{file}::{scope} (lines {lo}-{hi})" if hi >= lo else f"{file}::{scope} (not in the file)"
    else:
        lo, hi = (line or 0) - NEAR, (line or 0) + NEAR
        inside = f"{NEAR} lines of {file}:{line}"
    if not lo <= cell.line <= hi:
        problems.append(f"{cell.name}: evidence {cell.evidence} is not inside {inside}, where patchkit has it: {got}")
    return problems


def check_release(table: Table, engine: str, release: str, results: list[dict], skip=frozenset()) -> list[str]:
    """Every op and blocker patchkit reports on this release against the table: the same
    set of ops; the other engine's ops as their cells on the release they were judged on;
    the blockers standing.  ``skip``: (recipe, "op #n") of this engine checked cell by cell."""
    problems = []
    for r in results:
        reported = {f"op #{o['index']}": o for o in r["ops"]}
        for other, version in r["versions"].items():
            want = {w: c for (rid, w), c in table.ops.get((other, version), {}).items() if rid == r["id"]}
            mine = {w: o for w, o in reported.items() if o["engine"] == other}
            for w in sorted(set(mine) - set(want)):
                problems.append(f"{r['id']} {w} on {other} {version}: patchkit reports it, the table has no cell")
            for w, c in sorted(want.items()):
                if (r["id"], w) in skip and other == engine:
                    continue
                if c.xfail:
                    continue  # reported by its own cell
                problems += check_op(c, mine.get(w), evidence_tree(other, version, c.file))
        standing = {b["blocker"]: b for b in r.get("blockers", ())}
        want = {}
        for other, version in r["versions"].items():
            want.update({w: c for (rid, w), c in table.blockers.get((other, version), {}).items() if rid == r["id"]})
        for w in sorted(set(standing) | set(want)):
            b, c = standing.get(w), want.get(w)
            if b is None:
                problems.append(f"{c.name}: expected to stand (evidence {c.evidence}), patchkit finds none")
            elif c is None:
                problems.append(
                    f"{r['id']} {w} on {engine} {release}: patchkit finds it standing at {b['file']}:{b['line']}"
                    " on the pristine release; the table lists none"
                )
            elif (b["file"], b["line"]) != (c.file, c.line):
                problems.append(f"{c.name}: evidence {c.evidence}, patchkit has it at {b['file']}:{b['line']}")
    return problems


# -- the runs ----------------------------------------------------------------------------------


TABLE_NOW = load()


def fi_sample(releases: list[str]) -> list[str]:
    if ALL:
        return list(releases)
    rest = [v for v in releases if v not in ALWAYS_FI]
    picked = set(ALWAYS_FI) | set(random.Random(SEED).sample(rest, FI_EXTRA))
    return [v for v in releases if v in picked]


AXES = {"sglang": TABLE_NOW.releases["sglang"], "flashinfer": fi_sample(TABLE_NOW.releases["flashinfer"])}


def drift_across(engine: str, versions: list[str]) -> dict[str, list[dict]]:
    """``patchkit drift sm120 --across ENGINE==FIRST..LAST --json`` over exactly ``versions``
    (the index is asked once, in test_the_table_lists_every_release_on_the_index)."""
    from patchkit.cli import main

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        mp.setattr(drift, "index_versions", lambda dist: list(versions))
        with contextlib.redirect_stdout(out):
            try:
                # the table's SGLang cells were read with the pinned FlashInfer: --to keeps it
                # for every release (drift would pair each with the FlashInfer it requires)
                pin = ["--to", "flashinfer==0.6.3"] if engine == "sglang" else []
                main(["drift", "sm120", "--across", f"{engine}=={versions[0]}..{versions[-1]}", *pin, "--json"])
                code = 0
            except SystemExit as e:
                code = e.code
    assert code in (0, 1), out.getvalue()
    doc = json.loads(out.getvalue())
    assert doc["versions"] == versions
    return doc["matrix"]


@pytest.fixture(scope="module")
def matrix():
    """matrix(engine) -> {release: recipe results}, one drift run per axis and module."""
    runs: dict[str, dict] = {}

    def get(engine: str) -> dict[str, list[dict]]:
        if engine not in runs:
            runs[engine] = drift_across(engine, AXES[engine])
        return runs[engine]

    return get


def reported_op(results: list[dict], recipe: str, what: str) -> Optional[dict]:
    r = next((r for r in results if r["id"] == recipe), None)
    return next((o for o in r["ops"] if f"op #{o['index']}" == what), None) if r else None


def _cell_params():
    out = []
    for engine, releases in TABLE_NOW.releases.items():
        for v in releases:
            for c in TABLE_NOW.ops.get((engine, v), {}).values():
                marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
                out.append(pytest.param(c, id=f"{c.recipe}-{c.what.replace(' #', '')}-{engine}{v}", marks=marks))
    return out


@real
@pytest.mark.parametrize("cell", _cell_params())
def test_cell(cell: Cell, matrix):
    if cell.release not in AXES[cell.engine]:
        pytest.skip(f"{cell.engine} {cell.release} is not in this run's sample ({REPLAY})")
    results = matrix(cell.engine)[cell.release]
    tree = evidence_tree(cell.engine, cell.release, cell.file)
    problems = check_op(cell, reported_op(results, cell.recipe, cell.what), tree)
    assert not problems, "\n".join(problems)


RELEASES = [(e, v) for e, vs in TABLE_NOW.releases.items() for v in vs]


@real
@pytest.mark.parametrize("engine,release", RELEASES, ids=[f"{e}{v}" for e, v in RELEASES])
def test_release_reports_the_table_ops_and_no_blocker(engine, release, matrix):
    if release not in AXES[engine]:
        pytest.skip(f"{engine} {release} is not in this run's sample ({REPLAY})")
    results = matrix(engine)[release]
    assert sorted(r["id"] for r in results) == [
        "allreduce-fusion",
        "autotune-cutlass",
        "max-running-requests",
        "moe-backend-sm120",
    ]
    own = {k for k in TABLE_NOW.ops.get((engine, release), {})}
    problems = check_release(TABLE_NOW, engine, release, results, skip=frozenset(own))
    assert not problems, "\n".join(problems)


@real
def test_the_table_lists_every_release_on_the_index():
    for engine, releases in TABLE_NOW.releases.items():
        assert drift.versions_between(engine, releases[0], releases[-1]) == releases, engine


@real
def test_a_wrong_cell_is_reported_with_its_op_release_and_evidence(tmp_path, matrix):
    """Two wrong expectations in a copy of the table: a flipped state, and evidence outside
    the op's scope.  Each is reported on each of its releases, naming op, release, evidence."""
    text = TABLE.read_text()
    flipped = text.replace(
        'recipe = "max-running-requests"\nop = 2\nengine = "sglang"\n[[op.cell]]\nreleases = "0.5.20..0.5.23"\n'
        'state = "pending"\n',
        'recipe = "max-running-requests"\nop = 2\nengine = "sglang"\n[[op.cell]]\nreleases = "0.5.20..0.5.23"\n'
        'state = "upstream"\nfile = "sglang/srt/arg_groups/fields/schedule.py"\nline = 38\n',
    ).replace("line = 3354\n", "line = 3300\n")
    assert (
        flipped.count("line = 3300\n") == 1 and flipped.count('file = "sglang/srt/arg_groups/fields/schedule.py"') == 1
    )
    wrong = tmp_path / "truth_table.toml"
    wrong.write_text(flipped)
    table = load(wrong)
    problems = []
    for v, results in matrix("sglang").items():
        for c in table.ops.get(("sglang", v), {}).values():
            problems += check_op(c, reported_op(results, c.recipe, c.what), evidence_tree("sglang", v, c.file))
    flips = [p for p in problems if p.startswith("max-running-requests op #2")]
    names = [f"max-running-requests op #2 on sglang {v}" for v in AXES["sglang"][-4:]]
    assert [p.split(":")[0] for p in flips] == names
    assert flips[0].startswith(
        "max-running-requests op #2 on sglang 0.5.20: expected upstream (evidence "
        "sglang/srt/arg_groups/fields/schedule.py:38), got pending at "
        "sglang/srt/arg_groups/fields/schedule.py::Schedule:"
    ), flips[0]
    outside = [p for p in problems if p.startswith("moe-backend-sm120 op #1")]
    assert outside == [
        msg
        for v in ("0.5.13", "0.5.13.post1")
        for msg in (
            f"moe-backend-sm120 op #1 on sglang {v}: evidence sglang/srt/server_args.py:3300 does not show "
            "'and is_sm120_supported()'; the line reads "
            """'), "ep_size * moe_dp_size must be less than or equal to tp_size"'""",
            f"moe-backend-sm120 op #1 on sglang {v}: evidence sglang/srt/server_args.py:3300 is not inside "
            "sglang/srt/server_args.py::ServerArgs._handle_moe_kernel_config (lines 3335-3437), where patchkit "
            "has it: upstream at sglang/srt/server_args.py::ServerArgs._handle_moe_kernel_config:3362 "
            "(upstream marker matched at sglang/srt/server_args.py:3351)",
        )
    ]
    assert len(problems) == len(flips) + len(outside), "\n".join(problems)


# -- the table's own checks (offline) ----------------------------------------------------------


def _bad(tmp_path: Path, body: str) -> str:
    p = tmp_path / "t.toml"
    p.write_text('[releases]\nsglang = ["1", "2", "3"]\n' + body)
    with pytest.raises(TableError) as e:
        load(p)
    return str(e.value)


OP = '[[op]]\nrecipe = "r"\nop = 1\nengine = "sglang"\n'


@pytest.mark.parametrize(
    "body,message",
    [
        (OP + '[[op.cell]]\nreleases = "1..4"\nstate = "pending"\n', "'4' is not in [releases]"),
        (OP + '[[op.cell]]\nreleases = "3..1"\nstate = "pending"\n', "'3..1' runs backwards"),
        (OP + '[[op.cell]]\nreleases = "1"\nstate = "done"\n', "state 'done' is not one of"),
        (OP + '[[op.cell]]\nreleases = "1"\nstate = "upstream"\n', "carries its evidence: file and line"),
        (OP + '[[op.cell]]\nreleases = "1"\nstate = "pending"\nfile = "a.py"\nline = 3\n', "carries no evidence"),
        (
            OP + '[[op.cell]]\nreleases = "1..2"\nstate = "pending"\n[[op.cell]]\nreleases = "2"\nstate = "pending"\n',
            "2 has two rows",
        ),
        (
            OP + '[[op.cell]]\nreleases = "1"\nstate = "upstream"\nfile = "a.py"\nline = 1\nlines = { "3" = 2 }\n',
            "lines for releases outside the row: ['3']",
        ),
        (2 * (OP + '[[op.cell]]\nreleases = "1"\nstate = "pending"\n'), "r op #1 on sglang 1 is in the table twice"),
    ],
    ids=["unknown", "backwards", "state", "no-evidence", "pending-evidence", "overlap", "stray-lines", "twice"],
)
def test_a_malformed_table_is_refused(tmp_path, body, message):
    assert message in _bad(tmp_path, body)


def test_the_table_loads_with_a_cell_per_applicable_release():
    t = load()
    assert len(t.releases["sglang"]) == 19 and len(t.releases["flashinfer"]) == 36
    assert set(ALWAYS_FI) <= set(AXES["flashinfer"])
    # 0.5.9: allreduce-fusion #1 #2 #3 #6, autotune #1, max-running-requests #1, moe #1
    assert sorted(t.ops[("sglang", "0.5.9")]) == [
        ("allreduce-fusion", "op #1"),
        ("allreduce-fusion", "op #2"),
        ("allreduce-fusion", "op #3"),
        ("allreduce-fusion", "op #6"),
        ("autotune-cutlass", "op #1"),
        ("max-running-requests", "op #1"),
        ("moe-backend-sm120", "op #1"),
    ]
    assert t.ops[("flashinfer", "0.7.4")][("allreduce-fusion", "op #4")].evidence == "flashinfer/jit/comm.py:200"
    assert t.blockers == {}
