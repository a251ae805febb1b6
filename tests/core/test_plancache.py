"""The plan cache (patchkit/core/plancache.py): an apply or revert on inputs planned before is
replayed, byte for byte as the full path writes and prints it, without libcst; every check
that stands between an entry and a write fires here: a file changed under the lock (the
plan is made again), a stale entry, and entries that are damaged or crafted (a miss, never a
crash, never a write outside the target).  Offline: a small installed-looking tree."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.base import store
from patchkit.core import plancache, planner
from tests.conftest import release_in_cache
from tests.core.test_transaction import KERNEL, MODULE, snapshot
from tests.core.test_transaction import site as site  # noqa: F401  (the fixture)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(c))
    return c


@pytest.fixture
def planned(monkeypatch):
    """How many plans the full path made (a replay makes none)."""
    calls = []
    for name in ("plan_apply", "plan_revert"):
        real = getattr(planner, name)

        def spy(*a, _real=real, **k):
            calls.append(1)
            return _real(*a, **k)

        monkeypatch.setattr(planner, name, spy)
    return calls


def _cli(run_cli, root, recipes, *args):
    return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")


def _restore(root: Path, pristine: Path) -> None:
    shutil.rmtree(root)
    shutil.copytree(pristine, root, symlinks=True)


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "plans").glob("*") if p.is_file())


@pytest.fixture
def seen(site, cache, run_cli, tmp_path, planned):  # noqa: F811
    """A tree applied once from pristine (the cache holds that plan), then put back as it was.
    Returns (root, recipes, the first apply's (code, out, err), its tree afterwards)."""
    root, recipes = site
    pristine = tmp_path / "pristine"
    shutil.copytree(root, pristine, symlinks=True)
    first = _cli(run_cli, root, recipes, "apply", "widen")
    assert first[0] == 0, first
    after = snapshot(root, state=True)
    assert len(_entries(cache)) == 1 and planned == [1]
    _restore(root, pristine)
    return root, recipes, first, after, pristine


def test_apply_on_inputs_seen_before_replays_the_same_write_and_output(seen, run_cli, planned):
    root, recipes, first, after, _ = seen
    again = _cli(run_cli, root, recipes, "apply", "widen")
    assert planned == [1], "replayed: no plan made"
    assert again == first
    assert snapshot(root, state=True) == after  # files, RECORD, journal, blobs: byte for byte


def test_json_output_of_a_replay_is_the_full_paths(seen, run_cli, planned, tmp_path):
    root, recipes, _, _, pristine = seen
    replayed = _cli(run_cli, root, recipes, "apply", "widen", "--json")
    assert planned == [1]
    shutil.rmtree(tmp_path / "cache")
    _restore(root, pristine)
    made = _cli(run_cli, root, recipes, "apply", "widen", "--json")
    assert planned == [1, 1]
    assert replayed == made and json.loads(made[1])["written"]


def test_the_replay_does_not_import_libcst(seen, cache):
    root, recipes, first, after, _ = seen
    code = (
        "import sys\nfrom patchkit.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'libcst' not in sys.modules, 'libcst imported'\n"
    )
    env = {**os.environ, "PATCHKIT_CACHE": str(cache)}
    args = ["--recipes", str(recipes), "apply", "widen", "-t", f"sglang={root}"]
    p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == first[1] and snapshot(root, state=True) == after


def test_an_applied_tree_seen_before_says_so_without_planning(seen, run_cli, planned):
    root, recipes, _, _, _ = seen
    assert _cli(run_cli, root, recipes, "apply", "widen")[0] == 0  # replayed
    done = _cli(run_cli, root, recipes, "apply", "widen")  # the applied tree: planned, kept
    assert planned == [1, 1] and "nothing to apply" in done[1]
    assert _cli(run_cli, root, recipes, "apply", "widen") == done
    assert planned == [1, 1]


def test_a_file_changed_under_the_lock_is_planned_again_not_replayed(seen, run_cli, planned, monkeypatch):
    root, recipes, _, _, _ = seen
    gate = root / "sglang/srt/gate.py"
    real = plancache.commit_of

    def meanwhile(entry, *a):  # another program writes between the lookup and the lock
        gate.write_text(MODULE + "# the user's line\n")
        return real(entry, *a)

    monkeypatch.setattr(plancache, "commit_of", meanwhile)
    code, out, err = _cli(run_cli, root, recipes, "apply", "widen")
    assert code == 0, err
    assert planned == [1, 1], "planned again"
    text = gate.read_text()
    assert "# the user's line" in text and '"c"' in text  # the new bytes, edited: nothing of the old plan


@pytest.mark.parametrize("edit", ['BACKENDS = ["a", "B"]\n', 'BACKENDS = ["x", "b"]\n'])
def test_a_user_edit_inside_the_replaced_span_after_the_lookup_is_never_overwritten(
    seen, run_cli, planned, monkeypatch, edit
):
    """The edit lies inside the span the plan's splice replaces and keeps the file's length,
    so splicing the plan onto the edited bytes gives exactly the plan's new bytes (their
    digest checks out): only the re-read under the lock and the old-digest check stop the
    replay from silently taking the user's edit away."""
    root, recipes, _, _, _ = seen
    gate = root / "sglang/srt/gate.py"
    user = MODULE.replace('BACKENDS = ["a", "b"]\n', edit)
    assert len(user) == len(MODULE) and user != MODULE
    real = plancache.commit_of

    def meanwhile(entry, *a):  # the user saves between the lookup and the write
        w = _write(entry, "gate.py")
        assert w["splices"] and w["splices"][0][0] < w["splices"][0][1]  # the edit is inside this span
        gate.write_text(user)
        return real(entry, *a)

    monkeypatch.setattr(plancache, "commit_of", meanwhile)
    code, out, err = _cli(run_cli, root, recipes, "apply", "widen")
    text = gate.read_text()
    assert edit.strip()[:-1] in text, ("the user's edit was overwritten", text)
    assert code != 0 or planned == [1, 1], (code, err)  # planned again, or refused: never the old plan


def test_a_target_file_turned_into_a_link_is_a_miss(seen, run_cli, planned, tmp_path):
    root, recipes, _, _, pristine = seen
    victim = tmp_path / "victim.py"
    victim.write_text(MODULE)  # the same bytes, elsewhere
    (root / "sglang/srt/gate.py").unlink()
    (root / "sglang/srt/gate.py").symlink_to(victim)
    got = _cli(run_cli, root, recipes, "apply", "widen")
    assert planned == [1, 1], "a miss: the full path judges the link"
    assert victim.read_text() == MODULE, got


def test_a_stale_entry_is_a_miss(seen, run_cli, planned):
    root, recipes, _, _, _ = seen
    (root / "sglang/srt/kernel.cuh").write_text(KERNEL + "// theirs\n")
    code, out, err = _cli(run_cli, root, recipes, "apply", "widen")
    assert code == 0 and planned == [1, 1], err
    assert (root / "sglang/srt/kernel.cuh").read_text().endswith("// theirs\n")


def test_a_changed_recipe_is_a_new_key(seen, run_cli, planned):
    root, recipes, _, _, _ = seen
    (recipes / "widen.toml").write_text((recipes / "widen.toml").read_text().replace('"c"', '"d"'))
    assert _cli(run_cli, root, recipes, "apply", "widen")[0] == 0
    assert planned == [1, 1] and '"d"' in (root / "sglang/srt/gate.py").read_text()


def _tamper(entry: Path, change) -> None:
    doc = json.loads(store.payload(entry))
    change(doc)
    store.reseal(entry, json.dumps(doc).encode())


def _write(doc: dict, name: str) -> dict:
    return next(w for w in doc["commit"]["writes"] if w["path"].endswith(name))


def _splice_other_bytes(doc):
    w = _write(doc, "gate.py")
    w["splices"] = [[s[0], s[1], base64.b64encode(b"import os\n").decode()] for s in w["splices"]]


def _misnamed_blob(doc):
    w = next(w for w in doc["commit"]["writes"] if "/written/" in w["path"])
    w.update(base=None, splices=[[0, 0, base64.b64encode(b"x").decode()]], new=plancache.digest_of(b"x"))


def _outside(victim: Path):
    """A write of a file outside the target, consistent in every digest: only the check that
    a write is one of the plan's own files stops it."""

    def change(doc):
        old = victim.read_bytes()
        doc["inputs"][str(victim)] = plancache.digest_of(old)
        new = plancache.digest_of(b"PWNED\n")
        w = {"path": str(victim), "old": doc["inputs"][str(victim)], "new": new, "base": None}
        doc["commit"]["writes"].append({**w, "splices": plancache.splice(old, b"PWNED\n")})

    return change


BAD = {
    "truncated": lambda p, v: p.write_bytes(p.read_bytes()[:100]),
    "not JSON": lambda p, v: p.write_bytes(b"\x80\x04K\x01."),  # a pickle: never unpickled
    "wrong shape": lambda p, v: _tamper(p, lambda d: d.update(inputs=[1, 2])),
    "another key's": lambda p, v: p.write_bytes(store.seal("plans", 1, "0" * 64, store.payload(p), store.secret())),
    "wrong digest": lambda p, v: _tamper(p, lambda d: _write(d, "gate.py").update(new="0" * 64)),
    "other bytes": lambda p, v: _tamper(p, _splice_other_bytes),
    "splice past the end": lambda p, v: _tamper(p, lambda d: _write(d, "gate.py").update(splices=[[0, 10**6, ""]])),
    "a write outside the target": lambda p, v: _tamper(p, _outside(v)),
    "a blob that is not its name": lambda p, v: _tamper(p, _misnamed_blob),
    "outcome of the wrong shape": lambda p, v: _tamper(p, lambda d: d["outcome"].update(results=7)),
    "candidates not a list": lambda p, v: _tamper(
        p, lambda d: d["outcome"]["results"][0]["ops"][0].update(candidates=7)
    ),
    "a link": lambda p, v: (p.unlink(), p.symlink_to(v)),
    "a FIFO": lambda p, v: (p.unlink(), os.mkfifo(p)),
    "a directory": lambda p, v: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("damage", sorted(BAD))
def test_a_bad_entry_is_a_miss_never_a_crash_nor_a_write_outside(seen, run_cli, planned, cache, tmp_path, damage):
    root, recipes, first, after, _ = seen
    victim = tmp_path / "victim.py"
    victim.write_text("SECRET = 1\n")
    [entry] = _entries(cache)
    BAD[damage](entry, victim)
    again = _cli(run_cli, root, recipes, "apply", "widen")
    assert again[:2] == first[:2], again
    said = again[2].replace(first[2], "", 1)  # what the store says once of an entry not this user's
    assert said == "" or (said.count("\n") == 1 and "its MAC fails" in said and damage == "another key's"), said
    assert planned == [1, 1], "a miss: planned again"
    assert snapshot(root, state=True) == after
    assert victim.read_text() == "SECRET = 1\n"


def test_a_damaged_index_is_a_miss(seen, run_cli, planned, cache):
    root, recipes, first, _, _ = seen
    [index] = (cache / "plans" / "paths").glob("*")
    store.reseal(index, b'{"paths": "all"}')
    assert _cli(run_cli, root, recipes, "apply", "widen") == first
    assert planned == [1, 1]


def test_revert_on_inputs_seen_before_is_replayed(site, cache, run_cli, planned):  # noqa: F811
    root, recipes = site
    release_in_cache(cache, "sglang", "0.5.9", {"sglang/srt/gate.py": MODULE, "sglang/srt/kernel.cuh": KERNEL})
    assert _cli(run_cli, root, recipes, "apply", "widen")[0] == 0
    applied = snapshot(root, state=True)
    first = _cli(run_cli, root, recipes, "revert", "widen")
    assert first[0] == 0 and "reverted" in first[1], first
    reverted = snapshot(root, state=True)
    assert _cli(run_cli, root, recipes, "apply", "widen")[0] == 0  # from the reverted state: planned
    assert snapshot(root, state=True) == applied
    n = len(planned)
    assert _cli(run_cli, root, recipes, "revert", "widen") == first
    assert len(planned) == n, "replayed"
    assert snapshot(root, state=True) == reverted


def test_splices_give_the_new_bytes_back_exactly():
    """Any two versions of a file (lines repeated, no final newline, edits at either end):
    the splices made of them give the new bytes back from the old, and are few for a few
    small edits of a large file."""
    import random

    r = random.Random(22)
    lines = [b"a\n", b"b\n", b"\n", b"x = 1\n", b"def f():\n", b"    pass\n", b"c", b"\r\n"]

    def text() -> bytes:
        return b"".join(r.choice(lines) for _ in range(r.randint(0, 40)))

    for _ in range(3000):
        old = text()
        new = bytearray(old)
        for _ in range(r.randint(0, 4)):
            at = r.randint(0, len(new))
            new[at : at + r.randint(0, 6)] = text()[: r.randint(0, 12)]
        new = bytes(new) if r.random() < 0.8 else text()
        got = plancache._spliced(old, plancache._splices({"splices": plancache.splice(old, new)}))
        assert got == new, (old, new)
    big = b"".join(b"line %d\n" % i for i in range(20000))
    edited = big.replace(b"line 7\n", b"line seven\n").replace(b"line 15000\n", b"line 15000\n    more\n")
    splices = plancache.splice(big, edited)
    assert len(splices) == 2 and sum(len(s[2]) for s in splices) < 100, splices


_NO_LIBCST = (
    "import sys\nfrom patchkit.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
    "assert 'libcst' not in sys.modules, 'libcst imported'\n"
)


@pytest.mark.real
def test_sm120_on_real_releases_seen_before_is_replayed_without_libcst(tree, tmp_path):
    """SGLang 0.5.9 + FlashInfer 0.6.3: apply sm120, put the trees back as they were (the same
    paths), apply again: no libcst, the same output, the same bytes, .patchkit included.

    Both runs use a cache of their own holding the two releases' wheels: which releases the
    cache holds is an input of the key (a pristine reference, a site's identity), and on a
    cold CI machine other tests download releases into the shared cache between the runs."""
    from patchkit.base.paths import wheels_dir
    from tests.conftest import ROOT

    def trees():
        return tree("sglang", "0.5.9", links=True), tree("flashinfer", "0.6.3", links=True)

    sg, fi = trees()
    own = tmp_path / "cache"
    for dist, version in (("sglang", "0.5.9"), ("flashinfer-python", "0.6.3")):
        shutil.copytree(wheels_dir(dist) / version, own / "wheels" / dist / version)
    env = {**os.environ, "PATCHKIT_CACHE": str(own)}
    args = ["apply", "sm120", "-t", f"sglang={sg}", "-t", f"flashinfer={fi}"]
    first = subprocess.run([sys.executable, "-m", "patchkit", *args], cwd=ROOT, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    after = (snapshot(sg, state=True), snapshot(fi, state=True))
    shutil.rmtree(sg)
    shutil.rmtree(fi)
    assert trees() == (sg, fi)
    again = subprocess.run([sys.executable, "-c", _NO_LIBCST, *args], cwd=ROOT, capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr
    assert (again.stdout, again.stderr) == (first.stdout, first.stderr)
    assert (snapshot(sg, state=True), snapshot(fi, state=True)) == after


def test_the_refusals_run_on_a_replayed_plan(seen, run_cli, planned, monkeypatch):
    from patchkit.core import record

    root, recipes, _, _, _ = seen
    monkeypatch.setattr(record, "system_locations", lambda: [root])
    code, out, err = _cli(run_cli, root, recipes, "apply", "widen")
    assert code == 2 and "is the site-packages of a system Python" in err, (out, err)
    assert planned == [1], "refused from the cached plan's Refusals, before any lock"
    assert not (root / ".patchkit").exists()


def test_a_profile_is_an_input_and_its_notes_are_replayed(site, cache, run_cli, planned, tmp_path, monkeypatch):  # noqa: F811
    root, recipes = site
    text = (recipes / "widen.toml").read_text()
    gate, kernel = text.split("[[ops]]")[1], text.split("[[ops]]")[2]
    head = 'summary = "s"\nbundles = ["b"]\n[engines]\nsglang = ">=0"\n'
    (recipes / "widen.toml").write_text(f'id = "widen"\n{head}[[ops]]{gate}')
    (recipes / "kern.toml").write_text(f'id = "kern"\n{head}[[ops]]{kernel}')
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "patchkit.toml").write_text('bundles = ["b"]\nexclude = ["kern"]\n')
    monkeypatch.chdir(ws)
    pristine = tmp_path / "pristine"
    shutil.copytree(root, pristine, symlinks=True)
    first = _cli(run_cli, root, recipes, "apply")
    assert first[0] == 0 and "left out kern: excluded by the profile" in first[1], first
    _restore(root, pristine)
    assert _cli(run_cli, root, recipes, "apply") == first
    assert planned == [1]
    (ws / "patchkit.toml").write_text('bundles = ["b"]\n')
    _restore(root, pristine)
    code, out, err = _cli(run_cli, root, recipes, "apply")
    assert code == 0 and planned == [1, 1] and "left out" not in out, (out, err)
    assert "(__CUDA_ARCH__ >= 900))" in (root / "sglang/srt/kernel.cuh").read_text()
