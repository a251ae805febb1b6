"""ensure-import: make ``from MODULE import NAME`` hold at module level.

  locator.module = "sglang.srt.utils"
  params.name    = "is_sm120_supported"
  params.after   = "is_sm100_supported"   optional: place the name after this one
  params.defined_in = "sglang/srt/utils/common.py"
                   optional: the name must be defined there (def, class, assignment or
                   import), else the op is missing.  The judge reads that file
                   (``context_files``) and asks ``check_context``.

The name joins an existing ``from MODULE import (...)``, keeping its layout (parenthesised,
one name per line, trailing comma).  With no such import, a new statement goes after the
last top-level import.

The goal is the name bound at the module's top level from the module that provides it, so
two refactors are read as such (docs/recipes.md: ensure-import and shims):

* a module moved into a package (``sglang/srt/utils.py`` -> ``sglang/srt/utils/common.py``,
  the old path left as a re-export shim ``utils/__init__.py``: ``from .common import *``):
  the name bound, last, from a module of MODULE's own package line (``from
  sglang.srt.utils.common import NAME`` for MODULE ``sglang.srt.utils``, or through the shim,
  ``from sglang.srt.utils import NAME`` for MODULE ``sglang.srt.utils.common``) is the goal
  reached: done, where it reads pending by the import's words alone;
* the op's own file become a shim (its whole body imports, ``from X import *`` among them,
  and ``__all__``): its code moved to X, and an import added here would bind the name where
  nothing uses it: missing, naming X (never pending).  A shim that star-imports MODULE
  itself may bind the name already and is judged as before.
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from patchkit.core.ops import DONE, MISSING, PENDING, Located, Op, OpParamError, Reads, register
from patchkit.core.ops._cst import code, insert_item, remove_item, replace_node


def defines(source: str, name: str) -> bool:
    """Does this module bind ``name`` at top level (def, class, assignment, import)?"""
    n = re.escape(name)
    if re.search(rf"^(?:(?:async\s+)?def|class)\s+{n}\b|^{n}\s*(?::[^=\n]*)?=(?!=)", source, re.M):
        return True  # the common case, at column 0, without parsing the module
    for node in ast.parse(source).body:
        stmts = [node]
        if isinstance(node, (ast.If, ast.Try)):
            stmts += [*node.body, *getattr(node, "orelse", ()), *getattr(node, "finalbody", ())]
            for h in getattr(node, "handlers", ()):
                stmts += h.body
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s.name == name:
                return True
            if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets):
                return True
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == name:
                return True
            if isinstance(s, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in s.names
            ):
                return True
    return False


def _dotted(node) -> str:
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return node.value if isinstance(node, cst.Name) else ""


def _binding(small, name: str) -> str | None:
    """Where a top-level simple statement binds ``name`` from: the module of a ``from M
    import name``, "" for any other binding, None when it does not bind the name."""
    if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
        for alias in small.names:
            bound = alias.asname.name.value if alias.asname else _dotted(alias.name).split(".")[0]
            if bound != name:
                continue
            if isinstance(small, cst.ImportFrom) and not small.relative and _dotted(alias.name) == name:
                return _dotted(small.module)
            return ""
        return None
    targets = []
    if isinstance(small, cst.Assign):
        targets = [t.target for t in small.targets]
    elif isinstance(small, (cst.AnnAssign, cst.AugAssign)) and getattr(small, "value", None) is not None:
        targets = [small.target]
    for t in targets:
        names = [e.value for e in t.elements] if isinstance(t, (cst.Tuple, cst.List)) else [t]
        if any(isinstance(n, cst.Name) and n.value == name for n in names):
            return ""
    return None


@register("ensure-import")
class EnsureImport(Op):
    LOCATOR = {"module": "str"}
    PARAMS = {"name": "str", "after": "str", "defined_in": "str"}
    REQUIRED = ("locator.module", "params.name")
    SCOPED = False
    RELOCATABLE = False  # importing a name into some other module is not the same edit

    def __init__(self, locator: dict, params: dict) -> None:
        self.module = locator["module"]
        if not all(p.isidentifier() for p in self.module.split(".")):
            raise OpParamError("locator.module", f"is not a dotted module name: {self.module!r}")
        self.name = params["name"]
        if not self.name.isidentifier():
            raise OpParamError("params.name", f"is not an identifier: {self.name!r}")
        self.after = params.get("after")
        self.defined_in = params.get("defined_in")
        self.context_files = (self.defined_in,) if self.defined_in else ()
        # Only the module's top-level imports, which every view keeps.  With no import from
        # the module, the site is after the last import: it can be in any file.
        self.reads = Reads(patterns=(), sites=((),), shallow=True)

    def check_context(self, texts: dict[str, str | None]) -> Located | None:
        if self.defined_in is None:
            return None
        source = texts.get(self.defined_in)
        if source is None:
            return Located(MISSING, reason=f"{self.defined_in} (where `{self.name}` should be defined) does not exist")
        if not defines(source, self.name):
            return Located(MISSING, reason=f"`{self.name}` is not defined in {self.defined_in}")
        return None

    def _imports(self, module: cst.Module) -> list:
        out = []
        for stmt in module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if (
                        isinstance(small, cst.ImportFrom)
                        and not small.relative
                        and small.module is not None
                        and code(small.module) == self.module
                        and not isinstance(small.names, cst.ImportStar)
                    ):
                        out.append((stmt, small))
        return out

    def _has(self, imp: cst.ImportFrom) -> int | None:
        for i, alias in enumerate(imp.names):
            if code(alias.name) == self.name and (alias.asname is None or code(alias.asname.name) == self.name):
                return i
        return None

    def _target(self, module):
        imports = self._imports(module)
        if self.after is not None:
            for stmt, imp in imports:
                if any(code(a.name) == self.after for a in imp.names):
                    return stmt, imp
        return imports[0] if imports else (None, None)

    def kin(self, source: str) -> bool:
        """Is ``source`` MODULE, or a module of its package line (one a dotted prefix of the
        other): where a module moved into a package binds the same name, or its shim does."""
        m = self.module
        return bool(source) and (source == m or source.startswith(m + ".") or m.startswith(source + "."))

    def _bound_from_kin(self, module):
        """The top-level statement that binds the name last, when it imports it from a
        module of MODULE's package line; else None."""
        held = None
        for stmt in module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == self.name:
                held = None
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                source = _binding(small, self.name)
                if source is not None:
                    held = stmt if self.kin(source) else None
        return held

    def _shim_of(self, module) -> str:
        """What this module re-exports, when it is a shim (every top-level statement an
        import, a docstring or an ``__all__``; a ``from X import *`` among them) of modules
        other than MODULE: X, else ""."""
        stars = []
        for i, stmt in enumerate(module.body):
            if not isinstance(stmt, cst.SimpleStatementLine):
                return ""
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                    dots = "." * len(small.relative)
                    stars.append(dots + (code(small.module) if small.module is not None else ""))
                elif isinstance(small, (cst.Import, cst.ImportFrom)):
                    continue
                elif i == 0 and isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString):
                    continue  # the docstring
                elif isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and "__all__" in code(small):
                    continue
                else:
                    return ""
        # A relative star import may be MODULE itself (``from .common import *`` in
        # sglang/srt/utils/__init__.py, for MODULE sglang.srt.utils.common): not a shim of another.
        others = [
            x
            for x in stars
            if not (x == self.module or ("." + self.module).endswith("." + x.lstrip(".")) and x.startswith("."))
        ]
        return ", ".join(others) if stars and len(others) == len(stars) else ""

    def locate(self, module) -> Located:
        for stmt, imp in self._imports(module):
            if self._has(imp) is not None:
                return Located(DONE, (stmt,))
        kin = self._bound_from_kin(module)
        if kin is not None:
            return Located(
                DONE, (kin,), f"`{self.name}` is bound from a module of {self.module}'s package (a moved module's shim)"
            )
        shim = self._shim_of(module)
        if shim:
            return Located(
                MISSING,
                reason=f"this module is a re-export shim of {shim} (`from {shim.split(', ')[0]} import *`): its code "
                f"moved there, and an import of `{self.name}` here would bind it where nothing uses it",
            )
        stmt, _ = self._target(module)
        if stmt is not None:
            return Located(PENDING, (stmt,))
        last = self._last_import(module)
        return Located(PENDING, (module.body[last],) if last is not None else ())

    def is_applied(self, module) -> bool:
        # The goal on its own: what the module's top level leaves bound to the name, statement
        # after statement, is the name imported from the module, or from a module of its
        # package line (``kin``: a module moved into a package, or its shim); an assignment,
        # a def or another import after it would rebind the name.
        held = False
        for stmt in module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == self.name:
                held = False
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                source = _binding(small, self.name)
                if source is not None:
                    held = self.kin(source)
        return held

    @staticmethod
    def _last_import(module):
        last = None
        for i, stmt in enumerate(module.body):
            if isinstance(stmt, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
            ):
                last = i
        return last

    def apply(self, module):
        stmt, imp = self._target(module)
        alias = cst.ImportAlias(name=cst.Name(self.name))
        if imp is None:
            new = cst.parse_statement(f"from {self.module} import {self.name}\n")
            at = self._last_import(module)
            body = list(module.body)
            body.insert(0 if at is None else at + 1, new)
            return module.with_changes(body=body)
        names = imp.names
        index = len(names)
        if self.after is not None:
            index = next((i + 1 for i, a in enumerate(names) if code(a.name) == self.after), index)
        opening_ws = imp.lpar.whitespace_after if imp.lpar else None
        new_imp = imp.with_changes(names=insert_item(names, index, alias, opening_ws))
        return replace_node(module, imp, new_imp)

    def revert(self, module):
        for stmt, imp in self._imports(module):
            i = self._has(imp)
            if i is None:
                continue
            if len(imp.names) == 1:
                return module.with_changes(body=[s for s in module.body if s is not stmt])
            return replace_node(module, imp, imp.with_changes(names=remove_item(imp.names, i)))
        raise ValueError(f"`{self.name}` is not imported from {self.module}")


__all__ = ["EnsureImport", "OpParamError"]
