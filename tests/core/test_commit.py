"""The one way a plan is written (transaction.commit): a fresh plan and a plan the cache
replays are the same value (a Commit) and take the same checks.  A user's edit saved while
patchkit works is never overwritten: one made between the plan cache's lookup and the lock
(every input read again under the lock), and one made while the temps are written (each
file read once more just before the commit point: the old-digest check).  Each test here
fails when its check is taken out.  Offline: the plan cache's small installed-looking tree."""

from __future__ import annotations

import contextlib

import pytest

from patchkit.base import fsio
from patchkit.core import plancache, transaction
from tests.core.test_plancache import _cli, _write, cache, planned, seen  # noqa: F401  (fixtures)
from tests.core.test_transaction import MODULE, snapshot
from tests.core.test_transaction import site as site  # noqa: F401  (the fixture)

# The user's same-length edit inside the span the plan's splice replaces: the plan spliced
# onto it gives exactly the plan's new bytes, so the entry's own digests cannot tell.
USER = MODULE.replace('BACKENDS = ["a", "b"]\n', 'BACKENDS = ("a", "b")\n')


def _no_temps_nor_markers(root) -> bool:
    return not list(root.rglob("*patchkit-tmp")) and not list(root.glob(".patchkit/txn-*"))


def test_a_cached_plan_is_the_commit_a_fresh_plan_freezes(seen):  # noqa: F811
    """The entry of a plan, made a Commit under the lock, is the value ``freeze`` makes of
    a fresh plan of the same bytes: the same writes, roots, journals, refusals and reals;
    its inputs hold every input of the fresh one (and the RECORDs the lookup read)."""
    from patchkit.base.target import open_target
    from patchkit.core.planner import plan_apply
    from patchkit.core.project import Project
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    root, recipes, _, _, _ = seen
    [entry_path] = [p for p in (root.parent / "cache" / "plans").glob("*") if p.is_file()]
    import json

    from patchkit.base import store

    entry = json.loads(store.payload(entry_path))
    targets = {"sglang": open_target("sglang", root)}
    with transaction.locked(targets):
        cached = plancache.commit_of(entry, targets, "apply")
        session = Session(targets, releases=RELEASES)
        plan = plan_apply(session, Project.locate(recipes=str(recipes)).catalog().select(["widen"]))
        fresh = transaction.freeze(session, plan, "apply")
    assert isinstance(cached, transaction.Commit) and cached.writes
    for field in ("action", "writes", "roots", "recipes", "journals", "keep", "refusals", "reals", "targets"):
        assert getattr(cached, field) == getattr(fresh, field), field
    assert set(fresh.inputs) <= set(cached.inputs)


def test_an_edit_between_lookup_and_lock_in_the_replaced_span_is_never_overwritten(
    seen,  # noqa: F811
    run_cli,
    planned,  # noqa: F811
    monkeypatch,
):
    """The user saves just before the replay takes the lock.  Only the re-read of every
    input under the lock (transaction.commit, step 2) tells: the splice gives the plan's
    bytes, and the old bytes read under the lock are the user's."""
    root, recipes, _, _, _ = seen
    gate = root / "sglang/srt/gate.py"
    real = fsio.locked

    @contextlib.contextmanager
    def user_saves_first(roots, *a, **k):
        if gate.read_text() == MODULE:
            gate.write_text(USER)
        with real(roots, *a, **k) as got:
            yield got

    monkeypatch.setattr(fsio, "locked", user_saves_first)
    code, out, err = _cli(run_cli, root, recipes, "apply", "widen")
    text = gate.read_text()
    assert 'BACKENDS = ("a", "b", "c")' in text, ("the user's edit was overwritten", text)
    assert code == 0 and planned == [1, 1], (code, err)  # planned afresh, on the user's bytes
    assert _no_temps_nor_markers(root)


@pytest.mark.parametrize("how", ["replayed", "planned"])
def test_an_edit_saved_while_the_temps_are_written_is_never_overwritten(
    seen,  # noqa: F811
    run_cli,
    planned,  # noqa: F811
    monkeypatch,
    tmp_path,
    how,
):
    """The user saves after every input was read again, while patchkit writes its temps:
    only the old-digest check just before the commit point tells.  Refused, nothing
    written, for a replayed plan and a fresh one alike (one way to commit)."""
    root, recipes, _, _, _ = seen
    if how == "planned":
        import shutil

        shutil.rmtree(tmp_path / "cache")
    gate = root / "sglang/srt/gate.py"
    before = snapshot(root)
    real = fsio.write_temp

    def user_saves(path, data, mode=None):
        if gate.read_text() == MODULE:
            gate.write_text(USER)
        return real(path, data, mode)

    monkeypatch.setattr(fsio, "write_temp", user_saves)
    code, out, err = _cli(run_cli, root, recipes, "apply", "widen")
    assert code == 2 and "changed while patchkit wrote its edit" in err, (code, out, err)
    assert gate.read_text() == USER, "the user's edit was overwritten"
    assert snapshot(root) == {**before, "sglang/srt/gate.py": USER.encode()}
    assert _no_temps_nor_markers(root) and not (root / ".patchkit" / "journal.json").exists()
    assert planned == ([1] if how == "replayed" else [1, 1])


def test_a_fresh_plan_whose_input_changed_before_the_commit_is_refused(site, run_cli, monkeypatch):  # noqa: F811
    """gate.py holds the edit already (the plan writes only kernel.cuh); between the plan
    and the commit another program, ignoring the lock, takes it out.  The plan, judged on a
    file that is no longer there, is refused by the re-read under the lock: nothing written,
    no success reported for an edit that is not in the tree."""
    root, recipes = site
    gate = root / "sglang/srt/gate.py"
    done = MODULE.replace('["a", "b"]', '["a", "b", "c"]')
    gate.write_text(done)
    real = transaction.freeze

    def meanwhile(session, plan, *a, **k):
        frozen = real(session, plan, *a, **k)
        assert [w.path.name for w in frozen.writes if w.path.parent.name == "srt"] == ["kernel.cuh"]
        gate.write_text(MODULE)
        return frozen

    monkeypatch.setattr(transaction, "freeze", meanwhile)
    before = snapshot(root)
    code, out, err = run_cli("--recipes", str(recipes), "apply", "widen", "-t", f"sglang={root}")
    assert code == 2 and "gate.py: changed since patchkit read it" in err, (out, err)
    assert snapshot(root) == {**before, "sglang/srt/gate.py": MODULE.encode()}
    assert _no_temps_nor_markers(root) and not (root / ".patchkit" / "journal.json").exists()


def test_a_replay_whose_tree_changed_between_lookup_and_lock_is_planned_afresh(
    seen,  # noqa: F811
    run_cli,
    planned,  # noqa: F811
    monkeypatch,
):
    """An input that is no file (a tree's fingerprint, the provenance) is taken again under
    the lock too: a replay made a Commit from a stale entry is planned afresh."""
    root, recipes, _, _, _ = seen
    calls = []
    real = plancache.commit_of

    def stale(entry, targets, action):
        calls.append(entry["provenance"])
        return real({**entry, "provenance": {**entry["provenance"], "x": "0" * 64}}, targets, action)

    monkeypatch.setattr(plancache, "commit_of", stale)
    code, out, err = _cli(run_cli, root, recipes, "apply", "widen")
    assert code == 0 and calls and planned == [1, 1], (out, err)


def test_a_target_file_turned_into_a_link_between_lookup_and_lock_is_planned_afresh(
    seen,  # noqa: F811
    run_cli,
    planned,  # noqa: F811
    monkeypatch,
    tmp_path,
):
    """The same bytes, through a link elsewhere: every digest agrees, only the real path
    read again under the lock tells.  Planned afresh, the file outside never written."""
    root, recipes, _, _, _ = seen
    gate, victim = root / "sglang/srt/gate.py", tmp_path / "victim.py"
    victim.write_text(MODULE)
    real = fsio.locked

    @contextlib.contextmanager
    def linked_first(roots, *a, **k):
        if not gate.is_symlink():
            gate.unlink()
            gate.symlink_to(victim)
        with real(roots, *a, **k) as got:
            yield got

    monkeypatch.setattr(fsio, "locked", linked_first)
    _cli(run_cli, root, recipes, "apply", "widen")
    assert planned == [1, 1], "planned afresh: the full path judges the link"
    assert victim.read_text() == MODULE


@pytest.mark.real
def test_an_edit_between_lookup_and_lock_on_real_releases_is_never_overwritten(tree, tmp_path, run_cli, monkeypatch):
    """SGLang 0.5.9 + FlashInfer 0.6.3: apply sm120 (the cache keeps its plan), put the
    trees back, then the user saves a file the plan edits just before the replay takes the
    lock (as an editor does: a new file renamed over it).  Planned afresh on the user's
    bytes: their line is kept, and sm120's edit made beside it."""
    import json
    import shutil
    from pathlib import Path

    from patchkit.base.paths import wheels_dir
    from patchkit.core import planner

    def trees():
        return tree("sglang", "0.5.9", links=True), tree("flashinfer", "0.6.3", links=True)

    sg, fi = trees()
    own = tmp_path / "cache"
    for dist, version in (("sglang", "0.5.9"), ("flashinfer-python", "0.6.3")):
        shutil.copytree(wheels_dir(dist) / version, own / "wheels" / dist / version)
    monkeypatch.setenv("PATCHKIT_CACHE", str(own))
    args = ["apply", "sm120", "-t", f"sglang={sg}", "-t", f"flashinfer={fi}", "--json"]
    code, out, err = run_cli(*args)
    assert code == 0, err
    victim = next(Path(p) for p in json.loads(out)["written"] if p.endswith(".py") and p.startswith(str(sg)))
    shutil.rmtree(sg)
    shutil.rmtree(fi)
    assert trees() == (sg, fi)
    before = victim.read_bytes()
    user = before + b"# the user's line\n"
    plans = []
    real_plan, real_lock = planner.plan_apply, fsio.locked
    monkeypatch.setattr(planner, "plan_apply", lambda *a, **k: plans.append(1) or real_plan(*a, **k))
    tried, real_commit_of = [], plancache.commit_of
    monkeypatch.setattr(plancache, "commit_of", lambda *a: tried.append(1) or real_commit_of(*a))

    @contextlib.contextmanager
    def user_saves_first(roots, *a, **k):
        if victim.read_bytes() == before:
            swap = victim.with_name(victim.name + ".swp")
            swap.write_bytes(user)
            swap.replace(victim)  # a new file: the shared release's link is never written through
        with real_lock(roots, *a, **k) as got:
            yield got

    monkeypatch.setattr(fsio, "locked", user_saves_first)
    code, out, err = run_cli(*args)
    assert code == 0, err
    text = victim.read_bytes()
    assert text.endswith(b"# the user's line\n") and text != user, "the user's edit overwritten, or sm120's not made"
    assert tried == [1] and plans == [1], "the cache's plan found, then planned afresh, not replayed"
