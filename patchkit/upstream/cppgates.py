"""Run-time C++/CUDA capability checks as gates (issue 31): ``if (major == 10 || major == 12)``,
``TVM_FFI_ICHECK(props.major == 12)``, ``if (getSMVersion() < 100) throw ...``, closed for the
device and open for the comparison device, read by patchkit/core/goals/cppeval.py's evaluator.

A function's conditions read the device only through what binds its capability:

* ``cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)`` (cppeval's
  bindings, hipified alike) and ``std::make_tuple(major, minor)`` of those;
* ``cudaGetDeviceProperties(&props, dev)``: ``props.major``, ``props.minor``; PyTorch's
  ``at::cuda::getCurrentDeviceProperties()``: ``p->major``;
* a call of a capability accessor: one the file defines, whose every return the evaluator
  reads as ``major * 10 + minor`` (or ``major``, ``minor``), or one of ``ACCESSORS``, the
  engines' shared helpers (defined in a header the calling file does not hold);
* a name declared or assigned from any of these that reads as one (``int const sm =
  getSMVersion();``, ``smMajor = getSMVersion() / 10``, ``sm = props.major * 10 +
  props.minor``); a member assigned so (``mSM(getSMVersion())``, ``sm_ = getSMVersion()``)
  holds it in every function of the file.

Each ``if``/``while`` condition, check statement (``TORCH_CHECK(cond, ...)``, glog's
``CHECK_EQ``: cppeval's forms), ``return`` and boolean initialisation of such a function is a
site: its largest sub-expressions false for the device and true for the comparison device are
closed gates, as for Python.  An ``if`` whose branch refuses (``throw``, ``..._THROW``,
``..._ERROR``, a check of ``false``) is a gate where it is *true* for the device and false for
the comparison device (``if (sm_version < 100 || sm_version >= 120) throw``): the device is
refused there.  A condition that reads the capability and that the evaluator cannot decide for
the device is ``unknown``, never closed.  Pure: a parsed file in, rows out.
"""

from __future__ import annotations

import bisect
import re
from typing import Optional

from patchkit.core.goals import cppeval
from patchkit.core.goals.device import Device

# Shared helpers that return the device's capability, by name (the last component of a
# qualified call), as their definitions read:
ACCESSORS = {
    # TensorRT-LLM's common/cudaUtils.h, as FlashInfer 0.6.3/0.7.4 ship it
    # (data/csrc/nv_internal/include/tensorrt_llm/common/cudaUtils.h,
    # include/flashinfer/trtllm/common.h): `return sm_major * 10 + sm_minor;`
    "getSMVersion": "sm",
    # vLLM 0.33.0 csrc/cutlass_extensions/common.hpp: `major_capability * 10 + minor_capability`
    "get_sm_version_num": "sm",
    # SGLang 0.5.23 kernels/jit/include/sgl_kernel/runtime.cuh: get_cc_major * 10 + get_cc_minor
    "get_sm_version": "sm",
    "get_cc_major": "major",
    "get_cc_minor": "minor",
}
# What a file must hold for this scan to look further (a bytes search, before any parse).
_WORDS = {b"ComputeCapabilityM", b"DeviceProperties", *(k.encode() for k in ACCESSORS)}
NEEDLES = tuple(sorted(w for w in _WORDS if not any(o != w and o in w for o in _WORDS)))  # get_sm_version covers _num
_PROPS_BY_REF = frozenset(("cudaGetDeviceProperties", "hipGetDeviceProperties"))
_PROPS_RETURNED = frozenset(("getCurrentDeviceProperties", "getDeviceProperties"))
# Devices the readings are tried on: a name holds a quantity where it reads as that quantity
# on every one of them.
PROBES = tuple(Device(a, b) for a, b in ((7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)))
_QUANTITIES = ("sm", "major", "minor", "cuda_arch")
_REFUSES = re.compile(r"THROW|ERROR|FAIL|abort|exit\b|unreachable", re.I)
_ONLY_SAYS = re.compile(r"LOG|WARN|PRINT|DEBUG", re.I)  # TLLM_LOG_ERROR goes on: no refusal
_SITES = ("if_statement", "while_statement", "return_statement", "expression_statement", "init_declarator")


def holds_words(data: bytes) -> bool:
    return any(n in data for n in NEEDLES)


def _q(device: Device) -> dict:
    return {"major": device.major, "minor": device.minor, "sm": device.sm, "cuda_arch": device.cuda_arch}


def _key(node) -> str:
    """A name, field or member access as a binding key: blanks out, ``this->`` dropped."""
    s = "".join(node.text.decode(errors="replace").split())
    return s[6:] if s.startswith("this->") else s


def _callee(node) -> str:
    """The last component of a call's function name (``tensorrt_llm::common::getSMVersion``
    -> ``getSMVersion``); "" where it is not a name."""
    fn = node.child_by_field_name("function")
    if fn is None:
        return ""
    if fn.type == "template_function":
        fn = fn.child_by_field_name("name") or fn
    if fn.type in ("identifier", "field_identifier"):
        return fn.text.decode(errors="replace")
    if fn.type == "qualified_identifier":
        return fn.text.decode(errors="replace").rsplit("::", 1)[-1].strip()
    if fn.type == "field_expression":
        f = fn.child_by_field_name("field")
        return f.text.decode(errors="replace") if f is not None else ""
    return ""


class _Eval(cppeval._Eval):
    """cppeval's evaluator, reading bound members (``props.major``) and accessor calls too."""

    def __init__(self, device: Device, names: dict, calls: dict) -> None:
        q = _q(device)
        super().__init__(device, {k: q[v] for k, v in names.items()}, {}, preproc=False)
        self.calls = {k: q[v] for k, v in calls.items()}

    def value(self, node):
        t = node.type
        if t == "identifier" or t == "field_expression":
            k = _key(node)
            if k in self.idents:
                return self.idents[k]
            if t == "field_expression":
                return self.unknown(node, "is not known here")
        elif t == "call_expression":
            name = _callee(node)
            if name in self.calls:
                return self.calls[name]
        elif t in ("cast_expression", "static_cast"):
            v = node.child_by_field_name("value")
            if v is not None:
                return self.value(v)
        return super().value(node)


def _truth(v) -> Optional[bool]:
    return None if v is None else v != 0


class _Reader:
    """One file's bindings and the evaluator over them."""

    def __init__(self, functions: list) -> None:
        self.functions = functions  # those that hold a word of NEEDLES
        self.calls = dict(ACCESSORS)
        self.members: dict[str, str] = {}
        self._accessors()
        self._members()

    def eval(self, node, device: Device, names: dict):
        ev = _Eval(device, names, self.calls)
        v = ev.value(node)
        return _truth(v), v, ev.why

    def quantity(self, node, names: dict) -> Optional[str]:
        """The quantity ``node`` reads as on every probe, if any."""
        if not self.reads(node, names):
            return None
        values = []
        for d in PROBES:
            v = _Eval(d, names, self.calls).value(node)
            if v is None:
                return None
            values.append(v)
        for q in _QUANTITIES:
            if all(v == _q(d)[q] for v, d in zip(values, PROBES, strict=True)):
                return q
        return None

    def read_in(self, node, names: dict):
        """The bound names and accessor calls ``node`` reads (not through ``&x``), in source
        order: (what it says, e.g. ``major`` or ``getSMVersion()``, the quantity it is)."""
        stack = [node]
        while stack:
            n = stack.pop()
            t = n.type
            if t == "pointer_expression":
                continue
            if t in ("identifier", "field_expression") and _key(n) in names:
                yield _key(n), names[_key(n)]
            elif t == "call_expression" and _callee(n) in self.calls:
                yield f"{_callee(n)}()", self.calls[_callee(n)]
            else:
                stack.extend(reversed(n.named_children))

    def reads(self, node, names: dict) -> bool:
        """Whether ``node`` reads a bound name or calls an accessor (not through ``&x``)."""
        return next(self.read_in(node, names), None) is not None

    def _accessors(self) -> None:
        """Functions of the file whose every return reads as one quantity: accessors (a
        file's own definition that reads as another quantity wins over ``ACCESSORS``)."""
        for fn in self.functions:
            name = cppeval._function_name(fn).rsplit("::", 1)[-1].split("<", 1)[0].strip()
            rets = [
                r.named_children[0]
                for r in cppeval._walk(fn, True)
                if r.type == "return_statement" and r.named_children
            ]
            if not name or not rets:
                continue
            names = self.bindings(fn, {})
            got = {self.quantity(r, names) for r in rets}
            if len(got) == 1 and None not in got:
                self.calls[name] = got.pop()

    def _members(self) -> None:
        """Members (and globals) bound from the capability in some function
        (``mSM(getSMVersion())``, ``sm_ = getSMVersion()``, ``this->sm = ...``): read as such
        in every function of the file."""
        for n in (n for fn in self.functions for n in cppeval._walk(fn, True)):
            if n.type == "field_initializer":
                name = next((c for c in n.named_children if c.type == "field_identifier"), None)
                args = next((c for c in n.named_children if c.type == "argument_list"), None)
                inner = [a for a in args.named_children if a.type != "comment"] if args is not None else []
                if name is not None and len(inner) == 1:
                    q = self.quantity(inner[0], {})
                    if q:
                        self.members[_key(name)] = q
            elif n.type == "assignment_expression" and n.child_by_field_name("operator").text == b"=":
                left = n.child_by_field_name("left")
                if left is None or left.type not in ("field_expression", "identifier"):
                    continue
                if left.type == "identifier" and _declared_in(n, left.text):
                    continue  # a local: bindings() reads it in its own function
                q = self.quantity(n.child_by_field_name("right"), {})
                if q:
                    self.members[_key(left)] = q

    def bindings(self, fn, base: dict) -> dict:
        """What ``fn`` binds to its device's capability, in source order (``base``: the
        file's members)."""
        names = dict(base)
        for k, v in cppeval._bindings(fn).items():
            if isinstance(v, str):
                names[k] = v
        for n in cppeval._walk(fn, False):
            t = n.type
            if t == "call_expression":
                callee = _callee(n)
                if callee in _PROPS_BY_REF:
                    args = n.child_by_field_name("arguments")
                    kids = args.named_children if args is not None else []
                    ref = next((a for a in kids if a.type == "pointer_expression"), None)
                    arg = ref.child_by_field_name("argument") if ref is not None else None
                    if arg is not None and arg.type == "identifier":
                        p = _key(arg)
                        names[f"{p}.major"], names[f"{p}.minor"] = "major", "minor"
            elif t == "init_declarator":
                d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                while d is not None and d.type in ("pointer_declarator", "reference_declarator"):
                    d = d.child_by_field_name("declarator") or (d.named_children[-1] if d.named_children else None)
                if d is None or d.type != "identifier" or v is None:
                    continue
                if v.type == "call_expression" and _callee(v) in _PROPS_RETURNED:
                    p = _key(d)
                    names[f"{p}->major"], names[f"{p}->minor"] = "major", "minor"
                    continue
                q = self.quantity(v, names)
                if q:
                    names[_key(d)] = q
            elif t == "assignment_expression" and n.child_by_field_name("operator").text == b"=":
                left = n.child_by_field_name("left")
                if left is not None and left.type == "identifier":
                    q = self.quantity(n.child_by_field_name("right"), names)
                    if q:
                        names[_key(left)] = q
        return names


def _declared_in(node, name: bytes) -> bool:
    """Whether the function around ``node`` declares ``name`` (a local or a parameter)."""
    fn = node.parent
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    if fn is None:
        return False
    for n in cppeval._walk(fn, True):
        if n.type in ("init_declarator", "declaration", "parameter_declaration"):
            d = n.child_by_field_name("declarator")
            while d is not None and d.type not in ("identifier",):
                d = d.child_by_field_name("declarator")
            if d is not None and d.text == name:
                return True
    return False


def _functions(root, data: bytes, words) -> list:
    """The function definitions of the file that hold one of ``words`` (bytes), found by
    descending only into nodes that hold an occurrence (a large generated kernel is not walked)."""
    at = sorted({m.start() for w in words for m in re.finditer(re.escape(w), data)})
    if not at:
        return []
    out = []
    stack = [root]
    while stack:
        n = stack.pop()
        k = bisect.bisect_left(at, n.start_byte)
        if k == len(at) or at[k] >= n.end_byte:
            continue
        if n.type == "function_definition":
            out.append(n)
        stack.extend(reversed(n.children))
    return out


def _atoms(node) -> list:
    t = node.type
    if t == "parenthesized_expression":
        return [a for c in node.named_children for a in _atoms(c)]
    if t == "binary_expression" and node.child_by_field_name("operator").text in (b"&&", b"||"):
        return _atoms(node.child_by_field_name("left")) + _atoms(node.child_by_field_name("right"))
    if t == "unary_expression" and node.child_by_field_name("operator").text == b"!":
        return _atoms(node.child_by_field_name("argument"))
    return [node]


def _refuses(stmt) -> str:
    """What an ``if``'s branch refuses with (its first such statement), "" when it does not."""
    if stmt is None:
        return ""
    body = [c for c in stmt.named_children if c.type != "comment"] if stmt.type == "compound_statement" else [stmt]
    for s in body:
        if s.type == "throw_statement":
            return _short(s)
        if s.type == "expression_statement" and s.named_children:
            e = s.named_children[0]
            while e.type == "binary_expression" and e.child_by_field_name("operator").text == b"<<":
                e = e.child_by_field_name("left")
            if e.type == "call_expression":
                name = _callee(e)
                check = _check(s)
                if (_REFUSES.search(name) and not _ONLY_SAYS.search(name)) or (
                    check is not None and check[2].strip() in ("false", "0")
                ):
                    return _short(s)
    return ""


def _short(node) -> str:
    first = " ".join(node.text.decode(errors="replace").split())
    return first if len(first) <= 80 else first[:77] + "..."


def _first_call(node) -> str:
    if node is None:
        return ""
    for n in cppeval._walk(node, False):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None:
                s = " ".join(fn.text.decode(errors="replace").split())
                return s if len(s) <= 60 else s[:57] + "..."
    return ""


def _each_site(data: bytes, root, holds: Optional[bool] = None):
    """(reader, the names its function binds, kind, condition node, guards, refusal, function
    name) of each site that reads the capability, in the file's functions that may
    (``holds``: ``holds_words(data)``, where the caller knows it)."""
    if not (holds_words(data) if holds is None else holds):
        return
    reader = _Reader(_functions(root, data, NEEDLES))
    # what reads the capability elsewhere: the members bound, the accessors the file defines
    more = {k.rsplit("->", 1)[-1].rsplit(".", 1)[-1].encode() for k in reader.members}
    more |= {k.encode() for k in reader.calls if k not in ACCESSORS}
    seen: set = set()
    for fn in _functions(root, data, NEEDLES + tuple(more)):
        names = reader.bindings(fn, reader.members)
        if not names and not any(
            n.type == "call_expression" and _callee(n) in reader.calls for n in cppeval._walk(fn, True)
        ):
            continue
        fname = cppeval._function_name(fn)
        for n in cppeval._walk(fn, True):
            if n.type not in _SITES or n.id in seen:
                continue
            site = _site(n)
            if site is None or not reader.reads(site[1], names):
                continue
            seen.add(n.id)
            yield (reader, names, *site, fname)


def runtime_gates(
    data: bytes, root, device: Device, compare: Device, holds: Optional[bool] = None
) -> tuple[list[dict], list[dict]]:
    """The closed and unknown run-time capability checks of a file (``data``, its bytes, and
    ``root``, its tree-sitter-cpp tree's root node), as gates.py's rows."""
    closed: list[dict] = []
    unknown: list[dict] = []
    for reader, names, kind, cond, guards, refusal, fname in _each_site(data, root, holds):
        _judge(reader, names, kind, cond, guards, refusal, fname, device, compare, closed, unknown)
    closed.sort(key=lambda r: r["line"])
    unknown.sort(key=lambda r: r["line"])
    return closed, unknown


def sites(data: bytes, root) -> list[tuple[int, str, str, str]]:
    """(line, kind, function, condition as written, blanks folded) of every run-time site that
    reads the capability, whatever it answers: where ``gates --across`` looks for a check
    that no longer reads closed (``major == 10`` widened to ``major == 10 || major == 12``)."""
    return sorted(
        (c.start_point[0] + 1, kind, fname, " ".join(c.text.decode(errors="replace").split()))
        for _, _, kind, c, _, _, fname in _each_site(data, root)
    )


def _site(n) -> Optional[tuple]:
    """(kind, condition node, what it guards, what its branch refuses with) of a site."""
    t = n.type
    if t in ("if_statement", "while_statement"):
        c = n.child_by_field_name("condition")
        inner = [x for x in c.named_children if x.type != "comment"] if c is not None else []
        if len(inner) != 1 or inner[0].type in ("declaration", "init_statement"):
            return None
        body = n.child_by_field_name("consequence") or n.child_by_field_name("body")
        refusal = _refuses(body) if t == "if_statement" else ""
        return ("if" if t == "if_statement" else "while"), inner[0], _first_call(body), refusal
    if t == "return_statement":
        e = n.named_children[0] if n.named_children else None
        return ("return", e, "", "") if e is not None and _boolish(e) else None
    if t == "init_declarator":
        v = n.child_by_field_name("value")
        return ("binding", v, "", "") if v is not None and _boolish(v) else None
    if t == "expression_statement":
        check = _check(n)
        if check is None:
            return None
        name, _, _, args = check
        if len(args) != 1:
            return None  # CHECK_EQ(a, b): the comparison is built by the macro, not written
        return "check", args[0], f"{name} refuses", ""
    return None


# Check macros beyond cppeval's forms that take their condition first, then a message:
# TensorRT-LLM's ``TLLM_CHECK_WITH_INFO(cond, "...")``, ``..._CHECK_MSG``, ``..._ASSERT``.
_MORE_CHECKS = re.compile(r"(?:[A-Z][A-Z0-9]*_)*(?:CHECK|ASSERT)(?:_WITH_INFO|_MSG|_MESSAGE)?")


def _check(stmt) -> Optional[tuple]:
    """cppeval's check statement, or one of ``_MORE_CHECKS``: (name, shown, condition, args)."""
    got = cppeval._check(stmt)
    if got is not None:
        return got
    e = stmt.named_children[0] if stmt.named_children else None
    if e is None or e.type != "call_expression":
        return None
    fn, args = e.child_by_field_name("function"), e.child_by_field_name("arguments")
    if fn is None or fn.type != "identifier" or args is None or not _MORE_CHECKS.fullmatch(fn.text.decode()):
        return None
    items = [a for a in args.named_children if a.type != "comment"]
    if not items:
        return None
    return fn.text.decode(), _short(e), " ".join(items[0].text.decode(errors="replace").split()), (items[0],)


def _boolish(node) -> bool:
    t = node.type
    if t == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        return len(inner) == 1 and _boolish(inner[0])
    if t == "binary_expression":
        return node.child_by_field_name("operator").text in (b"&&", b"||", b"==", b"!=", b"<", b"<=", b">", b">=")
    return t == "unary_expression" and node.child_by_field_name("operator").text == b"!"


def _why(reader: _Reader, node, names: dict, device: Device, word: str) -> str:
    """``word for DEVICE: major is 12, getSMVersion() is 120``: the bound values it reads."""
    q = _q(device)
    said = list(dict.fromkeys(f"{what} is {q[quantity]}" for what, quantity in reader.read_in(node, names)))
    return f"{word} for {device}" + (": " + ", ".join(said[:4]) if said else "")


def _judge(reader, names, kind, cond, guards, refusal, fname, device, compare, closed, unknown) -> None:
    def ev(node, d):
        return reader.eval(node, d, names)

    line = cond.start_point[0] + 1
    dv, _, why = ev(cond, device)
    cv = ev(cond, compare)[0]
    if refusal:
        if dv is True and cv is False:
            closed.append(
                {
                    "line": line,
                    "kind": kind,
                    "condition": " ".join(cond.text.decode(errors="replace").split()),
                    "why": _why(reader, cond, names, device, "true") + f", and the branch refuses: {refusal}",
                    "open_why": _why(reader, cond, names, compare, "false"),
                    "function": fname,
                    "guards": f"refuses: {refusal}",
                }
            )
            return
        if dv is None and cv is False:
            _unknown(reader, names, kind, cond, why, fname, device, compare, unknown)
        return
    hits: list = []
    top = _find(reader, names, cond, device, compare, hits)
    for h in hits:
        closed.append(
            {
                "line": h.start_point[0] + 1,
                "kind": kind,
                "condition": " ".join(h.text.decode(errors="replace").split()),
                "why": _why(reader, h, names, device, "false"),
                "open_why": _why(reader, h, names, compare, "true"),
                "function": fname,
                "guards": guards,
            }
        )
    if not hits and top is None and cv is not False and kind != "binding":
        _unknown(reader, names, kind, cond, why, fname, device, compare, unknown)


def _unknown(reader, names, kind, cond, why, fname, device, compare, unknown) -> None:
    for atom in _atoms(cond):
        if not reader.reads(atom, names):
            continue
        dv = reader.eval(atom, device, names)[1]
        cv = reader.eval(atom, compare, names)[1]
        if dv is None or dv != cv:
            unknown.append(
                {
                    "line": cond.start_point[0] + 1,
                    "kind": kind,
                    "condition": " ".join(cond.text.decode(errors="replace").split()),
                    "why": f"unknown for {device}: {why[0]}" if why else f"unknown for {device}",
                    "function": fname,
                    "state": "unknown",
                }
            )
            return


def _find(reader, names, node, device: Device, compare: Device, out: list) -> Optional[bool]:
    """The largest sub-expressions of ``node`` false for the device and true for the
    comparison device (gates.py's ``_cpp_find`` over a run-time condition)."""
    dv = reader.eval(node, device, names)[0]
    if dv is False and reader.reads(node, names):
        if reader.eval(node, compare, names)[0] is True:
            out.append(node)
            return dv
    t = node.type
    if t == "parenthesized_expression":
        for c in node.named_children:
            _find(reader, names, c, device, compare, out)
    elif t == "binary_expression":
        op = node.child_by_field_name("operator").text
        if op == b"||" and dv is True:
            return dv  # an operand admits the device already
        if op in (b"&&", b"||"):
            _find(reader, names, node.child_by_field_name("left"), device, compare, out)
            _find(reader, names, node.child_by_field_name("right"), device, compare, out)
    return dv
