"""C/C++/CUDA goals on FlashInfer's real csrc: a text hunk written for FlashInfer 0.6.3 that
widens the one ``#if __CUDA_ARCH__`` guard of ``lamport_style_one_shot_all_reduce_norm_kernel``
(``< 1200`` compiled its body out of an SM120 build) in the recipe's own words (``< 1300``).
FlashInfer 0.7.4 admits SM120 there in upstream's words (the bound dropped): `upstream`, with
the place and the evaluation; 0.6.3 with that guard widened by hand: `someone-else`, and apply
writes nothing.  Light: both releases are the suite's."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("goals-real")]
pytest.importorskip("tree_sitter_cpp")

FILE = "include/flashinfer/comm/trtllm_allreduce.cuh"
OLD = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
HEAD = "__global__ void lamport_style_one_shot_all_reduce_norm_kernel(AllReduceParams<T> params) {"

RECIPE = f"""
id = "lamport-sm120"
summary = "compile the Lamport one-shot norm kernel for SM120"
device = "sm120"
[engines]
flashinfer = ">=0.6.3"
[[ops]]
kind = "text-hunk"
engine = "flashinfer"
file = "{FILE}"
[ops.params]
hunk = '''
 {HEAD}
-{OLD}
+#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1300))
   namespace cg = cooperative_groups;
'''
"""


def _status(run_cli, recipes, root) -> tuple:
    def cli(*args):
        return run_cli("--recipes", str(recipes), *args, "-t", f"flashinfer={root}")

    code, out, err = cli("status", "lamport-sm120", "--json")
    assert code in (0, 1), (out, err)
    return cli, json.loads(out)["recipes"][0]["ops"][0]


@pytest.fixture
def recipes(tmp_path):
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "lamport-sm120.toml").write_text(RECIPE)
    return d


def test_pending_on_its_own_release(tree, run_cli, recipes):
    cli, op = _status(run_cli, recipes, tree("flashinfer", "0.6.3", links=True))
    assert op["state"] == "pending", op


def test_flashinfer_074_admits_sm120_in_its_own_words(tree, run_cli, recipes):
    root = tree("flashinfer", "0.7.4", links=True)
    cli, op = _status(run_cli, recipes, root)
    assert op["state"] == "upstream", op
    ev = op["evidence"]
    assert ev["goal"] == "upstream" and ev["goal_at"].startswith(FILE + ":"), ev
    assert "`lamport_style_one_shot_all_reduce_norm_kernel`" in ev["goal_eval"], ev
    assert "`(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))` is true for 12.0" in ev["goal_eval"], ev


def test_a_hand_widened_guard_on_063_is_someone_elses(tree, run_cli, recipes):
    root = tree("flashinfer", "0.6.3", links=True)
    path = root / "flashinfer" / "data" / FILE
    text = path.read_text()
    at = text.index(HEAD + "\n" + OLD)
    text = (
        text[:at]
        + HEAD
        + "\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900"
        + text[at + len(HEAD) + 1 + len(OLD) :]
    )
    path.unlink()  # a hard link to the shared release
    path.write_text(text)
    cli, op = _status(run_cli, recipes, root)
    assert op["state"] == "someone-else", op
    assert "`defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900` is true for 12.0" in op["evidence"]["goal_eval"], op
    code, out, err = cli("apply", "lamport-sm120")
    assert code == 0 and path.read_text() == text, (out, err)
