"""`patchkit gates`: every device gate of a release that is closed for one GPU and open for
another (issue 31).

A gate is an expression whose answer depends on the device: a Python condition, assertion,
flag or argument built from the engine's device checks (their meaning is data:
``predicates`` in patchkit/base/engines.toml), a list of majors or architectures
(``supported_major_versions=[9, 10]``, ``["sm_90a", "sm_100a"]``), or a C/C++/CUDA
``#if``/``#elif`` over ``__CUDA_ARCH__``.  The evaluators of patchkit/core/goals/ answer it in
three values for each device; a gate is *closed* when it is false for the device and true for
the comparison device, and it is reported at its maximal such sub-expression (the operand an
``or-operand`` or ``list-element`` op would widen).  Where the device's answer is unknown (a
parameter, a call not modelled, a build macro), the gate is listed apart as ``unknown``, never
as closed.

Each file is read once and tested cheaply for the words of a device check first; only files
that hold one are parsed (``ast`` for Python; tree-sitter-cpp, optional, for the conditions of
``#if`` lines and, for a file with a closed gate, its functions).  The scan of one file is a
pure function of its text (``python_gates``, ``cpp_gates``); ``scan`` reads a tree.
"""

from __future__ import annotations

import ast
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional

from patchkit.core.goals import pyeval
from patchkit.core.goals.device import Device
from patchkit.upstream import cmakegates

# Path components of third-party code an engine ships (CUTLASS, CuTe DSL copies, CCCL...):
# kept apart and left out unless asked for.  Whole components only: `cute_sm12x_gemm` and
# `cutlass_extensions` are the engine's own.
VENDORED = frozenset(
    "cutlass cute cccl spdlog 3rdparty third_party thirdparty vendor _vendor _vendoring vendored external deps".split()
)
PY_SUFFIXES = (".py",)
CPP_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".inl", ".c")
# A keyword or name that a list of ints is a list of devices for (supported_major_versions,
# archs, sm_list, compute_capabilities...); a list of arch strings is one wherever it stands.
_ARCHY = re.compile(r"major|arch|(^|_)sms?(_|$)|capabilit|(^|_)cc(_|$)|compute_cap", re.I)
_ARCH_STR = re.compile(r"^(sm|compute)_?\d{2,3}[af]?$", re.I)
_ARCH_WORDS = re.compile(rb"""["'](?:sm|compute)_?\d{2,3}[af]?["']|major_versions""")
_FEAT = re.compile(r"__CUDA_ARCH_FEAT_SM(\d+)_ALL")
_DATACENTER = ((7, 0), (8, 0), (9, 0), (10, 0))  # the parts a consumer GPU's gates are compared with


def default_compare(device: Device) -> Device:
    """The nearest datacenter part below ``device``: 10.0 for 12.x and 11.x, 9.0 for 10.0,
    10.0 for 10.3, 8.0 for 8.6/8.9 and 9.0."""
    below = [c for c in _DATACENTER if c < device.capability]
    major, minor = below[-1] if below else _DATACENTER[0]
    return Device(major, minor, device.cuda, device.platform)


@dataclass(frozen=True)
class Gate:
    engine: str
    path: str  # relative to the target root, as the file lies there
    file: str  # the logical name recipes use ("include/flashinfer/comm/x.cuh")
    line: int
    kind: str  # if, elif, while, assert, ifexp, filter, return, flag, binding, argument, arch-list, #if, #elif
    condition: str  # as written (blanks folded)
    why: str  # why it is false for the device (or unknown), from the evaluator
    function: str = ""  # the enclosing function (qualname), "" at module level
    guards: str = ""  # the first call (or declaration) of the branch the device is shut out of
    state: str = "closed"  # closed | unknown
    vendored: bool = False
    open_why: str = ""  # why it is true for the comparison device
    recipes: tuple[str, ...] = ()  # recipes in play whose ops edit it
    branch: str = ""  # a CMake arch list's toolkit branch (cmakegates.py)

    def to_json(self) -> dict:
        d = asdict(self)
        d["recipes"] = list(self.recipes)
        return d


@dataclass
class Scan:
    """What ``scan`` found in one tree."""

    engine: str
    root: str
    version: Optional[str]
    closed: list[Gate] = field(default_factory=list)
    unknown: list[Gate] = field(default_factory=list)
    files: int = 0  # files looked at
    parsed: int = 0  # files that held a device word and were parsed
    vendored_skipped: int = 0
    cpp: bool = True  # tree-sitter was there for the C++ files
    errors: list[str] = field(default_factory=list)  # files that did not parse


# -- Python -------------------------------------------------------------------------------------


def _terminal(pat: ast.expr) -> str:
    while isinstance(pat, ast.Call):
        pat = pat.func
    if isinstance(pat, ast.Attribute):
        return pat.attr
    return pat.id if isinstance(pat, ast.Name) else ""


_DEVICE_NAME = re.compile(r"(^|_)(major|capability|sm|cc|sm_version|arch)(_|$)", re.I)
_DEVICE_NAMES = re.compile(r"\b(major|minor|capability|sm|cap)\b")


class Engine:
    """An engine's predicates, compiled once, and the words that name its device checks."""

    def __init__(self, rows: Iterable) -> None:
        self.preds = pyeval.predicates(tuple(rows))
        by_name = {_terminal(p.pattern): p for p in self.preds}
        device: set[str] = set()
        changed = True
        while changed:  # a check meaning another device check is one too (get_platform().is_sm100)
            changed = False
            for name, p in by_name.items():
                if name in device:
                    continue
                if _DEVICE_NAMES.search(p.means_text) or any(d in p.means_text for d in device):
                    device.add(name)
                    changed = True
        self.words = frozenset(device)
        alts = b"|".join(re.escape(w.encode()) for w in sorted(self.words, key=len, reverse=True))
        self.text_test = re.compile(alts + b"|" + _ARCH_WORDS.pattern) if alts else _ARCH_WORDS
        self.all_words = frozenset(by_name)


@dataclass
class _Site:
    kind: str
    branch: Optional[list] = None  # the statements the gate's truth leads into
    orelse: Optional[list] = None
    archy: bool = False  # a keyword/name that says its list is one of devices
    keyword: str = ""  # the keyword the expression is the value of


class _PyScan:
    def __init__(self, text: str, tree: ast.Module, eng: Engine, device: Device, compare: Device) -> None:
        self.text, self.tree, self.eng, self.device, self.compare = text, tree, eng, device, compare
        self.lines = text.splitlines(keepends=True)
        self.closed: list[tuple] = []
        self.unknown: list[tuple] = []
        self.words = set(eng.words) | self._device_names(tree)
        # what an unknown gate must read itself: a device check, a name bound straight from
        # one, or a name that says it holds the device (device_sm_major, cc_major)
        self.direct = set(eng.words) | self._device_names(tree, rounds=1)
        self._mention: dict[int, bool] = {}
        self._scopes: dict[int, pyeval.Scope] = {}

    def _device_names(self, tree: ast.Module, rounds: int = 8) -> set[str]:
        """Names bound anywhere in the file to something that mentions a device check (a
        cheap filter: the evaluator decides what they mean)."""
        assigns = []
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign):
                assigns.append((n.targets, n.value))
            elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
                assigns.append(([n.target], n.value))
        names: set[str] = set()
        words = set(self.eng.words)
        changed = True
        while changed and rounds:
            changed, rounds = False, rounds - 1
            known = words | names
            for targets, value in assigns:
                if not _mentions(value, known):
                    continue
                for t in targets:
                    for x in _bound_names(t):
                        if x not in names:
                            names.add(x)
                            changed = True
        return names

    def mentions(self, node: ast.AST) -> bool:
        got = self._mention.get(id(node))
        if got is None:
            got = self._mention[id(node)] = _mentions(node, self.words, named=True)
        return got

    def device_part_differs(self, node: ast.expr, stack: list) -> bool:
        """Whether the parts of a condition that read the device are unknown, or answer
        differently on the two devices (else the unknown is elsewhere: run-time state)."""
        for atom in _atoms(node):
            if not self.direct_device(atom):
                continue
            dv, _ = self.answer(atom, self.device, stack, False)
            cv, _ = self.answer(atom, self.compare, stack, False)
            if dv is None or dv != cv:
                return True
        return False

    def direct_device(self, node: ast.AST) -> bool:
        for n in ast.walk(node):
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
            if name and (name in self.direct or _DEVICE_NAME.search(name)):
                return True
        return False

    def scope(self, node: ast.AST) -> pyeval.Scope:
        s = self._scopes.get(id(node))
        if s is None:
            s = self._scopes[id(node)] = pyeval.scope_of(node)
        return s

    # -- the walk over statements ---------------------------------------------------------------

    def run(self) -> None:
        self.block(self.tree.body, [], [])

    def block(self, stmts: list, stack: list, names: list) -> None:
        for st in stmts:
            self.stmt(st, stack, names)

    def stmt(self, st: ast.stmt, stack: list, names: list) -> None:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if self.mentions(st):
                self.block(st.body, stack + [st], names + [st.name])
            return
        if not self.mentions(st):
            return
        ctx = (stack, names)
        if isinstance(st, ast.If):
            kind = "if"
            self.site(st.test, _Site(kind, st.body, st.orelse), ctx)
            self.block(st.body, stack, names)
            if len(st.orelse) == 1 and isinstance(st.orelse[0], ast.If) and _is_elif(st, self.lines):
                self.elif_(st.orelse[0], stack, names)
            else:
                self.block(st.orelse, stack, names)
        elif isinstance(st, ast.While):
            self.site(st.test, _Site("while", st.body, st.orelse), ctx)
            self.block(st.body + st.orelse, stack, names)
        elif isinstance(st, ast.Assert):
            self.site(st.test, _Site("assert"), ctx)
        elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if st.value is not None:
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                archy = any(_ARCHY.search(_target_name(t)) for t in targets)
                at_top = not stack or isinstance(stack[-1], ast.ClassDef)
                self.site(st.value, _Site("flag" if at_top else "binding", archy=archy), ctx)
        elif isinstance(st, ast.Return):
            if st.value is not None:
                self.site(st.value, _Site("return"), ctx)
        elif isinstance(st, ast.Expr):
            if not isinstance(st.value, ast.Constant):
                self.site(st.value, _Site("argument"), ctx)
        elif isinstance(st, (ast.For, ast.AsyncFor)):
            self.site(st.iter, _Site("argument"), ctx)
            self.block(st.body + st.orelse, stack, names)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            for it in st.items:
                self.site(it.context_expr, _Site("argument"), ctx)
            self.block(st.body, stack, names)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            self.block(st.body + st.orelse + st.finalbody, stack, names)
            for h in st.handlers:
                self.block(h.body, stack, names)
        elif type(st).__name__ == "Match":
            for case in st.cases:
                if case.guard is not None:
                    self.site(case.guard, _Site("if", case.body), ctx)
                self.block(case.body, stack, names)

    def elif_(self, st: ast.If, stack: list, names: list) -> None:
        self.site(st.test, _Site("elif", st.body, st.orelse), (stack, names))
        self.block(st.body, stack, names)
        if len(st.orelse) == 1 and isinstance(st.orelse[0], ast.If) and _is_elif(st, self.lines):
            self.elif_(st.orelse[0], stack, names)
        else:
            self.block(st.orelse, stack, names)

    # -- one site: its maximal closed sub-expressions -------------------------------------------

    def env(self, stack: list) -> pyeval.Env:
        chain = [self.scope(f) for f in reversed(stack) if not isinstance(f, ast.ClassDef)]
        if stack and isinstance(stack[-1], ast.ClassDef):
            chain.insert(0, self.scope(stack[-1]))
        chain.append(self.scope(self.tree))
        return pyeval.Env(self.eng.preds, tuple(chain))

    def answer(self, node: ast.expr, dev: Device, stack: list, collection: bool):
        env = self.env(stack)
        v = pyeval.list_admits(node, dev, env) if collection else pyeval.evaluate(node, dev, env)
        return v, env

    def site(self, node: ast.expr, site: _Site, ctx) -> None:
        if not self.mentions(node) and not (site.archy and isinstance(node, (ast.List, ast.Tuple, ast.Set))):
            if not _arch_list(node):
                return
        before = len(self.closed)
        top, top_env = self.find(node, site, ctx, site.kind, top=True)
        if top is False and site.kind in ("if", "elif") and _refuses(site.branch or []):
            del self.closed[before:]  # a refusal (`if not is_sm12x(): raise`) the device is spared
            return
        if len(self.closed) > before:
            return
        tests = ("if", "elif", "while", "assert")
        boolish = isinstance(node, (ast.BoolOp, ast.Compare, ast.UnaryOp))
        if (
            (site.kind in tests or (site.kind == "return" and boolish))
            and top is None
            and self.direct_device(node)
            and self.device_part_differs(node, ctx[0])
        ):
            cv, _ = self.answer(node, self.compare, ctx[0], False)
            if cv is not False:
                self.unknown.append((node, site.kind, ctx, top_env.why[0] if top_env.why else "", None))

    def find(self, node: ast.expr, site: _Site, ctx, kind: str, top: bool = False, negated: bool = False):
        """Report the maximal sub-expressions of ``node`` that are closed for the device and
        open for the comparison device; return the device's answer at ``node`` (and its env)."""
        stack = ctx[0]
        collection = isinstance(node, (ast.List, ast.Tuple, ast.Set))
        if collection:
            if site.archy or _arch_list(node):
                dv, denv = self.answer(node, self.device, stack, True)
                if dv is False:
                    cv, cenv = self.answer(node, self.compare, stack, True)
                    if cv is True:
                        self.closed.append((node, "arch-list", ctx, denv, cenv, site, negated))
                return dv, denv
            for e in node.elts:
                self.find(e, site, ctx, kind)
            return None, pyeval.Env()
        if isinstance(node, (ast.JoinedStr, ast.Lambda, ast.Constant)) or not self.mentions(node):
            return None, pyeval.Env()
        dv, denv = self.answer(node, self.device, stack, False)
        if dv is False and isinstance(node, _BOOLISH):
            cv, cenv = self.answer(node, self.compare, stack, False)
            if cv is True:
                self.closed.append((node, kind, ctx, denv, cenv, site, negated))
                return dv, denv
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.find(node.operand, site, ctx, kind, negated=not negated)
        elif isinstance(node, ast.BoolOp):
            if dv is True and isinstance(node.op, ast.Or):
                return dv, denv  # an operand admits the device already: the others close nothing
            for v in node.values:
                self.find(v, site, ctx, kind, negated=negated)
        elif isinstance(node, ast.IfExp):
            self.find(node.test, _Site("ifexp"), ctx, "ifexp")
            self.find(node.body, site, ctx, kind)
            self.find(node.orelse, site, ctx, kind)
        elif isinstance(node, ast.Call):
            for a in node.args:
                self.find(a, _Site("argument"), ctx, "argument")
            for k in node.keywords:
                archy = bool(k.arg and _ARCHY.search(k.arg))
                self.find(k.value, _Site("argument", archy=archy, keyword=k.arg or ""), ctx, "argument")
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for g in node.generators:
                self.find(g.iter, site, ctx, kind)
                for c in g.ifs:
                    self.find(c, _Site("filter"), ctx, "filter")
        elif isinstance(node, ast.Dict):
            for v in node.values:
                self.find(v, _Site("argument"), ctx, "argument")
        elif isinstance(node, (ast.Compare, ast.BinOp, ast.Subscript, ast.Attribute, ast.Name, ast.NamedExpr)):
            pass  # a comparison or a value is the gate or none: its parts are no conditions
        else:
            for c in ast.iter_child_nodes(node):
                if isinstance(c, ast.expr):
                    self.find(c, site, ctx, kind)
        return dv, denv

    # -- rows -----------------------------------------------------------------------------------

    def segment(self, node: ast.AST) -> str:
        lines = self.lines[node.lineno - 1 : node.end_lineno]
        if not lines:
            return ""
        raw = [ln.encode() for ln in lines]
        if len(raw) == 1:
            raw[0] = raw[0][node.col_offset : node.end_col_offset]
        else:
            raw[0] = raw[0][node.col_offset :]
            raw[-1] = raw[-1][: node.end_col_offset]
        return " ".join(b"".join(raw).decode(errors="replace").split())

    def rows(self) -> tuple[list[dict], list[dict]]:
        closed = []
        for node, kind, (_stack, names), denv, cenv, site, negated in self.closed:
            guards = ""
            if site.branch is not None:
                top_false = not negated
                branch = site.branch if top_false else (site.orelse or [])
                guards = _first_call(branch) if branch else ""
                if not top_false and not guards:
                    raised = next((s for s in site.branch if isinstance(s, ast.Raise)), None)
                    if raised is not None and raised.exc is not None:
                        guards = "raises " + _call_name(raised.exc)
            elif kind == "ifexp":
                guards = ""
            shown = self.segment(node)
            why, open_why = _why(denv, self.device), _why(cenv, self.compare, word="true")
            if kind == "arch-list":
                if site.keyword:
                    shown = f"{site.keyword}={shown}"
                why = f"false for {self.device}: no element admits it"
                open_why = f"true for {self.compare}"
            closed.append(
                {
                    "line": node.lineno,
                    "kind": kind,
                    "condition": shown,
                    "why": why,
                    "open_why": open_why,
                    "function": ".".join(names),
                    "guards": guards,
                }
            )
        unknown = []
        for node, kind, (_stack, names), why, _ in self.unknown:
            unknown.append(
                {
                    "line": node.lineno,
                    "kind": kind,
                    "condition": self.segment(node),
                    "why": f"unknown for {self.device}: {why}" if why else f"unknown for {self.device}",
                    "function": ".".join(names),
                    "state": "unknown",
                }
            )
        return closed, unknown


_BOOLISH = (ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Call, ast.Attribute, ast.Name, ast.Subscript, ast.NamedExpr)


def _mentions(node: ast.AST, words, named: bool = False) -> bool:
    """``node`` reads one of ``words`` (or, ``named``, a name that says it holds the device:
    ``major``, ``cc_major``), a keyword of devices, or an architecture string."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            if n.id in words or (named and _DEVICE_NAME.search(n.id)):
                return True
        elif isinstance(n, ast.Attribute):
            if n.attr in words or (named and _DEVICE_NAME.search(n.attr)):
                return True
        elif isinstance(n, ast.keyword):
            if n.arg and _ARCHY.search(n.arg) and isinstance(n.value, (ast.List, ast.Tuple, ast.Set, ast.Name)):
                return True
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 12:
            if _ARCH_STR.match(n.value):
                return True
    return False


def _refuses(stmts: list) -> bool:
    """A branch that refuses: it raises at its top level."""
    return any(isinstance(st, ast.Raise) for st in stmts)


def _atoms(node: ast.expr) -> list:
    """The operands of a condition's and/or/not tree."""
    if isinstance(node, ast.BoolOp):
        return [a for v in node.values for a in _atoms(v)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _atoms(node.operand)
    return [node]


def _bound_names(t: ast.expr) -> list[str]:
    """The names a target binds (``self.flag = ...`` binds ``flag``, never ``self``)."""
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, ast.Attribute):
        return [t.attr]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _bound_names(e)]
    if isinstance(t, ast.Starred):
        return _bound_names(t.value)
    return []


def _is_elif(st: ast.If, lines: list[str]) -> bool:
    inner = st.orelse[0]
    text = lines[inner.lineno - 1] if inner.lineno - 1 < len(lines) else ""
    return text.lstrip().startswith("elif")


def _target_name(t: ast.expr) -> str:
    if isinstance(t, ast.Name):
        return t.id
    if isinstance(t, ast.Attribute):
        return t.attr
    return ""


def _arch_list(node: ast.AST) -> bool:
    """A list whose elements are all architecture strings ("sm_90a", "compute_100")."""
    return (
        isinstance(node, (ast.List, ast.Tuple, ast.Set))
        and bool(node.elts)
        and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) and _ARCH_STR.match(e.value) for e in node.elts
        )
    )


def _call_name(node: ast.AST) -> str:
    f = node.func if isinstance(node, ast.Call) else node
    try:
        s = ast.unparse(f)
    except Exception:  # pragma: no cover
        return ""
    return s if len(s) <= 60 else s[:57] + "..."


def _first_call(stmts: list) -> str:
    best = None
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Call):
                key = (n.lineno, n.col_offset)
                if best is None or key < best[0]:
                    best = (key, n)
        if best is not None:
            break
    return _call_name(best[1]) if best else ""


def _why(env: pyeval.Env, device: Device, word: str = "false") -> str:
    if env.notes:
        return f"{word} for {device}: " + "; ".join(env.notes[:4])
    return f"{word} for {device}"


def python_gates(text: str, eng: Engine, device: Device, compare: Device) -> tuple[list[dict], list[dict]]:
    """The closed and the unknown gates of one Python source, as rows (line, kind,
    condition, why, function, guards). SyntaxError for a file that does not parse."""
    tree = ast.parse(text)
    s = _PyScan(text, tree, eng, device, compare)
    s.run()
    return s.rows()


# -- C++ / CUDA ---------------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^\s*#\s*(if|elif)\b(.*)$")


def _directives(text: str) -> list[tuple[int, str, str]]:
    """(line, directive, condition) of every #if/#elif line naming __CUDA_ARCH (continued
    lines joined)."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        start = i
        if m:
            cond = m.group(2)
            while cond.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cond = cond.rstrip()[:-1] + " " + lines[i]
            cond = re.sub(r"/\*.*?\*/", " ", cond)
            cond = cond.split("//")[0]
            if "__CUDA_ARCH" in cond:
                out.append((start + 1, m.group(1), " ".join(cond.split())))
        i += 1
    return out


def _cpp_defines(cond: str, device: Device) -> dict:
    """What the device pass of a build for ``device`` defines among the arch macros the
    condition reads: __CUDA_ARCH__, and __CUDA_ARCH_FEAT_SMxxx_ALL (the arch-specific
    ``sm_XXXa`` build: defined only for the device's own SM)."""
    d: dict = {"__CUDA_ARCH__": device.cuda_arch}
    for m in _FEAT.finditer(cond):
        d[m.group(0)] = int(m.group(1)) == device.sm
    return d


def _cpp_eval(node, device: Device, cond: str):
    from patchkit.core.goals.cppeval import _Eval, _truth

    macros = _cpp_defines(cond, device)
    ev = _Eval(
        device,
        {k: int(v) for k, v in macros.items() if v is not False},
        {k: v is not False for k, v in macros.items()},
        True,
    )
    return _truth(ev.value(node)), ev.why


def _cpp_find(node, device: Device, compare: Device, cond: str, out: list) -> Optional[bool]:
    dv, why = _cpp_eval(node, device, cond)
    if dv is False:
        cv, _ = _cpp_eval(node, compare, cond)
        if cv is True:
            out.append(node)
            return dv
    t = node.type
    if t == "parenthesized_expression":
        for c in node.named_children:
            _cpp_find(c, device, compare, cond, out)
    elif t == "binary_expression":
        op = node.child_by_field_name("operator").text.decode()
        if op == "||" and dv is True:
            return dv  # an operand admits the device already: the others close nothing
        if op in ("&&", "||"):
            _cpp_find(node.child_by_field_name("left"), device, compare, cond, out)
            _cpp_find(node.child_by_field_name("right"), device, compare, cond, out)
    elif t == "unary_expression" and node.child_by_field_name("operator").text.decode() == "!":
        _cpp_find(node.child_by_field_name("argument"), device, compare, cond, out)
    return dv


def _cpp_atoms(node) -> list:
    t = node.type
    if t == "parenthesized_expression":
        return [a for c in node.named_children for a in _cpp_atoms(c)]
    if t == "binary_expression" and node.child_by_field_name("operator").text.decode() in ("&&", "||"):
        return _cpp_atoms(node.child_by_field_name("left")) + _cpp_atoms(node.child_by_field_name("right"))
    if t == "unary_expression" and node.child_by_field_name("operator").text.decode() == "!":
        return _cpp_atoms(node.child_by_field_name("argument"))
    return [node]


def _arch_part_differs(node, device: Device, compare: Device, cond: str) -> bool:
    for atom in _cpp_atoms(node):
        if b"__CUDA_ARCH" not in atom.text or atom.type == "preproc_defined":
            continue
        dv, _ = _cpp_eval(atom, device, cond)
        cv, _ = _cpp_eval(atom, compare, cond)
        if dv is None or dv != cv:
            return True
    return False


def cpp_gates(text: str, device: Device, compare: Device) -> Optional[tuple[list[dict], list[dict]]]:
    """The closed and unknown ``#if``/``#elif`` gates over __CUDA_ARCH__ of one C/C++/CUDA
    source; None without tree-sitter."""
    from patchkit.core.goals import cppeval

    parser = cppeval._parser()
    if parser is None:
        return None
    closed, unknown = [], []
    found = _directives(text)
    for line, directive, cond in found:
        tree = parser.parse(f"#if {cond}\n#endif\n".encode())
        root = tree.root_node.children[0] if tree.root_node.children else None
        cnode = root.child_by_field_name("condition") if root is not None and root.type == "preproc_if" else None
        if cnode is None or tree.root_node.has_error:
            continue
        hits: list = []
        top = _cpp_find(cnode, device, compare, cond, hits)
        for h in hits:
            shown = " ".join(h.text.decode(errors="replace").split())
            dv, why = _cpp_eval(h, device, cond)
            feat = " (in the sm_XXXa build)" if _FEAT.search(shown) else ""
            closed.append(
                {
                    "line": line,
                    "kind": "#" + directive,
                    "condition": shown,
                    "why": f"false for {device}: __CUDA_ARCH__ is {device.cuda_arch}{feat}",
                    "open_why": f"true for {compare}: __CUDA_ARCH__ is {compare.cuda_arch}",
                    "directive": cond,
                }
            )
        if not hits and top is None and _arch_part_differs(cnode, device, compare, cond):
            _, why = _cpp_eval(cnode, device, cond)
            cv, _ = _cpp_eval(cnode, compare, cond)
            if cv is not False:
                unknown.append(
                    {
                        "line": line,
                        "kind": "#" + directive,
                        "condition": cond,
                        "why": f"unknown for {device}: {why[0]}" if why else f"unknown for {device}",
                        "state": "unknown",
                    }
                )
    if closed:
        _cpp_context(parser, text, closed)
    return closed, unknown


def _cpp_context(parser, text: str, rows: list[dict]) -> None:
    """The enclosing function of each row's directive, and the first declaration or
    statement it guards, from one parse of the file."""
    data = text.encode()
    tree = parser.parse(data)
    want = {r["line"]: r for r in rows}
    stack = [tree.root_node]
    funcs: list[tuple[int, int, str]] = []
    guarded: dict[int, str] = {}
    while stack:
        node = stack.pop()
        t = node.type
        if t == "function_definition":
            name = _declarator_name(node)
            if name:
                funcs.append((node.start_point[0] + 1, node.end_point[0] + 1, name))
        if t in ("preproc_if", "preproc_elif") and node.start_point[0] + 1 in want:
            cond = node.child_by_field_name("condition")
            for c in node.named_children:
                if (cond is not None and c.start_byte == cond.start_byte) or c.type in (
                    "comment",
                    "preproc_elif",
                    "preproc_else",
                ):
                    continue
                first = c.text.decode(errors="replace").strip().split("\n")[0]
                guarded[node.start_point[0] + 1] = first if len(first) <= 80 else first[:77] + "..."
                break
        stack.extend(node.children)
    for line, r in want.items():
        inside = [f for f in funcs if f[0] <= line <= f[1]]
        if inside:
            r["function"] = min(inside, key=lambda f: f[1] - f[0])[2]
        if line in guarded:
            r["guards"] = guarded[line]


_NAMES = ("identifier", "field_identifier", "qualified_identifier", "destructor_name", "operator_name")


def _declarator_name(node) -> str:
    d = node.child_by_field_name("declarator")
    while d is not None and d.type not in _NAMES:
        d = d.child_by_field_name("declarator")
    return d.text.decode(errors="replace") if d is not None else ""


# -- a tree ---------------------------------------------------------------------------------------


def is_vendored(relpath: str) -> bool:
    return any(part in VENDORED for part in relpath.split("/")[:-1])


def _files(root: Path, engine: str, layout: str) -> list[tuple[str, str]]:
    """(path relative to root, logical name) of the tree's Python and C++ files, sorted."""
    from patchkit.base.engines import ENGINES

    prefixes = ENGINES[engine].layouts[layout]
    seen: dict[str, str] = {}
    for _, pp in prefixes:
        base = root / pp
        if base.is_file():
            if pp.endswith(PY_SUFFIXES + CPP_SUFFIXES) or cmakegates.is_cmake(pp):
                seen.setdefault(pp, pp)
            continue
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__", ".patchkit"))
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            for f in filenames:
                if f.endswith(PY_SUFFIXES + CPP_SUFFIXES) or cmakegates.is_cmake(f):
                    rel = f if rel_dir == "." else f"{rel_dir}/{f}"
                    seen.setdefault(rel, rel)
    out = []
    for rel in sorted(seen):
        best = max((p for p in prefixes if rel.startswith(p[1])), key=lambda p: len(p[1]), default=None)
        logical = best[0] + rel[len(best[1]) :] if best else rel
        out.append((rel, logical))
    return out


_ENGINES: dict[str, Engine] = {}


def engine_words(engine: str) -> Engine:
    from patchkit.base.engines import ENGINES

    if engine not in _ENGINES:
        _ENGINES[engine] = Engine(ENGINES[engine].predicates)
    return _ENGINES[engine]


def _scan_file(args) -> tuple[str, str, Optional[tuple], Optional[str], bool]:
    """(rel, logical, (closed, unknown) or None if no device word, error, parsed)."""
    root, rel, logical, engine, dev, cmp_ = args
    device, compare = Device.parse(dev), Device.parse(cmp_)
    try:
        data = (Path(root) / rel).read_bytes()
    except OSError as e:
        return rel, logical, None, f"{rel}: {e.strerror or e}", False
    if rel.endswith(PY_SUFFIXES):
        eng = engine_words(engine)
        if not eng.text_test.search(data):
            return rel, logical, None, None, False
        try:
            got = python_gates(data.decode("utf-8", errors="replace"), eng, device, compare)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            return rel, logical, None, f"{rel}: does not parse ({type(e).__name__})", True
        return rel, logical, got, None, True
    if cmakegates.is_cmake(rel):  # CMake arch lists (cmakegates.py)
        got = cmakegates.cmake_gates(data.decode("utf-8", "replace"), device, compare)
        return rel, logical, got, None if got is not None else f"{rel}: {cmakegates.NOT_READ}", got is not None
    if b"__CUDA_ARCH" not in data:
        return rel, logical, None, None, False
    got = cpp_gates(data.decode("utf-8", errors="replace"), device, compare)
    return rel, logical, got, None, True


def scan(
    engine: str,
    root: Path,
    layout: str,
    version: Optional[str],
    device: Device,
    compare: Device,
    vendored: bool = False,
    jobs: int = 0,
    only: Optional[set] = None,
) -> Scan:
    """Every closed (and unknown) gate of the tree at ``root``, in file and line order;
    ``only``: these files (paths relative to ``root``) alone."""
    from patchkit.core.goals import cppeval

    out = Scan(engine, str(root), version, cpp=cppeval.available())
    files = [f for f in _files(root, engine, layout) if only is None or f[0] in only]
    todo = []
    for rel, logical in files:
        v = is_vendored(rel)
        if v and not vendored:
            out.vendored_skipped += 1
            continue
        if rel.endswith(CPP_SUFFIXES) and not out.cpp:
            continue
        todo.append((str(root), rel, logical, engine, _spec(device), _spec(compare)))
    out.files = len(todo)
    jobs = jobs or min(len(todo) // 200 + 1, os.cpu_count() or 1, 4)
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_scan_file, todo, chunksize=32))
    else:
        results = [_scan_file(t) for t in todo]
    for rel, logical, got, err, parsed in results:
        out.parsed += parsed
        if err:
            out.errors.append(err)
        if not got:
            continue
        closed, unknown = got
        v = is_vendored(rel)
        for row, dest in [(r, out.closed) for r in closed] + [(r, out.unknown) for r in unknown]:
            row = dict(row)
            row.pop("directive", None)
            dest.append(Gate(engine=engine, path=rel, file=logical, vendored=v, **row))
    return out


def _spec(device: Device) -> str:
    return device.spec


# -- recipes in play ------------------------------------------------------------------------------


def mark_recipes(result: Scan, recipes: Iterable) -> None:
    """Name, on each closed gate, the recipes in play with an op on its file and function (a
    whole-file op on a C++ file: one whose text holds the gate's condition)."""
    ops: list[tuple[str, object]] = []
    for r in recipes:
        try:
            cut, _ = r.for_versions({result.engine: result.version})
        except Exception:
            cut = r
        ops += [(r.id, op) for op in cut.ops if op.engine == result.engine]
    if not ops:
        return
    marked = []
    for g in result.closed:
        ids = []
        for rid, op in ops:
            if op.file != g.file or rid in ids:
                continue
            if op.scope:
                if (op.scope == g.function or g.function.startswith(op.scope + ".")) and _op_reads(op, g):
                    ids.append(rid)
            elif g.kind.startswith("#") or op.kind.startswith("text"):
                find = str(getattr(op.impl, "find", "") or "")
                if not find or g.condition in " ".join(find.split()):
                    ids.append(rid)
        marked.append(replace(g, recipes=tuple(ids)) if ids else g)
    result.closed = marked


# op kinds that add code beside a gate, never widen one
_NOT_GATE_EDITS = frozenset({"ensure-import", "insert", "set-default", "dict-entry", "delete-stmt"})


def _op_reads(op, g: Gate) -> bool:
    """An or-/and-operand op whose operands all stand in the gate's condition, a
    list-element op on the gate's keyword; any other op of the scope counts."""
    if op.kind in _NOT_GATE_EDITS:
        return False
    flat = "".join(g.condition.split())
    operands = getattr(op.impl, "operands", None)
    if op.kind in ("or-operand", "and-operand") and operands:
        return all("".join(o) in flat for o in operands)
    if op.kind == "list-element":
        kw = getattr(op.impl, "keyword", None)
        return g.kind == "arch-list" and (not kw or flat.startswith(kw + "="))
    return True


# -- grouping -------------------------------------------------------------------------------------


def groups(gates: list[Gate]) -> list[tuple[str, str, list[Gate]]]:
    """(path, function, gates) in file order: what a person reads, one group per function."""
    out: dict[tuple[str, str], list[Gate]] = {}
    for g in gates:
        out.setdefault((g.path, g.function), []).append(g)
    return [(p, f, gs) for (p, f), gs in out.items()]
