"""Scopes in a libcst Module: resolve ``Class.method`` to a node, splice an edited scope
back, list every scope (for relocation), and find line numbers cheaply."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

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
    for parent, old in zip(reversed(chain[:-1]), reversed(chain[1:])):
        if isinstance(parent, cst.Module):
            body = [new if s is old else s for s in parent.body]
            new = parent.with_changes(body=body)
        else:
            body = [new if s is old else s for s in parent.body.body]
            new = parent.with_changes(body=parent.body.with_changes(body=body))
    return new


def all_scopes(module: cst.Module) -> Iterator[tuple[str, list]]:
    """Every (qualname, chain) in the module, module level first."""
    stack = [("", [module])]
    while stack:
        name, chain = stack.pop(0)
        yield name, chain
        for d in _children_defs(chain[-1]):
            stack.append((f"{name}.{d.name.value}" if name else d.name.value, [*chain, d]))


class _LineState(CodegenState):
    """Codegen that notes the line where chosen nodes start, and nothing else.

    libcst's PositionProvider records every node and costs about twice a parse; this
    costs one plain codegen.
    """

    def __init__(self, targets: set[int], **kw) -> None:
        super().__init__(**kw)
        self.targets, self.lines, self.newlines = targets, {}, 0

    def add_token(self, value: str) -> None:
        self.newlines += value.count("\n")
        self.tokens.append(value)

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)

    def before_codegen(self, node) -> None:
        if id(node) in self.targets and id(node) not in self.lines:
            self.lines[id(node)] = self.newlines + 1

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        # The syntactic start excludes leading blank lines and comments; prefer it.
        if id(node) in self.targets:
            self.lines[id(node)] = self.newlines + 1
        return super().record_syntactic_position(node, start_node=start_node, end_node=end_node)


_GAP = r"(?:\s|\\\n|#[^\n]*(?![^\n]))*"  # whitespace, line continuations, whole comments: one way to match each, so no backtracking blow-up


def line_numbers(module: cst.Module, view, nodes, source: str | None = None) -> dict[int, int]:
    """Line where each node starts.  A node whose leading tokens occur exactly once in
    ``source`` (the file's text, any layout or comments between them) is found by a
    regex search; the rest by one codegen pass over the module (mapped back to the file's
    lines when the module is a ``view``)."""
    from patchkit.ops._cst import node_tokens

    nodes = [n for n in nodes if isinstance(n, cst.CSTNode)]
    lines: dict[int, int] = {}
    rest = []
    for n in nodes:
        toks = node_tokens(n)[:16] if source is not None and not isinstance(n, cst.Module) else ()
        hits = []
        if len(toks) >= 3:
            rx = re.compile(_GAP.join(re.escape(t) for t in toks))
            hits = [m.start() for m in rx.finditer(source)][:2]
        if len(hits) == 1:
            lines[id(n)] = source.count("\n", 0, hits[0]) + 1
        else:
            rest.append(n)
    if rest:
        state = _LineState(
            {id(n) for n in rest}, default_indent=module.default_indent, default_newline=module.default_newline
        )
        module._codegen(state)
        lines.update({k: view.file_line(v) if view else v for k, v in state.lines.items()})
    return lines
