"""The judge writes nothing while it judges (patchkit/core/learned.py): what it learns that
is worth caching (an outline, a site's identity, a confirmation) is a value in its Session,
and ``learned.keep``, run by the command once judging is done, writes it.  Judging a tree
with a cold cache that is read-only, and a read-only target, opens nothing for writing,
changes no file's time, and gives the same verdicts.  Offline: a small installed tree, its
release in the cache."""

from __future__ import annotations

import os
import stat

import pytest

from patchkit.base.target import open_target
from patchkit.core import learned
from patchkit.core.judge import evaluate
from patchkit.core.project import Project
from patchkit.core.session import Session
from patchkit.core.verdict import results
from patchkit.upstream.pristine import RELEASES
from tests.conftest import release_in_cache
from tests.core.test_transaction import KERNEL, MODULE
from tests.core.test_transaction import site as site  # noqa: F401  (the fixture)

DERIVED = ("outlines", "identity", "confirmed")
WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@pytest.fixture(params=["in place", "moved"])
def judged(site, tmp_path, monkeypatch, request):  # noqa: F811
    """judged() -> (the verdicts, the Session) of widen on the tree, judged afresh: its
    sites in place (a view's answer confirmed, outlines), or gate.py's list moved to
    another file (its identity in the release, outlines of the files searched)."""
    root, recipes = site
    if request.param == "moved":
        (root / "sglang/srt/gate.py").write_text('GATE = "sm90"\n')
        (root / "sglang/srt/backends.py").write_text(MODULE)
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    release_in_cache(cache, "sglang", "0.5.9", {"sglang/srt/gate.py": MODULE, "sglang/srt/kernel.cuh": KERNEL})
    recipe = Project.locate(recipes=str(recipes)).catalog().select(["widen"])

    def judge():
        session = Session({"sglang": open_target("sglang", root)}, releases=RELEASES)
        verdicts = [
            (r.id, r.state, [(o.index, o.state, o.message) for o in r.ops])
            for r in results(session, evaluate(session, recipe))
        ]
        return verdicts, session

    return root, cache, judge


def _times(*dirs) -> dict:
    return {str(p): p.lstat().st_mtime_ns for d in dirs for p in [d, *d.rglob("*")]}


def _read_only(*dirs) -> None:
    for d in dirs:
        for p in [d, *d.rglob("*")]:
            if not p.is_symlink():
                p.chmod(stat.S_IMODE(p.lstat().st_mode) & ~0o222)


def test_judging_with_a_read_only_cold_cache_writes_nothing_and_gives_the_same_verdicts(judged, monkeypatch):
    root, cache, judge = judged
    _read_only(cache, root)
    # Once, unaudited: the release is opened and its sha256 checked against its record (the
    # pristine reference's own bookkeeping, patchkit/upstream/recorded.py, not the judge's).
    first, session = judge()
    assert len(session.learned) >= 2, session.learned.facts
    assert not any((cache / d).exists() for d in DERIVED), "judging wrote the cache"
    before = _times(cache, root)
    wrote: list = []
    real_open, real_mkdir = os.open, os.mkdir

    def audit_open(path, flags, *a, **k):
        if flags & WRITING:
            wrote.append((str(path), flags))
        return real_open(path, flags, *a, **k)

    def audit_mkdir(path, *a, **k):
        wrote.append((str(path), "mkdir"))
        return real_mkdir(path, *a, **k)

    monkeypatch.setattr(os, "open", audit_open)
    monkeypatch.setattr(os, "mkdir", audit_mkdir)
    for name in ("replace", "rename", "unlink", "utime"):
        monkeypatch.setattr(os, name, lambda *a, _n=name, **k: wrote.append((a, _n)))
    again, session = judge()  # cold: nothing derived in the cache, and it cannot be written
    monkeypatch.undo()
    assert wrote == [], wrote
    assert _times(cache, root) == before
    assert again == first and len(session.learned) >= 2


def test_what_judging_learned_is_kept_after_judging_and_read_back(judged):
    root, cache, judge = judged
    first, session = judge()
    kinds = {k for k, _ in session.learned.facts}
    moved = any(op[1] == "moved" for _, _, ops in first for op in ops)
    assert kinds >= {learned.OUTLINE, learned.IDENTITY if moved else learned.CONFIRMED}, (kinds, first)
    learned.keep(session.learned)
    assert len(session.learned) == 0
    assert all((cache / d).is_dir() for d in DERIVED if d.rstrip("s") in {k.rstrip("s") for k in kinds}), kinds
    again, session = judge()
    assert again == first
    assert len(session.learned) == 0, ("read back from the cache, nothing learned anew", session.learned.facts)
