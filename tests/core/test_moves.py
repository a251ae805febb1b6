"""Where code went, on a real release: the pre-0.5.14 allreduce gate recipe on SGLang 0.5.22,
where layers/communicator.py is gone and the gate is add_norm.py::flashinfer_ar_fusion_applies.
One site is one candidate (moved, not "ambiguous, 2 places"), companion ops follow their
anchor, and every output says where the code is now."""

from __future__ import annotations

import json

import pytest

from tests.conftest import OLD_FLAG, OLD_LAYER_GATE

pytestmark = pytest.mark.real

GATE_ONLY = (
    """
id = "old-gate"
summary = "the SGLang half of allreduce-fusion as written for 0.5.9-0.5.13"
[engines]
sglang = ">=0.5.9,<0.5.14"
"""
    + OLD_FLAG
    + OLD_LAYER_GATE
)

ADD_NORM = "sglang/srt/layers/layer_boundary/residual/add_norm.py"


def test_a_moved_gate_and_its_companions_on_0_5_22(tree, tmp_path, run_cli):
    s = tree("sglang", "0.5.22")
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "old-gate.toml").write_text(GATE_ONLY)
    args = ("--recipes", str(recipes), "status", "old-gate", "-t", f"sglang={s}")
    code, out, _ = run_cli(*args, "--json")
    ops = json.loads(out)["recipes"][0]["ops"]
    gate_line = next(
        i for i, ln in enumerate((s / ADD_NORM).read_text().splitlines(), 1) if "(_is_sm90_supported or" in ln
    )
    assert ops[2]["state"] == "moved", ops[2]
    assert ops[2]["location"] == f"{ADD_NORM}::flashinfer_ar_fusion_applies:{gate_line}"
    # The import followed its anchor to add_norm.py (pending there); the flag definition did
    # too, and says its own site is not there (add_norm.py reads get_platform()).
    assert ops[0]["state"] == "moved" and ops[0]["location"].startswith(f"{ADD_NORM}::<module>:")
    assert "followed op #3 (or-operand), which moved to " + ADD_NORM in ops[0]["message"]
    assert ops[1]["state"] == "missing" and "this op's site is not there either" in ops[1]["message"]
    code, out, _ = run_cli(*args)
    assert f"{ADD_NORM}::flashinfer_ar_fusion_applies:{gate_line}" in out  # human: where it is now
    assert "communicator.py:" not in out.replace("communicator.py::apply", "")
