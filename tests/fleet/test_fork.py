"""Fork branches on real releases.

An "upstream" git repository is built from released wheels: SGLang 0.5.9, 0.5.12 and 0.5.13
committed one after another in the upstream layout (python/sglang/...) and tagged v0.5.9,
v0.5.12, v0.5.13; FlashInfer 0.6.3 (flashinfer/, include/, csrc/) tagged v0.6.3.  Every
test works on its own clone or copy, so nothing leaks between tests.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import unidiff

from tests.conftest import ROOT, git, git_layout, pk

# One worker under pytest-xdist, so that the module's upstream repositories are built once.
pytestmark = [pytest.mark.real, pytest.mark.xdist_group("fork")]

RECIPES = ["allreduce-fusion", "autotune-cutlass", "max-running-requests", "moe-backend-sm120"]
SGLANG_RELEASES = ["0.5.9", "0.5.12", "0.5.13"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def commits(repo: Path, rng: str) -> list[str]:
    """Commits of a range, oldest first."""
    return git(repo, "rev-list", "--reverse", rng).split()


def trailer(repo: Path, commit: str) -> tuple[str, str]:
    body = git(repo, "log", "-1", "--format=%B", commit)
    line = [ln for ln in body.splitlines() if ln.startswith("Patchkit-Recipe:")]
    assert len(line) == 1, body
    _, rid, digest = line[0].split()
    return rid, digest


def changed_files(repo: Path, commit: str) -> set[str]:
    return set(git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", commit).split())


def clone(src: Path, dest: Path, rev: str | None = None) -> Path:
    git(src.parent, "clone", "-q", str(src), str(dest))
    if rev:
        git(dest, "checkout", "-q", "--detach", rev)
    return dest


def run_json(run_cli, *args: str) -> tuple[int, dict, str]:
    code, out, err = run_cli(*args, "--json")
    return code, (json.loads(out) if out.strip() else {}), err


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang_upstream(release_dir, tmp_path_factory) -> Path:
    """SGLang's three releases as upstream history (each release replaces the tree).  Its
    files are hard links to the releases: tests only clone it, never write in it."""
    repo = tmp_path_factory.mktemp("upstream") / "sglang"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for v in SGLANG_RELEASES:
        shutil.rmtree(repo / "python", ignore_errors=True)
        git_layout("sglang", release_dir("sglang", v), repo, links=True)
        # Something outside the package, as a real checkout has (docs, tests, kernels):
        # fork commits must carry it along untouched.
        (repo / "README.md").write_text(f"SGLang {v}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"sglang {v}")
        git(repo, "tag", f"v{v}")
    git(repo, "gc", "-q")
    yield repo
    for v in SGLANG_RELEASES:
        assert not release_dir.changes("sglang", v), f"sglang {v} was written through a link"


@pytest.fixture(scope="module")
def flashinfer_upstream(release_dir, tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("upstream") / "flashinfer"
    git_layout("flashinfer", release_dir("flashinfer", "0.6.3"), repo, links=True)
    (repo / "README.md").write_text("FlashInfer 0.6.3\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "flashinfer 0.6.3")
    git(repo, "tag", "v0.6.3")
    git(repo, "gc", "-q")
    yield repo
    assert not release_dir.changes("flashinfer", "0.6.3"), "flashinfer 0.6.3 was written through a link"


@pytest.fixture(scope="module")
def synced(sglang_upstream, tmp_path_factory) -> tuple[Path, dict]:
    """A clone (on main = v0.5.13) with patchkit/sm120 built on the pinned v0.5.9 by the real
    CLI.  Shared: tests copy it before changing anything."""
    repo = clone(sglang_upstream, tmp_path_factory.mktemp("synced") / "sglang")
    p = pk("fork", "sync", "sm120", "--target", f"sglang={repo}", "--json", cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return repo, json.loads(p.stdout)


@pytest.fixture
def synced_copy(synced, tmp_path) -> Path:
    """A private clone of the synced repository, with its own patchkit/sm120."""
    repo, doc = synced
    dest = clone(repo, tmp_path / "sglang")
    git(dest, "branch", "patchkit/sm120", doc["head"])
    return dest


# -- sync -------------------------------------------------------------------------------------


def test_sync_makes_one_commit_per_recipe_on_the_pinned_tag(synced, recipes_dir):
    repo, doc = synced
    base = git(repo, "rev-parse", "v0.5.9").strip()
    assert doc["ok"] and doc["changed"] and doc["previous"] is None
    assert doc["base"] == {"rev": "v0.5.9", "commit": base, "version": "0.5.9"}
    assert [(s["id"], s["state"], s["action"]) for s in doc["recipes"]] == [
        (r, "pending", "committed") for r in RECIPES
    ]

    carried = commits(repo, f"{base}..patchkit/sm120")
    assert carried == [s["commit"] for s in doc["recipes"]]
    assert git(repo, "rev-parse", f"{carried[0]}^").strip() == base
    base_date = git(repo, "log", "-1", "--format=%ct", base).strip()
    for c, rid in zip(carried, RECIPES, strict=True):
        info = git(repo, "log", "-1", "--format=%s%n%an <%ae>%n%cn <%ce>%n%at %ct", c).splitlines()
        assert info == [
            f"patchkit: {rid}",
            "patchkit <patchkit@localhost>",
            "patchkit <patchkit@localhost>",
            f"{base_date} {base_date}",
        ]
        assert trailer(repo, c) == (rid, sha(recipes_dir / f"{rid}.toml"))
        recipe = tomllib.loads((recipes_dir / f"{rid}.toml").read_text())
        body = git(repo, "log", "-1", "--format=%b", c)
        assert body.startswith(recipe["summary"] + "\n\n" + recipe["rationale"].strip() + "\n\n")
    # allreduce-fusion spans both engines: the sglang fork carries only its sglang file,
    # and the commit says where the rest belongs.
    assert changed_files(repo, carried[0]) == {
        "python/sglang/srt/layers/communicator.py",
        "python/sglang/srt/server_args.py",  # the auto-enable condition (SGLang < 0.5.15)
    }
    assert "its flashinfer ops #4, #5 belong in the flashinfer fork" in git(
        repo, "log", "-1", "--format=%b", carried[0]
    )
    assert changed_files(repo, carried[1]) == {"python/sglang/srt/model_executor/model_runner.py"}
    assert changed_files(repo, carried[2]) == changed_files(repo, carried[3]) == {"python/sglang/srt/server_args.py"}
    assert git(repo, "show", "patchkit/sm120:README.md") == "SGLang 0.5.9\n"
    # The user's checkout was not touched: still main, clean, and no worktree left behind.
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(repo, "status", "--porcelain") == ""
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert not (repo / ".patchkit").exists()


def test_each_commit_equals_applying_that_recipe_alone(synced, synced_copy, tree, run_cli, tmp_path):
    """Check every commit against `patchkit apply <recipe>` run by hand on its parent."""
    _, doc = synced
    repo = synced_copy
    flashinfer = tree("flashinfer", links=True)  # allreduce-fusion also edits FlashInfer; apply needs a tree
    for step in doc["recipes"]:
        c = step["commit"]
        wt = tmp_path / step["id"]
        git(repo, "worktree", "add", "-q", "--detach", str(wt), f"{c}^")
        code, out, err = run_cli(
            "apply", step["id"], "--ignore-range", "-t", f"sglang={wt}", "-t", f"flashinfer={flashinfer}"
        )
        assert code == 0, out + err
        git(wt, "add", "-A")  # .patchkit/ (the journal) ignores itself
        assert git(wt, "write-tree").strip() == git(repo, "rev-parse", f"{c}^{{tree}}").strip(), step["id"]
        git(repo, "worktree", "remove", "--force", str(wt))


def test_sync_again_changes_nothing_and_is_the_same_in_another_clone(
    synced, synced_copy, sglang_upstream, run_cli, tmp_path
):
    _, first = synced
    head = first["recipes"][-1]["commit"]
    code, doc, err = run_json(run_cli, "fork", "sync", "sm120", "-t", f"sglang={synced_copy}")
    assert code == 0, err
    assert (doc["changed"], doc["previous"], doc["head"]) == (False, head, head)
    assert git(synced_copy, "reflog", "--format=%H", "patchkit/sm120").split() == [head]  # never moved

    other = clone(sglang_upstream, tmp_path / "other")
    code, doc, err = run_json(run_cli, "fork", "sync", "sm120", "-t", f"sglang={other}")
    assert code == 0, err
    assert [s["commit"] for s in doc["recipes"]] == [s["commit"] for s in first["recipes"]]


# -- export -----------------------------------------------------------------------------------


def test_export_is_a_series_that_git_am_and_patch_apply(synced, sglang_upstream, run_cli, tmp_path):
    repo, doc = synced
    out = tmp_path / "patches"
    code, stdout, err = run_cli("fork", "export", "sm120", "-t", f"sglang={repo}", "--out", str(out))
    assert code == 0, err
    names = [f"{i:04d}-patchkit-{rid}.patch" for i, rid in enumerate(RECIPES, 1)]
    assert (out / "series").read_text().splitlines() == names
    assert sorted(p.name for p in out.iterdir()) == sorted([*names, "series"])
    for name, step in zip(names, doc["recipes"], strict=True):
        ps = unidiff.PatchSet((out / name).read_text())
        assert {f.path for f in ps} == set(step["files"])
        assert all(len(f) >= 1 for f in ps)
    want = git(repo, "rev-parse", "patchkit/sm120^{tree}").strip()

    am = clone(sglang_upstream, tmp_path / "am", "v0.5.9")
    git(am, "am", "-q", *[str(out / n) for n in names])
    assert git(am, "rev-parse", "HEAD^{tree}").strip() == want
    assert git(am, "log", "--format=%s", "-4").splitlines() == [f"patchkit: {r}" for r in reversed(RECIPES)]

    quilt = clone(sglang_upstream, tmp_path / "quilt", "v0.5.9")
    for name in (out / "series").read_text().split():
        p = subprocess.run(
            ["patch", "-p1", "--forward", "-s", "-i", str(out / name)], cwd=quilt, capture_output=True, text=True
        )
        assert p.returncode == 0, p.stdout + p.stderr
    git(quilt, "add", "-A")
    assert git(quilt, "write-tree").strip() == want

    # A second export into the same directory asks first.
    code, _, err = run_cli("fork", "export", "sm120", "-t", f"sglang={repo}", "--out", str(out))
    assert code == 2 and "already holds a patch series (5 file(s))" in err and "--force" in err


# -- upgrade ----------------------------------------------------------------------------------


def test_upgrade_to_0_5_12_then_0_5_13_drops_what_upstream_merged(synced_copy, run_cli, recipes_dir, tmp_path):
    repo = synced_copy
    pins = tmp_path / "upstream_pins.toml"
    shutil.copy(ROOT / "upstream_pins.toml", pins)
    pins_before = pins.read_bytes()
    # The user's own uncommitted work on main must survive every step.
    sa = repo / "python/sglang/srt/server_args.py"
    sa.write_bytes(sa.read_bytes() + b"# my local experiment\n")
    (repo / "notes.txt").write_text("untracked\n")
    dirty = git(repo, "status", "--porcelain")
    old_head = git(repo, "rev-parse", "patchkit/sm120").strip()
    others = [
        r for r in git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines() if "patchkit/" not in r
    ]
    common = ("--pins", str(pins), "--recipes", str(recipes_dir), "fork", "upgrade", "-t", f"sglang={repo}")

    code, out, err = run_cli(*common, "--to", "v0.5.12", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["previous"] == old_head and doc["changed"]
    assert doc["base"]["version"] == "0.5.12"
    assert [(s["id"], s["action"]) for s in doc["recipes"]] == [(r, "committed") for r in RECIPES]
    carried = commits(repo, "v0.5.12..patchkit/sm120")
    assert [trailer(repo, c)[0] for c in carried] == RECIPES
    assert git(repo, "rev-parse", f"{carried[0]}^").strip() == git(repo, "rev-parse", "v0.5.12").strip()
    assert pins.read_bytes() == pins_before  # no --move-pin, no change

    code, out, err = run_cli(*common, "--to", "v0.5.13", "--move-pin")
    assert code == 0, err
    assert (
        "dropped from patchkit/sm120: autotune-cutlass, moe-backend-sm120 (upstream v0.5.13 already does them)" in out
    )
    assert "upstream marker matched at sglang/srt/server_args.py:" in out
    states = dict(re.findall(r"^  ([a-z0-9-]+) +([a-z]+ +[a-z-]+)", out, re.M))
    assert {k: v.split() for k, v in states.items()} == {
        "allreduce-fusion": ["pending", "committed"],
        "autotune-cutlass": ["upstream", "dropped"],
        "max-running-requests": ["pending", "committed"],
        "moe-backend-sm120": ["upstream", "dropped"],
    }
    carried = commits(repo, "v0.5.13..patchkit/sm120")
    # What the engine reports on 0.5.13: upstream merged autotune-cutlass (a real list element
    # now) and an equivalent of moe-backend-sm120 (found by its marker); the other two are
    # still pending there, so they are carried.
    assert [trailer(repo, c)[0] for c in carried] == ["allreduce-fusion", "max-running-requests"]
    # The pin moved, line by line: rev and version; the wheel hash is left for `patchkit sync`.
    text = pins.read_text()
    # the rev line's trailing comment keeps its column (pins.set_value)
    (before,) = [ln for ln in pins_before.decode().splitlines() if ln.startswith('rev = "v0.5.')]
    assert 'rev = "v0.5.13"                       # tag matching the release' in text
    assert text.index("# tag matching the release") - text.index('rev = "v0.5.13"') == before.index("#")
    assert 'version = "0.5.13"' in text and 'sha256 = ""' in text
    assert len(text.splitlines()) == len(pins_before.decode().splitlines())
    assert "[flashinfer]" in text and 'rev = "v0.6.3"' in text
    # The user's checkout: same branch, same edits, same untracked file; other refs as they were.
    assert [
        r for r in git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines() if "patchkit/" not in r
    ] == others
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(repo, "status", "--porcelain") == dirty
    assert sa.read_bytes().endswith(b"# my local experiment\n")


def upstream_edit(repo, tag, message, path, old, new):
    """A made-up upstream release ``tag``: v0.5.9 with ``old`` replaced by ``new`` in ``path``."""
    git(repo, "checkout", "-q", "-b", "next", "v0.5.9")
    f = repo / path
    f.write_text(f.read_text().replace(old, new))
    git(repo, "commit", "-q", "-am", message)
    git(repo, "tag", tag)
    git(repo, "checkout", "-q", "main")


def test_upgrade_stops_on_a_missing_anchor_and_keeps_the_branch(synced_copy, run_cli, recipes_dir, tmp_path):
    repo = synced_copy
    pins = tmp_path / "upstream_pins.toml"
    shutil.copy(ROOT / "upstream_pins.toml", pins)
    # An "upstream" release where communicator.py lost the line allreduce-fusion inserts after.
    upstream_edit(
        repo,
        "v-next",
        "refactor communicator",
        "python/sglang/srt/layers/communicator.py",
        "_is_sm100_supported = _is_cuda and is_sm100_supported()\n",
        "",
    )
    before = git(repo, "rev-parse", "patchkit/sm120").strip()

    code, doc, err = run_json(
        run_cli,
        "--pins",
        str(pins),
        "--recipes",
        str(recipes_dir),
        "fork",
        "upgrade",
        "sm120",
        "-t",
        f"sglang={repo}",
        "--to",
        "v-next",
        "--move-pin",
    )
    assert code == 1
    assert pins.read_bytes() == (ROOT / "upstream_pins.toml").read_bytes() and doc["pin"] is None
    assert not doc["ok"] and not doc["changed"] and doc["head"] == before
    assert doc["errors"] and doc["errors"][0].startswith("allreduce-fusion: missing on v-next: op #2 (insert)")
    assert [(s["id"], s["action"]) for s in doc["recipes"]] == [
        ("allreduce-fusion", "blocked"),
        *[(r, "not-built") for r in RECIPES[1:]],
    ]
    assert git(repo, "rev-parse", "patchkit/sm120").strip() == before
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_upgrade_carries_a_recipe_whose_code_moved(sglang_upstream, run_cli, tmp_path):
    repo = clone(sglang_upstream, tmp_path / "sglang")
    # An "upstream" release that renamed the method holding the autotune list.
    upstream_edit(
        repo,
        "v-renamed",
        "rename the autotune check",
        "python/sglang/srt/model_executor/model_runner.py",
        "_should_run_flashinfer_autotune",
        "_should_autotune_flashinfer",
    )
    code, doc, err = run_json(run_cli, "fork", "sync", "autotune-cutlass", "-t", f"sglang={repo}")
    assert code == 0, err

    code, doc, err = run_json(
        run_cli, "fork", "upgrade", "autotune-cutlass", "-t", f"sglang={repo}", "--to", "v-renamed"
    )
    assert code == 0, err
    (step,) = doc["recipes"]
    assert (step["id"], step["state"], step["action"]) == ("autotune-cutlass", "moved", "committed")
    assert step["notes"] == [
        "op #1 (list-element) moved upstream from "
        "sglang/srt/model_executor/model_runner.py::ModelRunner._should_run_flashinfer_autotune; carried to "
        "sglang/srt/model_executor/model_runner.py::ModelRunner._should_autotune_flashinfer."
    ]
    (c,) = commits(repo, "v-renamed..patchkit/autotune-cutlass")
    assert c == step["commit"] and step["notes"][0] in git(repo, "log", "-1", "--format=%b", c)
    patch = git(repo, "show", "--format=", c)
    assert '-            # "flashinfer_cutlass",\n+            "flashinfer_cutlass",' in patch
    after = git(repo, "show", f"{c}:python/sglang/srt/model_executor/model_runner.py")
    body = after.split("def _should_autotune_flashinfer", 1)[1].split("\n    def ", 1)[0]
    assert '\n            "flashinfer_cutlass",\n' in body


# -- safety -----------------------------------------------------------------------------------


def test_a_checked_out_fork_with_local_changes_is_left_alone(synced_copy, run_cli):
    repo = synced_copy
    git(repo, "checkout", "-q", "patchkit/sm120")
    f = repo / "python/sglang/srt/server_args.py"
    mine = f.read_bytes() + b"# wip\n"
    f.write_bytes(mine)
    head = git(repo, "rev-parse", "HEAD").strip()

    code, out, err = run_cli("fork", "sync", "sm120", "-t", f"sglang={repo}", "--base", "v0.5.12")
    assert code == 2 and out == ""
    assert err == (
        f"patchkit: error: patchkit/sm120 is checked out in {repo} with local changes (M "
        "python/sglang/srt/server_args.py); refusing to rebuild it "
        "(hint: commit or stash them, or check out another branch there; patchkit rebuilds patchkit/sm120 from "
        "recipes, so edit the recipe instead)\n"
    )
    assert git(repo, "rev-parse", "HEAD").strip() == head and f.read_bytes() == mine

    # Clean, it is rebuilt, and the checkout follows the branch (files, index and HEAD).
    git(repo, "checkout", "-q", "--", ".")
    code, out, err = run_cli("fork", "sync", "sm120", "-t", f"sglang={repo}", "--base", "v0.5.12")
    assert code == 0, err
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/patchkit/sm120"
    assert git(repo, "rev-parse", "HEAD").strip() != head
    assert git(repo, "rev-parse", "HEAD~4").strip() == git(repo, "rev-parse", "v0.5.12").strip()
    assert git(repo, "status", "--porcelain") == ""
    assert b"max_running_requests: Optional[int] = 1024" in f.read_bytes()

    # A commit of the user's own on the branch is not thrown away either.
    git(repo, "commit", "-q", "--allow-empty", "-m", "my own work")
    mine_head = git(repo, "rev-parse", "HEAD").strip()
    code, out, err = run_cli("fork", "sync", "sm120", "-t", f"sglang={repo}")
    assert code == 2 and "has a commit patchkit did not make" in err and "'my own work'" in err
    assert git(repo, "rev-parse", "patchkit/sm120").strip() == mine_head


def test_one_line_errors(synced_copy, run_cli, tmp_path):
    code, out, err = run_cli("fork", "sync", "sm120", "-t", f"sglang={tmp_path}")
    assert (code, err) == (
        2,
        f"patchkit: error: {tmp_path}: not a git repository (hint: fork commands work on a git clone of upstream "
        "(e.g. `git clone https://github.com/sgl-project/sglang`); use `patchkit apply` for other trees)\n",
    )
    code, out, err = run_cli("fork", "sync", "sm120", "-t", f"sglang={synced_copy}", "--base", "v9.9.9")
    assert (code, err) == (
        2,
        f"patchkit: error: v9.9.9: no such revision in {synced_copy} (hint: fetch it first (`git fetch --tags`), "
        "or pass another --base/--to)\n",
    )
    code, out, err = run_cli("fork", "sync", "autotune-cutlass", "-t", f"flashinfer={synced_copy}")
    assert code == 2 and err.startswith("patchkit: error: autotune-cutlass: no recipe edits flashinfer")
    code, out, err = run_cli("fork", "sync", "allreduce-fusion", "-t", f"flashinfer={synced_copy}", "--base", "v0.5.9")
    assert (code, err) == (
        2,
        f"patchkit: error: {synced_copy} at v0.5.9: no flashinfer sources (looked for flashinfer/__init__.py, "
        "include/flashinfer) (hint: is it a clone of flashinfer? fork commands need the upstream repository "
        "layout)\n",
    )
    code, out, err = run_cli("fork", "status", "nope", "-t", f"sglang={synced_copy}")
    assert (code, err) == (
        2,
        "patchkit: error: no branch patchkit/nope in "
        + str(synced_copy)
        + " (hint: fork branches there: patchkit/sm120)\n",
    )


# -- status -----------------------------------------------------------------------------------


def test_status_reports_stale_commits_and_drift(synced, synced_copy, run_cli, recipes_dir, tmp_path):
    repo, first = synced
    code, doc, err = run_json(run_cli, "fork", "status", "-t", f"sglang={synced_copy}")
    assert code == 0, err
    (b,) = doc["branches"]
    assert b["branch"] == "patchkit/sm120" and b["up_to_date"] and b["stale"] == []
    assert [c["recipe"] for c in b["carried"]] == RECIPES
    assert b["base"] == git(repo, "rev-parse", "v0.5.9").strip()

    # Change one recipe: its commit is stale and a rebuild would differ.
    edited = tmp_path / "recipes"
    shutil.copytree(recipes_dir, edited)
    r = edited / "max-running-requests.toml"
    r.write_text(r.read_text().replace('value = "1024"', 'value = "2048"'))
    code, out, err = run_cli("--recipes", str(edited), "fork", "status", "sm120", "-t", f"sglang={synced_copy}")
    assert code == 1, err
    assert re.search(
        r"^  [0-9a-f]{12} max-running-requests +STALE +the recipe file changed since this commit$", out, re.M
    )
    assert re.search(r"^  [0-9a-f]{12} autotune-cutlass +current$", out, re.M)
    assert "out of date: a rebuild on the same base gives" in out
    assert "    max-running-requests: would be rebuilt (the recipe changed)\n" in out
    assert "    moe-backend-sm120: would be rebuilt (its edit or an earlier commit differs)\n" in out
    code, doc, err = run_json(run_cli, "--recipes", str(edited), "fork", "status", "-t", f"sglang={synced_copy}")
    assert doc["branches"][0]["stale"] == ["max-running-requests"] and not doc["branches"][0]["up_to_date"]


# -- FlashInfer ---------------------------------------------------------------------------------


def test_flashinfer_fork_carries_only_the_flashinfer_ops(flashinfer_upstream, tree, run_cli, tmp_path, recipes_dir):
    repo = clone(flashinfer_upstream, tmp_path / "flashinfer")
    code, doc, err = run_json(run_cli, "fork", "sync", "sm120", "-t", f"flashinfer={repo}")
    assert code == 0, err
    assert doc["base"] == {"rev": "v0.6.3", "commit": git(repo, "rev-parse", "v0.6.3").strip(), "version": "0.6.3"}
    # Only allreduce-fusion of sm120 edits FlashInfer.
    assert [(s["id"], s["action"]) for s in doc["recipes"]] == [("allreduce-fusion", "committed")]
    assert doc["other_engines"] == ["autotune-cutlass", "max-running-requests", "moe-backend-sm120"]
    (c,) = commits(repo, "v0.6.3..patchkit/sm120")
    assert trailer(repo, c) == ("allreduce-fusion", sha(recipes_dir / "allreduce-fusion.toml"))
    assert changed_files(repo, c) == {"flashinfer/jit/comm.py", "include/flashinfer/comm/trtllm_allreduce.cuh"}
    assert (
        "its sglang ops #1, #2, #3, #6, #7, #8, #9, #10, #11, #12, #13, #14, #15 (per version variant) belong in"
        in git(repo, "log", "-1", "--format=%b", c)
    )
    patch = git(repo, "show", "--format=", c)
    assert patch.count("+#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))\n") == 13
    assert "+        supported_major_versions=[9, 10, 12]" in patch

    # The commit is exactly `patchkit apply allreduce-fusion` on v0.6.3 (with an SGLang tree
    # beside it for the recipe's other half).
    wt = tmp_path / "by-hand"
    git(repo, "worktree", "add", "-q", "--detach", str(wt), "v0.6.3")
    sg = git_layout("sglang", tree("sglang", links=True), tmp_path / "sg")
    code, out, err = run_cli("apply", "allreduce-fusion", "-t", f"flashinfer={wt}", "-t", f"sglang={sg}")
    assert code == 0, out + err
    git(wt, "add", "-A")
    assert git(wt, "write-tree").strip() == git(repo, "rev-parse", f"{c}^{{tree}}").strip()

    # Deterministic, exportable, and applies with git am and patch -p1.
    code, again, err = run_json(run_cli, "fork", "sync", "sm120", "-t", f"flashinfer={repo}")
    assert (again["changed"], again["head"]) == (False, c)
    out_dir = tmp_path / "patches"
    code, out, err = run_cli("fork", "export", "sm120", "-t", f"flashinfer={repo}", "--out", str(out_dir))
    assert code == 0, err
    assert (out_dir / "series").read_text() == "0001-patchkit-allreduce-fusion.patch\n"
    am = clone(flashinfer_upstream, tmp_path / "am", "v0.6.3")
    git(am, "am", "-q", str(out_dir / "0001-patchkit-allreduce-fusion.patch"))
    assert git(am, "rev-parse", "HEAD^{tree}").strip() == git(repo, "rev-parse", f"{c}^{{tree}}").strip()
    quilt = clone(flashinfer_upstream, tmp_path / "quilt", "v0.6.3")
    p = subprocess.run(
        ["patch", "-p1", "-s", "-i", str(out_dir / "0001-patchkit-allreduce-fusion.patch")],
        cwd=quilt,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    git(quilt, "add", "-A")
    assert git(quilt, "write-tree").strip() == git(repo, "rev-parse", f"{c}^{{tree}}").strip()
