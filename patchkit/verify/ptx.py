"""What a PTX file says about its kernels: each ``.entry``, its instructions, whether its body
is empty (a lone ``ret``: the source compiled it out, e.g. behind ``__CUDA_ARCH__ < 1200``),
and how many of the chosen instructions it holds (``griddepcontrol`` matches
``griddepcontrol.wait`` and ``griddepcontrol.launch_dependents``).

A body is the text between its opening brace and the brace that balances it, comments left
out: inline asm puts its own ``{ ... }`` blocks in the body, often with a ``}`` in column 0,
so no line's look can say where a kernel ends.  Instructions are the body's statements (split
at ``;``), braces and labels before them left out, so ``{add.f16 %h0, %h1, %h2;`` counts its
``add.f16``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ENTRY = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$.]+)\s*\(", re.M)
_PRED = re.compile(r"^@!?%\w+\s+")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_OPEN = re.compile(r"//[^\n]*|/\*.*?\*/|[{;]", re.S)  # a body opens, or a declaration ends
_BRACE = re.compile(r"//[^\n]*|/\*.*?\*/|[{}]", re.S)
_LEAD = re.compile(r"(?:\s+|[{}]|[\w$.]+:)*")  # what may stand before a statement's instruction
READER = "2"  # bumped when what is counted changes: cached summaries of the old reading are not used


@dataclass
class Kernel:
    name: str  # mangled, as in the PTX
    instructions: int
    counts: dict[str, int]

    @property
    def empty(self) -> bool:
        return self.instructions <= 1  # a lone `ret` (or nothing)


@dataclass
class Family:
    """The kernels of one template (or function), their instances summed up."""

    name: str  # e.g. flashinfer::trtllm_allreduce::oneShotAllReduceKernel
    kernels: int = 0
    empty: int = 0
    least: int = 0  # instructions of the smallest instance
    most: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kernels": self.kernels,
            "empty": self.empty,
            "instructions": [self.least, self.most],
            "counts": self.counts,
        }


def family(mangled: str) -> str:
    """The qualified name of a mangled (Itanium) symbol, template arguments left out:
    ``_ZN10flashinfer3fooIfEEvT_`` -> ``flashinfer::foo``; anything else as it is."""
    s = mangled
    if s.startswith("_ZN"):
        i, parts = 3, []
        while i < len(s) and s[i].isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            parts.append(s[j : j + n])
            i = j + n
        return "::".join(parts) if parts else mangled
    m = re.match(r"_Z(\d+)", s)
    if m:
        return s[m.end() : m.end() + int(m.group(1))]
    return mangled


def opcode(stmt: str) -> str:
    """The instruction of one PTX statement (the text up to its ``;``): what leads it aside
    (braces, labels, a predicate), its first word; "" for a directive or nothing.  A
    vector operand's braces (``{%r1, %r2}``) stand after the first word and change nothing."""
    s = stmt[_LEAD.match(stmt).end() :]
    if not s or s[0] == ".":
        return ""
    s = _PRED.sub("", s)
    return s.split(None, 1)[0] if s.strip() else ""


def body(ptx: str, pos: int) -> tuple[int, int] | None:
    """(start, end) of the body that the first ``{`` after ``pos`` opens: the text between
    it and the brace that balances it, braces in comments left out.  None for a
    declaration (a ``;`` comes first) or a body that never closes."""
    start, depth = -1, 0
    for m in _OPEN.finditer(ptx, pos):
        t = m.group()
        if t == ";":
            return None
        if t == "{":
            start = m.end()
            break
    if start < 0:
        return None
    depth = 1
    for m in _BRACE.finditer(ptx, start):
        t = m.group()
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0:
                return start, m.start()
    return None


def instructions(text: str) -> list[str]:
    """The opcodes of a body's statements, in order."""
    return [o for o in map(opcode, _COMMENT.sub("", text).split(";")) if o]


def _matches(op: str, name: str) -> bool:
    return op == name or op.startswith(name + ".")


def kernels(ptx: str, count: tuple[str, ...]) -> list[Kernel]:
    """Every kernel (``.entry``) of a PTX text, with its instructions counted."""
    out = []
    for m in ENTRY.finditer(ptx):
        span = body(ptx, m.end())
        if span is None:
            continue
        ops = instructions(ptx[span[0] : span[1]])
        out.append(Kernel(m.group(1), len(ops), {c: sum(_matches(o, c) for o in ops) for c in count}))
    return out


def summary(ks: list[Kernel], count: tuple[str, ...]) -> dict:
    """A build's kernels in figures: totals, and one row per family."""
    fams: dict[str, Family] = {}
    for k in ks:
        f = fams.setdefault(family(k.name), Family(family(k.name), least=k.instructions, most=k.instructions))
        f.kernels += 1
        f.empty += k.empty
        f.least, f.most = min(f.least, k.instructions), max(f.most, k.instructions)
        for c in count:
            f.counts[c] = f.counts.get(c, 0) + k.counts.get(c, 0)
    return {
        "kernels": len(ks),
        "empty": sum(k.empty for k in ks),
        "counts": {c: sum(k.counts.get(c, 0) for k in ks) for c in count},
        "families": [f.to_json() for f in sorted(fams.values(), key=lambda f: f.name)],
    }
