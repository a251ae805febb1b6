"""A hostile target: files patchkit cannot read or write, encodings other than UTF-8,
FIFOs and directories where a source file should be, symlinks inside the tree, a RECORD
that was already stale, temps a killed run left, and an environment variable that is not
a number.  Each is exit 2 naming the file (or exits 0 with the tree byte for byte as it
should be), never a traceback (exit 3) and never a half-written tree.  Offline: a small
package-layout tree stands in for an engine."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from patchkit.base import fsio
from patchkit.base.errors import TargetError
from patchkit.base.target import open_target
from patchkit.core import record, transaction
from patchkit.core.document import Document

GATE = 'BACKENDS = ["a", "b"]\nGATE = "sm90"\n'
KERNEL = "#if (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))\n  sync();\n#endif\n"

RECIPES = {
    "widen": """
id = "widen"
summary = "one python file"
[engines]
sglang = ">=0"
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/gate.py"
[ops.locator]
contains = ['"a"', '"b"']
[ops.params]
element = '"c"'
""",
    "gate": """
id = "gate"
summary = "the same file, another op"
[engines]
sglang = ">=0"
[[ops]]
kind = "set-default"
engine = "sglang"
file = "sglang/srt/gate.py"
[ops.locator]
field = "GATE"
[ops.params]
value = '"sm120"'
expect = '"sm90"'
""",
    "kernel": """
id = "kernel"
summary = "one C++ file"
[engines]
sglang = ">=0"
[[ops]]
kind = "text-replace"
engine = "sglang"
file = "sglang/srt/kernel.cuh"
[ops.params]
find = "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
replace = "(__CUDA_ARCH__ >= 900))"
count = 1
""",
}


def make_site(base: Path, files: dict[str, bytes] | None = None, record_rows: bool = True) -> Path:
    """An installed-looking sglang 0.5.9 (a dist-info whose RECORD lists every file)."""
    root = base / "site"
    files = {
        "sglang/__init__.py": b"",
        "sglang/version.py": b'__version__ = "0.5.9"\n',
        "sglang/srt/gate.py": GATE.encode(),
        "sglang/srt/kernel.cuh": KERNEL.encode(),
        **(files or {}),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    di = root / "sglang-0.5.9.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n\n")
    if record_rows:
        rows = [(rel, record.hash_of(data), str(len(data))) for rel, data in files.items()]
        (di / "RECORD").write_bytes(record.render([*rows, ("sglang-0.5.9.dist-info/RECORD", "", "")]))
    return root


@pytest.fixture
def site(tmp_path):
    root = make_site(tmp_path)
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for name, text in RECIPES.items():
        (recipes / f"{name}.toml").write_text(text)
    return root, recipes


def snapshot(root: Path, state: bool = False) -> dict:
    """Every entry under root (not .patchkit unless ``state``): file bytes, symlink targets."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not state and rel.split("/")[0] == ".patchkit":
            continue
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = (stat.S_IMODE(p.stat().st_mode), p.read_bytes())
    return out


def temps(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith(".patchkit-tmp") or ".patchkit-" in p.name)


def cli(run_cli, site, *args):
    root, recipes = site
    return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")


def pk(site, *args, prefix=(), timeout=60, env=None):
    """The real `python -m patchkit` as a subprocess (a FIFO must not hang it: timeout)."""
    root, recipes = site
    cmd = [*prefix, sys.executable, "-m", "patchkit", "--recipes", str(recipes), *args, "-t", f"sglang={root}"]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)


def assert_env_error(code, err, *words):
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    for w in words:
        assert w in err, (w, err)


# -- 1. encodings -----------------------------------------------------------------------------

LATIN1 = b'# -*- coding: latin-1 -*-\n# caf\xe9 cr\xe8me\nBACKENDS = ["a", "b"]\nGATE = "sm90"\n'


def test_a_python_file_is_read_and_written_in_the_encoding_its_coding_line_declares(tmp_path):
    root = make_site(tmp_path, {"sglang/srt/gate.py": LATIN1})
    doc = Document(open_target("sglang", root), "sglang/srt/gate.py")
    assert doc.encoding == "iso-8859-1" and "# café crème" in doc.text
    assert doc.module.code == doc.text and doc.printed()[1] == LATIN1
    assert doc.encode("GATE = 'é'\n") == "GATE = 'é'\n".encode("latin-1")
    with pytest.raises(TargetError, match="cannot hold"):
        doc.encode("GATE = '\u20ac'\n")  # no euro sign in latin-1


LATIN1_ONE = b'# -*- coding: latin-1 -*-\n# caf\xe9 cr\xe8me\nBACKENDS = ["a", "b"]\n'
# A UTF-8 BOM, as SGLang's qwen2_classification.py starts with on every release.
BOM = b'\xef\xbb\xbf# Copyright\n# caf\xc3\xa9\nBACKENDS = ["a", "b"]\n'


@pytest.mark.parametrize("data", [LATIN1, LATIN1_ONE, BOM])
def test_apply_and_revert_of_a_latin1_or_bom_python_file_are_byte_for_byte(tmp_path, run_cli, data):
    root = make_site(tmp_path, {"sglang/srt/gate.py": data})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(RECIPES["widen"])
    site = (root, recipes)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 0, err
    assert (root / "sglang/srt/gate.py").read_bytes() == data.replace(b'"b"]', b'"b", "c"]')
    code, out, err = cli(run_cli, site, "revert", "widen")
    assert code == 0, err
    assert (root / "sglang/srt/gate.py").read_bytes() == data


@pytest.mark.parametrize(
    "data, said",
    [
        (b'BACKENDS = ["a", "b"]\n# caf\xe9\n', ":2: not valid utf-8"),  # no coding line: UTF-8
        (b'# caf\xe9\nBACKENDS = ["a", "b"]\n', ":1: not valid utf-8"),  # on a line tokenize checks itself
        (b'# coding: ascii\nBACKENDS = ["a", "b"]  # caf\xe9\n', ":2: not valid ascii"),
        (b'# coding: klingon\nBACKENDS = ["a", "b"]\n', "unknown encoding"),
    ],
)
def test_a_python_file_that_is_not_valid_in_its_encoding_is_exit_2_naming_the_file(site, run_cli, data, said):
    root, _ = site
    (root / "sglang/srt/gate.py").write_bytes(data)
    before = snapshot(root, state=True)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert_env_error(code, err, f"{root / 'sglang/srt/gate.py'}", said, "patchkit will not edit")
    assert snapshot(root, state=True) == before


def test_a_cxx_file_that_is_not_utf8_round_trips_byte_for_byte(site, run_cli):
    root, _ = site
    kernel = b"// caf\xe9 \xff\xfe\n" + KERNEL.encode() + b"/* \x80 */\n"
    (root / "sglang/srt/kernel.cuh").write_bytes(kernel)
    code, out, err = cli(run_cli, site, "apply", "kernel")
    assert code == 0, err
    assert (root / "sglang/srt/kernel.cuh").read_bytes() == kernel.replace(b" && (__CUDA_ARCH__ < 1200))", b")")
    assert cli(run_cli, site, "revert", "kernel")[0] == 0
    assert (root / "sglang/srt/kernel.cuh").read_bytes() == kernel


@pytest.mark.parametrize(
    "recipe, rel, data",
    [("widen", "sglang/srt/gate.py", LATIN1), ("kernel", "sglang/srt/kernel.cuh", b"// caf\xe9\n" + KERNEL.encode())],
)
def test_diff_shows_a_file_that_is_not_utf8(site, run_cli, recipe, rel, data):
    root, _ = site
    (root / rel).write_bytes(data)
    code, out, err = cli(run_cli, site, "diff", recipe)
    assert code == 0, err
    assert "caf" in out


# -- 2. what is not a readable regular file ------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_where_a_source_file_should_be_is_exit_2_and_never_hangs(site, run_cli, kind):
    root, _ = site
    gate = root / "sglang/srt/gate.py"
    gate.unlink()
    said = f"is a {'FIFO' if kind == 'fifo' else 'directory'}"
    if kind == "fifo":
        os.mkfifo(gate)
        p = pk(site, "apply", "widen", timeout=60)  # a subprocess, so that a hang fails rather than blocks
        assert_env_error(p.returncode, p.stderr, str(gate), said)
    else:
        gate.mkdir()
    for command in ("status", "apply", "revert"):
        code, out, err = cli(run_cli, site, command, "widen")
        assert_env_error(code, err, str(gate), said)


def _unprivileged() -> tuple[str, ...]:
    """A command prefix under which permission bits bind: none for a normal user; for root,
    setpriv dropping the capabilities that let root read anything (skip where unavailable)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    prefix = (setpriv, "--bounding-set=-dac_override,-dac_read_search", "--")
    with tempfile.NamedTemporaryFile() as f:
        os.chmod(f.name, 0)
        probe = subprocess.run([*prefix, sys.executable, "-c", f"open({f.name!r}).read()"], capture_output=True)
    if probe.returncode == 0 or b"PermissionError" not in probe.stderr:
        pytest.skip(f"setpriv could not drop root's read override here: {probe.stderr[-200:]!r}")
    return prefix


@pytest.mark.parametrize("what", ["sglang/srt/gate.py", "sglang/srt", "sglang-0.5.9.dist-info/RECORD"])
def test_a_file_or_directory_this_user_cannot_read_is_exit_2(site, what):
    root, _ = site
    prefix = _unprivileged()
    before = snapshot(root)
    os.chmod(root / what, 0)
    try:
        p = pk(site, "apply", "widen", prefix=prefix)
        assert_env_error(p.returncode, p.stderr, f"{root / what}", "cannot be read", "Permission denied")
    finally:
        os.chmod(root / what, 0o755 if (root / what).is_dir() else 0o644)
    assert snapshot(root) == before and not temps(root)


# -- 3. what cannot be written ---------------------------------------------------------------------


def _chattr(path: Path, flag: str) -> None:
    chattr = shutil.which("chattr")
    if not chattr:
        pytest.skip("no chattr")
    p = subprocess.run([chattr, flag, str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"chattr {flag} is not supported here: {p.stderr.strip()}")


@pytest.mark.parametrize("what", ["sglang/srt/gate.py", "sglang-0.5.9.dist-info/RECORD", "sglang/srt"])
def test_an_immutable_file_is_exit_2_with_nothing_written(site, run_cli, what):
    root, _ = site
    before = snapshot(root, state=True)
    _chattr(root / what, "+i")
    try:
        code, out, err = cli(run_cli, site, "apply", "widen")
        assert_env_error(code, err, "is immutable (chattr +i)", "nothing was written", "chattr -i")
        assert snapshot(root, state=True) == before and not temps(root)
    finally:
        subprocess.run(["chattr", "-i", str(root / what)], check=True)
    assert cli(run_cli, site, "apply", "widen")[0] == 0


class Faults:
    """Make the n-th call of one write step fail with an OSError (counting only patchkit's
    own write steps: its temp files, their fsync, their rename)."""

    def __init__(self, monkeypatch, step: str, n: int, err: int):
        self.step, self.n, self.err, self.seen = step, n, err, 0
        real_new_temp, real_fsync, real_replace = fsio.new_temp, os.fsync, os.replace

        def new_temp(path, dir_fd=None):
            if dir_fd is None:  # a cache entry (under a directory descriptor) is not a target's write
                self.hit("mkstemp", path.parent)
            return real_new_temp(path, dir_fd)

        def fsync(fd):
            if stat.S_ISREG(os.fstat(fd).st_mode):
                self.hit("fsync", None)
            return real_fsync(fd)

        def replace(src, dst, **kw):
            if str(src).endswith(".patchkit-tmp") and not kw:
                self.hit("rename", dst)
            return real_replace(src, dst, **kw)

        monkeypatch.setattr(fsio, "new_temp", new_temp)
        monkeypatch.setattr(fsio.os, "fsync", fsync)
        monkeypatch.setattr(fsio.os, "replace", replace)

    def hit(self, step: str, path) -> None:
        if step == self.step:
            self.seen += 1
            if self.seen == self.n:
                raise OSError(self.err, os.strerror(self.err), str(path) if path else None)


ERRNOS = [errno.EPERM, errno.EACCES, errno.EROFS, errno.ENOSPC, errno.EDQUOT]


@pytest.mark.parametrize("step", ["mkstemp", "fsync", "rename"])
def test_an_environment_error_at_any_write_step_is_exit_2_and_before_the_commit_point_changes_nothing(
    tmp_path, run_cli, monkeypatch, step
):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for name, text in RECIPES.items():
        (recipes / f"{name}.toml").write_text(text)
    template = make_site(tmp_path / "template")
    pristine = snapshot(template)

    def fresh(name: str) -> tuple[Path, Path]:
        root = tmp_path / name
        shutil.copytree(template, root, symlinks=True)
        return root, recipes

    site = fresh("count")
    counting = Faults(monkeypatch, step, 0, 0)  # count the steps of one clean apply
    assert cli(run_cli, site, "apply", "widen", "kernel")[0] == 0
    monkeypatch.undo()
    applied, steps = snapshot(site[0]), counting.seen
    assert steps >= 6  # the marker, two files, RECORD, blobs, journal, the commit record
    for n in range(1, steps + 1):
        site = fresh(f"run-{n}")
        root, state = site[0], site[0] / ".patchkit"
        Faults(monkeypatch, step, n, ERRNOS[n % len(ERRNOS)])
        code, out, err = cli(run_cli, site, "apply", "widen", "kernel")
        monkeypatch.undo()
        assert_env_error(code, err, str(root))
        if "the write stopped half-way" in err:  # after the commit point: the next run finishes it
            assert step == "rename"
            code, out, err = cli(run_cli, site, "apply", "widen", "kernel")
            assert code == 0 and "finished the `patchkit apply`" in out, err
        else:
            assert snapshot(root) == pristine, (step, n, err)
            assert not temps(root), (step, n, temps(root))
            assert not (state / transaction.PENDING).exists() and not (state / transaction.COMMIT).exists()
            assert cli(run_cli, site, "apply", "widen", "kernel")[0] == 0
        assert snapshot(root) == applied


def test_a_transaction_record_that_cannot_be_removed_is_exit_2_and_the_next_run_clears_it(site, run_cli, monkeypatch):
    root, _ = site
    real = os.unlink

    def unlink(p, *a, **kw):
        if str(p).endswith(transaction.COMMIT):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(p))
        return real(p, *a, **kw)

    monkeypatch.setattr(transaction.os, "unlink", unlink)
    code, out, err = cli(run_cli, site, "apply", "widen")
    monkeypatch.undo()
    assert_env_error(code, err, "every file is written")
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    assert not (root / ".patchkit" / transaction.COMMIT).exists()


# -- 4. the lock timeout ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "", "nan", "-1"])
def test_a_lock_timeout_that_is_not_a_number_of_seconds_is_exit_2_naming_the_variable(
    site, run_cli, monkeypatch, value
):
    monkeypatch.setenv(fsio.LOCK_TIMEOUT_ENV, value)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert_env_error(code, err, f"{fsio.LOCK_TIMEOUT_ENV}={value!r}", "seconds", ">= 0")


# -- 5. a symlink inside the target ----------------------------------------------------------------


def test_a_symlinked_file_inside_the_target_stays_a_link_and_its_file_round_trips(site, run_cli):
    root, _ = site
    real = root / "sglang" / "common" / "gate.py"
    real.parent.mkdir()
    os.replace(root / "sglang/srt/gate.py", real)
    os.chmod(real, 0o640)
    (root / "sglang/srt/gate.py").symlink_to("../common/gate.py")
    before = snapshot(root)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 0, err
    assert (root / "sglang/srt/gate.py").is_symlink()
    assert b'"c"' in real.read_bytes() and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert cli(run_cli, site, "status", "widen")[0] == 0
    code, out, err = cli(run_cli, site, "revert", "widen")
    assert code == 0, err
    assert snapshot(root) == before


# -- 6. RECORD ---------------------------------------------------------------------------------------


def _rows(root: Path, name: str = "sglang-0.5.9.dist-info") -> dict:
    return {p: (h, s) for p, h, s in record.parse((root / name / "RECORD").read_bytes())}


def _true(root: Path, rel: str, name: str = "sglang-0.5.9.dist-info") -> bool:
    data = (root / rel).read_bytes()
    return _rows(root, name)[rel] == (record.hash_of(data), str(len(data)))


def test_revert_gives_back_a_record_row_that_was_stale_before_apply(site, run_cli):
    root, _ = site
    gate = root / "sglang/srt/gate.py"
    gate.write_bytes(gate.read_bytes() + b"# the user's line\n")  # RECORD no longer matches
    rec = root / "sglang-0.5.9.dist-info/RECORD"
    original = rec.read_bytes()
    for _ in range(2):  # and again: re-applying makes the row true again
        assert cli(run_cli, site, "apply", "widen")[0] == 0
        assert _true(root, "sglang/srt/gate.py")
        assert cli(run_cli, site, "apply", "gate")[0] == 0
        assert _true(root, "sglang/srt/gate.py")
        assert cli(run_cli, site, "revert", "widen")[0] == 0
        assert _true(root, "sglang/srt/gate.py")  # the file is not back yet: its row follows it
        assert cli(run_cli, site, "revert", "gate")[0] == 0
        assert rec.read_bytes() == original


def test_a_bytecode_row_patchkit_emptied_comes_back_on_revert(site, run_cli):
    root, _ = site
    rec = root / "sglang-0.5.9.dist-info/RECORD"
    pyc = "sglang/srt/__pycache__/gate.cpython-311.pyc"
    rec.write_bytes(rec.read_bytes() + f"{pyc},sha256=abc,3\n".encode())
    original = rec.read_bytes()
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    assert _rows(root)[pyc] == ("", "") and _true(root, "sglang/srt/gate.py")
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    assert rec.read_bytes() == original


def test_every_record_that_lists_a_file_follows_it(site, run_cli):
    root, _ = site
    old = root / "sglang-0.5.8.dist-info"  # what an interrupted upgrade leaves behind
    old.mkdir()
    shutil.copy(root / "sglang-0.5.9.dist-info/RECORD", old / "RECORD")
    originals = {p: p.read_bytes() for p in root.glob("*.dist-info/RECORD")}
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    for name in ("sglang-0.5.8.dist-info", "sglang-0.5.9.dist-info"):
        assert _true(root, "sglang/srt/gate.py", name), name
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    assert {p: p.read_bytes() for p in root.glob("*.dist-info/RECORD")} == originals


def test_a_record_rewritten_by_a_reinstall_is_the_original_again(site, run_cli):
    root, _ = site
    rec = root / "sglang-0.5.9.dist-info/RECORD"
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    # pip reinstalls: the pristine file and a RECORD of its own (here: CRLF endings)
    (root / "sglang/srt/gate.py").write_text(GATE)
    reinstalled = rec.read_bytes().replace(b"\n", b"\r\n")
    reinstalled = reinstalled.replace(
        record.hash_of((root / "sglang/srt/gate.py").read_bytes().replace(b'"b"]', b'"b", "c"]')).encode(),
        record.hash_of(GATE.encode()).encode(),
    )
    rec.write_bytes(reinstalled)
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    assert _true(root, "sglang/srt/gate.py")
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    assert rec.read_bytes() == reinstalled


# -- 7. temps a killed run left --------------------------------------------------------------------


def test_temps_a_killed_run_left_beside_target_files_are_removed_by_the_next_locked_run(site, run_cli):
    root, _ = site
    assert cli(run_cli, site, "apply", "kernel")[0] == 0
    srt, di = root / "sglang/srt", root / "sglang-0.5.9.dist-info"
    left = [
        srt / ".kernel.cuh.patchkit-4242.tmp",  # an older release's name
        srt / ".kernel.cuh.k2j4h5g3.patchkit-tmp",  # fsio.write_temp's
        srt / ".gate.py.x8f7d6s5.patchkit-tmp",
        di / ".RECORD.a1b2c3d4.patchkit-tmp",
        root / ".patchkit" / ".journal.json.q1w2e3r4.patchkit-tmp",
    ]
    for p in left:
        p.write_bytes(b"half")  # no pending marker names them (it was lost, or never written)
    keep = srt / ".gate.py.notes"
    keep.write_bytes(b"not ours")
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    assert [p for p in left if p.exists()] == [] and keep.exists()


def test_the_record_memory_is_part_of_the_transaction(site, run_cli):
    root, _ = site
    gate = root / "sglang/srt/gate.py"
    gate.write_bytes(gate.read_bytes() + b"# stale\n")
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    mem = json.loads((root / ".patchkit" / record.MEMORY).read_text())
    (entry,) = mem["records"]["sglang-0.5.9.dist-info/RECORD"].values()
    assert set(entry["rows"]) == {"sglang/srt/gate.py"}
