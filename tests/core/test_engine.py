"""Safety properties of the engine on real trees: all-or-nothing writes, locking, path
escapes, the user's own edits, and state read from the code."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from patchkit.base import fsio
from patchkit.base.errors import TargetError
from patchkit.base.target import open_target
from patchkit.core import judge, planner, transaction
from patchkit.core.project import Project
from patchkit.core.session import Session
from patchkit.upstream.pristine import RELEASES
from tests.conftest import ROOT, fail_target_rename
from tests.product.test_sm120 import FILES, snapshot


@pytest.fixture
def pair(tree):
    s, f = tree("sglang", links=True), tree("flashinfer", links=True)
    return s, f, ["-t", f"sglang={s}", "-t", f"flashinfer={f}"]


def test_failure_before_the_commit_point_leaves_every_file_as_it_was(pair, monkeypatch):
    s, f, _ = pair
    before = snapshot(s), snapshot(f)
    session = Session(
        {"sglang": open_target("sglang", s), "flashinfer": open_target("flashinfer", f)}, releases=RELEASES
    )
    plan = planner.plan_apply(session, Project.locate(recipes=str(ROOT / "recipes")).catalog().select(["sm120"]))
    assert not plan.blockers and len(plan.files) == 5
    real, calls = fsio.write_temp, []

    def full(path, data, mode=None):
        calls.append(path)
        if len(calls) == 6:  # some temps written, the commit record not yet
            raise fsio.cannot_write(path, OSError(28, "No space left on device"))
        return real(path, data, mode)

    monkeypatch.setattr(fsio, "write_temp", full)
    with pytest.raises(TargetError, match="the disk is full"):
        with transaction.locked(session.targets):
            transaction.commit(transaction.freeze(session, plan))
    monkeypatch.undo()
    assert (snapshot(s), snapshot(f)) == before
    assert list(s.rglob("*.patchkit-tmp")) + list(f.rglob("*.patchkit-tmp")) == []
    assert not list(s.glob(".patchkit/txn-*")) and not list(f.glob(".patchkit/txn-*"))


def test_failure_after_the_commit_point_reads_interrupted_and_apply_finishes(pair, run_cli, monkeypatch):
    s, f, t = pair
    assert run_cli("apply", "sm120", *t)[0] == 0
    applied = snapshot(s), snapshot(f)
    assert run_cli("revert", "sm120", *t)[0] == 0
    # two engine files renamed, the others not
    fail_target_rename(monkeypatch, 3, ours=lambda dst: "/.patchkit/" in str(dst))
    code, out, err = run_cli("apply", "sm120", *t)
    monkeypatch.undo()
    assert code == 2 and "the write stopped half-way" in err, err
    code, out, _ = run_cli("status", "sm120", *t, "--json")
    doc = json.loads(out)
    assert code == 1 and {r["state"] for r in doc["recipes"]} == {"interrupted"}
    assert {o["state"] for r in doc["recipes"] for o in r["ops"]} == {"applied", "pending"}
    assert run_cli("apply", "sm120", *t)[0] == 0
    assert (snapshot(s), snapshot(f)) == applied


def test_second_invocation_waits_then_fails_clearly(pair, run_cli, monkeypatch):
    s, f, t = pair
    monkeypatch.setenv("PATCHKIT_LOCK_TIMEOUT", "0.3")
    held = threading.Event()
    release = threading.Event()

    def hold():
        with fsio.locked([s]):
            held.set()
            release.wait(10)

    before = snapshot(s), snapshot(f)
    th = threading.Thread(target=hold)
    th.start()
    held.wait(5)
    try:
        # flock is per open file description, so a second open in this process contends too.
        code, out, err = run_cli("apply", "sm120", *t)
    finally:
        release.set()
        th.join()
    assert code == 2
    # The last line (allreduce-fusion's rationale warning is printed first, before any write).
    assert err.strip().splitlines()[-1] == (
        f"patchkit: error: {s}: another patchkit is working on this target (waited 0.3s)"
        " (hint: wait for it to finish, then run again; PATCHKIT_LOCK_TIMEOUT sets the wait)"
    )
    assert (snapshot(s), snapshot(f)) == before  # and nothing was written


def test_two_processes_at_once_apply_exactly_once(pair):
    s, f, t = pair
    cmd = [sys.executable, "-m", "patchkit", "--recipes", str(ROOT / "recipes"), "apply", "sm120", *t, "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    written = sorted(len(json.loads(o)["written"]) for o, _ in outs)
    assert written == [0, 5]
    assert (s / FILES["sglang"][0]).read_text().count('"flashinfer_cutlass",') == 1


def test_symlink_out_of_the_target_is_refused(pair, run_cli, tmp_path):
    s, f, t = pair
    outside = tmp_path / "outside.py"
    victim = s / FILES["sglang"][2]
    outside.write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(outside)
    before = outside.read_bytes()
    code, out, err = run_cli("apply", "max-running-requests", *t)
    assert code == 2
    assert err.strip().startswith(f"patchkit: error: {victim}: leads outside the target {s} (symlink to {outside})")
    assert outside.read_bytes() == before


def test_revert_refuses_to_overwrite_user_edits_then_force_keeps_them(pair, run_cli):
    s, f, t = pair
    run_cli("apply", "sm120", *t)
    sa = s / FILES["sglang"][2]
    text = sa.read_text()
    edited = text.replace("class ServerArgs:", "# my own note\nclass ServerArgs:", 1)
    sa.write_text(edited)
    code, out, err = run_cli("revert", "max-running-requests", *t)
    assert code == 1
    assert "server_args.py: changed since patchkit wrote it (lines" in err
    assert "pass --force to revert anyway" in err
    assert sa.read_text() == edited
    code, out, err = run_cli("revert", "max-running-requests", *t, "--force")
    assert code == 0, err
    now = sa.read_text()
    assert "# my own note\nclass ServerArgs:" in now
    assert "max_running_requests: Optional[int] = None\n" in now
    assert 'self.moe_runner_backend = "flashinfer_cutlass"\n            logger.info(' in now  # moe arm still applied


def test_state_comes_from_the_code(pair, run_cli):
    s, f, t = pair
    run_cli("apply", "max-running-requests", *t)
    sa = s / FILES["sglang"][2]
    pristine = (s / ".patchkit" / "journal.json").read_text()
    # The user undoes the edit by hand and changes something else: patchkit reports it, it
    # does not trust its journal.
    sa.write_text(
        sa.read_text()
        .replace("max_running_requests: Optional[int] = 1024", "max_running_requests: Optional[int] = None")
        .replace("class ServerArgs:", "# mine\nclass ServerArgs:", 1)
    )
    code, out, _ = run_cli("status", "max-running-requests", *t, "--json")
    assert code == 1
    assert json.loads(out)["recipes"][0]["state"] == "modified"
    # Undone byte for byte (reinstalled, or restored by hand): the record is stale, the op
    # pending again, and apply works without --force.
    sa.write_text(sa.read_text().replace("# mine\nclass ServerArgs:", "class ServerArgs:", 1))
    code, out, _ = run_cli("status", "max-running-requests", *t, "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert code == 1 and op["state"] == "pending", op
    assert "stale: the file is as it was before patchkit wrote it" in op["message"]
    code, out, err = run_cli("apply", "max-running-requests", *t)
    assert code == 0, err
    assert (s / ".patchkit" / "journal.json").read_text() == pristine
    # Deleting the journal loses no provenance: its mirror in the user's state directory
    # still proves the edit patchkit's, and revert takes it back.
    import shutil

    shutil.rmtree(s / ".patchkit")
    code, out, _ = run_cli("status", "max-running-requests", *t, "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert code == 0 and op["state"] == "applied", op
    assert "the journal's mirror records these very bytes at the site" in op["message"]
    code, out, err = run_cli("revert", "max-running-requests", *t)
    assert code == 0, err
    assert "max_running_requests: Optional[int] = None" in sa.read_text()


def test_partial_state(pair, run_cli):
    s, f, t = pair
    run_cli("apply", "allreduce-fusion", "-t", f"sglang={s}", "-t", f"flashinfer={f}")
    comm = f / FILES["flashinfer"][0]
    comm.write_text(
        comm.read_text().replace("supported_major_versions=[9, 10, 12]", "supported_major_versions=[9, 10]")
    )
    code, out, _ = run_cli("status", "allreduce-fusion", *t, "--json")
    r = json.loads(out)["recipes"][0]
    # The file is the release's again, byte for byte: that op is pending, the recipe partial.
    assert code == 1 and r["state"] == "partial"
    assert [o["state"] for o in r["ops"]] == ["applied", "applied", "applied", "pending", "applied", "applied"]
    assert "stale" in r["ops"][3]["message"]
    # Undone among other changes of the user's: patchkit's edit is gone, and it says so.
    comm.write_text("# mine\n" + comm.read_text())
    code, out, _ = run_cli("status", "allreduce-fusion", *t, "--json")
    r = json.loads(out)["recipes"][0]
    assert code == 1 and r["state"] == "modified"
    assert [o["state"] for o in r["ops"]] == ["applied", "applied", "applied", "modified", "applied", "applied"]


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["status", "-t", "sglang=/nonexistent/tree"],
            "patchkit: error: /nonexistent/tree: target for sglang does not exist"
            " (hint: pass --target sglang=DIR with an existing tree, or run `patchkit sync`)",
        ),
        (
            ["status", "sm12", "-t", "sglang=/tmp"],
            "patchkit: error: unknown recipe or bundle 'sm12' (hint: did you mean 'sm120'?)",
        ),
        (
            ["status", "-t", "tgi=/tmp"],
            "patchkit: error: unknown engine 'tgi' (hint: engines: sglang, flashinfer, vllm)",
        ),
        (
            ["status", "-t", "sglang"],
            "patchkit: error: --target 'sglang': expected ENGINE=PATH"
            " (hint: e.g. --target sglang=./sglang-checkout (engines: sglang, flashinfer, vllm))",
        ),
        (
            ["apply"],
            "patchkit: error: apply needs recipe or bundle names, or a profile that names them"
            " (hint: e.g. `patchkit apply sm120`; `patchkit apply sm120 --save` also records it in"
            f" {ROOT}/patchkit.toml)",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(run_cli, args, expected):
    code, out, err = run_cli(*args)
    assert code == 2
    assert err.strip() == expected
    assert "Traceback" not in err


def test_target_without_engine_sources(run_cli, tmp_path):
    code, out, err = run_cli("status", "autotune-cutlass", "-t", f"sglang={tmp_path}")
    assert code == 2
    assert err.strip() == (
        f"patchkit: error: {tmp_path}: no sglang sources found (looked for python/sglang/, sglang/)"
        " (hint: point --target sglang= at a git checkout of sglang, an unpacked wheel, or site-packages)"
    )


def test_recipe_needing_an_absent_engine(tree, run_cli):
    s = tree("sglang", links=True)
    code, out, err = run_cli("status", "allreduce-fusion", "-t", f"sglang={s}")
    assert code == 2
    assert err.strip() == (
        "patchkit: error: recipe allreduce-fusion edits flashinfer, but there is no flashinfer target"
        " (hint: pass --target flashinfer=PATH, or run `patchkit sync` to use the pinned workspace)"
    )


def test_status_verdict_cache_never_changes_the_answer(pair, run_cli):
    from patchkit.core import verdicts

    s, f, t = pair
    run_cli("apply", "sm120", *t)
    cold = run_cli("status", "sm120", *t, "--json")
    targets = Project.locate().targets(tuple(t[1::2]), set())
    k = verdicts.key(Project.locate().recipe_dirs, ("sm120",), targets)
    assert verdicts.load(k, targets) is not None, "an unchanged tree's verdict is cached"
    assert run_cli("status", "sm120", *t, "--json") == cold
    # Any byte of a file it read changes the key's inputs: the verdict is recomputed.
    sa = s / FILES["sglang"][2]
    sa.write_text(
        sa.read_text().replace(
            "max_running_requests: Optional[int] = 1024", "max_running_requests: Optional[int] = None"
        )
    )
    assert verdicts.load(k, targets) is None
    code, out, _ = run_cli("status", "sm120", *t, "--json")
    assert code == 1
    assert {r["id"]: r["state"] for r in json.loads(out)["recipes"]}["max-running-requests"] == "modified"


def test_dry_run_plans_everything_and_writes_nothing(pair, run_cli):
    s, f, t = pair
    before = snapshot(s), snapshot(f)
    code, out, err = run_cli("apply", "sm120", *t, "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["written"] == [] and len(doc["would_write"]) == 5
    assert {o["message"] for r in doc["recipes"] for o in r["ops"]} == {"would be applied"}
    assert {r["state"] for r in doc["recipes"]} == {"pending"}
    assert (snapshot(s), snapshot(f)) == before
    run_cli("apply", "sm120", *t)
    code, out, err = run_cli("revert", "autotune-cutlass", *t, "--dry-run", "--json")
    assert code == 0 and json.loads(out)["recipes"][0]["ops"][0]["message"] == "would be reverted"
    assert run_cli("status", "autotune-cutlass", *t)[0] == 0  # still applied


def test_a_file_libcst_cannot_print_back_is_never_rewritten(pair, monkeypatch):
    """libcst 1.9 drops an indented comment line after a last, unindented statement; a file
    it cannot print back byte for byte is refused, on the whole-file path and in views."""
    s, f, _ = pair
    comm = s / "sglang/srt/layers/communicator.py"
    comm.write_text(
        comm.read_text()
        + (
            "\nUNRELATED = 1\n"
            "\n    # an indented comment after the last statement\n    # (libcst drops the first such line)\n"
        )
    )
    before = snapshot(s), snapshot(f)
    recipes = Project.locate(recipes=str(ROOT / "recipes")).catalog().select(["allreduce-fusion"])
    targets = {"sglang": open_target("sglang", s), "flashinfer": open_target("flashinfer", f)}

    monkeypatch.setattr(judge.view, "build", lambda *a, **k: None)  # the whole-file path
    plan = planner.plan_apply(Session(targets, releases=RELEASES), recipes)
    assert plan.files == () and plan.blockers
    assert all("communicator.py" in b and "byte for byte" in b for b in plan.blockers), plan.blockers
    monkeypatch.undo()

    # A view leaves the unprintable tail out as a gap (restored verbatim), so apply goes ahead.
    session = Session(targets, releases=RELEASES)
    plan = planner.plan_apply(session, recipes)
    assert not plan.blockers
    with transaction.locked(session.targets):
        transaction.commit(transaction.freeze(session, plan, "apply"))
    text = comm.read_text()
    assert text.endswith(
        "\n\n    # an indented comment after the last statement\n    # (libcst drops the first such line)\n"
    )
    assert "_is_sm120_supported = _is_cuda and is_sm120_supported()" in text
    assert (snapshot(s), snapshot(f)) != before
