"""A user's week (issue 23), each rough edge as the commands the user typed: without a
project `new` and `capture` write ./recipes/; every hint names a command that works where it
is given; `revert NAME --save` with no profile records the tree as it stands."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.authoring.test_capture import MOD, _edit, checkout  # noqa: F401  (a fixture: a small tagged sglang checkout)
from tests.conftest import MINIMAL_RECIPE, ROOT, git, mini_sglang


def _hint(err: str) -> str:
    m = re.search(r"\(hint: (.*)\)$", err.strip())
    assert m, err
    return m.group(1)


# -- without a project --------------------------------------------------------------------------


def test_new_without_a_project_writes_recipes_here_and_says_so(tmp_path, run_cli):
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "patchkit" / "recipes"
    code, out, err = run_cli("new", "my-fix", cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines() == [
        f"created {tmp_path / 'recipes'}/: no project in . or above (a directory with upstream_pins.toml or "
        "recipes/*.toml); this one is one from now on. --out FILE writes elsewhere.",
        f"wrote {tmp_path / 'recipes' / 'my-fix.toml'}: edit it, then `patchkit check "
        f"{tmp_path / 'recipes' / 'my-fix.toml'}`",
    ]
    assert not user.exists() or not list(user.iterdir())  # never the user's recipes
    # The draft is this project's now: check and list find it here, and a second one goes beside it.
    code, out, err = run_cli("list", cwd=tmp_path)
    assert "my-fix" in out and "[project]" in out, out
    code, out, err = run_cli("new", "other", cwd=tmp_path)
    assert code == 0 and out.startswith("wrote ") and (tmp_path / "recipes" / "other.toml").is_file()
    # --out writes where it says, creating its directory without a word about projects.
    code, out, err = run_cli("new", "mine", "--out", str(tmp_path / "elsewhere" / "mine.toml"), cwd=tmp_path)
    assert code == 0 and out.startswith("wrote ") and (tmp_path / "elsewhere" / "mine.toml").is_file()


def test_capture_without_a_project_writes_recipes_here(tmp_path, checkout, run_cli):  # noqa: F811
    _edit(checkout, MOD, 'backend: str = "auto"', 'backend: str = "cutlass"')
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", cwd=work)
    assert code == 0, err
    assert out.startswith(f"created {work / 'recipes'}/: no project in . or above")
    assert (work / "recipes" / "mine.toml").is_file()


# -- every hint works where it is given --------------------------------------------------------


def test_status_and_diff_in_an_unrelated_directory_name_what_works_there(tmp_path, run_cli):
    recipes = tmp_path / "recipes-elsewhere"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(MINIMAL_RECIPE.format(id="widen"))
    site = mini_sglang(tmp_path / "site", {"sglang/srt/x.py": 'def f():\n    return ["a"]\n'})
    work = tmp_path / "anywhere"
    work.mkdir()
    for cmd in ("status", "diff"):
        code, out, err = run_cli("--recipes", str(recipes), cmd, "widen", cwd=work)
        assert code == 2, err
        assert "sync" not in err  # `patchkit sync` fails here: there are no pins
        assert err.strip() == (
            "patchkit: error: no sglang tree to work on: no --target or --python, and no upstream_pins.toml here or "
            "above (so no workspace) (hint: name the tree: --target sglang=PATH (a checkout, an unpacked wheel, "
            "site-packages) or --python PY (the interpreter that imports it))"
        )
        # What the hint names works, here.
        code, out, err = run_cli("--recipes", str(recipes), cmd, "widen", "--target", f"sglang={site}", cwd=work)
        assert code in (0, 1) and "error" not in err, err


def test_sync_without_pins_hint_makes_pins_that_sync_reads(tmp_path, run_cli):
    code, out, err = run_cli("sync", cwd=tmp_path)
    assert code == 2 and not (tmp_path / ".patchkit").exists()
    hint = _hint(err)
    assert hint.startswith("pin one: printf ") and "`patchkit status --python PY` or `-t ENGINE=PATH`" in hint
    # The shell command of the hint, as the user pastes it.
    cmd = hint[len("pin one: ") : hint.index(" (sync records")]
    subprocess.run(["bash", "-c", cmd], cwd=tmp_path, check=True)
    assert (tmp_path / "upstream_pins.toml").read_text() == '[sglang]\nversion = "0.5.9"\n'
    from patchkit.core.pins import load

    assert load(tmp_path / "upstream_pins.toml")["sglang"].version == "0.5.9"


@pytest.fixture
def small_upstream(tmp_path) -> Path:
    """A git checkout of a small sglang, v0.5.9 then v0.5.10, on v0.5.9."""
    repo = mini_sglang(tmp_path / "upstream" / "python", {"sglang/srt/x.py": 'def f():\n    return ["a"]\n'})
    repo = repo.parent
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "0.5.9")
    git(repo, "tag", "v0.5.9")
    (repo / "python/sglang/version.py").write_text('__version__ = "0.5.10"\n')
    git(repo, "commit", "-q", "-am", "0.5.10")
    git(repo, "tag", "v0.5.10")
    git(repo, "checkout", "-q", "v0.5.9")
    return repo


def test_fork_without_pins_names_the_base_and_upgrade_says_how_to_sync_later(tmp_path, run_cli, small_upstream):
    recipes = tmp_path / "r"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(MINIMAL_RECIPE.format(id="widen"))
    work = tmp_path / "anywhere"
    work.mkdir()
    target = f"sglang={small_upstream}"
    code, out, err = run_cli("--recipes", str(recipes), "fork", "sync", "widen", "-t", target, cwd=work)
    assert code == 2, err
    hint = _hint(err)
    assert hint == (
        f"name the upstream tag or commit to build on: `patchkit fork sync widen -t {target} --base v0.5.9` "
        "(v0.5.9 is the tag the checkout is on)"
    )
    said = shlex.split(hint.split("`")[1])[1:]  # the command of the hint, as typed
    code, out, err = run_cli("--recipes", str(recipes), *said, cwd=work)
    assert code == 0, err
    code, out, err = run_cli("--recipes", str(recipes), "fork", "upgrade", "widen", "-t", target, "--to", "v0.5.10",
                             cwd=work)  # fmt: skip
    assert code == 0, err
    assert "pin did not move" not in out
    line = out.strip().splitlines()[-1]
    assert line == (
        "no upstream_pins.toml here, so no pin to move: a later `fork sync` takes --base v0.5.10 "
        f"(`patchkit fork sync widen -t {target} --base v0.5.10`)"
    )
    code, out, err = run_cli("--recipes", str(recipes), *shlex.split(line.split("`")[3])[1:], cwd=work)
    assert code == 0 and "unchanged" in out, out + err


# -- revert --save with no profile ---------------------------------------------------------------


@pytest.mark.real
def test_revert_save_with_no_profile_records_the_tree_as_it_stands(tree, run_cli, tmp_path):
    """The seed deployment's sequence: apply sm120, then revert the recipe that collapsed
    throughput, recording it; `status` then reads the tree as its profile wants (exit 0)."""
    sg, fi = tree("sglang", links=True), tree("flashinfer", links=True)
    t = ("-t", f"sglang={sg}", "-t", f"flashinfer={fi}")
    assert run_cli("--recipes", str(ROOT / "recipes"), "apply", "sm120", *t, cwd=tmp_path)[0] == 0
    code, out, err = run_cli("--recipes", str(ROOT / "recipes"), "revert", "allreduce-fusion", *t, "--save",
                             cwd=tmp_path)  # fmt: skip
    assert code == 0, err
    profile = sg.resolve() / ".patchkit" / "profile.toml"
    assert (
        f"profile {profile}: there was none, so it records the tree as it now stands: bundles += sm120; "
        "exclude += allreduce-fusion" in out
    ), out
    assert 'bundles = ["sm120"]' in profile.read_text() and 'exclude = ["allreduce-fusion"]' in profile.read_text()
    code, out, err = run_cli("--recipes", str(ROOT / "recipes"), "status", *t, "--json", cwd=tmp_path)
    assert code == 0, out + err
    assert json.loads(out)["excluded"] == ["allreduce-fusion"]


# -- verify --build: the tvm-ffi headers come from the index, into the cache -----------------------


@pytest.mark.real
def test_tvm_ffi_headers_are_fetched_into_the_cache_once(tree, monkeypatch):
    """No apache-tvm-ffi installed: the release FlashInfer 0.6.3's METADATA requires comes
    from the index through patchkit's client; its headers alone land in the cache, and the
    next build finds them there without a download."""
    from packaging.specifiers import SpecifierSet

    from patchkit.base import paths
    from patchkit.base.target import open_target
    from patchkit.upstream import fetch
    from patchkit.verify import tvmffi

    fi = open_target("flashinfer", tree("flashinfer", "0.6.3", links=True))
    assert not (fi.root / "tvm_ffi").exists()
    spec = tvmffi.required(fi.root)
    assert spec == "!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6"
    said = []
    inc = tvmffi.fetch_headers(fi.root, said.append)
    version = inc.parent.parent.name
    assert inc == paths.cache_dir() / "tvm-ffi" / version / "tvm_ffi" / "include"
    assert version in SpecifierSet(spec) and (inc / "tvm" / "ffi" / "function.h").is_file()
    assert [p.name for p in inc.parent.parent.iterdir()] == ["tvm_ffi"]  # the headers only
    assert [p.name for p in inc.parent.iterdir()] == ["include"]

    def no_download(*a, **k):
        raise AssertionError("downloaded again")

    monkeypatch.setattr(fetch, "fetch_wheel", no_download)
    assert tvmffi.fetch_headers(fi.root) == inc


# -- output and discovery ---------------------------------------------------------------------------


def test_completion_offers_engines_then_versions_or_paths(tmp_path, run_cli, monkeypatch):
    from tests.cli.test_cli_small import _complete

    cache = tmp_path / "cache"
    for dist, v in (("sglang", "0.5.9"), ("sglang", "0.5.10"), ("sglang", "0.5.23"), ("flashinfer-python", "0.6.3")):
        (cache / "wheels" / dist / v).mkdir(parents=True)
        (cache / "wheels" / dist / v / f"{dist}-{v}-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    (tmp_path / "trees" / "sg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    from patchkit.base.engines import ENGINES

    assert _complete(run_cli, monkeypatch, "patchkit status -t ") == [f"{e}=" for e in ENGINES]
    assert "vllm=" in _complete(run_cli, monkeypatch, "patchkit status -t ")
    assert _complete(run_cli, monkeypatch, "patchkit apply sm120 --target fl") == ["flashinfer="]
    assert _complete(run_cli, monkeypatch, "patchkit status -t sglang=tr") == ["sglang=trees/"]
    assert _complete(run_cli, monkeypatch, "patchkit status -t sglang=trees/") == ["sglang=trees/sg/"]
    assert _complete(run_cli, monkeypatch, "patchkit drift --to sglang==0.5.") == [
        "sglang==0.5.9",
        "sglang==0.5.10",
        "sglang==0.5.23",
    ]
    assert _complete(run_cli, monkeypatch, "patchkit drift sm120 --across sglang==0.5.9..0.5.2") == [
        "sglang==0.5.9..0.5.23"
    ]
    assert _complete(run_cli, monkeypatch, "patchkit wheel sm120 --from flashinfer==") == ["flashinfer==0.6.3"]
    assert _complete(run_cli, monkeypatch, "patchkit port x --to sg") == ["sglang=="]
    assert _complete(run_cli, monkeypatch, "patchkit fork upgrade x --to v") == []  # a git rev, not a release


def test_status_help_lists_every_state(run_cli):
    from patchkit.base.states import VERDICTS

    code, out, err = run_cli("status", "--help")
    listed = {ln.split()[0] for ln in out.split("States:")[1].split("Exit 0")[0].splitlines() if ln.strip()}
    assert listed == {str(s) for s in VERDICTS}


def test_the_across_table_fits_the_terminal():
    import re as _re

    from patchkit.commands.drift import table

    versions = [f"0.5.{i}" for i in range(9, 24)] + ["0.5.10.post1", "0.5.12.post1", "0.5.13.post1", "0.5.15.post1"]
    ids = ["allreduce-fusion", "autotune-cutlass", "max-running-requests", "moe-backend-sm120"]
    up = {"state": "upstream", "ops": []}
    pend = {"state": "pending", "ops": [{"state": "upstream"}, {"state": "pending"}]}
    matrix = {v: [{"id": i, **(up if n % 2 else pend)} for n, i in enumerate(ids)] for v in versions}
    for columns in (80, 120, 300):
        lines = [_re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in table(versions, matrix, columns)]
        assert max(len(ln) for ln in lines) <= columns, columns
        shown = [v for ln in lines if ln.startswith(" ") for v in ln.split()]
        assert shown == versions  # every release once, in order
        for rid in ids:
            cells = [c for ln in lines if ln.startswith(rid + " ") for c in ln[len(rid) :].split()]
            assert len(cells) == len(versions) and set(cells) <= {"UPSTREAM", "pending+1up"}
    assert len([ln for ln in table(versions, matrix, 300) if ln.startswith(" ")]) == 1  # wide: one block


# -- the pristine reference: from the wheel pip installed, or a download that says why -------------


def _mini_wheel(path: Path, version: str = "0.5.9") -> Path:
    import base64
    import hashlib
    import zipfile

    files = {
        "sglang/__init__.py": b"",
        "sglang/version.py": f'__version__ = "{version}"\n'.encode(),
        "sglang/srt/x.py": b'def f():\n    return ["a"]\n',
        f"sglang-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n".encode(),
        f"sglang-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    rows.append(f"sglang-{version}.dist-info/RECORD,,")
    whl = path / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"sglang-{version}.dist-info/RECORD", "\n".join(rows) + "\n")
    return whl


def test_the_pristine_reference_is_the_wheel_pip_installed_from_a_file(tmp_path, monkeypatch, capsys):
    import zipfile

    from patchkit.base.target import open_target
    from patchkit.upstream import fetch, pristine

    (tmp_path / "dist").mkdir()
    whl = _mini_wheel(tmp_path / "dist")
    # Installed as `pip install dist/sglang-0.5.9-py3-none-any.whl` leaves it: the files, and
    # PEP 610's direct_url.json naming the file and its sha256 (pip's own layout of it).
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    digest = fetch.file_sha256(whl)
    (site / "sglang-0.5.9.dist-info" / "direct_url.json").write_text(
        json.dumps({"archive_info": {"hash": f"sha256={digest}", "hashes": {"sha256": digest}}, "url": whl.as_uri()})
    )
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    ref = pristine.Reference(open_target("sglang", site))
    assert ref.available, ref.why_not
    assert ref.what == f"sglang 0.5.9's wheel ({whl}, as installed)"
    assert ref.read("sglang/srt/x.py") == b'def f():\n    return ["a"]\n'

    # The file changed since pip installed it (its sha256 is not pip's): not a reference.
    whl.write_bytes(whl.read_bytes() + b"\0")
    ref = pristine.Reference(open_target("sglang", site))
    assert not ref.available and "not in patchkit's cache" in ref.why_not

    # Online, with nothing to read: the download says why it happens (whole wheels: the lazy
    # reader's own messages are tests/upstream/test_lazywheel.py's).
    monkeypatch.delenv("PATCHKIT_OFFLINE")
    monkeypatch.setenv("PATCHKIT_LAZY", "0")
    fresh = _mini_wheel(tmp_path)
    from patchkit.upstream import recorded

    recorded.record(fresh, fetch.file_sha256(fresh))  # as a download records what it checked
    monkeypatch.setattr(fetch, "fetch_wheel", lambda dist, v, say=None, **k: fresh)
    capsys.readouterr()
    ref = pristine.Reference(open_target("sglang", site))
    assert ref.available and ref.what == "sglang 0.5.9's wheel"
    assert (
        "pristine reference: sglang 0.5.9: downloading the release's wheel once into "
        f"{tmp_path / 'empty-cache' / 'wheels' / 'sglang' / '0.5.9'} to compare with (pip keeps no copy patchkit can "
        "read: only a wheel installed from a file, named in its direct_url.json)" in capsys.readouterr().err
    )
