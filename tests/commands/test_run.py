"""`patchkit run [--apply] -- CMD`: the serving guard.  It judges the profile against the
engines CMD's interpreter imports, refuses (exit 1) or patches (--apply), then execs CMD.

The real tests start the real `patchkit` in a process of its own (exec replaces it) on a
real venv holding sglang 0.5.9, and CMD is a real program of that venv: a console script
that prints its pid, its interpreter and its arguments and exits 7.  The same pid and exit
code prove the exec; a marker file that is never written proves a refusal started nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.base.errors import PatchkitError
from patchkit.commands.run import interpreter_of
from tests.conftest import ROOT

MOE = ("moe-backend-sm120",)  # SGLang only: a venv without FlashInfer serves it

SERVER = """\
import os, sys
open(os.environ["RUN_MARKER"], "w").write("started")
import importlib.util  # where it imports sglang from (importing it needs sglang's dependencies)
pkg = importlib.util.find_spec("sglang").submodule_search_locations[0]
print("served", os.getpid(), sys.executable, pkg, *sys.argv[1:])
sys.exit(7)
"""


def _script(path: Path, text: str, mode: int = 0o755) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_interpreter_is_python_itself_or_the_scripts_first_line(tmp_path, monkeypatch):
    py = sys.executable
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(py, bindir / "python3.11")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert interpreter_of(("python3.11", "-m", "sglang.launch_server")) == str(bindir / "python3.11")
    assert interpreter_of((py, "-c", "pass")) == py
    # A console script as pip writes it: its venv's python in the shebang...
    assert interpreter_of((str(_script(bindir / "sglang", f"#!{py}\nimport sys\n")),)) == py
    # ...by name on PATH, through env, or as the sh trampoline pip writes for a long path.
    _script(bindir / "serve-env", "#!/usr/bin/env python3.11\n")
    assert interpreter_of(("serve-env", "--port", "1")) == str(bindir / "python3.11")
    _script(bindir / "serve-sh", f"#!/bin/sh\n'''exec' {py} \"$0\" \"$@\"\n' '''\nimport sys\n")
    assert interpreter_of(("serve-sh",)) == py
    # What names no Python is one clear error, saying how to name it.
    _script(bindir / "start.sh", "#!/bin/bash\nexec python -m x\n")
    with pytest.raises(PatchkitError, match=r"cannot tell which Python start.sh .* runs.*"):
        interpreter_of(("start.sh",))
    with pytest.raises(PatchkitError, match="no-such-server: no such command"):
        interpreter_of(("no-such-server",))


def _pk(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkit", "--recipes", str(ROOT / "recipes"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_without_a_profile_run_is_one_line_saying_how_to_record_one(tmp_path):
    p = _pk("run", "--", sys.executable, "-c", "print('served')", cwd=tmp_path)
    assert p.returncode == 2 and "served" not in p.stdout, p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == [
        f"patchkit: error: run: no profile says what {sys.executable}'s engines should carry (hint: record it "
        f"once: `patchkit apply sm120 --python {sys.executable} --save`)"
    ]
    # --python names the interpreter when CMD does not (a shell script).
    p = _pk("run", "--python", sys.executable, "--", "/bin/sh", "-c", "echo served", cwd=tmp_path)
    assert p.returncode == 2 and "served" not in p.stdout
    assert f"run: no profile says what {sys.executable}'s engines should carry" in p.stderr


@pytest.mark.real
def test_run_execs_the_server_on_a_patched_venv_refuses_a_pending_one_and_apply_patches_it(run_cli, tmp_path):
    from tests.fleet.test_upgrade import patched_venv

    py, site = patched_venv(tmp_path, run_cli, MOE)
    assert run_cli("apply", *MOE, "--python", str(py), "--save")[0] == 0  # the venv's profile
    serve = _script(py.parent / "serve", f"#!{py}\n{SERVER}")
    marker = tmp_path / "started"
    env = {"RUN_MARKER": str(marker)}

    # Applied: the guard says so and execs the console script (same pid; its exit code).
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "--recipes", str(ROOT / "recipes"), "run", "--", str(serve), "--port", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 7, out + err
    assert out.split() == ["served", str(proc.pid), str(py), str(site / "sglang"), "--port", "1"]
    assert f"patchkit run: {py}'s engines are as the profile {site.resolve()}/.patchkit/profile.toml wants" in err

    # Reverted behind the profile's back (as `pip install -U` would leave it): refused, not started.
    assert run_cli("revert", *MOE, "--python", str(py))[0] == 0
    marker.unlink()
    p = _pk("run", "--", str(py), "-m", "serve_mod", cwd=tmp_path, env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert not marker.exists() and p.stdout == ""
    assert "moe-backend-sm120        pending" in p.stderr, p.stderr
    assert f"patchkit run: refusing to start {py}: {py}'s engines are not as the profile" in p.stderr
    assert "`patchkit run --apply` patches first" in p.stderr

    # --apply patches first, then starts it (python -m MODULE, the launch_server form).
    (tmp_path / "serve_mod.py").write_text(SERVER)
    p = _pk("run", "--apply", "--", str(py), "-m", "serve_mod", "--tp", "8", cwd=tmp_path, env=env)
    assert p.returncode == 7, p.stdout + p.stderr
    assert p.stdout.split()[0] == "served" and p.stdout.split()[-2:] == ["--tp", "8"]
    assert "applying it" in p.stderr and marker.read_text() == "started"
    assert run_cli("status", *MOE, "--python", str(py))[0] == 0

    # `status --python` of that unchanged venv answers as the guard does: the interpreter's
    # probe remembered, its engines found without the catalog, the verdicts cached (no libcst).
    # A cache of its own: which releases the cache holds is an input of the verdicts' key, and
    # other tests download releases into the shared one.
    from patchkit.base.paths import wheels_dir

    own = tmp_path / "cache"
    shutil.copytree(wheels_dir("sglang") / "0.5.9", own / "wheels" / "sglang" / "0.5.9")
    env = {**os.environ, "PATCHKIT_CACHE": str(own)}
    args = [sys.executable, "-m", "patchkit", "--recipes", str(ROOT / "recipes"), "status", *MOE, "--python", str(py)]
    assert subprocess.run(args, cwd=tmp_path, capture_output=True, env=env).returncode == 0  # verdicts cached
    p = subprocess.run([args[0], "-X", "importtime", *args[1:]], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "moe-backend-sm120        applied" in p.stdout, p.stdout + p.stderr
    assert " libcst" not in p.stderr and "_posixsubprocess" not in p.stderr

    # An `sglang/` in the cwd (an unpatched checkout) is what `python -m` there imports: that
    # copy is judged (no profile says what it should carry), and nothing starts.
    (tmp_path / "here" / "sglang").mkdir(parents=True)
    (tmp_path / "here" / "sglang" / "__init__.py").write_text('__version__ = "0.5.9"\n')
    marker.unlink()
    p = _pk("run", "--", str(py), "-m", "serve_mod", cwd=tmp_path / "here", env={**env, "RUN_MARKER": str(marker)})
    assert p.returncode == 2 and not marker.exists(), p.stdout + p.stderr
    assert f"run: no profile says what {py}'s engines should carry" in p.stderr

    # A guarded server holds the tree: revert refuses naming its pid, status says so, until it
    # exits; `revert --force` reverts anyway.
    sleeper = _script(py.parent / "sleeper", f"#!{py}\nimport time, sys\nprint('up', flush=True)\ntime.sleep(60)\n")
    cmd = [sys.executable, "-m", "patchkit", "--recipes", str(ROOT / "recipes"), "run", "--", str(sleeper)]
    server = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout.readline() == "up\n"
        code, out, err = run_cli("revert", *MOE, "--python", str(py))
        assert code == 2, out + err
        assert err.strip().splitlines()[-1] == (
            f"patchkit: error: {site.resolve()}: a guarded server is running on this tree (pid {server.pid}, "
            "started by `patchkit run`); revert refuses to change the code it was started on (hint: stop it first; "
            "`revert --force` reverts anyway)"
        )
        code, out, err = run_cli("status", *MOE, "--python", str(py))
        assert code == 0 and f"held by a guarded server (pid {server.pid}, started by `patchkit run`)" in out, out
        assert "applied" in run_cli("status", *MOE, "--python", str(py))[1]
        code, out, err = run_cli("revert", *MOE, "--python", str(py), "--force")
        assert code == 0, out + err
    finally:
        server.kill()
        server.wait()
    assert run_cli("apply", *MOE, "--python", str(py))[0] == 0  # the server gone, the tree is free
    assert "held by" not in run_cli("status", *MOE, "--python", str(py))[1]


def test_the_remembered_probe_is_asked_again_when_what_decides_it_changes(tmp_path, monkeypatch):
    """The guard does not run the interpreter at each start: the probe is cached, and an
    install into a directory of its sys.path (or a changed PYTHONPATH) asks it again."""
    from patchkit.commands import run as R

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    extra = tmp_path / "extra"
    extra.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(extra))
    asked = []
    real = R.__dict__.get("probe_python")
    from patchkit.fleet import interp

    def counting(python, *a, **kw):
        asked.append(python)
        return interp_probe(python, *a, **kw)

    interp_probe = interp.probe_python
    monkeypatch.setattr(interp, "probe_python", counting)
    assert real is None  # run.py does not hold it: interp.py calls it, so the patch above is what it calls
    first = R.probe(sys.executable)
    assert not first["modules"]["sglang"]["found"] and len(asked) == 1
    assert R.probe(sys.executable) == first and len(asked) == 1  # remembered
    (extra / "sglang").mkdir()  # "pip install": a new entry in a sys.path directory
    (extra / "sglang" / "__init__.py").write_text("")
    now = R.probe(sys.executable)
    assert len(asked) == 2 and now["modules"]["sglang"]["root"] == str(extra)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # another PYTHONPATH: asked again
    assert not R.probe(sys.executable)["modules"]["sglang"]["found"] and len(asked) == 3


def test_the_engines_a_profile_names_are_read_without_the_catalog(tmp_path):
    """The guard's fast path: which engines the named recipes edit, from the recipe files'
    ops (their variants' too) and bundles alone; None (the catalog decides, and says why) when a name is
    not found or a file does not read."""
    from types import SimpleNamespace

    from patchkit.fleet import interp

    d = tmp_path / "recipes"
    d.mkdir()

    def recipe(rid, bundle, engines, ops, variant_ops=()):
        text = f'id = "{rid}"\nbundles = ["{bundle}"]\n[engines]\n' + "".join(f'{e} = ">=0.1"\n' for e in engines)
        text += "".join(f'[[ops]]\nengine = "{e}"\n' for e in ops)
        if variant_ops:
            text += "[[variants]]\n" + "".join(f'[[variants.ops]]\nengine = "{e}"\n' for e in variant_ops)
        return text

    (d / "a.toml").write_text(recipe("a", "b1", ["sglang"], ["sglang"]))
    (d / "f.toml").write_text(recipe("f", "b1", ["flashinfer", "sglang"], ["sglang"], ["flashinfer"]))
    (d / "v.toml").write_text(recipe("v", "b2", ["vllm"], ["vllm"]))
    # An engine in [engines] that no op edits is not needed (the catalog's op.engine says so)
    (d / "w.toml").write_text(recipe("w", "b3", ["flashinfer", "sglang"], ["sglang"]))
    project = SimpleNamespace(recipe_dirs=[SimpleNamespace(path=d)])
    assert interp._engines_named(project, ("b1",)) == {"sglang", "flashinfer"}
    assert interp._engines_named(project, ("a", "v")) == {"sglang", "vllm"}
    assert interp._engines_named(project, ("nope",)) is None
    assert interp._engines_named(project, ("b3",)) == {"sglang"}
    # Kept in the cache under the files' bytes (patchkit/base/memo.py): an edit is seen at once.
    assert interp._engines_named(project, ("a",)) == {"sglang"}
    (d / "a.toml").write_text(recipe("a", "b1", ["vllm"], ["vllm"]))
    assert interp._engines_named(project, ("a",)) == {"vllm"}
    (d / "broken.toml").write_text("id = \n")
    assert interp._engines_named(project, ("a",)) is None


def test_the_probe_runs_as_the_command_will_its_options_cwd_and_first_path_entry(tmp_path, monkeypatch):
    """A pristine `sglang/` in the cwd is what `python -m` imports: the probe (which ran from
    / before) finds it there; `-I` leaves the cwd out, and a script puts its own directory first."""
    from patchkit.commands.run import launch_of
    from patchkit.fleet import interp

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    here = tmp_path / "cwd"
    (here / "sglang").mkdir(parents=True)
    (here / "sglang" / "__init__.py").write_text("")
    py = sys.executable
    launch = launch_of([py, "-m", "sglang.launch_server"], str(here))
    assert launch.flags == () and launch.path0 == ""
    assert interp.remembered_probe(py, launch)["modules"]["sglang"]["root"] == str(here)
    isolated = launch_of([py, "-I", "-m", "sglang.launch_server"], str(here))
    assert isolated.flags == ("-I",)
    assert interp.remembered_probe(py, isolated)["modules"]["sglang"].get("root") != str(here)
    # -E drops PYTHONPATH, as it does for the command.
    extra = tmp_path / "extra"
    (extra / "sglang").mkdir(parents=True)
    (extra / "sglang" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(extra))
    assert interp.remembered_probe(py, launch_of([py, "-c", "x"], "/"))["modules"]["sglang"]["root"] == str(extra)
    no_env = launch_of([py, "-Esc", "x"], "/")
    assert no_env.flags == ("-E", "-s")
    assert interp.remembered_probe(py, no_env)["modules"]["sglang"].get("root") != str(extra)
    # A script: its directory comes first (not the cwd), -X/-W values kept with their option.
    (tmp_path / "bin").mkdir()
    script = _script(tmp_path / "bin" / "serve", f"#!{py}\n")
    (tmp_path / "bin" / "sglang").mkdir()
    (tmp_path / "bin" / "sglang" / "__init__.py").write_text("")
    monkeypatch.delenv("PYTHONPATH")
    s = launch_of([py, "-X", "dev", "-Wignore", str(script), "--port", "1"], str(here))
    assert s.flags == ("-X", "dev", "-W", "ignore") and s.path0 == str(tmp_path / "bin")
    assert interp.remembered_probe(py, s)["modules"]["sglang"]["root"] == str(tmp_path / "bin")


def test_a_python_that_is_not_the_commands_interpreter_is_refused(tmp_path):
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    p = _pk(
        "run", "--python", str(other / "bin" / "python"), "--", sys.executable, "-c", "print('served')", cwd=tmp_path
    )
    assert p.returncode == 2 and "served" not in p.stdout, p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == [
        f"patchkit: error: run: --python {other / 'bin' / 'python'} is not the interpreter {sys.executable} runs "
        f"({sys.executable}); patchkit judges only what it starts (hint: leave --python out (patchkit finds CMD's "
        "own), or give that one)"
    ]


def test_a_pth_rewritten_in_place_makes_the_kept_probe_stale(tmp_path, monkeypatch):
    """Rewriting a .pth keeps its directory's mtime (and, set back, its own): its bytes are
    read.  A new entry in a sys.path directory is seen by the listing too."""
    from patchkit.fleet import interp

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(site))  # every sys.path directory's .pth files are read for their bytes
    launch = interp.Launch(sys.executable, (), None, str(tmp_path))
    facts = interp.remembered_probe(sys.executable, launch)
    assert str(site) in facts["sys_path"]
    f = site / "zz_patchkit_test.pth"
    f.write_text("/nonexistent-a\n")
    try:
        st = os.stat(site)
        one = interp._stamp(facts, sys.executable, launch)
        f.write_text("/nonexistent-b\n")
        os.utime(site, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(site).st_mtime_ns == st.st_mtime_ns
        assert interp._stamp(facts, sys.executable, launch) != one
    finally:
        f.unlink()


def test_a_probe_entry_that_fingerprints_itself_is_not_the_venvs(tmp_path, monkeypatch):
    """A planted entry whose stamp is computed from its own facts (sglang at a copy that is
    not the one the interpreter imports) is not taken: its MAC is not this user's key's
    (patchkit/base/store.py; only the interpreter knows its sys.path)."""
    import json

    from patchkit.fleet import interp

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    launch = interp.Launch(sys.executable, (), "", str(tmp_path))
    real = interp.remembered_probe(sys.executable, launch)
    assert not real["modules"]["sglang"]["found"]
    entries = list((tmp_path / "cache" / "probes").iterdir())
    assert len(entries) == 1
    from patchkit.base import store

    # the planter has a key of its own, not this user's: the store's MAC is what refuses it
    entry = json.loads(store.payload(entries[0]))
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    entry["facts"]["modules"]["sglang"] = {"found": True, "root": str(fake), "package_dir": str(fake / "sglang")}
    entry["stamp"] = interp._stamp(entry["facts"], sys.executable, launch)
    store.forge(entries[0], json.dumps(entry).encode(), b"\x07" * 32)
    assert store.look("probes", entries[0].name).miss == "forged"
    assert not interp.remembered_probe(sys.executable, launch)["modules"]["sglang"]["found"]


def test_the_guards_lock_is_held_across_exec_and_writes_refuse_it(tmp_path):
    """A shared lock of ROOT/.patchkit/guard, its fd inherited by the program exec'd: held by
    that program's pid; an exclusive take of it (apply's, revert's) refuses naming the pid,
    --force goes on, and a .patchkit that is a link is never followed."""
    import time

    from patchkit.base import guardlock
    from patchkit.base.errors import TargetError

    root = tmp_path / "site"
    root.mkdir()
    code = (
        "import os, sys; from pathlib import Path; from patchkit.base import guardlock; "
        f"fds, missed = guardlock.hold([Path({str(root)!r})], 5); assert fds and not missed; "
        "guardlock.inherit(fds); os.execv('/bin/sleep', ['sleep', '30'])"
    )
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        for _ in range(200):
            if guardlock.holders(root):
                break
            time.sleep(0.05)
        assert guardlock.holders(root) == [child.pid]
        assert (root / ".patchkit" / "guard").is_file() and (root / ".patchkit" / ".gitignore").is_file()
        with pytest.raises(TargetError, match=rf"a guarded server is running on this tree \(pid {child.pid}, started"):
            with guardlock.exclude([root], "apply"):
                pass
        with guardlock.exclude([root], "revert", force=True):
            pass
    finally:
        child.kill()
        child.wait()
    assert guardlock.holders(root) == []
    with guardlock.exclude([root], "apply"):
        pass
    # A .patchkit that is a link: the guard file is neither made nor used there.
    other, elsewhere = tmp_path / "other", tmp_path / "elsewhere"
    other.mkdir()
    elsewhere.mkdir()
    (other / ".patchkit").symlink_to(elsewhere)
    fds, missed = guardlock.hold([other], 1)
    assert fds == [] and missed == [other] and list(elsewhere.iterdir()) == []
