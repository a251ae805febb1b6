"""An edit patchkit made, changed since by hand to something that is neither side of it, reads
``modified``: the site is there, it is not what the recipe expects, and the journal says
patchkit's edit was.  Without a journal the same code reads ``missing`` (the op's own word:
nothing says an edit was ever there)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import mini_sglang

SERVER_ARGS = '''"""Stand-in for sglang/srt/server_args.py."""

import argparse
import dataclasses
from typing import Optional


@dataclasses.dataclass
class ServerArgs:
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_queued_requests: Optional[int] = None

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser, tp: int = 1):
        parser.add_argument(
            "--max-running-requests",
            type=int,
            default=ServerArgs.max_running_requests,
            help="The maximum number of running requests.",
        )
'''

RECIPE = """
id = "mrr"
summary = "raise a default"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "set-default"
engine = "sglang"
file = "sglang/srt/server_args.py"
scope = "{scope}"
[ops.locator]
{locator}
[ops.params]
value = "{value}"
expect = "{expect}"
"""

FORMS = {
    # form: (scope, locator, value, expect, applied text, the same hand-changed to a third value)
    "field": (
        "ServerArgs",
        'field = "max_running_requests"',
        "1024",
        "None",
        "max_running_requests: Optional[int] = 1024",
        "max_running_requests: Optional[int] = 256",
    ),
    "param": ("ServerArgs.add_cli_args", 'param = "tp"', "8", "1", "tp: int = 8", "tp: int = 4"),
    "call": (
        "ServerArgs.add_cli_args",
        'call = "parser.add_argument"\narg = \'"--max-running-requests"\'\nkeyword = "default"',
        "1024",
        "ServerArgs.max_running_requests",
        "default=1024,",
        "default=512,",
    ),
}


@pytest.fixture(params=sorted(FORMS))
def world(request, tmp_path, run_cli):
    scope, locator, value, expect, applied, third = FORMS[request.param]
    root = mini_sglang(tmp_path / "site", {"sglang/srt/server_args.py": SERVER_ARGS})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "mrr.toml").write_text(
        RECIPE.format(scope=scope, locator=locator, value=value, expect=expect)
    )
    sa = root / "sglang/srt/server_args.py"

    def cli(*args):
        return run_cli("--recipes", str(tmp_path / "recipes"), *args, "-t", f"sglang={root}")

    code, out, err = cli("apply", "mrr")
    assert code == 0, (out, err)
    assert applied in sa.read_text()
    sa.write_text(sa.read_text().replace(applied, third))
    return cli, sa, root, third


def _op(cli, *args):
    code, out, _ = cli(*args, "--json")
    doc = json.loads(out)
    return code, doc["recipes"][0]["state"], doc["recipes"][0]["ops"][0]


def test_a_third_value_after_apply_reads_modified(world):
    cli, sa, root, third = world
    code, state, op = _op(cli, "status", "mrr")
    assert (code, state, op["state"]) == (1, "modified", "modified"), op
    assert op["message"].startswith("patchkit applied this op, but the code changed since: "), op
    assert third.split("=")[-1].strip(" ,") in op["message"], op
    assert op["location"].startswith("sglang/srt/server_args.py"), op


def test_revert_refuses_a_modified_site_and_force_forgets_it(world):
    cli, sa, root, third = world
    before = sa.read_bytes()
    code, out, err = cli("revert", "mrr")
    assert code == 1 and "modified: patchkit applied this op" in out + err, (out, err)
    assert sa.read_bytes() == before
    code, out, err = cli("revert", "mrr", "--force")
    assert code == 0, (out, err)
    assert sa.read_bytes() == before  # forgotten, not rewritten: the value is the user's
    code, state, op = _op(cli, "status", "mrr")
    assert op["state"] == "missing", op  # no journal remembers an edit now


def test_apply_refuses_a_modified_site(world):
    """apply does not write over the user's change of patchkit's edit (the planner's refusal of
    a site that is not pending, for `modified`)."""
    cli, sa, root, third = world
    before = sa.read_bytes()
    code, out, err = cli("apply", "mrr")
    assert code == 1, (out, err)
    assert f"mrr > op #1 (set-default) > {sa}:" in err and ": modified: patchkit applied this op" in err, err
    assert sa.read_bytes() == before


def test_without_a_journal_a_third_value_is_missing(world):
    cli, sa, root, third = world
    shutil.rmtree(root / ".patchkit")
    code, state, op = _op(cli, "status", "mrr")
    assert op["state"] == "missing", op
    assert "expected" in op["message"], op


def test_a_site_removed_after_apply_is_still_missing(world):
    cli, sa, root, third = world
    gone = (
        third.replace("max_running_requests", "max_requests").replace("tp:", "tp_size:").replace("default=", "const=")
    )
    sa.write_text(sa.read_text().replace(third, gone))  # the field, parameter or keyword renamed
    code, state, op = _op(cli, "status", "mrr")
    assert op["state"] == "missing", op
    assert op["message"].endswith("(patchkit had applied it)"), op
