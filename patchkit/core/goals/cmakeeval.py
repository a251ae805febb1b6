"""Does a CMake arch list admit a device?  Three-valued, over tree-sitter's CMake tree.

vLLM builds its kernels from arch lists in ``CMakeLists.txt``: the toolkit's
``set(CUDA_SUPPORTED_ARCHS "7.5;8.0;...;12.0")`` under ``if(CMAKE_CUDA_COMPILER_VERSION
VERSION_GREATER_EQUAL 12.8)`` / ``elseif`` branches, and per kernel
``cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0a;10.1a;12.0a" "${CUDA_ARCHS}")``,
often itself under ``if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)``.  This
module finds those lists (``arch_lists``), the branch each stands in, and answers, for a
``Device``, in Kleene logic (True, False, None for unknown; unknown never counts as true):

* ``condition``: an ``if()``/``elseif()`` condition with CMake's documented semantics
  (cmake-commands(7), ``if``): parentheses, then the unary tests (``DEFINED``), then the
  binary tests (``VERSION_LESS``, ``VERSION_GREATER_EQUAL``..., ``STREQUAL``, ``EQUAL``...),
  then ``NOT``, then ``AND`` and ``OR`` from left to right with one precedence; an operand
  that names a variable reads its value, a quoted one is a string; a bare word is true when
  it is a true constant or a variable holding one.  The device model binds the CUDA toolkit
  (``CMAKE_CUDA_COMPILER_VERSION``, ``CUDA_VERSION``, ``CUDAToolkit_VERSION``) to
  ``Device.cuda``; where the device names no toolkit, every test of it is unknown, never
  assumed.  Other variables are unknown (they come from the cache, the command line, torch).
* ``admits``: a list admits the device as vLLM's own helper ``cuda_archs_loose_intersection``
  (cmake/utils.cmake) treats it, the target being a build for the device (``12.0``): an
  ``a``/``f`` entry whose base is the device (``12.0a``, ``12.0f``); an ``f`` entry of the
  device's major (the family: ``12.0f`` admits 12.0 and 12.1); a plain entry at or below the
  device of the same major (``12.0`` admits 12.1: SASS runs forward within a major); a
  ``+PTX`` entry at or below it whatever its major.  ``12.1a`` does not admit 12.0, nor
  ``10.0f`` 12.0.

Pure: text in, verdict out.  tree-sitter-cmake is the ``goals`` extra; without it
``available()`` is False and nothing is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from patchkit.core.goals import grammar
from patchkit.core.goals.device import Device
from patchkit.core.goals.pyeval import kleene_and, kleene_not, kleene_or

# The toolkit's version, as CMake's FindCUDA/CUDAToolkit and project(LANGUAGES CUDA) name it.
CUDA_VARS = frozenset({"CMAKE_CUDA_COMPILER_VERSION", "CUDA_VERSION", "CUDAToolkit_VERSION", "CUDA_VERSION_STRING"})
_ARCH = re.compile(r"^(\d{1,2})\.(\d)([af]?)(\+PTX)?$")
_TRUE = {"1", "ON", "YES", "TRUE", "Y"}
_FALSE = {"0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND", ""}
_UNARY = {"EXISTS", "COMMAND", "DEFINED", "POLICY", "TARGET", "TEST", "IS_DIRECTORY", "IS_SYMLINK", "IS_ABSOLUTE",
          "IS_READABLE", "IS_WRITABLE", "IS_EXECUTABLE"}  # fmt: skip
_VERSION_OPS = {"VERSION_LESS", "VERSION_GREATER", "VERSION_EQUAL", "VERSION_LESS_EQUAL", "VERSION_GREATER_EQUAL"}
_NUM_OPS = {"LESS", "GREATER", "EQUAL", "LESS_EQUAL", "GREATER_EQUAL"}
_STR_OPS = {"STRLESS", "STRGREATER", "STREQUAL", "STRLESS_EQUAL", "STRGREATER_EQUAL"}
_BINARY = _VERSION_OPS | _NUM_OPS | _STR_OPS | {"MATCHES", "IN_LIST", "IS_NEWER_THAN", "PATH_EQUAL"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VERSION = re.compile(r"^\d+(\.\d+){0,3}")
_VAR_REF = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def available() -> bool:
    """Whether tree-sitter and its CMake grammar are installed (the ``goals`` extra)."""
    return _parser() is not None


def _parser():
    return grammar.parser("tree_sitter_cmake")


# -- arch lists ---------------------------------------------------------------------------------


def arch(entry: str) -> Optional[tuple[int, int, str, bool]]:
    """``12.0a`` -> (12, 0, "a", False); ``8.0+PTX`` -> (8, 0, "", True); None for another word."""
    m = _ARCH.match(entry.strip())
    return (int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4))) if m else None


def admits(items, device: Device) -> Optional[bool]:
    """Whether ``cuda_archs_loose_intersection(OUT "<items>" "<device>")`` keeps an arch (see the
    module).  None where an element is not read (an unexpanded variable)."""
    d = (device.major, device.minor)
    unknown = False
    for item in items:
        a = arch(item)
        if a is None:
            unknown = unknown or "${" in item
            continue
        major, minor, suffix, ptx = a
        if suffix:
            if (major, minor) == d or (suffix == "f" and major == d[0]):
                return True
        elif (major, minor) <= d and (ptx or major == d[0]):
            return True
    return None if unknown else False


def is_cuda_list(items) -> bool:
    """A list of CUDA archs: some element reads as one, none is a word of another kind (gfx)."""
    return any(arch(i) for i in items) and all(arch(i) or "${" in i or not i.strip() for i in items)


@dataclass(frozen=True)
class Branch:
    """One ``if``/``elseif`` condition the list stands under, and the answer it stands under:
    ``want`` False for an ``else`` (or a later ``elseif``) of it."""

    condition: str  # as written, blanks folded
    want: bool
    line: int
    tokens: tuple = ()  # the condition's arguments: (text, quoted)
    chain: int = 0  # the if-chain's first byte: arms of one chain share it

    def shown(self) -> str:
        return f"if({self.condition})" if self.want else f"NOT if({self.condition})"


@dataclass(frozen=True)
class ArchList:
    """A literal CUDA arch list that defines a variable: ``set(V "...")`` or the source list of
    ``cuda_archs_loose_intersection(V "..." ...)``."""

    var: str
    items: tuple[str, ...]
    line: int  # the command's first line
    end_line: int
    command: str
    written: str  # the list as written
    path: tuple[Branch, ...]  # the enclosing conditions, outermost first
    guards: str = ""  # the first source file built after it, before the variable is set again
    start: int = 0  # byte offsets of the command
    end: int = 0
    function: str = ""  # the CMake function() or macro() it is defined in, "" at the top level
    extended: int = 0  # the line of a list(APPEND|PREPEND|INSERT) to its variable before it is set again

    @property
    def shown(self) -> str:
        return f'{self.var} "{self.written}"'

    def toolkit_path(self) -> tuple:
        return tuple(b for b in self.path if reads_toolkit(b))

    def branch_text(self) -> str:
        """The toolkit branches it stands in (build options aside)."""
        return " and ".join(b.shown() for b in self.toolkit_path())


def _text(node) -> str:
    return node.text.decode("utf-8", errors="replace")


def _args(cmd) -> list:
    """(text, quoted) of a command's arguments, a bracket argument as quoted."""
    out = []
    al = next((c for c in cmd.named_children if c.type == "argument_list"), None)
    if al is None:
        return out
    for a in al.children:
        if a.type in ("(", ")"):  # a parenthesis of an if() condition
            out.append((a.type, False))
            continue
        if a.type != "argument" or not a.named_children:
            continue
        inner = a.named_children[0]
        if inner.type == "quoted_argument":
            el = next((c for c in inner.named_children if c.type == "quoted_element"), None)
            out.append((_text(el) if el is not None else "", True))
        elif inner.type == "bracket_argument":
            c = next((c for c in inner.named_children if c.type == "bracket_argument_content"), None)
            out.append((_text(c) if c is not None else "", True))
        else:
            out.append((_text(inner), False))
    return out


def _split_items(value: str) -> tuple[str, ...]:
    return tuple(i.strip() for i in value.split(";") if i.strip())


_LIST_COMMANDS = {"set": 1, "cuda_archs_loose_intersection": 1}  # the argument the list is


def _walk(node, path: tuple, out: list, cmds: list, fn: str = "") -> None:
    for c in node.named_children:
        t = c.type
        if t == "normal_command":
            name = _text(c.named_children[0]).lower() if c.named_children else ""
            cmds.append((c, name))
            args = _args(c)
            at = _LIST_COMMANDS.get(name)
            if at is not None and len(args) > at and not args[0][1] and _NAME.match(args[0][0]):
                value = args[at][0]
                items = _split_items(value)
                if is_cuda_list(items):
                    out.append(
                        ArchList(
                            var=args[0][0],
                            items=items,
                            line=c.start_point[0] + 1,
                            end_line=c.end_point[0] + 1,
                            command=name,
                            written=value,
                            path=path,
                            start=c.start_byte,
                            end=c.end_byte,
                            function=fn,
                        )
                    )
        elif t == "if_condition":
            before: list = []
            for part in c.named_children:
                if part.type in ("if_command", "elseif_command"):
                    toks = tuple(_args(part))
                    shown = " ".join(_cond_text(part).split())
                    b = Branch(shown, True, part.start_point[0] + 1, toks, c.start_byte)
                    before.append(b)
                    current = path + tuple(_not(x) for x in before[:-1]) + (b,)
                elif part.type == "else_command":
                    current = path + tuple(_not(x) for x in before)
                elif part.type == "body":
                    _walk(part, current, out, cmds, fn)
        elif t in ("foreach_loop", "while_loop", "function_def", "macro_def", "block_def", "body"):
            name = fn
            if t in ("function_def", "macro_def"):
                head = c.named_children[0] if c.named_children else None
                args = _args(head) if head is not None else []
                name = args[0][0] if args else fn
            for part in c.named_children:
                if part.type == "body":
                    _walk(part, path, out, cmds, name)


def _not(b: Branch) -> Branch:
    return Branch(b.condition, False, b.line, b.tokens, b.chain)


def _cond_text(cmd) -> str:
    al = next((c for c in cmd.named_children if c.type == "argument_list"), None)
    return _text(al) if al is not None else ""


_SOURCE = re.compile(r"\.(cu|cuh|cpp|cc|c)$")


def arch_lists(text: str) -> Optional[list[ArchList]]:
    """Every literal CUDA arch list of a CMake file, in order, with its branch and what it
    guards (the first source file named after it before its variable is set again); None
    without tree-sitter-cmake."""
    parser = _parser()
    if parser is None:
        return None
    tree = parser.parse(text.encode("utf-8", "surrogateescape"))
    out: list[ArchList] = []
    cmds: list = []
    _walk(tree.root_node, (), out, cmds)
    by_start = {x.start: x for x in out}
    table = []  # (first byte, line, name, arguments, the first source file it names)
    sources: dict[str, str] = {}  # a variable set to a source file, as last seen
    for cmd, name in cmds:
        args = _args(cmd)
        src = next((a for a, _ in args for a in a.split(";") if _SOURCE.search(a.strip())), "").strip()
        table.append((cmd.start_byte, cmd.start_point[0] + 1, name, args, src))
    done = []
    for lst in out:
        guards, fallback, extended = "", "", 0
        sources = {}
        for start, line, name, args, src in table:
            first = args[0][0] if args else ""
            if name == "set" and src and first:
                sources[first] = src
            if start <= lst.end:
                continue
            if name in _LIST_COMMANDS and first == lst.var and _in_other_group(lst, by_start.get(start)):
                break
            if name == "list" and len(args) > 1 and first in ("APPEND", "PREPEND", "INSERT") and args[1][0] == lst.var:
                extended = extended or line
            fallback = fallback or src
            ref = "${" + lst.var + "}"
            if not guards and any(ref in a for a, _ in args):
                # the command that builds with it: its SRCS, a source file or a variable set to one
                at = next((k for k, (a, _) in enumerate(args) if a == "SRCS"), None)
                if at is not None and at + 1 < len(args):
                    v = args[at + 1][0]
                    m = _VAR_REF.fullmatch(v.strip())
                    guards = (
                        sources.get(m.group(1), "")
                        if m
                        else next((x.strip() for x in v.split(";") if _SOURCE.search(x.strip())), "")
                    )
        done.append(ArchList(**{**lst.__dict__, "guards": guards or fallback, "extended": extended}))
    return done


def _in_other_group(lst: ArchList, other: Optional[ArchList]) -> bool:
    """A command that sets the list's variable again (``other``: its arch list, if it is one),
    other than as another arm of the same version split (``if(13.0) set V ... else() set V
    ... endif()``)."""
    return other is None or not (other.var == lst.var and _same_split(lst, other))


def _same_split(a: ArchList, b: ArchList) -> bool:
    """Two arms of one if-chain: the same enclosing conditions but for the chain's own."""
    n = min(len(a.path), len(b.path))
    k = 0
    while k < n and a.path[k] == b.path[k]:
        k += 1
    return k < n and a.path[k].chain == b.path[k].chain


# -- conditions ---------------------------------------------------------------------------------


def _version(s: str) -> Optional[tuple[int, ...]]:
    m = _VERSION.match(s.strip())
    if not m:
        return None
    parts = [int(x) for x in m.group(0).split(".")]
    return tuple(parts + [0] * (4 - len(parts)))


class _Cond:
    def __init__(self, device: Device, env: Optional[dict] = None):
        self.device = device
        self.env = dict(env or {})
        if device.cuda is not None:
            for v in CUDA_VARS:
                self.env.setdefault(v, f"{device.cuda[0]}.{device.cuda[1]}")
        self.why: list[str] = []

    def unknown(self, why: str) -> None:
        if why not in self.why:
            self.why.append(why)
        return None

    def expand(self, text: str) -> Optional[str]:
        """``${VAR}`` references replaced by known values; None where one is unknown."""
        missing: list[str] = []

        def sub(m):
            name = m.group(1)
            if name in self.env:
                return self.env[name]
            missing.append(name)
            return ""

        out = _VAR_REF.sub(sub, text)
        if missing:
            n = missing[0]
            self.unknown(f"`${{{n}}}` is not known" + (" (the device names no CUDA version)" if n in CUDA_VARS else ""))
            return None
        return out

    def operand(self, tok) -> Optional[str]:
        """A binary test's operand: a variable's value where it names one, else itself."""
        text, quoted = tok
        if text is None:
            return None
        if quoted:
            return text
        if text in self.env:
            return self.env[text]
        if text in CUDA_VARS:
            return self.unknown(f"`{text}` is not known (the device names no CUDA version)")
        if _NAME.match(text) and not _VERSION.match(text):
            return self.unknown(f"`{text}` is not known")
        return text

    def truth(self, tok) -> Optional[bool]:
        """``if(<constant>)`` / ``if(<variable>)``."""
        if isinstance(tok, bool) or tok is None:
            return tok
        text, quoted = tok
        if text is None:
            return None
        up = text.upper()
        if up in _TRUE:
            return True
        if up in _FALSE or up.endswith("-NOTFOUND"):
            return False
        try:
            return float(text) != 0
        except ValueError:
            pass
        if quoted:
            return False
        if text in self.env:
            v = self.env[text]
            if v is None:
                return self.unknown(f"`{text}` is not known")
            vu = v.upper()
            return not (vu in _FALSE or vu.endswith("-NOTFOUND"))
        return self.unknown(f"`{text}` is not known")

    def floor_var(self, text: str) -> str:
        """The toolkit variable a ``${VAR}`` (or bare ``VAR``) names, where the device names no
        toolkit but its architecture has a first one (Device.first_cuda); else ""."""
        m = _VAR_REF.fullmatch(text)
        name = m.group(1) if m else text
        if name in CUDA_VARS and name not in self.env and self.device.first_cuda is not None:
            return name
        return ""

    def toolkit_at_least(self, a, op: str, b) -> tuple[bool, Optional[bool]]:
        """A version test of the toolkit the device names not, read over every toolkit from
        its architecture's first on: (whether it is one, the answer); true or false only where
        every such toolkit gives it."""
        first = self.device.first_cuda
        if first is None or op not in _VERSION_OPS:
            return False, None
        mirror = {"VERSION_LESS": "VERSION_GREATER", "VERSION_GREATER": "VERSION_LESS",
                  "VERSION_LESS_EQUAL": "VERSION_GREATER_EQUAL", "VERSION_GREATER_EQUAL": "VERSION_LESS_EQUAL",
                  "VERSION_EQUAL": "VERSION_EQUAL"}  # fmt: skip
        if _word(a) and self.floor_var(_word(a)):
            var, other = _word(a), b
        elif _word(b) and self.floor_var(_word(b)):
            var, other, op = _word(b), a, mirror[op]
        else:
            return False, None
        y = self.operand(other)
        v = _version(y) if y is not None else None
        if v is None:
            return True, self.unknown(f"`{y}` is not a version")
        lo = (*first, 0, 0)
        answer = {
            "VERSION_GREATER_EQUAL": True if lo >= v else None,
            "VERSION_GREATER": True if lo > v else None,
            "VERSION_LESS": False if lo >= v else None,
            "VERSION_LESS_EQUAL": False if lo > v else None,
            "VERSION_EQUAL": False if lo > v else None,
        }[op]
        if answer is None:
            self.unknown(
                f"`{var}` is not known (the device names no CUDA version; {self.device} needs"
                f" {first[0]}.{first[1]} or later)"
            )
        return True, answer

    def binary(self, a, op: str, b) -> Optional[bool]:
        floored, answer = self.toolkit_at_least(a, op, b)
        if floored:
            return answer
        x, y = self.operand(a), self.operand(b)
        if x is None or y is None:
            return None
        if op in _VERSION_OPS:
            vx, vy = _version(x), _version(y)
            if vx is None or vy is None:
                return self.unknown(f"`{x}` or `{y}` is not a version")
            return {
                "VERSION_LESS": vx < vy,
                "VERSION_GREATER": vx > vy,
                "VERSION_EQUAL": vx == vy,
                "VERSION_LESS_EQUAL": vx <= vy,
                "VERSION_GREATER_EQUAL": vx >= vy,
            }[op]
        if op in _NUM_OPS:
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                return False  # CMake: a non-number operand makes the test false
            return {"LESS": fx < fy, "GREATER": fx > fy, "EQUAL": fx == fy, "LESS_EQUAL": fx <= fy,
                    "GREATER_EQUAL": fx >= fy}[op]  # fmt: skip
        if op in _STR_OPS:
            return {"STRLESS": x < y, "STRGREATER": x > y, "STREQUAL": x == y, "STRLESS_EQUAL": x <= y,
                    "STRGREATER_EQUAL": x >= y}[op]  # fmt: skip
        if op == "IN_LIST":
            return x in y.split(";") if not b[1] and b[0] in self.env else self.unknown(f"`{b[0]}` is not known")
        if op == "MATCHES":
            try:
                return re.search(y, x) is not None
            except re.error:
                return self.unknown(f"`{y}` is not a regular expression read here")
        return self.unknown(f"`{op}` is not evaluated")

    def unary(self, op: str, tok) -> Optional[bool]:
        if op == "DEFINED":
            name = tok[0] or ""
            if name in self.env or self.floor_var(name):
                return True  # a build for the device runs under a CUDA toolkit (Device.first_cuda)
            extra = " (the device names no CUDA version)" if name in CUDA_VARS else ""
            return self.unknown(f"whether `{name}` is defined is not known{extra}")
        return self.unknown(f"`{op}` is not evaluated")

    def evaluate(self, tokens: list) -> Optional[bool]:
        """CMake's levels over the argument list (cmConditionEvaluator): parentheses, unary
        tests, binary tests, NOT, then AND/OR left to right."""
        items: list = []
        for text, quoted in tokens:
            if text in ("(", ")") and not quoted:
                items.append(text)
                continue
            if quoted:
                floor = self.floor_var(text)
                items.append((floor, False) if floor else (self.expand(text), True))
                continue
            lead = len(text) - len(text.lstrip("("))
            trail = len(text) - len(text.rstrip(")"))
            core = text[lead : len(text) - trail] if trail else text[lead:]
            items.extend(["("] * lead)
            if core:
                floor = self.floor_var(core)
                items.append((floor or (self.expand(core) if "${" in core else core), False))
            items.extend([")"] * trail)
        return self.reduce(items)

    def reduce(self, items: list) -> Optional[bool]:
        # parentheses
        while "(" in items:
            i = max(k for k, x in enumerate(items) if x == "(")
            j = next((k for k in range(i + 1, len(items)) if items[k] == ")"), None)
            if j is None:
                return self.unknown("unbalanced parentheses")
            items[i : j + 1] = [self.reduce(items[i + 1 : j])]
        items = [x for x in items if x != ")"]
        # unary tests
        out: list = []
        k = 0
        while k < len(items):
            x = items[k]
            if _word(x) in _UNARY and k + 1 < len(items):
                out.append(self.unary(_word(x), items[k + 1]))
                k += 2
            else:
                out.append(x)
                k += 1
        items, out, k = out, [], 0
        # binary tests
        while k < len(items):
            if k + 2 < len(items) + 0 and _word(items[k + 1]) in _BINARY and not isinstance(items[k], bool):
                out.append(self.binary(items[k], _word(items[k + 1]), items[k + 2]))
                k += 3
            else:
                out.append(items[k])
                k += 1
        items = out
        # NOT, right to left (NOT NOT x)
        k = len(items) - 1
        while k >= 0:
            if _word(items[k]) == "NOT" and k + 1 < len(items):
                items[k : k + 2] = [kleene_not(self.truth(items[k + 1]))]
            k -= 1
        # AND / OR, left to right, one precedence
        if not items:
            return self.unknown("an empty condition")
        acc = self.truth(items[0])
        k = 1
        while k + 1 < len(items):
            op, rhs = _word(items[k]), self.truth(items[k + 1])
            if op == "AND":
                acc = kleene_and([acc, rhs])
            elif op == "OR":
                acc = kleene_or([acc, rhs])
            else:
                return self.unknown(f"`{op}` is not an operator read here")
            k += 2
        if k < len(items):
            return self.unknown("a condition that does not read as CMake's")
        return acc


def _word(x) -> str:
    return x[0] if isinstance(x, tuple) and not x[1] and x[0] is not None else ""


def condition(tokens, device: Device, env: Optional[dict] = None) -> tuple[Optional[bool], list[str]]:
    """An ``if()`` condition (its arguments as (text, quoted)) for ``device``: (answer, why)."""
    c = _Cond(device, env)
    return c.evaluate(list(tokens)), c.why


def condition_text(text: str, device: Device, env: Optional[dict] = None) -> tuple[Optional[bool], list[str]]:
    """``condition`` of a condition as written (``CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.8``)."""
    parser = _parser()
    if parser is None:
        return None, ["tree-sitter-cmake is not installed (pip install 'patchkit[goals]')"]
    tree = parser.parse(f"if({text})\nendif()\n".encode())
    cmd = tree.root_node.named_children[0].named_children[0] if tree.root_node.named_children else None
    if cmd is None or tree.root_node.has_error:
        return None, [f"`{text}` does not parse as a CMake condition"]
    return condition(_args(cmd), device, env)


def in_effect(lst: ArchList, device: Device) -> tuple[Optional[bool], str]:
    """Whether the branch a list stands in is taken for ``device``: (answer, the branch and why)."""
    answers, why = [], []
    for b in lst.path:
        if not reads_toolkit(b):
            continue  # a build option (VLLM_GPU_LANG, ENABLE_...): configuration, not the device
        v, w = condition(b.tokens, device)
        v = v if b.want else kleene_not(v)
        answers.append(v)
        if v is not True:
            why.append(f"{b.shown()} (line {b.line}) is {_tv(v)}" + (f": {w[0]}" if w and v is None else ""))
    return kleene_and(answers) if answers else True, "; ".join(why)


def reads_toolkit(b: Branch) -> bool:
    """A branch whose condition reads the CUDA toolkit's version (the device model's part)."""
    return any(v in (t or "") for t, _ in b.tokens for v in CUDA_VARS)


def _tv(v: Optional[bool]) -> str:
    return {True: "true", False: "false", None: "unknown"}[v]


def explain(lst: ArchList, device: Device) -> str:
    """The evaluation of a list for a device, in words."""
    a = admits(lst.items, device)
    word = {True: "admits", False: "does not admit", None: "may or may not admit"}[a]
    more = f" (appended to at line {lst.extended})" if lst.extended else ""
    return f"`{lst.shown}` (line {lst.line}) {word} {device}{more}"


def value(lists: list[ArchList], device: Device) -> tuple[Optional[bool], str]:
    """What a variable set by the arms ``lists`` (one definition group) holds for ``device``:
    True where every arm not shown dead admits it, False where every arm that may be in effect
    does not, None otherwise; and the evaluation in words."""
    answers, said = [], []
    for lst in lists:
        taken, why = in_effect(lst, device)
        if taken is False:
            said.append(f"{explain(lst, device)}, not in effect ({why})")
            continue
        a = admits(lst.items, device)
        answers.append(None if a is False and lst.extended else a)
        where = f" under {lst.branch_text()}" if lst.toolkit_path() else ""
        said.append(explain(lst, device) + where + (f" ({why})" if taken is None else ""))
    if not answers:
        return None, "; ".join(said)
    if all(a is True for a in answers):
        return True, "; ".join(said)
    if all(a is False for a in answers):
        return False, "; ".join(said)
    return None, "; ".join(said)


def group(lists: list[ArchList], at: ArchList) -> list[ArchList]:
    """The arms of ``at``'s definition: itself and the lists of its variable in the other
    arms of its version split."""
    return [x for x in lists if x is at or (x.var == at.var and _same_split(at, x) and x.guards == at.guards)]


def groups(lists: list[ArchList]) -> list[list[ArchList]]:
    """Every definition group of a file, in order."""
    out: list[list[ArchList]] = []
    for lst in lists:
        if not any(lst in g for g in out):
            out.append(group(lists, lst))
    return out
