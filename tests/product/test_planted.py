"""The planted-store table: whatever is planted in patchkit's store, patchkit writes only bytes
the recipe makes, into files the recipe names, and reports no false success.

One row per kind of entry that decides a verdict or a write (plans, verdicts, probes,
pristine wheels, outlines) and per way it gets there:

* ``crafted``: a false entry, internally consistent, written without this user's key (a
  MAC of another key's): only the MAC stands between it and its use;
* ``stale``: an entry this user's patchkit wrote for other inputs, put at this input's name
  and sealed as this user's (what a holder of the key could write): only the entry's own
  freshness check stands (the plan's inputs read again under the lock, the verdict's file
  digests, the probe's fingerprint, the wheel's recorded sha256, the outline's fit to the
  text);
* ``foreign-owned`` and ``group-writable``: the false entry sealed as this user's, in a cache
  directory another user owns (``chown`` as root; without root, the trust rule's ``lstat``
  of the cache directory reports another owner) or that the group may write: only the trust
  rule (patchkit/base/store.py) stands.

Every row runs the command on the world with the entry planted and checks: the exit code
and the target's bytes are what they are with no entry at all (a world built the same way,
run the same way); status never reads ``applied`` or ``upstream`` where that is not so;
apply never writes the planted bytes; revert never exits 0 leaving an edit; nothing outside
the target and the cache changes, and an untrusted cache is not written to.  Offline, in
process: a miniature sglang 0.5.9 in package layout, its release wheel in the cache as a
download records it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit.base import store
from tests.conftest import MINIMAL_RECIPE, downloaded, mini_sglang
from tests.product.test_hostile import snapshot

RECIPE = MINIMAL_RECIPE.format(id="r")
# g holds what f holds once applied: an outline that cut g's lines as f's would read applied
PRISTINE = 'import os\n\n\ndef f():\n    return ["a"]\n\n\ndef g():\n    return ["a", "b"]\n'
SWAPPED = 'import os\n\n\ndef g():\n    return ["a", "b"]\n\n\ndef f():\n    return ["a"]\n'
PLANTED = b"import os; os.system('echo PWNED')\n"
OTHER_KEY = b"\x07" * 32  # a planter's key: not this user's

KINDS = ("plans", "verdicts", "probes", "pristine-wheels", "outlines")
HOWS = ("crafted", "stale", "foreign-owned", "group-writable")


# -- the world --------------------------------------------------------------------------------


class World:
    def __init__(self, base: Path, monkeypatch, run_cli) -> None:
        self.base, self.mp, self.run_cli = base, monkeypatch, run_cli
        base.mkdir(mode=0o700)
        os.chmod(base, 0o700)
        self.home, self.cache, self.t = base / "home", base / "cache", base / "t"
        self.outside, self.recipes = base / "outside", base / "recipes"
        self.home.mkdir(mode=0o700)
        self.recipes.mkdir()
        (self.recipes / "r.toml").write_text(RECIPE)
        self.outside.mkdir()
        (self.outside / "secret.py").write_text("SECRET = 1\n")
        mini_sglang(self.t, {"sglang/srt/x.py": PRISTINE})
        self.env()
        self.wheel = self.release(self.t)

    def env(self) -> None:
        mp = self.mp
        mp.setenv("PATCHKIT_CACHE", str(self.cache))
        mp.setenv("XDG_CONFIG_HOME", str(self.home / "config"))
        mp.setenv("XDG_STATE_HOME", str(self.home / "state"))
        mp.setenv("PATCHKIT_OFFLINE", "1")
        mp.setenv("PATCHKIT_LOCK_TIMEOUT", "0.3")
        mp.delenv("PYTHONPATH", raising=False)
        mp.setattr(store, "_trusted", {})
        mp.setattr(store, "_key", {})
        mp.setattr(store, "_said", set())

    def release(self, tree: Path, name: str = "sglang-0.5.9-py3-none-any.whl", record: bool = True) -> Path:
        """The release wheel of ``tree`` in the cache (recorded as a download records it)."""
        whl = self.cache / "wheels" / "sglang" / "0.5.9" / name
        whl.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(whl, "w") as z:
            for p in sorted(tree.rglob("*.py")):
                if ".patchkit" not in p.parts:
                    z.write(p, p.relative_to(tree).as_posix())
        return downloaded(whl, self.cache) if record else whl

    def cli(self, *args: str, t: Path | None = None, python: str | None = None):
        tail = ["--python", python] if python else ["-t", f"sglang={t or self.t}"]
        return self.run_cli("--recipes", str(self.recipes), *args, *tail)

    def forget(self) -> None:
        """A new process: the store's memos cleared, so the next command looks again."""
        store._trusted.clear()
        store._said.clear()
        store._key.clear()


def _entries(cache: Path, kind: str) -> list[Path]:
    d = cache / kind
    return sorted(p for p in d.glob("*") if p.is_file()) if d.is_dir() else []


def _seal_other(path: Path, data: bytes, kind: str | None = None) -> None:
    """``data`` at ``path`` with a MAC under a key that is not this user's."""
    store.forge(path, data, OTHER_KEY, kind)


def _untrust(w: World, how: str, monkeypatch) -> None:
    if how == "group-writable":
        os.chmod(w.cache, os.stat(w.cache).st_mode | stat.S_IWGRP)
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chown(w.cache, 12345, 12345)
        return
    # Without root: the trust rule's lstat of the cache directory reports another owner.
    real_lstat, cache = os.lstat, os.path.realpath(w.cache)

    class _Os:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def lstat(p, *a, **k):
            st = real_lstat(p, *a, **k)
            if os.path.realpath(p) == cache:
                fields = list(st[:10])
                fields[4] = os.getuid() + 12345
                return os.stat_result(fields)
            return st

    monkeypatch.setattr(store, "os", _Os())


# -- the false entries, one per kind ------------------------------------------------------------


def _plan_poisoned(w: World) -> tuple[Path, bytes]:
    """The plan of `apply r` from pristine, turned to write PLANTED into x.py, consistent in
    every digest (x.py's, the blob named by its sha256, the journal that records it):
    replayed, it would write PLANTED."""
    from patchkit.core import plancache

    pristine = w.base / "pristine"
    shutil.copytree(w.t, pristine)
    assert w.cli("apply", "r")[0] == 0
    applied = (w.t / "sglang/srt/x.py").read_bytes()
    shutil.rmtree(w.t)
    shutil.copytree(pristine, w.t)
    [entry] = _entries(w.cache, "plans")
    doc = json.loads(store.payload(entry))
    was, now = hashlib.sha256(applied).hexdigest(), hashlib.sha256(PLANTED).hexdigest()
    old_x = (w.t / "sglang/srt/x.py").read_bytes()
    for wr in doc["commit"]["writes"]:
        if wr["path"].endswith("sglang/srt/x.py"):
            new = PLANTED
        elif wr["path"].endswith("/" + was):  # the blob of x.py's new bytes, named by them
            doc["inputs"][wr["path"].replace(was, now)] = doc["inputs"].pop(wr["path"])
            wr["path"] = wr["path"].replace(was, now)
            new = PLANTED
        elif wr["path"].endswith("journal.json"):
            new = plancache._spliced(b"", plancache._splices(wr)).replace(was.encode(), now.encode())
        else:
            continue
        wr["new"] = plancache.digest_of(new)
        if wr["base"] is None:
            wr["splices"] = plancache.splice(old_x if wr["path"].endswith("x.py") else None, new)
    return entry, json.dumps(doc).encode()


def _plan_stale(w: World) -> Path:
    """The plan made on pristine x.py, sealed at the name of the plan for x.py as the user has
    it now (an edit of the same length inside the line the plan replaces: its splices give
    the plan's bytes exactly), its key field too: replayed, it would write the line as the
    plan made it, the user's edit lost.  Only reading every input again refuses it."""
    pristine = w.base / "pristine"
    shutil.copytree(w.t, pristine)
    assert w.cli("apply", "r")[0] == 0
    [old_entry] = _entries(w.cache, "plans")
    old = json.loads(store.payload(old_entry))
    shutil.rmtree(w.t)
    shutil.copytree(pristine, w.t)
    x = w.t / "sglang/srt/x.py"
    x.write_text(PRISTINE.replace('    return ["a"]', '    yield  ["a"]'))  # the same length
    shutil.copytree(w.t, pristine, dirs_exist_ok=True)
    w.forget()
    assert w.cli("apply", "r")[0] == 0  # the plan for x.py as it is now: its name
    shutil.rmtree(w.t)
    shutil.copytree(pristine, w.t)
    [new_entry] = [p for p in _entries(w.cache, "plans") if p != old_entry]
    store.reseal(new_entry, json.dumps(old).encode())
    return new_entry


def _verdict_poisoned(w: World) -> tuple[Path, bytes]:
    """`status`'s entry for the pristine tree, its verdicts turned to applied."""
    assert w.cli("status", "r")[0] == 1
    [entry] = _entries(w.cache, "verdicts")
    text = store.payload(entry).decode()
    assert '"pending"' in text
    return entry, text.replace('"pending"', '"applied"').encode()


def _verdict_stale(w: World) -> Path:
    """The entry of the tree applied (true then), sealed at its name again after x.py was put
    back by hand (the journal left as it was): only the digests of the files it read refuse
    it."""
    assert w.cli("apply", "r")[0] == 0
    w.forget()
    assert w.cli("status", "r")[0] == 0
    [entry] = _entries(w.cache, "verdicts")
    then = store.payload(entry)
    (w.t / "sglang/srt/x.py").write_text(PRISTINE)
    w.forget()
    assert w.cli("status", "r")[0] != 0
    assert _entries(w.cache, "verdicts") == [entry] and store.payload(entry) != then
    store.reseal(entry, then)
    return entry


def _probe_world(w: World) -> tuple[Path, Path]:
    """site/ (on PYTHONPATH: what the interpreter imports, by its sitecustomize) and an applied
    copy of the tree."""
    site, applied = w.base / "site", w.base / "applied"
    site.mkdir()
    shutil.copytree(w.t, applied)
    assert w.cli("apply", "r", t=applied)[0] == 0
    w.forget()
    return site, applied


def _pth(site: Path, tree: Path) -> None:
    """site/sitecustomize.py puts ``tree`` first on sys.path (site/ is on PYTHONPATH)."""
    (site / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(tree)!r})\n")


def _probe_poisoned(w: World) -> tuple[Path, bytes]:
    """The probe of the interpreter (it imports the pristine tree), its facts turned to the
    applied copy, with the fingerprint made for them: only the store's MAC or trust rule
    stands."""
    from patchkit.fleet import interp

    site, applied = _probe_world(w)
    _pth(site, w.t)
    w.mp.setenv("PYTHONPATH", str(site))
    interp.remembered_probe(sys.executable)
    [entry] = _entries(w.cache, "probes")
    doc = json.loads(store.payload(entry))
    facts = json.loads(json.dumps(doc["facts"]).replace(str(w.t), str(applied)))
    assert facts != doc["facts"]
    doc["facts"] = facts
    doc["stamp"] = interp._stamp(facts, doc["asked"], None)
    return entry, json.dumps(doc).encode()


def _probe_stale(w: World) -> Path:
    """The probe taken while sitecustomize led to the applied copy; rewritten in place since
    (to the pristine tree, its directory's mtime set back): only the fingerprint stands."""
    from patchkit.fleet import interp

    site, applied = _probe_world(w)
    _pth(site, applied)
    w.mp.setenv("PYTHONPATH", str(site))
    interp.remembered_probe(sys.executable)
    st = os.stat(site)
    _pth(site, w.t)
    os.utime(site, ns=(st.st_atime_ns, st.st_mtime_ns))
    [entry] = _entries(w.cache, "probes")
    return entry


def _wheel_world(w: World) -> None:
    """The tree applied, its journal (and the journal's mirror) lost."""
    assert w.cli("apply", "r")[0] == 0
    shutil.rmtree(w.t / ".patchkit")
    shutil.rmtree(w.home / "state", ignore_errors=True)
    w.forget()


def _wheel_poisoned(w: World) -> None:
    """A wheel of the applied tree as sglang 0.5.9's release."""
    _wheel_world(w)
    w.wheel.unlink()
    (w.wheel.parent / (w.wheel.name + ".sha256")).unlink()
    w.release(w.t, record=False)


def _wheel_stale(w: World) -> None:
    """The downloaded release, replaced since by a wheel of the applied tree (its record is
    the download's)."""
    _wheel_world(w)
    rec = w.wheel.parent / (w.wheel.name + ".sha256")
    kept = rec.read_bytes()
    w.release(w.t, record=False)
    rec.write_bytes(kept)


def _outline_poisoned(w: World) -> tuple[Path, bytes]:
    """x.py's outline, f's lines turned to g's (which hold f's applied form; "def g" has an f
    in it): the view, and the scope it is confirmed on, would read f applied."""
    assert w.cli("status", "r")[0] == 1
    shutil.rmtree(w.cache / "verdicts")
    [entry] = _entries(w.cache, "outlines")
    doc = json.loads(store.payload(entry))
    doc["body"] = [["import", "", 1, 1, 1, 0, []], ["def", "f", 8, 9, 8, 0, [["simple", "", 9, 9, 9, 4, []]]]]
    return entry, json.dumps(doc).encode()


def _outline_stale(w: World) -> Path:
    """The outline of x.py as it was (f and g the other way round: f at g's lines now), sealed
    at x.py's name now: only its fit to the text (each def's name on its header line)
    refuses it."""
    x = w.t / "sglang/srt/x.py"
    x.write_text(SWAPPED)
    assert w.cli("status", "r")[0] == 1
    [old] = _entries(w.cache, "outlines")
    stale = store.payload(old)
    x.write_text(PRISTINE)
    shutil.rmtree(w.cache / "outlines")
    shutil.rmtree(w.cache / "verdicts")
    w.forget()
    assert w.cli("status", "r")[0] == 1
    shutil.rmtree(w.cache / "verdicts")
    [entry] = _entries(w.cache, "outlines")
    store.reseal(entry, stale)
    return entry


POISONED = {
    "plans": _plan_poisoned,
    "verdicts": _verdict_poisoned,
    "probes": _probe_poisoned,
    "outlines": _outline_poisoned,
}
STALE = {
    "plans": _plan_stale,
    "verdicts": _verdict_stale,
    "probes": _probe_stale,
    "pristine-wheels": _wheel_stale,
    "outlines": _outline_stale,
}


def plant(w: World, kind: str, how: str, monkeypatch) -> Path | None:
    """Plant the row's entry; the entry's path (None for a wheel: its record is not remade
    offline)."""
    if kind == "pristine-wheels":
        if how == "stale":
            _wheel_stale(w)
            return
        _wheel_poisoned(w)
        if how == "crafted":  # a record of the planted wheel's sha256, under another key
            data = json.dumps({"file": w.wheel.name, "sha256": hashlib.sha256(w.wheel.read_bytes()).hexdigest()})
            _seal_other(w.wheel.parent / (w.wheel.name + ".sha256"), data.encode(), "records")
        else:  # recorded as this user's download would record it: only the trust rule stands
            downloaded(w.wheel, w.cache)
            _untrust(w, how, monkeypatch)
        w.forget()
        return None
    if how == "stale":
        entry = STALE[kind](w)
    else:
        entry, data = POISONED[kind](w)
        if how == "crafted":
            _seal_other(entry, data)
        else:
            store.reseal(entry, data)
            _untrust(w, how, monkeypatch)
    w.forget()
    return entry


# -- the command each kind's entry decides, and what it must not do -------------------------------


def run(w: World, kind: str):
    """(exit code, stdout+stderr) of the command the entry would decide."""
    if kind == "plans":
        code, out, err = w.cli("apply", "r")
    elif kind == "probes":
        code, out, err = w.cli("status", "r", python=sys.executable)
    elif kind == "pristine-wheels":
        code, out, err = w.cli("status", "r")
        w.forget()
        rcode, rout, rerr = w.cli("revert", "r")
        x = (w.t / "sglang/srt/x.py").read_text()
        wrong = [
            *(["status read the edit upstream"] if "upstream" in out else []),
            *(["revert exited 0 leaving the edit"] if rcode == 0 and x != PRISTINE else []),
        ]
        assert not wrong, f"{wrong}\n{out}{err}\n--- revert: exit {rcode}\n{rout}{rerr}"
        assert "applied?" in out and "not used as a pristine reference" in out + err, out + err
        return code, out + err
    else:
        code, out, err = w.cli("status", "r")
    return code, out + err


def expect(kind: str, code: int, said: str, w: World) -> None:
    x = (w.t / "sglang/srt/x.py").read_bytes()
    assert PLANTED not in x, said
    if kind == "plans":  # the recipe's bytes on x.py as it was (a user's edit in it kept)
        assert code == 0, said
        assert x == w.before.replace(b'["a"]', b'["a", "b"]'), said
    elif kind == "pristine-wheels":
        pass  # run() checked status and revert
    else:  # status on the pristine tree (the probe: on what the interpreter imports)
        assert code == 1 and "pending" in said, said
        assert "applied" not in said.replace("pending", ""), said


def _outside_state(w: World) -> dict:
    return {p: snapshot(p) for p in (w.outside, w.recipes)}


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_entry_is_never_a_false_success_nor_a_write(kind, how, tmp_path, monkeypatch, run_cli):
    w = World(tmp_path / "w", monkeypatch, run_cli)
    entry = plant(w, kind, how, monkeypatch)
    planted = entry.read_bytes() if entry is not None else None
    before = _outside_state(w)
    cache_before = snapshot(w.cache) if how in ("foreign-owned", "group-writable") else None
    w.before = (w.t / "sglang/srt/x.py").read_bytes()
    code, said = run(w, kind)
    expect(kind, code, said, w)
    assert _outside_state(w) == before, "written outside the target\n" + said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]
    if planted is not None and cache_before is None:  # a miss, computed again and replaced
        assert entry.read_bytes() != planted, "the planted entry was used\n" + said
    if cache_before is not None:
        assert snapshot(w.cache) == cache_before, "an untrusted cache was written to\n" + said
        assert "not trusted" in said, said
