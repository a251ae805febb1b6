"""verify's PTX reading against an independent count of the same PTX.

Inline asm puts its own ``{ ... }`` blocks into a kernel's body, with the ``}`` in column 0
(FlashInfer 0.6.3's trtllm_moe_allreduce_fusion.cu for sm_120a holds 640 griddepcontrol, of
which a body cut at the first column-0 ``}`` saw 400; trtllm_allreduce_fusion.cu 672, not
608).  tests/fixtures/ptx/inline_asm.cu is a small unit of that shape; its PTX from nvcc 13.0
for sm_120a is kept beside it, and where nvcc is installed the unit is compiled afresh."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.verify import ptx

HERE = Path(__file__).parents[1] / "fixtures" / "ptx"
CU, PTX = HERE / "inline_asm.cu", HERE / "inline_asm_sm120a.ptx"
NAMES = ("griddepcontrol", "add.f16x2", "add.f16", "ret")

# From the source: (kernel, empty, griddepcontrol, add.f16x2, add.f16).  wait_then_add is a
# .func, not a kernel; fused<N> adds N times and has three griddepcontrol.
EXPECTED = {
    "_Z10calls_funcPjPKj": (False, 1, 0, 0),
    "_Z8half_sumPtPKt": (False, 1, 0, 2),
    "_Z12empty_kernelPi": (True, 0, 0, 0),
    "_Z5fusedILi2EEvPjPKji": (False, 3, 2, 0),
    "_Z5fusedILi4EEvPjPKji": (False, 3, 4, 0),
}


def independent(text: str, names: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Counted another way: the text split at every column-0 ``.entry`` or ``.func``
    directive; a kernel's part runs to the next one (or the end), and an instruction is a
    line whose first word, comment, braces and predicate aside, is the name or a dotted
    form of it."""
    heads = list(re.finditer(r"^(?:\.visible\s+|\.weak\s+)?\.(entry|func)\b[^\n]*?([\w$]+)\(", text, re.M))
    out = {}
    for h, nxt in zip(heads, heads[1:] + [None], strict=True):
        if h.group(1) != "entry":
            continue
        part = text[h.end() : nxt.start() if nxt else len(text)]
        counts = dict.fromkeys(names, 0)
        for line in part.splitlines():
            words = re.sub(r"^@!?%\w+\s+", "", line.split("//")[0].strip().lstrip("{").strip()).split()
            if words:
                op = words[0].rstrip(";")
                for n in names:
                    counts[n] += op == n or op.startswith(n + ".")
        out[h.group(2)] = counts
    return out


def _check(text: str) -> None:
    ks = ptx.kernels(text, NAMES)
    for m in ptx.ENTRY.finditer(text):  # every statement read is an instruction, never an operand
        start, end = ptx.body(text, m.end())
        assert all(re.fullmatch(r"[a-z][a-z0-9_.]*", o) for o in ptx.instructions(text[start:end]))
    assert {k.name: k.counts for k in ks} == independent(text, NAMES)
    got = {k.name: (k.empty, k.counts["griddepcontrol"], k.counts["add.f16x2"], k.counts["add.f16"]) for k in ks}
    assert got == EXPECTED
    s = ptx.summary(ks, ("griddepcontrol",))
    assert (s["kernels"], s["empty"], s["counts"]) == (5, 1, {"griddepcontrol": 8})


def test_the_kept_ptx_has_the_column_0_braces_this_is_about():
    text = PTX.read_text()
    m = re.search(r"\.entry _Z8half_sumPtPKt\(.*?\n\{\n(.*?)\n\tret;", text, re.S)
    assert m and "\n}\n" in m.group(1)  # a body cut at the first column-0 `}` loses the rest


def test_verify_counts_agree_with_an_independent_count():
    _check(PTX.read_text())


def test_a_body_is_what_the_opening_brace_balances():
    text = (
        "\n.entry k(\n)\n{\n\t// {\n\t{\n.reg .b16 x;\nadd.f16 %h0, %h1, %h2;\n}\n\t/* } */\n\tret;\n}\n"
        ".entry j(\n)\n{\nret;\n}\n"
    )
    (k, j) = ptx.kernels(text, ("add.f16", "ret"))
    assert (k.name, k.instructions, k.counts) == ("k", 2, {"add.f16": 1, "ret": 1})
    assert (j.name, j.instructions, j.empty) == ("j", 1, True)
    assert ptx.kernels("\n.entry k(\n)\n{\n{\nret;\n}\n", ()) == []  # never closed: not a kernel
    stmts = (
        "{add.f16 %rs1, %rs2, %rs3;\n}\n@%p1 bra $L1;\n$L1:\n\tmov.u32 %r1, 0;\n"
        # vector operands hold braces too; a call spans lines
        "\tld.param.v2.u32 \t{%r1, %r2}, [p];\n\tmov.b32 {lo, hi}, %r3;\n"
        "\tcall.uni (retval0), \n\tf, \n\t(\n\tparam0\n\t);\n$L2:\n\t{\n\t}\n\tret;"
    )
    assert ptx.instructions(stmts) == ["add.f16", "bra", "mov.u32", "ld.param.v2.u32", "mov.b32", "call.uni", "ret"]


def _nvcc() -> str | None:
    return shutil.which("nvcc")


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed here")
def test_a_fresh_nvcc_build_agrees_with_an_independent_count(tmp_path):
    arch = "sm_120a"
    got = subprocess.run(
        [_nvcc(), "--ptx", f"-arch={arch}", str(CU), "-o", str(tmp_path / "k.ptx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 0, got.stderr
    text = (tmp_path / "k.ptx").read_text()
    assert re.search(r"^\}$", text, re.M) and "{add.f16" in text  # the shape this is about
    _check(text)


def test_a_summary_cached_from_the_old_reading_is_read_again(tmp_path, monkeypatch):
    from patchkit.verify import build

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path))
    text = PTX.read_text()
    stale = {"kernels": 5, "empty": 1, "counts": {"griddepcontrol": 7}, "families": []}  # a cut body's figure
    build._store(
        "ab" * 32, {"built": True, "error": None, "seconds": 1.0, "summaries": {"griddepcontrol": stale}}, text
    )
    got = build._cached("ab" * 32, ("griddepcontrol",))
    assert got.summary["counts"] == {"griddepcontrol": 8}
