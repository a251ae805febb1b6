"""The ``names`` check: an edit may not leave a name undefined.

pyflakes reads the edited file's code before and after the edits of one invocation; a
name that pyflakes reports undefined after, inside a scope an op edited, and that it did
not report there before, was introduced by the edit (``_is_sm120_supported`` used in a
gate with no import and no definition).  Upstream's own noise (a name pyflakes cannot
resolve in the pristine file) is not the edit's and does not count.

pyflakes rather than libcst's ScopeProvider: both resolve scopes, but on SGLang 0.5.9's
communicator.py (976 lines) pyflakes takes 0.085 s and the ScopeProvider 1.7 s, and on
server_args.py (5,775 lines) 1.0 s against 10.4 s; this check runs in every ``apply``.

It runs on a view's code first (patchkit/core/view.py: the statements ops read, with every
top-level import kept), which is small; a name that reads undefined there may be bound by
a statement the view left out, so only those names are judged again on the whole file,
which decides.
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import NamedTuple, Optional

from patchkit.core.outline import module_bindings
from patchkit.core.view import split_lines


class Undefined(NamedTuple):
    name: str
    line: int  # in the code checked
    scope: str  # the edited scope it stands in ("" = module level)


def _parse(code: str) -> Optional[ast.Module]:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the compile check reports it


def _names(tree: ast.Module) -> tuple[Counter, Counter]:
    """(names read, names bound) anywhere in ``tree``, with how often."""
    reads: Counter = Counter()
    binds: Counter = Counter()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (reads if isinstance(n.ctx, ast.Load) else binds)[n.id] += 1
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds[n.name] += 1
        elif isinstance(n, ast.alias):
            binds[n.asname or n.name.split(".")[0]] += 1
        elif isinstance(n, ast.arg):
            binds[n.arg] += 1
    return reads, binds


def _scope_node(tree: ast.Module, scope: str):
    """The def/class ``scope`` in ``tree`` (the module for "" or when it is not found)."""
    node: object = tree
    for part in scope.split(".") if scope else ():
        hits = [
            d
            for d in getattr(node, "body", ())
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and d.name == part
        ]
        if not hits:
            return tree
        node = hits[0]
    return node


def _may_introduce(before: ast.Module, after: ast.Module, scopes: list[str]) -> bool:
    """Can the edit have made a name undefined?  Only by reading, in a scope it edited, a
    name that scope did not read before, or by losing a binding there; most edits (a list
    element, a default, an operand already read) do neither, and then pyflakes need not run."""
    for s in scopes:
        (rb, bb), (ra, ba) = _names(_scope_node(before, s)), _names(_scope_node(after, s))
        if set(ra) - set(rb) or any(ba[n] < c for n, c in bb.items()):
            return True
    return False


def _undefined(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of every name pyflakes reports undefined in ``tree``."""
    import pyflakes.checker
    import pyflakes.messages as msg

    checker = pyflakes.checker.Checker(tree, withDoctest=False)
    return [
        (str(m.message_args[0]), m.lineno)
        for m in checker.messages
        if isinstance(m, (msg.UndefinedName, msg.UndefinedLocal))
    ]


def _span(tree: ast.Module, scope: str) -> Optional[tuple[int, int]]:
    """First and last line of def/class ``scope`` (``Class.method``) in ``tree``; None for
    module level, or when the scope is not found there (then the whole file counts)."""
    node = _scope_node(tree, scope)
    if node is tree:
        return None
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return first, node.end_lineno


def _in_scopes(found, tree, scopes: list[str]) -> dict[str, set[tuple[str, int]]]:
    """scope -> {(name, line)} of the undefined names standing in each scope."""
    spans = {s: _span(tree, s) for s in scopes}
    out: dict[str, set] = {s: set() for s in scopes}
    for name, line in found:
        for s, span in spans.items():
            if span is None or span[0] <= line <= span[1]:
                out[s].add((name, line))
    return out


def introduced(before, after, scopes: list[str], bound=None) -> list[Undefined]:
    """The names that ``after`` leaves undefined in ``scopes`` and ``before`` did not, per
    scope: the edit introduced them.  ``before``/``after``: code, or its ``ast`` tree.
    ``bound(name, line)`` says a name pyflakes cannot see bound is bound all the same."""
    b_tree = _parse(before) if isinstance(before, str) else before
    a_tree = _parse(after) if isinstance(after, str) else after
    if a_tree is None or b_tree is None or not _may_introduce(b_tree, a_tree, scopes):
        return []
    now = _in_scopes(_undefined(a_tree), a_tree, scopes)
    if bound is not None:
        now = {s: {(n, ln) for n, ln in hits if not bound(n, ln)} for s, hits in now.items()}
    if not any(now.values()):
        return []  # nothing undefined in the edited scopes after: the before side need not be read
    was = {s: {n for n, _ in hits} for s, hits in _in_scopes(_undefined(b_tree), b_tree, scopes).items()}
    out = []
    for s, hits in now.items():
        seen = set()
        for name, line in sorted(hits, key=lambda h: h[1]):
            if name not in was[s] and name not in seen:
                seen.add(name)
                out.append(Undefined(name, line, s))
    return out


def _function_lines(tree: ast.Module):
    """A test: does a line stand inside a def or lambda (code that runs later, once the module
    has bound all its names)?  The defs' spans are gathered once, on first use."""
    spans: list = []

    def inside(line: int) -> bool:
        if not spans:
            spans.append(
                [
                    (n.lineno, n.end_lineno)
                    for n in ast.walk(tree)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                ]
            )
        return any(a <= line <= b for a, b in spans[0])

    return inside


def _view_source(doc) -> str:
    """The unedited view's code, rebuilt from the file's lines and the view's marks (printing
    the view's libcst module again costs 0.3 s on server_args.py).  Checked: expanding it
    must give the file back; otherwise the module is printed."""
    v, lines = doc.view, split_lines(doc.text)
    gaps, out = iter(v.gaps), []
    for k, (vline, fline, step) in enumerate(v.marks):
        if step:
            n = v.marks[k + 1][0] - vline if k + 1 < len(v.marks) else len(lines)
            out += lines[fline - 1 : fline - 1 + n]
        else:
            out.append(next(gaps)[0])
    src = "".join(out)
    return src if v.expand(src) == doc.text else v.module.code


def check(doc, scopes: list[str], state=None) -> list[Undefined]:
    """The names the edits of ``doc`` (a Document; ``state``, the planner's edited value of
    it) leave undefined in the scopes its ops edited; lines are the edited file's.

    On a view, a name used inside a def and bound at module level by a statement the view
    left out (``logger``, say) is bound: no edit touched that statement.  Any other name
    that reads undefined in the view is judged on the whole file."""
    code, new = doc.printed(state)
    if doc.view is None:
        return introduced(doc.text, doc.decode(new), scopes)
    before, after = _parse(_view_source(doc)), _parse(code)
    if before is None or after is None or doc.outline is None:
        return []
    outside = Counter(doc.outline.bindings) - module_bindings(before)
    in_function = _function_lines(after)
    hits = introduced(before, after, scopes, lambda n, ln: bool(outside[n]) and in_function(ln))
    if not hits:
        return []
    names = {h.name for h in hits}
    return [h for h in introduced(doc.text, doc.decode(new), scopes) if h.name in names]
