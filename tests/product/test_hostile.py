"""Hostile inputs, as a table (tests/hostile_cases.toml): every malformed recipe, damaged
target, journal, pins file, environment variable and command line the red team came up
with.  Each row says what to build, what to run, and the exit code and message it must get.

Every row also holds these, whatever its expectation:

* the exit code is never 3 (a bug) and no output holds a traceback;
* nothing hangs (a row runs under a time limit) or reads without end (a row run as a
  process, ``isolate = true``, has its memory capped);
* nothing is written outside the row's own directory: ``outside/`` (the place a hostile
  symlink or record points at) is byte-for-byte as it was, and nothing appears beside it;
* an exit-2 row gets exactly one ``patchkit: error:`` line, and leaves the target's files
  (apart from patchkit's own ``.patchkit/``) as they were.

A row in the table (all keys but name, category, args and exit are optional):

    name, category      what it is
    recipe              text of recipes/r.toml (default: [defaults].recipe)
    replace             [[old, new], ...]: edits to the default recipe (each must apply)
    files               {path: text} written under the row's directory ("inside")
    encoding            how ``recipe`` and ``files`` are encoded (default utf-8)
    hex                 {path: hex bytes}
    repeat              {path: [[chunk, count], ...]}: a large file, built from parts
    dirs                [path]: directories to make
    zips                {path: dir or [dir, {path in the zip: text}]}: a zip of the directory
                        (and these files: a release wheel in the cache), made before ``pre``;
                        one under ``cache/wheels/`` or ``cache/sdists/`` is recorded as a
                        download records it (its sha256, authenticated: recorded.py)
    unrecorded          [path]: zips of ``zips`` placed in the cache without that record
    links               {path: where}: symlinks (``{inside}``/``{outside}``/``{t}``/``{pid}`` expand)
    fifos               [path]: named pipes
    remove              [path]: files or directories to delete
    chmod               {path: "octal"}: the row is skipped when running as root
    pre                 [[args...]]: commands run first, each must exit 0 (e.g. an apply
                        whose journal the row then damages); the damage keys apply after
    env / unset         environment variables to set / remove (values expand)
    lock                true: the target's lock is held by another process during the run
    args                the command line (expands); the target is ``{t}``
    exit, message       the expected exit code, and a substring of stdout+stderr (expands)
    usage               true: an exit-2 row that shows the usage text rather than one error line
    stdout_json         true: stdout is one JSON document; for errors, error.exit == exit
    isolate             true: run as a process (memory capped) rather than in-process
    timeout             seconds (default 20)
    xfail               the reason a row fails today because of code outside this change
                        (pytest.xfail, not strict): delete the key once that code is fixed

A path with ``*`` in it (in remove, files, hex, links, fifos) stands for every entry
already there that it matches, at least one (a cache entry whose name is a digest, made
by a ``pre`` command).

Paths are relative to the row's directory, which holds ``recipes/`` (r.toml), ``t/`` (a
miniature sglang 0.5.9 in package layout) and ``upstream_pins.toml`` (PATCHKIT_PINS points
at it unless a row says otherwise).  PATCHKIT_CACHE and HOME are inside it too.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import pytest

from patchkit.base import store
from tests.conftest import downloaded, mini_sglang

TABLE = Path(__file__).parents[1] / "hostile_cases.toml"
DATA = tomllib.loads(TABLE.read_text())
DEFAULTS = DATA["defaults"]
CASES = DATA["case"]
KEYS = {
    "name",
    "category",
    "recipe",
    "replace",
    "files",
    "encoding",
    "hex",
    "repeat",
    "dirs",
    "zips",
    "unrecorded",
    "links",
    "fifos",
    "remove",
    "chmod",
    "pre",
    "env",
    "unset",
    "lock",
    "args",
    "exit",
    "message",
    "usage",
    "stdout_json",
    "isolate",
    "timeout",
    "xfail",
}
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def test_the_table_is_well_formed():
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "row names must be unique"
    assert len(CASES) >= 100
    for c in CASES:
        assert set(c) <= KEYS, (c["name"], set(c) - KEYS)
        assert {"name", "category", "args", "exit"} <= set(c), c["name"]
        assert c["exit"] in (0, 1, 2), c["name"]
        assert c.get("xfail", "owned elsewhere: ").startswith("owned elsewhere: "), c["name"]
        assert set(c.get("unrecorded", ())) <= set(c.get("zips", {})), c["name"]


# -- building a row's world ------------------------------------------------------------------


def _expand(s: str, where: dict) -> str:
    for k, v in where.items():
        s = s.replace("{" + k + "}", str(v))
    return s


def _recipe(case: dict) -> str:
    text = case.get("recipe", DEFAULTS["recipe"])
    for old, new in case.get("replace", ()):
        assert old in text, f"{case['name']}: {old!r} is not in the recipe"
        text = text.replace(old, new)
    return text


def _build(tmp_path: Path) -> dict:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    (inside / "recipes").mkdir(parents=True)
    (inside / "home").mkdir()
    (inside / "cache").mkdir()
    (inside / "upstream_pins.toml").write_text(DEFAULTS["pins"])
    mini_sglang(inside / "t", {rel: text for rel, text in DEFAULTS["tree"].items()})
    outside.mkdir()
    for rel, text in DEFAULTS["outside"].items():
        (outside / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).write_text(text)
    mini_sglang(outside / "tree", {rel: text for rel, text in DEFAULTS["tree"].items()})
    # {pid}: the process an in-process row runs in (names older releases derived from it)
    return {"inside": inside, "outside": outside, "t": inside / "t", "recipes": inside / "recipes", "pid": os.getpid()}


def _zips(case: dict, where: dict[str, Path]) -> None:
    unrecorded = set(case.get("unrecorded", ()))
    for rel, src in case.get("zips", {}).items():
        src, extra = (src, {}) if isinstance(src, str) else src
        dest, src = where["inside"] / _expand(rel, where), where["inside"] / _expand(src, where)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(dest, "w") as z:
            for p in sorted(src.rglob("*")):
                if p.is_file():
                    z.write(p, p.relative_to(src).as_posix())
            for name, text in extra.items():
                z.writestr(name, text)
        if rel.startswith(("cache/wheels/", "cache/sdists/")) and rel not in unrecorded:
            downloaded(dest, where["inside"] / "cache")


def _damage(case: dict, where: dict[str, Path]) -> None:
    inside = where["inside"]

    def at(rel: str) -> list[Path]:
        rel = _expand(rel, where)
        if "*" in rel:  # entries already there (a cache entry named by its digest)
            found = sorted(inside.glob(rel))
            assert found, f"{case['name']}: nothing matches {rel}"
            return found
        p = inside / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return [p]

    def clear(p: Path) -> None:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()

    for rel in case.get("remove", ()):
        for p in at(rel):
            clear(p)
    for rel in case.get("dirs", ()):
        for p in at(rel):
            if p.is_symlink() or (p.exists() and not p.is_dir()):
                clear(p)
            p.mkdir(exist_ok=True)

    def put(p: Path, data: bytes) -> None:
        """``data`` at ``p``; an entry of patchkit's store sealed as this user's (what a holder
        of the key could write: the entry's own checks are then what stands)."""
        if p.is_file() and not p.is_symlink() and p.read_bytes().startswith(store.MAGIC):
            store.reseal(p, data)
        else:
            p.write_bytes(data)

    for rel, text in case.get("files", {}).items():
        for p in at(rel):
            put(p, _expand(text, where).encode(case.get("encoding", "utf-8")))
    for rel, hexed in case.get("hex", {}).items():
        for p in at(rel):
            put(p, bytes.fromhex(hexed))
    for rel, parts in case.get("repeat", {}).items():
        for p in at(rel):
            put(p, b"".join(chunk.encode() * n for chunk, n in parts))
    for rel, to in case.get("links", {}).items():
        for p in at(rel):
            clear(p)
            p.symlink_to(_expand(to, where))
    for rel in case.get("fifos", ()):
        for p in at(rel):
            clear(p)
            os.mkfifo(p)
    for rel, mode in case.get("chmod", {}).items():
        os.chmod(inside / rel, int(mode, 8))


def snapshot(root: Path, skip_state: bool = False) -> dict:
    """Every entry under ``root``: kind, mode, and bytes (files) or where it points (links).
    Never opens anything but regular files (a FIFO would block)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if skip_state and ".patchkit" in d.relative_to(root).parts:
            continue
        for name in dirnames + filenames:
            p = d / name
            rel = p.relative_to(root).as_posix()
            if skip_state and rel.split("/")[0] == ".patchkit":
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_mode, p.read_bytes() if st.st_mode & 0o444 else None)
            else:
                out[rel] = ("other", st.st_mode)
    return out


# -- running patchkit ------------------------------------------------------------------------


class Hung(BaseException):  # not an Exception: patchkit's handler of bugs must not catch it
    pass


def _in_process(args: list[str], cwd: Path, env: dict, unset: list, timeout: float, capsys, monkeypatch):
    from patchkit.cli import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in unset:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(cwd)
    capsys.readouterr()

    def on_alarm(signum, frame):
        raise Hung(f"patchkit {' '.join(args)} ran past {timeout}s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    out = capsys.readouterr()
    return code, out.out, out.err


def _cap_memory():  # a read that never ends stops at a limit, not at the machine's memory
    limit = 2 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _process(args: list[str], cwd: Path, env: dict, unset: list, timeout: float):
    full = {**os.environ, **env}
    for k in unset:
        full.pop(k, None)
    root = Path(__file__).resolve().parents[2]
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), full.get("PYTHONPATH", "")) if p)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "patchkit", *args],
            cwd=cwd,
            env=full,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            preexec_fn=_cap_memory,
        )
    except subprocess.TimeoutExpired:
        raise Hung(f"patchkit {' '.join(args)} ran past {timeout}s") from None
    return p.returncode, p.stdout, p.stderr


class _Lock:
    """Hold a target's lock from another process for the duration of a run."""

    def __init__(self, root: Path) -> None:
        (root / ".patchkit").mkdir(exist_ok=True)
        code = (
            "import fcntl, os, sys\n"
            f"f = open({str(root / '.patchkit' / 'lock')!r}, 'a+')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_hostile_input(case, tmp_path, capsys, monkeypatch):
    if case.get("chmod") and IS_ROOT:
        pytest.skip("permissions do not stop root")
    where = _build(tmp_path)
    inside, outside = where["inside"], where["outside"]
    (where["recipes"] / "r.toml").write_bytes(_recipe(case).encode(case.get("encoding", "utf-8")))
    env = {
        "PATCHKIT_PINS": str(inside / "upstream_pins.toml"),
        "PATCHKIT_CACHE": str(inside / "cache"),
        "HOME": str(inside / "home"),
        "XDG_STATE_HOME": str(inside / "state"),  # the journals' mirrors: `remove` can take them
        "PATCHKIT_LOCK_TIMEOUT": "0.3",
    }
    env.update({k: _expand(v, where) for k, v in case.get("env", {}).items()})
    unset = case.get("unset", [])
    timeout = case.get("timeout", 20)
    _zips(case, where)
    for pre in case.get("pre", ()):
        code, out, err = _in_process([_expand(a, where) for a in pre], inside, env, unset, timeout, capsys, monkeypatch)
        assert code == 0, (pre, out, err)
    _damage(case, where)
    outside_before = snapshot(outside)
    target_before = snapshot(where["t"], skip_state=True) if where["t"].is_dir() else None
    args = [_expand(a, where) for a in case["args"]]

    lock = _Lock(where["t"]) if case.get("lock") else None
    try:
        try:
            if case.get("isolate"):
                code, out, err = _process(args, inside, env, unset, timeout)
            else:
                code, out, err = _in_process(args, inside, env, unset, timeout, capsys, monkeypatch)
        finally:
            if lock:
                lock.release()
        _check(case, where, code, out, err, outside_before, target_before)
    except (AssertionError, Hung) as e:
        if case.get("xfail"):
            pytest.xfail(f"{case['xfail']} ({str(e).splitlines()[0][:300]})")
        raise
    finally:
        for dirpath, dirnames, _ in os.walk(tmp_path):  # let pytest clean up what a row locked
            for d in dirnames:
                p = Path(dirpath) / d
                if not p.is_symlink():
                    os.chmod(p, 0o755)


def _check(case, where, code, out, err, outside_before, target_before):
    both = out + err
    what = f"exit {code}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert code != 3, what
    assert "Traceback" not in both, what
    assert code == case["exit"], what
    assert _expand(case.get("message", ""), where) in both, what
    assert snapshot(where["outside"]) == outside_before, "something was written outside the target\n" + what
    assert sorted(p.name for p in where["inside"].parent.iterdir()) == ["inside", "outside"], what
    if code == 2 and not case.get("usage"):
        assert len([ln for ln in err.splitlines() if ln.startswith("patchkit: error:")]) == 1, what
        assert len(err.strip().splitlines()) == 1, what
        assert "(hint: " in err, "an error says what to do\n" + what
    if code == 2:
        if target_before is not None:
            assert snapshot(where["t"], skip_state=True) == target_before, "the target changed\n" + what
    if case.get("stdout_json"):
        doc = json.loads(out)  # exactly one JSON document, whatever the exit code
        if code == 2:
            assert doc["error"]["exit"] == 2 and doc["error"]["message"] and doc["error"]["hint"], doc


def test_a_bug_with_json_is_one_json_document_too(tmp_path, capsys, monkeypatch):
    """Exit 3 (a bug, not the input) with --json: the error document carries ``"exit": 3``,
    and stderr still has the one human line."""
    from patchkit.cli import main
    from patchkit.core.project import Project

    def broken(self):
        raise RuntimeError("a bug in catalog")

    monkeypatch.setattr(Project, "catalog", broken)
    monkeypatch.delenv("PATCHKIT_DEBUG", raising=False)
    (tmp_path / "recipes").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["--recipes", "recipes", "list", "--json"])
    out, err = capsys.readouterr()
    assert e.value.code == 3
    doc = json.loads(out)
    assert doc["error"]["exit"] == 3 and doc["error"]["message"] == "RuntimeError: a bug in catalog", doc
    assert "PATCHKIT_DEBUG=1" in doc["error"]["hint"]
    assert err.startswith("patchkit: internal error: RuntimeError: a bug in catalog") and len(err.splitlines()) == 1
