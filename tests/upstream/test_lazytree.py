"""patchkit/upstream/lazytree.py: `drift`'s release trees made sparse, each file fetched by
HTTP range when the judge reads it, against a package index on 127.0.0.1
(tests/rangeserver.py) and small hand-made wheels: the judge's verdicts are those of the
whole tree (a search for a moved site brings in every file it reads first), the .so never
comes, files are hard links into the blob store shared between releases; a server without
ranges, a ``file:`` index and a lying or truncated range answer each give a whole tree from
the checked wheel, said once, never a verdict from unchecked bytes."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from patchkit.base import sparse, store
from patchkit.base.errors import FetchError, TargetError
from patchkit.base.target import open_target
from patchkit.core import relocate
from patchkit.core.document import Document
from patchkit.upstream import fetch, lazytree, lazywheel

GATE = "sglang/srt/gate.py"
SO = "sglang/srt/_kernel.so"
BASE = {
    "sglang/__init__.py": "",
    "sglang/version.py": '__version__ = "{v}"\n',
    "sglang/srt/other.py": "X = 1\n" * 200,
    "sglang/srt/util.py": "def helper():\n    return 2\n",
}
GATE_CODE = "def gate():\n    return _is_a or _is_b\n"


def build(version: str, files: dict[str, str], record_of: dict[str, str] | None = None) -> tuple[str, bytes]:
    """(file name, bytes) of an sglang ``version`` wheel of ``files``, a 4 MiB stored .so and
    a RECORD of ``record_of`` (default: of the files themselves)."""
    files = {k: v.format(v=version) for k, v in {**BASE, **files}.items()}
    so = hashlib.sha256(b"seed").digest() * ((4 << 20) // 32)
    meta = f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
    di = f"sglang-{version}.dist-info"

    def row(name, data):
        b = data.encode() if isinstance(data, str) else data
        digest = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
        return f"{name},sha256={digest},{len(b)}\n"

    rec = {**files, **(record_of or {}), SO: so, f"{di}/METADATA": meta}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, d in {**files, SO: so}.items():
            z.writestr(n, d, compress_type=zipfile.ZIP_STORED if n.endswith(".so") else zipfile.ZIP_DEFLATED)
        z.writestr(f"{di}/METADATA", meta)
        z.writestr(f"{di}/RECORD", "".join(row(n, d) for n, d in rec.items()) + f"{di}/RECORD,,\n")
    return f"sglang-{version}-py3-none-any.whl", buf.getvalue()


HERE = build("0.5.9", {GATE: GATE_CODE})
# 0.5.10: gate() moved to another module (the judge must search the tree for it)
MOVED = build("0.5.10", {GATE: "Y = 0\n", "sglang/srt/moved.py": GATE_CODE})


@pytest.fixture
def env(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    for var in ("PATCHKIT_OFFLINE", "PATCHKIT_LAZY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(lazywheel, "_SAID", set())
    monkeypatch.setattr(lazywheel, "_WHOLE_ONLY", False)
    monkeypatch.setattr(lazytree, "_WHEELS", {})
    monkeypatch.setattr(lazytree, "_SEARCHED", set())
    return cache


def serve(local_index, monkeypatch, *wheels, ranges: bool = True):
    idx = local_index(ranges=ranges)
    for name, data in wheels or (HERE, MOVED):
        idx.add("sglang", name, data)
    monkeypatch.setenv("PATCHKIT_INDEX_URL", idx.url)
    return idx


def files_in(root: Path) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, n), root)
        for d, ds, ns in os.walk(root)
        for n in ns
        if not os.path.relpath(d, root).startswith(".patchkit")
    }


def test_a_sparse_tree_holds_what_was_read_and_shares_blobs(env, local_index, monkeypatch):
    idx = serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    assert sparse.is_sparse(root)
    assert files_in(root) == {"sglang/__init__.py", "sglang-0.5.9.dist-info/METADATA", "sglang-0.5.9.dist-info/RECORD"}
    target = open_target("sglang", root)
    assert target.version == "0.5.9"
    doc = Document(target, GATE)  # the judge opens the op's file: it comes, checked
    assert doc.exists and doc.original == GATE_CODE.encode()
    assert SO not in files_in(root) and "sglang/srt/other.py" not in files_in(root)
    assert idx.bytes < 0.05 * len(HERE[1]), (idx.bytes, len(HERE[1]))
    assert not (env / "wheels").exists()  # no whole wheel came
    blob = store.blob_path(hashlib.sha256(GATE_CODE.encode()).hexdigest())
    assert os.path.samefile(root / GATE, blob)  # a hard link to the blob
    # another release's same file: no request, the same bytes on disk
    other = fetch.release_tree("sglang", "0.5.10", lazy=True)
    idx.reset()
    Document(open_target("sglang", other), "sglang/srt/util.py")
    got = idx.bytes
    Document(open_target("sglang", root), "sglang/srt/util.py")
    assert idx.bytes == got  # util.py of 0.5.9 is 0.5.10's: from the store
    assert os.path.samefile(root / "sglang/srt/util.py", other / "sglang/srt/util.py")
    # a file the release does not have is absent, as in a whole tree
    assert not Document(target, "sglang/srt/nothing.py").exists
    assert lazytree.extent(root) == {"files": 5, "searched": [], "of": 8}


def test_a_file_brought_again_leaves_one_link_and_no_temporary_name(env, local_index, monkeypatch):
    """Two readers may bring the same file: the second rename lands on a link to the same
    blob, which POSIX makes a no-op leaving both names; no `.lazy` name is left behind."""
    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    lw = lazytree._wheel(root)
    lazytree._bring(lw, root, [GATE], lazytree._say)
    lazytree._bring(lw, root, [GATE, "sglang/srt/util.py"], lazytree._say)  # as a racing reader would
    assert {GATE, "sglang/srt/util.py"} <= files_in(root)
    assert not [f for f in files_in(root) if f.endswith(".lazy")], files_in(root)
    blob = store.blob_path(hashlib.sha256(GATE_CODE.encode()).hexdigest())
    assert os.path.samefile(root / GATE, blob) and os.stat(blob).st_nlink == 2


def test_a_search_brings_in_every_file_of_its_kind_and_no_other(env, local_index, monkeypatch):
    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.10", lazy=True)
    target = open_target("sglang", root)
    found = relocate.candidates(target, ".py", (b"_is_a",))
    assert [lf for lf, _ in found] == ["sglang/srt/moved.py"]
    assert SO not in files_in(root)
    assert {f for f in files_in(root) if f.endswith(".py")} == {n for n in BASE if n.endswith(".py")} | {
        GATE,
        "sglang/srt/moved.py",
    }
    assert lazytree.extent(root)["searched"] == ["sglang*.py"]


def _drift(run_cli, tmp_path, version: str) -> dict:
    from tests.conftest import gate_recipe

    recipes = tmp_path / "recipes"
    recipes.mkdir(exist_ok=True)
    (recipes / "widen.toml").write_text(gate_recipe())
    code, out, err = run_cli("--recipes", str(recipes), "drift", "widen", "--to", f"sglang=={version}", "--json")
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10"])
def test_drift_verdicts_are_those_of_the_whole_tree(env, local_index, monkeypatch, tmp_path, run_cli, version):
    """The op's site in its file (pending), and moved to another module (the judge searches
    the tree): the same verdict, op by op, from the sparse tree and the whole one."""
    serve(local_index, monkeypatch)
    got = {}
    for lazy in ("0", "1"):
        cache = tmp_path / f"cache-{lazy}"
        cache.mkdir(mode=0o700)
        monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
        monkeypatch.setenv("PATCHKIT_LAZY", lazy)
        monkeypatch.setattr(lazytree, "_WHEELS", {})
        got[lazy] = _drift(run_cli, tmp_path, version)
    assert got["0"]["recipes"] == got["1"]["recipes"]
    assert got["0"]["reads"] == {"sglang": None}  # a whole tree
    state = got["1"]["recipes"][0]["ops"][0]["state"]
    assert state == ("pending" if version == "0.5.9" else "moved")
    assert got["1"]["reads"]["sglang"]["searched"] == ([] if version == "0.5.9" else ["sglang*.py"])


def test_a_server_without_ranges_gives_a_whole_tree_said_once(env, local_index, monkeypatch):
    idx = serve(local_index, monkeypatch, ranges=False)
    said: list[str] = []
    root = fetch.release_tree("sglang", "0.5.9", say=said.append, lazy=True)
    assert not sparse.is_sparse(root) and SO in files_in(root)
    assert sum("not read by ranges" in s and "HTTP 200" in s for s in said) == 1
    assert idx.range_requests == 0


def test_a_file_index_gives_a_whole_tree_said_once(env, tmp_path, monkeypatch, capsys):
    site = tmp_path / "simple" / "sglang"
    site.mkdir(parents=True)
    (tmp_path / "files").mkdir()
    name, data = HERE
    (tmp_path / "files" / name).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    (site / "index.html").write_text(f'<a href="../../files/{name}#sha256={sha}">{name}</a>\n')
    monkeypatch.setenv("PATCHKIT_INDEX_URL", (tmp_path / "simple").as_uri() + "/")
    said: list[str] = []
    root = fetch.release_tree("sglang", "0.5.9", say=said.append, lazy=True)
    assert not sparse.is_sparse(root) and (root / GATE).read_text() == GATE_CODE
    assert sum("not HTTP" in s for s in said) == 1


@pytest.mark.parametrize("how", ["lying", "short"])
def test_a_lying_or_truncated_range_answer_is_never_used(env, local_index, monkeypatch, capsys, how):
    """Ranges from another, self-consistent wheel whose gate.py is not the RECORD's, or
    answers cut short: the member is refused, the whole wheel (checked against the index's
    sha256) gives the file, said once."""
    idx = serve(local_index, monkeypatch, HERE)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)  # the directory read honestly
    forged = GATE_CODE.replace("_is_b", "_is_b or _is_c")
    if how == "lying":
        idx.lie[HERE[0]] = build("0.5.9", {GATE: forged}, record_of={GATE: GATE_CODE})[1]
    else:
        idx.short[HERE[0]] = 10
    doc = Document(open_target("sglang", root), GATE)
    assert doc.original == GATE_CODE.encode()
    assert capsys.readouterr().err.count("the whole wheel is downloaded") == 1
    assert any((env / "wheels").rglob("*.whl"))
    assert not store.blob_path(hashlib.sha256(forged.encode()).hexdigest()).exists()


def test_a_lying_whole_file_too_is_an_error_never_a_verdict(env, local_index, monkeypatch):
    idx = serve(local_index, monkeypatch, HERE)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    forged = build("0.5.9", {GATE: "def gate(x):\n    return True\n"}, record_of={GATE: GATE_CODE})[1]
    idx.files[HERE[0]] = forged  # ranges and the whole file; the listing keeps the honest sha256
    with pytest.raises(FetchError, match="sha256 mismatch"):
        Document(open_target("sglang", root), GATE)
    assert not (root / GATE).exists()


def test_a_copy_of_a_sparse_tree_is_refused_not_read_as_partial(env, local_index, monkeypatch, tmp_path):
    import shutil

    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    copy = shutil.copytree(root, tmp_path / "copy")
    with pytest.raises(TargetError, match="a copy of a sparse release tree"):
        Document(open_target("sglang", copy), GATE)


def test_a_whole_tree_asked_for_fills_the_sparse_one(env, local_index, monkeypatch):
    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    Document(open_target("sglang", root), GATE)
    (root / "sglang/__init__.py").unlink()
    (root / "sglang/__init__.py").write_text("forged = 1\n")  # not the checked wheel's: replaced
    assert fetch.release_tree("sglang", "0.5.9") == root
    assert (root / "sglang/__init__.py").read_text() == ""
    assert not sparse.is_sparse(root)
    assert SO in files_in(root) and (root / "sglang/srt/other.py").read_text() == BASE["sglang/srt/other.py"]
    assert fetch.tree_source(root)["wheel"] == HERE[0] and "sparse" not in fetch.tree_source(root)
    # filled, it is tied to the checked wheel as an unpacked tree is: asked again, it is kept
    from patchkit.upstream import recorded

    assert recorded.tree_why_not(root, "sglang", "0.5.9") is None


def test_a_racing_whole_tree_never_replaces_the_sparse_one_a_reader_is_in(env, local_index, monkeypatch):
    """Two processes make the same release at once, one sparse (drift) and one whole (a
    pristine reference): the one that comes second keeps the tree it finds, never clears it
    under the other's reader (CI saw `drift --across` lose files mid-search to exactly this)."""
    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    Document(open_target("sglang", root), GATE)
    held = os.stat(root).st_ino, os.stat(root / GATE).st_ino
    # the whole tree's maker checked before the sparse one was there, and unpacks now
    whl = fetch.fetch_wheel("sglang", "0.5.9")
    fetch.unpack(whl, root, {"engine": "sglang", "source": "index", "version": "0.5.9", "wheel": whl.name})
    assert (os.stat(root).st_ino, os.stat(root / GATE).st_ino) == held  # the reader's tree, kept
    assert not sparse.is_sparse(root) and SO in files_in(root)  # and filled in place
    assert fetch.release_tree("sglang", "0.5.9") == root


def test_a_racing_sparse_tree_never_replaces_the_whole_one(env, local_index, monkeypatch):
    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9")
    held = os.stat(root).st_ino
    assert lazytree.make("sglang", "0.5.9", root, lambda s: None)  # checked before the whole one came
    assert os.stat(root).st_ino == held and not sparse.is_sparse(root) and SO in files_in(root)


def test_a_planted_sparse_tree_is_no_pristine_reference(env, local_index, monkeypatch):
    """A tree whose ``sparse.json`` and ``source.json`` say "sparse" but which carries no record
    patchkit sealed (a planted one, with a forged file in it) is made again, never read."""
    import json

    from patchkit.upstream import recorded

    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    assert recorded.sparse_why_not(root, "sglang", "0.5.9") is None
    assert recorded.tree_why_not(root, "sglang", "0.5.9") is not None  # sparse is never whole
    (root / recorded.TREE_RECORD).unlink()  # as planted: the marks without patchkit's record
    (root / GATE).parent.mkdir(parents=True, exist_ok=True)
    (root / GATE).write_text("def gate():\n    return True\n")  # forged
    assert json.loads((root / sparse.MARK).read_text())["version"] == "0.5.9"
    root = fetch.release_tree("sglang", "0.5.9", lazy=True)
    assert recorded.sparse_why_not(root, "sglang", "0.5.9") is None
    assert Document(open_target("sglang", root), GATE).original == GATE_CODE.encode()


def test_processes_remaking_one_stale_tree_at_once_all_get_it(env, local_index, monkeypatch):
    """A tree sealed under another key (the user's cache key made anew, a cache carried over
    from another machine) is stale: every process that wants the release makes it again.
    Several doing so at once (pytest-xdist workers, a fleet's parallel drifts) each find the
    stale tree; none may clear the tree another has just put in its place (CI saw `Directory
    not empty` from exactly this), and each ends with the release, sparse or whole."""
    import multiprocessing

    from patchkit.upstream import recorded

    serve(local_index, monkeypatch)
    root = fetch.release_tree("sglang", "0.5.9")
    for i in range(3000):  # a stale tree big enough that clearing it takes a while
        (root / "sglang" / f"stale_{i}.py").write_text("x\n")
    store.forge(root / recorded.TREE_RECORD, store.payload(root / recorded.TREE_RECORD), os.urandom(32))
    assert recorded.tree_why_not(root, "sglang", "0.5.9") is not None

    def make(lazy: bool, out) -> None:
        try:
            got = fetch.release_tree("sglang", "0.5.9", lazy=lazy)
            Document(open_target("sglang", got), GATE)
            out.put("ok")
        except BaseException as e:  # noqa: BLE001  (reported to the parent, which fails the test)
            out.put(f"{type(e).__name__}: {e}")

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=make, args=(i % 2 == 0, out)) for i in range(6)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert got == ["ok"] * len(procs)
    assert not any(n.startswith("stale_") for n in os.listdir(root / "sglang"))
    assert None in (recorded.tree_why_not(root, "sglang", "0.5.9"), recorded.sparse_why_not(root, "sglang", "0.5.9"))
    assert [n for n in os.listdir(root.parent) if n.startswith(".")] == []  # no tree left aside
