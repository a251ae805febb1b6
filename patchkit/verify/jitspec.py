"""FlashInfer's JIT modules, read statically from ``flashinfer/jit/*.py`` (flashinfer is never
imported: it needs torch and a GPU, and it would be the installed copy, not the target's).

A module is the ``gen_jit_spec("NAME", [sources], extra_cuda_cflags=...)`` call whose first
argument is the string NAME.  Sources are ``jit_env.FLASHINFER_CSRC_DIR / "a" / "b.cu"``
chains (``csrc/a/b.cu``; ``FLASHINFER_INCLUDE_DIR`` gives ``include/...``).  The flags are
the string literals of ``extra_cuda_cflags`` (a list, a name assigned one in the function,
or sums of those), and the arch gate is ``get_nvcc_flags_list(supported_major_versions=[...])``
(FlashInfer 0.6.x: the JIT builds the module only for those majors).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional

_DIRS = {"FLASHINFER_CSRC_DIR": "csrc", "FLASHINFER_INCLUDE_DIR": "include"}


@dataclass
class JitModule:
    name: str
    file: str  # logical name of the .py that defines it
    line: int
    sources: list[str] = field(default_factory=list)  # logical names (csrc/..., include/...)
    flags: list[str] = field(default_factory=list)  # extra_cuda_cflags' literal flags, no -gencode
    majors: Optional[list[int]] = None  # supported_major_versions; None = not gated
    unread: list[str] = field(default_factory=list)  # source expressions not read statically

    def admits(self, arch: str) -> Optional[bool]:
        """Does the JIT build this module for ``arch`` ("120a")?  None when not gated."""
        if self.majors is None:
            return None
        digits = "".join(c for c in arch if c.isdigit())
        return int(digits[:-1]) in self.majors

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "file": f"{self.file}:{self.line}",
            "sources": self.sources,
            "flags": self.flags,
            "supported_major_versions": self.majors,
        }


def _path(node) -> Optional[str]:
    """``jit_env.FLASHINFER_CSRC_DIR / "a" / "b.cu"`` -> ``csrc/a/b.cu``."""
    parts: list[str] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        if not (isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)):
            return None
        parts.insert(0, node.right.value)
        node = node.left
    base = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    if base not in _DIRS or not parts:
        return None
    return "/".join([_DIRS[base], *parts])


def _kw(call: ast.Call, name: str, pos: int):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return call.args[pos] if len(call.args) > pos else None


def _flags(node, assigned: dict, out: JitModule, depth: int = 0) -> None:
    """Collect literal flags and the arch gate from an ``extra_cuda_cflags`` expression."""
    if node is None or depth > 8:
        return
    if isinstance(node, ast.Name) and node.id in assigned:
        _flags(assigned[node.id], assigned, out, depth + 1)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        _flags(node.left, assigned, out, depth + 1)
        _flags(node.right, assigned, out, depth + 1)
    elif isinstance(node, (ast.List, ast.Tuple)):
        for e in node.elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str) and not e.value.startswith("-gencode"):
                out.flags.append(e.value)
    elif isinstance(node, ast.Call):
        f = node.func
        if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) == "get_nvcc_flags_list":
            v = _kw(node, "supported_major_versions", 0)
            if isinstance(v, (ast.List, ast.Tuple)):
                out.majors = [e.value for e in v.elts if isinstance(e, ast.Constant) and isinstance(e.value, int)]


def modules_in(text: str, file: str) -> dict[str, JitModule]:
    """Every ``gen_jit_spec("NAME", ...)`` call with a literal name in one file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, JitModule] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assigned = {
            t.id: s.value
            for s in ast.walk(fn)
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Name)
        }
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", ""))):
                continue
            if (getattr(call.func, "id", None) or getattr(call.func, "attr", None)) != "gen_jit_spec":
                continue
            name = _kw(call, "name", 0)
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                continue
            m = JitModule(name.value, file, call.lineno)
            srcs = _kw(call, "sources", 1)
            if isinstance(srcs, ast.Name) and srcs.id in assigned:
                srcs = assigned[srcs.id]
            for e in srcs.elts if isinstance(srcs, (ast.List, ast.Tuple)) else ([srcs] if srcs else []):
                p = _path(e)
                if p:
                    m.sources.append(p)
                else:
                    m.unread.append(ast.unparse(e))
            _flags(_kw(call, "extra_cuda_cflags", 3), assigned, m)
            out.setdefault(m.name, m)
    return out


def find(texts: dict[str, str], names: set[str]) -> dict[str, JitModule]:
    """The modules ``names`` among ``texts`` ({logical .py name: text}), in file order."""
    out: dict[str, JitModule] = {}
    for file in sorted(texts):
        if not any(n in texts[file] for n in names):  # cheap: the name is a literal there
            continue
        for name, m in modules_in(texts[file], file).items():
            if name in names:
                out.setdefault(name, m)
    return out
