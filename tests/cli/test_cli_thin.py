"""The click layer stays thin and public: no private click attribute, completion declared
where each parameter is (``shell_complete=``), the late global options on every command."""

from __future__ import annotations

import ast
from pathlib import Path

import click

from patchkit.cli import cli
from tests.conftest import ROOT


def _commands(group: click.Group, path=("patchkit",)):
    """Every command, as click finds it (the root's are loaded lazily: asked by name)."""
    ctx = click.Context(group, info_name=path[-1])
    names = group.list_commands(ctx)
    assert names, path
    for name in names:
        cmd = group.get_command(ctx, name)
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


def test_the_cli_touches_no_private_attribute_of_click():
    private = [
        f"{path.name}:{n.lineno}: .{n.attr}"
        for path in sorted((ROOT / "patchkit" / "cli").glob("*.py"))
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Attribute)
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
        and not (isinstance(n.value, ast.Name) and n.value.id == "self")
    ]
    assert not private, private


def test_every_recipe_argument_and_release_option_completes(monkeypatch):
    """Completion is declared on the parameter; a command added without it fails here."""
    monkeypatch.chdir(ROOT)
    missing = []
    for path, cmd in _commands(cli):
        ctx = click.Context(cmd, info_name=path[-1], parent=click.Context(cli, info_name="patchkit"))
        for p in cmd.get_params(ctx):
            if isinstance(p, click.Argument) and p.name == "names":
                got = [c.value for c in p.shell_complete(ctx, "sm")]
                if "sm120" not in got:
                    missing.append(f"{' '.join(path)} {p.name}: {got}")
            elif isinstance(p, click.Option) and "ENGINE=" in (p.metavar or "") and p.name != "mirror":
                got = [c.value for c in p.shell_complete(ctx, "sgl")]
                if not got or not all(v.startswith("sglang") for v in got):
                    missing.append(f"{' '.join(path)} --{p.name}: {got}")
    assert not missing, missing


def test_every_command_takes_the_global_options_after_its_name():
    for path, cmd in _commands(cli):
        ctx = click.Context(cmd, info_name=path[-1])
        names = [p.name for p in cmd.get_params(ctx)]
        for opt in ("pins", "recipes", "workspace", "color"):
            assert opt in names, (path, opt)
        assert cmd.get_params(ctx)[-1] is cmd.get_help_option(ctx) and names.count("color") == 1, (path, names)


def test_the_late_options_are_built_once_per_command():
    cmd = cli.get_command(click.Context(cli), "status")
    ctx = click.Context(cmd)
    first, again = cmd.get_params(ctx), cmd.get_params(ctx)
    assert [id(p) for p in first] == [id(p) for p in again]
    assert Path(__file__).name  # a module of its own, beside test_cli_small.py
