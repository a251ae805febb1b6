"""Scopes in a libcst Module: resolve ``Class.method`` to a node, splice an edited scope
back, and find line numbers cheaply, with libcst's public API only."""

from __future__ import annotations

import dataclasses
import re
from itertools import pairwise

import libcst as cst

_DEFS = (cst.ClassDef, cst.FunctionDef)


class ScopeError(LookupError):
    pass


def _children_defs(node) -> list:
    body = (
        node.body
        if isinstance(node, cst.Module)
        else node.body.body
        if isinstance(node.body, cst.IndentedBlock)
        else ()
    )
    return [s for s in body if isinstance(s, _DEFS)]


def resolve(module: cst.Module, qualname: str) -> list:
    """The chain [module, outer, ..., scope] for ``qualname`` ("" = the module itself)."""
    chain: list = [module]
    if not qualname:
        return chain
    for part in qualname.split("."):
        hits = [d for d in _children_defs(chain[-1]) if d.name.value == part]
        if not hits:
            raise ScopeError(f"scope `{qualname}` not found (no `{part}`)")
        if len(hits) > 1:
            raise ScopeError(f"scope `{qualname}` is ambiguous ({len(hits)} definitions of `{part}`)")
        chain.append(hits[0])
    return chain


def splice(chain: list, new_scope) -> cst.Module:
    """Put an edited scope back into its module, rebuilding only the enclosing defs."""
    new = new_scope
    for old, parent in pairwise(reversed(chain)):
        if isinstance(parent, cst.Module):
            body = [new if s is old else s for s in parent.body]
            new = parent.with_changes(body=body)
        else:
            body = [new if s is old else s for s in parent.body.body]
            new = parent.with_changes(body=parent.body.with_changes(body=body))
    return new


# whitespace, line continuations, whole comments: one way to match each, so no backtracking blow-up
_GAP = r"(?:\s|\\\n|#[^\n]*(?![^\n]))*"


def line_numbers(module: cst.Module, view, nodes, source: str | None = None) -> dict[int, int]:
    """Line where each node starts.  A node whose leading tokens occur exactly once in
    ``source`` (the file's text, any layout or comments between them) is found by a
    regex search; the rest from the newlines libcst prints before them (``_Printed``; mapped
    back to the file's lines when the module is a ``view``).  Lines are those of libcst's
    public ``PositionProvider`` (a node's syntactic start), which costs several parses of
    the module; this costs at most one walk and one printing of it."""
    from patchkit.core.ops._cst import node_tokens

    nodes = [n for n in nodes if isinstance(n, cst.CSTNode)]
    lines: dict[int, int] = {}
    rest = []
    for n in nodes:
        toks = node_tokens(n) if source is not None and not isinstance(n, cst.Module) else ()
        # A decorated def starts, as PositionProvider numbers it, at `def`/`class`, not at
        # its first decorator (a placeholder in a view stands there too).
        skip = sum(len(node_tokens(d)) for d in getattr(n, "decorators", ()))
        toks = toks[skip : skip + 16]
        hits = []
        if len(toks) >= 3:
            rx = re.compile(_GAP.join(re.escape(t) for t in toks))
            hits = [m.start() for m in rx.finditer(source)][:2]
        if len(hits) == 1:
            lines[id(n)] = source.count("\n", 0, hits[0]) + 1
        else:
            rest.append(n)
    if rest:
        chains = _chains(module, rest)
        printed = _Printed(module, {id(n) for chain in chains.values() for n in chain[:-1]})
        for k, chain in chains.items():
            line = 1 + sum(printed.before(parent, child) for parent, child in pairwise(chain))
            line += printed.lead(chain[-1])
            lines[k] = view.file_line(line) if view else line
    return lines


# Fields that hold only whitespace, comments and punctuation: two thirds of a module's
# nodes.  The search for a node's chain looks there only for a node it found nowhere else.
_TRIVIA = frozenset(
    {
        "lpar",
        "rpar",
        "comma",
        "semicolon",
        "dot",
        "equal",
        "colon",
        "lbracket",
        "rbracket",
        "lbrace",
        "rbrace",
        "leading_lines",
        "lines_after_decorators",
        "header",
        "footer",
        "newline",
        "trailing_whitespace",
    }
)


def _chains(module: cst.Module, nodes: list) -> dict[int, list]:
    """The chain [module, ..., node] of each node (keyed by id)."""
    want = {id(n) for n in nodes}
    # No statement lies inside an expression: a search for statements only skips them.
    stmts = all(isinstance(n, (cst.BaseStatement, cst.BaseSmallStatement, cst.BaseSuite)) for n in nodes)
    found = _search(module, want, trivia=False, expressions=not stmts)
    if len(found) < len(want):
        found.update(_search(module, want - found.keys(), trivia=True, expressions=True))
    return found


def _search(module: cst.Module, want: set[int], trivia: bool, expressions: bool) -> dict[int, list]:
    """A pre-order walk that stops once every wanted node is found (once, should a node
    object be shared), skipping the fields in ``_TRIVIA`` unless ``trivia`` and the
    insides of expressions unless ``expressions``."""
    fields: dict[type, tuple[str, ...]] = {}  # per call: libcst's node classes, read once each
    found: dict[int, list] = {}
    path: list = []
    stack = [(module, 0)]
    while stack and len(found) < len(want):
        node, depth = stack.pop()
        del path[depth:]
        path.append(node)
        if id(node) in want and id(node) not in found:
            found[id(node)] = list(path)
        if not expressions and isinstance(node, cst.BaseExpression):
            continue
        names = fields.get(type(node))
        if names is None:
            names = fields[type(node)] = tuple(
                f.name
                for f in dataclasses.fields(node)
                if trivia or not (f.name in _TRIVIA or f.name.startswith("whitespace"))
            )
        for name in names:
            v = getattr(node, name)
            if isinstance(v, cst.CSTNode):
                stack.append((v, depth + 1))
            elif isinstance(v, (list, tuple)):
                stack.extend((x, depth + 1) for x in v if isinstance(x, cst.CSTNode))
    return found


# What libcst prints of a node before its syntactic start (where PositionProvider starts
# it), in this order: the blank and comment lines above a statement, a def's decorators and
# the lines after them, an expression's own opening parentheses, the whitespace before an
# operator, an annotation's colon or arrow, or a ``yield from``'s ``from``.
_LEAD = ("leading_lines", "decorators", "lines_after_decorators")
_OPS = (
    cst.BaseBooleanOp,
    cst.BaseBinaryOp,
    cst.BaseCompOp,
    cst.BaseAugOp,
    cst.Semicolon,
    cst.Colon,
    cst.Comma,
    cst.Dot,
    cst.AssignEqual,
)


class _Printed:
    """Newlines in the code of nodes as ``module`` prints them, for one ``line_numbers``
    call (keyed by id: the module keeps every node alive meanwhile).

    libcst prints every newline from a node of its own (``Newline``, a string, a line
    continuation in whitespace) but the ``pass`` line of an empty indented block, so a
    child starts on its parent's line plus the newlines of the children printed before it
    (``CSTNode.children`` lists them in printing order).  A node on the way to a wanted
    one (``opened``) is counted as the sum of its children, any other node by printing it
    (``Module.code_for_node``): no code is printed twice, at most the module once."""

    def __init__(self, module: cst.Module, opened: set[int]) -> None:
        self.module, self.opened = module, opened
        self.newlines: dict[int, int] = {}
        self.order: dict[int, tuple[dict[int, int], tuple, list[int]]] = {}

    def count(self, node) -> int:
        n = self.newlines.get(id(node))
        if n is not None:
            return n
        if id(node) in self.opened:
            n = self._upto(node, None)
        else:
            try:
                n = self.module.code_for_node(node).count("\n")
            except SyntaxError:
                # A few nodes print only inside their parent (an Annotation must be told
                # whether it follows a parameter or a def); they print no newline of
                # their own, so theirs are their children's.
                n = sum(self.count(c) for c in node.children)
        self.newlines[id(node)] = n
        return n

    def before(self, parent, child) -> int:
        """Newlines printed within ``parent`` before ``child`` starts."""
        return self._upto(parent, child)

    def _upto(self, parent, child) -> int:
        entry = self.order.get(id(parent))
        if entry is None:
            children = tuple(parent.children)
            entry = self.order[id(parent)] = ({id(c): i for i, c in enumerate(children)}, children, [0])
        index, children, sums = entry
        i = len(children) if child is None else index[id(child)]
        while len(sums) <= i:
            sums.append(sums[-1] + self.count(children[len(sums) - 1]))
        if isinstance(parent, cst.IndentedBlock) and not parent.body and i > 0:
            return sums[i] + 1  # the ``pass`` line libcst prints for an empty block, before its footer
        return sums[i]

    def lead(self, node) -> int:
        """Newlines from where ``node``'s printing starts to its syntactic start."""
        if isinstance(node, cst.IndentedBlock):
            # a block starts at its first statement (or at the ``pass`` it prints if empty)
            return self.count(node.header) + (self.lead(node.body[0]) if node.body else 0)
        lead = [x for f in _LEAD for x in getattr(node, f, ())]
        if isinstance(node, (cst.BaseExpression, cst.MatchPattern)):
            lead += node.lpar
        if isinstance(node, _OPS):
            lead.append(node.whitespace_before)
        if isinstance(node, cst.Annotation):
            lead.append(node.whitespace_before_indicator)
        if isinstance(node, cst.From):
            lead.append(node.whitespace_before_from)
        return sum(self.count(x) for x in lead if isinstance(x, cst.CSTNode))  # not a MaybeSentinel
