"""patchkit's own files are input too (issue 21): the cache's entries and directories,
``.patchkit/written``, and ``wheel -o``.  Each test plants what a shared cache or output
directory can hold (a link to a victim, a FIFO, a device, an entry of the wrong shape) and
checks the victim is untouched, nothing hangs, and a bad cache entry is only a miss.
The table (tests/hostile_cases.toml) runs the same families through the command line."""

from __future__ import annotations

import json
import os
import signal
import zipfile
from pathlib import Path

import pytest

from patchkit.base import fsio, regular, store
from patchkit.base.target import open_target
from patchkit.core import confirm, verdicts
from tests.conftest import MINIMAL_RECIPE, downloaded, mini_sglang

RECIPE = MINIMAL_RECIPE.format(id="r")
TREE = {"sglang/srt/x.py": 'def f():\n    return ["a"]\n'}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir()
    monkeypatch.setenv("PATCHKIT_CACHE", str(d))
    return d


@pytest.fixture
def no_hang():
    """A read that blocks (a FIFO) or never ends (/dev/zero) fails the test in 10 s."""

    def on_alarm(signum, frame):
        raise TimeoutError("hung")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def victim(tmp_path):
    """A file and a directory outside everything patchkit owns."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.py").write_text("SECRET = 1\n")
    return out


def _untouched(victim: Path) -> None:
    assert sorted(p.name for p in victim.iterdir()) == ["secret.py"]
    assert (victim / "secret.py").read_text() == "SECRET = 1\n"


# -- the primitives ---------------------------------------------------------------------------


def test_a_link_at_any_owned_component_is_refused_never_followed(cache, victim):
    (cache / "verdicts").symlink_to(victim)
    with pytest.raises(OSError):
        fsio.write_owned(cache, "verdicts/k.json", b"x")
    assert store.look("verdicts", "secret.py").payload is None  # the victim is never read
    store.put("verdicts", "k", b"x")  # a cache: best effort, silent
    _untouched(victim)


def test_a_link_at_the_entry_is_replaced_not_written_through(cache, victim):
    (cache / "drift").mkdir()
    (cache / "drift" / "k.json").symlink_to(victim / "secret.py")
    assert store.get("drift", "k.json") is None
    fsio.write_owned(cache, "drift/k.json", b"[]")
    assert not (cache / "drift" / "k.json").is_symlink() and (cache / "drift" / "k.json").read_bytes() == b"[]"
    (cache / "drift" / "k2").symlink_to(victim / "secret.py")
    store.put("drift", "k2", b"[]")  # the store's writer too
    assert not (cache / "drift" / "k2").is_symlink() and store.get("drift", "k2") == b"[]"
    assert sorted(p.name for p in (cache / "drift").iterdir()) == ["k.json", "k2"]  # no temp left
    _untouched(victim)


def test_fifos_devices_and_directories_are_misses(cache, no_hang):
    (cache / "c").mkdir()
    os.mkfifo(cache / "c" / "fifo")
    (cache / "c" / "zero").symlink_to("/dev/zero")
    (cache / "c" / "dir").mkdir()
    (cache / "c" / "big").write_bytes(b"x" * 200)
    for name in ("fifo", "zero", "dir", "big", "absent"):
        assert store.get("c", name, limit=100) is None, name
    with pytest.raises(regular.NotRegular, match="a symlink"):
        regular.read_owned(cache, "c/zero")
    with pytest.raises(regular.NotRegular, match="a FIFO"):
        regular.read_owned(cache, "c/fifo")


def test_remove_owned_removes_only_patchkits_regular_files(tmp_path, victim):
    d = tmp_path / "d"
    d.mkdir()
    (d / "mine").write_text("x")
    (d / "theirs").write_text("y")
    (d / "link").symlink_to(victim / "secret.py")
    fd = regular.open_dir(tmp_path, ["d"])
    try:
        for name in ("mine", "theirs", "link"):
            fsio.remove_owned(fd, name, lambda n: n in ("mine", "link"))
    finally:
        os.close(fd)
    assert sorted(p.name for p in d.iterdir()) == ["link", "theirs"]
    _untouched(victim)


def test_no_writer_keeps_a_pid_temp_name():
    """Every temp is fsio's (random name, O_EXCL): no module derives one from the pid."""
    root = Path(__file__).resolve().parents[2] / "patchkit"
    # guardlock.py: the pid is a process's identity there (the guard's lock holders), no name.
    users = [
        p.name for p in root.rglob("*.py") if "getpid()" in p.read_text() and p.name not in ("fsio.py", "guardlock.py")
    ]
    assert users == []


# -- the verdict cache and the journal it fingerprints -------------------------------------------


@pytest.fixture
def applied(tmp_path, cache, run_cli, monkeypatch):
    """An applied mini sglang whose pristine release is in the cache: `status` caches."""
    t = mini_sglang(tmp_path / "t", TREE)
    wheel = cache / "wheels" / "sglang" / "0.5.9" / "sglang-0.5.9-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as z:
        for p in sorted(t.rglob("*.py")):
            z.write(p, p.relative_to(t).as_posix())
    downloaded(wheel, cache)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "r.toml").write_text(RECIPE)
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")

    def run(*args):
        return run_cli("--recipes", str(tmp_path / "recipes"), *args, "-t", f"sglang={t}")

    code, out, err = run("apply", "r")
    assert code == 0, (out, err)
    code, out, err = run("status", "r")
    assert code == 0, (out, err)
    return t, run


def _entry(cache: Path) -> Path:
    (p,) = (p for p in (cache / "verdicts").iterdir() if not p.name.startswith("."))
    return p


@pytest.mark.parametrize(
    "damage",
    [
        lambda e: {**e, "results": [5]},
        lambda e: {**e, "files": 5},
        lambda e: {**e, "trees": [1]},
        lambda e: {**e, "results": [{**e["results"][0], "state": "banana"}]},
        lambda e: {**e, "results": [{**e["results"][0], "ops": [{**e["results"][0]["ops"][0], "index": "1"}]}]},
        lambda e: 5,
    ],
    ids=["results-of-ints", "files-an-int", "trees-a-list", "state-unknown", "op-index-a-string", "an-int"],
)
def test_a_verdict_entry_of_the_wrong_shape_is_a_miss_and_is_replaced(applied, cache, damage):
    t, run = applied
    code, first, _ = run("status", "r")
    entry = json.loads(store.payload(_entry(cache)))
    assert code == 0 and entry["provenance"], first  # cached, with the provenance it is read back with
    store.reseal(_entry(cache), json.dumps(damage(entry)).encode())
    code, out, err = run("status", "r")
    assert (code, out) == (0, first), err
    assert json.loads(store.payload(_entry(cache))) == entry  # judged again, and replaced


@pytest.mark.parametrize(
    "planted",
    [
        b"[\xff\xff\xff\x7f",  # marshal's list of 2**31 items: what a marshal cache would allocate
        b"[" * 100_000 + b"]" * 100_000,  # nested past the JSON parser's depth
        b'{"files": {}, "trees": {}, "provenance": {}, "results": [' + b"1," * 1_000_000 + b"1]}",
        b"\xef\xbb\xbf{}",
        b'"\\ud800"',
    ],
    ids=["marshal-length-bomb", "nested-deep", "a-million-ints", "a-bom", "a-lone-surrogate"],
)
def test_a_planted_verdict_entry_is_a_miss_never_an_error(applied, cache, planted):
    t, run = applied
    code, first, _ = run("status", "r")
    store.reseal(_entry(cache), planted)
    code, out, err = run("status", "r")
    assert (code, out) == (0, first), err
    assert json.loads(store.payload(_entry(cache)))["provenance"]  # judged again, and replaced


def test_a_planted_link_at_the_old_verdict_temp_name_writes_no_victim(applied, cache, victim):
    t, run = applied
    run("status", "r")
    k = _entry(cache).name
    _entry(cache).unlink()
    (cache / "verdicts" / f".{k}.{os.getpid()}.tmp").symlink_to(victim / "secret.py")
    assert run("status", "r")[0] == 0
    assert not _entry(cache).is_symlink()
    _untouched(victim)


def test_the_journal_as_a_fifo_or_dev_zero_is_never_read_for_provenance(applied, cache, no_hang):
    t, run = applied
    _entry(cache).unlink()
    j = t / ".patchkit" / "journal.json"
    j.unlink()
    os.mkfifo(j)
    targets = {"sglang": open_target("sglang", t)}
    assert verdicts._provenance(targets) is None  # no hang, and nothing cached on it
    assert run("status", "r")[0] == 0
    assert not list((cache / "verdicts").glob("*"))
    j.unlink()
    j.symlink_to("/dev/zero")
    assert verdicts._provenance(targets) is None


# -- confirmations ----------------------------------------------------------------------------


def test_confirmations_read_only_their_two_answers(cache, victim, no_hang):
    confirm.remember("k1", "done")
    assert confirm.known("k1") == "done"
    (cache / "confirmed" / "k2").write_text("maybe\n")
    os.mkfifo(cache / "confirmed" / "k3")
    (cache / "confirmed" / "k4").symlink_to("/dev/zero")
    (cache / "confirmed" / "k5").symlink_to(victim / "secret.py")
    assert [confirm.known(k) for k in ("k2", "k3", "k4", "k5", "k6")] == [None] * 5
    (cache / "confirmed" / f".k6.{os.getpid()}").symlink_to(victim / "secret.py")  # the old temp name
    confirm.remember("k6", "pending")
    confirm.remember("k5", "pending")
    assert confirm.known("k6") == confirm.known("k5") == "pending"
    _untouched(victim)


def test_a_confirmed_directory_linked_elsewhere_takes_no_write(cache, victim):
    (cache / "confirmed").symlink_to(victim)
    confirm.remember("k", "done")
    assert confirm.known("k") is None
    _untouched(victim)


# -- verify's caches --------------------------------------------------------------------------


@pytest.mark.parametrize("text", ['{"files": 5}', "[1]", "null", '{"files": {}}', "{bad", ""])
def test_a_plan_entry_of_the_wrong_shape_is_a_miss(cache, text):
    from patchkit.commands import verify

    store.put("verify/plans", "k", text.encode())  # sealed: only its shape stands
    assert verify._plan_cached("k") is None


PTX = ".visible .entry k(\n)\n{\n\tgriddepcontrol.wait;\n\tret;\n}\n"


def test_a_build_entry_is_stored_beside_itself_and_read_only_in_its_shape(cache, victim):
    from patchkit.verify import build

    key = "ab" + "0" * 62
    for kind in ("builds", "ptx"):  # a link planted at the entry's name: replaced, never written through
        (cache / "verify" / kind).mkdir(parents=True)
        (cache / "verify" / kind / key).symlink_to(victim / "secret.py")
    build._store(key, {"built": True, "error": None, "seconds": 1.5, "summaries": {}}, PTX)
    _untouched(victim)
    assert build._entry(key) == {"built": True, "error": None, "seconds": 1.5, "summaries": {}}
    assert build._ptx(key) == PTX
    hit = build._cached(key, ("griddepcontrol",))  # figures not cached for this count: from the PTX
    assert hit.built and hit.cached and (hit.summary["kernels"], hit.summary["counts"]) == (1, {"griddepcontrol": 1})
    assert set(build._entry(key)["summaries"]) == {build._tag(("griddepcontrol",))}
    for bad in ('{"built": true, "error": null, "seconds": 1}', '{"built": "yes"}', "[1]", "{bad"):
        store.put("verify/builds", key, bad.encode())
        assert build._entry(key) is None, bad
    store.put("verify/ptx", key, b"not gzip")
    assert build._ptx(key) is None


def test_the_build_cache_behind_a_link_takes_no_write(cache, victim):
    from patchkit.verify import build

    (cache / "verify").symlink_to(victim)
    build._store("cd" + "0" * 62, {"built": False, "error": "x", "seconds": 1}, None)
    _untouched(victim)


# -- drift's cache ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["{bad", "", "5", "[5]", '[{"id": "r"}]'])
def test_a_drift_entry_of_the_wrong_shape_is_a_miss(cache, text):
    from patchkit.upstream import drift

    store.put("drift", "k", text.encode())  # sealed: only its shape stands
    assert drift._cached("k") is None


# -- .patchkit/written --------------------------------------------------------------------------


def test_drop_blobs_deletes_only_patchkits_blobs_and_never_through_a_link(tmp_path, victim):
    from patchkit.base.journal import Journal
    from patchkit.core.transaction import _drop_blobs

    root = tmp_path / "t"
    (root / ".patchkit").mkdir(parents=True)
    (root / ".patchkit" / "written").symlink_to(victim)
    (victim / ("a" * 64)).write_text("theirs")
    _drop_blobs(Journal(root))
    assert (victim / ("a" * 64)).exists()  # a link at written/: nothing of patchkit's to delete
    (victim / ("a" * 64)).unlink()
    _untouched(victim)

    (root / ".patchkit" / "written").unlink()
    w = root / ".patchkit" / "written"
    w.mkdir()
    for name in ("b" * 64, "c" * 64, "notes.txt"):
        (w / name).write_text(name)
    (w / ("d" * 64)).symlink_to(victim / "secret.py")
    j = Journal(root, {"sglang": {"applied": {}, "files": {"x.py": {"sha256": "c" * 64, "pristine": "e" * 64}}}})
    _drop_blobs(j)
    assert sorted(p.name for p in w.iterdir()) == sorted(["c" * 64, "d" * 64, "notes.txt"])
    _untouched(victim)


def test_a_blob_that_is_a_link_is_not_read(tmp_path, victim):
    from patchkit.base.journal import Journal

    root = tmp_path / "t"
    (root / ".patchkit" / "written").mkdir(parents=True)
    (root / ".patchkit" / "written" / ("c" * 64)).symlink_to(victim / "secret.py")
    j = Journal(root, {"sglang": {"applied": {}, "files": {"x.py": {"sha256": "c" * 64, "pristine": "e" * 64}}}})
    assert j.written_bytes("sglang", "x.py") is None


# -- wheel -o -----------------------------------------------------------------------------------


def test_a_wheel_is_written_beside_itself_never_through_a_planted_name(tmp_path, victim):
    from patchkit.fleet.wheel import write_wheel

    tree = tmp_path / "tree"
    (tree / "pkg-1.0.dist-info").mkdir(parents=True)
    (tree / "pkg-1.0.dist-info" / "METADATA").write_text("Name: pkg\nVersion: 1.0\n")
    (tree / "pkg.py").write_text("x = 1\n")
    out = tmp_path / "dist"
    out.mkdir()
    dest = out / "pkg-1.0-py3-none-any.whl"
    (out / f".{dest.name}.patchkit-{os.getpid()}.tmp").symlink_to(victim / "secret.py")  # the old name
    dest.symlink_to(victim / "secret.py")
    write_wheel(tree, "pkg-1.0.dist-info", dest, set())
    _untouched(victim)
    assert not dest.is_symlink() and zipfile.ZipFile(dest).read("pkg.py") == b"x = 1\n"
    assert oct(dest.stat().st_mode & 0o777) == "0o644"


def test_a_cache_patchkit_cannot_write_says_so(tmp_path, monkeypatch):
    """A read-only cache was "not a directory patchkit made (Permission denied)"."""
    from patchkit.base.errors import TargetError

    def refused(path, mode=0o777, *, dir_fd=None):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "mkdir", refused)
    with pytest.raises(TargetError) as e:
        fsio.owned_dir(tmp_path, "trees")
    assert str(e.value) == (
        f"{tmp_path}: patchkit's cache cannot be written (Permission denied) (hint: make it writable "
        "(chmod u+w; chattr -i), free space, or set PATCHKIT_CACHE to a directory you can write)"
    )


def test_drift_into_an_immutable_cache_says_the_cache_cannot_be_written(tmp_path, cache, run_cli, monkeypatch, chattr):
    from tests.conftest import release_in_cache

    release_in_cache(
        cache, "sglang", "0.5.9", {"sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.9"\n'}
    )
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "r.toml").write_text(RECIPE)
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    chattr(cache, "+i")
    code, out, err = run_cli("--recipes", str(tmp_path / "recipes"), "drift", "--to", "sglang==0.5.9")
    assert code == 2 and err.startswith(f"patchkit: error: {cache}: patchkit's cache cannot be written ("), err
    assert "not a directory patchkit made" not in err and len(err.splitlines()) == 1, err


def _pkg_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "pkg-1.0.dist-info").mkdir(parents=True)
    (tree / "pkg-1.0.dist-info" / "METADATA").write_text("Name: pkg\nVersion: 1.0\n")
    (tree / "pkg.py").write_text("x = 1\n")
    return tree


def test_a_killed_wheels_temp_is_removed_by_the_next_run_and_nothing_else(tmp_path, victim):
    """A SIGKILL during `wheel` leaves ``.NAME.whl.RANDOM.patchkit-tmp`` (megabytes) in -o:
    the next `wheel` into that directory removes it.  It removes nothing else: not another
    name (even a near one), not a link, directory or FIFO of that form, not a file another
    user owns, not a temp a live run holds (it flocks its temp while writing)."""
    import subprocess
    import sys

    from patchkit.fleet.wheel import write_wheel

    out = tmp_path / "dist"
    out.mkdir()
    dest = out / "pkg-1.0-py3-none-any.whl"
    left = out / fsio.temp_name("pkg-0.9-py3-none-any.whl")  # as a killed run leaves it
    left.write_bytes(b"PK" * 1000)
    keep = {
        "a.whl": "file",
        ".a.whl.patchkit-tmp": "file",
        ".a.whl.0123456789a.patchkit-tmp": "file",  # 11 hex digits: not temp_name's
        ".a.tar.gz.0123456789ab.patchkit-tmp": "file",  # not a wheel's
        ".b.whl.0123456789ab.patchkit-tmp": "link",
        ".c.whl.0123456789ab.patchkit-tmp": "dir",
        ".d.whl.0123456789ab.patchkit-tmp": "fifo",
        ".e.whl.0123456789ab.patchkit-tmp": "held",
    }
    if os.geteuid() == 0:
        keep[".f.whl.0123456789ab.patchkit-tmp"] = "foreign"
    for name, kind in keep.items():
        p = out / name
        if kind == "link":
            p.symlink_to(victim / "secret.py")
        elif kind == "dir":
            p.mkdir()
        elif kind == "fifo":
            os.mkfifo(p)
        else:
            p.write_text("x")
            if kind == "foreign":
                os.chown(p, 65534, 65534)
    holder = subprocess.Popen(  # a live run writing its temp: flock'd, as new_temp(hold=True) does
        [sys.executable, "-c", "import fcntl,sys; f=open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); "
         "print(1, flush=True); sys.stdin.read()", str(out / ".e.whl.0123456789ab.patchkit-tmp")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "1"
        write_wheel(_pkg_tree(tmp_path), "pkg-1.0.dist-info", dest, set())
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert not left.exists()
    assert sorted(p.name for p in out.iterdir()) == sorted([*keep, dest.name])
    _untouched(victim)


def test_a_temp_swept_before_its_writer_locks_it_is_made_again(tmp_path):
    """new_temp(hold=True) checks, once it holds the lock, that its name is still its file."""
    real = os.open
    swept = []

    def open_then_sweep(path, flags, mode=0o777, *, dir_fd=None):
        fd = real(path, flags, mode, dir_fd=dir_fd)
        if flags & os.O_CREAT and not swept:
            swept.append(path)
            os.unlink(path)  # what a sweep in another process could do right here
        return fd

    import unittest.mock

    with unittest.mock.patch.object(os, "open", open_then_sweep):
        fd, tmp = fsio.new_temp(tmp_path / "x.whl", hold=True)
    os.close(fd)
    assert swept and str(tmp) != str(swept[0]) and tmp.exists()


# -- a pinned tree cloned from git ----------------------------------------------------------------


@pytest.mark.parametrize("planted", [".patchkit/source.json", ".patchkit"])
def test_a_repository_shipping_links_in_patchkit_state_takes_no_write(tmp_path, victim, planted):
    """gitsrc.clone writes .patchkit/source.json into the tree the repository filled: a link
    the repository ships there (at the file, or at .patchkit itself) is never written through."""
    from patchkit.base.errors import PatchkitError
    from patchkit.upstream import gitsrc
    from tests.conftest import git

    repo = tmp_path / "repo"
    (repo / ".patchkit").mkdir(parents=True)
    (repo / "x.py").write_text("x = 1\n")
    target = victim / "secret.py" if planted.endswith(".json") else victim
    if planted == ".patchkit":
        (repo / ".patchkit").rmdir()
    (repo / planted).symlink_to(target)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "hostile")
    dest = tmp_path / "dest"
    try:
        gitsrc.clone(str(repo), "HEAD", dest, {"engine": "sglang"}, say=lambda s: None)
        assert (dest / ".patchkit" / "source.json").is_file() and not (dest / ".patchkit" / "source.json").is_symlink()
    except PatchkitError as e:
        assert planted == ".patchkit" and "cannot write here" in e.message
    _untouched(victim)


def test_a_fifo_among_the_cached_wheels_is_not_a_wheel(cache, monkeypatch, no_hang):
    from patchkit.base.errors import FetchError
    from patchkit.upstream import fetch

    d = cache / "wheels" / "sglang" / "0.5.9"
    d.mkdir(parents=True)
    os.mkfifo(d / "sglang-0.5.9-py3-none-any.whl")
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    with pytest.raises(FetchError, match="is not in patchkit's cache"):
        fetch.fetch_wheel("sglang", "0.5.9", sha256="0" * 64)
    with pytest.raises(regular.NotRegular):
        fetch.file_sha256(d / "sglang-0.5.9-py3-none-any.whl")


@pytest.mark.parametrize("text", ["[1]", "5", "{bad", ""])
def test_a_tree_source_that_is_not_a_table_is_none(tmp_path, text):
    from patchkit.upstream import fetch

    (tmp_path / ".patchkit").mkdir()
    (tmp_path / ".patchkit" / "source.json").write_text(text)
    assert fetch.tree_source(tmp_path) is None


def test_the_engine_tables_cache_is_read_and_written_only_as_patchkits_own(cache, victim):
    """The shipped engine table's parsed cache: a FIFO or a link planted at its name is a
    miss (never a hang, never followed), and the entry written anew replaces it."""
    from patchkit.base import engines

    st = engines.SHIPPED.stat()
    entry = cache / "engines" / store.key(engines.SHIPPED, st.st_size, st.st_mtime_ns)
    entry.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(entry)
    assert "sglang" in engines._shipped()  # a FIFO there: read from the TOML, no hang
    assert entry.is_file() and not entry.is_symlink()  # replaced by a regular entry
    entry.unlink()
    entry.symlink_to(victim / "secret.py")
    assert "flashinfer" in engines._shipped()
    _untouched(victim)
    assert entry.is_file() and not entry.is_symlink()
    assert "vllm" in engines._shipped()  # and read back from it
    for planted in (b"[\xff\xff\xff\x7f", b"[" * 100_000, b'[["sglang", 5]]', b'[["a","b","c",{},"",1,[],[],null,""]]'):
        store.reseal(entry, planted)  # marshal's length bomb, nested past the parser, rows of the wrong shape
        assert engines._shipped() == engines.parse(engines.SHIPPED.read_text(), str(engines.SHIPPED))


def test_fsio_names_the_state_directory_as_target_does():
    from patchkit.base import fsio, target

    assert fsio.STATE_DIR_NAME == target.STATE_DIR


def test_tvm_ffi_headers_never_unpack_through_a_link_in_the_cache(cache, victim, tmp_path, monkeypatch):
    """verify --build's tvm-ffi headers: a link planted at cache/tvm-ffi (or at the release's
    directory under it) is refused, exit 2, before anything is fetched or unpacked."""
    from patchkit.base import errors
    from patchkit.verify import tvmffi

    monkeypatch.setattr(tvmffi, "_pick", lambda spec, say: "0.1.15")
    fetched = []
    monkeypatch.setattr(tvmffi.fetch, "fetch_wheel", lambda *a, **k: fetched.append(a))
    (cache / "tvm-ffi").symlink_to(victim)
    with pytest.raises(errors.TargetError, match="not a directory patchkit made"):
        tvmffi.fetch_headers(tmp_path)
    (cache / "tvm-ffi").unlink()
    (cache / "tvm-ffi").mkdir()
    (cache / "tvm-ffi" / "0.1.15").symlink_to(victim)
    with pytest.raises(errors.TargetError, match="is a symlink"):
        tvmffi.fetch_headers(tmp_path)
    assert fetched == []
    _untouched(victim)


def test_a_release_tree_is_never_seen_empty_while_it_is_made(cache, tmp_path, monkeypatch):
    """Another process (a second xdist worker, a second drift) reading cache/trees/R must see
    the release whole or not at all: the directory is not made before the unpack renames
    the finished tree into place (it was, and a reader read an empty release)."""
    import zipfile

    from patchkit.upstream import drift, fetch

    whl = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("sglang/__init__.py", "")
    seen = []

    def fetched(dist, version, **kw):
        seen.append((cache / "trees" / f"sglang-{version}").exists())
        return whl

    monkeypatch.setattr(fetch, "fetch_wheel", fetched)
    dest = drift.release_tree("sglang", "0.5.9")
    assert seen == [False]
    assert (dest / "sglang" / "__init__.py").is_file()


# -- trees patchkit replaces, and the JIT cache it clears --------------------------------------


@pytest.mark.parametrize("planted", ["link-to-victim", "dangling-link", "file"])
def test_a_release_tree_replaced_over_a_planted_entry_costs_the_link_target_nothing(cache, tmp_path, victim, planted):
    """fetch.unpack (the cache's release trees, `sync` into the workspace) replaces what is
    at its destination: a link planted there is unlinked, never followed (rmtree on it was
    an internal error; a dangling one made the rename fail)."""
    import zipfile

    from patchkit.upstream import fetch

    whl = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("sglang/__init__.py", "")
    dest = cache / "trees" / "sglang-0.5.9"
    dest.parent.mkdir(parents=True)
    if planted == "link-to-victim":
        dest.symlink_to(victim)
    elif planted == "dangling-link":
        dest.symlink_to(tmp_path / "nowhere")
    else:
        dest.write_text("not a tree\n")
    fetch.unpack(whl, dest, {"engine": "sglang"})
    assert not dest.is_symlink() and (dest / "sglang" / "__init__.py").is_file()
    _untouched(victim)


def test_clearing_the_jit_cache_never_deletes_through_a_link_inside_it(tmp_path, victim, monkeypatch):
    """--clear-jit-cache removes FlashInfer's cached builds; one reached through a link
    planted inside the cache (an arch directory linked elsewhere) is left, and said so."""
    from patchkit.fleet import jit

    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "home"))
    base = jit.cache_base()
    real = base / "0.6.3" / "90a" / "cached_ops" / "trtllm_comm"
    real.mkdir(parents=True)
    (victim / "cached_ops" / "trtllm_comm").mkdir(parents=True)
    (victim / "cached_ops" / "trtllm_comm" / "keep.so").write_bytes(b"x")
    (base / "0.6.3" / "120a").symlink_to(victim)
    lines = jit.note("0.6.3", {"trtllm_comm"}, clear=True)
    assert not real.exists()
    assert (victim / "cached_ops" / "trtllm_comm" / "keep.so").read_bytes() == b"x"
    assert any("removed 1 cached build(s)" in x for x in lines), lines
    assert any("left" in x and "120a" in x for x in lines), lines
