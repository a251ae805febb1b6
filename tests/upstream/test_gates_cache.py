"""The scanner's fast paths read what the plain ones read (patchkit/upstream/gates.py): the
bytes pre-filter, the directive finder, the one-walk index of a module's device words, the
scopes without the walks for `:=` and `global`; and its cache: a scan answered from it is
the scan, and an entry planted, moved, of the wrong shape or from other code is a miss."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest

from patchkit.base import store
from patchkit.core import verdicts
from patchkit.core.goals import cppeval, pyeval
from patchkit.core.goals.device import Device
from patchkit.upstream import gates as G
from tests.conftest import mini_sglang
from tests.upstream.test_gates import COMMUNICATOR, CUH, FI_COMM

SM120, SM100 = Device.parse("12.0"), Device.parse("10.0")

# -- the plain readers, as the scanner had them before its fast paths -----------------------------


def plain_directives(text: str) -> list:
    """Line by line (the scanner's reader before it searched for `#`)."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*#\s*(if|elif)\b(.*)$", lines[i])
        start = i
        if m:
            cond = m.group(2)
            while cond.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cond = cond.rstrip()[:-1] + " " + lines[i]
            cond = re.sub(r"/\*.*?\*/", " ", cond)
            cond = cond.split("//")[0]
            if "__CUDA_ARCH" in cond:
                out.append((start + 1, m.group(1), " ".join(cond.split())))
        i += 1
    return out


def plain_mentions(node: ast.AST, words, named: bool = False) -> bool:
    """A walk of the node (the scanner's test before its one-walk index)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            if n.id in words or (named and G._DEVICE_NAME.search(n.id)):
                return True
        elif isinstance(n, ast.Attribute):
            if n.attr in words or (named and G._DEVICE_NAME.search(n.attr)):
                return True
        elif isinstance(n, ast.keyword):
            if n.arg and G._ARCHY.search(n.arg) and isinstance(n.value, (ast.List, ast.Tuple, ast.Set, ast.Name)):
                return True
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 12:
            if G._ARCH_STR.match(n.value):
                return True
    return False


def plain_device_names(tree: ast.Module, words: set, rounds: int) -> set:
    assigns = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            assigns.append((n.targets, n.value))
        elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
            assigns.append(([n.target], n.value))
    names: set = set()
    changed = True
    while changed and rounds:
        changed, rounds = False, rounds - 1
        known = words | names
        for targets, value in assigns:
            if plain_mentions(value, known):
                for t in targets:
                    for x in G._bound_names(t):
                        if x not in names:
                            names.add(x)
                            changed = True
    return names


DIRECTIVES = [
    CUH,
    "#if __CUDA_ARCH__ >= 900 \\\n  && __CUDA_ARCH__ < 1200\n#endif\n",
    # a continued line that looks like a directive is part of the one above
    "#if defined(__CUDA_ARCH__) && \\\n#if __CUDA_ARCH__ == 800\nx\n",
    "  \t# elif __CUDA_ARCH__ == 1000 // sm100 only\n\f#if __CUDA_ARCH__ /* c */ < 1200\r\n",
    "int x = 1; #if __CUDA_ARCH__ >= 900\n#ifdef __CUDA_ARCH__\n# iff __CUDA_ARCH__\n",
    "#define A \\\n#if __CUDA_ARCH__ >= 800\n",  # a #define's continuation: read as the line reader read it
    "## if __CUDA_ARCH__ >= 800\n#  #if __CUDA_ARCH__ >= 800\n#if __CUDA_ARCH__ < 1000 \\",
    "\u00a0#if __CUDA_ARCH__ >= 800\n\u2028#if __CUDA_ARCH__ >= 900\n#if (__CUDA_ARCH__ >= 1000)",
    "",
]


@pytest.mark.parametrize("text", DIRECTIVES)
def test_directives_are_those_the_line_reader_finds(text):
    assert G._directives(text) == plain_directives(text)


def test_the_bytes_prefilter_is_the_words_regex():
    samples = [b"", b"x = 1\n", b"sm_90a", b"'sm_90a'", b'"compute_100"', b'"sm90"', b"major_versions=[9]"]
    samples += [b"'smx'", b'"sm_9"', b"is_sm", b"device_capabilit", b"get_compute_capabilit"]
    for engine in ("sglang", "flashinfer", "vllm"):
        eng = G.engine_words(engine)
        for w in sorted(eng.all_words):
            samples += [w.encode(), b"x." + w.encode() + b"()", w.encode()[:-1]]
        for s in samples:
            assert eng.holds_words(s) == bool(eng.text_test.search(s)), (engine, s)
    assert G.engine_words("sglang").holds_words(b"if is_sm100_supported():")


MODULE = """\
import torch
from x import is_sm100_supported, is_sm90_supported as sm90

CC = torch.cuda.get_device_capability()
_major = CC[0]
_flag = _is_cuda and is_sm100_supported()
_derived = _flag
archs = ["sm_90a", "sm_100a"]


@decorate(archs=["sm_90a"])
def f(x, major=None):
    if (n := is_sm100_supported()) and x:
        return gen(supported_major_versions=[9, 10], other=[1, 2])
    y = lambda: _derived or sm90()
    if x.cc_major >= 9:
        global G
        G = 1
    return "sm_100a" if x else "plain"


class K:
    enabled = _major == 10

    def m(self):
        nonlocal_free = 1
        return self.enabled and nonlocal_free
"""


@pytest.mark.parametrize(("engine", "text"), [("sglang", COMMUNICATOR), ("sglang", MODULE), ("flashinfer", FI_COMM)])
def test_the_one_walk_index_reads_what_the_walks_read(engine, text):
    eng = G.engine_words(engine)
    tree = ast.parse(text)
    s = G._PyScan(text, tree, eng, SM120, SM100)
    assert s.words == set(eng.words) | plain_device_names(tree, set(eng.words), 8)
    assert s.direct == set(eng.words) | plain_device_names(tree, set(eng.words), 1)
    for n in ast.walk(tree):
        assert s.mentions(n) == plain_mentions(n, s.words, named=True), ast.dump(n)[:80]


def test_scopes_without_the_walks_are_the_scopes():
    plain = ast.parse("import os\nx = 1\n\ndef f(a):\n    b = a\n    for i in a:\n        c = i\n    return b\n")
    fancy = ast.parse(MODULE)
    assert G._index(plain, {})[2:] == (False, False)
    assert G._index(fancy, {})[2:] == (True, True)  # a `:=`, a `global`
    for node in ast.walk(plain):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.Lambda)):
            assert pyeval.scope_of(node, False, False) == pyeval.scope_of(node)
    f = next(n for n in fancy.body if isinstance(n, ast.FunctionDef))
    assert "n" in pyeval.scope_of(f).names and "n" not in pyeval.scope_of(f, False, True).names
    assert "G" in pyeval.scope_of(fancy).names and "G" not in pyeval.scope_of(fancy, True, False).names


# -- the cache ---------------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(d))
    return d


@pytest.fixture
def calls(monkeypatch):
    """The files parsed (python_gates, cpp_gates), in this process (jobs=1)."""
    seen: list[str] = []
    py, cpp = G.python_gates, G.cpp_gates

    def python_gates(text, *a):
        seen.append(text)
        return py(text, *a)

    def cpp_gates(text, *a):
        seen.append(text)
        return cpp(text, *a)

    monkeypatch.setattr(G, "python_gates", python_gates)
    monkeypatch.setattr(G, "cpp_gates", cpp_gates)
    return seen


def _tree(tmp_path: Path) -> Path:
    files = {
        "sglang/srt/layers/communicator.py": COMMUNICATOR,
        "sglang/srt/other.py": "from x import is_sm100_supported\nif is_sm100_supported():\n    go()\n",
        "sglang/srt/plain.py": "def f():\n    return 1\n",
        "sglang/srt/broken.py": "def f(:\n    is_sm100_supported()\n",
    }
    if cppeval.available():
        files["sglang/kernels/k.cuh"] = CUH
    return mini_sglang(tmp_path / "sglang", files)


def _scan(root: Path, **kw):
    return G.scan("sglang", root, "package", "0.5.9", SM120, SM100, jobs=1, **kw)


def _doc(res) -> str:
    return json.dumps(
        {
            "closed": [g.to_json() for g in res.closed],
            "unknown": [g.to_json() for g in res.unknown],
            "errors": res.errors,
            "counts": [res.files, res.parsed, res.vendored_skipped],
        }
    )


def test_an_unchanged_tree_is_answered_without_parsing(tmp_path, cache, calls, monkeypatch):
    monkeypatch.setattr(verdicts, "RACY_NS", 0)  # the files were written just now
    root = _tree(tmp_path)
    plain = _scan(root, cache=False)
    n = len(calls)
    assert n == plain.parsed >= 3 and plain.cached == 0
    first = _scan(root)
    assert _doc(first) == _doc(plain) and len(calls) == 2 * n and first.cached == 0
    again = _scan(root)
    assert _doc(again) == _doc(plain) and len(calls) == 2 * n  # nothing parsed
    assert again.cached == plain.parsed
    assert len(list((cache / "gates" / "trees").iterdir())) == 1


def test_only_the_changed_file_is_parsed_again(tmp_path, cache, calls, monkeypatch):
    monkeypatch.setattr(verdicts, "RACY_NS", 0)
    root = _tree(tmp_path)
    first = _scan(root)
    other = root / "sglang/srt/other.py"
    other.write_text(other.read_text().replace("is_sm100_supported():", "is_sm90_supported() or is_sm100_supported():"))
    del calls[:]
    again = _scan(root)
    assert calls == [other.read_text()]  # the tree's entry missed; each other file's did not
    assert again.cached == first.parsed - 1
    assert [g.condition for g in again.closed if g.path.endswith("other.py")] == [
        "is_sm90_supported() or is_sm100_supported()"
    ]
    assert _doc(again) == _doc(_scan(root, cache=False))


def test_a_tree_changed_just_now_is_not_kept_whole(tmp_path, cache, calls):
    root = _tree(tmp_path)  # written less than verdicts.RACY_NS ago
    _scan(root)
    assert not (cache / "gates" / "trees").exists()
    assert len(list((cache / "gates" / "files").iterdir())) == _scan(root).parsed  # its files are


def _entry(cache: Path, kind: str) -> Path:
    (got,) = (cache / "gates" / kind).iterdir()
    return got


def test_a_planted_moved_misshapen_or_stale_entry_is_a_miss(tmp_path, cache, calls, monkeypatch):
    monkeypatch.setattr(verdicts, "RACY_NS", 0)
    root = _tree(tmp_path)
    want = _doc(_scan(root, cache=False))
    _scan(root)
    entry = _entry(cache, "trees")
    good = store.payload(entry)
    doc = json.loads(good)
    forged = dict(doc, results=[[r[0], [], [], None, True] for r in doc["results"]])  # no gate anywhere

    def read() -> tuple[str, int]:
        del calls[:]
        return _doc(_scan(root)), len(calls)

    assert read() == (want, 0)
    store.reseal(entry, json.dumps(forged).encode())  # sealed with the key: what a key holder wrote is read
    assert json.loads(read()[0])["closed"] == []
    entry.write_bytes(json.dumps(forged).encode())  # planted: no MAC
    assert read()[0] == want
    mine = store.secret()
    for name, schema in (("0" * 64, 1), (entry.name, 0)):  # another scan's entry moved here; another schema
        entry.write_bytes(store.seal("gates/trees", schema, name, json.dumps(forged).encode(), mine))
        assert read()[0] == want, (name, schema)
    for bad in (
        dict(forged, results=[[r[0], [{"line": "1"}], [], None, True] for r in doc["results"]]),
        dict(doc, results=[[r[0], [{**row, "evil": 1} for row in r[1]], r[2], r[3], r[4]] for r in doc["results"]]),
        dict(forged, results=[[r[0], [], [], None] for r in doc["results"]]),
    ):
        store.reseal(entry, json.dumps(bad).encode())
        assert read()[0] == want, bad
    # an entry of other code (a patchkit upgrade) is never read: the key is new
    monkeypatch.setattr(verdicts, "code_hash", lambda: "other code")
    store.reseal(entry, json.dumps(forged).encode())
    assert read()[0] == want and len(list((cache / "gates" / "trees").iterdir())) == 2


def test_a_planted_file_entry_is_a_miss(tmp_path, cache, calls):
    root = mini_sglang(tmp_path / "t", {"sglang/srt/a.py": "if is_sm100_supported():\n    go()\n"})
    want = _doc(_scan(root))
    entry = _entry(cache, "files")
    doc = json.loads(store.payload(entry))
    assert doc["closed"][0]["condition"] == "is_sm100_supported()"
    entry.write_bytes(json.dumps(dict(doc, closed=[])).encode())
    del calls[:]
    assert _doc(_scan(root)) == want and len(calls) == 1
    store.reseal(entry, json.dumps(dict(doc, closed=[{"line": 1}])).encode())  # sealed, misshapen
    del calls[:]
    assert _doc(_scan(root)) == want and len(calls) == 1


def test_parallel_scan_is_the_scan(tmp_path, cache):
    root = _tree(tmp_path)
    one = G.scan("sglang", root, "package", "0.5.9", SM120, SM100, jobs=1, cache=False)
    two = G.scan("sglang", root, "package", "0.5.9", SM120, SM100, jobs=2)
    assert _doc(two) == _doc(one) and os.listdir(cache / "gates" / "files")


# -- on real releases: the hand-checked sample's files ---------------------------------------------

SAMPLE = Path(__file__).parents[1] / "data" / "gates_sample.json"
RELEASES = {"sglang": "0.5.23", "flashinfer": "0.7.4", "vllm": "0.33.0"}


@pytest.mark.real
@pytest.mark.parametrize("engine", sorted(RELEASES))
def test_the_fast_readers_on_the_samples_files(engine):
    """Each file of the hand-checked sample (tests/data/gates_sample.json) read by the fast
    paths as by the plain readers, and scanned from the cache as without it."""
    from patchkit.base.target import open_target
    from patchkit.upstream import fetch

    root = fetch.release_tree(engine, RELEASES[engine])
    paths = sorted({r["path"] for r in json.loads(SAMPLE.read_text())["rows"] if r["engine"] == engine})
    eng = G.engine_words(engine)
    for rel in paths:
        data = (root / rel).read_bytes()
        assert eng.holds_words(data) == bool(eng.text_test.search(data)), rel
        text = data.decode("utf-8", errors="replace")
        if rel.endswith(".py"):
            tree = ast.parse(text)
            s = G._PyScan(text, tree, eng, SM120, SM100)
            assert s.words == set(eng.words) | plain_device_names(tree, set(eng.words), 8), rel
            assert all(s.mentions(n) == plain_mentions(n, s.words, named=True) for n in ast.walk(tree)), rel
        else:
            assert G._directives(text) == plain_directives(text), rel
    t = open_target(engine, root)
    plain = G.scan(engine, t.root, t.layout, t.version, SM120, SM100, only=set(paths), cache=False)
    assert plain.closed
    for _ in range(2):  # cold (or as the tier left it), then from the cache
        got = G.scan(engine, t.root, t.layout, t.version, SM120, SM100, only=set(paths))
        assert _doc(got) == _doc(plain)
    assert got.cached == got.parsed
