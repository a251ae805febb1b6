"""Who made an edit: the pristine release decides (patchkit/upstream/pristine.py), never the journal's
silence.  On real releases: a damaged or lost journal, an in-place upgrade over a patched
tree, no reference at all (``applied?``), a git checkout's tagged commit, two recipes making
the same edit, and relocation refusing a look-alike at module level."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from patchkit.base import journal
from patchkit.base.target import ENGINES
from patchkit.upstream import fetch
from tests.conftest import ROOT, git, git_layout

pytestmark = pytest.mark.real

SGLANG_ONLY = ["max-running-requests", "moe-backend-sm120", "autotune-cutlass"]
SERVER_ARGS = "sglang/srt/server_args.py"


def files_of(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".patchkit" not in p.relative_to(root).parts
    }


def states(out: str) -> dict[str, str]:
    return {r["id"]: r["state"] for r in json.loads(out)["recipes"]}


DAMAGE = {
    "deleted": None,
    "garbage": b"\x00\xffnot json at all",
    "truncated": b'{"format": 1, "engines": {"sglang": {"applied": {"max-runn',
    "empty": b"",
    "wrong-shape-engine": b'{"format": 1, "engines": {"sglang": []}}',
    "wrong-shape-ops": b'{"format": 1, "engines": {"sglang": {"applied": {"max-running-requests": {"ops": "1"}}}}}',
    "wrong-shape-files": b'{"format": 1, "engines": {"sglang": {"files": {"x.py": 5}}}}',
    "other-format": b'{"format": 99, "engines": {}}',
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_or_lost_journal_loses_no_provenance(damage, tree, release_dir, run_cli):
    s = tree("sglang")
    t = ["-t", f"sglang={s}"]
    code, _, err = run_cli("apply", *SGLANG_ONLY, *t)
    assert code == 0, err
    journal = s / ".patchkit" / "journal.json"
    if DAMAGE[damage] is None:
        journal.unlink()
    else:
        journal.write_bytes(DAMAGE[damage])
    code, out, err = run_cli("status", *SGLANG_ONLY, *t, "--json")
    # Patched code never reads "upstream" because a journal went quiet: the wheel says whose.
    assert code == 0 and set(states(out).values()) == {"applied"}, out
    if DAMAGE[damage] is not None:
        assert "is damaged" in err and "read as empty" in err
    # revert (--force too: a wrong-shape journal must not block it) takes every edit back.
    code, out, err = run_cli("revert", *SGLANG_ONLY, *t, *(["--force"] if "shape" in damage else []))
    assert code == 0, err
    assert files_of(s) == files_of(release_dir("sglang", "0.5.9"))


def test_an_in_place_upgrade_over_a_patched_tree(tree, release_dir, run_cli):
    """0.5.13 unpacked over a patched 0.5.9: upstream's own code is upstream, the stale
    records are dropped, and `revert --force` edits nothing the pristine release has."""
    s = tree("sglang")
    t = ["-t", f"sglang={s}"]
    assert run_cli("apply", *SGLANG_ONLY, *t)[0] == 0
    shutil.rmtree(s / "sglang-0.5.9.dist-info")
    with zipfile.ZipFile(fetch.fetch_wheel(ENGINES["sglang"].dist, "0.5.13")) as z:
        z.extractall(s)
    new = release_dir("sglang", "0.5.13")
    code, out, _ = run_cli("status", *SGLANG_ONLY, *t, "--json")
    ops = {r["id"]: r["ops"][0] for r in json.loads(out)["recipes"]}
    assert ops["autotune-cutlass"]["state"] == "upstream"
    assert "has this edit (patchkit's record of it is from before an upgrade)" in ops["autotune-cutlass"]["message"]
    assert ops["max-running-requests"]["state"] == "pending"
    assert "stale" in ops["max-running-requests"]["message"]
    code, out, err = run_cli("revert", "--force", *SGLANG_ONLY, *t)
    assert code == 0, err
    for rel, data in files_of(new).items():
        assert (s / rel).read_bytes() == data, rel  # upstream's "flashinfer_cutlass" kept, and all else
    # The stale records are gone; apply works without --force, and revert gives 0.5.13 back.
    assert json.loads((s / ".patchkit" / "journal.json").read_text())["engines"]["sglang"]["applied"] == {}
    code, _, err = run_cli("apply", "--ignore-range", "max-running-requests", *t)
    assert code == 0, err
    code, _, err = run_cli("revert", "max-running-requests", *t)
    assert code == 0, err
    for rel, data in files_of(new).items():
        assert (s / rel).read_bytes() == data, rel


def test_no_reference_says_applied_unsure_and_revert_refuses(tree, run_cli, monkeypatch, tmp_path):
    s = tree("sglang")
    t = ["-t", f"sglang={s}"]
    assert run_cli("apply", "max-running-requests", *t)[0] == 0
    (s / ".patchkit" / "journal.json").unlink()
    journal.mirror_path(s).unlink()  # every record of patchkit's lost
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    code, out, _ = run_cli("status", "max-running-requests", *t, "--json")
    r = json.loads(out)["recipes"][0]
    assert r["state"] == "applied?" and r["ops"][0]["state"] == "applied?"
    assert "who made it cannot be told" in r["ops"][0]["message"]
    assert "PATCHKIT_OFFLINE=1" in r["ops"][0]["message"]
    before = (s / SERVER_ARGS).read_bytes()
    for force in ([], ["--force"]):
        code, _, err = run_cli("revert", "max-running-requests", *t, *force)
        assert code == 1, err
        assert "revert takes back only what it can prove is patchkit's" in err
        assert (s / SERVER_ARGS).read_bytes() == before
    code, out, _ = run_cli("status", "max-running-requests", *t)
    assert "applied?" in out


def test_a_git_checkout_is_judged_against_its_tagged_commit(release_dir, tmp_path, run_cli):
    repo = git_layout("sglang", release_dir("sglang", "0.5.9"), tmp_path / "sglang")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.5.9")
    git(repo, "tag", "v0.5.9")
    t = ["-t", f"sglang={repo}"]
    assert run_cli("apply", "max-running-requests", *t)[0] == 0
    shutil.rmtree(repo / ".patchkit")
    code, out, _ = run_cli("status", "max-running-requests", *t, "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "applied" and "mirror" in op["message"], op  # the journal's mirror proves it
    journal.mirror_path(repo).unlink()
    code, out, _ = run_cli("status", "max-running-requests", *t, "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "someone-else" and "at v0.5.9 does not have it" in op["message"], op
    # Upstream's tagged commit carrying the edit makes it upstream's, journal or not.
    git(repo, "commit", "-q", "-am", "upstream takes the change")
    git(repo, "tag", "-f", "v0.5.9")
    code, out, _ = run_cli("status", "max-running-requests", *t, "--json")
    assert code == 0 and states(out) == {"max-running-requests": "upstream"}
    code, _, err = run_cli("revert", "max-running-requests", *t)
    assert code == 0 and "Optional[int] = 1024" in (repo / "python" / SERVER_ARGS).read_text()


def test_two_recipes_making_the_same_edit_are_refused_naming_both(tree, tmp_path, run_cli):
    recipes = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", recipes)
    src = (recipes / "max-running-requests.toml").read_text()
    (recipes / "mrr-copy.toml").write_text(src.replace('id = "max-running-requests"', 'id = "mrr-copy"'))
    s = tree("sglang")
    t = ["-t", f"sglang={s}"]
    before = files_of(s)
    code, _, err = run_cli("--recipes", str(recipes), "apply", "max-running-requests", "mrr-copy", *t)
    assert code == 1
    assert "max-running-requests > op #1 (set-default) and mrr-copy > op #1 (set-default) edit the same code" in err
    assert files_of(s) == before
    # One applied earlier: the other is refused too (it would read as made, and reverting
    # either would take back both).
    assert run_cli("--recipes", str(recipes), "apply", "max-running-requests", *t)[0] == 0
    code, _, err = run_cli("--recipes", str(recipes), "apply", "mrr-copy", *t)
    assert code == 1 and "edit the same code" in err and "mrr-copy" in err, err


def test_relocation_never_takes_a_module_level_look_alike(tree, run_cli):
    """The commented-out element's line deleted by hand: a list in another file holding the
    same names (MOE_RUNNER_BACKEND_CHOICES) is not where the op's site went."""
    s = tree("sglang")
    mr = s / "sglang/srt/model_executor/model_runner.py"
    mr.write_text(mr.read_text().replace('            # "flashinfer_cutlass",\n', "", 1))
    code, out, _ = run_cli("status", "autotune-cutlass", "-t", f"sglang={s}", "--json")
    r = json.loads(out)["recipes"][0]
    assert code == 1 and r["state"] == "missing", r
    assert "server_args.py" not in r["ops"][0]["location"]


def test_revert_force_never_takes_back_an_insert_the_user_wrote_into(tree, release_dir, run_cli):
    """The user wrote a comment into patchkit's inserted block: the bytes at the site are no
    longer what patchkit wrote, so the insert is not provably patchkit's.  It reads
    `modified`; revert refuses, and --force only forgets patchkit's record, writing no byte:
    the block with the user's note stays, someone else's from then on."""
    s = tree("sglang")
    t = ["-t", f"sglang={s}"]
    assert run_cli("apply", "moe-backend-sm120", *t)[0] == 0
    sa = s / SERVER_ARGS
    text = sa.read_text()
    anchor = '            self.moe_runner_backend = "flashinfer_cutlass"\n            logger.info(\n'
    assert anchor in text
    sa.write_text(text.replace(anchor, "            # my note: this made GLM-5 work\n" + anchor, 1))
    mine = sa.read_bytes()
    code, out, err = run_cli("status", "moe-backend-sm120", *t, "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "modified", out
    code, _, err = run_cli("revert", "moe-backend-sm120", *t)
    assert code == 1 and sa.read_bytes() == mine, err
    code, _, err = run_cli("revert", "moe-backend-sm120", "--force", *t)
    assert code == 0 and sa.read_bytes() == mine, err
    code, out, err = run_cli("status", "moe-backend-sm120", *t, "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "someone-else", out
