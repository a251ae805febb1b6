"""The ``names`` check: an edit may not leave a name undefined.

pyflakes reads the edited file's code before and after the edits of one invocation; a
name that pyflakes reports undefined after, inside a scope an op edited, and that it did
not report there before, was introduced by the edit (``_is_sm120_supported`` used in a
gate with no import and no definition).  Upstream's own noise (a name pyflakes cannot
resolve in the pristine file) is not the edit's and does not count.

pyflakes rather than libcst's ScopeProvider: both resolve scopes, but on SGLang 0.5.9's
communicator.py (976 lines) pyflakes takes 0.085 s and the ScopeProvider 1.7 s, and on
server_args.py (5,775 lines) 1.0 s against 10.4 s; this check runs in every ``apply``.

It runs on a view's code first (patchkit/view.py: the statements ops read, with every
top-level import kept), which is small; a name that reads undefined there may be bound by
a statement the view left out, so only those names are judged again on the whole file,
which decides.
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import NamedTuple, Optional

from patchkit.view import split_lines


class Undefined(NamedTuple):
    name: str
    line: int  # in the code checked
    scope: str  # the edited scope it stands in ("" = module level)


def _undefined(code: str) -> Optional[tuple[list[tuple[str, int]], ast.Module]]:
    """((name, line) of every name pyflakes reports undefined in ``code``, its tree); None
    when the code does not parse (the compile check reports that)."""
    import pyflakes.checker
    import pyflakes.messages as msg

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    checker = pyflakes.checker.Checker(tree, withDoctest=False)
    return [
        (str(m.message_args[0]), m.lineno)
        for m in checker.messages
        if isinstance(m, (msg.UndefinedName, msg.UndefinedLocal))
    ], tree


def _span(tree: ast.Module, scope: str) -> Optional[tuple[int, int]]:
    """First and last line of def/class ``scope`` (``Class.method``) in ``tree``; None for
    module level, or when the scope is not found there (then the whole file counts)."""
    if not scope:
        return None
    node: object = tree
    for part in scope.split("."):
        hits = [
            d
            for d in getattr(node, "body", ())
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and d.name == part
        ]
        if not hits:
            return None
        node = hits[0]
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


def introduced(before: str, after: str, scopes: list[str]) -> list[Undefined]:
    """The names that ``after`` leaves undefined in ``scopes`` and ``before`` did not, per
    scope: the edit introduced them."""
    b, a = _undefined(before), _undefined(after)
    if a is None or b is None:
        return []
    (b_found, b_tree), (a_found, a_tree) = b, a
    was = {s: {n for n, _ in hits} for s, hits in _in_scopes(b_found, b_tree, scopes).items()}
    out = []
    for s, hits in _in_scopes(a_found, a_tree, scopes).items():
        seen = set()
        for name, line in sorted(hits, key=lambda h: h[1]):
            if name not in was[s] and name not in seen:
                seen.add(name)
                out.append(Undefined(name, line, s))
    return out


def _module_bindings(tree: ast.Module) -> Counter:
    """How many times each name is bound at module level (imports, assignments, defs,
    classes, loop and ``with`` targets, also under ``if``/``try``), not inside defs."""
    out: Counter = Counter()

    def targets(node) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                out[n.id] += 1

    def visit(stmts) -> None:
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[s.name] += 1
                continue
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                for a in s.names:
                    out[a.asname or a.name.split(".")[0]] += 1
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    targets(t)
            elif isinstance(s, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                targets(s.target)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(s, field, ()) or ())

    visit(tree.body)
    return out


def _in_function(tree: ast.Module, line: int) -> bool:
    """Does ``line`` stand inside a def or lambda (code that runs later, once the module has
    bound all its names)?"""
    return any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and n.lineno <= line <= n.end_lineno
        for n in ast.walk(tree)
    )


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


def check(doc, scopes: list[str]) -> list[Undefined]:
    """The names the edits of ``doc`` (a Document, edited in memory) leave undefined in the
    scopes its ops edited; lines are the edited file's.

    On a view, a name used inside a def and bound at module level by a statement the view
    left out (``logger``, say) is bound: no edit touched that statement.  Any other name
    that reads undefined in the view is judged on the whole file."""
    code, new = doc.printed()
    if doc.view is None:
        return introduced(doc.text, doc.decode(new), scopes)
    before = _view_source(doc)
    hits = introduced(before, code, scopes)
    if not hits:
        return []
    outside = _module_bindings(doc.tree) - _module_bindings(ast.parse(before))
    after = ast.parse(code)
    hits = [h for h in hits if not (outside[h.name] and _in_function(after, h.line))]
    if not hits:
        return []
    names = {h.name for h in hits}
    return [h for h in introduced(doc.text, doc.decode(new), scopes) if h.name in names]
