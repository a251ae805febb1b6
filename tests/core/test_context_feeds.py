"""Data flow in a site's identity (context.feeds): where the names a site's statement binds
flow next, the calls of its def that take one as a whole argument (``callee(keyword=)``,
``callee(#i)``).  A candidate holding the site's statement token for token whose names feed
the same parameters of the same calls counts W_FEEDS more (context.similarity): a method that
became a module function, its buffer set up before the branch, is still the statement feeding
the same kernel (SGLang 0.5.12's ``fused_experts_none_to_flashinfer_trtllm_fp4``, the corpus's
alexgs74-correction-bias, tests/product/test_corpus.py).  A look-alike feeding another call, another
parameter, or a changed statement, gains nothing.
"""

from __future__ import annotations

import ast
import dataclasses

import pytest

from patchkit.core import context, identity

ORIGINAL = """
class FP4MoE:
    def forward_impl(self, hidden_states, topk_output):
        router_logits = topk_output.router_logits
        topk_config = topk_output.topk_config
        if self.routing == DeepSeekV3:
            router_logits = router_logits.to(torch.float32)
        correction_bias = (
            None if topk_config.correction_bias is None else topk_config.correction_bias.to(hidden_states.dtype)
        )
        with symmetric_memory(group()):
            num_tokens = hs.shape[0]
            hidden_size = hs.shape[-1] * 2
            out = torch.empty(num_tokens, hidden_size)
        result = fp4_block_scale_moe(routing_logits=router_logits, routing_bias=correction_bias, output=out)
        return result
"""

# The method became a module function; its output buffer is made before the branch.
MOVED = """
def fused_experts_fp4(dispatch_output, quant_info, runner_config):
    with symmetric_memory(group()):
        out = torch.empty(hs.shape[0], hs.shape[-1])
    if runner_config.routed:
        result = fp4_routed_moe(routing_bias=None, output=out)
    else:
        router_logits = topk_output.router_logits
        topk_config = topk_output.topk_config
        if quant_info.routing == DeepSeekV3:
            router_logits = router_logits.to(torch.float32)
        correction_bias = (
            None if topk_config.correction_bias is None else topk_config.correction_bias.to(hidden_states.dtype)
        )
        result = fp4_block_scale_moe(routing_logits=router_logits, routing_bias=correction_bias, output=out)
    return result
"""

NEEDLE = "else topk_config.correction_bias.to("


def ctx(src: str, file: str, scope: str) -> context.Context:
    tree = ast.parse(src)
    line = next(i for i, ln in enumerate(src.splitlines(), 1) if NEEDLE in ln)
    return context.of_site(tree, line, file, scope, context.imports_of(tree, file))


def home() -> context.Context:
    return ctx(ORIGINAL, "moe/layer.py", "FP4MoE.forward_impl")


def test_the_calls_a_sites_names_feed_are_part_of_its_context():
    assert home().feeds == ("fp4_block_scale_moe(routing_bias=)",)
    # positional arguments by their place; a name rebound stops feeding
    src = "def f():\n    x = g()\n    h(1, x)\n    k(x=x)\n    x = None\n    m(x)\n"
    assert context.feeds(ast.parse(src), 2) == ("h(#1)", "k(x=)")
    # a statement that binds no plain name feeds nothing
    assert context.feeds(ast.parse("def f():\n    self.x = g()\n    h(self.x)\n"), 2) == ()


def test_the_same_statement_feeding_the_same_parameter_counts_one_more():
    cand = ctx(MOVED, "moe/runner.py", "fused_experts_fp4")
    assert cand.feeds == home().feeds
    score, parts = context.similarity(home(), cand)
    without, _ = context.similarity(dataclasses.replace(home(), feeds=()), cand)
    assert "feeds fp4_block_scale_moe(routing_bias=)" in parts
    assert score > without and score >= identity.THRESHOLD > without


@pytest.mark.parametrize(
    "decoy",
    [
        # the FP8 function's copy of the statement feeds another kernel
        MOVED.replace("result = fp4_block_scale_moe(", "result = fp8_block_scale_moe("),
        # the same kernel, another parameter
        MOVED.replace("routing_bias=correction_bias", "routing_bias=None, expert_bias=correction_bias"),
        # the name bound again before the call: the statement's value never reaches it
        MOVED.replace(
            "        result = fp4_block_scale_moe(",
            "        correction_bias = None\n        result = fp4_block_scale_moe(",
        ),
        # the statement itself changed (the patch's own cast): not the site's statement whole
        MOVED.replace(
            ".to(hidden_states.dtype)", ".to(torch.bfloat16 if hidden_states.dtype == torch.float16 else hs)"
        ),
    ],
    ids=["another kernel", "another parameter", "rebound", "another statement"],
)
def test_a_look_alike_gains_nothing_from_data_flow(decoy):
    cand = ctx(decoy, "moe/runner.py", "fused_experts_fp4")
    score, parts = context.similarity(home(), cand)
    without, _ = context.similarity(dataclasses.replace(home(), feeds=()), cand)
    assert score == without and not any(p.startswith("feeds") for p in parts), parts
    assert score < identity.THRESHOLD


def test_a_cached_identity_keeps_what_its_site_feeds(tmp_path, monkeypatch):
    from patchkit.base import store

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    k = store.key("x")
    identity._save(k, (home(),))
    assert identity._load(k) == (home(),) and identity._load(k)[0].feeds == home().feeds


def test_a_carried_identity_keeps_what_its_site_feeds():
    """`capture` and `port` write the calls into the recipe's ``[ops.identity]`` (carried.py)."""
    import sys

    from patchkit.authoring.hunks import toml_str
    from patchkit.core import carried

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    site = dataclasses.replace(home(), imports=frozenset())
    tab = carried.table("sglang 0.5.9", (site,), "sglang")
    assert tab["sites"][0]["feeds"] == ["fp4_block_scale_moe(routing_bias=)"]
    lines = carried.toml_lines("ops", tab, toml_str)
    assert tomllib.loads("[[ops]]\n" + "\n".join(lines))["ops"][0]["identity"] == tab
    back = carried.build(tab["release"], site.file, site.scope, tab["imports"], tab["sites"])
    assert back[1][0].feeds == site.feeds
