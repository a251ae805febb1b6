"""Where recipes come from (patchkit/core/project.py, patchkit/base/paths.py): ``--recipes`` (repeatable),
PATCHKIT_RECIPES, the project's recipes/ found upward, the user's XDG directory, the shipped
ones, nearest first; a nearer id overrides a farther one and ``list`` says where each comes
from.  Global options after the subcommand.  Commands that need no workspace without
upstream_pins.toml.  The tests run with PATCHKIT_NO_SHIPPED_RECIPES=1 and an empty
XDG_CONFIG_HOME (tests/conftest.py); the ones here set up the layers they need."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from patchkit.base import paths
from patchkit.core import verdicts
from patchkit.core.project import NO_SHIPPED_ENV, PINS_FILE, Project, find_project_recipes
from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SHIPPED = sorted(p.stem for p in (ROOT / "recipes").glob("*.toml"))


def recipe(d: Path, rid: str, summary: str = "one line", bundles: tuple[str, ...] = ("mine",)) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{rid}.toml"
    p.write_text(
        f'id = "{rid}"\nsummary = "{summary}"\nbundles = {json.dumps(list(bundles))}\n'
        '[engines]\nsglang = ">=0.5.9"\n'
        '[[ops]]\nkind = "list-element"\nengine = "sglang"\nfile = "sglang/srt/x.py"\nscope = "f"\n'
        "[ops.locator]\ncontains = ['\"a\"']\n[ops.params]\nelement = '\"b\"'\n"
    )
    return p


@pytest.fixture
def layers(tmp_path, monkeypatch):
    """A project (pins + recipes/), a user directory, two PATCHKIT_RECIPES directories and a
    --recipes one, each with a recipe of its own and one id (`dup`) in all of them; the
    working directory is a subdirectory of the project."""
    project = tmp_path / "proj"
    (project / "sub" / "deeper").mkdir(parents=True)
    (project / PINS_FILE).write_text("")
    user = tmp_path / "xdg" / "patchkit" / "recipes"
    d = {
        "path": tmp_path / "given",
        "env1": tmp_path / "env1",
        "env2": tmp_path / "env2",
        "project": project / "recipes",
        "user": user,
    }
    for name, where in d.items():
        recipe(where, f"only-{name}")
        recipe(where, "dup", summary=f"dup from {name}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATCHKIT_RECIPES", os.pathsep.join([str(d["env1"]), "", str(d["env2"])]))
    monkeypatch.delenv("PATCHKIT_PINS", raising=False)
    monkeypatch.delenv(NO_SHIPPED_ENV)
    monkeypatch.chdir(project / "sub" / "deeper")
    return d


def listed(run_cli, *args) -> dict:
    code, out, err = run_cli(*args, "list", "--json")
    assert code == 0, err
    return {r["id"]: r for r in json.loads(out)["recipes"]}


def test_every_place_is_read_and_the_nearest_wins(layers, run_cli):
    got = listed(run_cli, "--recipes", str(layers["path"]))
    assert set(got) == {"dup", *(f"only-{n}" for n in layers), *SHIPPED}
    assert {rid: r["source"] for rid, r in got.items() if rid.startswith("only-")} == {
        "only-path": "path",
        "only-env1": "path",
        "only-env2": "path",
        "only-project": "project",
        "only-user": "user",
    }
    assert all(got[rid]["source"] == "shipped" for rid in SHIPPED)
    assert got["dup"]["summary"] == "dup from path" and got["dup"]["path"] == str(layers["path"] / "dup.toml")
    assert got["dup"]["overrides"] == [str(layers[n] / "dup.toml") for n in ("env1", "env2", "project", "user")]
    # Without --recipes, the first PATCHKIT_RECIPES entry is nearest; without it, the project.
    assert listed(run_cli)["dup"]["summary"] == "dup from env1"
    os.environ.pop("PATCHKIT_RECIPES")
    assert listed(run_cli)["dup"]["summary"] == "dup from project"


def test_a_nearer_recipe_overrides_a_shipped_one(layers, run_cli):
    mine = recipe(layers["user"], "max-running-requests", summary="my own default", bundles=("sm120",))
    code, out, err = run_cli("list")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("max-running-requests "))
    assert line.endswith("[user, overrides shipped]"), line
    code, out, err = run_cli("show", "max-running-requests")
    assert out.splitlines()[0] == f"max-running-requests  ({mine}, user, overrides shipped)"
    assert "my own default" in out
    # The bundle keeps its order (recipes by id, wherever each comes from).
    bundles = json.loads(run_cli("list", "--json")[1])["bundles"]
    assert bundles["sm120"] == [s for s in SHIPPED if not s.startswith("vllm-")]


def test_the_first_recipes_option_is_nearest_and_options_follow_the_subcommand(layers, run_cli):
    a, b = layers["path"].parent / "a", layers["path"].parent / "b"
    recipe(a, "dup", summary="dup from a")
    recipe(b, "dup", summary="dup from b")
    assert listed(run_cli, "--recipes", str(a), "--recipes", str(b))["dup"]["summary"] == "dup from a"
    code, out, err = run_cli("list", "--json", "--recipes", str(b), "--recipes", str(a))
    assert code == 0, err
    assert {r["id"]: r for r in json.loads(out)["recipes"]}["dup"]["summary"] == "dup from b"
    # before and after the subcommand add up, before first
    code, out, err = run_cli("--recipes", str(a), "show", "dup", "--recipes", str(b))
    assert code == 0 and "dup from a" in out, err


def test_explicit_places_must_exist(layers, run_cli, tmp_path):
    code, out, err = run_cli("list", "--recipes", str(tmp_path / "nope"))
    assert code == 2 and err.startswith(f"patchkit: error: {tmp_path / 'nope'}: recipes directory not found"), err
    os.environ["PATCHKIT_RECIPES"] = str(tmp_path / "gone")
    code, out, err = run_cli("list")
    assert code == 2, err
    assert f"{tmp_path / 'gone'}: recipes directory not found (named by PATCHKIT_RECIPES)" in err
    assert "hint: fix or unset PATCHKIT_RECIPES" in err
    # The implicit ones need not exist.
    os.environ.pop("PATCHKIT_RECIPES")
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path / "no-such-config")
    assert "only-user" not in listed(run_cli)


def test_the_project_is_found_upward_and_beside_named_pins(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert find_project_recipes(deep) is None or not str(find_project_recipes(deep)).startswith(str(tmp_path))
    recipe(tmp_path / "a" / "recipes", "r")
    assert find_project_recipes(deep) == tmp_path / "a" / "recipes"
    (tmp_path / "a" / "b" / PINS_FILE).write_text("")  # pins mark a project even without recipes/
    assert find_project_recipes(deep) == tmp_path / "a" / "b" / "recipes"
    (tmp_path / "a" / "b" / "c" / "recipes").mkdir()  # a recipes/ without a .toml is not a project
    assert find_project_recipes(deep) == tmp_path / "a" / "b" / "recipes"
    # Pins named with PATCHKIT_PINS: the recipes beside them, whatever the working directory.
    other = tmp_path / "other"
    recipe(other / "recipes", "beside-pins")
    (other / PINS_FILE).write_text("")
    monkeypatch.setenv("PATCHKIT_PINS", str(other / PINS_FILE))
    monkeypatch.chdir(deep)
    dirs = Project.locate().recipe_dirs
    assert [(d.path, d.origin) for d in dirs if d.origin == "project"] == [(other / "recipes", "project")]


def test_xdg_config_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert paths.user_recipes_dir() == tmp_path / "patchkit" / "recipes"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # ignored, as the XDG specification says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.user_recipes_dir() == tmp_path / "home" / ".config" / "patchkit" / "recipes"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert paths.user_recipes_dir() == tmp_path / "home" / ".config" / "patchkit" / "recipes"


def test_shipped_recipes_are_found_and_can_be_left_out(monkeypatch, tmp_path):
    shipped = paths.shipped_recipes_dir()
    assert shipped is not None and sorted(p.stem for p in shipped.glob("*.toml")) == SHIPPED
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(NO_SHIPPED_ENV)
    assert [d.origin for d in Project.locate().recipe_dirs] == ["user", "shipped"]
    monkeypatch.setenv(NO_SHIPPED_ENV, "1")
    assert [d.origin for d in Project.locate().recipe_dirs] == ["user"]


def test_the_verdict_key_covers_every_recipe_file_in_play(layers, tmp_path):
    """A cached `status` must not outlive a change to any recipe it could have read: the
    user's, a PATCHKIT_RECIPES one, a new file in the project, a shadowed one."""
    project = Project.locate(recipes=str(layers["path"]))

    def key():
        return verdicts.key(Project.locate(recipes=str(layers["path"])).recipe_dirs, (), {}, code="c")

    seen = {key()}
    for change in (
        lambda: recipe(layers["user"], "only-user", summary="changed"),
        lambda: recipe(layers["env2"], "dup", summary="changed, and shadowed"),
        lambda: recipe(layers["project"], "new-one"),
        lambda: (layers["project"] / "only-project.toml").unlink(),
        lambda: recipe(tmp_path / "xdg" / "patchkit" / "recipes", "another"),
    ):
        change()
        k = key()
        assert k not in seen, change
        seen.add(k)
    assert key() == key()
    assert [d.origin for d in project.recipe_dirs] == ["path", "path", "path", "project", "user", "shipped"]


def test_commands_that_need_no_workspace_run_without_pins(tmp_path, monkeypatch, run_cli):
    """Outside any project: list and show work, and drift says what it lacks before it
    downloads anything (this tier has no network; a download would fail differently)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PATCHKIT_PINS", raising=False)
    monkeypatch.delenv(NO_SHIPPED_ENV)
    assert run_cli("list")[0] == 0
    assert run_cli("show", "sm120")[0] == 0
    code, out, err = run_cli("drift", "--to", "flashinfer==0.6.3")
    assert code == 2
    # (recipes that edit only other engines are left out: allreduce-fusion edits flashinfer too)
    assert err.startswith("patchkit: error: drift: no sglang release to judge allreduce-fusion on"), err
    assert "add --to sglang==VERSION" in err
    # with no pin, --across pairs each SGLang release with the FlashInfer it requires (its
    # Requires-Dist), so it goes on to list SGLang's releases: offline, one clear line
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    code, out, err = run_cli("drift", "--across", "sglang==0.5.9..0.5.12")
    assert code == 2 and "cannot list the releases of sglang" in err, err
    assert err.strip().splitlines()[-1].startswith("patchkit: error: ")
    code, out, err = run_cli("drift", "sm120", "--across", "sglang==0.5.9..0.5.12", "--to", "sglang==0.5.9")
    assert code == 2 and "only a release of the other engine goes with --across" in err, err
    # sync needs the pins, and says so
    code, out, err = run_cli("sync")
    assert code == 2 and "upstream_pins.toml pins, and there is none here or above" in err, err


def test_the_build_ships_every_package_and_the_recipes():
    """pyproject lists the packages (the recipes' mapping needs an explicit list): every
    package directory of patchkit/ must be in it, and recipes/ mapped as package data."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "patchkit").rglob("__init__.py")}
    assert found | {"patchkit.recipes"} == set(conf["packages"])
    assert conf["package-dir"] == {"patchkit.recipes": "recipes"}
    assert conf["package-data"] == {"patchkit.recipes": ["*.toml"], "patchkit.base": ["engines.toml"]}
