"""Golden-case runner shared by the per-op tests: before, after, and the round trip."""

from __future__ import annotations

import textwrap

import libcst as cst

from patchkit.core import pyscope
from patchkit.core.ops import DONE, KINDS, PENDING


def check(
    kind: str, before: str, after: str, scope: str = "", locator: dict | None = None, params: dict | None = None
) -> None:
    """apply(before) == after; is_applied(after) and not before nor after revert (as the planner
    asks it: judged against where the apply started, ``relative_to``); second apply is a
    no-op; revert(after) == before; and the planner's checks (post-condition, idempotence,
    round-trip) pass both ways."""
    from patchkit.core.planner import CHECKS, Edit

    before, after = textwrap.dedent(before), textwrap.dedent(after)
    op = KINDS[kind](locator or {}, params or {})
    if op.language == "text":
        assert op.locate(before).state == PENDING, op.locate(before)
        bound = op.relative_to(before)
        got = bound.apply(before)
        assert got == after
        for e in (Edit(bound, before, got, True, False), Edit(op, got, op.revert(got), False, False)):
            assert not [why for c in CHECKS.values() if (why := c(e))]
        assert bound.is_applied(got) and op.is_applied(got)
        assert not op.is_applied(before) and not bound.is_applied(before)
        assert op.revert(got) == before
        return
    mod = cst.parse_module(before)
    chain = pyscope.resolve(mod, scope)
    loc = op.locate(chain[-1])
    assert loc.state == PENDING, loc
    assert not op.is_applied(chain[-1])
    bound = op.relative_to(chain[-1])
    edited = bound.apply(chain[-1])
    new = pyscope.splice(chain, edited)
    assert new.code == after
    for e in (Edit(bound, chain[-1], edited, True, True), Edit(op, edited, op.revert(edited), False, True)):
        assert not [why for c in CHECKS.values() if (why := c(e))]
    chain2 = pyscope.resolve(cst.parse_module(new.code), scope)
    assert op.is_applied(chain2[-1])
    assert op.locate(chain2[-1]).state == DONE
    reverted = op.revert(chain2[-1])
    assert not op.is_applied(reverted)
    back = pyscope.splice(chain2, reverted)
    assert back.code == before


def state(kind: str, src: str, scope: str = "", locator: dict | None = None, params: dict | None = None):
    op = KINDS[kind](locator or {}, params or {})
    src = textwrap.dedent(src)
    if op.language == "text":
        return op.locate(src)
    return op.locate(pyscope.resolve(cst.parse_module(src), scope)[-1])


def goal(kind: str, src: str, scope: str = "", locator: dict | None = None, params: dict | None = None):
    """(what locate reads, what is_applied says) of the op on ``src``: the two opinions the
    planner's idempotence and post-condition checks ask, which must be able to differ."""
    op = KINDS[kind](locator or {}, params or {})
    src = textwrap.dedent(src)
    at = src if op.language == "text" else pyscope.resolve(cst.parse_module(src), scope)[-1]
    return op.locate(at).state, op.is_applied(at)
