"""The smaller command-line items: colour (NO_COLOR, --color), `diff --python` and
`diff --json`, a relative --python path, and completion of recipe and bundle names."""

from __future__ import annotations

import os
import sys

import pytest

from tests.conftest import MINIMAL_RECIPE, ROOT, pk


def test_a_relative_python_path_is_probed_from_anywhere(tmp_path, monkeypatch):
    """The probe runs from /, so a relative --python must be made absolute first (and not
    resolved: a venv's python is a symlink, and which environment it is depends on it)."""
    from patchkit.fleet.doctor import probe_python

    (tmp_path / "venv" / "bin").mkdir(parents=True)
    link = tmp_path / "venv" / "bin" / "python"
    link.symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    facts = probe_python(os.path.join("venv", "bin", "python"))
    assert facts["modules"]  # it ran
    r = pk("--recipes", str(ROOT / "recipes"), "status", "--python", "venv/bin/python", cwd=tmp_path)
    assert "could not run it" not in r.stderr and "no such interpreter" not in r.stderr, r.stderr


# -- a small target -------------------------------------------------------------------------------

RECIPE = MINIMAL_RECIPE.format(id="r")


def _world(tmp_path):
    from tests.conftest import mini_sglang

    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "r.toml").write_text(RECIPE)
    tree = mini_sglang(tmp_path / "tree", {"sglang/srt/x.py": 'def f():\n    return ["a"]\n'})
    return recipes, tree


# -- colour ---------------------------------------------------------------------------------------

ESC = "\x1b["


def test_color_option_before_or_after_the_subcommand(tmp_path, run_cli, monkeypatch):
    recipes, tree = _world(tmp_path)
    base = ("--recipes", str(recipes))
    args = ("status", "r", "-t", f"sglang={tree}")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.chdir(tmp_path)  # no project's recipes/ found upward
    assert ESC not in run_cli(*base, *args)[1]  # not a terminal: plain
    assert ESC in run_cli(*base, "--color=always", *args)[1]
    assert ESC in run_cli(*base, *args, "--color", "always")[1]
    assert ESC not in run_cli(*base, "--color=always", *args, "--color=never")[1]  # the later one wins
    monkeypatch.setenv("NO_COLOR", "1")
    assert ESC in run_cli(*base, "--color=always", *args)[1]  # an explicit --color overrides NO_COLOR
    code, out, err = run_cli(*base, "--color=sometimes", *args)
    assert code == 2 and "'sometimes' is not one of 'auto', 'always', 'never'" in err


def _on_a_terminal(args, env, cwd) -> str:
    """Run patchkit with stdout on a pseudo-terminal; what it printed."""
    import pty
    import subprocess

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "patchkit", *args], stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(master)
    return out.decode("utf-8", "replace")


def test_no_color_on_a_terminal(tmp_path):
    recipes, tree = _world(tmp_path)
    args = ["--recipes", str(recipes), "status", "r", "-t", f"sglang={tree}"]
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    out = _on_a_terminal(args, env, tmp_path)
    assert "pending" in out and ESC in out  # auto, on a terminal: colour
    out = _on_a_terminal(args, {**env, "NO_COLOR": "1"}, tmp_path)
    assert "pending" in out and ESC not in out
    assert ESC not in _on_a_terminal([*args, "--color=never"], env, tmp_path)


# -- diff --json and diff --python ----------------------------------------------------------------


def test_diff_json(tmp_path, run_cli):
    import json

    recipes, tree = _world(tmp_path)
    code, out, err = run_cli("--recipes", str(recipes), "diff", "r", "-t", f"sglang={tree}", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["command"] == "diff" and doc["ok"] and doc["applied"] is False
    (f,) = doc["files"]
    assert f["engine"] == "sglang" and f["path"] == "sglang/srt/x.py" and f["root"] == str(tree)
    assert '-    return ["a"]\n+    return ["a", "b"]\n' in f["diff"]
    assert [r["id"] for r in doc["recipes"]] == ["r"] and doc["recipes"][0]["state"] == "pending"
    assert run_cli("--recipes", str(recipes), "apply", "r", "-t", f"sglang={tree}")[0] == 0
    code, out, err = run_cli("--recipes", str(recipes), "diff", "r", "-t", f"sglang={tree}", "--json", "--applied")
    doc = json.loads(out)
    assert code == 0 and doc["applied"] is True
    assert '-    return ["a"]\n+    return ["a", "b"]\n' in doc["files"][0]["diff"]  # the patch applied, forward
    code, out, err = run_cli("--recipes", str(recipes), "diff", "nope", "-t", f"sglang={tree}", "--json")
    assert code == 2 and json.loads(out)["error"]["exit"] == 2


def test_diff_python_with_a_relative_path(tmp_path):
    """diff --python: the copy that interpreter imports (here: the tree on its PYTHONPATH),
    named by a path relative to the working directory."""
    import subprocess

    recipes, tree = _world(tmp_path)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run(
        [sys.executable, "-m", "patchkit", "--recipes", str(recipes), "diff", "r", "--python", "venv/bin/python"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"# sglang: {tree}\n--- a/sglang/srt/x.py\n+++ b/sglang/srt/x.py"), r.stdout
    assert '+    return ["a", "b"]' in r.stdout


# -- completion -----------------------------------------------------------------------------------


def _complete(run_cli, monkeypatch, words: str) -> list[str]:
    """What bash completion offers for the last word of ``words`` (click's bash protocol)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    monkeypatch.setenv("_PATCHKIT_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(cword))
    code, out, err = run_cli()
    assert code == 0, err
    return [ln.split(",", 1)[1] for ln in out.splitlines() if ln]


def test_completion_offers_recipe_and_bundle_names(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipes = f"patchkit --recipes {ROOT / 'recipes'}"
    assert _complete(run_cli, monkeypatch, f"{recipes} apply a") == ["allreduce-fusion", "autotune-cutlass"]
    assert _complete(run_cli, monkeypatch, f"{recipes} status sm") == ["sm120"]
    assert set(_complete(run_cli, monkeypatch, f"{recipes} show ")) == {
        "allreduce-fusion",
        "autotune-cutlass",
        "max-running-requests",
        "moe-backend-sm120",
        "sm120",
        "vllm-allreduce-fusion",
        "vllm-sm120",
    }
    assert _complete(run_cli, monkeypatch, f"{recipes} fork sync m") == ["max-running-requests", "moe-backend-sm120"]
    assert _complete(run_cli, monkeypatch, f"patchkit --recipes {tmp_path / 'nowhere'} apply a") == []  # never an error


# -- an empty path variable is an unset one -------------------------------------------------------

PATH_VARS = ("PATCHKIT_CACHE", "PATCHKIT_PINS", "PATCHKIT_RECIPES", "PATCHKIT_INDEX_URL", "XDG_CONFIG_HOME")


def test_env_value_treats_empty_and_blank_as_unset(monkeypatch):
    from patchkit.base import paths

    for value, got in (("", None), ("  ", None), ("/x", "/x"), ("rel", "rel")):
        monkeypatch.setenv("PATCHKIT_CACHE", value)
        assert paths.env_value("PATCHKIT_CACHE") == got
    monkeypatch.delenv("PATCHKIT_CACHE")
    assert paths.env_value("PATCHKIT_CACHE") is None
    monkeypatch.setenv("HOME", "/h")
    monkeypatch.setenv("PATCHKIT_CACHE", "")
    assert str(paths.cache_dir()) == "/h/.cache/patchkit"


@pytest.mark.parametrize("value", ["", " "])
def test_empty_path_variables_write_nothing_into_the_working_directory(tmp_path, value):
    """``PATCHKIT_CACHE=`` (or any PATCHKIT_* path variable, or XDG_CONFIG_HOME, set empty)
    means the default: the cache goes to ~/.cache/patchkit, not into the working directory."""
    import subprocess

    recipes, tree = _world(tmp_path)
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    env = {**os.environ, "HOME": str(home), **dict.fromkeys(PATH_VARS, value)}
    env["PYTHONPATH"] = str(ROOT)
    for args in (["list"], ["apply", "r", "-t", f"sglang={tree}"], ["status", "r", "-t", f"sglang={tree}"]):
        r = subprocess.run(
            [sys.executable, "-m", "patchkit", "--recipes", str(recipes), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, (args, r.stderr)
        assert sorted(os.listdir(cwd)) == [], (args, os.listdir(cwd))
    assert (home / ".cache" / "patchkit").is_dir()


# -- inputs that crashed (exit 3): one line, exit 2, nothing made ---------------------------------


def test_new_with_an_id_too_long_for_a_file_name_makes_no_recipes_directory(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cwd").mkdir()
    code, out, err = run_cli("new", "a" * 300, cwd=tmp_path / "cwd")
    assert code == 2 and "is not a valid recipe id" in err and len(err.splitlines()) == 1, err
    code, out, err = run_cli("new", "x", "--out", f"d/{'a' * 300}/x.toml")
    assert code == 2 and "cannot be written (File name too long)" in err and len(err.splitlines()) == 1, err
    assert os.listdir(tmp_path / "cwd") == []  # neither ./recipes/ nor d/ was left behind


def test_check_of_a_directory_this_user_may_not_read_is_one_line(tmp_path, run_cli, monkeypatch):
    """``check /proc/1/root`` (or any directory whose listing is refused) was a
    PermissionError from Path.is_dir (exit 3)."""
    import errno

    locked, listdir = tmp_path / "locked", os.listdir

    def refused(p="."):
        if str(p) == str(locked):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return listdir(p)

    monkeypatch.setattr(os, "listdir", refused)
    locked.mkdir()
    code, out, err = run_cli("check", str(tmp_path / "locked"), cwd=tmp_path)
    assert code == 2 and err == (
        f"patchkit: error: {tmp_path / 'locked'}: cannot be read (Permission denied) "
        "(hint: this user may not read it; fix its permissions)\n"
    ), err


def test_check_proc_1_root(tmp_path, run_cli):
    try:
        os.listdir("/proc/1/root")
        pytest.skip("this user may read /proc/1/root")
    except PermissionError:
        pass
    except OSError:
        pytest.skip("no /proc/1/root here")
    code, out, err = run_cli("check", "/proc/1/root", cwd=tmp_path)
    assert code == 2 and "/proc/1/root: cannot be read (Permission denied)" in err and len(err.splitlines()) == 1


# -- control characters from a recipe never reach the terminal raw --------------------------------


def test_recipe_text_with_escapes_is_shown_escaped_on_a_terminal_and_colour_stays(tmp_path):
    """A summary that erases the line above (``\\x1b[1A\\x1b[2K``) or a rationale that hides
    what follows (``\\x1b[8m``) is shown escaped by list and show, on a terminal with colour
    on too; patchkit's own colour escapes are still written."""
    recipes, tree = _world(tmp_path)
    hostile = RECIPE.replace(
        'summary = "widen a list"', 'summary = "widen\\u001b[1A\\u001b[2K\\rX"\nrationale = "x\\u001b[8mhidden"'
    )
    (recipes / "r.toml").write_text(hostile)
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    base = ["--recipes", str(recipes), "--color=always"]
    out = _on_a_terminal([*base, "list"], env, tmp_path)
    assert "widen\\x1b[1A\\x1b[2K\\rX" in out and "\x1b[1A" not in out and "\rX" not in out, repr(out)
    out = _on_a_terminal([*base, "show", "r"], env, tmp_path)
    assert "x\\x1b[8mhidden" in out and "\x1b[8m" not in out, repr(out)
    out = _on_a_terminal([*base, "status", "r", "-t", f"sglang={tree}"], env, tmp_path)
    assert "\x1b[33mpending" in out or ESC + "3" in out, repr(out)  # the state's colour is patchkit's own


def test_term_escapes_controls_but_not_its_own_styles_nor_raw_data(capsys, monkeypatch):
    from patchkit.base import term

    monkeypatch.setattr(term, "_color", False)  # --color=never (an earlier in-process run may have left always)
    label = term.style("applied", fg="green")
    term.echo(f"{label} \x1b[2K\r\x9b1A\u202e ok\tend")
    assert capsys.readouterr().out == "applied \\x1b[2K\\r\\x9b1A\\u202e ok\tend\n"  # colour off: stripped
    assert term.style("a\x1b[8m", fg="red") == "\x1b[31ma\\x1b[8m\x1b[0m"  # styled text is made printable too
    term.echo("a\x0cb", raw=True)
    assert capsys.readouterr().out == "a\x0cb\n"


def test_a_diff_keeps_the_sources_form_feed(tmp_path, run_cli):
    """`diff` is a patch: its bytes are written as they are (a form feed in Python source stays one)."""
    recipes, tree = _world(tmp_path)
    (tree / "sglang/srt/x.py").write_text('\x0c\ndef f():\n    return ["a"]\n')
    code, out, err = run_cli("--recipes", str(recipes), "diff", "r", "-t", f"sglang={tree}")
    assert code == 0, err
    assert "\x0c" in out and "\\x0c" not in out and '+    return ["a", "b"]' in out, repr(out)


def test_completion_shows_a_summarys_escapes_escaped(tmp_path, run_cli, monkeypatch):
    recipes, _ = _world(tmp_path)
    (recipes / "r.toml").write_text(RECIPE.replace('summary = "widen a list"', 'summary = "widen\\u001b[2K"'))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("_PATCHKIT_COMPLETE", "zsh_complete")
    monkeypatch.setenv("COMP_WORDS", f"patchkit --recipes {recipes} show r")
    monkeypatch.setenv("COMP_CWORD", "4")
    code, out, err = run_cli()
    assert code == 0 and "widen\\x1b[2K" in out and "\x1b" not in out, repr(out)
