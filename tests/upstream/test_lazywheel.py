"""patchkit/upstream/lazywheel.py: a pristine release read member by member over HTTP ranges,
against a package index on 127.0.0.1 (tests/rangeserver.py; the offline tier's guard lets a
test reach its own ``local_index``), with a small hand-made wheel: the judge's reads cost a
few percent of the wheel; a server without ranges, a ``file:`` index, a lying or garbled range
answer and a truncated wheel each read the whole file or fail cleanly, and a member whose bytes
are not the RECORD's is never used."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from patchkit.base import store
from patchkit.base.errors import FetchError
from patchkit.base.target import Target
from patchkit.upstream import lazywheel, pristine

GATE = "sglang/srt/gate.py"
FILES = {
    "sglang/__init__.py": "",
    "sglang/version.py": '__version__ = "0.5.9"\n',
    GATE: "def gate():\n    return _is_a or _is_b\n",
    "sglang/srt/other.py": "X = 1\n" * 200,
}
NAME = "sglang-0.5.9-py3-none-any.whl"


def build_wheel(files: dict[str, str], record_of: dict[str, str] | None = None, blob: int = 4 << 20) -> bytes:
    """A wheel of ``files`` (deflated), a ``blob``-byte stored .so, and a RECORD of
    ``record_of`` (default: of ``files`` themselves)."""
    so = hashlib.sha256(b"seed").digest() * (blob // 32)
    members = {**files, "sglang/srt/_kernel.so": so}

    def row(name, data):
        b = data.encode() if isinstance(data, str) else data
        digest = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
        return f"{name},sha256={digest},{len(b)}\n"

    rec_src = {**(record_of or files), "sglang/srt/_kernel.so": so}
    record = "".join(row(n, d) for n, d in rec_src.items()) + "sglang-0.5.9.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, d in members.items():
            z.writestr(n, d, compress_type=zipfile.ZIP_STORED if n.endswith(".so") else zipfile.ZIP_DEFLATED)
        z.writestr("sglang-0.5.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
        z.writestr("sglang-0.5.9.dist-info/RECORD", record)
    return buf.getvalue()


WHEEL = build_wheel(FILES)


@pytest.fixture
def lazy_env(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.delenv("PATCHKIT_OFFLINE", raising=False)
    monkeypatch.delenv("PATCHKIT_LAZY", raising=False)
    monkeypatch.setattr(lazywheel, "_SAID", set())
    monkeypatch.setattr(lazywheel, "_WHOLE_ONLY", False)  # a wheel build earlier in this worker
    monkeypatch.setattr(lazywheel, "STATS", {"requests": 0, "bytes": 0, "fallbacks": 0})
    return cache


def serve(local_index, monkeypatch, data: bytes = WHEEL, ranges: bool = True):
    idx = local_index(ranges=ranges)
    idx.add("sglang", NAME, data)
    monkeypatch.setenv("PATCHKIT_INDEX_URL", idx.url)
    return idx


def reference() -> pristine.Reference:
    return pristine.Reference(Target("sglang", Path("/"), "package", "0.5.9"))


def whole_in_cache(cache: Path) -> bool:
    return any((cache / "wheels").rglob("*.whl")) if (cache / "wheels").is_dir() else False


def test_judging_reads_a_few_percent_of_the_wheel(lazy_env, local_index, monkeypatch, capsys):
    idx = serve(local_index, monkeypatch)
    ref = reference()
    assert ref.available, ref.why_not
    assert ref.read(GATE) == FILES[GATE].encode()
    assert ref.read("sglang/srt/nothing.py") is None
    assert "sglang/srt/_kernel.so" in ref.members()
    assert idx.bytes < 0.05 * len(WHEEL), (idx.bytes, len(WHEEL))
    assert not whole_in_cache(lazy_env)  # no whole wheel came
    assert "reading the release's wheel by ranges" in capsys.readouterr().err
    # a second reference (another run) reads the store: no request, none even with the network off
    idx.reset()
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    again = reference()
    assert again.available and again.read(GATE) == FILES[GATE].encode()
    assert idx.requests == 0
    # a member not fetched yet: one request for it alone (the directory is in the manifest)
    monkeypatch.delenv("PATCHKIT_OFFLINE")
    assert again.read("sglang/srt/other.py") == FILES["sglang/srt/other.py"].encode()
    assert idx.requests == 1


def test_a_server_without_ranges_gives_the_whole_wheel_said_once(lazy_env, local_index, monkeypatch, capsys):
    idx = serve(local_index, monkeypatch, ranges=False)
    ref = reference()
    assert ref.available, ref.why_not
    assert ref.read(GATE) == FILES[GATE].encode()
    err = capsys.readouterr().err
    assert err.count("not read by ranges") == 1 and "HTTP 200" in err
    assert whole_in_cache(lazy_env)
    assert idx.range_requests == 0


def test_a_file_index_reads_the_whole_wheel(lazy_env, tmp_path, monkeypatch, capsys):
    site = tmp_path / "simple" / "sglang"
    site.mkdir(parents=True)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / NAME).write_bytes(WHEEL)
    sha = hashlib.sha256(WHEEL).hexdigest()
    (site / "index.html").write_text(f'<a href="../../files/{NAME}#sha256={sha}">{NAME}</a>\n')
    monkeypatch.setenv("PATCHKIT_INDEX_URL", (tmp_path / "simple").as_uri() + "/")
    ref = reference()
    assert ref.available, ref.why_not
    assert ref.read(GATE) == FILES[GATE].encode()
    assert capsys.readouterr().err.count("not HTTP") == 1
    assert whole_in_cache(lazy_env)


def test_a_member_not_matching_record_is_refused(lazy_env, local_index, monkeypatch, capsys):
    """Ranges answered from another wheel, self-consistent (CRCs right), whose gate.py is not
    the one its RECORD lists: refused; the whole wheel, checked against the index's sha256,
    is what the reference reads."""
    idx = serve(local_index, monkeypatch)
    forged = {**FILES, GATE: "def gate():\n    return _is_a or _is_b or _is_c\n"}
    idx.lie[NAME] = build_wheel(forged, record_of=FILES)
    ref = reference()
    assert ref.read(GATE) == FILES[GATE].encode()
    assert "does not match the wheel's RECORD; refused" in capsys.readouterr().err
    assert whole_in_cache(lazy_env)
    # and it was not stored as a blob
    digest = hashlib.sha256(forged[GATE].encode()).hexdigest()
    assert not store.blob_path(digest).exists()


def test_a_lying_whole_file_too_is_an_error_never_a_verdict(lazy_env, local_index, monkeypatch):
    """Ranges and the whole file both forged, the index's sha256 the honest one's: the read
    fails with the sha256 mismatch named (the judge gets no bytes at all)."""
    idx = serve(local_index, monkeypatch)
    forged = build_wheel({**FILES, GATE: "def gate(x):\n    return True\n"}, record_of=FILES)
    idx.files[NAME] = forged  # served whole and by ranges; the listing keeps WHEEL's sha256
    ref = reference()
    with pytest.raises(FetchError, match="sha256 mismatch"):
        ref.read(GATE)


@pytest.mark.parametrize("how", ["garbage", "short-answers", "truncated-file"])
def test_a_garbled_directory_falls_back_to_the_whole_wheel(lazy_env, local_index, monkeypatch, capsys, how):
    idx = serve(local_index, monkeypatch)
    if how == "garbage":
        idx.lie[NAME] = bytes(len(WHEEL))  # zeros in place of the directory
    elif how == "short-answers":
        idx.short[NAME] = 100  # each answer short of the bytes its Content-Range names
    else:
        idx.lie[NAME] = WHEEL[: len(WHEEL) - 5000]  # ranges from a file cut short: no end of directory
    ref = reference()
    assert ref.available, ref.why_not
    assert ref.read(GATE) == FILES[GATE].encode()
    assert capsys.readouterr().err.count("not read by ranges") == 1
    assert whole_in_cache(lazy_env)


def test_a_truncated_wheel_is_a_clean_no_reference(lazy_env, local_index, monkeypatch):
    serve(local_index, monkeypatch, data=WHEEL[:-100])
    ref = reference()
    assert not ref.available
    assert "could not be read" in ref.why_not


def test_a_damaged_blob_is_fetched_again(lazy_env, local_index, monkeypatch):
    idx = serve(local_index, monkeypatch)
    assert reference().read(GATE) == FILES[GATE].encode()
    blob = store.blob_path(hashlib.sha256(FILES[GATE].encode()).hexdigest())
    blob.write_bytes(b"tampered")
    idx.reset()
    assert reference().read(GATE) == FILES[GATE].encode()
    assert idx.range_requests == 1


def test_lazy_off_downloads_the_whole_wheel(lazy_env, local_index, monkeypatch):
    idx = serve(local_index, monkeypatch)
    monkeypatch.setenv("PATCHKIT_LAZY", "0")
    assert reference().read(GATE) == FILES[GATE].encode()
    assert idx.range_requests == 0 and whole_in_cache(lazy_env)


def test_wheel_and_publish_read_whole_wheels(lazy_env, local_index, monkeypatch):
    """commands/wheel.build (wheel, publish) turns the lazy reader off for the process: what
    it builds is installed, so its pristine releases are whole files, checked."""
    idx = serve(local_index, monkeypatch)
    lazywheel.whole_only()
    assert reference().read(GATE) == FILES[GATE].encode()
    assert idx.range_requests == 0 and whole_in_cache(lazy_env)


def test_reading_many_members_downloads_the_whole_wheel_once(lazy_env, local_index, monkeypatch, capsys):
    """A caller reading a release file by file (capture) gets the whole wheel after
    MAX_MEMBERS range reads, not a request per member."""
    idx = serve(local_index, monkeypatch)
    monkeypatch.setattr(lazywheel, "MAX_MEMBERS", 2)
    ref = reference()
    for logical in FILES:
        assert ref.read(logical) == FILES[logical].encode()
    assert "more than 2 members read by ranges" in capsys.readouterr().err
    assert whole_in_cache(lazy_env)
    assert idx.range_requests == 1 + 2  # the last 64 KiB (directory and RECORD), two members, then whole


def test_a_link_planted_in_the_store_is_not_followed(lazy_env, local_index, monkeypatch, tmp_path):
    serve(local_index, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (lazy_env / "blobs").symlink_to(elsewhere)
    (lazy_env / "lazy").symlink_to(elsewhere)
    assert reference().read(GATE) == FILES[GATE].encode()  # used, not kept
    assert not any(elsewhere.iterdir())


@pytest.mark.parametrize("release_has_it", [True, False])
def test_verdicts_by_ranges_are_those_of_the_whole_wheel(
    lazy_env, local_index, monkeypatch, tmp_path, run_cli, release_has_it
):
    """`status` on a site whose gate.py holds the edit: `upstream` exactly when the release
    holds it, read by ranges or whole; ranges forged to claim the release holds it change
    nothing (the member is refused, the whole wheel read)."""
    import json

    from tests.conftest import gate_recipe, mini_sglang

    edited = "def gate():\n    return _is_a or _is_b or _is_c\n"
    site = mini_sglang(tmp_path / "site", {GATE: edited})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "widen.toml").write_text(gate_recipe())
    released = {**FILES, GATE: edited} if release_has_it else FILES
    idx = serve(local_index, monkeypatch, data=build_wheel(released))
    states = {}
    for run, lazy, forged in (("whole", "0", False), ("lazy", "1", False), ("forged", "1", True)):
        cache = tmp_path / f"cache-{run}"
        cache.mkdir()
        monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
        monkeypatch.setenv("PATCHKIT_LAZY", lazy)
        idx.lie.pop(NAME, None)
        if forged:
            idx.lie[NAME] = build_wheel({**FILES, GATE: edited if not release_has_it else FILES[GATE]}, released)
        code, out, err = run_cli(
            "--recipes", str(tmp_path / "recipes"), "status", "widen", "-t", f"sglang={site}", "--json"
        )
        states[run] = json.loads(out)["recipes"][0]["ops"][0]["state"]
        if run == "lazy":
            assert not whole_in_cache(cache), err
    assert states["whole"] == ("upstream" if release_has_it else states["whole"])
    assert states["lazy"] == states["whole"] == states["forged"], states
    assert release_has_it or states["whole"] != "upstream"
