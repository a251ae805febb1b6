from patchkit.base.states import State
from tests.core.ops.golden import check, goal, state

AUTOTUNE = """
class ModelRunner:
    def _should_run_flashinfer_autotune(self):
        if backend_str not in [
            "flashinfer_trtllm",
            "flashinfer_mxfp4",
            # TODO: flashinfer_cutlass will cause some flashinfer compilation errors. To be fixed.
            # "flashinfer_cutlass",
        ]:
            return False

    def lookalike(self):
        if x in [
            "flashinfer_mxfp4",
            # "flashinfer_cutlass",
        ]:
            pass
"""


def test_uncomment_last_element_keeps_todo_comment():
    after = AUTOTUNE.replace(
        '            # "flashinfer_cutlass",\n        ]:\n            return False',
        '            "flashinfer_cutlass",\n        ]:\n            return False',
    )
    assert after != AUTOTUNE
    check(
        "list-element",
        AUTOTUNE,
        after,
        "ModelRunner._should_run_flashinfer_autotune",
        {"contains": ['"flashinfer_trtllm"']},
        {"element": '"flashinfer_cutlass"', "uncomment": True},
    )


def test_uncomment_middle_element_with_second_commented_element():
    before = """
    X = [
        "a",
        # TODO: later
        # "b",
        "c",
        # "d",
    ]
    """
    after = """
    X = [
        "a",
        # TODO: later
        "b",
        "c",
        # "d",
    ]
    """
    check("list-element", before, after, "", {"contains": ['"a"']}, {"element": '"b"', "uncomment": True})


def test_append_single_line_keyword_list():
    before = """
    def gen_trtllm_comm_module():
        nvcc_flags = ctx.get_nvcc_flags_list(
            supported_major_versions=[9, 10]
        )

    def gen_other():
        nvcc_flags = ctx.get_nvcc_flags_list(supported_major_versions=[9, 10])
    """
    after = before.replace("supported_major_versions=[9, 10]\n", "supported_major_versions=[9, 10, 12]\n", 1)
    check(
        "list-element",
        before,
        after,
        "gen_trtllm_comm_module",
        {"keyword": "supported_major_versions"},
        {"element": "12"},
    )


def test_append_multiline_list_puts_element_on_its_own_line():
    before = """
    X = [
        "a",
        "b",
    ]
    """
    after = """
    X = [
        "a",
        "b",
        "c",
    ]
    """
    check("list-element", before, after, "", {"contains": ['"a"']}, {"element": '"c"'})


def test_membership_tuple_and_after():
    before = """
    def f(major):
        return major in (9, 10)
    """
    after = """
    def f(major):
        return major in (9, 10, 12)
    """
    check("list-element", before, after, "f", {"membership": "major"}, {"element": "12"})
    check(
        "list-element",
        before,
        before.replace("(9, 10)", "(9, 12, 10)"),
        "f",
        {"membership": "major"},
        {"element": "12", "after": "9"},
    )


def test_remove_element():
    before = """
    S = {"x", "y", "z"}
    """
    after = """
    S = {"x", "z"}
    """
    check(
        "list-element",
        before,
        after,
        "",
        {"contains": ['"x"', '"z"']},
        {"element": '"y"', "action": "remove", "after": '"x"'},
    )


def test_lookalike_in_other_scope_is_left_alone_and_ambiguity_is_reported():
    loc = state(
        "list-element",
        AUTOTUNE,
        "",
        {"contains": ['"flashinfer_mxfp4"']},
        {"element": '"flashinfer_cutlass"', "uncomment": True},
    )
    assert loc.state == "ambiguous" and len(loc.nodes) == 2


def test_missing_comment_is_missing_not_success():
    loc = state("list-element", "X = ['a', 'b']\n", "", {"contains": ["'a'"]}, {"element": "'c'", "uncomment": True})
    assert loc.state == "missing"
    assert "not found" in loc.reason


def test_no_collection_is_missing():
    assert state("list-element", "X = 1\n", "", {"contains": ["'a'"]}, {"element": "'c'"}).state == "missing"


# -- the post-condition reads the goal: the element, once, by what the code means --------------------

GATE = """
def gen_trtllm_comm_module():
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(
        supported_major_versions=[9, 10],
    )
"""


def test_goal_the_element_stands_once():
    loc, params = {"keyword": "supported_major_versions"}, {"element": "12"}
    assert goal("list-element", GATE, "gen_trtllm_comm_module", loc, params) == ("pending", False)
    once = GATE.replace("[9, 10]", "[9, 10, 12]")
    assert goal("list-element", once, "gen_trtllm_comm_module", loc, params) == ("done", True)
    twice = GATE.replace("[9, 10]", "[9, 10, 12, 12]")  # locate: there; the goal: not once
    assert goal("list-element", twice, "gen_trtllm_comm_module", loc, params) == ("done", False)
    spelled = GATE.replace("[9, 10]", "[9, 10, 12, 0xC]")  # the same element in another spelling
    assert goal("list-element", spelled, "gen_trtllm_comm_module", loc, params) == ("done", False)


def test_goal_of_remove_is_no_element_of_that_meaning():
    loc = {"contains": ['"flashinfer_trtllm"']}
    params = {"element": '"flashinfer_mxfp4"', "action": "remove"}
    src = "def f():\n    return [\"flashinfer_trtllm\", 'flashinfer_mxfp4']\n"
    assert goal("list-element", src, "f", loc, params) == ("done", False)  # locate matches tokens
    assert goal("list-element", src.replace(", 'flashinfer_mxfp4'", ""), "f", loc, params) == ("done", True)


CHOICES = """
MAMBA_BACKEND_CHOICES = ["triton", "flashinfer"]
RADIX_BACKENDS: list = ["triton", "flashinfer"]


class Args:
    def __post_init__(self):
        self.backends = ["triton", "flashinfer"]
"""


def test_target_names_the_collection_assigned_to_a_name_or_attribute():
    """Three lists hold the same elements (`contains` cannot tell them apart); each is named
    by what it is assigned to, annotated or not, a name or an attribute."""
    assert state("list-element", CHOICES, "", {"contains": ['"triton"']}, {"element": '"cutlass"'}).state == "ambiguous"
    check(
        "list-element",
        CHOICES,
        CHOICES.replace('CHOICES = ["triton", "flashinfer"]', 'CHOICES = ["triton", "flashinfer", "cutlass"]'),
        "",
        {"target": "MAMBA_BACKEND_CHOICES"},
        {"element": '"cutlass"'},
    )
    check(
        "list-element",
        CHOICES,
        CHOICES.replace('list = ["triton", "flashinfer"]', 'list = ["triton", "flashinfer", "cutlass"]'),
        "",
        {"target": "RADIX_BACKENDS"},
        {"element": '"cutlass"'},
    )
    check(
        "list-element",
        CHOICES,
        CHOICES.replace('self.backends = ["triton"', 'self.backends = ["cutlass", "triton"').replace(
            '"cutlass", "triton", "flashinfer"]', '"triton", "flashinfer", "cutlass"]'
        ),
        "Args.__post_init__",
        {"target": "self.backends"},
        {"element": '"cutlass"'},
    )
    got = state("list-element", CHOICES, "", {"target": "OTHER"}, {"element": '"cutlass"'})
    assert got.state == "missing" and "no literal collection assigned to `OTHER` here" in got.reason, got
    assert goal("list-element", CHOICES, "", {"target": "RADIX_BACKENDS"}, {"element": '"triton"'}) == (
        State.DONE,
        True,
    )


def test_before_puts_the_element_at_the_front_and_an_empty_collection_takes_one_cleanly():
    """params.before: the element it precedes (the front of the collection, where after
    cannot say it); into an empty one-line collection the element goes without a separator
    (``["a"]``, ``("a",)``, not ``["a", ]``).  Each way back gives the bytes exactly."""
    check(
        "list-element",
        'X = ["a", "b"]\n',
        'X = ["c", "a", "b"]\n',
        "",
        {"target": "X"},
        {"element": '"c"', "before": '"a"'},
    )
    multi = 'X = [\n    "a",\n    "b",\n]\n'
    check(
        "list-element",
        multi,
        multi.replace('    "a"', '    "c",\n    "a"'),
        "",
        {"target": "X"},
        {"element": '"c"', "before": '"a"'},
    )
    check("list-element", "X = []\n", 'X = ["a"]\n', "", {"target": "X"}, {"element": '"a"'})
    check("list-element", "X = ()\n", 'X = ("a",)\n', "", {"target": "X"}, {"element": '"a"'})
    check("list-element", "f(ks=[])\n", "f(ks=[12])\n", "", {"keyword": "ks"}, {"element": "12"})
    got = state("list-element", 'X = ["a"]\n', "", {"target": "X"}, {"element": '"c"', "before": '"z"'})
    assert got.state == "missing" and 'element `"z"` to insert before is not in the collection' in got.reason, got
