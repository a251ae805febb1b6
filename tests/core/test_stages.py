"""apply's stages as functions over frozen values (issue 22, item 1), offline on a small tree:
the judge's Verdicts and the planner's Plan are values nobody changes after; planning reads
the Session and leaves it as it was (twice on one Session gives one plan); the journal a
write leaves is computed on copies; and the transaction takes the lock first, a flock of
the target root that creates nothing, so a dry run and a refused apply leave the target
untouched and two applies serialize (a real second process holds the lock here).  Where a
filesystem refuses to flock a directory, ``.patchkit/lock`` is the lock."""

from __future__ import annotations

import copy
import dataclasses
import errno
import fcntl
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.base import fsio
from patchkit.base.target import open_target
from patchkit.core import transaction
from patchkit.core.judge import evaluate
from patchkit.core.planner import Plan, Planned, plan_apply
from patchkit.core.project import Project
from patchkit.core.session import Session
from patchkit.core.verdict import Evaluation, Verdict
from patchkit.upstream.pristine import RELEASES
from tests.conftest import mini_sglang
from tests.core.test_transaction import KERNEL, MODULE, RECIPE, snapshot


@pytest.fixture
def site(tmp_path):
    """A small sglang tree and a recipe editing two of its files (test_transaction's)."""
    root = mini_sglang(tmp_path / "site", {"sglang/srt/gate.py": MODULE, "sglang/srt/kernel.cuh": KERNEL})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(RECIPE)
    return root, recipes


def _session(root: Path) -> Session:
    return Session({"sglang": open_target("sglang", root)}, releases=RELEASES)


def _recipes(recipes: Path, *names: str) -> list:
    return Project.locate(recipes=str(recipes)).catalog().select(list(names or ["widen"]))


def _cli(run_cli, site, *args):
    root, recipes = site
    return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")


# -- values -------------------------------------------------------------------------------------


def test_verdicts_are_frozen_values(site):
    root, recipes = site
    ((_, evs),) = evaluate(_session(root), _recipes(recipes))
    assert [type(ev) for ev in evs] == [Verdict, Verdict] and all(ev.state == "pending" for ev in evs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        evs[0].state = "applied"
    refined = dataclasses.replace(evs[0], message="refined")  # a stage that refines one makes a new one
    assert refined.message == "refined" and evs[0].message != "refined"


def test_the_judges_answer_is_a_value_and_the_session_holds_none_of_it(site):
    """What the judge notes besides verdicts (blockers that stand, why a nearer variant was
    judged) is part of its answer, not written onto the Session it read."""
    root, recipes = site
    session = _session(root)
    before = {k: copy.copy(v) if isinstance(v, (dict, list, set)) else v for k, v in vars(session).items()}
    judged = evaluate(session, _recipes(recipes))
    assert isinstance(judged, Evaluation) and dict(judged.blocked) == {"widen": ()} and dict(judged.notes) == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        judged.blocked = {}
    after = vars(session)
    # What may change: the session's memos of what it read (code digest, files, journals,
    # identities, pristine references), and each file memo is the disk's bytes.
    memos = {"code", "files", "identities", "journals", "references", "releases"}
    assert set(after) - set(before) <= {"code"}
    assert {k: v for k, v in after.items() if k not in memos} == {k: v for k, v in before.items() if k not in memos}
    assert after["files"] and all(doc.original == doc.path.read_bytes() for doc in after["files"].values())

    # and the answer does not depend on what the session carries: judged again on it, and on
    # a fresh session, it is the same value.
    def answer(ev: Evaluation) -> tuple:
        seen = tuple(
            (r.id, tuple((v.op.index, v.state, v.scope, v.line, v.message, v.lines, v.evidence) for v in evs))
            for r, evs in ev.judged
        )
        return seen, dict(ev.blocked), dict(ev.notes)

    assert answer(evaluate(session, _recipes(recipes))) == answer(judged)
    assert answer(evaluate(_session(root), _recipes(recipes))) == answer(judged)


def test_a_plan_is_a_frozen_value_and_the_documents_it_read_are_unchanged(site):
    root, recipes = site
    session = _session(root)
    plan = plan_apply(session, _recipes(recipes))
    assert isinstance(plan, Plan) and not plan.blockers
    assert all(isinstance(getattr(plan, f.name), (tuple, frozenset, bool)) for f in dataclasses.fields(plan))
    assert [type(f) for f in plan.files] == [Planned, Planned]
    gate = next(f for f in plan.files if f.logical == "sglang/srt/gate.py")
    assert gate.original == MODULE.encode() and b'"c"' in gate.new and gate.real == root / "sglang/srt/gate.py"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.blockers = ("x",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gate.new = b""
    # The planner's edits are its own values: every document still reads the file as it is.
    for doc in session.files.values():
        assert doc.printed()[1] == doc.original == (root / doc.logical).read_bytes()


def test_planning_twice_on_one_session_gives_one_plan(site):
    """A stage changes nothing it read: the second plan is made from the same inputs."""
    root, recipes = site
    session = _session(root)
    first, second = plan_apply(session, _recipes(recipes)), plan_apply(session, _recipes(recipes))
    assert first == second and len(first.files) == 2 and {r.state for r in second.results} == {"applied"}


def test_freeze_computes_the_journal_a_write_leaves_on_copies(site):
    root, recipes = site
    session = _session(root)
    plan = plan_apply(session, _recipes(recipes))
    j = session.journal("sglang")
    before = (j.render(), dataclasses.asdict(plan), dict(j.blobs))
    done = transaction.freeze(session, plan, "apply")
    assert (j.render(), dataclasses.asdict(plan), dict(j.blobs)) == before, "the session's journal was changed"
    assert done.journals[str(root)]["sglang"]["applied"]["widen"]["ops"] == [1, 2]
    assert j.engines == {} and not (root / ".patchkit").exists()
    assert transaction.freeze(session, plan, "apply") == dataclasses.replace(done)  # the same value again


# -- the lock first, creating nothing ------------------------------------------------------------


def test_a_dry_run_takes_the_lock_and_creates_nothing(site, run_cli, monkeypatch):
    root, _ = site
    taken = []
    real = fsio.locked

    def spy(roots, *a, **k):
        taken.append(sorted(roots))
        return real(roots, *a, **k)

    monkeypatch.setattr(fsio, "locked", spy)
    before = snapshot(root, state=True)
    code, out, err = _cli(run_cli, site, "apply", "widen", "--dry-run")
    assert code == 0 and "would write 2 file(s)" in out, err
    assert taken == [[root]] and snapshot(root, state=True) == before and not (root / ".patchkit").exists()


def test_a_refused_apply_takes_the_lock_and_creates_nothing(site, run_cli):
    root, recipes = site
    (recipes / "gone.toml").write_text(RECIPE.replace('id = "widen"', 'id = "gone"').replace("'\"a\"'", "'\"x\"'"))
    before = snapshot(root, state=True)
    code, out, err = _cli(run_cli, site, "apply", "gone")
    assert code == 1 and "nothing was written" in err, (out, err)
    assert snapshot(root, state=True) == before and not (root / ".patchkit").exists()


class _Holder:
    """A second process holding a target's lock as patchkit takes it (``how``: "dir", a
    flock of the root directory; "file", of ``.patchkit/lock``) until released."""

    def __init__(self, root: Path, how: str = "dir") -> None:
        opener = (
            f"fd = os.open({str(root)!r}, os.O_RDONLY | os.O_DIRECTORY)"
            if how == "dir"
            else f"fd = os.open({str(root / '.patchkit' / 'lock')!r}, os.O_RDWR | os.O_CREAT)"
        )
        code = (
            f"import fcntl, os, sys\n{opener}\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\nsys.stdin.read()\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def test_a_second_apply_waits_for_the_first_then_fails_in_one_line(site, run_cli, monkeypatch):
    root, _ = site
    monkeypatch.setenv("PATCHKIT_LOCK_TIMEOUT", "0.3")
    before = snapshot(root, state=True)
    holder = _Holder(root)
    try:
        for args in (("apply", "widen"), ("apply", "widen", "--dry-run"), ("revert", "widen")):
            code, out, err = _cli(run_cli, site, *args)
            assert code == 2 and out == "", (args, out, err)
            assert err.strip().splitlines() == [
                f"patchkit: error: {root}: another patchkit is working on this target (waited 0.3s)"
                " (hint: wait for it to finish, then run again; PATCHKIT_LOCK_TIMEOUT sets the wait)"
            ], err
        assert snapshot(root, state=True) == before  # nothing read half-way, nothing written
    finally:
        holder.release()
    code, out, err = _cli(run_cli, site, "apply", "widen")
    assert code == 0 and '"c"' in (root / "sglang/srt/gate.py").read_text(), err


def test_the_lock_an_earlier_release_holds_in_patchkit_lock_is_waited_for_too(site, run_cli, monkeypatch):
    root, _ = site
    (root / ".patchkit").mkdir()
    monkeypatch.setenv("PATCHKIT_LOCK_TIMEOUT", "0.3")
    holder = _Holder(root, how="file")
    try:
        code, out, err = _cli(run_cli, site, "apply", "widen")
    finally:
        holder.release()
    assert code == 2 and "another patchkit is working on this target" in err, err


def _no_directory_flock(monkeypatch) -> list:
    """A filesystem that refuses flock on a directory (as NFS may: EOPNOTSUPP)."""
    real, refused = fcntl.flock, []

    def flock(fd, op):
        if stat.S_ISDIR(os.fstat(fd if isinstance(fd, int) else fd.fileno()).st_mode):
            refused.append(fd)
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    return refused


def test_where_a_directory_cannot_be_flocked_patchkit_lock_is_the_lock(site, run_cli, monkeypatch):
    root, _ = site
    refused = _no_directory_flock(monkeypatch)
    before = snapshot(root, state=True)
    code, out, err = _cli(run_cli, site, "apply", "widen", "--dry-run")  # a dry run makes no lock file
    assert code == 0 and refused and snapshot(root, state=True) == before, err
    code, out, err = _cli(run_cli, site, "apply", "widen")
    assert code == 0, err
    assert (root / ".patchkit" / "lock").is_file() and (root / ".patchkit" / ".gitignore").read_text() == "*\n"
    # ... and it excludes: another process holding it makes the next run wait, then fail.
    monkeypatch.setenv("PATCHKIT_LOCK_TIMEOUT", "0.3")
    holder = _Holder(root, how="file")
    try:
        code, out, err = _cli(run_cli, site, "revert", "widen")
    finally:
        holder.release()
    assert code == 2 and "another patchkit is working on this target (waited 0.3s)" in err, err
    assert _cli(run_cli, site, "revert", "widen")[0] == 0


def test_a_lock_the_filesystem_refuses_outright_is_one_line_exit_2(site, run_cli, monkeypatch):
    root, _ = site

    def flock(fd, op):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fcntl, "flock", flock)
    code, out, err = _cli(run_cli, site, "apply", "widen")
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{root}: cannot lock the target" in err, err
    assert not (root / ".patchkit").exists()


# -- the judge's module, entered once ------------------------------------------------------------


def test_apply_enters_the_judges_module_a_handful_of_times(site, tmp_path):
    """bench/entries.py's count, on the small tree: the planner asks the judge once."""
    from bench.entries import count

    root, recipes = site
    args = ["--recipes", str(recipes), "apply", "widen", "--dry-run", "-t", f"sglang={root}"]
    hits = count(str(Path(transaction.__file__).with_name("judge.py")), args)
    assert 1 <= sum(hits.values()) <= 3, hits


def test_revert_says_which_files_are_back_to_their_bytes_before_patchkit(site, run_cli):
    """The note is read from the journal the write leaves (computed on copies), not the
    Session's, which stays as it was loaded."""
    root, _ = site
    before = snapshot(root)
    assert _cli(run_cli, site, "apply", "widen")[0] == 0
    code, out, err = _cli(run_cli, site, "revert", "widen")
    assert code == 0 and snapshot(root) == before, err
    assert sorted(ln for ln in out.splitlines() if "restored byte for byte" in ln) == [
        f"{root}/sglang/srt/gate.py: restored byte for byte",
        f"{root}/sglang/srt/kernel.cuh: restored byte for byte",
    ], out


def test_the_first_write_keeps_patchkits_state_out_of_git_status(site, run_cli):
    """The lock no longer makes .patchkit/; the write that does also writes its .gitignore."""
    root, _ = site
    assert _cli(run_cli, site, "apply", "widen")[0] == 0
    assert (root / ".patchkit" / ".gitignore").read_text() == "*\n"
    assert not (root / ".patchkit" / "lock").exists()


@pytest.mark.parametrize("planted", ["fifo", "dir"])
def test_what_is_not_a_lock_file_at_patchkit_lock_is_refused_without_blocking(site, run_cli, planted):
    root, _ = site
    (root / ".patchkit").mkdir()
    lock = root / ".patchkit" / "lock"
    if planted == "fifo":
        os.mkfifo(lock)  # opened for a flock, a FIFO would block the run
    else:
        lock.mkdir()
    before = snapshot(root)
    code, out, err = _cli(run_cli, site, "apply", "widen", "--dry-run")
    assert code == 2 and f"{root}: cannot lock the target" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(root) == before
