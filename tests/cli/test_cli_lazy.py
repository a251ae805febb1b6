"""The command line is click alone, with each command's module loaded when the command is
asked for (patchkit/cli/base.py LAZY).  The table must name every command the modules
register, each in its own module, or a command would be unreachable or load the wrong one."""

from __future__ import annotations

import importlib
import subprocess
import sys

from patchkit.cli import base


def test_the_lazy_table_names_every_command_in_its_own_module():
    registered: dict[str, str] = {}
    for module in base.LAZY:
        importlib.import_module(f"patchkit.cli.{module}")
    for name, cmd in base.cli.commands.items():
        registered[name] = cmd.callback.__module__.rsplit(".", 1)[-1]
    table = {name: module for module, names in base.LAZY.items() for name in names}
    assert table == registered


def test_a_command_loads_only_its_own_module():
    code = (
        "import sys\n"
        "from patchkit.cli import main\n"
        "try:\n    main(['status', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('patchkit.cli.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['patchkit.cli.base', 'patchkit.cli.tree']"


def test_help_lists_every_command(run_cli):
    code, out, _ = run_cli("--help")
    assert code == 0
    for names in base.LAZY.values():
        for name in names:
            assert f"  {name} " in out or f"  {name}\n" in out, name
