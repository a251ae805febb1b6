"""A site is the same site or it is not (patchkit/core/identity.py), on real releases refactored
in the test: SGLang 0.5.9 and FlashInfer 0.6.3, copied, then changed as no release did.

A function moved to a new module with a weak look-alike left behind reads moved to the
real one; upstream's own code moved with no marker reads upstream, and revert never
rewrites it (the invariant of patchkit/core/provenance.py fires when the judge is made to say
otherwise); a decoy list in the site's own scope, a single look-alike elsewhere, and a text
op's fragment on a new unrelated line read missing, each candidate named with its score;
a renamed scope reads moved.  Each tree is linked to the shared release (conftest.tree):
files are replaced, never written through."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from patchkit.core import identity, judge, plancache, verdicts
from tests.conftest import OLD_LAYER_GATE

pytestmark = pytest.mark.real

COMM = "sglang/srt/layers/communicator.py"
RUNNER = "sglang/srt/model_executor/model_runner.py"
GATE = "apply_flashinfer_allreduce_fusion"


def replace_file(path: Path, text: str) -> None:
    """A new file in place of a (maybe hard-linked) one: the shared release stays as it is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    path.write_text(text)


def cut_def(text: str, name: str) -> tuple[str, str]:
    """(text without the top-level def ``name``, the def's own text)."""
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines(keepends=True)
    a, b = node.lineno - 1, node.end_lineno
    return "".join(lines[:a] + lines[b:]), "".join(lines[a:b])


def recipe(tmp_path: Path, rid: str, rng: str, ops: str) -> Path:
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    (d / f"{rid}.toml").write_text(f'id = "{rid}"\nsummary = "t"\n[engines]\n{rng}\n{ops}')
    return d


def status(run_cli, recipes: Path, rid: str, target: str) -> tuple[int, dict]:
    code, out, err = run_cli("--recipes", str(recipes), "status", rid, "-t", target, "--json")
    assert code in (0, 1), err
    return code, json.loads(out)["recipes"][0]["ops"]


def line_of(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def gate_recipe(tmp_path: Path) -> Path:
    return recipe(tmp_path, "old-gate", 'sglang = ">=0.5.9,<0.5.14"', OLD_LAYER_GATE)


LOOK_ALIKE = "\n\ndef fusion_arch_supported():\n    return _is_sm90_supported or _is_sm100_supported\n"


def test_a_function_moved_to_a_new_module_with_a_weak_look_alike_left_behind(tree, tmp_path, run_cli):
    """The named file still matches (a one-line helper); the real function is in a new
    module.  The named file is ranked with the rest of the tree: moved to the real one."""
    s = tree("sglang", "0.5.9", links=True)
    rest, gate = cut_def((s / COMM).read_text(), GATE)
    replace_file(s / COMM, rest + LOOK_ALIKE)
    new = "sglang/srt/layers/ar_fusion.py"
    replace_file(s / new, "from sglang.srt.layers.communicator import _is_sm90_supported\n\n\n" + gate)
    _, ops = status(run_cli, gate_recipe(tmp_path), "old-gate", f"sglang={s}")
    op = ops[0]
    assert op["state"] == "moved", op
    assert op["location"] == f"{new}::{GATE}:{line_of(s / new, '(_is_sm90_supported or')}", op
    best, runner = op["candidates"]
    assert best["location"] == f"{new}::{GATE}" and best["score"] >= 0.9, op
    assert runner["location"] == f"{COMM}::fusion_arch_supported" and runner["score"] < identity.THRESHOLD, op
    assert "runners-up: " + COMM + "::fusion_arch_supported:" in op["message"]


def test_a_single_look_alike_elsewhere_is_missing_not_moved(tree, tmp_path, run_cli):
    """The gate is gone; an unrelated module holds the same expression: missing, and the
    look-alike is named with its score."""
    s = tree("sglang", "0.5.9", links=True)
    rest, _ = cut_def((s / COMM).read_text(), GATE)
    replace_file(s / COMM, rest)
    other = "sglang/srt/debug/arch_report.py"
    replace_file(
        s / other,
        "import logging\n\nlogger = logging.getLogger(__name__)\n\n\ndef describe_arch(flags):\n"
        "    logger.info('arch flags: %s', flags)\n"
        "    return (_is_sm90_supported or _is_sm100_supported) and bool(flags)\n",
    )
    _, ops = status(run_cli, gate_recipe(tmp_path), "old-gate", f"sglang={s}")
    op = ops[0]
    assert op["state"] == "missing", op
    assert [c["location"] for c in op["candidates"]] == [f"{other}::describe_arch"], op
    assert op["candidates"][0]["score"] < identity.THRESHOLD
    assert "nearest candidates, none reaching similarity 0.5 to the site as in sglang 0.5.9" in op["message"]


AUTOTUNE = """
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/model_executor/model_runner.py"
scope = "ModelRunner._should_run_flashinfer_autotune"
[ops.locator]
contains = ['"flashinfer_trtllm"', '"flashinfer_mxfp4"']
[ops.params]
element = '"flashinfer_cutlass"'
uncomment = true
"""
LIST = """        if backend_str not in [
            "flashinfer_trtllm",
            "flashinfer_mxfp4",
            # TODO: flashinfer_cutlass will cause some flashinfer compilation errors. To be fixed.
            # "flashinfer_cutlass",
        ]:
            return False
"""
DECOY = """        _seen = [
            "flashinfer_trtllm",
            "flashinfer_mxfp4",
            # "flashinfer_cutlass",
        ]
        logger.debug("autotune backends known: %s", _seen)
        return True
"""


def test_a_decoy_list_in_the_sites_own_scope_is_missing_not_pending(tree, tmp_path, run_cli):
    """The list the op was written for is gone (a constant now); another list of the same
    names stands in the same method, for logging.  Pending would let apply edit it."""
    s = tree("sglang", "0.5.9", links=True)
    d = recipe(tmp_path, "autotune", 'sglang = ">=0.5.9,<0.5.14"', AUTOTUNE)
    assert status(run_cli, d, "autotune", f"sglang={s}")[1][0]["state"] == "pending"  # pristine: the site
    text = (s / RUNNER).read_text()
    assert text.count(LIST) == 1
    end = "            return not self.is_draft_worker\n\n        return True\n"
    assert text.count(end) == 1
    text = text.replace(LIST, "        if backend_str not in AUTOTUNE_BACKENDS:\n            return False\n")
    text = text.replace(end, "            return not self.is_draft_worker\n\n" + DECOY)
    replace_file(s / RUNNER, text)
    _, ops = status(run_cli, d, "autotune", f"sglang={s}")
    op = ops[0]
    assert op["state"] == "missing", op
    assert "but that is not the site as in sglang 0.5.9" in op["message"], op
    (cand,) = op["candidates"]
    assert cand["location"] == "sglang/srt/model_executor/model_runner.py::ModelRunner._should_run_flashinfer_autotune"
    assert cand["line"] == line_of(s / RUNNER, "_seen = [") and cand["score"] < identity.THRESHOLD, op
    code, out, err = run_cli("--recipes", str(d), "apply", "autotune", "-t", f"sglang={s}")
    assert code != 0 and (s / RUNNER).read_text() == text, (out, err)  # nothing edited


def test_a_renamed_scope_reads_moved_to_it(tree, tmp_path, run_cli):
    s = tree("sglang", "0.5.9", links=True)
    d = recipe(tmp_path, "autotune", 'sglang = ">=0.5.9,<0.5.14"', AUTOTUNE)
    text = (s / RUNNER).read_text().replace("_should_run_flashinfer_autotune", "_autotune_wanted")
    replace_file(s / RUNNER, text)
    _, ops = status(run_cli, d, "autotune", f"sglang={s}")
    op = ops[0]
    assert op["state"] == "moved", op
    assert op["location"] == f"{RUNNER}::ModelRunner._autotune_wanted:{line_of(s / RUNNER, 'if backend_str not in [')}"
    assert op["candidates"][0]["score"] >= 0.8, op
    assert op["candidates"][0]["matched"] == ["scope 50%", "site", "before 3/3", "after 3/3"], op  # the class kept


# An op whose edit SGLang 0.5.9 already has: `schedule_policy: str = "fcfs"` in ServerArgs.
FCFS = """
[[ops]]
kind = "set-default"
engine = "sglang"
file = "sglang/srt/server_args.py"
scope = "ServerArgs"
[ops.locator]
field = "schedule_policy"
[ops.params]
value = '"fcfs"'
expect = '"lpm"'
"""
SERVER_ARGS = "sglang/srt/server_args.py"
FIELDS = """    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_queued_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    enable_dynamic_chunking: bool = False
    max_prefill_tokens: int = 16384
    prefill_max_requests: Optional[int] = None
    schedule_policy: str = "fcfs"
    enable_priority_scheduling: bool = False
"""


def test_upstreams_own_code_moved_with_no_marker_is_upstream_and_revert_never_rewrites_it(
    tree, tmp_path, run_cli, monkeypatch
):
    """Upstream's scheduling fields (its default already the recipe's) moved to a class of
    their own, as SGLang 0.5.20 did; no journal, no marker.  By location the release "does
    not have it" in the new module, so it read applied, and revert rewrote upstream's
    default.  By content the release has it at the identified site: upstream.  And with the
    judge made to read it by location, as before, the revert invariant (provenance.py)
    refuses, naming the line the release holds."""
    s = tree("sglang", "0.5.9", links=True)
    d = recipe(tmp_path, "fcfs", 'sglang = ">=0.5.9,<0.5.14"', FCFS)
    assert status(run_cli, d, "fcfs", f"sglang={s}")[1][0]["state"] == "upstream"  # pristine
    was = line_of(s / SERVER_ARGS, 'schedule_policy: str = "fcfs"')
    text = (s / SERVER_ARGS).read_text()
    assert text.count(FIELDS) == 1
    replace_file(s / SERVER_ARGS, text.replace(FIELDS, ""))
    new = "sglang/srt/arg_groups/schedule.py"
    replace_file(
        s / new,
        "from dataclasses import dataclass\nfrom typing import Optional\n\n\n@dataclass\nclass Schedule:\n" + FIELDS,
    )
    before = (s / new).read_bytes()
    _, ops = status(run_cli, d, "fcfs", f"sglang={s}")
    assert ops[0]["state"] == "upstream", ops[0]
    assert ops[0]["location"] == f"{new}::Schedule:{line_of(s / new, 'schedule_policy')}", ops[0]
    code, out, err = run_cli("--recipes", str(d), "revert", "fcfs", "-t", f"sglang={s}")
    assert (s / new).read_bytes() == before, (code, out, err)

    def by_location(ref, op, ev):  # the judge before provenance by content
        return judge.pristine_state(ref, op, ev.file.logical, ev.scope)

    monkeypatch.setattr(judge, "at_site", by_location)
    monkeypatch.setattr(judge.proof, "recorded", lambda *a: "a forged proof")  # and by elimination, "ours"
    monkeypatch.setattr(verdicts, "load", lambda key, targets: None)  # judged afresh, not from the cache
    # and planned afresh: the plan cache keys on patchkit's code as it is on disk, which a
    # monkeypatch does not change (the first revert's plan, "nothing to revert", would replay)
    monkeypatch.setattr(plancache, "lookup", lambda *a, **k: None)
    assert status(run_cli, d, "fcfs", f"sglang={s}")[1][0]["state"] == "applied"
    code, out, err = run_cli("--recipes", str(d), "revert", "fcfs", "-t", f"sglang={s}")
    assert code == 1 and (s / new).read_bytes() == before, (code, out, err)  # refused, as every plan blocker
    line = line_of(s / new, "schedule_policy")
    assert f"{s / new}:{line}: revert (fcfs > op #1 (set-default)) would change code that sglang 0.5.9's wheel" in err
    assert f"holds ({SERVER_ARGS}:{was}): it is upstream's, not patchkit's edit; nothing was written" in err


LAUNCHER = "csrc/trtllm_fused_moe_kernel_launcher.cu"
CHECK = '  TVM_FFI_ICHECK_EQ(major, 10) << "MoE kernel requires 10.x architecture. Current device has SM "\n'
TEXT_OP = f"""
[[ops]]
kind = "text-replace"
engine = "flashinfer"
file = "{LAUNCHER}"
[ops.params]
find = "ECK_EQ(major, 10)"
replace = "ECK_GE(major, 10)"
count = 1
"""


def test_a_text_ops_fragment_on_a_new_unrelated_line_is_missing_not_pending(tree, tmp_path, run_cli):
    """The line the op was written for is gone; its fragment now stands in a new SM100-only
    check far from it.  Its context lines (3 before, 3 after) are not there: missing."""
    fi = tree("flashinfer", "0.6.3", links=True)
    d = recipe(tmp_path, "moe-arch", 'flashinfer = ">=0.6.3,<0.6.4"', TEXT_OP)
    path = fi / "flashinfer/data" / LAUNCHER
    assert status(run_cli, d, "moe-arch", f"flashinfer={fi}")[1][0]["state"] == "pending"  # pristine: the site
    text = path.read_text()
    assert text.count(CHECK) == 1
    text = text.replace(CHECK, '  TVM_FFI_ICHECK(major >= 10) << "MoE kernel requires SM 10.x or later, not SM "\n')
    text += (
        "\n// FP8 block-scale routing is SM100-only.\nstatic void check_block_scale_arch(int major) {\n"
        '  TVM_FFI_ICHECK_EQ(major, 10) << "block-scale routing is SM100-only";\n}\n'
    )
    replace_file(path, text)
    _, ops = status(run_cli, d, "moe-arch", f"flashinfer={fi}")
    op = ops[0]
    assert op["state"] == "missing", op
    assert "but that is not the site as in flashinfer 0.6.3" in op["message"], op
    assert op["candidates"][0]["line"] == line_of(path, 'ICHECK_EQ(major, 10) << "block-scale')
    assert op["candidates"][0]["score"] < identity.THRESHOLD


# The SGLang half of moe-backend-sm120 as written for 0.5.9, its anchor reworded as a later
# release might have it: the site is gone, and upstream's own arm stands in the scope.
MOE_GONE = """
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/server_args.py"
scope = "ServerArgs._handle_moe_kernel_config"
[ops.locator]
anchor = 'if self.moe_runner_backend == "flashinfer_cutlass_v2":'
position = "before"
[ops.params]
code = '''
if (
    self.moe_runner_backend == "auto"
    and self.quantization == "modelopt_fp4"
    and is_sm120_supported()
):
    self.moe_runner_backend = "flashinfer_cutlass"
'''
"""


def test_upstreams_fix_in_other_words_is_named_as_a_hint(release_dir, tmp_path, run_cli):
    """SGLang 0.5.13 added its own SM120 arm (`self.quantization == "modelopt_fp4" and
    is_sm120_supported()`): a missing op says where to look, and stays missing."""
    s = release_dir("sglang", "0.5.13")
    d = recipe(tmp_path, "moe-gone", 'sglang = ">=0.5.13"', MOE_GONE)
    _, ops = status(run_cli, d, "moe-gone", f"sglang={s}")
    text = (s / SERVER_ARGS).read_text()
    block = 'if (\n            self.moe_runner_backend == "auto"\n            and self.quantization == "modelopt_fp4"\n'
    assert text.count(block) == 1
    arm = text[: text.index(block)].count("\n") + 1
    assert ops[0]["state"] == "missing", ops[0]
    assert f"upstream may have fixed this in other words at {SERVER_ARGS}:{arm} (it mentions" in ops[0]["message"]


DRAFT_ARCH = """
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/configs/model_config.py"
scope = "ModelConfig._config_draft_model"
[ops.locator]
contains = ['"DeepseekV3ForCausalLM"', '"GlmMoeDsaForCausalLM"']
[ops.params]
element = '"DeepseekV32ForCausalLM"'
after = '"DeepseekV3ForCausalLM"'
"""


def test_an_edit_in_other_words_the_release_does_not_hold_is_not_upstream(tree, tmp_path, run_cli):
    """slime's draft-arch element, made by hand as SGLang 0.5.17 later made it (the list also
    losing "GlmMoeDsaForCausalLM", a locator fragment): the statement identified as the site
    holds the edit, but the pristine 0.5.9 does not, so it is nobody's known edit: missing,
    never upstream (edited.upstream_in_place; on 0.5.17 itself the corpus reads upstream)."""
    s = tree("sglang", "0.5.9", links=True)
    cfg = s / "sglang/srt/configs/model_config.py"
    text = cfg.read_text()
    old = '            "DeepseekV3ForCausalLM",\n            "GlmMoeDsaForCausalLM",\n        ]:\n'
    assert text.count(old) == 1
    replace_file(
        cfg,
        text.replace(old, '            "DeepseekV3ForCausalLM",\n            "DeepseekV32ForCausalLM",\n        ]:\n'),
    )
    d = recipe(tmp_path, "draft", 'sglang = ">=0.5.9"', DRAFT_ARCH)
    _, ops = status(run_cli, d, "draft", f"sglang={s}")
    assert ops[0]["state"] == "missing", ops[0]


METADATA_TRY = '''
[[ops]]
kind = "replace-stmt"
engine = "sglang"
file = "sglang/srt/layers/attention/nsa_backend.py"
scope = "NativeSparseAttnBackend.init_forward_metadata"
[ops.locator]
match = """
paged_mqa_schedule_metadata = deep_gemm.get_paged_mqa_logits_metadata(
    seqlens_32, 64, deep_gemm.get_num_sms()
)
"""
[ops.params]
with = """
try:
    paged_mqa_schedule_metadata = deep_gemm.get_paged_mqa_logits_metadata(
        seqlens_32, 64, deep_gemm.get_num_sms()
    )
except RuntimeError:
    paged_mqa_schedule_metadata = None
"""
'''


def test_a_statement_changed_in_place_is_named_never_pending(tree, tmp_path, run_cli):
    """SGLang 0.5.12 changed the call's argument (`seqlens_32` -> `seqlens_32_2d`): the op's
    statement is nowhere, the changed one in its own scope is found across the tree and
    named, but never read pending (apply's pattern is not there) nor moved (it did not move)."""
    s = tree("sglang", "0.5.12", links=True)
    d = recipe(tmp_path, "mtry", 'sglang = ">=0.5.9"', METADATA_TRY)
    _, ops = status(run_cli, d, "mtry", f"sglang={s}")
    op = ops[0]
    assert op["state"] == "missing", op
    where = "sglang/srt/layers/attention/nsa_backend.py::NativeSparseAttnBackend.init_forward_metadata"
    line = line_of(s / "sglang/srt/layers/attention/nsa_backend.py", "paged_mqa_schedule_metadata = deep_gemm.")
    assert (op["candidates"][0]["location"], op["candidates"][0]["line"]) == (where, line), op
