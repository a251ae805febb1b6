"""The planner's safety net, proven to fire: deliberately broken op kinds, one per check.

Each broken kind makes apply refuse with a message naming the check, and nothing is
written.  ``test_each_check_alone_stops_its_broken_op`` then removes one check at a time
and shows that its broken op gets through: no check is redundant with another, and
disabling any one of them makes a test here fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit import planner
from patchkit.ops import KINDS, Located
from patchkit.ops.text_replace import TextReplace
from patchkit.states import State
from tests.conftest import mini_sglang

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
        monkeypatch.setattr(planner, "compile_error", lambda f: None)
        recipe = "module-return"
    else:
        monkeypatch.setattr(planner, "CHECKS", {k: v for k, v in planner.CHECKS.items() if k != check})
        recipe = next(k for k, (_, c) in BROKEN.items() if c == check)
    before = snapshot(root)
    _apply(run_cli, mini, recipe)
    assert snapshot(root) != before, f"without the {check} check, its broken op should have been written"


def test_compile_error_is_judged_on_the_whole_file_when_a_view_cannot_say():
    """A view may leave out the binding a `nonlocal` needs; the whole file decides."""

    class Doc:
        view = object()
        path = Path("x.py")

        def printed(self):
            view_code = "def f():\n    def g():\n        nonlocal x\n"
            whole = "def f():\n    x = 1\n    def g():\n        nonlocal x\n"
            return view_code, whole.encode()

        def where(self, line=None):
            return f"x.py:{line}"

        def decode(self, data):
            return data.decode("utf-8")

    assert planner.compile_error(Doc()) is None
    Doc.printed = lambda self: ("return 5\n", b"return 5\n")
    assert "refused by the compile check" in planner.compile_error(Doc())
