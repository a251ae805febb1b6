"""Does a Python gate already admit a device?  A three-valued evaluator over ``ast``.

A gate such as ``(_is_sm90_supported or _is_sm100_supported)`` reads names the module bound
(``_is_sm100_supported = _is_cuda and is_sm100_supported()``) and calls the engine's device
checks, whose meaning in capability terms is data (``predicates`` in
patchkit/base/engines.toml).  This module evaluates such an expression for a ``Device`` in
Kleene logic: True, False, or None for *unknown*.  Unknown is what anything not modelled
reads as (a call of an unknown function, a name bound twice or under an ``if``, a
parameter); it never counts as true, and ``unknown or True`` is True, ``unknown and False``
False, as they are whatever the unknown turns out to be.  Why: the judge must tell "upstream
already reached the goal" from "the patch is still needed", and it may only say the first
when the code proves it.

What is modelled: ``and``/``or``/``not``; comparisons (chained), ``in``/``not in`` over
literals and known tuples; int, str, tuple, list and set literals; ``+ - * // %`` on ints;
``a if c else b``; indexing (``get_device_capability()[0]``), ``.major``/``.minor``/
``.to_int()`` of a capability; calls and attributes matching a predicate pattern (bare
``is_sm100_supported()``, ``mod.is_sm100_supported()``,
``current_platform.is_device_capability(100)``, ``get_platform().is_sm120``); names bound
once, unconditionally, in the enclosing function(s) or module, including tuple unpacking
(``major, minor = torch.cuda.get_device_capability()``).  The literal ``None`` reads as
unknown.  ``and``/``or`` yield truth values, not operands.

Pure: the caller passes source text or trees; nothing here reads a file.
"""

from __future__ import annotations

import ast
import functools
import textwrap
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, Union

from patchkit.core.goals.device import Device


class Capability(NamedTuple):
    """A device capability as engines return it: a (major, minor) tuple that also has
    ``.major``, ``.minor`` and ``.to_int()`` (vLLM's DeviceCapability)."""

    major: int
    minor: int

    def to_int(self) -> int:
        return self.major * 10 + self.minor


Value = Union[bool, int, float, str, tuple, None]  # None: unknown
CAP_PARAM = "cap"  # a predicate parameter that takes an int <major><minor> or a tuple, read as the tuple


@dataclass(frozen=True)
class Predicate:
    """One entry of an engine's ``predicates`` table, compiled."""

    text: str  # the pattern as written: "is_device_capability(cap)"
    pattern: ast.expr
    params: tuple[str, ...]
    means: ast.expr
    means_text: str
    cuda: str = ""  # the CUDA toolkit it also needs, "12.8", or ""

    @property
    def size(self) -> int:
        return sum(1 for _ in ast.walk(self.pattern))


def predicates(rows: Iterable[tuple[str, str, str]]) -> tuple[Predicate, ...]:
    """Compile rows (pattern, meaning, cuda) as ``EngineInfo.predicates`` holds them; the most
    specific pattern first (``torch.cuda.get_device_capability()`` before
    ``get_device_capability()``)."""
    out = []
    for text, means, cuda in rows:
        pat = ast.parse(text, mode="eval").body
        params: list[str] = []
        node = pat
        while isinstance(node, (ast.Call, ast.Attribute)):
            if isinstance(node, ast.Call):
                params += [a.id for a in node.args if isinstance(a, ast.Name)]
                node = node.func
            else:
                node = node.value
        out.append(Predicate(text, pat, tuple(params), ast.parse(means, mode="eval").body, means, cuda))
    return tuple(sorted(out, key=lambda p: -p.size))


# -- bindings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """One binding of a name: ``value`` is the expression it is bound to (None: not
    modelled, e.g. an import, a def, ``+=``, a for target), ``path`` the indexes into it for a
    tuple target, ``conditional`` whether it sits under an if/for/while/try/with/match."""

    value: Optional[ast.expr]
    path: tuple[int, ...] = ()
    conditional: bool = False
    scope: int = 0  # the index in Env.scopes it was found in


class Scope(NamedTuple):
    names: dict[str, list[Binding]]
    globals_: frozenset[str]  # names a function declares global (looked up in the module)
    kind: str  # "module", "function", "class"


def _bind_target(t: ast.expr, value: Optional[ast.expr], cond: bool, out: dict, path: tuple[int, ...] = ()) -> None:
    if isinstance(t, ast.Name):
        out.setdefault(t.id, []).append(Binding(value, path, cond))
    elif isinstance(t, (ast.Tuple, ast.List)):
        starred = any(isinstance(e, ast.Starred) for e in t.elts)
        for i, e in enumerate(t.elts):
            _bind_target(
                e.value if isinstance(e, ast.Starred) else e, None if starred else value, cond, out, path + (i,)
            )
    elif isinstance(t, ast.Starred):
        _bind_target(t.value, None, cond, out)
    # an attribute or subscript target binds no name


def _walrus(nodes: Iterable[Optional[ast.AST]], cond: bool, out: dict, look: bool = True) -> None:
    if not look:  # the caller knows the module holds no `:=`
        return
    for n in nodes:
        if n is None:
            continue
        for w in ast.walk(n):
            if isinstance(w, ast.NamedExpr) and isinstance(w.target, ast.Name):
                out.setdefault(w.target.id, []).append(Binding(None, (), True))


def _collect(stmts: list[ast.stmt], cond: bool, out: dict, globs: set, walrus: bool = True) -> None:
    """The bindings of a block, not descending into nested functions and classes (their names
    are bound here, their bodies are scopes of their own); ``walrus`` False: the module holds
    no ``:=`` (none is looked for)."""
    for st in stmts:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(st.name, []).append(Binding(None, (), cond))
            _walrus(st.decorator_list, cond, out, walrus)
        elif isinstance(st, ast.Assign):
            for t in st.targets:
                _bind_target(t, st.value, cond, out)
            _walrus([st.value], cond, out, walrus)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                _bind_target(st.target, st.value, cond, out)
                _walrus([st.value], cond, out, walrus)
        elif isinstance(st, ast.AugAssign):
            _bind_target(st.target, None, cond, out)
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            for a in st.names:
                name = a.asname or a.name.split(".")[0]
                if name != "*":
                    out.setdefault(name, []).append(Binding(None, (), cond))
        elif isinstance(st, (ast.For, ast.AsyncFor)):
            _bind_target(st.target, None, True, out)
            _walrus([st.iter], cond, out, walrus)
            _collect(st.body + st.orelse, True, out, globs, walrus)
        elif isinstance(st, (ast.While, ast.If)):
            _walrus([st.test], cond, out, walrus)
            _collect(st.body + st.orelse, True, out, globs, walrus)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            for it in st.items:
                if it.optional_vars is not None:
                    _bind_target(it.optional_vars, None, cond, out)
            _walrus([it.context_expr for it in st.items], cond, out, walrus)
            _collect(st.body, True, out, globs, walrus)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            _collect(st.body + st.orelse + st.finalbody, True, out, globs, walrus)
            for h in st.handlers:
                if h.name:
                    out.setdefault(h.name, []).append(Binding(None, (), True))
                _collect(h.body, True, out, globs, walrus)
        elif type(st).__name__ == "Match":
            _walrus([st.subject], cond, out, walrus)
            for case in st.cases:
                for n in ast.walk(case.pattern):
                    name = getattr(n, "name", None) or getattr(n, "rest", None)
                    if isinstance(name, str):
                        out.setdefault(name, []).append(Binding(None, (), True))
                _collect(case.body, True, out, globs, walrus)
        elif isinstance(st, ast.Delete):
            for t in st.targets:
                _bind_target(t, None, cond, out)
        elif isinstance(st, (ast.Global, ast.Nonlocal)):
            globs.update(st.names)
        else:  # Expr, Return, Assert, Raise, ...
            _walrus([st], cond, out, walrus)


@functools.lru_cache(maxsize=64)  # trees are only read: a module's bindings are collected once
def scope_of(node: ast.AST, walrus: bool = True, declarations: bool = True) -> Scope:
    """The names ``node`` (a module, function, lambda or class) binds in its own body.
    A caller that knows the module holds no ``:=`` (``walrus``) or no ``global``/``nonlocal``
    statement (``declarations``) may say so: the walks that look for them are skipped, and
    the scope is the same."""
    out: dict[str, list[Binding]] = {}
    globs: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                out.setdefault(arg.arg, []).append(Binding(None))
        if isinstance(node, ast.Lambda):
            _walrus([node.body], False, out, walrus)
        else:
            _collect(node.body, False, out, globs, walrus)
        kind = "function"
    elif isinstance(node, ast.ClassDef):
        _collect(node.body, False, out, globs, walrus)
        kind = "class"
    else:
        _collect(getattr(node, "body", []), False, out, globs, walrus)
        kind = "module"
        # a function that declares a name global and binds it binds the module's, when called
        for f in ast.walk(node) if declarations else ():
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names: dict[str, list[Binding]] = {}
                declared: set[str] = set()
                _collect(f.body, False, names, declared, walrus)
                for g in sorted(declared & set(names)):
                    out.setdefault(g, []).append(Binding(None, (), True))
        return Scope(out, frozenset(), kind)
    for g in globs:
        out.pop(g, None)  # bound in the module, not here
    return Scope(out, frozenset(globs), kind)


# -- the environment --------------------------------------------------------------------------


@dataclass
class Env:
    """What an expression is evaluated against: the scopes it sees (innermost first, the
    module last), the engine's predicates, and plain values (a predicate's meaning sees the
    device's names and its parameters).  ``notes`` collects what the verdict rests on, for
    the explanation; ``why`` the first thing that was unknown (``explain`` False: said
    without the source of the expression, for a caller that reads no explanation and would
    not pay for ast.unparse; the verdict is the same)."""

    predicates: tuple[Predicate, ...] = ()
    scopes: tuple[Scope, ...] = ()
    values: dict[str, Value] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    _busy: set = field(default_factory=set)
    depth: int = 0  # 0: the expression itself; more: a bound value or a meaning it reads
    explain: bool = True

    def child(self, values: dict[str, Value]) -> Env:
        """An env for a predicate's meaning: the same predicates and notes, no scopes."""
        return Env(self.predicates, (), values, self.notes, self.why, self._busy, self.depth + 1, self.explain)

    def at(self, scope: int) -> Env:
        """The env seen from scope index ``scope`` outwards (a bound value is read where it
        was bound)."""
        return Env(
            self.predicates,
            self.scopes[scope:],
            self.values,
            self.notes,
            self.why,
            self._busy,
            self.depth + 1,
            self.explain,
        )


def _parents(module: ast.AST, target: ast.AST) -> dict[int, ast.AST]:
    """The parent of each node on the path from ``module`` down to ``target`` (a depth-first
    search that stops there, rather than a map of the whole module)."""
    path: list[ast.AST] = []

    def down(n: ast.AST) -> bool:
        path.append(n)
        if n is target:
            return True
        for c in ast.iter_child_nodes(n):
            if isinstance(c, (ast.stmt, ast.expr, ast.excepthandler, ast.match_case)) and down(c):
                return True
        path.pop()
        return False

    down(module)
    return {id(c): p for p, c in zip(path, path[1:], strict=False)}


def env_for(module: Optional[ast.Module], scope: Optional[ast.AST], preds: Iterable) -> Env:
    """The env of an expression inside ``scope`` (a function, lambda or class of ``module``;
    None: at module level).  ``preds``: compiled ``Predicate``s, or the rows of
    ``EngineInfo.predicates``."""
    preds = tuple(preds)
    if preds and not isinstance(preds[0], Predicate):
        preds = predicates(preds)
    chain: list[ast.AST] = []
    if scope is not None and module is not None and scope is not module:
        parents = _parents(module, scope)
        node: Optional[ast.AST] = scope
        first = True
        while node is not None and node is not module:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
                first and isinstance(node, ast.ClassDef)
            ):
                chain.append(node)
            first = False
            node = parents.get(id(node))
    elif scope is not None and module is None:
        chain.append(scope)
    if module is not None:
        chain.append(module)
    return Env(preds, tuple(scope_of(n) for n in chain))


def find_scope(module: ast.Module, qualname: str) -> Optional[ast.AST]:
    """The function or class ``qualname`` ("f", "Cls.method", "outer.inner") of ``module``,
    found through if/try blocks; None if there is none, or more than one."""
    found: list[ast.AST] = [module]
    for part in qualname.split("."):
        nxt = []
        for node in found:
            stack = list(getattr(node, "body", []))
            while stack:
                st = stack.pop(0)
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    if st.name == part:
                        nxt.append(st)
                elif isinstance(st, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(st).__name__ == "TryStar":
                    for blk in ("body", "orelse", "finalbody"):
                        stack.extend(getattr(st, blk, []))
                    for h in getattr(st, "handlers", []):
                        stack.extend(h.body)
        found = nxt
    return found[0] if len(found) == 1 else None


# -- evaluation -------------------------------------------------------------------------------


def truth(v: Value) -> Optional[bool]:
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0
    if isinstance(v, (str, tuple, frozenset)):
        return len(v) > 0
    return None


def kleene_and(vals: Iterable[Optional[bool]]) -> Optional[bool]:
    vals = list(vals)
    if any(v is False for v in vals):
        return False
    return None if any(v is None for v in vals) else True


def kleene_or(vals: Iterable[Optional[bool]]) -> Optional[bool]:
    vals = list(vals)
    if any(v is True for v in vals):
        return True
    return None if any(v is None for v in vals) else False


def kleene_not(v: Optional[bool]) -> Optional[bool]:
    return None if v is None else not v


@functools.lru_cache(maxsize=256)  # trees are only read; a big binding (a registry dict) is shown again and again
def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse of a tree ast.parse made
        return type(node).__name__


def _unknown(env: Env, node: ast.AST, why: str) -> None:
    if not env.why:
        env.why.append(f"`{_src(node)}` {why}" if env.explain else why)
    return None


def _note(env: Env, text: str) -> None:
    """What the verdict rests on: the names and checks the expression itself reads."""
    if env.depth == 0 and text not in env.notes:
        env.notes.append(text)


def _show(v: Value) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(tuple(v)) if isinstance(v, tuple) else repr(v)


def value(expr: ast.expr, device: Device, env: Env) -> Value:
    """The value of ``expr`` for ``device``: a bool, int, str, tuple (a Capability for a
    device's capability), or None for unknown."""
    if isinstance(expr, ast.Constant):
        v = expr.value
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return _unknown(env, expr, "is a constant not modelled")
    if isinstance(expr, ast.BoolOp):
        parts = [truth(value(e, device, env)) for e in expr.values]
        return kleene_and(parts) if isinstance(expr.op, ast.And) else kleene_or(parts)
    if isinstance(expr, ast.UnaryOp):
        v = value(expr.operand, device, env)
        if isinstance(expr.op, ast.Not):
            return kleene_not(truth(v))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if isinstance(expr.op, ast.USub):
                return -v
            if isinstance(expr.op, ast.UAdd):
                return v
        return None if v is None else _unknown(env, expr, "is an operation not modelled")
    if isinstance(expr, ast.Compare):
        return _compare(expr, device, env)
    if isinstance(expr, ast.BinOp):
        return _binop(expr, device, env)
    if isinstance(expr, ast.IfExp):
        c = truth(value(expr.test, device, env))
        if c is not None:
            return value(expr.body if c else expr.orelse, device, env)
        a, b = value(expr.body, device, env), value(expr.orelse, device, env)
        return a if a is not None and a == b and type(a) is type(b) else None
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        if any(isinstance(e, ast.Starred) for e in expr.elts):
            return _unknown(env, expr, "unpacks a sequence")
        return tuple(value(e, device, env) for e in expr.elts)
    if isinstance(expr, ast.Name):
        return _name(expr, device, env)
    if isinstance(expr, (ast.Call, ast.Attribute)):
        got = _predicate(expr, device, env)
        if got is not _NO_MATCH:
            return got
        return _method(expr, device, env)
    if isinstance(expr, ast.Subscript):
        base = value(expr.value, device, env)
        idx = value(expr.slice, device, env) if not isinstance(expr.slice, ast.Slice) else None
        if isinstance(base, tuple) and isinstance(idx, int) and not isinstance(idx, bool):
            if -len(base) <= idx < len(base):
                return base[idx]
        if base is None or idx is None:
            return None if base is None else _unknown(env, expr, "is an index not modelled")
        return _unknown(env, expr, "is an index not modelled")
    if isinstance(expr, ast.NamedExpr):
        return value(expr.value, device, env)
    return _unknown(env, expr, "is an expression not modelled")


def evaluate(expr: ast.expr, device: Device, env: Env) -> Optional[bool]:
    """Whether ``expr`` is true for ``device``: True, False, or None (unknown)."""
    return truth(value(expr, device, env))


_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _compare(expr: ast.Compare, device: Device, env: Env) -> Optional[bool]:
    left = value(expr.left, device, env)
    results: list[Optional[bool]] = []
    for op, right_node in zip(expr.ops, expr.comparators, strict=True):
        right = value(right_node, device, env)
        results.append(_compare_one(op, left, right, expr, env))
        left = right
    return kleene_and(results)


def _compare_one(op: ast.cmpop, a: Value, b: Value, node: ast.AST, env: Env) -> Optional[bool]:
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(b, (tuple, str)):
            return None if b is None else _unknown(env, node, "tests membership of something not modelled")
        if isinstance(b, str):
            got = None if not isinstance(a, str) else a in b
        elif a is None:
            got = None
        elif any(e is not None and _eq(a, e) for e in b):
            got = True
        else:
            got = None if any(e is None for e in b) else False
        return kleene_not(got) if isinstance(op, ast.NotIn) else got
    if a is None or b is None:
        return None
    if isinstance(op, (ast.Is, ast.IsNot)):
        return _unknown(env, node, "compares identity")
    if isinstance(op, (ast.Eq, ast.NotEq)):
        if isinstance(a, tuple) and isinstance(b, tuple) and (None in a or None in b):
            return None
        eq = _eq(a, b)
        return eq if isinstance(op, ast.Eq) else not eq
    if isinstance(a, tuple) and isinstance(b, tuple):
        if None in a or None in b:
            return None
    elif not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return _unknown(env, node, "orders values of different kinds")
    try:
        if isinstance(op, ast.Lt):
            return a < b
        if isinstance(op, ast.LtE):
            return a <= b
        if isinstance(op, ast.Gt):
            return a > b
        if isinstance(op, ast.GtE):
            return a >= b
    except TypeError:
        return _unknown(env, node, "orders values of different kinds")
    return _unknown(env, node, "is a comparison not modelled")


def _eq(a: Value, b: Value) -> bool:
    return a == b


def _binop(expr: ast.BinOp, device: Device, env: Env) -> Value:
    a, b = value(expr.left, device, env), value(expr.right, device, env)
    if a is None or b is None:
        return None
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (a, b))
    if not ints:
        return _unknown(env, expr, "is arithmetic not modelled")
    op = expr.op
    if isinstance(op, ast.Add):
        return a + b
    if isinstance(op, ast.Sub):
        return a - b
    if isinstance(op, ast.Mult):
        return a * b
    if isinstance(op, (ast.FloorDiv, ast.Mod)) and b != 0:
        return a // b if isinstance(op, ast.FloorDiv) else a % b
    return _unknown(env, expr, "is arithmetic not modelled")


def _name(expr: ast.Name, device: Device, env: Env) -> Value:
    n = expr.id
    if n in env.values:
        return env.values[n]
    scopes, i = env.scopes, 0
    while i < len(scopes):
        sc = scopes[i]
        if sc.kind == "class" and i > 0:  # a class body is not seen from its methods
            i += 1
            continue
        if n in sc.globals_:  # `global n` in a function: the module's
            i = len(scopes) - 1
            sc = scopes[i]
        if n not in sc.names:
            i += 1
            continue
        bs = sc.names[n]
        if len(bs) != 1:
            return _unknown(env, expr, f"is bound {len(bs)} times")
        b = bs[0]
        if b.conditional:
            return _unknown(env, expr, "is bound conditionally")
        if b.value is None:
            return _unknown(env, expr, "is bound by something not modelled (a parameter, import, def or loop)")
        key = (id(b.value), b.path)
        if key in env._busy:
            return _unknown(env, expr, "is bound in terms of itself")
        env._busy.add(key)
        try:
            v = value(b.value, device, env.at(i))
        finally:
            env._busy.discard(key)
        for k in b.path:
            if not isinstance(v, tuple) or not (0 <= k < len(v)):
                return None if v is None else _unknown(env, expr, "unpacks a value not modelled")
            v = v[k]
        at = f"[{', '.join(map(str, b.path))}]" if b.path else ""
        if env.depth == 0:  # only the expression's own names are noted: shown only then
            _note(env, f"`{n}` = `{_src(b.value)}`{at}: {_show(v)}")
        return v
    return _unknown(env, expr, "is not bound here")


_NO_MATCH = object()


def _match(pat: ast.expr, e: ast.expr, args: dict) -> bool:
    """``e`` is an instance of the pattern ``pat``; ``args``: parameter -> argument node (or
    None: not passed).  A bare name in the pattern also matches ``anything.name``."""
    if isinstance(pat, ast.Name):
        return (isinstance(e, ast.Name) and e.id == pat.id) or (isinstance(e, ast.Attribute) and e.attr == pat.id)
    if isinstance(pat, ast.Attribute):
        return isinstance(e, ast.Attribute) and e.attr == pat.attr and _match(pat.value, e.value, args)
    if isinstance(pat, ast.Call):
        if not isinstance(e, ast.Call) or not _match(pat.func, e.func, args):
            return False
        if any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None for k in e.keywords):
            return False
        kw = {k.arg: k.value for k in e.keywords}
        for i, p in enumerate(pat.args):
            name = p.id if isinstance(p, ast.Name) else ""
            args[name] = e.args[i] if i < len(e.args) else kw.get(name)
        return True
    return False


def _as_cap(v: Value) -> Value:
    """vLLM's capability argument: 100 -> (10, 0); a (major, minor) tuple as it is."""
    if isinstance(v, int) and not isinstance(v, bool):
        return Capability(v // 10, v % 10)
    if isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return Capability(*v)
    return None


def device_values(device: Device) -> dict[str, Value]:
    """The names a predicate's meaning reads (patchkit/base/engines.py: DEVICE_NAMES)."""
    return {
        "major": device.major,
        "minor": device.minor,
        "capability": Capability(device.major, device.minor),
        "sm": device.sm,
        "platform": device.platform,
    }


def _predicate(expr: ast.expr, device: Device, env: Env) -> Value:
    for p in env.predicates:
        args: dict[str, Optional[ast.expr]] = {}
        if not _match(p.pattern, expr, args):
            continue
        vals = device_values(device)
        for name in p.params:
            node = args.get(name)
            v = value(node, device, env) if node is not None else None
            vals[name] = _as_cap(v) if name == CAP_PARAM else v
        key = ("predicate", p.text)
        if key in env._busy:
            return _unknown(env, expr, "is a predicate defined in terms of itself")
        env._busy.add(key)
        try:
            v = value(p.means, device, env.child(vals))
        finally:
            env._busy.discard(key)
        if p.cuda:
            v = kleene_and([truth(v), device.cuda_at_least(p.cuda)])
        need = f" and CUDA >= {p.cuda}" if p.cuda else ""
        _note(env, f"`{p.text}` means `{p.means_text}`{need}: {_show(v)}")
        return v
    return _NO_MATCH


def _method(expr: ast.expr, device: Device, env: Env) -> Value:
    """``cap.major``, ``cap.minor``, ``cap.to_int()`` of a capability; else unknown."""
    if isinstance(expr, ast.Attribute) and expr.attr in ("major", "minor"):
        base = value(expr.value, device, env)
        if isinstance(base, Capability):
            return getattr(base, expr.attr)
        return None if base is None else _unknown(env, expr, "is an attribute not modelled")
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "to_int"
        and not expr.args
        and not expr.keywords
    ):
        base = value(expr.func.value, device, env)
        if isinstance(base, Capability):
            return base.to_int()
    what = "is no known check" if isinstance(expr, ast.Call) else "is an attribute not modelled"
    return _unknown(env, expr, what)


# -- lists of versions and architectures ------------------------------------------------------


def arch_admits(arch: str, device: Device) -> Optional[bool]:
    """Whether code built for ``arch`` runs on ``device``: ``sm_100a`` exactly 10.0 (arch-
    specific), ``sm_100f`` the 10.x family from 10.0 up, ``sm_90`` 9.x from 9.0 up (a cubin
    runs on its major's later minors), ``compute_90`` (PTX) any capability from 9.0 up.
    None for a string that is not an architecture."""
    import re

    m = re.match(r"^(sm|compute)_?(\d{2,3})([af]?)$", arch.strip().lower())
    if not m:
        return None
    major, minor = int(m.group(2)[:-1]), int(m.group(2)[-1])
    have = (device.major, device.minor)
    if m.group(1) == "compute":
        return have >= (major, minor)
    if m.group(3) == "a":
        return have == (major, minor)
    return device.major == major and device.minor >= minor


def list_admits(node: ast.expr, device: Device, env: Optional[Env] = None) -> Optional[bool]:
    """Whether a list (tuple, set) of versions admits ``device``: ints below 20 are majors
    (``supported_major_versions=[9, 10]``), ints from 20 up SM numbers (``[90, 100]``), pairs
    capabilities (``[(9, 0), (10, 0)]``), strings architectures (``["sm_90a", "sm_100a"]``,
    ``admissible_archs``; see ``arch_admits``).  Elements may be names bound to them.
    A list with an unknown element and no admitting one is unknown; so is a mix of kinds."""
    env = env or Env()
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        v = value(node, device, env)
        if not isinstance(v, tuple):
            return None
        vals = list(v)
    else:
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return None
        vals = [value(e, device, env) for e in node.elts]
    hits: list[Optional[bool]] = []
    for v in vals:
        if isinstance(v, bool) or v is None:
            hits.append(None)
        elif isinstance(v, int):
            hits.append(v == device.major if v < 20 else v == device.sm)
        elif isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, int) for x in v):
            hits.append(tuple(v) == (device.major, device.minor))
        elif isinstance(v, str):
            hits.append(arch_admits(v, device))
        else:
            hits.append(None)
    return kleene_or(hits)


def keyword_admits(call: ast.Call, keyword: str, device: Device, env: Optional[Env] = None) -> Optional[bool]:
    """``f(..., supported_major_versions=[9, 10])``: whether the list passed as ``keyword``
    admits ``device`` (``list_admits``); None when the call does not pass it."""
    for k in call.keywords:
        if k.arg == keyword:
            return list_admits(k.value, device, env)
    return None


# -- the one call -----------------------------------------------------------------------------


def _parse_gate(src: str) -> tuple[Optional[ast.expr], str]:
    """The gate's expression, and the keyword it is the value of ("" if none)."""
    text = textwrap.dedent(src).strip().rstrip(",")
    for cand in (text, f"({text})", f"f({text})"):
        try:
            node = ast.parse(cand, mode="eval").body
        except SyntaxError:
            continue
        if cand.startswith("f(") and isinstance(node, ast.Call):
            if len(node.keywords) == 1 and not node.args and node.keywords[0].arg:
                return node.keywords[0].value, node.keywords[0].arg
            return None, ""
        return node, ""
    return None, ""


def admits(
    gate_source: str,
    module_source: Optional[str],
    scope_qualname: Optional[str],
    device: Device,
    preds: Iterable,
) -> tuple[Optional[bool], str]:
    """Whether the gate ``gate_source`` admits ``device``, and why, in a line.

    ``gate_source``: an expression (``_is_sm90_supported or _is_sm100_supported``), a list
    (``[9, 10]``) or a keyword argument (``supported_major_versions=[9, 10]``): a list is read
    by ``list_admits``.  ``module_source``: the module it is in (its bindings), or None;
    ``scope_qualname``: the function (or class) around it, e.g. ``"Cls.method"``, or None
    at module level.  ``preds``: the engine's predicates (``EngineInfo.predicates`` rows or
    compiled).  The verdict is True, False or None (unknown)."""
    node, kw = _parse_gate(gate_source)
    if node is None:
        return None, f"`{gate_source.strip()}` is not a Python expression"
    module = None
    if module_source is not None:
        try:
            module = ast.parse(module_source)
        except SyntaxError as e:
            return None, f"the module is not valid Python (line {e.lineno})"
    scope = None
    if scope_qualname:
        if module is None:
            return None, f"no module to find {scope_qualname} in"
        scope = find_scope(module, scope_qualname)
        if scope is None:
            return None, f"no single {scope_qualname} in the module"
    env = env_for(module, scope, preds)
    shown = _src(node) if not kw else f"{kw}={_src(node)}"
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        verdict = list_admits(node, device, env)
    else:
        verdict = evaluate(node, device, env)
    word = {True: "true", False: "false", None: "unknown"}[verdict]
    line = f"`{shown}` is {word} for {device}"
    if verdict is None and env.why:
        line += f": {env.why[0]}"
    elif env.notes:
        line += " (" + "; ".join(env.notes[:4]) + ")"
    return verdict, line
