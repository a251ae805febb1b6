"""A document: one file of one target, read once per invocation.

It holds the file's bytes and text, the libcst module of the whole file or of a view of it
(patchkit/view.py), and the edits made so far, which stay in memory: nothing here writes.
Ops are offered a scope (``scope``) and give back an edited one (``take``); ``new_bytes``
is the file as it would be written.  Line numbers of nodes map back to the file through
the view.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Optional

import libcst as cst

from patchkit import pyscope, view
from patchkit.errors import TargetError
from patchkit.target import Target

_AST_DEFS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


class Document:
    def __init__(self, target: Target, logical: str) -> None:
        self.target, self.logical = target, logical
        self.path: Path = target.path(logical)
        self.exists = self.path.is_file()
        self.original: bytes = self.path.read_bytes() if self.exists else b""
        self.text = self.original.decode("utf-8", errors="surrogateescape")
        self.is_python = logical.endswith(".py")
        # What this invocation's ops read ({scope: [pattern]}), gathered before the first
        # parse so that one view serves them all; None once the whole file is needed.
        self._wants: Optional[dict[str, list]] = {}
        self.view: Optional[view.View] = None  # set when the module is a view of the file
        self._module: Optional[cst.Module] = None
        self._tree: Any = None  # ast of the original text; False when it does not parse
        self._edited: Any = None  # the edited state: str (text) or cst.Module (python)
        self._printed: Optional[tuple] = None  # (state, code, bytes): printing a module is costly
        self._whole: Optional[cst.Module] = None  # the whole file, parsed to check a view's answer

    # -- what is read ---------------------------------------------------------------------
    def want(self, scope: str, pats: list) -> None:
        """Note what an op will read here (view.patterns), before the module is first used."""
        if self._wants is None:
            return
        have = self._wants.get(scope, ())
        if self._module is not None and not all(p in have for p in pats):
            self.whole()  # already parsed for other ops: this one reads the whole file
            return
        self._wants.setdefault(scope, []).extend(p for p in pats if p not in have)

    def whole(self) -> None:
        """From now on, parse and edit the whole file rather than a view of it."""
        self._wants = None
        if self.view is not None:
            if self._edited is not None:
                raise RuntimeError(f"internal: {self.logical} was edited in a view before the whole file was needed")
            self.view, self._module = None, None

    @property
    def module(self) -> cst.Module:
        if self._module is None:
            self.view = view.build(self.text, self._wants, self.tree) if self._wants and self.tree else None
            if self.view is not None:
                self._module = self.view.module
                return self._module
            try:
                self._module = cst.parse_module(self.text)
            except cst.ParserSyntaxError as e:
                raise TargetError(
                    f"{self.where(e.raw_line)}: does not parse as Python ({e.message})",
                    "the target tree is damaged or not Python 3; restore it (e.g. `patchkit sync --force`)",
                ) from None
        return self._module

    @property
    def tree(self) -> Optional[ast.Module]:
        """The original text's ``ast`` (None when it does not parse), parsed once."""
        if self._tree is None:
            try:
                self._tree = ast.parse(self.text)
            except (SyntaxError, ValueError):
                self._tree = False
        return self._tree or None

    def whole_module(self) -> cst.Module:
        self.whole()
        return self.module

    def state(self):
        """The file as edited so far in this invocation: text, or a module (maybe a view)."""
        if self._edited is not None:
            return self._edited
        return self.module if self.is_python else self.text

    @property
    def edited(self) -> bool:
        return self._edited is not None

    # -- edits ------------------------------------------------------------------------------
    def scope(self, name: str):
        """(chain, node) of a scope in the current state; pyscope.ScopeError when absent.
        A text file has one scope: its whole text (chain is None)."""
        cur = self.state()
        if not self.is_python:
            return None, cur
        chain = pyscope.resolve(cur, name)
        return chain, chain[-1]

    def whole_scope(self, name: str):
        """A scope of the original file parsed complete, apart from the view, to check what
        the view says.  An op reads only its scope, so the scope's own source is parsed
        when it can be cut out cleanly; otherwise the whole file.  pyscope.ScopeError
        when absent."""
        src = self._scope_source(name)
        if src is not None:
            try:
                body = cst.parse_module(src).body
            except cst.ParserSyntaxError:
                body = ()
            if len(body) == 1 and isinstance(body[0], (cst.ClassDef, cst.FunctionDef)):
                return None, body[0]
        if self._whole is None:
            self._whole = cst.parse_module(self.text)
        chain = pyscope.resolve(self._whole, name)
        return chain, chain[-1]

    def scope_text(self, name: str) -> str:
        """The text an op in scope ``name`` reads: its def or class, or the whole file."""
        src = self._scope_source(name)
        return self.text if src is None else src

    def _scope_source(self, name: str) -> Optional[str]:
        """The source of def/class ``name`` (as pyscope.resolve finds it), dedented to column
        0; None for the module, or when it cannot be cut out cleanly (a multi-line string
        reaching left of the def, a name defined twice)."""
        if not name or self.tree is None:
            return None
        node: Any = self.tree
        for part in name.split("."):
            hits = [d for d in getattr(node, "body", ()) if isinstance(d, _AST_DEFS) and d.name == part]
            if len(hits) != 1:
                return None
            node = hits[0]
        lines = view.split_lines(self.text)
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        seg = lines[start - 1 : node.end_lineno]
        indent = seg[0][: len(seg[0]) - len(seg[0].lstrip(" \t"))]
        out = []
        for ln in seg:
            if ln.startswith(indent):
                out.append(ln[len(indent) :])
            elif not ln.strip():
                out.append(ln.lstrip(" \t"))
            else:
                return None
        return "".join(out)

    def take(self, chain, new_scope) -> None:
        """Accept an op's edited scope (from ``scope``) as the file's new state."""
        self._edited = new_scope if chain is None else pyscope.splice(chain, new_scope)

    def discard(self) -> None:
        self._edited = None

    def printed(self) -> tuple[str, bytes]:
        """(the current state's own code, the file's new bytes), printed once per state;
        for a view the code is the view's, the bytes are the whole file's."""
        cur = self.state()
        if self._printed is None or self._printed[0] is not cur:
            code = cur.code if isinstance(cur, cst.Module) else cur
            out = self.view.expand(code) if self.view is not None and isinstance(cur, cst.Module) else code
            self._printed = (cur, code, out.encode("utf-8", errors="surrogateescape"))
        return self._printed[1], self._printed[2]

    def new_bytes(self) -> bytes:
        return self.printed()[1]

    def round_trips(self) -> bool:
        """Does libcst print this file back byte for byte?  (A view is checked the same way
        when it is built.)  Rewriting a file it cannot could lose text."""
        return not self.is_python or self.view is not None or self.module.code == self.text

    def file_line(self, line: Optional[int]) -> Optional[int]:
        """A line of the current code (a view's, maybe) as a line of the file."""
        return self.view.file_line(line) if self.view is not None and line else line

    def where(self, line: Optional[int] = None) -> str:
        """``path:line`` for messages: the absolute path, so output does not depend on the
        working directory."""
        return f"{self.path}:{line}" if line else str(self.path)
