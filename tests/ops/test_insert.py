from tests.ops.golden import check, state

MOE = """
class ServerArgs:
    def _handle_moe_kernel_config(self):
        if self.quantization == "mxfp8":
            self.moe_runner_backend = "cutlass"

        if self.moe_runner_backend == "flashinfer_cutlass":
            assert self.quantization in ["modelopt_fp4", None]

    def lookalike(self):
        if self.moe_runner_backend == "flashinfer_cutlass":
            pass
"""

ARM = """
if (
    self.moe_runner_backend == "auto"
    and is_sm120_supported()
):
    self.moe_runner_backend = "flashinfer_cutlass"
"""


def test_insert_if_arm_before_compound_anchor():
    after = MOE.replace(
        '            self.moe_runner_backend = "cutlass"\n\n        if self.moe_runner_backend == '
        '"flashinfer_cutlass":\n            assert',
        '            self.moe_runner_backend = "cutlass"\n\n        if (\n            self.moe_runner_backend == '
        '"auto"\n            and is_sm120_supported()\n        ):\n            self.moe_runner_backend = '
        '"flashinfer_cutlass"\n\n        if self.moe_runner_backend == "flashinfer_cutlass":\n            assert',
    )
    assert after != MOE
    check(
        "insert",
        MOE,
        after,
        "ServerArgs._handle_moe_kernel_config",
        {"anchor": 'if self.moe_runner_backend == "flashinfer_cutlass":', "position": "before"},
        {"code": ARM},
    )


def test_insert_after_module_level_sibling_with_decorated_def_around():
    before = """
@decorator
def f():
    pass
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()  # trailing
_use_aiter = False
"""
    after = before.replace("# trailing\n", "# trailing\n_is_sm120_supported = _is_cuda and is_sm120_supported()\n")
    check(
        "insert",
        before,
        after,
        "",
        {"anchor": "_is_sm100_supported = _is_cuda and is_sm100_supported()"},
        {"code": "_is_sm120_supported = _is_cuda and is_sm120_supported()"},
    )


def test_insert_at_end_of_function():
    before = "def f():\n    x = 1\n"
    check("insert", before, "def f():\n    x = 1\n    y = 2\n", "f", {"at": "end"}, {"code": "y = 2"})


def test_anchor_missing_and_ambiguous():
    assert (
        state("insert", MOE, "ServerArgs._handle_moe_kernel_config", {"anchor": "if nothing:"}, {"code": "x = 1"}).state
        == "missing"
    )
    twice = "if a:\n    y = 1\nelse:\n    y = 1\n"
    loc = state("insert", twice, "", {"anchor": "y = 1"}, {"code": "x = 1"})
    assert loc.state == "ambiguous" and len(loc.nodes) == 2
    # A scope's statements do not include those of the defs nested in it.
    assert (
        state(
            "insert",
            MOE,
            "ServerArgs",
            {"anchor": 'if self.moe_runner_backend == "flashinfer_cutlass":'},
            {"code": "x = 1"},
        ).state
        == "missing"
    )


def test_anchor_is_token_exact_not_prefix_of_a_name():
    assert state("insert", "x = 10\n", "", {"anchor": "x = 1"}, {"code": "y = 2"}).state == "missing"
