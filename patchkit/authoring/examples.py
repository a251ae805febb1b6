"""Running a recipe op's ``[[ops.examples]]`` both ways (before -> after by apply, after ->
before by revert): `patchkit check` runs them, and `port` checks the examples it carries
to a new release with them."""

from __future__ import annotations

import difflib
from typing import Optional


def _diff(want: str, got: str, a: str, b: str) -> str:
    return "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), a, b))


def run_example(op, ex) -> Optional[tuple[str, str]]:
    """Run one example of an op both ways; None, or (what fails, a unified diff or "")."""
    import libcst as cst

    from patchkit.base.states import State
    from patchkit.core import pyscope

    impl, python = op.impl, op.file.endswith(".py")

    def scope_of(src: str, which: str):
        if not python:
            return None, src
        try:
            chain = pyscope.resolve(cst.parse_module(src), op.scope)
        except cst.ParserSyntaxError as e:
            raise ValueError(f"{which} does not parse as Python ({e.message})") from None
        except pyscope.ScopeError as e:
            raise ValueError(f"{which}: {e}") from None
        return chain, chain[-1]

    def printed(chain, node) -> str:
        return node if chain is None else pyscope.splice(chain, node).code

    try:
        chain, scope = scope_of(ex.before, "before")
        got = impl.locate(scope)
        if got.state != State.PENDING:
            why = f" ({got.reason})" if got.reason else ""
            return f"the op reads {got.state} on `before`, not pending{why}", ""
        after = printed(chain, impl.apply(scope))
        if after != ex.after:
            return "apply to `before` does not give exactly `after`", _diff(ex.after, after, "after", "apply(before)")
        chain, scope = scope_of(ex.after, "after")
        got = impl.locate(scope)
        if got.state != State.DONE:
            why = f" ({got.reason})" if got.reason else ""
            return f"the op reads {got.state} on `after`, not applied{why}", ""
        back = printed(chain, impl.revert(scope))
        if back != ex.before:
            return "revert of `after` does not give back `before`", _diff(ex.before, back, "before", "revert(after)")
    except (ValueError, LookupError, cst.CSTValidationError) as e:
        return f"the op cannot run on the example: {e}", ""
    return None
