"""One call level down: where an op's site left its named def for a helper that def calls.

Upstream often extracts a function's body into a helper of the same module and leaves the
function calling it (FlashInfer 0.7.4: ``gen_trtllm_gen_fused_moe_sm100_module`` now gets its
nvcc flags from ``trtllm_gen_fused_moe_build_inputs``, which holds
``supported_major_versions=[10, 12]``).  The named def still stands and still means what the
recipe meant, and what it calls is part of what it does.  So when the site is not in the
named scope, the defs it calls directly are read: a top-level function of the same module
called by its name, or, from a method, a method of the same class called on ``self`` or
``cls``.  One level only, never an import (another module's helper is another module's code).

This module only finds; the judge decides (judge._followed): it believes a callee only where
exactly one holds the op's site, done; that statement, whole, is the home release's site
statement with the op's edit made, but for what upstream may add beside it (identity.SITE_DONE
of its tokens, the bar a done site in its own scope meets); and the pristine release holds it
done there too: ``upstream``.  The statement whole, a compound one with its body and arms: a
condition upstream rewrote into a dispatcher (`if major == 9: return ...` / `elif major >= 10:`)
is not the patch's `if major == 9: minor = ...`, though its header is.  A callee holding the
site pending is never edited: a shared helper is not the def the recipe named, and editing it
would change every caller.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from patchkit.core import pyscope
from patchkit.core.ops import DONE, PENDING, Located
from patchkit.core.ops._cst import kids, node_tokens


def callees(module: cst.Module, scope: str) -> list[str]:
    """Qualified names of the defs of ``module`` that ``scope`` calls directly, in the order
    of their first call, without ``scope`` itself."""
    try:
        chain = pyscope.resolve(module, scope)
    except pyscope.ScopeError:
        return []
    node = chain[-1]
    if not isinstance(node, cst.FunctionDef):
        return []
    cls = chain[-2] if len(chain) > 2 and isinstance(chain[-2], cst.ClassDef) else None
    top = {s.name.value for s in module.body if isinstance(s, cst.FunctionDef)}
    methods = {s.name.value for s in cls.body.body if isinstance(s, cst.FunctionDef)} if cls else set()
    out: list[str] = []
    for name, on_self in _calls(node):
        if on_self and name in methods:
            qual = f"{scope.rsplit('.', 1)[0]}.{name}"
        elif not on_self and name in top:
            qual = name
        else:
            continue
        if qual != scope and qual not in out:
            out.append(qual)
    return out


def _calls(node: cst.CSTNode) -> Iterator[tuple[str, bool]]:
    """(name, called on self/cls) of each call in ``node``, not inside a nested def or class."""
    stack = list(reversed(_kids(node)))
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.Call):
            f = n.func
            if isinstance(f, cst.Name):
                yield f.value, False
            elif isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value in ("self", "cls"):
                yield f.attr.value, True
        stack.extend(reversed(_kids(n)))


def _kids(node: cst.CSTNode) -> list:
    return list(node.children)


def statement(scope: cst.CSTNode, node: cst.CSTNode) -> tuple[str, ...]:
    """The tokens of the innermost statement of ``scope`` that holds ``node``: a simple
    statement's line, or a compound statement whole (its body and its ``elif``/``else``
    arms: what a condition governs is part of what it says); () when none holds it."""
    stack = [(scope, None)]
    while stack:
        n, own = stack.pop()
        if isinstance(n, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            own = n
        if n is node:
            return node_tokens(own) if own is not None else ()
        stack.extend((c, own) for c in reversed(kids(n)))
    return ()


def alike(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """The share of two token sequences in common (difflib's ratio, as the identity's site
    part and git's rename score measure it)."""
    import difflib

    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() if a and b else 0.0


def sites(op, module: cst.Module, scope: str) -> list[tuple[str, Located]]:
    """(callee, Located) of each def ``scope`` calls where the op reads PENDING or DONE."""
    out = []
    for name in callees(module, scope):
        try:
            loc = op.impl.locate(pyscope.resolve(module, name)[-1])
        except pyscope.ScopeError:
            continue
        if loc.state in (PENDING, DONE):
            out.append((name, loc))
    return out
