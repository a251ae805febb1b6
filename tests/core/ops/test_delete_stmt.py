"""delete-stmt: golden before/after (with the round trip), at any depth, put back between its
neighbours; and the refusals."""

import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check
from tests.core.ops.test_replace_stmt import SRC


def test_delete_stmt_restores_the_comment_above_it():
    after = SRC.replace("            # the hook registers itself\n            self.register_hook()\n", "")
    check(
        "delete-stmt",
        SRC,
        after,
        "ModelRunner.init",
        {
            "match": "# the hook registers itself\nself.register_hook()",
            "before": "self.ready = True",
            "inside": "if self.server_args.enable_foo:",
        },
    )


def test_delete_stmt_refuses_to_empty_a_block_and_needs_a_neighbour():
    with pytest.raises(OpParamError, match="after or before"):
        KINDS["delete-stmt"]({"match": "x = 1"}, {})
    src = "def f():\n    if a:\n        x = 1\n    y = 2\n"
    op = KINDS["delete-stmt"]({"match": "x = 1", "after": "if a:"}, {})
    import libcst as cst

    from patchkit.core import pyscope

    scope = pyscope.resolve(cst.parse_module(src), "f")[-1]
    # `after` names the statement above it in the same block: an `if` header is not that.
    assert op.locate(scope).state == "missing"
    op = KINDS["delete-stmt"]({"match": "y = 2", "after": "if a:"}, {})
    assert op.locate(scope).state == "pending"
    op2 = KINDS["delete-stmt"]({"match": "x = 1", "inside": "if a", "before": "z = 3"}, {})
    assert op2.locate(scope).state == "missing"


def test_delete_stmt_only_statement_cannot_go():
    import libcst as cst

    from patchkit.core import pyscope

    src = "def f():\n    if a:\n        x = 1\n    y = 2\n"
    scope = pyscope.resolve(cst.parse_module(src), "f")[-1]
    op = KINDS["delete-stmt"]({"match": "if a:\n    x = 1", "before": "y = 2"}, {})
    assert op.locate(scope).state == "pending"
    new = op.apply(scope)
    assert "if a" not in cst.Module(body=[new]).code
    lonely = KINDS["delete-stmt"]({"match": "x = 1", "inside": "if a", "after": "w = 0"}, {})
    assert lonely.locate(scope).state == "missing"
