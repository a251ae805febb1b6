"""Does a C++/CUDA gate already admit a device?  Three-valued, over tree-sitter's C++ tree.

Kernels are gated twice: at compile time (``#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >=
900 && __CUDA_ARCH__ < 1200``, which compiles the body out of an SM120 build) and at run time
(``if (major == 10 || major == 12)``).  This module evaluates either for a ``Device`` in Kleene
logic (True, False, None for unknown), as pyeval.py does for Python: ``__CUDA_ARCH__`` is the
device's ``cuda_arch`` (1200 for 12.0; the device pass of the compile, where a kernel's body
is), ``defined(__CUDA_ARCH__)`` is true, other macros are unknown unless the caller defines
them; a runtime check reads only the identifiers the caller binds (``{"major": "major"}``).

The expression is parsed with tree-sitter's C++ grammar, the project's rule for C++ (a
maintained parser, not regexes).  It is an optional dependency (``pip install
patchkit[goals]``): without it, or on a parse error, every verdict is unknown, and the
explanation says why.  Pure: text in, verdict out; no file is read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional, Union

from patchkit.core.goals import grammar
from patchkit.core.goals.device import Device
from patchkit.core.goals.pyeval import kleene_and, kleene_not, kleene_or

Value = Optional[int]  # C's truth values are ints; None: unknown
# what an identifier of a runtime check may stand for (or an int the caller knows)
QUANTITIES = ("major", "minor", "sm", "cuda_arch")


def available() -> bool:
    """Whether tree-sitter and its C++ grammar are installed (the ``goals`` extra)."""
    return _parser() is not None


def _parser():
    return grammar.parser("tree_sitter_cpp")


class _Eval:
    def __init__(
        self,
        device: Device,
        idents: Mapping[str, int],
        defined: Mapping[str, bool],
        preproc: bool,
        tuples: Optional[Mapping[str, tuple]] = None,
    ):
        self.device, self.idents, self.defined, self.preproc = device, idents, defined, preproc
        self.tuples = tuples or {}  # a name bound to ``std::make_tuple(major, minor)``: read with std::get<K>
        self.why: list[str] = []

    def unknown(self, node, why: str) -> None:
        if not self.why:
            self.why.append(f"`{node.text.decode(errors='replace')}` {why}")
        return None

    def value(self, node) -> Value:
        t = node.type
        if t == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            return self.value(inner[0]) if len(inner) == 1 else self.unknown(node, "is not one expression")
        if t == "number_literal":
            n = _int(node.text.decode())
            return n if n is not None else self.unknown(node, "is no int literal")
        if t in ("true", "false"):
            return 1 if t == "true" else 0
        if t == "identifier":
            name = node.text.decode()
            if name in self.idents:
                return self.idents[name]
            return self.unknown(node, "is not known here" + (" (a macro the build may define)" if self.preproc else ""))
        if t == "preproc_defined":
            ids = [c for c in node.named_children if c.type == "identifier"]
            if len(ids) != 1:
                return self.unknown(node, "is not modelled")
            name = ids[0].text.decode()
            if name in self.defined:
                return int(self.defined[name])
            return self.unknown(node, "depends on the build's macros")
        if t == "unary_expression":
            op = node.child_by_field_name("operator").text.decode()
            v = self.value(node.child_by_field_name("argument"))
            if op == "!":
                k = kleene_not(None if v is None else v != 0)
                return None if k is None else int(k)
            if v is None:
                return None
            if op == "-":
                return -v
            if op == "+":
                return v
            return self.unknown(node, "is an operation not modelled")
        if t == "binary_expression":
            return self.binary(node)
        if t == "conditional_expression":
            c = self.value(node.child_by_field_name("condition"))
            a, b = node.child_by_field_name("consequence"), node.child_by_field_name("alternative")
            if c is not None:
                return self.value(a if c else b)
            va, vb = self.value(a), self.value(b)
            return va if va is not None and va == vb else None
        if t == "call_expression":
            got = self.tuple_get(node)
            if got is not None:
                return got
            return self.unknown(node, "is a call (a function-like macro or a function) not modelled")
        return self.unknown(node, "is not modelled")

    def tuple_get(self, node) -> Value:
        """``std::get<K>(name)`` of a name bound to a tuple of the capability; None otherwise."""
        fn, args = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        if fn is None or args is None or fn.type != "qualified_identifier":
            return None
        m = _GET.fullmatch("".join(fn.text.decode(errors="replace").split()))
        inner = [a for a in args.named_children if a.type != "comment"]
        if m is None or len(inner) != 1 or inner[0].type != "identifier":
            return None
        held = self.tuples.get(inner[0].text.decode())
        k = int(m.group(1))
        return held[k] if held is not None and k < len(held) else None

    def binary(self, node) -> Value:
        op = node.child_by_field_name("operator").text.decode()
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if op in ("&&", "||"):
            parts = [_truth(self.value(left)), _truth(self.value(right))]
            k = kleene_and(parts) if op == "&&" else kleene_or(parts)
            return None if k is None else int(k)
        a, b = self.value(left), self.value(right)
        if a is None or b is None:
            return None
        cmp = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}
        if op in cmp:
            return int(cmp[op])
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op in ("/", "%") and b != 0:
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C truncates toward zero
            return q if op == "/" else a - q * b
        return self.unknown(node, "is an operation not modelled")


_GET = re.compile(r"(?:::)?std::get<(\d+)>")


def _truth(v: Value) -> Optional[bool]:
    return None if v is None else v != 0


def _int(text: str) -> Optional[int]:
    s = text.lower().rstrip("ul")
    try:
        if s.startswith("0x"):
            return int(s, 16)
        if s.startswith("0b"):
            return int(s, 2)
        if len(s) > 1 and s.startswith("0"):
            return int(s, 8)
        return int(s.replace("'", ""))
    except ValueError:
        return None


def _line(shown: str, verdict: Optional[bool], device: Device, why: list[str]) -> str:
    word = {True: "true", False: "false", None: "unknown"}[verdict]
    line = f"`{shown}` is {word} for {device}"
    return line + (f": {why[0]}" if verdict is None and why else "")


def evaluate_if(
    condition: str,
    device: Device,
    defines: Optional[Mapping[str, Union[int, bool]]] = None,
) -> tuple[Optional[bool], str]:
    """Whether a preprocessor condition (``#if``/``#elif`` with or without the directive)
    holds in the device pass of a compile for ``device``, and why in a line.  ``defines``:
    macros the caller knows (name -> value; False: known undefined); ``__CUDA_ARCH__`` is
    the device's unless given there."""
    text = " ".join(condition.replace("\\\n", " ").split())
    for d in ("#elif", "#if"):
        if text.startswith(d + " ") or text.startswith(d + "("):
            text = text[len(d) :].strip()
            break
    parser = _parser()
    if parser is None:
        return None, f"`{text}` is unknown for {device}: tree-sitter is not installed (pip install patchkit[goals])"
    macros: dict[str, Union[int, bool]] = {"__CUDA_ARCH__": device.cuda_arch, **(defines or {})}
    idents = {k: int(v) for k, v in macros.items() if v is not False}
    defined = {k: v is not False for k, v in macros.items()}
    tree = parser.parse(f"#if {text}\n#endif\n".encode())
    node = tree.root_node.children[0] if tree.root_node.children else None
    if tree.root_node.has_error or node is None or node.type != "preproc_if":
        return None, f"`{text}` is unknown for {device}: not a preprocessor condition"
    ev = _Eval(device, idents, defined, preproc=True)
    verdict = _truth(ev.value(node.child_by_field_name("condition")))
    return verdict, _line(text, verdict, device, ev.why)


def evaluate_cpp(
    expr: str,
    device: Device,
    names: Optional[Mapping[str, Union[str, int, tuple]]] = None,
) -> tuple[Optional[bool], str]:
    """Whether a C++ runtime condition (``major == 10 || major == 12``) is true on ``device``,
    and why in a line.  ``names``: identifier -> what it holds, one of ``QUANTITIES``
    ("major", "minor", "sm", "cuda_arch") or an int, or a tuple of them (a name bound to
    ``std::make_tuple(major, minor)``, read with ``std::get<0>(name)``); any other identifier
    is unknown."""
    text = " ".join(expr.split())
    parser = _parser()
    if parser is None:
        return None, f"`{text}` is unknown for {device}: tree-sitter is not installed (pip install patchkit[goals])"
    q = {"major": device.major, "minor": device.minor, "sm": device.sm, "cuda_arch": device.cuda_arch}
    idents: dict[str, int] = {}
    tuples: dict[str, tuple] = {}

    def quantity(k: str, v: Union[str, int]) -> int:
        if isinstance(v, str):
            if v not in q:
                raise ValueError(f"{k}: {v!r} is not one of {', '.join(QUANTITIES)}")
            return q[v]
        return int(v)

    for k, v in (names or {}).items():
        if isinstance(v, tuple):
            tuples[k] = tuple(quantity(k, x) for x in v)
        else:
            idents[k] = quantity(k, v)
    tree = parser.parse(f"auto __patchkit_gate = ({text});\n".encode())
    root = tree.root_node
    decl = root.children[0] if root.children else None
    init = decl.child_by_field_name("declarator") if decl is not None and decl.type == "declaration" else None
    value = init.child_by_field_name("value") if init is not None else None
    if root.has_error or len(root.children) != 1 or value is None:
        return None, f"`{text}` is unknown for {device}: not a C++ expression"
    ev = _Eval(device, idents, {}, preproc=False, tuples=tuples)
    verdict = _truth(ev.value(value))
    return verdict, _line(text, verdict, device, ev.why)


def preproc_conditions(source: str) -> Optional[list[tuple[int, str]]]:
    """The ``#if``/``#elif`` conditions of a C++/CUDA source, as (line, condition text), in
    order; None without tree-sitter."""
    parser = _parser()
    if parser is None:
        return None
    out: list[tuple[int, str]] = []
    stack = [parser.parse(source.encode()).root_node]
    while stack:
        node = stack.pop()
        if node.type in ("preproc_if", "preproc_elif"):
            cond = node.child_by_field_name("condition")
            if cond is not None:
                out.append((cond.start_point[0] + 1, cond.text.decode(errors="replace")))
        stack.extend(reversed(node.children))
    return out


# -- the device gates of a scope (goal.py's C++ goal) ------------------------------------------

# What vLLM's and FlashInfer's csrc read a device's capability from: ``cudaDeviceGetAttribute
# (&major, cudaDevAttrComputeCapabilityMajor, dev)`` binds ``major`` (hipified alike).
_ATTRS = {
    "cudaDevAttrComputeCapabilityMajor": "major",
    "cudaDevAttrComputeCapabilityMinor": "minor",
    "hipDeviceAttributeComputeCapabilityMajor": "major",
    "hipDeviceAttributeComputeCapabilityMinor": "minor",
}

# A check statement is a gate too: the function goes on past it only where its condition holds
# (``TVM_FFI_ICHECK(major == 10 || major == 12) << "..."``, ``TORCH_CHECK(cond, "...")``,
# glog's ``CHECK_EQ(a, b)``).  The macro's name says its form: ``..CHECK`` (and ``assert``)
# takes the condition first, ``..CHECK_EQ`` and its kin compare their two arguments.
_CHECK = re.compile(r"(?:[A-Z][A-Z0-9]*_)*[DI]?CHECK(?:_(EQ|NE|LT|LE|GT|GE))?|assert")
_CHECK_OPS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
_CLASSES = ("class_specifier", "struct_specifier")


def _function_name(fn) -> str:
    """A function definition's name as written (``ns::f``, ``f<T>``'s ``f``), a method defined
    in its class's body qualified by the class (``FP4BlockScaleLauncher::init``, as one defined
    out of it is written ``FusedMoeLauncher::init_common``); "" when none."""
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type not in ("function_declarator",):
        d = d.child_by_field_name("declarator")
    d = d.child_by_field_name("declarator") if d is not None else None
    if d is None:
        return ""
    name = d.text.decode(errors="replace")
    owners = []
    p = fn.parent
    while p is not None:
        if p.type in _CLASSES:
            n = p.child_by_field_name("name")
            if n is not None:
                owners.append(n.text.decode(errors="replace"))
        p = p.parent
    return "::".join([*reversed(owners), name])


def _class_of(fn) -> tuple[str, tuple[str, ...]]:
    """(the class a method belongs to, its direct bases named in its class body's clause):
    for a method defined in its class, or one written ``Class::method`` out of it."""
    p = fn.parent
    while p is not None and p.type not in _CLASSES:
        p = p.parent
    if p is not None:
        n = p.child_by_field_name("name")
        bases = tuple(
            c.text.decode(errors="replace")
            for b in p.children
            if b.type == "base_class_clause"
            for c in b.named_children
            if c.type in ("type_identifier", "qualified_identifier")
        )
        return (n.text.decode(errors="replace") if n is not None else "", bases)
    name = _function_name(fn)
    return (name.rsplit("::", 1)[0], ()) if "::" in name else ("", ())


def _walk(node, skip_functions: bool):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        kids = [c for c in n.children if not (skip_functions and c.type == "function_definition")]
        stack.extend(reversed(kids))


def scope_at(source: str, line: int) -> Optional[str]:
    """The name of the innermost function definition holding 1-based ``line``; "" for the
    file's top level; None without tree-sitter."""
    parser = _parser()
    if parser is None:
        return None
    best = ""
    for n in _walk(parser.parse(source.encode("utf-8", "surrogateescape")).root_node, False):
        if n.type == "function_definition" and n.start_point[0] + 1 <= line <= n.end_point[0] + 1:
            best = _function_name(n) or best
    return best


def _attr_binding(n) -> Optional[tuple[str, str]]:
    """(name, quantity) where ``n`` is ``cudaDeviceGetAttribute(&name, <capability attr>, dev)``."""
    if n.type != "call_expression":
        return None
    args = n.child_by_field_name("arguments")
    if args is None:
        return None
    kinds = [
        _ATTRS[a.text.decode()] for a in args.named_children if a.type == "identifier" and a.text.decode() in _ATTRS
    ]
    refs = [
        a.child_by_field_name("argument")
        for a in args.named_children
        if a.type == "pointer_expression" and a.child_by_field_name("operator").text == b"&"
    ]
    if len(kinds) == 1 and len(refs) == 1 and refs[0] is not None and refs[0].type == "identifier":
        return refs[0].text.decode(), kinds[0]
    return None


def _make_tuple(n, bound: Mapping[str, str]) -> Optional[tuple]:
    """The quantities of ``std::make_tuple(major, minor)`` (each a bound name), else None."""
    if n is None or n.type != "call_expression":
        return None
    fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
    if (
        fn is None
        or args is None
        or "".join(fn.text.decode(errors="replace").split()) not in ("std::make_tuple", "::std::make_tuple")
    ):
        return None
    items = [a for a in args.named_children if a.type != "comment"]
    if not items or any(a.type != "identifier" or a.text.decode() not in bound for a in items):
        return None
    return tuple(bound[a.text.decode()] for a in items)


def _bindings(scope) -> dict:
    """Identifiers a function binds to its device's capability (``_ATTRS``), and names it
    initialises with a tuple of them: ``device_props = std::make_tuple(major, minor)``, or a
    lambda called in place that returns one (FlashInfer 0.6.3's ``static const std::tuple<int,
    int> device_props = [this] { ...; return std::make_tuple(major, minor); }();``)."""
    out: dict = {}
    for n in _walk(scope, False):
        got = _attr_binding(n)
        if got is not None:
            out[got[0]] = got[1]
    for n in _walk(scope, False):
        if n.type != "init_declarator":
            continue
        name, value = n.child_by_field_name("declarator"), n.child_by_field_name("value")
        if name is None or name.type != "identifier" or value is None:
            continue
        held = _make_tuple(value, out)
        fn = value.child_by_field_name("function") if value.type == "call_expression" else None
        if held is None and fn is not None and fn.type == "lambda_expression":
            returns = [r for r in _walk(fn, True) if r.type == "return_statement" and r.named_children]
            got = {_make_tuple(r.named_children[0], out) for r in returns}
            held = got.pop() if len(got) == 1 else None
        if held is not None:
            out[name.text.decode()] = held
    return out


class Gate(tuple):
    """(line, kind: "#if", "if" or a check macro's name, the condition as written, the answer
    on the device, why)."""

    __slots__ = ()

    line = property(lambda s: s[0])
    kind = property(lambda s: s[1])
    text = property(lambda s: s[2])
    answer = property(lambda s: s[3])
    why = property(lambda s: s[4])

    @property
    def shown(self) -> str:
        """The gate as a reader sees it: ``if major == 10``, ``TVM_FFI_ICHECK_EQ(major, 10)``."""
        return f"{self.kind} {self.text}" if self.kind in ("#if", "if") else self.text


def _check(stmt) -> Optional[tuple]:
    """(macro name, the check as written, its condition as an expression, the argument nodes it
    reads) of a check statement
    (``_CHECK``: ``TVM_FFI_ICHECK_EQ(major, 10) << "msg";``), else None."""
    e = stmt.named_children[0] if stmt.named_children else None
    while e is not None and e.type == "binary_expression" and e.child_by_field_name("operator").text == b"<<":
        e = e.child_by_field_name("left")  # the message streamed into the check
    if e is None or e.type != "call_expression":
        return None
    fn, args = e.child_by_field_name("function"), e.child_by_field_name("arguments")
    m = _CHECK.fullmatch(fn.text.decode(errors="replace")) if fn is not None and fn.type == "identifier" else None
    if m is None or args is None:
        return None
    items = [a for a in args.named_children if a.type != "comment"]
    shown = " ".join(e.text.decode(errors="replace").split())
    if m.group(1):
        if len(items) != 2:
            return None
        a, b = (" ".join(x.text.decode(errors="replace").split()) for x in items)
        a, b = (f"({x})" if " " in x else x for x in (a, b))
        return fn.text.decode(), shown, f"{a} {_CHECK_OPS[m.group(1)]} {b}", tuple(items)
    if not items:
        return None
    return fn.text.decode(), shown, " ".join(items[0].text.decode(errors="replace").split()), (items[0],)


def _reads_capability(nodes, names: Mapping) -> bool:
    """Whether an expression names the device's capability: a name the function binds to it
    (``_bindings``), or ``__CUDA_ARCH__``."""
    for node in nodes:
        for n in _walk(node, False):
            if n.type == "identifier" and (n.text.decode(errors="replace") in names or n.text == b"__CUDA_ARCH__"):
                return True
    return False


def _functions(root, name: str) -> list:
    return [n for n in _walk(root, False) if n.type == "function_definition" and _function_name(n) == name]


def gates(
    source: str, scope: str, device: Device, probes: tuple = (), undecided: Optional[list] = None
) -> Optional[list[Gate]]:
    """The device gates of ``scope`` (a function's name as ``scope_at`` gives it, "" the file's
    top level, outside every function) in ``source``: ``#if``/``#elif`` conditions, and in a
    function the conditions of its ``if`` statements and of its check statements
    (``TVM_FFI_ICHECK(major == 10 || major == 12)``), whose answer is known on every device of
    ``probes`` and not the same on all (a check of the device, not of a flag), with the answer
    on ``device``.  None without tree-sitter, or where ``scope`` names no function or several
    (overloads: which is the site cannot be told).  ``undecided``, where given, receives
    (line, the condition as shown) of each condition left out because its answer is unknown
    on some device though it reads the capability (a name the function binds to it, or
    ``__CUDA_ARCH__``): ``TVM_FFI_ICHECK(is_sm100_family(major))`` may refuse the device."""
    parser = _parser()
    if parser is None:
        return None
    root = parser.parse(source.encode("utf-8", "surrogateescape")).root_node
    if scope:
        found = _functions(root, scope)
        if len(found) != 1:
            return None
        node, names = found[0], _bindings(found[0])
    else:
        node, names = root, {}
    out: list[Gate] = []
    for n in _walk(node, not scope):
        if scope and n is not node and n.type == "function_definition":
            continue
        if n.type in ("preproc_if", "preproc_elif"):
            kind, cond = "#if", n.child_by_field_name("condition")
        elif n.type == "if_statement" and scope:
            kind, cond = "if", n.child_by_field_name("condition")
        elif n.type == "expression_statement" and scope and (check := _check(n)) is not None:
            kind, cond = check[1], n
        else:
            continue
        if cond is None:
            continue
        text = cond.text.decode(errors="replace")
        expr, reads = text, (cond,)
        if kind == "if":
            inner = [c for c in cond.named_children if c.type != "comment"]
            if len(inner) != 1:
                continue
            text = expr = inner[0].text.decode(errors="replace")
            reads = (inner[0],)
        elif kind != "#if":
            kind, text, expr, reads = check

        def judge(d: Device, expr=expr, kind=kind):
            return evaluate_if(expr, d) if kind == "#if" else evaluate_cpp(expr, d, names)

        answers = {judge(d)[0] for d in probes}
        if probes and (None in answers or len(answers) < 2):
            if undecided is not None and None in answers and _reads_capability(reads, names):
                shown = " ".join(text.split())
                undecided.append((n.start_point[0] + 1, f"{kind} {shown}" if kind in ("#if", "if") else shown))
            continue
        verdict, why = judge(device)
        out.append(
            Gate(
                (
                    n.start_point[0] + 1 if kind not in ("#if", "if") else cond.start_point[0] + 1,
                    kind,
                    " ".join(text.split()),
                    verdict,
                    why,
                )
            )
        )
    return out


def callees(source: str, scope: str) -> Optional[list[str]]:
    """The functions defined in ``source`` that the function ``scope`` calls directly, by the
    names ``gates`` takes, in the order of their first call (not ``scope`` itself):
    ``Class::f(...)`` the function of that name; ``f(...)`` or ``this->f(...)`` the caller's
    class's method ``f``, else the one of its direct bases that defines it, else a free
    function ``f``.  A name that does not resolve to exactly one definition in the file is
    left out (another file's, or an overload).  None without tree-sitter or where ``scope``
    is not one function."""
    parser = _parser()
    if parser is None or not scope:
        return None
    root = parser.parse(source.encode("utf-8", "surrogateescape")).root_node
    found = _functions(root, scope)
    if len(found) != 1:
        return None
    fn = found[0]
    defined: dict[str, int] = {}
    for n in _walk(root, False):
        if n.type == "function_definition":
            name = _function_name(n)
            defined[name] = defined.get(name, 0) + 1
    cls, bases = _class_of(fn)
    out: list[str] = []
    for n in _walk(fn, False):
        if n.type != "call_expression":
            continue
        f = n.child_by_field_name("function")
        if f is None:
            continue
        if f.type == "qualified_identifier":
            names = ["".join(f.text.decode(errors="replace").split()).lstrip(":")]
        elif f.type == "identifier" or (
            f.type == "field_expression"
            and f.child_by_field_name("argument") is not None
            and f.child_by_field_name("argument").type == "this"
        ):
            short = (f if f.type == "identifier" else f.child_by_field_name("field")).text.decode(errors="replace")
            own = [f"{cls}::{short}"] if cls else []
            inherited = [f"{b}::{short}" for b in bases if defined.get(f"{b}::{short}") == 1]
            names = own if own and defined.get(own[0]) == 1 else (inherited if len(inherited) == 1 else [short])
        else:
            continue
        name = names[0] if len(names) == 1 else ""
        if name and name != scope and defined.get(name) == 1 and name not in out:
            out.append(name)
    return out
