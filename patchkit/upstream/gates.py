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

Each file is read once and tested cheaply for the words of a device check first (a bytes
search for each word, then the words' pattern); only files that hold one are parsed (``ast``
for Python, walked once to index its device words and bindings; tree-sitter-cpp, optional,
for the conditions of ``#if`` lines, found by a search for ``#``, and, for a file with a
closed gate, the functions around its lines).  The scan of one file is a pure function of its
text (``python_gates``, ``cpp_gates``); ``scan`` reads a tree, on several processes where it
is large, and keeps what it found in patchkit's cache: a file's rows under its bytes, a whole
tree's under its files' identities, so a tree scanned before is answered without parsing.
"""

from __future__ import annotations

import ast
import bisect
import gc
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional

from patchkit.core.goals import pyeval
from patchkit.core.goals.device import Device
from patchkit.upstream import cmakegates, cppgates

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
_ARCH_NEEDLES = (b'"sm', b"'sm", b'"compute', b"'compute", b"major_versions")  # one is in each match
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
    cached: int = 0  # parsed files whose rows came from patchkit's cache
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
        # What every match of text_test holds: each word no other word is part of, and the
        # arch words' literal parts.  A bytes search for each is far cheaper than the
        # alternation over a file that holds none (most files).
        words = sorted(self.words)
        self.needles = tuple(w.encode() for w in words if not any(o != w and o in w for o in words)) + _ARCH_NEEDLES
        self.all_words = frozenset(by_name)

    def holds_words(self, data: bytes) -> bool:
        """Whether a file's bytes name a device check or an arch word (``text_test``)."""
        return any(n in data for n in self.needles) and self.text_test.search(data) is not None


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
        # one walk of the file: the bindings that may carry a device check, and which nodes
        # read a device word (a node mentions one when it, or a node below it, does)
        self._parent: dict[int, ast.AST] = {}
        assigns, named, self._walrus, self._declares = _index(tree, self._parent)
        self.words = set(eng.words) | self._device_names(assigns, rounds=8)
        # what an unknown gate must read itself: a device check, a name bound straight from
        # one, or a name that says it holds the device (device_sm_major, cc_major)
        self.direct = set(eng.words) | self._device_names(assigns, rounds=1)
        self._mentioning = self._mark(named)
        self._scopes: dict[int, pyeval.Scope] = {}

    def _device_names(self, assigns: list, rounds: int) -> set[str]:
        """Names bound anywhere in the file to something that mentions a device check (a
        cheap filter: the evaluator decides what they mean)."""
        names: set[str] = set()
        words = set(self.eng.words)
        changed = True
        while changed and rounds:
            changed, rounds = False, rounds - 1
            known = words | names
            for targets, reads, static in assigns:
                if not static and reads.isdisjoint(known):
                    continue
                for t in targets:
                    for x in _bound_names(t):
                        if x not in names:
                            names.add(x)
                            changed = True
        return names

    def _mark(self, named: list) -> set[int]:
        """The ids of the nodes that mention a device word (``_mentions`` with ``named``):
        each node that reads one itself, and every node above it."""
        out: set[int] = set()
        words, parent = self.words, self._parent
        for n, name in named:
            if name is not None and not (name in words or _device_name(name)):
                continue
            i = id(n)
            while i not in out:
                out.add(i)
                up = parent.get(i)
                if up is None:
                    break
                i = id(up)
        return out

    def mentions(self, node: ast.AST) -> bool:
        return id(node) in self._mentioning

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
        for n in _walk(node):
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
            if name and (name in self.direct or _device_name(name)):
                return True
        return False

    def scope(self, node: ast.AST) -> pyeval.Scope:
        s = self._scopes.get(id(node))
        if s is None:
            s = self._scopes[id(node)] = pyeval.scope_of(node, self._walrus, self._declares)
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

    def env(self, stack: list, explain: bool = False) -> pyeval.Env:
        chain = [self.scope(f) for f in reversed(stack) if not isinstance(f, ast.ClassDef)]
        if stack and isinstance(stack[-1], ast.ClassDef):
            chain.insert(0, self.scope(stack[-1]))
        chain.append(self.scope(self.tree))
        return pyeval.Env(self.eng.preds, tuple(chain), explain=explain)

    def answer(self, node: ast.expr, dev: Device, stack: list, collection: bool, explain: bool = False):
        """The device's answer at ``node`` and its env; ``explain``: its first unknown shown
        with its source (only an unknown row reads it, so only its answer pays for it)."""
        env = self.env(stack, explain)
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
                why = ""
                if top_env.why:  # the top answer again, explained (find's: a collection's as a list)
                    collection = isinstance(node, (ast.List, ast.Tuple, ast.Set))
                    why = self.answer(node, self.device, ctx[0], collection, explain=True)[1].why[0]
                self.unknown.append((node, site.kind, ctx, why, None))

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


# Fields that hold no name, keyword or constant (load/store contexts, operators): a walk
# that looks for device words need not enter them.
_NO_WORDS = frozenset({"ctx", "op", "ops"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def _children(node: ast.AST) -> list:
    """The child nodes of ``node`` that ``ast.walk`` would visit, but contexts and operators."""
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = _FIELDS[type(node)] = tuple(f for f in node._fields if f not in _NO_WORDS)
    out = []
    for f in fields:
        v = getattr(node, f, None)
        if isinstance(v, ast.AST):
            out.append(v)
        elif isinstance(v, list):
            out += [x for x in v if isinstance(x, ast.AST)]
    return out


def _walk(node: ast.AST) -> list:
    """``node`` and every node below it (as ``ast.walk``, in another order, without contexts
    and operators)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack += _children(n)
    return out


def _static_mention(n: ast.AST) -> bool:
    """A node that says it is about devices whatever the file binds: a keyword of devices
    (``supported_major_versions=[9, 10]``) or an architecture string."""
    if isinstance(n, ast.keyword):
        return bool(n.arg and _ARCHY.search(n.arg) and isinstance(n.value, (ast.List, ast.Tuple, ast.Set, ast.Name)))
    return (
        isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and len(n.value) < 12
        and bool(_ARCH_STR.match(n.value))
    )


def _index(tree: ast.Module, parent: dict) -> tuple[list, list, bool, bool]:
    """One walk of a module: fills ``parent`` (a node's id: the node above it) and returns
    the bindings (targets, the names and attributes their value reads, whether it holds a
    keyword of devices or an arch string), the nodes that may read a device word (a Name or
    Attribute with its name; a device keyword or arch string with None), and whether the
    module holds a ``:=`` and a ``global``/``nonlocal`` statement (pyeval.scope_of)."""
    assigns: list[tuple[list, set, list]] = []  # (targets, reads, [static])
    named: list = []
    walrus = declares = False
    AST, Name, Attribute, Constant, keyword = ast.AST, ast.Name, ast.Attribute, ast.Constant, ast.keyword
    arch = _ARCH_STR.match
    # each node with the bindings whose value it stands in (a := inside a value: two); a
    # name or a constant (most nodes, and leaves) is read where it is met, never stacked
    stack: list = [(tree, ())]
    push = stack.append
    while stack:
        n, owners = stack.pop()
        t = type(n)
        value = None
        if t is Attribute:
            named.append((n, n.attr))
            for o in owners:
                o[1].add(n.attr)
        elif t is keyword:
            if _static_mention(n):
                named.append((n, None))
                for o in owners:
                    o[2][0] = True
        elif t is ast.Assign:
            value = (n.targets, set(), [False])
        elif (t is ast.AnnAssign or t is ast.NamedExpr) and n.value is not None:
            value = ([n.target], set(), [False])
            walrus = walrus or t is ast.NamedExpr
        elif t is ast.Global or t is ast.Nonlocal:
            declares = True
        if value is not None:
            assigns.append(value)
        fields = _FIELDS.get(t)
        if fields is None:
            fields = _FIELDS[t] = tuple(f for f in t._fields if f not in _NO_WORDS)
        for f in fields:
            v = getattr(n, f, None)
            if type(v) is list:
                kids = v
            elif isinstance(v, AST):
                kids = (v,)
            else:
                continue
            inner = owners + (value,) if value is not None and f == "value" else owners
            for x in kids:
                tx = type(x)
                if tx is Constant:
                    c = x.value
                    if type(c) is str and len(c) < 12 and arch(c):  # an arch string (_static_mention)
                        parent[id(x)] = n
                        named.append((x, None))
                        for o in inner:
                            o[2][0] = True
                elif tx is Name:  # its only child is its context
                    parent[id(x)] = n
                    named.append((x, x.id))
                    for o in inner:
                        o[1].add(x.id)
                elif isinstance(x, AST):
                    parent[id(x)] = n
                    push((x, inner))
    return [(targets, reads, static[0]) for targets, reads, static in assigns], named, walrus, declares


_device_name_seen: dict[str, bool] = {}


def _device_name(name: str) -> bool:
    """A name that says it holds the device (``major``, ``cc_major``, ``sm_version``)."""
    got = _device_name_seen.get(name)
    if got is None:
        got = _device_name_seen[name] = bool(_DEVICE_NAME.search(name))
    return got


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

# An #if/#elif from its `#` (a fast search for the `#`); only blanks may stand before it
# on its line.  Blanks are ``\s`` but the newline, as on a line of its own.
_DIRECTIVE = re.compile(r"#[^\S\n]*(if|elif)\b(.*)$", re.M)
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/")


def _directives(text: str) -> list[tuple[int, str, str]]:
    """(line, directive, condition) of every #if/#elif line naming __CUDA_ARCH (continued
    lines joined; a continued line is no directive of its own)."""
    out: list[tuple[int, str, str]] = []
    lines: Optional[list[str]] = None
    line = pos = after = 0  # the match's line (0-based), its offset, the first line not yet joined
    for m in _DIRECTIVE.finditer(text):
        start = m.start()
        bol = text.rfind("\n", 0, start) + 1
        if text[bol:start].strip():
            continue  # code before the `#`: no directive
        line += text.count("\n", pos, start)
        pos = start
        if line < after:
            continue
        cond, i = m.group(2), line
        if cond.rstrip().endswith("\\"):
            lines = text.split("\n") if lines is None else lines
            while cond.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cond = cond.rstrip()[:-1] + " " + lines[i]
        after = i + 1
        cond = _BLOCK_COMMENT.sub(" ", cond)
        cond = cond.split("//")[0]
        if "__CUDA_ARCH" in cond:
            out.append((line + 1, m.group(1), " ".join(cond.split())))
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
    """The closed and unknown gates of one C/C++/CUDA source: ``#if``/``#elif`` over
    __CUDA_ARCH__, and run-time capability checks (cppgates.py); None without tree-sitter."""
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
    data = text.encode()
    holds = cppgates.holds_words(data)
    tree = parser.parse(data) if closed or holds else None
    if closed:
        _cpp_context(tree, closed)
    if holds:
        more, undecided = cppgates.runtime_gates(data, tree.root_node, device, compare, holds=True)
        if more or undecided:
            closed = sorted(closed + more, key=lambda r: r["line"])
            unknown = sorted(unknown + undecided, key=lambda r: r["line"])
    return closed, unknown


def _cpp_context(tree, rows: list[dict]) -> None:
    """The enclosing function of each row's directive, and the first declaration or
    statement it guards, from one parse of the file."""
    want = {r["line"]: r for r in rows}
    lines = sorted(want)
    stack = [tree.root_node]
    funcs: list[tuple[int, int, str]] = []
    guarded: dict[int, str] = {}
    while stack:
        node = stack.pop()
        # only what holds a row's line: a function around it, the directive at it
        top, bottom = node.start_point[0] + 1, node.end_point[0] + 1
        k = bisect.bisect_left(lines, top)
        if k == len(lines) or lines[k] > bottom:
            continue
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


# -- the cache ------------------------------------------------------------------------------------
#
# A scan is a pure function of the scanned files' bytes, the engine's predicates, the two
# devices and patchkit's code (and tree-sitter's, for C++).  Two kinds of entry keep it, both
# in patchkit's store (patchkit/base/store.py; one the store misses, or of another shape, is
# computed again):
#
# * ``gates/files/<key>``: one file's rows, keyed by the digest of its bytes (and the rest
#   above).  A file edited, a release that shares most files with one scanned before, a
#   copy of a tree elsewhere: only the files whose bytes are new are parsed.
# * ``gates/trees/<key>``: a whole scan's rows, keyed by the scanned files' names and
#   identities (device, inode, mode, size, mtime, ctime: what a change to a file changes, as
#   git's index and verdicts.tree_state know it), so that a scan of an unchanged tree reads
#   no file.  A tree with a file changed less than verdicts.RACY_NS before is not kept (a
#   second change in the same tick could not be told); its files' entries still are.

_FORMAT = 1
_ROW_TYPES = {
    "line": int,
    "kind": str,
    "condition": str,
    "why": str,
    "open_why": str,
    "function": str,
    "guards": str,
    "state": str,
    "branch": str,
}
_ROW_NEEDS = frozenset(("line", "kind", "condition", "why"))


def _rows_fit(rows) -> bool:
    """Rows as the scan makes them (a cache entry's, checked before use: patchkit/base/shape.py's rule)."""
    return isinstance(rows, list) and all(
        isinstance(r, dict)
        and _ROW_NEEDS <= r.keys()
        and all(k in _ROW_TYPES and type(v) is _ROW_TYPES[k] for k, v in r.items())
        for r in rows
    )


def _salt(engine: str, device: Device, compare: Device, cpp: bool) -> str:
    """What every entry of this scan is keyed on besides its files: patchkit's code, the
    engine's predicates (a user's engines.toml may define them), the two devices and the
    C++ and CMake parsers (tree-sitter's own code, by path, size and mtime)."""
    from patchkit.base.engines import ENGINES
    from patchkit.core.goals import grammar
    from patchkit.core.verdicts import code_hash, digest_of

    parser = ""
    mods = grammar.modules() if cpp else grammar.modules(("tree_sitter_cmake",))
    for mod in mods:
        f = getattr(mod, "__file__", None) or ""
        try:
            st = os.stat(f)
            parser += f"{f}|{st.st_size}|{st.st_mtime_ns};"
        except OSError:
            parser += f"{f}|?;"
    parts = [code_hash(), engine, repr(ENGINES[engine].predicates), _spec(device), _spec(compare), parser]
    return digest_of("\n".join(parts).encode())


def _file_key(salt: str, kind: str, data: bytes) -> str:
    from patchkit.core.verdicts import digest_of

    return digest_of(f"{salt}|{kind}|{digest_of(data)}".encode())


def _file_entry(key: str) -> Optional[tuple[list, list, Optional[str]]]:
    from patchkit.base import store

    doc = store.get_json("gates/files", key, dict, _FORMAT)
    if doc is None:
        return None
    closed, unknown, error = doc.get("closed"), doc.get("unknown"), doc.get("error")
    if not (_rows_fit(closed) and _rows_fit(unknown) and (error is None or isinstance(error, str))):
        return None
    return closed, unknown, error


def _keep_file(key: str, closed: list, unknown: list, error: Optional[str]) -> None:
    from patchkit.base import store

    store.put_json("gates/files", key, {"closed": closed, "unknown": unknown, "error": error}, _FORMAT)


def _tree_key(salt: str, root: Path, files: list, todo: list, vendored: bool) -> Optional[str]:
    """The key of a whole scan: every listed file by name, each scanned one by identity;
    None when one cannot be looked at or changed less than verdicts.RACY_NS ago."""
    import time

    from patchkit.core.verdicts import RACY_NS, digest_of

    now = time.time_ns()
    scanned = {rel for rel, _ in todo}
    parts = [salt, f"vendored={vendored}"]
    base = str(root)
    for rel, logical in files:
        if rel not in scanned:
            parts.append(f"{rel}|{logical}|-")
            continue
        try:
            st = os.stat(f"{base}/{rel}")
        except OSError:
            return None
        if max(st.st_mtime_ns, st.st_ctime_ns) > now - RACY_NS:
            return None
        parts.append(
            f"{rel}|{logical}|{st.st_dev}|{st.st_ino}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"
        )
    return digest_of("\n".join(parts).encode())


def _tree_entry(key: str) -> Optional[list]:
    from patchkit.base import store

    doc = store.get_json("gates/trees", key, {"results": list}, _FORMAT)
    results = doc["results"] if doc is not None else None
    for r in results or ():
        if not (
            isinstance(r, list)
            and len(r) == 5
            and isinstance(r[0], str)
            and _rows_fit(r[1])
            and _rows_fit(r[2])
            and (r[3] is None or isinstance(r[3], str))
            and type(r[4]) is bool
        ):
            return None
    return results


def _keep_tree(key: str, results: list) -> None:
    from patchkit.base import store

    store.put_json("gates/trees", key, {"results": results}, _FORMAT)


# -- one file, a tree ------------------------------------------------------------------------------


def _scan_file(args) -> tuple[str, Optional[list], Optional[list], Optional[str], bool, bool, bool]:
    """(rel, closed rows or None if no device word, unknown rows, error, parsed, from the
    cache, may be kept) of one file, its rows from the cache where its bytes were scanned
    before."""
    root, rel, engine, dev, cmp_, salt = args
    try:
        data = (Path(root) / rel).read_bytes()
    except OSError as e:
        return rel, None, None, f"{rel}: {e.strerror or e}", False, False, False
    python = rel.endswith(PY_SUFFIXES)
    cmake = not python and cmakegates.is_cmake(rel)  # CMake arch lists (cmakegates.py)
    if python:
        eng = engine_words(engine)
        if not eng.holds_words(data):
            return rel, None, None, None, False, False, True
    elif not cmake and b"__CUDA_ARCH" not in data and not cppgates.holds_words(data):
        return rel, None, None, None, False, False, True
    key = _file_key(salt, "py" if python else "cmake" if cmake else "cpp", data) if salt else None
    hit = _file_entry(key) if key else None
    if hit is not None:
        closed, unknown, error = hit
        return rel, closed, unknown, f"{rel}: {error}" if error else None, True, True, True
    device, compare = Device.parse(dev), Device.parse(cmp_)
    error, keep = None, True
    # A module's tree is millions of objects and holds no cycle: the cycle collector's passes
    # over them while it is parsed and walked were a third of the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if python:
            try:
                closed, unknown = python_gates(data.decode("utf-8", errors="replace"), eng, device, compare)
            except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
                closed, unknown = [], []
                error = f"does not parse ({type(e).__name__})"
                keep = not isinstance(e, MemoryError)  # this machine's, this time
        elif cmake:
            got = cmakegates.cmake_gates(data.decode("utf-8", "replace"), device, compare)
            closed, unknown = got if got is not None else ([], [])
            if got is None:  # no parser here: said, never kept (one installed later reads it)
                error, keep = cmakegates.NOT_READ, False
        else:
            got = cpp_gates(data.decode("utf-8", errors="replace"), device, compare)
            closed, unknown = got if got is not None else ([], [])
            for r in closed:
                r.pop("directive", None)
    finally:
        if collecting:
            gc.enable()
    if key and keep:
        _keep_file(key, closed, unknown, error)
    return rel, closed, unknown, f"{rel}: {error}" if error else None, True, False, keep


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
    cache: bool = True,
) -> Scan:
    """Every closed (and unknown) gate of the tree at ``root``, in file and line order;
    ``only``: these files (paths relative to ``root``) alone.  ``cache``: answer from
    patchkit's cache what was scanned before (the same bytes, or the same unchanged tree),
    and keep what is scanned now."""
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
        todo.append((rel, logical))
    out.files = len(todo)
    salt = _salt(engine, device, compare, out.cpp) if cache else ""
    tkey = _tree_key(salt, root, files, todo, vendored) if cache else None
    results = _tree_entry(tkey) if tkey else None
    if results is not None:
        out.cached = sum(1 for r in results if r[4])
    else:
        args = [(str(root), rel, engine, _spec(device), _spec(compare), salt) for rel, _ in todo]
        jobs = jobs or min(len(args) // 200 + 1, _cores(), 4)
        if jobs > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(jobs) as pool:
                got = list(pool.map(_scan_file, args, chunksize=32))
        else:
            got = [_scan_file(a) for a in args]
        results = [
            [rel, closed, unknown, err, parsed] for rel, closed, unknown, err, parsed, *_ in got if parsed or err
        ]
        out.cached = sum(1 for g in got if g[5])
        if tkey and all(g[6] for g in got):  # a file unread, or out of memory: not kept
            _keep_tree(tkey, results)
    logical_of = dict(todo)
    for rel, closed, unknown, err, parsed in results:
        out.parsed += parsed
        if err:
            out.errors.append(err)
        if not closed and not unknown:
            continue
        v = is_vendored(rel)
        for row, dest in [(r, out.closed) for r in closed] + [(r, out.unknown) for r in unknown]:
            dest.append(Gate(engine=engine, path=rel, file=logical_of[rel], vendored=v, **row))
    return out


def _cores() -> int:
    """The cores this process may run on (taskset, a container's cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - macOS
        return os.cpu_count() or 1


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
