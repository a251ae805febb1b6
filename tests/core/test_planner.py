"""The planner's safety net, proven to fire: deliberately broken op kinds, one per check.

Each broken kind makes apply refuse with a message naming the check, and nothing is
written.  ``test_each_check_alone_stops_its_broken_op`` then removes one check at a time
and shows that its broken op gets through: no check is redundant with another, and
disabling any one of them makes a test here fail.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from patchkit.base.states import State
from patchkit.core import judge, planner, verdicts
from patchkit.core.ops import KINDS, Located
from patchkit.core.ops.text_replace import TextReplace
from tests.conftest import downloaded, mini_sglang

MODULE = '''"""A tiny stand-in for an engine module."""

BACKENDS = ["a", "b"]
GATE = "sm90"


def f():
    return 1
'''


class LyingPostCondition(TextReplace):
    """Its edit is made, but it says the post-condition does not hold."""

    def is_applied(self, text):
        return False


class NotIdempotent(TextReplace):
    """After its edit, it still locates the site as pending: a second apply would edit again."""

    def locate(self, text):
        loc = super().locate(text)
        return Located(State.PENDING, loc.nodes) if loc.state == State.DONE else loc

    def is_applied(self, text):
        return self.replace in text


class LossyRevert(TextReplace):
    """Its revert loses the file's last byte."""

    def revert(self, text):
        return super().revert(text)[:-1]


BROKEN = {
    "broken-post-condition": (LyingPostCondition, "post-condition"),
    "broken-idempotence": (NotIdempotent, "idempotence"),
    "broken-round-trip": (LossyRevert, "round-trip"),
}

KERNEL = """#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  cudaGridDependencySynchronize();
#endif
"""

TEXT_RECIPE = """
id = "{id}"
summary = "a deliberately broken op"
[engines]
sglang = ">=0"
[[ops]]
kind = "{kind}"
engine = "sglang"
file = "sglang/srt/kernel.cuh"
[ops.params]
find = "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
replace = "(__CUDA_ARCH__ >= 900))"
count = 1
"""

COMPILE_RECIPE = """
id = "module-return"
summary = "an insert whose code parses but does not compile at module level"
[engines]
sglang = ">=0"
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/gate.py"
[ops.locator]
anchor = 'GATE = "sm90"'
[ops.params]
code = "return 5"
"""


@pytest.fixture
def mini(tmp_path, monkeypatch):
    """A package-layout sglang tree with one module, and a recipes dir with every broken kind."""
    root = mini_sglang(tmp_path / "site", {"sglang/srt/gate.py": MODULE, "sglang/srt/kernel.cuh": KERNEL})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for kind, (cls, _) in BROKEN.items():
        monkeypatch.setitem(KINDS, kind, cls)
        (recipes / f"{kind}.toml").write_text(TEXT_RECIPE.format(id=kind, kind=kind))
    (recipes / "module-return.toml").write_text(COMPILE_RECIPE)
    (recipes / "fine.toml").write_text(TEXT_RECIPE.format(id="fine", kind="text-replace"))
    return root, recipes


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _apply(run_cli, mini, recipe):
    root, recipes = mini
    return run_cli("--recipes", str(recipes), "apply", recipe, "-t", f"sglang={root}")


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_op_is_refused_by_its_check_and_nothing_is_written(mini, run_cli, kind):
    root, _ = mini
    before = snapshot(root)
    code, out, err = _apply(run_cli, mini, kind)
    assert code == 1, (out, err)
    check = BROKEN[kind][1]
    assert f"{kind} > op #1 (text-replace) > " in err or f"{kind} > op #1 ({kind}) > " in err, err
    assert f"refused by the {check} check" in err, err
    assert "nothing was written" in err
    assert snapshot(root) == before
    assert not (root / ".patchkit").exists()


def test_an_edit_that_parses_but_does_not_compile_is_refused(mini, run_cli):
    root, _ = mini
    before = snapshot(root)
    code, out, err = _apply(run_cli, mini, "module-return")
    assert code == 1, (out, err)
    assert "refused by the compile check" in err and "'return' outside function" in err, err
    assert f"{root / 'sglang/srt/gate.py'}:" in err  # file:line of the offending statement
    assert snapshot(root) == before


def test_the_unbroken_kind_applies(mini, run_cli):
    """The control: the same recipe with the real text-replace applies, so the refusals above
    come from the broken parts and nothing else."""
    root, _ = mini
    code, out, err = _apply(run_cli, mini, "fine")
    assert code == 0, (out, err)
    assert "(__CUDA_ARCH__ >= 900))" in (root / "sglang/srt/kernel.cuh").read_text()


@pytest.mark.parametrize("check", [*planner.CHECKS, "compile"])
def test_each_check_alone_stops_its_broken_op(mini, run_cli, monkeypatch, check):
    """Disable one check: its broken op now gets written.  So every check is needed."""
    root, _ = mini
    if check == "compile":
        monkeypatch.setattr(planner, "compile_error", lambda f, state: None)
        recipe = "module-return"
    else:
        monkeypatch.setattr(planner, "CHECKS", {k: v for k, v in planner.CHECKS.items() if k != check})
        recipe = next(k for k, (_, c) in BROKEN.items() if c == check)
    # The read-back check judges the plan's bytes as a whole and stops broken ops too (the
    # next test): set aside here, so that each check is seen alone.
    monkeypatch.setattr(planner, "_read_back", lambda session, recipes, made, gone: ([], made.marks))
    before = snapshot(root)
    _apply(run_cli, mini, recipe)
    assert snapshot(root) != before, f"without the {check} check, its broken op should have been written"


@pytest.mark.parametrize("check", ["idempotence", "round-trip"])
def test_the_read_back_check_alone_stops_an_op_that_does_not_read_back(mini, run_cli, monkeypatch, check):
    """Without the per-op check, the plan's bytes judged as if written (the read-back check)
    still refuse the op that would not read `applied`, or whose revert would not give the
    bytes back: nothing is written, and the message names the check."""
    root, _ = mini
    monkeypatch.setattr(planner, "CHECKS", {k: v for k, v in planner.CHECKS.items() if k != check})
    recipe = next(k for k, (_, c) in BROKEN.items() if c == check)
    before = snapshot(root)
    code, out, err = _apply(run_cli, mini, recipe)
    assert code == 1 and "refused by the read-back check" in err, (out, err)
    assert snapshot(root) == before


def test_compile_error_is_judged_on_the_whole_file_when_a_view_cannot_say():
    """A view may leave out the binding a `nonlocal` needs; the whole file decides."""

    class Doc:
        view = object()
        path = Path("x.py")

        def printed(self, state=None):
            view_code = "def f():\n    def g():\n        nonlocal x\n"
            whole = "def f():\n    x = 1\n    def g():\n        nonlocal x\n"
            return view_code, whole.encode()

        def where(self, line=None):
            return f"x.py:{line}"

        def decode(self, data):
            return data.decode("utf-8")

    assert planner.compile_error(Doc(), None) is None
    Doc.printed = lambda self, state=None: ("return 5\n", b"return 5\n")
    assert "refused by the compile check" in planner.compile_error(Doc(), None)


# -- every other check of the planner, fired offline --------------------------------------------
# Each test below fails when its check is taken out of patchkit/core/planner.py: the overlap refusal
# (apply within one plan, apply against a recipe the journal holds, revert), the states apply
# refuses (missing, ambiguous, moved, modified), a recipe's own blocker, a file libcst cannot
# print back, an op that says it cannot, and revert's refusals (applied?, a file changed since
# patchkit wrote it, a line the pristine release holds: the revert invariant of provenance.py).
# Each op's own post-condition fires in tests/core/test_post_conditions.py.

GATES = '''"""Stand-in for sglang/srt/layers/communicator.py."""

BACKENDS = ["flashinfer", "triton"]


def fusion_backend(major):
    if major not in (9, 10):
        raise ValueError("requires SM90 or SM10X")
    return "trtllm"


def moe_backends():
    return ["flashinfer_cutlass", "triton_kernel"]
'''

LIST_RECIPE = """
id = "{id}"
summary = "add a backend"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/gates.py"
scope = "{scope}"
[ops.locator]
contains = [{contains}]
[ops.params]
element = '"{element}"'
"""
BACKENDS = """'"flashinfer"', '"triton"'"""
MOE = """'"flashinfer_cutlass"', '"triton_kernel"'"""


@pytest.fixture
def gates(tmp_path, run_cli, monkeypatch):
    """A tree with one module, a recipes dir, ``recipe(...)`` to write one, and ``cli(*args)``."""
    root = mini_sglang(tmp_path / "site", {"sglang/srt/gates.py": GATES})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))

    def recipe(rid: str, element: str, scope: str = "", contains: str = BACKENDS, extra: str = "") -> None:
        text = LIST_RECIPE.format(id=rid, element=element, scope=scope, contains=contains)
        (recipes / f"{rid}.toml").write_text(text + extra)

    def cli(*args):
        return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")

    return root, root / "sglang/srt/gates.py", recipe, cli


def test_overlap_two_recipes_of_one_apply_editing_one_line(gates):
    root, path, recipe, cli = gates
    recipe("add-sm120", "cutlass")
    recipe("add-other", "torch")
    before = snapshot(root)
    code, out, err = cli("apply", "add-sm120", "add-other")
    assert code == 1, (out, err)
    assert "add-sm120 > op #1 (list-element)" in err and "add-other > op #1 (list-element)" in err, err
    assert "edit the same code" in err and len(err.splitlines()) == 2, err  # one refusal, then the summary
    assert f"{path}:3" in err and "Refusing to apply" in err, err
    assert snapshot(root) == before


def test_overlap_with_a_recipe_the_journal_holds(gates):
    root, path, recipe, cli = gates
    recipe("add-sm120", "cutlass")
    recipe("add-other", "torch")
    assert cli("apply", "add-sm120")[0] == 0
    before = snapshot(root)
    code, out, err = cli("apply", "add-other")
    assert code == 1 and "edit the same code" in err and "Refusing to apply" in err, err
    assert snapshot(root) == before


def test_overlap_refuses_revert_of_one_of_two_recipes_on_one_line(gates, monkeypatch):
    root, path, recipe, cli = gates
    recipe("add-sm120", "cutlass")
    recipe("add-other", "torch")
    with monkeypatch.context() as m:  # as a patchkit without the refusal would have left it
        m.setattr(planner, "_overlaps", lambda *a, **k: [])
        assert cli("apply", "add-sm120")[0] == 0
        assert cli("apply", "add-other")[0] == 0
    assert 'BACKENDS = ["flashinfer", "triton", "cutlass", "torch"]' in path.read_text()
    before = snapshot(root)
    code, out, err = cli("revert", "add-sm120")
    assert code == 1 and "edit the same code" in err and "Refusing to revert" in err, err
    assert snapshot(root) == before


SPAN_RECIPE = """
id = "{id}"
summary = "an edit of fusion_backend"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "{kind}"
engine = "sglang"
file = "sglang/srt/gates.py"
scope = "fusion_backend"
[ops.locator]
match = {match}
[ops.params]
with = {repl}
"""


def test_overlap_two_recipes_of_one_apply_editing_spans_that_start_on_other_lines(gates):
    """One recipe replaces the whole `if` (lines 7-8), the other the message inside it (line 8):
    their sites start on different lines, yet the two edit the same code."""
    root, path, recipe, cli = gates
    recipes = root.parent / "recipes"
    whole_if = SPAN_RECIPE.format(
        id="whole-if",
        kind="replace-stmt",
        match="""'''if major not in (9, 10):\n    raise ValueError("requires SM90 or SM10X")'''""",
        repl="""'''if major not in (9, 10, 12):\n    raise ValueError("requires SM90, SM10X or SM120")'''""",
    )
    message = SPAN_RECIPE.format(
        id="message", kind="replace-expr", match="""'"requires SM90 or SM10X"'""", repl="""'"requires SM9X-SM12X"'"""
    )
    (recipes / "whole-if.toml").write_text(whole_if)
    (recipes / "message.toml").write_text(message)
    for rid in ("whole-if", "message"):  # each alone is fine
        assert cli("apply", rid, "--dry-run")[0] == 0
    before = snapshot(root)
    code, out, err = cli("apply", "whole-if", "message")
    assert code == 1, (out, err)
    refusals = [line for line in err.splitlines() if "refused" in line or "cannot" in line]
    assert len(refusals) == 1, err
    assert "refused by the overlap check: " in refusals[0] and "edits the same code first" in refusals[0], err
    assert "whole-if > op #1 (replace-stmt)" in refusals[0] and "message > op #1 (replace-expr)" in refusals[0], err
    assert f"{path}:" in refusals[0] and "Refusing to apply: keep one of them" in refusals[0], err
    assert snapshot(root) == before


def test_recipes_on_other_lines_do_not_overlap(gates):
    root, path, recipe, cli = gates
    recipe("add-sm120", "cutlass")
    recipe("add-moe", "cutlass", scope="moe_backends", contains=MOE)
    code, out, err = cli("apply", "add-sm120", "add-moe")
    assert code == 0, (out, err)


def _moved(root, path):
    path.write_text(GATES.split("\n\ndef moe_backends")[0] + "\n")
    moved = GATES.split("\n\n\n")[-1]  # the def, as it stood
    (root / "sglang/srt/moe.py").write_text(moved)


@pytest.mark.parametrize(
    "state,damage",
    [
        ("missing", lambda root, path: path.write_text(GATES.replace('"flashinfer_cutlass", ', ""))),
        ("ambiguous", lambda root, path: path.write_text(GATES + '\nMORE = ["flashinfer_cutlass", "triton_kernel"]\n')),
        ("moved", _moved),
    ],
)
def test_apply_refuses_an_op_whose_site_is_not_pending(gates, state, damage):
    root, path, recipe, cli = gates
    recipe("r", "cutlass", scope="" if state == "ambiguous" else "moe_backends", contains=MOE)
    damage(root, path)
    code, out, err = cli("status", "r", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == state
    before = snapshot(root)
    code, out, err = cli("apply", "r")
    assert code == 1, (out, err)
    assert "r > op #1 (list-element) > " in err and f": {state}: " in err, err
    assert snapshot(root) == before


def test_apply_refuses_a_recipe_its_own_blocker_defeats(gates):
    root, path, recipe, cli = gates
    blocker = """
[[blockers]]
engine = "sglang"
file = "sglang/srt/gates.py"
scope = "fusion_backend"
contains = ["if major not in (9, 10):", "requires SM90 or SM10X"]
message = "fusion_backend raises on SM120"
"""
    recipe("r", "cutlass", extra=blocker)
    before = snapshot(root)
    code, out, err = cli("apply", "r")
    assert code == 1, (out, err)
    assert f"r is blocked by blocker #1 at {path}:7: fusion_backend raises on SM120" in err, err
    assert "its edits alone would not reach its goal" in err
    assert snapshot(root) == before
    path.write_text(GATES.replace("(9, 10)", "(9, 10, 12)"))
    assert cli("apply", "r")[0] == 0  # the blocker gone, the same recipe applies


BLOCKER = """
[[blockers]]
engine = "sglang"
file = "sglang/srt/gates.py"
scope = "fusion_backend"
contains = ["if major not in (9, 10):", "requires SM90 or SM10X"]
message = "fusion_backend raises on SM120"
"""

# The gate gone from the code, its words left in prose: a docstring and comments quote it.
QUOTED = GATES.replace(
    '    if major not in (9, 10):\n        raise ValueError("requires SM90 or SM10X")\n',
    '    """Upstream dropped `if major not in (9, 10): raise ValueError("requires SM90 or SM10X")`."""\n'
    "    # if major not in (9, 10):\n"
    '    #     raise ValueError("requires SM90 or SM10X")\n',
)


def test_a_blocker_quoted_only_in_prose_does_not_block(gates):
    """A blocker matches code: its pattern in a docstring or a comment blocks nothing."""
    root, path, recipe, cli = gates
    recipe("r", "cutlass", extra=BLOCKER)
    path.write_text(QUOTED)
    code, out, err = cli("status", "r", "--json")
    doc = json.loads(out)["recipes"][0]
    assert doc["state"] == "pending" and doc["blockers"] == [], doc
    code, out, err = cli("apply", "r")
    assert code == 0, (out, err)
    assert "blocked" not in out + err
    gate = '    if major not in (9, 10):  # code again\n        raise ValueError("requires SM90 or SM10X")\n'
    path.write_text(QUOTED.replace('    return "trtllm"', gate + '    return "trtllm"'))
    code, out, err = cli("status", "r", "--json")
    assert json.loads(out)["recipes"][0]["state"] == "blocked", out


def test_a_file_libcst_cannot_print_back_is_refused(gates, monkeypatch):
    """libcst drops an indented comment line after a last, unindented statement."""
    root, path, recipe, cli = gates
    recipe("r", "cutlass")
    path.write_text(GATES + "\nUNRELATED = 1\n\n    # an indented comment after the last statement\n    # (dropped)\n")
    monkeypatch.setattr("patchkit.core.view.build", lambda *a, **k: None)  # the whole-file path
    before = snapshot(root)
    code, out, err = cli("apply", "r")
    assert code == 1 and "libcst does not print this file back byte for byte" in err, err
    assert snapshot(root) == before


class Refusing(TextReplace):
    """An op that finds its site and then says it cannot make the edit there."""

    def apply(self, text):
        raise ValueError("the site holds a form this op cannot rewrite")


def test_an_op_that_says_it_cannot_is_refused(mini, run_cli, monkeypatch):
    root, recipes = mini
    monkeypatch.setitem(KINDS, "refusing", Refusing)
    (recipes / "refusing.toml").write_text(TEXT_RECIPE.format(id="refusing", kind="refusing"))
    before = snapshot(root)
    code, out, err = _apply(run_cli, mini, "refusing")
    assert code == 1, (out, err)
    assert "cannot apply: the site holds a form this op cannot rewrite" in err, err
    assert snapshot(root) == before


def test_revert_refuses_an_edit_it_cannot_prove_is_patchkits(gates, monkeypatch):
    root, path, recipe, cli = gates
    recipe("r", "cutlass")
    path.write_text(GATES.replace('"triton"]', '"triton", "cutlass"]', 1))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")  # no journal and no pristine release: who made it is unknown
    before = snapshot(root)
    for force in ([], ["--force"]):
        code, out, err = cli("revert", "r", *force)
        assert code == 1 and "applied?: " in err and "revert takes back only what it can prove" in err, err
        assert snapshot(root) == before


def _wheel(tmp_path, gates_py: str) -> None:
    """The pristine release sglang 0.5.9, as a wheel in patchkit's cache, holding ``gates_py``."""
    wheels = tmp_path / "cache" / "wheels" / "sglang" / "0.5.9"
    wheels.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels / "sglang-0.5.9-py3-none-any.whl", "w") as z:
        z.writestr("sglang/__init__.py", "")
        z.writestr("sglang/srt/gates.py", gates_py)
    downloaded(wheels / "sglang-0.5.9-py3-none-any.whl", tmp_path / "cache")


def test_revert_never_rewrites_a_line_the_pristine_release_holds(gates, tmp_path, monkeypatch):
    """The revert invariant (patchkit/core/provenance.py), the backstop behind the judge: with the
    judge made to call upstream's own line patchkit's (as a refactor it did not foresee
    would), the plan to revert it is refused, naming the line the release holds."""
    root, path, recipe, cli = gates
    recipe("r", "cutlass")
    upstream = GATES.replace('"triton"]', '"triton", "cutlass"]', 1)
    path.write_text(upstream)
    _wheel(tmp_path, upstream + "\n# the release's copy, not byte for byte the tree's\n")
    assert json.loads(cli("status", "r", "--json")[1])["recipes"][0]["ops"][0]["state"] == "upstream"
    monkeypatch.setattr(judge, "at_site", lambda ref, op, ev: State.PENDING)  # "the release does not have it"
    monkeypatch.setattr(judge.proof, "recorded", lambda *a: "a forged proof")  # "and patchkit wrote it"
    monkeypatch.setattr(verdicts, "load", lambda key, targets: None)  # judged afresh, not from the cache
    assert json.loads(cli("status", "r", "--json")[1])["recipes"][0]["ops"][0]["state"] == "applied"
    before = snapshot(root)
    for force in ([], ["--force"]):
        code, out, err = cli("revert", "r", *force)
        assert code == 1, (out, err)
        assert f"{path}:3: revert (r > op #1 (list-element)) would change code that sglang 0.5.9's wheel" in err, err
        assert "holds (sglang/srt/gates.py:3): it is upstream's, not patchkit's edit; nothing was written" in err
        assert snapshot(root) == before


def test_revert_refuses_a_file_changed_since_patchkit_wrote_it(gates, tmp_path):
    root, path, recipe, cli = gates
    recipe("r", "cutlass")
    # The pristine release (its wheel in patchkit's cache) says the edit is patchkit's; the
    # file's own change since is what revert refuses.
    _wheel(tmp_path, GATES)
    assert cli("apply", "r")[0] == 0
    path.write_text(path.read_text() + "\nMINE = 1\n")
    before = snapshot(root)
    code, out, err = cli("revert", "r")
    assert code == 1, (out, err)
    assert f"{path}: changed since patchkit wrote it (lines" in err and "pass --force to revert anyway" in err, err
    assert snapshot(root) == before
    code, out, err = cli("revert", "r", "--force")
    assert code == 0, (out, err)
    assert path.read_text() == GATES + "\nMINE = 1\n"
