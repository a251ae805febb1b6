"""Each op's post-condition fires on its own: an apply broken so that ``locate`` still reads
the edit as done, while the recipe's goal is not reached, is refused by the planner's
post-condition check with one line (recipe > op > file:line), exit 1, and nothing written.

The control applies each recipe with the op as it is; and the broken edits, checked one
check at a time, pass idempotence (which asks ``locate``): only the post-condition reads
the goal.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
import tomllib

from patchkit.core import planner, pyscope
from patchkit.core.ops import KINDS
from tests.conftest import mini_sglang

GATES = '''"""Stand-in for a few sglang/srt modules."""

import dataclasses
from typing import Optional

from sglang.srt.utils import is_sm90_supported

BACKENDS = ["flashinfer", "triton"]


def fusion_enabled(major):
    if major == 10:
        return is_sm90_supported()
    return False


def gate(major):
    return major == 9 or major == 10


@dataclasses.dataclass
class ServerArgs:
    # Memory and scheduling
    max_running_requests: Optional[int] = None
'''

KERNEL = """#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  cudaGridDependencySynchronize();
#endif
"""

HEAD = """
id = "{kind}"
summary = "one {kind} op"
[engines]
sglang = ">=0"
[[ops]]
kind = "{kind}"
engine = "sglang"
"""

RECIPES = {
    "ensure-import": """file = "sglang/srt/gates.py"
[ops.locator]
module = "sglang.srt.utils"
[ops.params]
name = "is_sm120_supported"
""",
    "list-element": """file = "sglang/srt/gates.py"
[ops.locator]
contains = ['"flashinfer"', '"triton"']
[ops.params]
element = '"cutlass"'
""",
    "or-operand": """file = "sglang/srt/gates.py"
scope = "gate"
[ops.locator]
operands = ["major == 9", "major == 10"]
[ops.params]
operand = "major == 12"
""",
    "replace-expr": """file = "sglang/srt/gates.py"
scope = "fusion_enabled"
[ops.locator]
match = "major == 10"
[ops.params]
with = "major in (10, 12)"
""",
    "set-default": """file = "sglang/srt/gates.py"
scope = "ServerArgs"
[ops.locator]
field = "max_running_requests"
[ops.params]
value = "1024"
expect = "None"
""",
    "text-replace": """file = "sglang/srt/kernel.cuh"
[ops.params]
find = "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
replace = "(__CUDA_ARCH__ >= 900))"
count = 1
""",
}


def _append(scope, src: str):
    """``scope`` (a module or a class) with the statement ``src`` added at the end of its body."""
    stmt = cst.parse_statement(src)
    if isinstance(scope, cst.Module):
        return scope.with_changes(body=[*scope.body, stmt])
    return scope.with_changes(body=scope.body.with_changes(body=[*scope.body.body, stmt]))


def _rebinds(real):  # the import is made, then a fallback after it rebinds the name
    return lambda self, module: _append(real(self, module), f"{self.name} = None\n")


def _twice(real):  # the element / operand goes in twice
    return lambda self, scope: real(self, real(self, scope))


def _rebinds_field(real):  # the field is set, then a chained assignment after it sets it back
    return lambda self, scope: _append(real(self, scope), f"fallback = {self.name} = None\n")


def _old_kept(real):  # the match is replaced, and a parenthesised copy of it is left standing
    def broken(self, scope):
        new = real(self, scope)
        block = new.body.with_changes(body=[cst.parse_statement("assert (major == 10)\n"), *new.body.body])
        return new.with_changes(body=block)

    return broken


def _elsewhere(real):  # the find text is cut out, and the replacement put at the end of the file
    return lambda self, text: text.replace(self.find, "") + self.replace


BROKEN = {
    "ensure-import": _rebinds,
    "list-element": _twice,
    "or-operand": _twice,
    "replace-expr": _old_kept,
    "set-default": _rebinds_field,
    "text-replace": _elsewhere,
}


@pytest.fixture
def tree(tmp_path, run_cli):
    root = mini_sglang(tmp_path / "site", {"sglang/srt/gates.py": GATES, "sglang/srt/kernel.cuh": KERNEL})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for kind, body in RECIPES.items():
        (recipes / f"{kind}.toml").write_text(HEAD.format(kind=kind) + body)

    def apply(kind: str):
        return run_cli("--recipes", str(recipes), "apply", kind, "-t", f"sglang={root}")

    return root, apply


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# What the control's apply must leave: the op's file with exactly this one change (old, new).
APPLIED = {
    "ensure-import": (
        "from sglang.srt.utils import is_sm90_supported\n",
        "from sglang.srt.utils import is_sm90_supported, is_sm120_supported\n",
    ),
    "list-element": ('BACKENDS = ["flashinfer", "triton"]', 'BACKENDS = ["flashinfer", "triton", "cutlass"]'),
    "or-operand": ("return major == 9 or major == 10", "return major == 9 or major == 10 or major == 12"),
    "replace-expr": ("    if major == 10:", "    if major in (10, 12):"),
    "set-default": ("max_running_requests: Optional[int] = None", "max_running_requests: Optional[int] = 1024"),
    "text-replace": ("(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))", "(__CUDA_ARCH__ >= 900))"),
}


@pytest.mark.parametrize("kind", sorted(RECIPES))
def test_the_op_as_it_is_applies(tree, kind):
    """The control: the unbroken op writes exactly its one change, into its one file, and
    nothing else in the tree changes (patchkit's own .patchkit/ aside)."""
    root, apply = tree
    before = snapshot(root)
    code, out, err = apply(kind)
    assert code == 0, (out, err)
    after = {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")}
    name = "sglang/srt/kernel.cuh" if kind == "text-replace" else "sglang/srt/gates.py"
    old, new = APPLIED[kind]
    assert before[name].decode().count(old) == 1
    assert after == {**before, name: before[name].decode().replace(old, new).encode()}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_apply_that_locate_reads_as_done_is_refused_by_the_post_condition(tree, monkeypatch, kind):
    root, apply = tree
    cls = KINDS[kind]
    monkeypatch.setattr(cls, "apply", BROKEN[kind](cls.apply))
    before = snapshot(root)
    code, out, err = apply(kind)
    assert code == 1, (out, err)
    refusals = [line for line in err.splitlines() if "refused by" in line]
    assert len(refusals) == 1, err
    path = root / ("sglang/srt/kernel.cuh" if kind == "text-replace" else "sglang/srt/gates.py")
    assert refusals[0].startswith(f"error: {kind} > op #1 ({kind}) > {path}:"), err
    assert refusals[0].endswith(
        "refused by the post-condition check: the op's post-condition does not hold after apply"
    ), err
    assert "nothing was written" in err
    assert snapshot(root) == before


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_locate_reads_each_broken_edit_as_done_so_only_the_post_condition_says_so(kind):
    """The planner's checks on the broken edit, one by one: idempotence (which asks locate)
    passes it; the post-condition refuses it, first.  (Round-trip, behind it, would too: the
    broken edit's extra does not come back out.)"""
    raw = tomllib.loads(HEAD.format(kind=kind) + RECIPES[kind])["ops"][0]
    cls = KINDS[kind]
    op = cls(raw.get("locator", {}), raw.get("params", {}))
    if op.language == "text":
        before = KERNEL
    else:
        before = pyscope.resolve(cst.parse_module(GATES), raw.get("scope", ""))[-1]
    bound = op.relative_to(before)
    after = BROKEN[kind](cls.apply)(bound, before)
    e = planner.Edit(bound, before, after, True, op.language == "python")
    assert planner.check_idempotence(e) is None
    assert planner.check_post_condition(e) == "the op's post-condition does not hold after apply"
    assert next(name for name, check in planner.CHECKS.items() if check(e)) == "post-condition"
