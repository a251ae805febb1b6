"""The rough edges a new user met in the first hour (issue 32), each held by a test that
failed on the code before it: the publish extra, `--python`'s help naming every engine, and
list-element's "no a list/tuple/set holding ..." wording."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pytest

from patchkit.cli import cli
from tests.core.ops.golden import state

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _names(reqs: list[str]) -> set[str]:
    from packaging.requirements import Requirement

    return {Requirement(r).name.lower() for r in reqs}


def test_the_publish_extra_installs_twine():
    """`patchkit publish` uploads with twine; `patchkit[publish]` (`pipx install '.[publish]'`)
    brings it, so no one needs `pipx inject` to find out."""
    assert "twine" in _names(_extras()["publish"])


def test_the_docs_extra_installs_mkdocs_and_its_theme():
    assert {"mkdocs", "mkdocs-material"} <= _names(_extras()["docs"])
    assert {"mkdocs", "mkdocs-material"} <= _names(_extras()["test"])  # so CI builds the docs


def test_publish_without_twine_names_the_extra(monkeypatch, tmp_path):
    from patchkit.base.errors import PatchkitError
    from patchkit.commands import publish

    monkeypatch.setattr(publish, "twine_command", lambda: None)
    try:
        publish.publish(None, ("sm120",), ("sglang==0.5.9",), "http://127.0.0.1:9/", None, str(tmp_path))
    except PatchkitError as e:
        said = str(e)
    else:  # pragma: no cover
        raise AssertionError("publish went on without twine")
    assert "patchkit[publish]" in said


def _python_helps() -> list[tuple[str, str]]:
    out = []

    def walk(cmd: click.Command, path: str) -> None:
        if isinstance(cmd, click.Group):  # the root's commands are loaded lazily: asked by name
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), f"{path} {name}")
        for p in cmd.params:
            if isinstance(p, click.Option) and "--python" in p.opts and "ENGINE" not in (p.help or ""):
                out.append((path, p.help or ""))

    walk(cli, "patchkit")
    return out


def test_python_help_names_every_engine():
    """`--python`'s help on the commands that judge a tree (apply, status, revert, diff, ...)
    names each engine patchkit ships a definition of: sglang, flashinfer and vllm."""
    engines = sorted(tomllib.loads((ROOT / "patchkit/base/engines.toml").read_text()))
    assert {"sglang", "flashinfer", "vllm"} <= set(engines)
    helps = [(path, h) for path, h in _python_helps() if "imports" in h]
    assert any(path == "patchkit status" for path, _ in helps)
    for path, h in helps:
        for e in engines:
            assert e in h, f"{path} --python's help does not name {e}: {h!r}"


def test_a_missing_list_reads_without_a_stray_article():
    """The reason a list-element op reads missing: 'no list/tuple/set holding ...', never
    'no a list/tuple/set holding ...'; two candidates are 'candidates for a list/...'."""
    src = 'X = ["a", "b"]\n'
    missing = state("list-element", src, "", {"contains": ['"zzz"']}, {"element": '"c"'})
    assert missing.reason == 'no list/tuple/set holding "zzz" here'
    keyword = state("list-element", src, "", {"keyword": "archs"}, {"element": '"c"'})
    assert keyword.reason == "no literal collection passed as archs= here"
    two = state("list-element", 'X = ["a"]\nY = ["a"]\n', "", {"contains": ['"a"']}, {"element": '"c"'})
    assert "candidates for a list/tuple/set holding" in two.reason
    for r in (missing.reason, keyword.reason, two.reason):
        assert "no a " not in r


def test_python_targets_leave_out_an_engine_the_venv_lacks_unless_a_recipe_of_it_is_named(tmp_path):
    """The first `status --python` on a serving venv (SGLang and FlashInfer, no vLLM) failed,
    exit 2, because the shipped vLLM recipe names an engine the venv lacks.  With no recipe
    named, that recipe is left out (the command says so); named, it is still refused."""
    from patchkit.base.errors import TargetError
    from patchkit.core.project import Project
    from patchkit.fleet.interp import python_targets

    facts = {
        "executable": "/venv/bin/python",
        "modules": {
            "sglang": {"found": True, "root": str(tmp_path / "sp")},
            "flashinfer": {"found": True, "root": str(tmp_path / "sp")},
            "vllm": {"found": False},
        },
    }
    project = Project.locate(recipes=str(ROOT / "recipes"))
    got = python_targets("/venv/bin/python", project, (), facts=facts)
    assert sorted(a.split("=")[0] for a in got) == ["flashinfer", "sglang"], got
    with pytest.raises(TargetError, match="does not import vllm"):
        python_targets("/venv/bin/python", project, ("vllm-allreduce-fusion",), facts=facts)
