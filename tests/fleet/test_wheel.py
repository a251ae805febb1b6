"""Fleet artifacts: patched wheels (`patchkit wheel`) and patching an installed engine in place.

Everything here runs the real releases (sglang 0.5.9, flashinfer-python 0.6.3) and real pip,
in fresh venvs.  RECORD is checked with a verifier written here, independent of
patchkit/core/record.py, so a bug there cannot hide itself.
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit.core.project import Project

# One worker under pytest-xdist, so that the module's wheels (sm120_wheels) are built once.
pytestmark = [pytest.mark.real, pytest.mark.xdist_group("wheel")]

SGLANG_ONLY = ("autotune-cutlass", "max-running-requests", "moe-backend-sm120")
SM120 = ("allreduce-fusion", *SGLANG_ONLY)


@functools.lru_cache(maxsize=None)
def labels() -> dict[str, str]:
    """The local label of each engine's sm120 wheel: the bundle's name, then the digest of
    the recipes that wheel carries (sglang: all four; flashinfer: allreduce-fusion)."""
    from patchkit.base.model import per_engine
    from patchkit.fleet.wheel import recipes_digest

    recipes = Project.locate().catalog().select(("sm120",))
    return {e: f"sm120.{recipes_digest(per_engine(recipes, e))}" for e in ("sglang", "flashinfer")}


# -- an independent RECORD verifier ----------------------------------------------------------


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def record_rows(data: bytes) -> list[list[str]]:
    return [r for r in csv.reader(io.StringIO(data.decode())) if r]


def verify_installed(site: Path, dist_info: Path) -> list[str]:
    """Every hashed RECORD row matches the file on disk (path, sha256, size)."""
    bad = []
    for path, h, size in record_rows((dist_info / "RECORD").read_bytes()):
        if not h:
            assert (
                path.endswith(".pyc")
                or path.endswith("RECORD")
                or path.endswith("INSTALLER")
                or path.endswith("REQUESTED")
            ), f"unhashed row {path}"
            continue
        f = (site / path).resolve()
        if not f.is_file():
            bad.append(f"missing {path}")
            continue
        data = f.read_bytes()
        if record_hash(data) != h or int(size) != len(data):
            bad.append(f"mismatch {path}")
    return bad


def verify_wheel(whl: Path) -> list[str]:
    """Every wheel entry is in RECORD with its hash and size, and RECORD lists nothing else."""
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        rec = [n for n in names if n.endswith(".dist-info/RECORD")]
        assert len(rec) == 1
        rows = {p: (h, s) for p, h, s in record_rows(z.read(rec[0]))}
        assert rows.pop(rec[0]) == ("", "")
        bad = []
        for n in names:
            if n == rec[0]:
                continue
            h, s = rows.pop(n, (None, None))
            data = z.read(n)
            if h != record_hash(data) or s != str(len(data)):
                bad.append(n)
        return bad + [f"extra row {p}" for p in rows]


# -- helpers ---------------------------------------------------------------------------------


def make_venv(path: Path) -> tuple[Path, Path]:
    """A fresh venv (no pip of its own: the test's pip drives it with --python, which is faster)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    py = path / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    return py, site


def pip(py: Path, *args: str) -> subprocess.CompletedProcess:
    """Real pip, acting on the venv of ``py``."""
    cmd = [sys.executable, "-m", "pip", "--python", str(py), "--disable-pip-version-check", "--no-input", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def ops_states(doc: dict) -> dict[str, set[str]]:
    return {r["id"]: {o["state"] for o in r["ops"]} for r in doc["recipes"]}


@pytest.fixture(scope="module")
def sm120_wheels(tmp_path_factory):
    """The sm120 bundle built into one sglang and one flashinfer wheel, once per module."""
    from patchkit.commands.wheel import wheel

    out = tmp_path_factory.mktemp("wheels")
    assert (
        wheel(Project.locate(), ("sm120",), ("sglang==0.5.9", "flashinfer==0.6.3"), None, str(out), as_json=False) == 0
    )
    wheels = sorted(out.glob("*.whl"))
    assert [w.name for w in wheels] == [
        f"flashinfer_python-0.6.3+{labels()['flashinfer']}-py3-none-any.whl",
        f"sglang-0.5.9+{labels()['sglang']}-py3-none-any.whl",
    ]
    return {"flashinfer": wheels[0], "sglang": wheels[1]}


# -- wheel -----------------------------------------------------------------------------------


def test_wheel_is_relabelled_hashed_and_names_its_recipes(sm120_wheels):
    catalog = Project.locate().catalog()
    for engine, whl in sm120_wheels.items():
        assert verify_wheel(whl) == []
        with zipfile.ZipFile(whl) as z:
            names = z.namelist()
            assert not any(n.startswith(".patchkit") for n in names)
            di = {n.split("/")[0] for n in names if ".dist-info/" in n}
            assert (
                di == {f"sglang-0.5.9+{labels()['sglang']}.dist-info"}
                if engine == "sglang"
                else {f"flashinfer_python-0.6.3+{labels()['flashinfer']}.dist-info"}
            )
            (di,) = di
            meta = z.read(f"{di}/METADATA").decode()
            assert f"\nVersion: {'0.5.9' if engine == 'sglang' else '0.6.3'}+{labels()[engine]}\n" in meta
            assert names[-1] == f"{di}/RECORD"
            assert all(zi.date_time == (1980, 1, 1, 0, 0, 0) for zi in z.infolist())
            prov = json.loads(z.read(f"{di}/patchkit.json"))
            if engine == "sglang":
                model_runner = z.read("sglang/srt/model_executor/model_runner.py").decode()
                assert '            "flashinfer_cutlass",\n' in model_runner
            else:
                comm = z.read("flashinfer/jit/comm.py").decode()
                assert "supported_major_versions=[9, 10, 12]" in comm.replace(" ", "").replace(
                    "=[9,10,12]", "=[9, 10, 12]"
                )
        ids = [r["id"] for r in prov["recipes"]]
        assert prov["profile"] == {"bundles": ["sm120"], "recipes": []}  # what `run` guards the host against
        assert prov["label"] == labels()[engine] and prov["engine"] == engine
        assert prov["recipes_digest"] == labels()[engine].split(".")[-1]
        assert ids == (list(SM120) if engine == "sglang" else ["allreduce-fusion"])
        for r in prov["recipes"]:
            assert r["sha256"] == catalog.recipes[r["id"]].sha256
            assert r["state"] == "applied"  # 0.5.9/0.6.3 have none of it upstream
            cut, _ = catalog.recipes[r["id"]].for_versions({"sglang": "0.5.9", "flashinfer": "0.6.3"})
            want = [op.index for op in cut.ops if op.engine == engine]  # the variant of these releases
            assert r["ops"] == want  # each wheel carries only its own engine's ops


def test_wheel_is_reproducible_and_idempotent(sm120_wheels, run_cli):
    """Build again into the same directory: the same bytes come out."""
    out_dir = sm120_wheels["sglang"].parent
    before = {p.name: p.read_bytes() for p in out_dir.glob("*.whl")}
    code, out, err = run_cli(
        "wheel", "sm120", "--from", "sglang", "--from", "flashinfer-python==0.6.3", "-o", str(out_dir), "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"] and {w["engine"] for w in doc["wheels"]} == {"sglang", "flashinfer"}
    assert {p.name: p.read_bytes() for p in out_dir.glob("*.whl")} == before
    for w in doc["wheels"]:
        assert w["sha256"] == hashlib.sha256(before[Path(w["path"]).name]).hexdigest()


def test_source_date_epoch_sets_the_timestamp(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    code, out, err = run_cli(
        "wheel", "max-running-requests", "--from", "sglang==0.5.9", "--label", "mrr", "-o", str(tmp_path), "--json"
    )
    assert code == 0, err
    (w,) = json.loads(out)["wheels"]
    assert re.fullmatch(r"0\.5\.9\+mrr\.[0-9a-f]{8}", w["version"]), w["version"]
    with zipfile.ZipFile(w["path"]) as z:
        assert {zi.date_time for zi in z.infolist()} == {(2023, 11, 14, 22, 13, 20)}
        assert {(zi.external_attr >> 16) & 0o777 for zi in z.infolist()} <= {0o644, 0o755}


def test_a_changed_recipe_is_a_new_version_and_the_same_recipes_the_same_bytes(tmp_path, run_cli):
    from tests.conftest import ROOT

    copy = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", copy)

    def build(recipes: Path, out: str) -> dict:
        code, printed, err = run_cli(
            "--recipes", str(recipes), "wheel", "max-running-requests", "--from", "sglang==0.5.9", "-o",
            str(tmp_path / out), "--json",
        )  # fmt: skip
        assert code == 0, err
        (w,) = json.loads(printed)["wheels"]
        return w

    # The same recipe content, from another directory: the same version and the same bytes.
    a, b = build(ROOT / "recipes", "a"), build(copy, "b")
    assert a["version"] == b["version"] == f"0.5.9+max.running.requests.{a['recipes_digest']}"
    assert Path(a["path"]).name == Path(b["path"]).name
    assert Path(a["path"]).read_bytes() == Path(b["path"]).read_bytes()
    # The recipe changed (another default): another version, which pip installs over the old one.
    f = copy / "max-running-requests.toml"
    assert f.read_text().count("1024") >= 1
    f.write_text(f.read_text().replace("1024", "2048"))
    c = build(copy, "c")
    assert c["version"] == f"0.5.9+max.running.requests.{c['recipes_digest']}"
    assert c["recipes_digest"] != a["recipes_digest"] and c["version"] != a["version"]
    with zipfile.ZipFile(c["path"]) as z:
        assert "max_running_requests: Optional[int] = 2048" in z.read("sglang/srt/server_args.py").decode()


def test_half_of_a_two_engine_recipe_is_refused(tmp_path, run_cli):
    code, out, err = run_cli("wheel", "sm120", "--from", "sglang==0.5.9", "-o", str(tmp_path / "out"))
    assert code == 2
    assert err.strip() == (
        "patchkit: error: recipe allreduce-fusion also edits flashinfer: a wheel of one engine would carry half of it "
        "(hint: add --from flashinfer==VERSION to build the matching wheels in the same run, or leave "
        "allreduce-fusion out)"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--from", "tgi==0.1"),
            "patchkit: error: --from 'tgi==0.1': unknown engine 'tgi' (hint: engines: sglang, flashinfer, vllm; e.g. "
            "--from sglang==0.5.9)",
        ),
        (
            ("--from", "sglang==latest"),
            "patchkit: error: --from 'sglang==latest': 'latest' is not a version (hint: e.g. --from sglang==0.5.9)",
        ),
        (
            ("--from", "sglang==0.5.9", "--label", "+"),
            "patchkit: error: --label '+': not usable as a PEP 440 local version label (hint: use letters, digits "
            "and dots, e.g. --label sm120 or --label sm120.v2)",
        ),
    ],
)
def test_bad_arguments_are_one_line(args, message, tmp_path, run_cli):
    code, out, err = run_cli("wheel", "autotune-cutlass", *args, "-o", str(tmp_path))
    assert (code, err.strip()) == (2, message)


def test_installed_wheels_carry_the_recipes(sm120_wheels, tmp_path, run_cli):
    py, site = make_venv(tmp_path / "venv")
    pip(py, "install", "--no-deps", "--no-compile", str(sm120_wheels["sglang"]), str(sm120_wheels["flashinfer"]))
    shown = pip(py, "show", "sglang").stdout
    assert f"Version: 0.5.9+{labels()['sglang']}" in shown
    sglang_di = site / f"sglang-0.5.9+{labels()['sglang']}.dist-info"
    for di in (sglang_di.name, f"flashinfer_python-0.6.3+{labels()['flashinfer']}.dist-info"):
        assert verify_installed(site, site / di) == []
    # The code as installed does what the recipes say, and the dist-info's patchkit.json
    # says patchkit put it there, so every op reads "applied" (not "upstream").
    code, out, err = run_cli("status", "sm120", "-t", f"sglang={site}", "-t", f"flashinfer={site}", "--json")
    assert code == 0, out + err
    states = ops_states(json.loads(out))
    assert set(states) == set(SM120)
    assert all(s == {"applied"} for s in states.values()), states
    # Same through the interpreter: --python finds the copies it imports.
    code, out, err = run_cli("status", *SGLANG_ONLY, "--python", str(py), "--json")
    assert code == 0, out + err
    assert json.loads(out)["targets"] == {
        "sglang": {"root": str(site.resolve()), "layout": "package", "version": f"0.5.9+{labels()['sglang']}"}
    }
    # Applying on top changes nothing (idempotent): no file, no RECORD.
    before = (sglang_di / "RECORD").read_bytes()
    code, out, err = run_cli("apply", "sm120", "--python", str(py))
    assert code == 0, out + err
    assert "nothing to apply" in out
    assert (sglang_di / "RECORD").read_bytes() == before
    # The guard needs no `apply --save` on the host: the wheels carry the profile they were
    # built for, and `run` judges the installed copies against it, then starts CMD.
    from tests.conftest import ROOT

    assert not (site / ".patchkit" / "profile.toml").exists()
    p = subprocess.run(
        [sys.executable, "-m", "patchkit", "--recipes", str(ROOT / "recipes"), "run", "--python", str(py), "--",
         str(py), "-c", "print('served')"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 0 and p.stdout.strip() == "served", p.stdout + p.stderr
    assert f"{py}'s engines are as the profile {site.resolve()}/" in p.stderr, p.stderr


# -- in place --------------------------------------------------------------------------------


@pytest.fixture
def installed_sglang(tmp_path):
    """A fresh venv with the real sglang 0.5.9 wheel pip-installed (bytecode compiled, as pip does)."""
    from patchkit.upstream import fetch

    py, site = make_venv(tmp_path / "venv")
    before = files_under(site)
    pip(py, "install", "--no-deps", str(fetch.fetch_wheel("sglang", "0.5.9")))
    return py, site, before


def test_in_place_keeps_record_true_and_pip_uninstall_clean(installed_sglang, run_cli):
    py, site, before_install = installed_sglang
    di = site / "sglang-0.5.9.dist-info"
    pristine_record = (di / "RECORD").read_bytes()
    server_args = site / "sglang/srt/server_args.py"
    pristine = server_args.read_bytes()

    code, out, err = run_cli("apply", *SGLANG_ONLY, "--python", str(py))
    assert code == 0, out + err
    assert server_args.read_bytes() != pristine
    assert verify_installed(site, di) == []
    old_rows = {r[0]: r for r in record_rows(pristine_record)}
    new_rows = {r[0]: r for r in record_rows((di / "RECORD").read_bytes())}
    assert set(old_rows) == set(new_rows)
    assert {p for p in new_rows if new_rows[p] != old_rows[p]} == {
        "sglang/srt/server_args.py",
        "sglang/srt/model_executor/model_runner.py",
    }

    # Idempotent: a second apply writes nothing, RECORD included.
    record_after = (di / "RECORD").read_bytes()
    code, out, err = run_cli("apply", *SGLANG_ONLY, "--python", str(py))
    assert code == 0 and "nothing to apply" in out
    assert (di / "RECORD").read_bytes() == record_after

    # Revert gives back the files and the RECORD pip wrote, byte for byte.
    assert run_cli("revert", *SGLANG_ONLY, "--python", str(py))[0] == 0
    assert server_args.read_bytes() == pristine
    assert (di / "RECORD").read_bytes() == pristine_record

    # Patched again, pip uninstall removes every file of the package; only patchkit's own
    # state directory (.patchkit/: journal, lock, written blobs) stays in site-packages.
    assert run_cli("apply", *SGLANG_ONLY, "--python", str(py))[0] == 0
    pip(py, "uninstall", "-y", "sglang")
    left = files_under(site) - before_install
    assert left and all(p.startswith(".patchkit/") for p in left), sorted(left)[:10]
    assert not (site / "sglang").exists()


def test_record_is_written_with_the_files_or_not_at_all(tree, run_cli, monkeypatch):
    from patchkit.base import fsio

    site = tree("sglang", links=True)  # an unpacked wheel: package layout with a dist-info RECORD
    di = site / "sglang-0.5.9.dist-info"
    snapshot = {
        p: p.read_bytes()
        for p in [di / "RECORD", site / "sglang/srt/server_args.py", site / "sglang/srt/model_executor/model_runner.py"]
    }
    real = fsio.write_temp

    def failing(path, data, mode=None):
        if path.name == "RECORD":
            raise fsio.cannot_write(path, OSError(28, "No space left on device"))
        return real(path, data, mode)

    monkeypatch.setattr(fsio, "write_temp", failing)
    code, _, err = run_cli("apply", *SGLANG_ONLY, "-t", f"sglang={site}")
    assert code == 2 and "RECORD: the disk is full" in err, err
    assert {p: p.read_bytes() for p in snapshot} == snapshot
    monkeypatch.setattr(fsio, "write_temp", real)
    assert run_cli("apply", *SGLANG_ONLY, "-t", f"sglang={site}")[0] == 0
    assert verify_installed(site, di) == []


def test_system_site_packages_are_refused(tree, run_cli, monkeypatch):
    from patchkit.core import record

    site = tree("sglang", links=True)
    server_args = site / "sglang/srt/server_args.py"
    pristine = server_args.read_bytes()
    monkeypatch.setattr(record, "system_locations", lambda: [site])
    code, out, err = run_cli("apply", "max-running-requests", "-t", f"sglang={site}")
    assert code == 2
    assert err.startswith(
        f"patchkit: error: {site}: is the site-packages of a system Python ({site}); patchkit will not patch it in "
        "place (hint: create a venv you own"
    )
    assert server_args.read_bytes() == pristine


def test_real_system_location_is_recognised(monkeypatch):
    from patchkit.base.errors import TargetError
    from patchkit.core import record

    if sys.prefix == sys.base_prefix:
        pytest.skip("runs in a venv only: its base interpreter's site-packages is the system one")
    import sysconfig

    monkeypatch.delenv(record.ALLOW_SYSTEM_ENV, raising=False)
    base_purelib = Path(sysconfig.get_path("purelib", vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix}))
    said = re.escape(f"{os.path.realpath(base_purelib)}: is the site-packages of a system Python (")
    with pytest.raises(TargetError, match=f"^{said}.*\\); patchkit will not patch it in place \\(hint: create a venv"):
        record.guard_writable(base_purelib)
    record.guard_writable(Path(os.environ.get("TMPDIR", "/tmp")))
