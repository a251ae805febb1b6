"""patchkit/main.py reads a plain `status` or `run` command line without click.  It must give
the command exactly what click gives it, or decline: each command line of the table is read
both ways, and the command is called with the same values.  patchkit/base/term.py writes click's
bytes without click."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from patchkit import main as M
from patchkit.base import term
from patchkit.cli import cli
from tests.conftest import mini_sglang

# (command line, whether the fast reader takes it).  Everything it declines goes to click.
LINES = [
    (["status"], True),
    (["status", "sm120"], True),
    (["status", "sm120", "allreduce-fusion", "-q"], True),
    (["status", "sm120", "-t", "sglang=/x", "-t", "flashinfer=/y"], True),
    (["status", "--target", "sglang=/x", "sm120", "--target=flashinfer=/y"], True),
    (["status", "sm120", "--json"], True),
    (["status", "--python", "/v/bin/python", "sm120", "--quiet"], True),
    (["status", "--python=/v/bin/python", "--python", "/w/bin/python"], True),
    (["--pins", "p.toml", "status", "sm120"], True),
    (["--pins=p.toml", "--recipes", "a", "--recipes=b", "status", "--recipes", "c", "--pins", "q.toml"], True),
    (["--workspace", "w", "status", "--workspace=v"], True),
    (["--color", "never", "status"], True),
    (["--color=always", "status", "--color", "never"], True),
    (["status", "--color", "always"], True),
    (["status", "--", "-q", "--json"], True),
    (["status", "-t", "sglang==0.5.9"], True),
    (["status", "--python="], True),
    (["run", "--", "python", "-c", "pass"], True),
    (["run", "python", "-m", "sglang.launch_server", "--json"], True),
    (["run", "--apply", "--python", "/v/bin/python", "--", "sglang", "serve"], True),
    (["run", "--python=/v/bin/python", "sglang", "--", "x"], True),
    (["--recipes", "r", "run", "--pins", "p.toml", "--color", "never", "--", "python"], True),
    (["run", "--", "--apply"], True),
    # declined: click parses these (or refuses them) itself
    (["status", "-h"], False),
    (["status", "--help"], False),
    (["--version"], False),
    (["status", "-t"], False),
    (["status", "-t", "-q"], False),
    (["status", "-qt", "sglang=/x"], False),
    (["status", "-tsglang=/x"], False),
    (["status", "--json=1"], False),
    (["status", "--colour", "never"], False),
    (["status", "--color", "purple"], False),
    (["status", "-"], False),
    (["status", ""], False),
    (["status", "--bogus"], False),
    (["--bogus", "status"], False),
    (["--", "status"], False),
    (["apply", "sm120"], False),
    (["statu"], False),
    ([], False),
    (["run"], False),
    (["run", "--"], False),
    (["run", "--bogus", "python"], False),
    (["run", "--apply=1", "python"], False),
    (["run", ""], False),
]


def _through_click(args, monkeypatch):
    """What click passes the command for ``args``: a Call, or the click error it raises."""
    seen = {}

    def locate(pins=None, recipes=(), workspace=None):
        seen.update(pins=pins, recipes=tuple(recipes), workspace=workspace)

    def status_command(inv, names, target, as_json, quiet):
        inv.locate()
        seen.update(command="status", python=inv.python, names=tuple(names), targets=tuple(target))
        seen.update(as_json=as_json, quiet=quiet, color=term._color)
        return 0

    def run_command(inv, argv, python=None, apply=False):
        inv.locate()
        seen.update(command="run", python=python, names=tuple(argv), apply=apply, color=term._color)
        return 0

    monkeypatch.setattr("patchkit.core.project.Project.locate", staticmethod(locate))
    monkeypatch.setattr("patchkit.commands.status.status_command", status_command)
    monkeypatch.setattr("patchkit.commands.run.run_command", run_command)
    try:
        cli.main(args=list(args), prog_name="patchkit", standalone_mode=False)
    except SystemExit:
        pass
    except click.exceptions.ClickException as e:
        return e
    return seen or None


def _effective_color(value):
    term.set_color(value or "auto")
    return term._color


@pytest.mark.parametrize("args,fast", LINES, ids=[" ".join(a) or "(none)" for a, _ in LINES])
def test_the_fast_reader_gives_the_command_what_click_gives_it_or_declines(args, fast, monkeypatch, capsys):
    monkeypatch.delenv("NO_COLOR", raising=False)
    call = M.parse(args)
    assert (call is not None) == fast, call
    if call is None:
        return
    got = _through_click(args, monkeypatch)
    assert isinstance(got, dict), got
    want = {
        "command": call.command,
        "pins": call.pins,
        "recipes": call.recipes,
        "workspace": call.workspace,
        "python": call.python,
        "names": call.names,
        "color": _effective_color(call.color),
    }
    if call.command == "status":
        want.update(targets=call.targets, as_json=call.as_json, quiet=call.quiet)
    else:
        want.update(apply=call.apply)
    assert got == want


def test_no_colour_is_followed_on_both_paths(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert _effective_color(M.parse(["status"]).color) is False
    got = _through_click(["status"], monkeypatch)
    assert got["color"] is False


def test_completion_is_always_clicks(monkeypatch):
    monkeypatch.setenv("_PATCHKIT_COMPLETE", "bash_complete")
    assert M.parse(["status"]) is None


COLOURS = ["green", "cyan", "yellow", "bright_black", "magenta", "red", None]


@pytest.mark.parametrize("fg", COLOURS)
def test_style_writes_clicks_bytes(fg):
    assert term.style("applied  ", fg) == click.style("applied  ", fg=fg)


@pytest.mark.parametrize("setting", [None, "auto", "always", "never"])
def test_echo_strips_or_keeps_colour_as_click_echo_does(setting, capsys, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert term.style("applied", fg="green") == click.style("applied", fg="green")  # the same bytes
    text = "x " + term.style("applied", fg="green") + " é"  # echo writes only the escapes style made
    term.set_color(setting or "auto")
    term.echo(text)
    term.echo(text, err=True)
    ours = capsys.readouterr()
    color = {None: None, "auto": None, "always": True, "never": False}[setting]
    click.echo(text, color=color)
    click.echo(text, err=True, color=color)
    theirs = capsys.readouterr()
    assert (ours.out, ours.err) == (theirs.out, theirs.err)
    term.set_color("auto")


def test_a_plain_status_imports_no_click(tmp_path):
    """The console entry on a plain `status`: click is never imported (nor is it needed to
    report an error of the user's)."""
    root = mini_sglang(tmp_path / "sg", {"sglang/srt/x.py": "X = 1\n"})
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['patchkit', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('patchkit', run_name='__main__')\n"
        "finally:\n"
        "    print('CLICK' if 'click' in sys.modules else 'NO-CLICK', file=sys.stderr)\n"
    )
    for extra in ([], ["no-such-recipe"]):
        r = subprocess.run(
            [sys.executable, "-c", probe, "status", "-t", f"sglang={root}", *extra],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert r.stderr.strip().splitlines()[-1] == "NO-CLICK", r.stderr
        assert "Traceback" not in r.stderr
    assert r.returncode == 2 and "patchkit: error:" in r.stderr and "no-such-recipe" in r.stderr
    # help is click's
    r = subprocess.run([sys.executable, "-c", probe, "status", "-h"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr.strip().splitlines()[-1] == "CLICK" and "Usage:" in r.stdout
