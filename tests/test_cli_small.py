"""The smaller command-line items: colour (NO_COLOR, --color), `diff --python` and
`diff --json`, a relative --python path, and completion of recipe and bundle names."""

from __future__ import annotations

import os
import sys

from tests.conftest import ROOT, pk


def test_a_relative_python_path_is_probed_from_anywhere(tmp_path, monkeypatch):
    """The probe runs from /, so a relative --python must be made absolute first (and not
    resolved: a venv's python is a symlink, and which environment it is depends on it)."""
    from patchkit.doctor import probe_python

    (tmp_path / "venv" / "bin").mkdir(parents=True)
    link = tmp_path / "venv" / "bin" / "python"
    link.symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    facts = probe_python(os.path.join("venv", "bin", "python"))
    assert facts["modules"]  # it ran
    r = pk("--recipes", str(ROOT / "recipes"), "status", "--python", "venv/bin/python", cwd=tmp_path)
    assert "could not run it" not in r.stderr and "no such interpreter" not in r.stderr, r.stderr
