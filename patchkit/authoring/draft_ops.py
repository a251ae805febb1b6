"""`gates --draft`, choosing the op: each chosen gate widened by an edit, read back, and
expressed as ops (patchkit/authoring/draft.py puts the draft together).

Each gate (patchkit/upstream/gates.py) is widened by an edit made on its file in memory, the
smallest that admits the device beside the part it was written for:

- an ``or`` chain (the gate, or the chain it is an operand of) gains the device's analog of
  the operand that admits the comparison part (``is_sm100_supported()`` ->
  ``is_sm120_supported()``, ``get_platform().is_sm100`` -> ``.is_sm120``, ``_is_sm100_x`` ->
  ``_is_sm120_x``, ``major == 10`` -> ``major == 12``): or-operand;
- a negated check in an ``and`` chain (``not is_sm90() and not is_sm100()``) gains the
  negated analog: and-operand;
- a lone check becomes ``(check or analog)``: replace-expr (one place of its scope);
- an arch list gains the device (``[9, 10]`` -> ``[9, 10, 12]``, ``"sm_100a"`` ->
  ``"sm_120a"``): list-element;
- a C/C++ ``#if`` over ``__CUDA_ARCH__`` loses the conjunct that shuts the device out
  (``&& (__CUDA_ARCH__ < 1200)``), or gains ``|| analog`` (``== 1000`` -> ``== 1200``,
  ``__CUDA_ARCH_FEAT_SM100_ALL`` -> ``SM120``): text-hunk.

A new name an analog reads is imported beside its sibling (ensure-import, from the module
the sibling comes from, which must define it), and a module flag bound from the sibling's
binding (``_is_sm120_supported = _is_cuda and is_sm120_supported()``) is inserted after it.
The edits are then expressed as ops by `capture`'s own machinery (pycapture, text hunks),
which keeps an op only where it makes exactly the edit, and each gate's edit is read back by
the scanner: the gate no longer reads closed, and no gate reads closed or unknown that did
not.  A gate no op kind widens safely is refused with one line: a definition of what a part
is (``def is_sm100_supported``, ``is_sm100_supported = partial(..., [10])``: widening it
makes the name lie), a check that shuts the device out by name (``not is_sm120()``), a
check with no analog for the device that the engine's checks know, a name the sibling's
module does not define.  draft_toml.py writes the recipe, draft_proof.py proves it (check,
judge, planner, read back) before patchkit/commands/gates_draft.py writes it.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from patchkit.authoring.hunks import CapturedOp
from patchkit.core.goals.device import Device
from patchkit.upstream import gates as G

# op kinds a draft may hold: the widening ones and what they need beside them
KINDS = frozenset(
    {
        "or-operand",
        "and-operand",
        "replace-stmt",
        "list-element",
        "replace-expr",
        "ensure-import",
        "insert",
        "text-hunk",
        "text-replace",
    }
)
# a name that says which part it is about: it defines what that part is
_NAMES_A_PART = re.compile(r"(^|_)(sm_?\d{2,3}[af]?|hopper|blackwell|ampere|ada|volta|turing|sm\d+x)(_|$|[a-z])", re.I)


@dataclass(frozen=True)
class Numbered:
    n: int
    engine: str
    root: str
    gate: G.Gate


@dataclass
class Widened:
    """One gate's edit: the spans of its file it replaces (start, end, bytes), and what it
    says it does."""

    n: int
    gate: G.Gate
    edits: list = field(default_factory=list)  # (start, end, bytes) in the file's bytes
    needs: list = field(default_factory=list)  # (kind, key, (start, end, bytes)): imports, inserted flags
    how: str = ""
    ops: list = field(default_factory=list)  # CapturedOp, once expressed
    # Python: the span of the expression the edit widens (an `or` chain, a wrapped check, an
    # `and` chain, a list), read back after the edit: it must answer for the device as it
    # does for the comparison part; the gate itself then no longer reads closed (kept=True:
    # a negated check in an `and` chain stays, its chain is what changes)
    target: Optional[tuple[int, int]] = None
    collection: bool = False
    kept: bool = False
    adds: tuple = ()  # conditions the edit adds that the scan reads as gates (`not analog`)
    jit: tuple = ()  # the JIT modules an arch list's function declares (verify --build builds them)


@dataclass(frozen=True)
class Refused:
    n: int
    gate: G.Gate
    why: str

    def line(self) -> str:
        g = self.gate
        return f"gate #{self.n} {g.path}:{g.line} ({g.condition}): {self.why}"


class Refusal(Exception):
    pass


# -- analogs: the device's form of a check written for the comparison part ----------------------


def _sm_sub(word: str, cmp_: Device, dev: Device) -> str:
    """``is_sm100_supported`` -> ``is_sm120_supported``; ``sm_100a`` -> ``sm_120a``;
    ``__CUDA_ARCH_FEAT_SM100_ALL`` -> ``SM120``; ``compute_100`` -> ``compute_120``."""
    pat = re.compile(rf"(?i)((?:^|[^A-Za-z0-9])?(?:sm|compute)_?){cmp_.sm}(?![0-9])")
    return pat.sub(lambda m: f"{m.group(1)}{dev.sm}", word)


class _Analog(ast.NodeTransformer):
    def __init__(self, cmp_: Device, dev: Device, checks: frozenset = frozenset()) -> None:
        self.cmp, self.dev, self.changed = cmp_, dev, False
        self.checks = checks  # the engine's device checks: their arguments are capabilities
        self.compare_depth = 0

    def visit_Call(self, node: ast.Call):
        name = G._terminal(node.func)
        node.func = self.visit(node.func)
        inside = name in self.checks
        self.compare_depth += inside
        node.args = [self.visit(a) for a in node.args]
        for k in node.keywords:
            k.value = self.visit(k.value)
        self.compare_depth -= inside
        return node

    def _word(self, w: str) -> str:
        new = _sm_sub(w, self.cmp, self.dev)
        self.changed |= new != w
        return new

    def visit_Name(self, node: ast.Name):
        return ast.copy_location(ast.Name(self._word(node.id), node.ctx), node)

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        node.attr = self._word(node.attr)
        return node

    def visit_Compare(self, node: ast.Compare):
        self.compare_depth += 1
        self.generic_visit(node)
        self.compare_depth -= 1
        return node

    def visit_Constant(self, node: ast.Constant):
        v = node.value
        if isinstance(v, str) and len(v) < 16:
            return ast.copy_location(ast.Constant(self._word(v)), node)
        if isinstance(v, int) and not isinstance(v, bool) and self.compare_depth:
            if v == self.cmp.sm and v >= 20:
                self.changed = True
                return ast.copy_location(ast.Constant(self.dev.sm), node)
            if v == self.cmp.major and self.cmp.minor == 0:
                self.changed = True
                return ast.copy_location(ast.Constant(self.dev.major), node)
        return node


def analog(expr: ast.expr, cmp_: Device, dev: Device, checks: frozenset = frozenset()) -> Optional[str]:
    """The source of the device's form of ``expr``, or None where nothing in it names the
    comparison part (``checks``: the engine's device checks, whose arguments are capabilities:
    ``is_device_capability_family(100)`` -> ``(120)``)."""
    import copy

    t = _Analog(cmp_, dev, checks)
    new = t.visit(copy.deepcopy(expr))
    return ast.unparse(new) if t.changed else None


# -- Python ---------------------------------------------------------------------------------------


class _PyFile:
    def __init__(
        self, text: str, eng, dev: Device, cmp_: Device, defines=None, engine: str = "", logical: str = ""
    ) -> None:
        self.defines, self.engine, self.logical = defines, engine, logical
        self.text, self.data = text, text.encode("utf-8", "surrogateescape")
        self.tree = ast.parse(text)
        self.dev, self.cmp, self.eng = dev, cmp_, eng
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for ln in self.lines:
            self.starts.append(self.starts[-1] + len(ln.encode("utf-8", "surrogateescape")))
        s = self.scan = G._PyScan(text, self.tree, eng, dev, cmp_)
        s.run()
        rows, _ = s.rows()
        self.closed = list(zip(rows, s.closed, strict=True))
        self.parents: dict[int, ast.AST] = {}
        for n in ast.walk(self.tree):
            for c in ast.iter_child_nodes(n):
                self.parents[id(c)] = n
        self.bound = _bound_anywhere(self.tree)

    def expr_at(self, span: tuple[int, int]) -> Optional[ast.expr]:
        if not hasattr(self, "_spans"):
            self._spans: dict = {}
            for n in ast.walk(self.tree):
                if isinstance(n, ast.expr):
                    self._spans.setdefault(self.span(n), n)
        return self._spans.get(span)

    def off(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.off(node.lineno, node.col_offset), self.off(node.end_lineno, node.end_col_offset)

    def src(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.data[a:b].decode("utf-8", "surrogateescape")

    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        return self.parents.get(id(node))

    def stack(self, node: ast.AST) -> list:
        """The defs and classes around ``node``, outermost first (the scan's stack)."""
        out = []
        p = self.parent(node)
        while p is not None:
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(p)
            p = self.parent(p)
        return out[::-1]

    def answer(self, node: ast.expr, dev: Device, collection: bool = False):
        return self.scan.answer(node, dev, self.stack(node), collection)[0]

    def find(self, g: G.Gate):
        same = [(row, e) for row, e in self.closed if row["line"] == g.line and row["condition"] == g.condition]
        if not same:
            raise Refusal("the file no longer holds this gate as scanned: scan again")
        return same[0][1]


def _bound_anywhere(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def _statement_of(f: _PyFile, node: ast.AST) -> Optional[ast.stmt]:
    while node is not None and not isinstance(node, ast.stmt):
        node = f.parent(node)
    return node


def _enclosing_defs(f: _PyFile, node: ast.AST) -> list[str]:
    out = []
    p = f.parent(node)
    while p is not None:
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(p.name)
        p = f.parent(p)
    return out


def _definition(f: _PyFile, node: ast.AST, g: G.Gate) -> Optional[str]:
    """Why the gate defines what a part is, else None: the value of a binding named for one
    (``_is_sm100_supported = ...``, ``is_sm100_supported = partial(..., [10])``), or what a
    def named for one returns (``def is_blackwell(): return major == 10``).  A gate elsewhere
    in such a def (a JIT module built for SM103 gated on its majors) defines nothing."""
    st = _statement_of(f, node)
    if isinstance(st, (ast.Assign, ast.AnnAssign)):
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        for t in targets:
            for name in G._bound_names(t):
                if _NAMES_A_PART.search(name):
                    return (
                        f"it binds `{name}`, a flag named for a part: widening it makes the name lie to every reader;"
                        " widen the gates that read it"
                    )
    if isinstance(st, ast.Return):
        name = next(iter(_enclosing_defs(f, node)), "")
        if _NAMES_A_PART.search(name):
            return (
                f"it is what `{name}` returns, a check named for a part: widening it makes the name lie to every"
                " caller; widen the gates that read it"
            )
    return None


def _is_or(n) -> bool:
    return isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or)


def _is_and(n) -> bool:
    return isinstance(n, ast.BoolOp) and isinstance(n.op, ast.And)


def _is_not(n) -> bool:
    return isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)


def _open_operand(f: _PyFile, chain: ast.BoolOp, env_stack) -> Optional[ast.expr]:
    """The operand of an ``or`` chain that admits the comparison part."""
    for v in chain.values:
        cv, _ = _answer(f, v, f.cmp, env_stack)
        if cv is True:
            return v
    return None


def _answer(f: _PyFile, node, dev, stack):
    return f.scan.answer(node, dev, stack, False)


def _excludes_device(f: _PyFile, node: ast.expr, stack) -> bool:
    """A check that shuts the device out by name: ``not X`` where X admits it, ``major != 12``,
    ``sm not in (120, 121)``."""
    if _is_not(node):
        dv, _ = _answer(f, node.operand, f.dev, stack)
        return dv is True
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.NotEq, ast.NotIn)):
        names = {f.dev.major, f.dev.sm, f.dev.capability, f.dev.name, f"sm_{f.dev.sm}"}
        consts = [n.value for n in ast.walk(node.comparators[0]) if isinstance(n, ast.Constant)]
        if isinstance(node.comparators[0], ast.Tuple) and len(consts) == 2:
            consts.append(tuple(consts))
        return any(c in names for c in consts)
    return False


def widen_python(f: _PyFile, g: G.Gate, n: int) -> Widened:
    node, kind, ctx, _denv, _cenv, site, negated = f.find(g)
    stack = ctx[0]
    why = _definition(f, node, g)
    if why:
        raise Refusal(why)
    w = Widened(n, g)
    if kind == "arch-list":
        return _widen_list(f, node, w)
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.In)
        and isinstance(node.comparators[0], (ast.List, ast.Tuple, ast.Set))
    ):  # `major in (9, 10)`: the collection gains the device
        return _widen_list(f, node.comparators[0], w, compare=node)
    if _excludes_device(f, node, stack) or (_is_and(node) and any(_excludes_device(f, v, stack) for v in node.values)):
        raise Refusal(
            "it shuts the device out by name (a negated check that admits it): upstream excluded it on purpose;"
            " no op kind widens that safely"
        )
    if _is_or(node):
        base = _open_operand(f, node, stack)
        if base is None:
            raise Refusal("no operand of the `or` admits the comparison part alone: nothing to take an analog of")
        new = _analog_or_refuse(f, base, stack)
        _need_names(f, new, base, w)
        end = f.span(node.values[-1])[1]
        w.edits.append((end, end, f"{_sep(f, node, len(node.values) - 1, 'or')}{new}".encode()))
        w.target = f.span(node)
        w.how = f"or-operand: `{new}` beside `{f.src(base)}`"
        return w
    parent = f.parent(node)
    if _is_or(parent):
        new = _analog_or_refuse(f, node, stack)
        _need_names(f, new, node, w)
        end = f.span(node)[1]
        w.edits.append((end, end, f"{_sep(f, parent, parent.values.index(node), 'or')}{new}".encode()))
        w.target = f.span(parent)
        w.how = f"or-operand: `{new}` after `{f.src(node)}`"
        return w
    if _is_not(parent) and _is_and(f.parent(parent)):
        new = _analog_or_refuse(f, node, stack)
        _need_names(f, new, node, w)
        chain = f.parent(parent)
        end = f.span(parent)[1]
        w.edits.append((end, end, f"{_sep(f, chain, chain.values.index(parent), 'and')}not {_paren(new)}".encode()))
        w.target, w.kept, w.adds = f.span(f.parent(parent)), True, (f"not {_paren(new)}",)
        w.how = f"and-operand: `not {_paren(new)}` after `{f.src(parent)}`"
        return w
    if _is_and(node):
        # the conjuncts that shut the device out, each widened with its analog
        stack_ = stack
        for v in node.values:
            dv, _ = _answer(f, v, f.dev, stack_)
            cv, _ = _answer(f, v, f.cmp, stack_)
            if dv is False and cv is True:
                new = _analog_or_refuse(f, v, stack)
                _need_names(f, new, v, w)
                a, b = f.span(v)
                w.edits.append((a, b, f"({f.src(v)} or {new})".encode()))
        if not w.edits:
            raise Refusal("no conjunct of the `and` is closed for the device alone: nothing to widen")
        w.target = f.span(node)
        w.how = "replace-expr: " + "; ".join(f"`{e[2].decode()}`" for e in w.edits)
        return w
    if _whole_test(f, node):
        raise Refusal(
            f"`{g.condition}` is the whole condition of its `{kind}`: no op kind adds an operand to a lone check"
            " (or-operand needs an `or` chain; a replace-expr may not hold its own match): widen it by hand"
        )
    new = _analog_or_refuse(f, node, stack)
    _need_names(f, new, node, w)
    a, b = f.span(node)
    bare = isinstance(f.parent(node), (ast.Assert, ast.Return, ast.Assign, ast.AnnAssign))
    wrapped = f"{f.src(node)} or {new}" if bare else f"({f.src(node)} or {new})"
    w.edits.append((a, b, wrapped.encode()))
    w.target = (a, b)
    w.how = f"replace-expr: `{wrapped}`"
    return w


def _paren(s: str) -> str:
    """``s`` as an operand of ``not``: bare where it is a name, attribute, call or subscript."""
    try:
        e = ast.parse(s, mode="eval").body
    except SyntaxError:
        return f"({s})"
    return s if isinstance(e, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({s})"


_OPERATOR = re.compile(r"^[)\s]*?(\s*\b(?:or|and)\b\s*)[(\s]*$", re.S)


def _sep(f: _PyFile, chain: ast.BoolOp, j: int, word: str) -> str:
    """What goes before an operand added after operand ``j`` of ``chain``: the operator as the
    chain writes it there (the one before operand ``j``, or the first), its line breaks and
    indentation kept, as or-operand and and-operand write it."""
    k = j if j >= 1 else 1
    between = f.data[f.span(chain.values[k - 1])[1] : f.span(chain.values[k])[0]].decode("utf-8", "surrogateescape")
    m = _OPERATOR.match(between)
    return m.group(1) if m and "#" not in between else f" {word} "


def _whole_test(f: _PyFile, node: ast.expr) -> bool:
    """The node is the whole test of an if/elif/while (no statement op kind rewrites that header)."""
    p = f.parent(node)
    return isinstance(p, (ast.If, ast.While)) and p.test is node


def _analog_or_refuse(f: _PyFile, node: ast.expr, stack: list) -> str:
    new = analog(node, f.cmp, f.dev, f.eng.all_words)
    if new is None:
        raise Refusal(
            f"`{f.src(node)}` names no part ({f.cmp}) that an analog for {f.dev} could be made of: write the"
            " operand by hand"
        )
    env = f.scan.env(stack)
    expr = ast.parse(new, mode="eval").body
    known = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - f.bound
    if not known:  # every name it reads is there: it must admit the device as the file stands
        from patchkit.core.goals import pyeval

        if pyeval.evaluate(expr, f.dev, env) is not True:
            raise Refusal(f"`{new}`, the analog of `{f.src(node)}`, does not read true for {f.dev}")
    return new


def _need_names(f: _PyFile, new: str, base: ast.expr, w: Widened) -> None:
    """The names ``new`` reads that the file does not bind: imported beside the sibling the
    analog was made of, or (a module flag) bound after the sibling's binding."""
    expr = ast.parse(new, mode="eval").body
    olds = [n.id for n in ast.walk(base) if isinstance(n, ast.Name)]
    news = [n.id for n in ast.walk(expr) if isinstance(n, ast.Name)]
    for old, name in zip(olds, news, strict=False):
        if name in f.bound or name == old:
            continue
        _need_name(f, old, name, w, depth=0)


def _need_name(f: _PyFile, old: str, name: str, w: Widened, depth: int) -> None:
    if depth > 2:
        raise Refusal(f"`{name}` is not bound in the file, and binding it takes more than two steps: write it by hand")
    for st in f.tree.body:  # imported at module level
        if isinstance(st, ast.ImportFrom) and any((a.asname or a.name) == old for a in st.names):
            module = _module_of(f, st)
            where = f.defines(module, name) if f.defines is not None else None
            if where is None:
                raise Refusal(
                    f"`{name}` is not defined in {module} of this tree (where `{old}` is imported from): no check for"
                    f" {f.dev} to import; write it by hand"
                )
            w.needs.append(("import", (module, name, where), _import_edit(f, st, old, name)))
            return
    for st in f.tree.body:  # a module flag: its binding's analog, after it
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            if st.targets[0].id == old:
                new = analog(st, f.cmp, f.dev, f.eng.all_words)
                if new is None or not new.startswith(name + " "):
                    raise Refusal(f"`{old}`'s binding has no analog for {f.dev}: bind `{name}` by hand")
                value = ast.parse(new).body[0].value
                _need_names_of(f, st.value, value, w, depth + 1)
                end = f.off(st.end_lineno, st.end_col_offset)
                eol = f.data.index(b"\n", end) + 1 if b"\n" in f.data[end:] else len(f.data)
                w.needs.append(("insert", (name, f.src(st), new), (eol, eol, (new + "\n").encode())))
                return
    raise Refusal(f"`{name}` (for `{old}`) is not bound in the file, and `{old}` is not imported nor a module flag")


def _need_names_of(f: _PyFile, base: ast.expr, expr: ast.expr, w: Widened, depth: int) -> None:
    olds = [n.id for n in ast.walk(base) if isinstance(n, ast.Name)]
    news = [n.id for n in ast.walk(expr) if isinstance(n, ast.Name)]
    for old, name in zip(olds, news, strict=False):
        if name not in f.bound and name != old:
            _need_name(f, old, name, w, depth)


def _module_of(f: _PyFile, st: ast.ImportFrom) -> str:
    if st.level:
        raise Refusal(f"`{ast.unparse(st)}` is a relative import: import the analog by hand")
    return st.module or ""


def _import_edit(f: _PyFile, st: ast.ImportFrom, old: str, name: str) -> tuple[int, int, bytes]:
    """``from M import a, old`` -> ``from M import a, old, name``; a parenthesised import with
    ``old`` on its own line gains a line ``name,`` after it."""
    alias = next(a for a in st.names if a.name == old)
    a, b = f.span(alias)
    line = f.lines[alias.lineno - 1]
    if st.lineno != st.end_lineno and line.strip() in (old, old + ","):
        indent = line[: len(line) - len(line.lstrip())]
        eol = f.starts[alias.lineno]
        return (eol, eol, f"{indent}{name},\n".encode())
    return (b, b, f", {name}".encode())


def _jit_modules(f: _PyFile, node: ast.AST) -> tuple:
    """The JIT modules (``gen_jit_spec("NAME", ...)``, patchkit/verify/jitspec.py) declared in
    the function around an arch list of the engine's JIT specs: what `verify --build` compiles."""
    from patchkit.base.engines import ENGINES
    from patchkit.verify import jitspec

    jit = ENGINES[f.engine].jit if f.engine in ENGINES else None
    specs = (jit or {}).get("specs")
    fn = next((d for d in f.stack(node)[::-1] if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if not specs or fn is None or not f.logical.startswith(specs):
        return ()
    mods = jitspec.modules_in(f.text, f.logical).values()
    return tuple(m.name for m in mods if fn.lineno <= m.line <= fn.end_lineno)


def _widen_list(f: _PyFile, node: ast.expr, w: Widened, compare: Optional[ast.Compare] = None) -> Widened:
    """An arch list gains the device; ``compare``: the list is the right side of ``x in
    (...)``, and the comparison is what must read true for it."""
    elts = list(node.elts)
    if not elts:
        raise Refusal("an empty list: add the device by hand")
    ints = [e.value for e in elts if isinstance(e, ast.Constant) and type(e.value) is int]
    strs = [e for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if ints and len(ints) == len(elts):
        big = any(v >= 20 for v in ints)
        new = str(f.dev.sm if big else f.dev.major)
        if (f.dev.sm if big else f.dev.major) in ints:
            raise Refusal("the list already holds the device, in another form: read it by hand")
    elif strs and len(strs) == len(elts):
        base = next((e for e in strs if _sm_sub(e.value, f.cmp, f.dev) != e.value), None)
        if base is None:
            raise Refusal(f"no element names {f.cmp} ({f.cmp.name}): nothing to take the device's analog of")
        q = f.src(base)[0]
        new = q + _sm_sub(base.value, f.cmp, f.dev) + q
    elif all(
        isinstance(e, ast.Tuple) and len(e.elts) == 2 and all(type(getattr(x, "value", None)) is int for x in e.elts)
        for e in elts
    ):
        new = f"({f.dev.major}, {f.dev.minor})"
    else:
        raise Refusal("a list of names or mixed elements: add the device by hand")
    end = f.span(elts[-1])[1]
    w.edits.append((end, end, f", {new}".encode()))
    w.target, w.collection = (f.span(compare), False) if compare is not None else (f.span(node), True)
    w.jit = _jit_modules(f, node)
    w.how = f"list-element: {new}"
    return w


# -- C/C++/CUDA --------------------------------------------------------------------------------


_CPP_WORD = re.compile(r"\b(__CUDA_ARCH_FEAT_SM)(\d+)(_ALL)\b|\b(\d{3,4})\b")


def _cpp_analog(text: str, cmp_: Device, dev: Device) -> Optional[str]:
    changed = False

    def sub(m):
        nonlocal changed
        if m.group(1):
            if int(m.group(2)) == cmp_.sm:
                changed = True
                return f"{m.group(1)}{dev.sm}{m.group(3)}"
            return m.group(0)
        if int(m.group(4)) == cmp_.cuda_arch:
            changed = True
            return str(dev.cuda_arch)
        return m.group(0)

    new = _CPP_WORD.sub(sub, text)
    return new if changed else None


def _strip_parens(node):
    while node.type == "parenthesized_expression" and len(node.named_children) == 1:
        node = node.named_children[0]
    return node


def _and_chain(node) -> list:
    n = _strip_parens(node)
    if n.type == "binary_expression" and n.child_by_field_name("operator").text.decode() == "&&":
        return _and_chain(n.child_by_field_name("left")) + _and_chain(n.child_by_field_name("right"))
    return [node]


def widen_cpp(text: str, g: G.Gate, n: int, dev: Device, cmp_: Device) -> Widened:
    from patchkit.core.goals import cppeval

    if not g.kind.startswith("#"):
        raise Refusal("a run-time C++ check: no op kind widens one yet; widen it by hand (a text hunk)")
    parser = cppeval._parser()
    if parser is None:
        raise Refusal("tree-sitter-cpp is not installed (pip install patchkit[goals])")
    data = text.encode("utf-8", "surrogateescape")
    lines = data.split(b"\n")
    raw = lines[g.line - 1].decode("utf-8", "surrogateescape")
    m = G._DIRECTIVE.match(raw)
    if not m or raw.rstrip().endswith("\\"):
        raise Refusal("an #if continued over several lines: widen it by hand")
    cond_at = m.start(2)
    cond = m.group(2)
    cut = min([i for i in (cond.find("//"), cond.find("/*")) if i >= 0], default=len(cond))
    cond = cond[:cut]
    src = f"#if {cond}\n#endif\n".encode()
    root = parser.parse(src).root_node
    top = root.children[0].child_by_field_name("condition") if root.children else None
    if top is None or root.has_error:
        raise Refusal("the #if does not parse")
    hits: list = []
    G._cpp_find(top, dev, cmp_, cond, hits)
    hit = next((h for h in hits if " ".join(h.text.decode(errors="replace").split()) == g.condition), None)
    if hit is None:
        raise Refusal("the file no longer holds this gate as scanned: scan again")

    def text_of(node) -> str:
        return node.text.decode("utf-8", "surrogateescape")

    conj = _and_chain(hit)
    how = ""
    if len(conj) > 1:
        kept, dropped, widened = [], [], []
        for c in conj:
            dv, _ = G._cpp_eval(c, dev, cond)
            cv, _ = G._cpp_eval(c, cmp_, cond)
            if dv is False and cv is True:
                a = _cpp_analog(text_of(c), cmp_, dev)
                if a is not None:
                    kept.append(_cpp_or(c, a))
                    widened.append(a)
                else:
                    dropped.append(text_of(c))
            else:
                kept.append(text_of(c))
        new = " && ".join(kept)
        if hit.type == "parenthesized_expression":
            new = f"({new})"
        how = "; ".join([*(f"drops `{d}`" for d in dropped), *(f"admits `{a}`" for a in widened)])
    else:
        base = _strip_parens(hit)
        ors = _or_operands(base)
        src_op = next((o for o in ors if G._cpp_eval(o, cmp_, cond)[0] is True), None)
        a = _cpp_analog(text_of(src_op), cmp_, dev) if src_op is not None else None
        if a is None:
            raise Refusal(
                f"`{g.condition}` names no {cmp_} arch whose analog for {dev} could be added: widen it by hand"
            )
        new = _cpp_or(hit, a, top=hit.start_byte == top.start_byte and hit.end_byte == top.end_byte)
        how = f"admits `{a}`"
    start = hit.start_byte - 4
    end = hit.end_byte - 4
    cond_b = cond.encode("utf-8", "surrogateescape")
    new_cond = cond_b[:start] + new.encode("utf-8", "surrogateescape") + cond_b[end:]
    line_start = sum(len(x) + 1 for x in lines[: g.line - 1])
    a0 = line_start + len(raw[:cond_at].encode("utf-8", "surrogateescape"))
    w = Widened(n, g, how=f"text-hunk: {how}")
    w.edits.append((a0, a0 + len(cond_b), new_cond))
    return w


def _or_operands(node) -> list:
    n = _strip_parens(node)
    if n.type == "binary_expression" and n.child_by_field_name("operator").text.decode() == "||":
        return _or_operands(n.child_by_field_name("left")) + _or_operands(n.child_by_field_name("right"))
    return [n]


def _cpp_or(node, a: str, top: bool = False) -> str:
    t = node.text.decode("utf-8", "surrogateescape")
    if node.type == "parenthesized_expression":
        return f"{t[:-1]} || {a})"
    return f"{t} || {a}" if top else f"({t} || {a})"


# -- a file's edits, read back and expressed as ops ----------------------------------------------


def _apply(data: bytes, edits: list) -> bytes:
    out = data
    for a, b, new in sorted(set(edits), key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:a] + new + out[b:]
    return out


def _overlap(edits: list) -> bool:
    spans = sorted({(a, b) for a, b, _ in edits})
    return any(b1 > a2 for (a1, b1), (a2, b2) in zip(spans, spans[1:], strict=False))


def _keys(rows: list) -> Counter:
    return Counter((r["kind"], r.get("function", ""), r["condition"]) for r in rows)


class _Before:
    """What the read-back compares with, read once per file: the pristine text's closed
    gates (and, for Python, its parsed file)."""

    def __init__(self, path: str, engine: str, text: str, dev: Device, cmp_: Device, pyf=None) -> None:
        self.path, self.engine, self.text, self.dev, self.cmp, self.pyf = path, engine, text, dev, cmp_, pyf
        if pyf is not None:
            self.closed = _keys([row for row, _ in pyf.closed])
        else:
            got = G.cpp_gates(text, dev, cmp_)
            self.closed = _keys(got[0] if got is not None else [])


def _read_back(ws: list, before: _Before, new: str, edits: list) -> Optional[str]:
    """Why the edited text does not open exactly these gates (None when it does): each
    widened expression answers for the device as for the comparison part (Python), no gate
    it widens still reads closed, and none reads closed that did not."""
    dev, cmp_ = before.dev, before.cmp
    after = None
    try:
        if before.pyf is not None:
            after = _PyFile(new, before.pyf.eng, dev, cmp_)
            c1 = _keys([row for row, _ in after.closed])
        else:
            got = G.cpp_gates(new, dev, cmp_)
            c1 = _keys(got[0] if got is not None else [])
    except SyntaxError:
        return "the edit does not parse"
    want = before.closed - Counter((w.gate.kind, w.gate.function, w.gate.condition) for w in ws if not w.kept)
    want += Counter((w.gate.kind, w.gate.function, a) for w in ws for a in w.adds)
    if c1 - want:
        still = next(iter(c1 - want))
        return f"after the edit `{still[2]}` still reads closed for {dev}"
    if after is not None:
        return _py_read_back(ws, before.pyf, after, edits, dev, cmp_)
    return None


def _shift(span: tuple[int, int], edits: list) -> tuple[int, int]:
    s, e = span
    d = lambda x: len(x[2]) - (x[1] - x[0])  # noqa: E731
    return s + sum(d(x) for x in set(edits) if x[0] < s), e + sum(d(x) for x in set(edits) if x[0] <= e)


def _py_read_back(ws: list, before: _PyFile, after: _PyFile, edits: list, dev, cmp_) -> Optional[str]:
    for w in ws:
        if w.target is None:
            continue
        s, e = _shift(w.target, edits)
        node = after.expr_at((s, e)) or after.expr_at((s + 1, e - 1))
        was = before.expr_at(w.target)
        if node is None or was is None:
            return "the widened expression is not found after the edit"
        got = [after.answer(node, d, w.collection) for d in (dev, cmp_)]
        cmp_before = before.answer(was, cmp_, w.collection)
        shown = after.src(node)
        if got[1] != cmp_before:
            return f"after the edit `{shown}` no longer answers for {cmp_} as it did"
        if got[0] != got[1]:
            said = "unknown" if got[0] is None else str(got[0]).lower()
            return f"after the edit `{shown}` reads {said} for {dev}: the analog is no check patchkit knows"
    return None


def _express(engine: str, logical: str, old: str, new: str) -> tuple[list[CapturedOp], str]:
    from patchkit.authoring.hunks import capture_text
    from patchkit.authoring.pycapture import capture_with_text

    if logical.endswith(".py"):
        ops, bad, _ = capture_with_text(engine, logical, old, new)
    else:
        ops, bad = capture_text(engine, logical, old, new)
    if bad:
        return [], "; ".join(f.why for f in bad)
    odd = sorted({o.kind for o in ops} - KINDS)
    if odd:
        return [], f"capture expresses it as {', '.join(odd)}, not a widening op kind"
    return ops, ""


@dataclass
class FileDraft:
    engine: str
    path: str  # relative to the tree's root
    logical: str
    old: bytes
    new: bytes
    ops: list
    gates: list  # Widened


def draft_file(
    engine: str,
    root: Path,
    path: str,
    logical: str,
    chosen: list[Numbered],
    dev: Device,
    cmp_: Device,
    defines=None,
) -> tuple[Optional[FileDraft], list[Refused], list[Widened]]:
    """The gates of one file: each widened and read back alone, then expressed together as
    ops (a gate whose edit capture cannot express is left out, with capture's reason)."""
    data = (root / path).read_bytes()
    text = data.decode("utf-8", "surrogateescape")
    refused: list[Refused] = []
    ok: list[Widened] = []
    pyf = None
    if path.endswith(G.PY_SUFFIXES):
        try:
            pyf = _PyFile(text, G.engine_words(engine), dev, cmp_, defines, engine, logical)
        except SyntaxError:
            return None, [Refused(c.n, c.gate, "the file does not parse") for c in chosen], []
    before = _Before(path, engine, text, dev, cmp_, pyf)
    for c in chosen:
        try:
            w = widen_python(pyf, c.gate, c.n) if pyf is not None else widen_cpp(text, c.gate, c.n, dev, cmp_)
        except Refusal as e:
            refused.append(Refused(c.n, c.gate, str(e)))
            continue
        edits = w.edits + [e for _, _, e in w.needs]
        if _overlap(edits):
            refused.append(Refused(c.n, c.gate, "its edits overlap each other: widen it by hand"))
            continue
        new = _apply(data, edits).decode("utf-8", "surrogateescape")
        why = _read_back([w], before, new, edits)
        if why:
            refused.append(Refused(c.n, c.gate, why))
            continue
        ok.append(w)
    kept: list[Widened] = []
    edits: list = []
    for w in ok:  # together: a shared need once (one import, one flag); no overlapping spans
        mine = list(w.edits) + [e for _, _, e in w.needs if e not in edits]
        if _overlap(edits + mine):
            refused.append(Refused(w.n, w.gate, "its edit overlaps another chosen gate's: draft it on its own"))
            continue
        edits += mine
        kept.append(w)
    # Expressed one gate at a time, each on the file as edited so far (so that two lists of
    # one call are two list-element ops, not one replace-expr of the call); the gates none
    # expresses alone (one check twice in a scope: a replace-expr of both) then together.
    ops: list = []
    done: list = []
    cur = text
    alone: list[tuple[Widened, str]] = []

    def step(ws: list[Widened], expect: Optional[set] = None) -> str:
        nonlocal cur, done
        trial = done + [e for w in ws for e in [*w.edits, *(x for _, _, x in w.needs)] if e not in done]
        new = _apply(data, trial).decode("utf-8", "surrogateescape")
        got, why = _express(engine, logical, cur, new)
        if why and expect is None and len(ws) == 1 and pyf is not None:
            got = _chain_replace(pyf, ws[0], engine, logical, data, done, cur, new)
            why = "" if got else why
        if why:
            return why
        if expect is not None:  # all at once: only where each gate is its own op of its kind
            widening = [o for o in got if o.kind not in ("ensure-import", "insert")]
            if len(widening) != len(ws) or not {o.kind for o in widening} <= expect:
                return "not one op per gate"
        _anchor_flags(cur, got, ws)
        jit = tuple(dict.fromkeys(m for w in ws for m in w.jit))
        for op in got:
            if jit and op.kind == "list-element":
                op.jit_modules = jit
        for w in ws:
            w.ops = got
            kinds = {o.kind for o in got}
            if w.how.startswith("replace-expr") and "replace-stmt" in kinds and "replace-expr" not in kinds:
                w.how = "replace-stmt" + w.how[len("replace-expr") :]
        ops.extend(got)
        cur, done = new, list(dict.fromkeys(trial))
        return ""

    if pyf is None:  # text hunks: all at once, each with context as the file stands before
        why = step(kept)
        alone = [(w, why) for w in kept] if why else []
    elif not _all_at_once(kept, step):
        for w in kept:
            why = step([w])
            if why:
                alone.append((w, why))
    if alone and (pyf is None or step([w for w, _ in alone])):
        for w, why in alone:
            refused.append(Refused(w.n, w.gate, _capture_reason(pyf, w, why)))
        kept = [w for w in kept if w not in [x for x, _ in alone]]
    if not kept:
        return None, refused, []
    why = _read_back(kept, before, cur, done)
    if why:
        for w in kept:
            refused.append(Refused(w.n, w.gate, f"together with the other gates of {path}: {why}"))
        return None, refused, []
    new_b = cur.encode("utf-8", "surrogateescape")
    where = {key[1]: key[2] for w in kept for kind, key, _ in w.needs if kind == "import"}
    for op in ops:
        if op.kind == "ensure-import" and op.params.get("name") in where:
            op.params["defined_in"] = where[op.params["name"]]
    return FileDraft(engine, path, logical, data, new_b, ops, kept), refused, kept


def _chain_replace(
    pyf: _PyFile, w: Widened, engine: str, logical: str, data: bytes, done: list, cur: str, new: str
) -> list:
    """A check inside an ``and`` chain (``A and get_platform().is_sm100 and C``) widened in
    place: capture's smallest replace-expr would hold its own match, so the op matches the
    whole chain (``with``: the chain with the check widened), in the gate's scope; the
    imports and flags it needs are captured first.  Kept only where the ops make exactly the
    edit; [] otherwise."""
    try:
        node = pyf.find(w.gate)[0]
    except Refusal:
        return []
    chain = pyf.parent(node)
    if not _is_and(chain) or not w.how.startswith("replace-expr") or not w.gate.function:
        return []
    a, b = pyf.span(chain)
    before, after = pyf.data[:a].rstrip(), pyf.data[b:].lstrip()
    if before.endswith(b"(") and after.startswith(b")"):  # the chain's own parentheses: a match that parses
        a, b = len(before) - 1, len(pyf.data) - len(after) + 1
    elif b"\n" in pyf.data[a:b]:
        return []
    inner = [(x - a, y - a, t) for x, y, t in w.edits if a <= x and y <= b]
    if len(inner) != len(w.edits):
        return []
    # continuation lines as the op writes them: relative to the indentation of the match's line
    line_start = pyf.data.rfind(b"\n", 0, a) + 1
    indent = pyf.data[line_start:a][: len(pyf.data[line_start:a]) - len(pyf.data[line_start:a].lstrip())]

    def dedent(src: bytes) -> str:
        lines = src.split(b"\n")
        return b"\n".join([lines[0], *(x[len(indent) :] if x.startswith(indent) else x for x in lines[1:])]).decode(
            "utf-8", "surrogateescape"
        )

    old_src = dedent(pyf.data[a:b])
    new_src = dedent(_apply(pyf.data[a:b], inner))
    ops: list = []
    mid = cur
    needs = [x for _, _, x in w.needs if x not in done]
    if needs:
        mid = _apply(data, done + needs).decode("utf-8", "surrogateescape")
        ops, why = _express(engine, logical, cur, mid)
        if why:
            return []
        _anchor_flags(cur, ops, [w])
    op = CapturedOp("replace-expr", engine, logical, w.gate.function, {"match": old_src, "count": 1}, {"with": new_src})
    if _scope_apply(op, mid) != new:
        return []
    return [*ops, op]


def _scope_apply(c: CapturedOp, text: str) -> Optional[str]:
    """The text after the op's apply in its scope, or None where it is not pending there
    (one place) or does not run."""
    import libcst as cst

    from patchkit.authoring.pycapture import _build
    from patchkit.base.states import State
    from patchkit.core import pyscope

    o = _build(c)
    if isinstance(o, str):
        return None
    try:
        chain = pyscope.resolve(cst.parse_module(text), c.scope)
        if o.locate(chain[-1]).state != State.PENDING:
            return None
        return pyscope.splice(chain, o.apply(chain[-1])).code
    except Exception:  # a scope or an op that does not run here
        return None


def _all_at_once(kept: list[Widened], step) -> bool:
    """Several gates of a file expressed by one capture (one parse of a large file, not one
    per gate), kept only where it makes one op of each gate's kind per gate."""
    if len(kept) < 2:
        return False
    expect = {w.how.split(":")[0] for w in kept} | {"replace-stmt"}
    return not step(kept, expect)


def _anchor_flags(old: str, ops: list, kept: list) -> None:
    """An inserted module flag anchored after its sibling's binding, where a reader looks for
    it, rather than on whatever statement capture found beside it: swapped in only where
    the op so anchored makes, alone on the file, the same bytes as capture's."""
    flags = {key[2]: key[1] for w in kept for kind, key, _ in w.needs if kind == "insert"}
    for op in ops:
        code = op.params.get("code", "").strip()
        if op.kind != "insert" or op.scope or code not in flags or "\n" in flags[code]:
            continue
        moved = CapturedOp(
            op.kind, op.engine, op.file, "", {"anchor": flags[code], "position": "after"}, dict(op.params)
        )
        mine, theirs = _module_apply(moved, old), _module_apply(op, old)
        if mine is not None and mine == theirs:
            op.locator = moved.locator


def _module_apply(c: CapturedOp, text: str) -> Optional[str]:
    import libcst as cst

    from patchkit.authoring.pycapture import _build

    o = _build(c)
    if isinstance(o, str):
        return None
    try:
        return o.apply(cst.parse_module(text)).code
    except Exception:  # an op that does not run here: capture's stays
        return None


def _capture_reason(pyf: Optional[_PyFile], w: Widened, reason: str) -> str:
    """capture's reason, and, for a check that stands several times in its scope, the why."""
    if pyf is not None and w.how.startswith("replace-expr"):
        try:
            node = pyf.find(w.gate)[0]
        except Refusal:
            return reason
        if isinstance(pyf.parent(node), ast.BoolOp):  # the chain is what the replace-expr matches
            node = pyf.parent(node)
        scope = next((d for d in pyf.stack(node)[::-1] if not isinstance(d, ast.ClassDef)), pyf.tree)
        same = sum(1 for n in ast.walk(scope) if isinstance(n, ast.expr) and ast.dump(n) == ast.dump(node))
        if same > 1:
            where = w.gate.function or "the module"
            return (
                f"`{pyf.src(node)}` stands {same} times in {where}: a replace-expr would widen every one of"
                " them, and no other op kind makes this edit: widen it by hand"
            )
    return f"no op kind makes exactly this edit ({reason})"


def definer(target):
    """defines(module, name) -> the logical file of the tree that binds ``name`` at the top
    level of ``module`` (a def, class or assignment, followed through ``from X import name``
    and ``from X import *``), or None."""

    def source(module: str) -> Optional[tuple[str, ast.Module, str]]:
        base = module.replace(".", "/")
        for logical, package in ((base + ".py", module.rpartition(".")[0]), (base + "/__init__.py", module)):
            try:
                p = target.root / target.relpath(logical)
            except Exception:
                continue
            if p.is_file():
                try:
                    return logical, ast.parse(p.read_bytes()), package
                except (SyntaxError, ValueError):
                    return None
        return None

    def absolute(st: ast.ImportFrom, package: str) -> str:
        if not st.level:
            return st.module or ""
        parts = package.split(".")
        up = parts[: len(parts) - (st.level - 1)] if st.level > 1 else parts
        return ".".join([*up, st.module] if st.module else up)

    def defines(module: str, name: str, depth: int = 0) -> Optional[str]:
        got = source(module)
        if got is None or depth > 4:
            return None
        logical, tree, package = got
        for st in tree.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and st.name == name:
                return logical
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if any(name in G._bound_names(t) for t in targets):
                    return logical
        for st in tree.body:
            if isinstance(st, ast.ImportFrom):
                names = {a.asname or a.name: a.name for a in st.names}
                if name in names or "*" in names:
                    found = defines(absolute(st, package), names.get(name, name), depth + 1)
                    if found:
                        return found
        return None

    return defines
