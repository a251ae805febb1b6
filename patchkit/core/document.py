"""A document: one file of one target, read once per invocation.

It holds the file's bytes and text, and the libcst module of the whole file or of a view
of it (patchkit/core/view.py), parsed once.  A Document is read only to the stages: an edit is a
value the planner holds (a *state*: the file's text, or its module, edited), never kept
here.  Ops are offered a scope of a state (``scope``); ``splice`` gives the state with an
edited scope in its place, and ``printed`` the bytes a state would write.  Line numbers
of nodes map back to the file through the view.
"""

from __future__ import annotations

import ast
import io
import os
import tokenize
from pathlib import Path
from typing import Any, Optional

import libcst as cst

from patchkit.base import fsio, sparse
from patchkit.base.errors import TargetError
from patchkit.base.target import Target
from patchkit.core import outline, pyast, pyscope, view
from patchkit.core.learned import OUTLINE, Learned
from patchkit.core.ops import _cst


def decode_source(path: Path, data: bytes, python: bool) -> tuple[str, str, str]:
    """(text, encoding, errors) of a file's bytes, such that ``text.encode(encoding, errors)``
    gives the bytes back exactly.  Python source is decoded as PEP 263 says (a coding
    cookie, a BOM, else UTF-8), strictly; other files as UTF-8, any other byte kept as is
    (surrogateescape).  A Python file that is not valid in its encoding is a TargetError."""
    if not python:
        return data.decode("utf-8", "surrogateescape"), "utf-8", "surrogateescape"
    refuse = (
        "patchkit will not edit a file it cannot read back byte for byte; fix the file's encoding or its coding line"
    )
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        if "encoding" in str(e) and "invalid or missing" not in str(e):  # unknown, or contradicts a BOM
            raise TargetError(f"{path}: {e.msg or e}", refuse) from None
        encoding = "utf-8"  # a first line that is not UTF-8: the decode below says where
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        said = "as its coding line declares" if encoding not in ("utf-8", "utf-8-sig") else "(no coding line)"
        bad = data[e.start : e.start + 1].hex()
        raise TargetError(
            f"{path}:{line}: not valid {encoding} {said}: byte 0x{bad} at offset {e.start}", refuse
        ) from None
    if text.encode(encoding) != data:  # a codec that does not map back one to one
        raise TargetError(f"{path}: its {encoding} text does not encode back to the same bytes", refuse)
    return text, encoding, "strict"


def python_ast(text: str, where) -> ast.Module:
    """``ast.parse(text)``, or a TargetError naming ``where(line)`` and the parser's reason.
    Every target file goes through here before libcst parses it."""
    hint = "the target tree is damaged, generated or not Python 3; restore it (e.g. `patchkit sync --force`)"
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise TargetError(
            f"{where(line)}: holds a NUL byte, so it is not Python source",
            "the target tree is damaged; restore it (e.g. `patchkit sync --force`, or reinstall the package)",
        )
    try:
        return pyast.parsed(text)
    except SyntaxError as e:
        raise TargetError(f"{where(e.lineno)}: does not parse as Python ({e.msg})", hint) from None
    except ValueError as e:
        raise TargetError(f"{where()}: does not parse as Python ({e})", hint) from None
    except (MemoryError, RecursionError):
        raise TargetError(
            f"{where()}: nests too deeply for Python's own parser; patchkit will not edit it", hint
        ) from None


class Document:
    def __init__(
        self, target: Target, logical: str, planned: Optional[bytes] = None, learned: Optional[Learned] = None
    ) -> None:
        """``planned``: the bytes a plan would leave there (the planner's read-back check
        judges them as if written); None: the file as it is on disk.  ``learned``: where an
        outline made here goes, to be cached once judging is done (its Session's)."""
        self.learned = learned if learned is not None else Learned()
        self.target, self.logical = target, logical
        self.path: Path = target.path(logical)
        # Where the bytes are written: a symlink inside the target is written through, so
        # it stays a link (Target.path refuses one that leads outside).
        self.real: Path = Path(os.path.realpath(self.path))
        if planned is None:
            sparse.need(target.root, [target.relpath(logical)])  # a sparse release tree brings it in
        data = fsio.read_file(self.path) if planned is None else planned
        self.exists = data is not None
        self.original: bytes = data or b""
        self.is_python = logical.endswith(".py")
        self.text, self.encoding, self._errors = decode_source(self.path, self.original, self.is_python)
        # What this invocation's ops read ({scope: [pattern]}), gathered before the first
        # parse so that one view serves them all; None once the whole file is needed.
        self._wants: Optional[dict[str, list]] = {}
        self.view: Optional[view.View] = None  # set when the module is a view of the file
        self._module: Optional[cst.Module] = None
        self._tree: Any = None  # ast of the original text (Python files only)
        self._outline: Optional[outline.Outline] = None  # its outline (patchkit/core/outline.py)
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
            self.view, self._module = None, None

    @property
    def module(self) -> cst.Module:
        if self._module is None:
            shape = self.outline  # first: a file that would crash libcst is refused here
            self.view = view.build(self.text, self._wants, shape) if self._wants and shape else None
            if self.view is not None:
                self._module = self.view.module
                return self._module
            try:
                self._module = _cst.parsed(self.text)
            except cst.ParserSyntaxError as e:
                raise TargetError(
                    f"{self.where(e.raw_line)}: does not parse as Python ({e.message})",
                    "the target tree is damaged or not Python 3; restore it (e.g. `patchkit sync --force`)",
                ) from None
        return self._module

    @property
    def tree(self) -> Optional[ast.Module]:
        """The original text's ``ast``, parsed once (None for a file that is not Python).
        A Python file that CPython's own parser refuses is a TargetError: it is asked
        before libcst ever sees the text, since libcst's native parser crashes the
        interpreter (SIGSEGV) on nesting that CPython refuses with a message."""
        if self._tree is None and self.is_python:
            self._tree = python_ast(self.text, self.where)
        return self._tree

    @property
    def outline(self) -> Optional[outline.Outline]:
        """The original text's outline (None for a file that is not Python): read from the
        cache when these bytes were outlined before (so CPython's parser accepted them, as
        ``tree`` asks), else made from ``tree`` and learned (cached after judging)."""
        if self._outline is None and self.is_python:
            got = outline.read(self.original, view.split_lines(self.text)) if self._tree is None else None
            if got is None:
                got = outline.of_tree(self.tree)
                self.learned.add(OUTLINE, outline.key(self.original), (self.original, got))
            self._outline = got
        return self._outline

    def whole_module(self) -> cst.Module:
        self.whole()
        return self.module

    def state(self):
        """The file as read: its text, or its module (maybe a view).  The state edits start from."""
        return self.module if self.is_python else self.text

    # -- edits, as values --------------------------------------------------------------------
    def scope(self, name: str, state: Any = None):
        """(chain, node) of a scope in ``state`` (the file as read when None);
        pyscope.ScopeError when absent.  A text file has one scope: its whole text (chain
        is None)."""
        cur = self.state() if state is None else state
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
            self._whole = _cst.parsed(self.text)
        chain = pyscope.resolve(self._whole, name)
        return chain, chain[-1]

    def shallow_scope(self, name: str):
        """The scope of the original file with every compound statement directly in its body
        (a method, an ``if``, a nested class) left out as a ``pass`` line, parsed apart: what a
        ``Reads.shallow`` op reads, to check what the view says at a fraction of the parse.
        None when it cannot be cut out cleanly (then ``whole_scope`` is asked)."""
        node = self._scope_node(name)
        if node is None:
            return None
        lines = view.split_lines(self.text)
        spans = []
        for st in node.body:
            if st.kind in ("def", "compound"):
                first = st.first
                head = lines[first - 1]
                if st.col_offset != len(head) - len(head.lstrip(" \t")) or st.end_lineno is None:
                    return None  # shares its first line with other code: not cut out cleanly
                spans.append((first, st.end_lineno))
        src = self._scope_source(name, leave_out=spans)
        if src is None:
            return None
        try:
            module = cst.parse_module(src)
        except cst.ParserSyntaxError:
            return None
        if not name:
            return module
        if len(module.body) == 1 and isinstance(module.body[0], (cst.ClassDef, cst.FunctionDef)):
            return module.body[0]
        return None

    def scope_text(self, name: str) -> str:
        """The text an op in scope ``name`` reads: its def or class, or the whole file."""
        src = self._scope_source(name)
        return self.text if src is None else src

    def _scope_node(self, name: str) -> Any:
        """The outline of def/class ``name`` (the module's for ""), as pyscope.resolve finds
        it; None when the file does not parse or the name is not one def/class."""
        node: Any = self.outline
        if node is None:
            return None
        for part in name.split(".") if name else ():
            hits = [d for d in node.body if d.kind == "def" and d.name == part]
            if len(hits) != 1:
                return None
            node = hits[0]
        return node

    def scope_span(self, name: str) -> Optional[tuple[int, int]]:
        """(first line, last line) of def/class ``name`` in the original file, decorators
        included; None when it is not one def/class there (or the file does not parse)."""
        node = self._scope_node(name) if name else None
        if node is None:
            return None
        return node.first, node.end_lineno

    def _scope_source(self, name: str, leave_out: list[tuple[int, int]] = ()) -> Optional[str]:
        """The source of def/class ``name`` dedented to column 0 (the module's for "", only
        with ``leave_out``), each (first, last) line span of ``leave_out`` standing as one
        ``pass`` line at its indentation; None for the module without ``leave_out``, or when
        it cannot be cut out cleanly (a multi-line string reaching left of the def, a name
        defined twice)."""
        node = self._scope_node(name) if name or leave_out else None
        if node is None:
            return None
        lines = view.split_lines(self.text)
        for first, last in sorted(leave_out, reverse=True):
            head = lines[first - 1]
            lines[first - 1 : last] = [head[: len(head) - len(head.lstrip(" \t"))] + "pass\n"]
            # Later line numbers shift; spans are cut from the bottom up, and the scope's own
            # span is taken below from the count of lines removed.
        removed = sum(last - first for first, last in leave_out)
        if not name:
            return "".join(lines)
        start = node.first
        seg = lines[start - 1 : node.end_lineno - removed]
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

    @staticmethod
    def splice(chain, new_scope) -> Any:
        """The state with an op's edited scope (from ``scope``) in the place of the old."""
        return new_scope if chain is None else pyscope.splice(chain, new_scope)

    def printed(self, state: Any = None) -> tuple[str, bytes]:
        """(a state's own code, the file's bytes in that state), printed once per state (the
        file as read when None); for a view the code is the view's, the bytes are the whole
        file's."""
        cur = self.state() if state is None else state
        if self._printed is None or self._printed[0] is not cur:
            code = cur.code if isinstance(cur, cst.Module) else cur
            out = self.view.expand(code) if self.view is not None and isinstance(cur, cst.Module) else code
            self._printed = (cur, code, self.encode(out))
        return self._printed[1], self._printed[2]

    def encode(self, text: str) -> bytes:
        """Text of this file as its bytes, in the file's own encoding (PEP 263 for Python)."""
        try:
            return text.encode(self.encoding, self._errors)
        except UnicodeEncodeError as e:
            line = text.count("\n", 0, e.start) + 1
            raise TargetError(
                f"{self.where(line)}: the edit would write {text[e.start : e.end]!r}, which this file's encoding"
                f" ({self.encoding}) cannot hold; nothing was written",
                "write the recipe's code in characters the file's encoding has, or convert the file to UTF-8",
            ) from None

    def decode(self, data: bytes) -> str:
        """Bytes of this file (``original``, a plan's new bytes) as text in the file's own
        encoding, to compile or to show (a byte that is not valid there reads as U+FFFD)."""
        return data.decode(self.encoding, "replace")

    def round_trips(self) -> bool:
        """Does libcst print this file back byte for byte?  (A view is checked the same way
        when it is built.)  Rewriting a file it cannot could lose text."""
        return not self.is_python or self.view is not None or self.module.code == self.text

    def file_line(self, line: Optional[int]) -> Optional[int]:
        """A line of the module's code (a view's, maybe) as a line of the file."""
        return self.view.file_line(line) if self.view is not None and line else line

    def where(self, line: Optional[int] = None) -> str:
        """``path:line`` for messages: the absolute path, so output does not depend on the
        working directory."""
        return f"{self.path}:{line}" if line else str(self.path)
