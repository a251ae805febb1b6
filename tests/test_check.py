"""Writing recipes: a broken recipe file among good ones, `patchkit new`, `patchkit check`
and the examples a recipe carries.  Offline: recipes only, no target."""

from __future__ import annotations

import shutil

import pytest

from patchkit import recipe
from tests.conftest import ROOT

GOOD = """\
id = "{id}"
summary = "widen a list"
bundles = ["b"]

[engines]
sglang = ">=0.5.9"

[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/x.py"
scope = "f"
[ops.locator]
contains = ['"a"']
[ops.params]
element = '"b"'
"""


def _recipes(tmp_path, files: dict[str, str]):
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


# -- a broken recipe file among good ones -------------------------------------------------------

BROKEN = {
    "bad TOML": ('id = "bad"\nbundles = ["b"]\nsummary = "x\n', "bad.toml:3: invalid TOML"),
    "bad value": (GOOD.format(id="bad").replace('scope = "f"', 'scope = "f g"'), "bad.toml:12 > op #1 > scope"),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_a_broken_recipe_warns_commands_that_do_not_name_it(tmp_path, run_cli, case):
    text, where = BROKEN[case]
    d = _recipes(tmp_path, {"good.toml": GOOD.format(id="good").replace('"b"]', '"c"]'), "bad.toml": text})
    code, out, err = run_cli("--recipes", str(d), "list", cwd=tmp_path)
    assert code == 0, err
    assert out.startswith("good ")
    (line,) = err.strip().splitlines()  # one line, naming file:line and why
    assert line.startswith(f"patchkit: warning: {d}/{where}"), line
    assert line.endswith("(skipped; `patchkit check` lists every error)")
    recipe._WARNED.clear()  # once per process: run_cli runs in this one
    code, out, err = run_cli("--recipes", str(d), "show", "good", cwd=tmp_path)
    assert code == 0 and "patchkit: warning:" in err


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
@pytest.mark.parametrize("name", ["bad", "b"])  # the recipe itself, or the bundle it claims
def test_a_command_that_names_a_broken_recipe_fails(tmp_path, run_cli, case, name):
    text, where = BROKEN[case]
    d = _recipes(tmp_path, {"good.toml": GOOD.format(id="good"), "bad.toml": text})
    code, out, err = run_cli("--recipes", str(d), "list", name, cwd=tmp_path)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"patchkit: error: {d}/{where}"), line


def test_the_bundle_of_good_recipes_still_works_beside_a_broken_one(tmp_path, run_cli):
    """A bundle no broken file claims is unaffected; one that a broken file claims is not
    quietly applied without it."""
    d = _recipes(
        tmp_path,
        {"good.toml": GOOD.format(id="good").replace('"b"]', '"c"]'), "bad.toml": BROKEN["bad value"][0]},
    )
    code, out, err = run_cli("--recipes", str(d), "list", "c", cwd=tmp_path)
    assert code == 0 and out.startswith("good "), err


def test_shipped_recipes_have_no_broken_file(run_cli):
    code, out, err = run_cli("--recipes", str(ROOT / "recipes"), "list")
    assert code == 0 and not err, err


def _copy_shipped(tmp_path):
    d = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", d)
    return d
