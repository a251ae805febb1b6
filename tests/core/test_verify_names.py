"""The names check: apply refuses an edit that leaves a name undefined, and nothing is written.

A deliberately broken recipe widens the allreduce gate with ``_is_sm120_supported`` but
neither imports nor defines it (the recipe's first two ops left out); the check names the
recipe, the op, file:line and the name.  Upstream's own undefined names (noise pyflakes
also reports in the pristine file) are not the edit's and never refuse it."""

from __future__ import annotations

import json

import pytest

from patchkit.core import names, planner
from tests.conftest import OLD_LAYER_GATE, mini_sglang

COMMUNICATOR = """from sglang.srt.utils import (
    is_cuda,
    is_sm90_supported,
    is_sm100_supported,
)

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()


def apply_flashinfer_allreduce_fusion(batch_size: int):
    return (_is_sm90_supported or _is_sm100_supported) and batch_size > 0 and upstream_noise


def unrelated():
    return also_upstream_noise
"""

GATE = OLD_LAYER_GATE  # the layer gate as written before variants: it reads _is_sm120_supported

IMPORT = """
[[ops]]
kind = "ensure-import"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
[ops.locator]
module = "sglang.srt.utils"
[ops.params]
name = "is_sm120_supported"
after = "is_sm100_supported"
"""

FLAG = """
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
[ops.locator]
anchor = "_is_sm100_supported = _is_cuda and is_sm100_supported()"
position = "after"
[ops.params]
code = "_is_sm120_supported = _is_cuda and is_sm120_supported()"
"""

HEAD = """
id = "{id}"
summary = "widen the allreduce gate"
[engines]
sglang = ">=0"
"""


@pytest.fixture
def mini(tmp_path):
    root = mini_sglang(tmp_path / "site", {"sglang/srt/layers/communicator.py": COMMUNICATOR})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "gate-only.toml").write_text(HEAD.format(id="gate-only") + GATE)
    (recipes / "flag-first.toml").write_text(HEAD.format(id="flag-first") + IMPORT + FLAG + GATE)
    (recipes / "no-import.toml").write_text(HEAD.format(id="no-import") + FLAG)
    return root, recipes


def _apply(run_cli, mini, recipe, *extra):
    root, recipes = mini
    return run_cli("--recipes", str(recipes), "apply", recipe, "-t", f"sglang={root}", *extra)


def _files(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("dry_run", [False, True])
def test_apply_refuses_a_gate_whose_flag_is_undefined(mini, run_cli, dry_run):
    root, _ = mini
    before = _files(root)
    code, out, err = _apply(run_cli, mini, "gate-only", *(["--dry-run"] if dry_run else []))
    assert code == 1, (out, err)
    path = root / "sglang/srt/layers/communicator.py"
    line = next(i for i, s in enumerate(COMMUNICATOR.splitlines(), 1) if "return (_is_sm90" in s)
    assert f"gate-only > op #1 (or-operand) > {path}:{line}: refused by the names check" in err, err
    assert "`_is_sm120_supported` is not defined after the edit" in err
    assert "nothing was written" in err
    assert _files(root) == before and not (root / ".patchkit").exists()


def test_an_undefined_call_at_module_level_is_named_too(mini, run_cli):
    """The flag defined but its helper not imported: the insert's module-level use is refused."""
    root, _ = mini
    code, out, err = _apply(run_cli, mini, "no-import")
    assert code == 1, (out, err)
    assert "no-import > op #1 (insert) > " in err and "`is_sm120_supported` is not defined" in err, err


def test_the_whole_recipe_applies_despite_upstream_noise(mini, run_cli):
    """The control: import, flag and gate together apply; the file's own undefined names
    (``upstream_noise`` in the edited scope, ``also_upstream_noise`` elsewhere) are not the edit's."""
    root, _ = mini
    code, out, err = _apply(run_cli, mini, "flag-first")
    assert code == 0, (out, err)
    assert (
        "_is_sm120_supported = _is_cuda and is_sm120_supported()"
        in (root / "sglang/srt/layers/communicator.py").read_text()
    )


def test_without_the_names_check_the_broken_op_is_written(mini, run_cli, monkeypatch):
    """The check is what stops it: disabled, the gate-only edit gets written."""
    root, _ = mini
    monkeypatch.setattr(planner, "names_errors", lambda f, state, evs: [])
    code, out, err = _apply(run_cli, mini, "gate-only")
    assert code == 0, (out, err)
    assert "_is_sm120_supported" in (root / "sglang/srt/layers/communicator.py").read_text()


def test_only_names_the_edit_introduces_count():
    before = "import os\n\ndef f():\n    return os.sep + noise\n\ndef g():\n    return other\n"
    after = "import os\n\ndef f():\n    return os.sep + noise + fresh\n\ndef g():\n    return other + elsewhere\n"
    got = names.introduced(before, after, ["f"])
    assert [(u.name, u.line, u.scope) for u in got] == [("fresh", 4, "f")]
    assert [u.name for u in names.introduced(before, after, [""])] == ["fresh", "elsewhere"]
    # removing an import a scope uses introduces the name there
    assert {u.name for u in names.introduced(before, after.replace("import os\n", ""), ["f"])} == {"os", "fresh"}
    # a definition anywhere in the module (even after the function) defines it
    assert names.introduced(before, after + "\nfresh = 1\n", ["f"]) == []
    # builtins, and code that does not parse (the compile check's business), are not reported
    assert names.introduced(before, before.replace("noise", "len(noise)"), ["f"]) == []
    assert names.introduced(before, "def f(:\n", ["f"]) == []


@pytest.mark.real
@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_sm120_bundle_passes_the_names_check(tree, run_cli, version):
    """The real bundle on the first and the last SGLang release it covers: every edit's names
    resolve (a dry run runs every check of apply)."""
    sg, fi = tree("sglang", version, links=True), tree("flashinfer", "0.6.3", links=True)
    code, out, err = run_cli("apply", "sm120", "--dry-run", "-t", f"sglang={sg}", "-t", f"flashinfer={fi}")
    assert code == 0, (out, err)
    assert "names check" not in err


def test_verify_reports_the_undefined_name_with_exit_1(mini, run_cli):
    root, recipes = mini
    before = _files(root)
    code, out, err = run_cli("--recipes", str(recipes), "verify", "gate-only", "-t", f"sglang={root}", "--json")
    assert code == 1, (out, err)
    doc = json.loads(out)
    (r,) = doc["recipes"]
    assert r["python"] == "FAILED" and "`_is_sm120_supported` is not defined" in r["errors"][0]
    assert doc["ok"] is False and _files(root) == before
    code, out, err = run_cli("--recipes", str(recipes), "verify", "flag-first", "-t", f"sglang={root}")
    assert code == 0, (out, err)
    assert (
        "flag-first (pending): Python: ok: 3 edit(s) planned in memory and checked (post-condition, idempotence, "
        "round-trip, compile, names)" in out
    ), out


def test_verify_on_an_applied_tree_says_what_it_checked(mini, run_cli):
    """Applied, apply has nothing left to plan: verify checks the edits by taking them back in
    memory, says so, and writes nothing (it used to print "ok, 0 edit(s) planned and checked")."""
    root, recipes = mini
    assert _apply(run_cli, mini, "flag-first")[0] == 0
    before = _files(root)
    code, out, err = run_cli("--recipes", str(recipes), "verify", "flag-first", "-t", f"sglang={root}")
    assert code == 0, (out, err)
    assert out.splitlines()[0] == (
        "flag-first (applied): Python: ok: already applied, so apply has no edit to make; its 3 edit(s) were "
        "checked by taking them back in memory (post-condition, idempotence, round-trip, compile)"
    )
    assert _files(root) == before
    # A hand edit elsewhere in the file since: the sites still hold the very bytes patchkit
    # recorded (applied, by proof), but the file changed since patchkit wrote it, so they are
    # not taken back, even in memory, and verify does not claim it checked them.
    path = root / "sglang/srt/layers/communicator.py"
    path.write_text(path.read_text() + "# mine\n")
    code, out, err = run_cli("--recipes", str(recipes), "verify", "flag-first", "-t", f"sglang={root}")
    assert out.splitlines()[0] == "flag-first (applied): Python: nothing checked: applied, so apply plans no edit"
