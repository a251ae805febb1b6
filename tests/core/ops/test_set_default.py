from tests.core.ops.golden import check, goal, state

ARGS = """
@dataclasses.dataclass
class ServerArgs:
    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None  # keep this comment

    class Nested:
        max_running_requests: Optional[int] = None

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument(
            "--max-running-requests",
            type=int,
            default=ServerArgs.max_running_requests,
        )
        parser.add_argument("--other", default=None)
"""


def test_dataclass_field_keeps_comment_and_ignores_nested_class():
    after = ARGS.replace(
        "max_running_requests: Optional[int] = None  # keep", "max_running_requests: Optional[int] = 1024  # keep"
    )
    check(
        "set-default", ARGS, after, "ServerArgs", {"field": "max_running_requests"}, {"value": "1024", "expect": "None"}
    )


def test_add_argument_default_in_matched_call():
    after = ARGS.replace("default=ServerArgs.max_running_requests", "default=1024")
    check(
        "set-default",
        ARGS,
        after,
        "ServerArgs.add_cli_args",
        {"call": "parser.add_argument", "arg": '"--max-running-requests"', "keyword": "default"},
        {"value": "1024", "expect": "ServerArgs.max_running_requests"},
    )


def test_function_parameter_default():
    before = "def launch(host, port: int = 30000, *, tp=1):\n    pass\n"
    check(
        "set-default", before, before.replace("tp=1", "tp=8"), "launch", {"param": "tp"}, {"value": "8", "expect": "1"}
    )


def test_unexpected_upstream_default_is_missing_with_values():
    loc = state(
        "set-default",
        ARGS.replace("max_running_requests: Optional[int] = None  #", "max_running_requests: Optional[int] = 256  #"),
        "ServerArgs",
        {"field": "max_running_requests"},
        {"value": "1024", "expect": "None"},
    )
    assert loc.state == "missing" and "256" in loc.reason and "None" in loc.reason


# -- the post-condition reads the goal: the default the name ends up with, by what it means ----------


def test_goal_the_fields_last_binding_is_the_value():
    loc, params = {"field": "max_running_requests"}, {"value": "1024", "expect": "None"}
    done = ARGS.replace(
        "max_running_requests: Optional[int] = None  #", "max_running_requests: Optional[int] = 1024  #"
    )
    assert goal("set-default", done, "ServerArgs", loc, params) == ("done", True)
    # A chained assignment after the field is no holder for locate, but sets the default back.
    reset = done.replace("\n    class Nested:", "\n    fallback = max_running_requests = None\n\n    class Nested:")
    assert goal("set-default", reset, "ServerArgs", loc, params) == ("done", False)
    assert goal("set-default", ARGS, "ServerArgs", loc, params) == ("pending", False)


def test_goal_of_a_call_and_of_a_parameter():
    loc = {"call": "parser.add_argument", "arg": '"--max-running-requests"', "keyword": "default"}
    params = {"value": "1024", "expect": "ServerArgs.max_running_requests"}
    done = ARGS.replace("default=ServerArgs.max_running_requests", "default=1_024")  # the same value, spelled otherwise
    assert goal("set-default", done, "ServerArgs.add_cli_args", loc, params)[1] is True
    src = "def launch(host, port: int = 30000, *, tp=8):\n    pass\n"
    assert goal("set-default", src, "launch", {"param": "tp"}, {"value": "8", "expect": "1"}) == ("done", True)
    assert goal("set-default", src, "launch", {"param": "port"}, {"value": "8", "expect": "1"})[1] is False
