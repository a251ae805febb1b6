"""A release in the cache is a pristine reference only as the bytes recorded when it was
downloaded (patchkit/upstream/recorded.py): every refusal fires, offline and online.  Offline:
a file: index (no socket), from tests/upstream/test_fetch.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from patchkit.base import store
from patchkit.base.errors import FetchError
from patchkit.base.target import Target
from patchkit.upstream import fetch, lazywheel, pristine, recorded
from tests.upstream.test_fetch import index as index  # noqa: F401  (the fixture)

W = "sglang-0.5.9-py3-none-any.whl"


def _wheel(root: Path) -> Path:
    return root / "cache" / "wheels" / "sglang" / "0.5.9" / W


def _plant(root: Path, data: bytes) -> Path:
    w = _wheel(root)
    w.parent.mkdir(parents=True, exist_ok=True)
    w.write_bytes(data)
    return w


def _other_wheel() -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("sglang/__init__.py", "PLANTED = 1\n")
    return buf.getvalue()


def test_a_download_records_its_sha256_and_a_use_checks_it_offline(index, monkeypatch):
    root, blobs = index
    w = fetch.fetch_wheel("sglang", "0.5.9")
    assert recorded.why_not(w) is None
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    assert fetch.fetch_wheel("sglang", "0.5.9") == w
    w.write_bytes(_other_wheel())  # the recorded release, rewritten in place
    with pytest.raises(FetchError) as e:
        fetch.fetch_wheel("sglang", "0.5.9")
    assert e.value.message.startswith(f"{w}: not used as a pristine reference: its sha256 is ")
    assert "PATCHKIT_OFFLINE" in e.value.hint and "\n" not in e.value.message


def test_a_changed_file_misses_the_kept_check(index, monkeypatch):
    """A file checked once is not hashed again while it stands as it was (the record keeps
    its inode, size, mtime and ctime; so does the process).  Same size, same mtime, other
    bytes: the ctime differs, and it is hashed again, by this process and the next."""
    root, blobs = index
    w = fetch.fetch_wheel("sglang", "0.5.9")
    assert recorded.why_not(w) is None  # hashed, and its stat kept in the record
    real = recorded._digest
    monkeypatch.setattr(recorded, "_digest", lambda f, p: pytest.fail("hashed again"))
    assert recorded.why_not(w) is None
    monkeypatch.setattr(recorded, "_digest", real)
    st = os.stat(w)
    data = bytearray(w.read_bytes())
    data[-1] ^= 1
    w.write_bytes(bytes(data))
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(w).st_size == st.st_size and os.stat(w).st_mtime_ns == st.st_mtime_ns
    assert "not the" in (recorded.why_not(w) or "")
    recorded._hashed.clear()  # the next process
    assert "not the" in (recorded.why_not(w) or "")


@pytest.mark.parametrize("how", ["no record", "a record without a MAC", "a record moved from another release"])
def test_a_wheel_placed_in_the_cache_is_refused_offline(index, monkeypatch, how):
    root, blobs = index
    other = fetch.fetch_wheel("sglang", "0.5.8")
    w = _plant(root, _other_wheel())
    if how == "a record without a MAC":
        doc = {"file": W, "sha256": hashlib.sha256(w.read_bytes()).hexdigest()}
        (w.parent / (W + ".sha256")).write_text(json.dumps(doc))
    elif how == "a record moved from another release":  # re-sealed under its own name: only the name differs
        shutil.copy(other.parent / (other.name + ".sha256"), w.parent / (W + ".sha256"))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    with pytest.raises(FetchError, match="not used as a pristine reference: no sha256 was recorded"):
        fetch.fetch_wheel("sglang", "0.5.9")


def test_a_record_with_the_right_mac_for_another_file_is_refused(index, monkeypatch):
    """A holder of the key writing a record for the planted bytes under another file's name:
    the record names its file."""
    root, blobs = index
    w = _plant(root, _other_wheel())
    store.reseal(
        w.parent / (W + ".sha256"),
        json.dumps({"file": "x.whl", "sha256": hashlib.sha256(w.read_bytes()).hexdigest()}).encode(),
        "records",
    )
    assert recorded.recorded(w) is None


def test_online_a_placed_wheel_is_checked_against_the_index_and_downloaded_again(index):
    root, blobs = index
    said: list[str] = []
    w = _plant(root, blobs[W])  # the index's own bytes, placed by hand: checked, recorded, not downloaded
    assert fetch.fetch_wheel("sglang", "0.5.9", say=said.append) == w and said == []
    assert recorded.recorded(w) == hashlib.sha256(blobs[W]).hexdigest()
    w.write_bytes(_other_wheel())  # other bytes: downloaded again over them
    assert fetch.fetch_wheel("sglang", "0.5.9", say=said.append) == w
    assert w.read_bytes() == blobs[W] and said[0].startswith("downloading sglang==0.5.9")


def _mini(tmp_path: Path) -> Target:
    t = tmp_path / "t"
    (t / "sglang").mkdir(parents=True, exist_ok=True)
    (t / "sglang" / "__init__.py").write_text("")
    return Target("sglang", t, "package", "0.5.9")


def test_the_pristine_reference_reads_a_planted_wheel_never(index, tmp_path, monkeypatch):
    root, blobs = index
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    w = _plant(root, _other_wheel())
    ref = pristine.Reference(_mini(tmp_path))
    assert not ref.available
    assert ref.why_not.startswith(f"{w}: not used as a pristine reference: no sha256 was recorded")
    recorded.record(w, hashlib.sha256(w.read_bytes()).hexdigest())  # as a download would have
    ref = pristine.Reference(_mini(tmp_path))
    assert ref.available and ref.read("sglang/__init__.py") == b"PLANTED = 1\n"


def test_an_unpacked_tree_is_used_only_tied_to_its_checked_archive(index, monkeypatch):
    root, blobs = index
    dest = fetch.release_tree("sglang", "0.5.9")
    assert recorded.tree_why_not(dest, "sglang", "0.5.9") is None
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    # a tree with a source.json of its own but no authenticated record: made again from the archive
    (dest / recorded.TREE_RECORD).unlink()
    (dest / "sglang" / "__init__.py").write_text("PLANTED = 1\n")
    assert fetch.release_tree("sglang", "0.5.9") == dest
    assert (dest / "sglang" / "__init__.py").read_text() == ""
    # its record moved to another release's tree
    other = root / "cache" / "trees" / "sglang-0.5.8"
    shutil.copytree(dest, other)
    assert "no authenticated record" in (recorded.tree_why_not(other, "sglang", "0.5.8") or "")
    # the archive replaced since: the tree is no longer tied to it
    _wheel(root).write_bytes(_other_wheel())
    store.reseal(_wheel(root).parent / (W + ".sha256"), json.dumps({"file": W, "sha256": "0" * 64}).encode())
    assert "no longer the archive" in (recorded.tree_why_not(dest, "sglang", "0.5.9") or "")


def test_offline_an_untied_tree_with_no_archive_is_refused_as_a_reference(index, tmp_path, monkeypatch):
    root, blobs = index
    dest = fetch.release_tree("sglang", "0.5.9")
    (dest / recorded.TREE_RECORD).unlink()
    shutil.rmtree(root / "cache" / "wheels")
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    ref = pristine.Reference.__new__(pristine.Reference)
    ref.target, ref.what, ref.why_not, ref._tree = _mini(tmp_path), "", "", None
    with pytest.raises(FetchError) as e:
        ref._open_sdist()
    assert e.value.message.startswith(f"{dest}: not used as a pristine reference: it carries no authenticated record")


def test_a_planted_lazy_listing_is_a_miss(tmp_path, monkeypatch):
    """A listing naming blobs of the planter's own as the release's members: without this
    user's MAC it is not read."""
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    data = b"PLANTED = 1\n"
    digest = hashlib.sha256(data).hexdigest()
    store.put_blob(digest, data)
    doc = {
        "pick": {"filename": W, "url": "http://127.0.0.1:9/x.whl", "sha256": ""},
        "size": 100,
        "members": {"sglang/__init__.py": [0, 50, 0, 12, 12, 0]},
        "record": {"sglang/__init__.py": digest},
    }
    p = lazywheel.manifest_path("sglang", "0.5.9")
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(doc))
    assert lazywheel.LazyWheel.stored("sglang", "0.5.9", print) is None
    store.reseal(p, json.dumps(doc).encode(), "lazy")  # the same, sealed as this user's: read
    assert lazywheel.LazyWheel.stored("sglang", "0.5.9", print).read("sglang/__init__.py") == data


def test_a_wheel_that_matches_its_pin_is_recorded(index, monkeypatch):
    """A pin's sha256 (upstream_pins.toml, the user's own) is a record too: the wheel it
    names, placed by hand, is recorded as it is checked against it, and read offline after."""
    root, blobs = index
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    w = _plant(root, blobs[W])
    with pytest.raises(FetchError, match="no sha256 was recorded"):
        fetch.fetch_wheel("sglang", "0.5.9")
    assert fetch.fetch_wheel("sglang", "0.5.9", sha256=hashlib.sha256(blobs[W]).hexdigest()) == w
    assert fetch.fetch_wheel("sglang", "0.5.9") == w
    with pytest.raises(FetchError, match="not in patchkit's cache"):  # another pin: not this file
        fetch.fetch_wheel("sglang", "0.5.9", sha256="0" * 64)


def test_a_download_into_an_untrusted_cache_serves_this_process_only(index, monkeypatch):
    """An untrusted cache keeps no record: the release this process checked against the index
    is used by it, and checked against the index again by the next."""
    root, blobs = index
    (root / "cache").mkdir()
    os.chmod(root / "cache", 0o775 | 0o020)
    monkeypatch.setattr(store, "_trusted", {})
    monkeypatch.setattr(recorded, "_mine", {})
    w = fetch.fetch_wheel("sglang", "0.5.9")
    assert recorded.why_not(w) is None and not (w.parent / (W + ".sha256")).exists()
    recorded._mine.clear()  # the next process
    assert "no sha256 was recorded" in (recorded.why_not(w) or "")


def test_online_the_reference_checks_a_placed_wheel_against_the_index(index, tmp_path, capsys):
    """The index's own bytes, placed by hand: recorded and read, nothing downloaded; other
    bytes: the index's downloaded over them, and read."""
    root, blobs = index
    w = _plant(root, blobs[W])
    ref = pristine.Reference(_mini(tmp_path))
    assert ref.available and ref.read("sglang/__init__.py") == b""
    assert recorded.recorded(w) == hashlib.sha256(blobs[W]).hexdigest() and "download" not in capsys.readouterr().err
    recorded._mine.clear()
    (w.parent / (W + ".sha256")).unlink()
    w.write_bytes(_other_wheel())
    ref = pristine.Reference(_mini(tmp_path))
    assert ref.available and ref.read("sglang/__init__.py") == b"" and w.read_bytes() == blobs[W]


@pytest.mark.real
def test_a_real_release_replaced_by_an_applied_copy_is_no_reference(tree, tmp_path):
    """SGLang 0.5.9 with moe-backend-sm120 applied and its journal lost: the release's wheel in
    the cache, replaced by a wheel of the applied tree (the download's record kept), is not the
    pristine reference offline: the edit reads applied?, never upstream, and revert refuses."""
    import subprocess
    import sys

    from patchkit.base.paths import wheels_dir
    from tests.conftest import ROOT

    sg = tree("sglang", "0.5.9", links=True)
    own = tmp_path / "cache"
    shutil.copytree(wheels_dir("sglang") / "0.5.9", own / "wheels" / "sglang" / "0.5.9")
    env = {**os.environ, "PATCHKIT_CACHE": str(own), "PATCHKIT_OFFLINE": "1", "XDG_STATE_HOME": str(tmp_path / "st")}

    def cli(*args):
        cmd = [sys.executable, "-m", "patchkit", "--recipes", str(ROOT / "recipes"), *args, "-t", f"sglang={sg}"]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)

    assert cli("apply", "moe-backend-sm120").returncode == 0
    shutil.rmtree(sg / ".patchkit")
    shutil.rmtree(tmp_path / "st")
    [whl] = (own / "wheels" / "sglang" / "0.5.9").glob("*.whl")
    whl.unlink()
    with zipfile.ZipFile(whl, "w") as z:  # the applied tree, under the release's name
        for p in sorted(sg.rglob("*.py")):
            z.write(p, p.relative_to(sg).as_posix())
    status = cli("status", "moe-backend-sm120")
    assert "upstream" not in status.stdout and "applied?" in status.stdout, status.stdout + status.stderr
    assert "not used as a pristine reference" in status.stdout + status.stderr
    revert = cli("revert", "moe-backend-sm120")
    assert revert.returncode != 0, revert.stdout + revert.stderr
