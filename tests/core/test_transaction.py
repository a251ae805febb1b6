"""The transaction: refusals before any directory is made (the lock, taken first, makes
none: tests/core/test_stages.py), one commit point for files,
RECORD and journal, and a write stopped half-way that status reports truthfully and one
command finishes.  Offline: a small package-layout tree stands in for an engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from patchkit.base import fsio
from patchkit.base.errors import TargetError
from patchkit.core import record, transaction
from tests.conftest import downloaded, fail_target_rename

MODULE = 'BACKENDS = ["a", "b"]\nGATE = "sm90"\n'
KERNEL = "#if (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))\n  sync();\n#endif\n"

RECIPE = """
id = "widen"
summary = "two files, one recipe"
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
[[ops]]
kind = "text-replace"
engine = "sglang"
file = "sglang/srt/kernel.cuh"
[ops.params]
find = "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
replace = "(__CUDA_ARCH__ >= 900))"
count = 1
"""


@pytest.fixture
def site(tmp_path):
    """An installed-looking sglang (a dist-info with a RECORD) and a recipe touching two files."""
    root = tmp_path / "site"
    (root / "sglang" / "srt").mkdir(parents=True)
    files = {
        "sglang/__init__.py": "",
        "sglang/version.py": '__version__ = "0.5.9"\n',
        "sglang/srt/gate.py": MODULE,
        "sglang/srt/kernel.cuh": KERNEL,
    }
    for rel, text in files.items():
        (root / rel).write_text(text)
    di = root / "sglang-0.5.9.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n\n")
    rows = [(rel, record.hash_of(text.encode()), str(len(text.encode()))) for rel, text in files.items()]
    (di / "RECORD").write_bytes(record.render([*rows, ("sglang-0.5.9.dist-info/RECORD", "", "")]))
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(RECIPE)
    return root, recipes


def snapshot(root: Path, state: bool = False) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and (state or not rel.startswith(".patchkit")):
            out[rel] = p.read_bytes()
    return out


def cli(run_cli, site, *args):
    root, recipes = site
    return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_refused_site_is_refused_before_any_directory_is_made(site, run_cli, monkeypatch, dry_run):
    root, _ = site
    monkeypatch.setattr(record, "system_locations", lambda: [root])
    before = snapshot(root, state=True)
    code, out, err = cli(run_cli, site, "apply", "widen", *(["--dry-run"] if dry_run else []))
    assert code == 2, (out, err)
    assert "is the site-packages of a system Python" in err and "hint:" in err, err
    assert not (root / ".patchkit").exists()
    assert snapshot(root, state=True) == before


def test_a_symlinked_state_dir_is_refused_before_anything_is_written(site, run_cli, tmp_path):
    root, _ = site
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".patchkit").symlink_to(elsewhere)
    before = snapshot(root)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 2 and ".patchkit: is a symlink" in err, err
    assert snapshot(root) == before and list(elsewhere.iterdir()) == []


def test_files_record_and_journal_are_written_as_one_set(site, run_cli):
    root, _ = site
    code, out, err = cli(run_cli, site, "apply", "widen", "--json")
    assert code == 0, err
    j = json.loads((root / ".patchkit/journal.json").read_text())
    assert j["engines"]["sglang"]["applied"]["widen"]["ops"] == [1, 2]
    rows = {p: h for p, h, _ in record.parse((root / "sglang-0.5.9.dist-info/RECORD").read_bytes())}
    assert rows["sglang/srt/gate.py"] == record.hash_of((root / "sglang/srt/gate.py").read_bytes())
    assert not list(root.rglob("*.patchkit-tmp"))
    assert (
        not (root / ".patchkit" / transaction.PENDING).exists()
        and not (root / ".patchkit" / transaction.COMMIT).exists()
    )


# -- chattr +a / +i: refused before the commit point ------------------------------------------------


@pytest.mark.parametrize(
    "flag,rel,message",
    [
        ("+a", "sglang/srt", "sglang/srt: is append-only (chattr +a), so patchkit cannot replace files in it"),
        ("+a", "sglang/srt/gate.py", "sglang/srt/gate.py: is append-only (chattr +a), so patchkit cannot replace it"),
        ("+a", ".patchkit/written", ".patchkit/written: is append-only (chattr +a)"),
        ("+i", ".patchkit/written", ".patchkit/written: "),
        ("+a", ".patchkit", ".patchkit: is append-only (chattr +a)"),
        ("+a", "sglang-0.5.9.dist-info", "sglang-0.5.9.dist-info: is append-only (chattr +a)"),  # RECORD's
    ],
)
def test_an_append_only_or_immutable_directory_or_file_is_refused_before_the_commit_point(
    site, run_cli, chattr, flag, rel, message
):
    """Such an attribute refuses the renames even to root: the write used to stop after the
    commit point (``interrupted``, temps left); now it is one line, exit 2, nothing written."""
    root, _ = site
    assert cli(run_cli, site, "apply", "widen")[0] == 0  # .patchkit/written exists, with blobs
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    before = snapshot(root, state=True)
    chattr(root / rel, flag)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 2 and f"{root}/{message}" in err and "nothing was written" in err, err
    assert len([ln for ln in err.splitlines() if ln.startswith("patchkit: error:")]) == 1, err
    assert snapshot(root, state=True) == before
    assert not list(root.rglob("*.patchkit-tmp")) and not (root / ".patchkit" / transaction.PENDING).exists()
    code, out, err = cli(run_cli, site, "status", "widen")
    assert "interrupted" not in out and "pending" in out, out


def test_the_attribute_check_reads_the_inode_flags(site, monkeypatch):
    """The check itself, the ioctl mocked (for filesystems without chattr): FS_APPEND_FL or
    FS_IMMUTABLE_FL on the directory or on the file is a refusal naming it."""
    import fcntl

    root, _ = site
    flagged: dict[str, int] = {}

    def ioctl(fd, request, buf, mutate=False):
        assert request == fsio.FS_IOC_GETFLAGS
        buf[0] = flagged.get(os.readlink(f"/proc/self/fd/{fd}"), 0)
        return 0

    monkeypatch.setattr(fcntl, "ioctl", ioctl)
    gate = root / "sglang/srt/gate.py"
    transaction._writable(gate)  # no flags: fine
    for where, flag, said in [
        (
            gate.parent,
            fsio.FS_APPEND_FL,
            f"{gate.parent}: is append-only (chattr +a), so patchkit cannot replace files",
        ),
        (gate, fsio.FS_IMMUTABLE_FL, "sglang/srt/gate.py: is immutable (chattr +i), so patchkit cannot replace it"),
        (gate, fsio.FS_APPEND_FL | 0x80000, "sglang/srt/gate.py: is append-only (chattr +a)"),  # with extents
    ]:
        flagged.clear()
        flagged[str(where)] = flag
        with pytest.raises(TargetError) as e:
            transaction._writable(gate, where="sglang/srt/gate.py")
        assert str(e.value).startswith(said), str(e.value)
    flagged.clear()
    flagged[str(gate)] = 0x80000  # extents only: nothing that refuses a rename
    transaction._writable(gate)


def test_a_failure_before_the_commit_point_leaves_everything_as_it_was(site, run_cli, monkeypatch):
    root, _ = site
    before = snapshot(root)
    real, calls = fsio.write_temp, []

    def full(path, data, mode=None):
        calls.append(path)
        if len(calls) == 3:
            raise fsio.cannot_write(path, OSError(28, "No space left on device"))
        return real(path, data, mode)

    monkeypatch.setattr(fsio, "write_temp", full)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 2 and "the disk is full" in err, err
    assert snapshot(root) == before
    assert not list(root.rglob("*.patchkit-tmp"))
    assert not (root / ".patchkit" / transaction.PENDING).exists()
    monkeypatch.undo()
    assert cli(run_cli, site, "status", "widen")[0] == 1  # pending, as before


def test_a_write_stopped_after_the_commit_point_reads_interrupted_and_apply_finishes(site, run_cli, monkeypatch):
    root, _ = site
    pristine = snapshot(root)
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    applied = snapshot(root)
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    assert snapshot(root) == pristine

    fail_target_rename(monkeypatch, 2)  # one target file renamed, the rest not
    code, out, err = cli(run_cli, site, "apply", "widen")
    monkeypatch.undo()
    assert code == 2 and "the write stopped half-way" in err, err
    assert snapshot(root) not in (pristine, applied)  # a mixed tree, which only the record explains

    code, out, err = cli(run_cli, site, "status", "widen", "--json")
    doc = json.loads(out)
    assert code == 1
    (r,) = doc["recipes"]
    assert r["state"] == "interrupted" and "patchkit apply" in r["message"]
    assert all(o["state"] in ("applied", "pending") for o in r["ops"])  # never "upstream"

    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 0, err
    assert "finished the `patchkit apply` that a kill interrupted" in out
    assert snapshot(root) == applied
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    assert snapshot(root) == pristine


def test_revert_also_finishes_an_interrupted_apply_first(site, run_cli, monkeypatch):
    root, _ = site
    pristine = snapshot(root)
    fail_target_rename(monkeypatch, 1)
    assert cli(run_cli, site, "apply", "widen")[0] == 2
    monkeypatch.undo()
    code, out, err = cli(run_cli, site, "revert", "widen")
    assert code == 0, err
    assert snapshot(root) == pristine


def test_temp_files_get_unguessable_names_and_never_follow_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    target = tmp_path / "t" / "file.py"
    target.parent.mkdir()
    target.write_text("old")
    for pid in range(os.getpid() - 2, os.getpid() + 3):  # the old, guessable names
        (target.parent / f".file.py.patchkit-{pid}.tmp").symlink_to(victim)
    fsio.atomic_write(target, b"new")
    assert target.read_text() == "new" and not target.is_symlink()
    assert victim.read_text() == "keep me"


def test_the_lock_timeout_is_read_when_a_lock_is_taken(monkeypatch):
    monkeypatch.setenv(fsio.LOCK_TIMEOUT_ENV, "2.5")
    assert fsio.lock_timeout() == 2.5
    monkeypatch.setenv(fsio.LOCK_TIMEOUT_ENV, "soon")
    with pytest.raises(TargetError, match="is not a number"):
        fsio.lock_timeout()


# -- records are checked before recovery acts on them (patchkit/core/txnrecord.py) ------------------

ID = "0123456789abcdef"
SHA = "5" * 64


def _record(roots, primary, entries, commit=False) -> dict:
    rows = [{"path": str(p), "new": SHA, "old": None, **({"tmp": str(t)} if commit else {})} for p, t in entries]
    return {
        "id": ID,
        "action": "apply",
        "recipes": ["widen"],
        "primary": str(primary),
        "roots": [str(r) for r in roots],
        "journals": {},
        "entries": rows,
    }


def _plant(root: Path, roots, primary, entries, commit=True) -> None:
    (root / ".patchkit").mkdir(exist_ok=True)
    (root / ".patchkit" / transaction.PENDING).write_text(json.dumps(_record(roots, primary, entries)))
    if commit:
        (Path(primary) / ".patchkit").mkdir(exist_ok=True)
        (Path(primary) / ".patchkit" / transaction.COMMIT).write_text(
            json.dumps(_record(roots, primary, entries, commit=True))
        )


def test_a_record_naming_a_root_outside_this_run_is_refused_with_nothing_renamed_or_locked(site, run_cli, tmp_path):
    """A planted record whose roots and entries point at another tree: the next apply used to
    rename the planted temp over the victim and make .patchkit/ and a lock there."""
    root, _ = site
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.py").write_text("KEEP = 1\n")
    evil = victim / ".keep.py.abcdefgh.patchkit-tmp"
    evil.write_text("PWNED = 1\n")
    _plant(root, [root, victim], root, [(victim / "keep.py", evil)])
    before, planted = snapshot(root), snapshot(root, state=True)
    for command in ("apply", "revert", "status"):
        code, out, err = cli(run_cli, site, command, *(["widen"] if command != "status" else []))
        assert code == 2, (command, out, err)
        # notes (a recipe of an engine without a tree here) may come first; the error is one line
        (line,) = [ln for ln in err.strip().splitlines() if not ln.startswith("note: ")]
        assert line == (
            f"patchkit: error: {root}/.patchkit/txn-pending.json: names root {victim} which is not a target of this"
            " run; nothing was done (hint: if you did not plant it, remove it; if a patchkit run you started left"
            " it, run `patchkit apply` or `patchkit revert` again naming every target that run wrote to, to"
            " finish it)"
        ), line
    assert sorted(p.name for p in victim.iterdir()) == [".keep.py.abcdefgh.patchkit-tmp", "keep.py"]
    assert (victim / "keep.py").read_text() == "KEEP = 1\n"
    assert snapshot(root) == before and snapshot(root, state=True) == planted  # the record is left as it was
    assert not (root / ".patchkit" / "lock").exists()


def _two_roots(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    for r in (a, b):
        (r / "pkg").mkdir(parents=True)
        (r / "pkg" / "m.py").write_text("x = 1\n")
    return a.resolve(), b.resolve()


def test_a_record_across_two_targets_is_accepted_only_when_both_are_targets(tmp_path):
    from patchkit.core import txnrecord

    a, b = _two_roots(tmp_path)
    entries = [(a / "pkg" / "m.py", a / "pkg" / ".m.py.k3v9q2_a.patchkit-tmp")]
    entries.append((b / "pkg" / "m.py", b / "pkg" / ".m.py.patchkit-4242.tmp"))  # the older releases' form
    _plant(a, [a, b], a, entries)
    _plant(b, [a, b], a, entries, commit=False)
    both = frozenset({a, b})
    for r in (a, b):
        doc = txnrecord.pending(r, both)
        assert doc is not None and txnrecord.commit(doc, both)["id"] == ID
    with pytest.raises(TargetError, match=f"names root {b} which is not a target of this run; nothing was done"):
        txnrecord.pending(a, frozenset({a}))


def test_a_record_that_does_not_name_its_own_root_or_sits_outside_its_primary_is_refused(tmp_path):
    from patchkit.core import txnrecord

    a, b = _two_roots(tmp_path)
    both = frozenset({a, b})
    _plant(a, [b], b, [(b / "pkg" / "m.py", b / "pkg" / ".m.py.k3v9q2_a.patchkit-tmp")], commit=False)
    with pytest.raises(TargetError, match=f"txn-pending.json: lies in {a}, which is not one of its roots"):
        txnrecord.pending(a, both)
    # a commit record must sit in the primary root it names
    (a / ".patchkit" / transaction.PENDING).unlink()
    entries = [(a / "pkg" / "m.py", a / "pkg" / ".m.py.k3v9q2_a.patchkit-tmp")]
    _plant(a, [a, b], a, entries, commit=False)
    (b / ".patchkit").mkdir()
    (b / ".patchkit" / transaction.COMMIT).write_text(json.dumps(_record([a, b], a, entries, commit=True)))
    doc = txnrecord.pending(a, both)
    assert txnrecord.commit(doc, both) is None  # read from the primary's .patchkit only
    why = txnrecord._why(_record([a, b], a, entries, commit=True), b, both, commit=True)
    assert why == f"is a commit record in {b}, which is not its primary root"


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_a_journal_in_the_way_is_refused_before_the_first_rename(site, run_cli, tmp_path, monkeypatch, kind):
    """journal.json a directory (or a FIFO, a symlink) used to be found only after the commit
    point: revert renamed every source file, then stopped half-way."""
    import zipfile

    from patchkit.upstream import fetch

    root, _ = site
    pristine = snapshot(root)
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    wheels = fetch.wheel_dir("sglang", "0.5.9")
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "sglang-0.5.9-py3-none-any.whl", "w") as z:  # revert's pristine reference
        for rel, data in pristine.items():
            z.writestr(rel, data)
    downloaded(wheels / "sglang-0.5.9-py3-none-any.whl", tmp_path / "cache")
    assert cli(run_cli, site, "apply", "widen")[0] == 0
    applied = snapshot(root)
    journal = root / ".patchkit" / "journal.json"
    journal.unlink()
    {"directory": journal.mkdir, "fifo": lambda: os.mkfifo(journal), "symlink": lambda: journal.symlink_to(tmp_path)}[
        kind
    ]()
    code, out, err = cli(run_cli, site, "revert", "widen")
    what = {"directory": "a directory", "fifo": "a FIFO", "symlink": "a symlink"}[kind]
    assert code == 2 and f"{journal}: is {what}, where patchkit writes a file of its own; nothing was written" in err
    assert snapshot(root) == applied
    assert not list(root.rglob("*.patchkit-tmp")) and not list((root / ".patchkit").glob("txn-*"))
    (journal.rmdir if kind == "directory" else journal.unlink)()
    assert cli(run_cli, site, "revert", "widen")[0] == 0
    assert snapshot(root) == pristine


def test_the_write_itself_refuses_what_was_planted_after_the_checks(site, run_cli, monkeypatch):
    """A directory planted where the journal goes once every refusal has run and every input
    was read again (as the temps of a kill are swept): the write checks every path again,
    before step (a)."""
    root, _ = site
    before = snapshot(root)
    real = transaction.sweep

    def planted(*a, **k):
        (root / ".patchkit" / "journal.json").mkdir(parents=True, exist_ok=True)
        return real(*a, **k)

    monkeypatch.setattr(transaction, "sweep", planted)
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 2 and "journal.json: is a directory, where patchkit writes a file of its own" in err, err
    assert snapshot(root) == before and not list(root.rglob("*.patchkit-tmp"))


def test_a_record_dir_in_the_way_of_a_rename_is_refused_before_the_first(site, run_cli):
    """A committed record whose second path is now a directory: nothing renamed, not even the first."""
    root, _ = site
    gate, d = root / "sglang/srt/gate.py", root / "sglang/srt/d"
    d.mkdir()
    temps = [gate.parent / ".gate.py.k3v9q2_a.patchkit-tmp", d.parent / ".d.k3v9q2_a.patchkit-tmp"]
    for t in temps:
        t.write_text("NEW = 1\n")
    _plant(root, [root], root, [(gate, temps[0]), (d, temps[1])])
    code, out, err = cli(run_cli, site, "apply", "widen")
    assert code == 2 and f"would rename a temp over {d}, which is a directory; nothing was done" in err, err
    assert gate.read_text() == MODULE and all(t.exists() for t in temps)


def _evil_wheel(dest: Path, files: dict[str, bytes]) -> Path:
    """A wheel (evil 0.1) that installs ``files`` into site-packages: what a package on an
    index, or a dependency of one, can ship."""
    import zipfile

    info = "evil-0.1.dist-info"
    files = {
        **files,
        "evil/__init__.py": b"",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: evil\nVersion: 0.1\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [(rel, record.hash_of(data), str(len(data))) for rel, data in files.items()]
    files[f"{info}/RECORD"] = record.render([*rows, (f"{info}/RECORD", "", "")])
    whl = dest / "evil-0.1-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for rel, data in files.items():
            z.writestr(rel, data)
    return whl


@pytest.mark.real
def test_a_wheel_installed_with_pip_that_ships_records_cannot_make_apply_rename_outside(run_cli, tmp_path):
    """The red team's attack, for real: a wheel shipping .patchkit/txn-pending.json and
    txn-commit.json into a venv's site-packages (beside a real sglang release), whose roots and
    entries name a victim directory.  `patchkit apply sm120 --python` used to "finish" it:
    rename the attacker's file over the victim's and make .patchkit/ and a lock there."""
    from tests.fleet.test_upgrade import install
    from tests.fleet.test_wheel import make_venv, pip

    py, site = make_venv(tmp_path / "venv")
    install(py, ("sglang", "0.5.9"), ("flashinfer-python", "0.6.3"))  # the releases sm120 edits, cached
    site = site.resolve()
    victim = (tmp_path / "victim").resolve()
    victim.mkdir()
    (victim / "settings.py").write_text("TRUSTED = True\n")
    evil = victim / ".settings.py.abcdefgh.patchkit-tmp"  # where anyone may write (a shared /tmp, say)
    evil.write_text("TRUSTED = False\n")
    entries = [(victim / "settings.py", evil)]
    records = {
        ".patchkit/txn-pending.json": json.dumps(_record([site, victim], site, entries)).encode(),
        ".patchkit/txn-commit.json": json.dumps(_record([site, victim], site, entries, commit=True)).encode(),
    }
    pip(py, "install", "--no-deps", "--no-index", "--no-compile", str(_evil_wheel(tmp_path, records)))
    assert (site / ".patchkit" / "txn-pending.json").is_file()  # pip put them there
    before = snapshot(site, state=True)

    code, out, err = run_cli("apply", "sm120", "--python", str(py))
    assert code == 2, out + err
    assert (
        f"patchkit: error: {site}/.patchkit/txn-pending.json: names root {victim} which is not a target of this"
        " run; nothing was done" in err
    ), err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in victim.iterdir()) == [evil.name, "settings.py"]  # no .patchkit/, no lock
    assert (victim / "settings.py").read_text() == "TRUSTED = True\n"
    assert snapshot(site, state=True) == before  # nothing renamed, created or locked in the venv either
