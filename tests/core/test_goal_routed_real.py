"""goal.routed and goal.widened on SGLang 0.5.9's real code, with synthetic refactors: an
add-branch on ``_swizzle_mxfp4``'s device chain (layers/quantization/mxfp4.py:150, ``if
_is_sm100_supported: ... elif _is_sm90_supported: ...``) and a replace-stmt widening
``cutlass_fused_experts_fp8``'s ``assert is_sm100_supported(), "MXFP8 requires SM100"``
(layers/moe/cutlass_moe.py:147, one device assertion among a dozen shape checks).  Each reads
`pending` as released; where the code reaches the goal in other words it reads `someone-else`
(the pristine release does not) and apply and revert leave the bytes; a look-alike (the device
taken into other statements, an assertion that still refuses it) concludes nothing.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.real

MX = "sglang/srt/layers/quantization/mxfp4.py"
CUT = "sglang/srt/layers/moe/cutlass_moe.py"

RECIPES = {
    "mxfp4-swizzle-sm120": f"""
id = "mxfp4-swizzle-sm120"
summary = "the SM100 swizzle constraints on SM120"
device = "sm120"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "add-branch"
engine = "sglang"
file = "{MX}"
scope = "_swizzle_mxfp4"
[ops.locator]
branch = "elif _is_sm90_supported"
position = "after"
[ops.params]
code = '''
elif is_sm120_supported():
    constraints = {{
        "is_persistent": True,
        "epilogue_subtile": 1,
    }}
    opt_flags.update_opt_flags_constraints(constraints)
'''
""",
    "mxfp8-sm120": f"""
id = "mxfp8-sm120"
summary = "the MXFP8 cutlass MoE on SM120"
device = "sm120"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "replace-stmt"
engine = "sglang"
file = "{CUT}"
scope = "cutlass_fused_experts_fp8"
[ops.locator]
match = 'assert is_sm100_supported(), "MXFP8 requires SM100"'
[ops.params]
with = 'assert is_sm100_supported() or is_sm120_supported(), "MXFP8 requires SM100 or SM120"'
""",
}

CHAIN = '    if _is_sm100_supported:\n        constraints = {\n            "is_persistent": True,\n'

ASSERT = '        assert is_sm100_supported(), "MXFP8 requires SM100"\n'

CASES = [
    # (recipe, file, old, new, state)
    ("mxfp4-swizzle-sm120", MX, CHAIN, CHAIN, "pending"),
    (
        "mxfp4-swizzle-sm120",
        MX,
        CHAIN,
        CHAIN.replace("_is_sm100_supported:", "_is_sm100_supported or torch.cuda.get_device_capability()[0] == 12:"),
        "someone-else",
    ),
    (  # the device taken into other statements by an arm before the named one
        "mxfp4-swizzle-sm120",
        MX,
        "    elif _is_sm90_supported:\n",
        "    elif torch.cuda.get_device_capability()[0] == 12:\n"
        '        opt_flags.update_opt_flags_constraints({"split_k": 1})\n'
        "    elif _is_sm90_supported:\n",
        "pending",
    ),
    (  # the named branch rewritten to take the device into the SM90 arm's statements
        "mxfp4-swizzle-sm120",
        MX,
        "    elif _is_sm90_supported:\n",
        "    elif _is_sm90_supported or torch.cuda.get_device_capability()[0] == 12:\n",
        "missing",
    ),
    ("mxfp8-sm120", CUT, ASSERT, ASSERT, "pending"),
    (
        "mxfp8-sm120",
        CUT,
        ASSERT,
        '        assert torch.cuda.get_device_capability()[0] in (10, 12), "MXFP8 requires Blackwell"\n',
        "someone-else",
    ),
    (  # rewritten, still refusing 12.x
        "mxfp8-sm120",
        CUT,
        ASSERT,
        '        assert torch.cuda.get_device_capability()[0] in (10, 11), "MXFP8 requires Blackwell"\n',
        "missing",
    ),
]


@pytest.mark.parametrize("rid, file, old, new, state", CASES)
def test_on_sglang_0_5_9(tree, tmp_path, run_cli, rid, file, old, new, state):
    s = tree("sglang", "0.5.9", links=True)
    path = s / file
    text = path.read_text()
    assert text.count(old) == 1, old
    if new != old:
        path.unlink()  # a hard link to the shared release
        path.write_text(text.replace(old, new))
    rec = tmp_path / "recipes"
    rec.mkdir()
    (rec / f"{rid}.toml").write_text(RECIPES[rid])
    code, out, err = run_cli("--recipes", str(rec), "status", rid, "-t", f"sglang={s}", "--json")
    (op,) = json.loads(out)["recipes"][0]["ops"]
    assert op["state"] == state, op
    if state == "someone-else":
        ev = op["evidence"]
        assert ev["rule"] == 8 and ev["goal_at"].startswith(f"{file}:") and "12.0" in ev["goal_eval"], ev
        before = path.read_text()
        for verb in ("apply", "revert"):
            code, out, err = run_cli("--recipes", str(rec), verb, rid, "-t", f"sglang={s}")
            assert path.read_text() == before, (verb, code, out, err)
    elif state != "pending":
        assert not op["evidence"]["goal"], op
