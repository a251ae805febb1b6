"""Downloads without pip (patchkit/upstream/fetch.py): the index's simple API, read with the standard
library.  The offline tests serve a PEP 503 index from files (a file: URL opens no socket,
so the tier's network guard stays on); the real one reads PyPI's PEP 691 JSON."""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest

from patchkit.base.errors import FetchError
from patchkit.upstream import drift, fetch, recorded


def wheel_bytes(name: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
    return buf.getvalue()


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A file: simple index of `sglang` with four releases (one only yanked, one only for
    another platform), in an empty cache; PATCHKIT_OFFLINE unset."""
    files = tmp_path / "files"
    files.mkdir()
    links, blobs = [], {}
    for fname, extra in (
        ("sglang-0.5.8-py3-none-any.whl", ""),
        ("sglang-0.5.9-py3-none-any.whl", ""),
        ("sglang-0.5.10-py3-none-any.whl", ' data-yanked="broken"'),
        ("sglang-0.5.11-cp27-cp27m-win32.whl", ""),
        ("sglang-0.5.12-py3-none-any.whl", ""),
        ("sglang-0.5.12.tar.gz", ""),
    ):
        data = wheel_bytes("sglang") + fname.encode()
        (files / fname).write_bytes(data)
        blobs[fname] = data
        sha = hashlib.sha256(data).hexdigest()
        links.append(f'<a href="../../files/{fname}#sha256={sha}"{extra}>{fname}</a><br/>')
    page = tmp_path / "simple" / "sglang"
    page.mkdir(parents=True)
    (page / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    monkeypatch.setenv("PATCHKIT_INDEX_URL", (tmp_path / "simple").as_uri())
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PATCHKIT_OFFLINE", raising=False)
    return tmp_path, blobs


def test_a_release_is_downloaded_checked_and_cached(index):
    root, blobs = index
    said: list[str] = []
    w = fetch.fetch_wheel("sglang", "0.5.9", say=said.append)
    assert w == root / "cache" / "wheels" / "sglang" / "0.5.9" / "sglang-0.5.9-py3-none-any.whl"
    assert w.read_bytes() == blobs[w.name]
    assert said == [
        "downloading sglang==0.5.9 from the package index (sglang-0.5.9-py3-none-any.whl) ...",
        f"cached {w}",
    ]
    # no temporary left behind; the sha256 it was checked against, recorded (recorded.py)
    assert sorted(p.name for p in w.parent.iterdir()) == [w.name, w.name + ".sha256"]
    assert recorded.recorded(w) == hashlib.sha256(blobs[w.name]).hexdigest()
    # Cached: the index is not asked again (it is gone), whatever the pinned hash.
    (root / "simple" / "sglang" / "index.html").unlink()
    assert fetch.fetch_wheel("sglang", "0.5.9") == w
    assert fetch.fetch_wheel("sglang", "0.5.9", sha256=hashlib.sha256(blobs[w.name]).hexdigest()) == w


def test_the_releases_listed_leave_out_yanked_ones_and_are_in_version_order(index):
    assert fetch.versions("sglang") == ["0.5.8", "0.5.9", "0.5.11", "0.5.12"]
    assert drift.index_versions("sglang") == ["0.5.8", "0.5.9", "0.5.11", "0.5.12"]


def test_a_hash_other_than_the_index_lists_is_refused(index):
    root, blobs = index
    (root / "files" / "sglang-0.5.9-py3-none-any.whl").write_bytes(b"tampered")
    with pytest.raises(FetchError, match="sha256 mismatch: the index lists [0-9a-f]{64}, downloaded"):
        fetch.fetch_wheel("sglang", "0.5.9")
    assert not any((root / "cache" / "wheels" / "sglang" / "0.5.9").iterdir())


def test_a_hash_other_than_the_pin_is_refused(index):
    root, _ = index
    with pytest.raises(FetchError, match="sha256 mismatch: pinned 0{64}, downloaded"):
        fetch.fetch_wheel("sglang", "0.5.9", sha256="0" * 64)
    assert not any((root / "cache" / "wheels" / "sglang" / "0.5.9").iterdir())


def test_no_such_release_names_the_nearest(index):
    with pytest.raises(FetchError) as e:
        fetch.fetch_wheel("sglang", "0.5.10")  # only yanked
    assert e.value.message.startswith("sglang 0.5.10: no such release on the package index file://")
    assert e.value.hint == "nearest releases: 0.5.8, 0.5.9, 0.5.11, 0.5.12"
    with pytest.raises(FetchError, match="sglang 0.5.11: no wheel for this platform"):
        fetch.fetch_wheel("sglang", "0.5.11")


def test_offline_refuses_and_an_unreachable_index_is_an_error(index, monkeypatch, tmp_path):
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    with pytest.raises(FetchError, match="sglang 0.5.9 is not in patchkit's cache .*PATCHKIT_OFFLINE=1 forbids"):
        fetch.fetch_wheel("sglang", "0.5.9")
    with pytest.raises(FetchError, match="the package index is not asked while PATCHKIT_OFFLINE=1"):
        fetch.versions("sglang")
    monkeypatch.delenv("PATCHKIT_OFFLINE")
    monkeypatch.setenv("PATCHKIT_INDEX_URL", (tmp_path / "no-index").as_uri())
    with pytest.raises(FetchError) as e:
        fetch.fetch_wheel("sglang", "0.5.9")
    assert e.value.message.startswith(f"cannot reach the package index {(tmp_path / 'no-index').as_uri()}/ (from ")
    assert "PATCHKIT_INDEX_URL" in e.value.message and "PATCHKIT_INDEX_URL" in e.value.hint


def test_index_url_order_and_no_password_shown(monkeypatch):
    for env in fetch.INDEX_ENVS:
        monkeypatch.delenv(env, raising=False)
    assert fetch.index_url() == ("https://pypi.org/simple/", "")
    monkeypatch.setenv("PIP_INDEX_URL", "https://pip.example/simple")
    assert fetch.index_url() == ("https://pip.example/simple/", "PIP_INDEX_URL")
    monkeypatch.setenv("UV_INDEX_URL", "https://uv.example/simple/")
    assert fetch.index_url() == ("https://uv.example/simple/", "UV_INDEX_URL")
    monkeypatch.setenv("PATCHKIT_INDEX_URL", "https://pk.example/simple/")
    assert fetch.index_url() == ("https://pk.example/simple/", "PATCHKIT_INDEX_URL")
    assert fetch.shown("https://user:secret@host.example:8443/simple/") == "https://host.example:8443/simple/"


def test_an_index_page_in_html_with_relative_links(tmp_path):
    p = fetch._Links()
    p.feed('<a href="/f/x-1.0-py3-none-any.whl#sha256=ab" data-yanked="">x-1.0-py3-none-any.whl</a><a href="y">y</a>')
    assert p.links == [("x-1.0-py3-none-any.whl", "/f/x-1.0-py3-none-any.whl#sha256=ab", True), ("y", "y", False)]


def test_the_nearest_releases():
    listed = ["0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13"]
    assert fetch.nearest("0.5.10.post1", listed) == ["0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13"]
    assert fetch.nearest("0.1", listed) == ["0.5.7", "0.5.8", "0.5.9"]


@pytest.mark.real
def test_pypi_json_lists_the_releases_with_their_hashes(monkeypatch):
    """PEP 691 JSON from PyPI itself: the pinned release is there with the pin's sha256."""
    for env in fetch.INDEX_ENVS:
        monkeypatch.delenv(env, raising=False)
    files = {f["filename"]: f for f in fetch.project_files("sglang")}
    pin = files["sglang-0.5.9-py3-none-any.whl"]
    assert pin["sha256"] == "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"
    assert pin["url"].startswith("https://")
    got = fetch.versions("sglang")
    assert {"0.5.9", "0.5.13", "0.5.23"} <= set(got)
    with pytest.raises(FetchError) as e:
        fetch.fetch_wheel("sglang", "0.5.99")
    assert e.value.message == "sglang 0.5.99: no such release on the package index https://pypi.org/simple/"
    assert e.value.hint.startswith("nearest releases: ") and "0.5.23" in e.value.hint


def _wheel(path, files: dict):
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_a_tree_another_process_unpacked_meanwhile_is_kept_whole(tmp_path):
    """Two processes unpacking one release on a cold cache (drift on two workers): the second
    to finish finds the first one's tree in place and keeps it, never clearing it under a
    reader (who then found no sources); a different tree there is replaced."""
    dest = tmp_path / "trees" / "flashinfer-0.7.1"
    source = {"engine": "flashinfer", "source": "index", "version": "0.7.1", "wheel": "fi.whl"}
    whl = _wheel(tmp_path / "fi.whl", {"flashinfer/__init__.py": "x = 1\n"})
    fetch.unpack(whl, dest, source)  # the first process
    inode = (dest / "flashinfer" / "__init__.py").stat().st_ino
    fetch.unpack(whl, dest, source)  # the second, finishing later
    assert (dest / "flashinfer" / "__init__.py").stat().st_ino == inode  # the same tree, never cleared
    assert sorted(p.name for p in dest.parent.iterdir()) == ["flashinfer-0.7.1"]  # its temp tree dropped
    other = {**source, "wheel": "other.whl"}
    fetch.unpack(_wheel(tmp_path / "other.whl", {"flashinfer/__init__.py": "x = 2\n"}), dest, other)
    assert (dest / "flashinfer" / "__init__.py").read_text() == "x = 2\n" and fetch.tree_source(dest) == other
