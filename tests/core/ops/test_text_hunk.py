"""text-hunk: whole lines with context, matched exactly, never a fuzzy place; a comment in a
Python file; the old fragment-only text-replace keeps working beside it."""

import libcst as cst
import pytest

from patchkit.core.ops import KINDS, OpParamError
from tests.core.ops.golden import check, state

CUH = """\
template <typename T>
__global__ void kernel() {
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  cudaGridDependencySynchronize();
#endif
  work();
#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}
"""
HUNK = """\
@@ -2,4 +2,4 @@
 __global__ void kernel() {
-#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))
+#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))
   cudaGridDependencySynchronize();
"""


def test_one_guard_by_its_context():
    after = CUH.replace("__CUDA_ARCH__ < 1200))\n  cudaGrid", "__CUDA_ARCH__ >= 900))\n  cudaGrid").replace(
        "&& (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ >= 900))", "&& (__CUDA_ARCH__ >= 900))"
    )
    assert after.count("< 1200") == 1
    check("text-hunk", CUH, after, params={"hunk": HUNK})
    assert state("text-hunk", CUH, params={"hunk": HUNK}).nodes == (3,)  # the changed line, not the context


def test_lines_added_and_deleted_and_the_end_of_file():
    hunk = " #endif\n+  // SM120 too\n   work();\n"
    check(
        "text-hunk", CUH, CUH.replace("#endif\n  work();", "#endif\n  // SM120 too\n  work();"), params={"hunk": hunk}
    )
    hunk = (
        "   work();\n-#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))\n"
        "   cudaTriggerProgrammaticLaunchCompletion();\n"
    )
    after = CUH.replace(
        "  work();\n#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))\n", "  work();\n"
    )
    check("text-hunk", CUH, after, params={"hunk": hunk})
    src = "a\nb"
    check(
        "text-hunk",
        src,
        "a\nc",
        params={"hunk": " a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"},
    )


GUARD = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
WIDE = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))"


def test_context_must_match_exactly_no_fuzz():
    # The context line differs by one space: no place, though the change alone stands twice.
    hunk = HUNK.replace(" __global__ void kernel() {", " __global__  void kernel() {")
    assert state("text-hunk", CUH, params={"hunk": hunk}).state == "missing"
    # Lines are whole lines: a context line that is only the start of a line does not match.
    hunk = f"-{GUARD}\n+{WIDE}\n   cudaGridDependencySynchronize();\n"
    longer = CUH.replace("  cudaGridDependencySynchronize();", "  cudaGridDependencySynchronize(); // x")
    assert state("text-hunk", longer, params={"hunk": hunk}).state == "missing"
    # The same hunk at two places is ambiguous, unless count says two.
    two = CUH + CUH
    loc = state("text-hunk", two, params={"hunk": HUNK})
    assert loc.state == "ambiguous" and "found 2" in loc.reason and loc.nodes == (3, 13)
    after = two.replace(GUARD + "\n  cudaGrid", WIDE + "\n  cudaGrid")
    check("text-hunk", two, after, params={"hunk": HUNK, "count": 2})


def test_partially_edited_and_a_hunk_without_context():
    one = CUH.replace(GUARD, WIDE, 1)
    half = (CUH + CUH).replace(GUARD, WIDE, 1)
    loc = state("text-hunk", half, params={"hunk": HUNK, "count": 2})
    assert loc.state == "missing" and "partially edited" in loc.reason
    assert one
    with pytest.raises(OpParamError, match="no context line"):
        KINDS["text-hunk"]({}, {"hunk": f"-{GUARD}\n+{WIDE}\n"})


def test_a_comment_in_a_python_module():
    src = "def f():\n    x = 1\n    return x\n"
    hunk = "     x = 1\n+    # x is the answer\n     return x\n"
    op = KINDS["text-hunk"]({}, {"hunk": hunk})
    mod = cst.parse_module(src)
    new = op.apply(mod)
    assert new.code == "def f():\n    x = 1\n    # x is the answer\n    return x\n"
    assert op.is_applied(new) and op.revert(new).code == src


def test_bad_hunks_are_refused():
    with pytest.raises(OpParamError, match="starts with"):
        KINDS["text-hunk"]({}, {"hunk": "x\n-a\n"})
    with pytest.raises(OpParamError, match="changes nothing"):
        KINDS["text-hunk"]({}, {"hunk": " a\n b\n"})


def test_context_on_one_side_only_at_the_ends_of_a_file():
    """Lines appended after the last line, or taken from the end: the context is above only,
    and the upstream lines are then a part of the edited ones (or the other way round)."""
    check("text-hunk", CUH, CUH + "// SM120\n", params={"hunk": " }\n+// SM120\n"})
    check(
        "text-hunk",
        CUH,
        CUH[: -len("}\n")],
        params={"hunk": "   cudaTriggerProgrammaticLaunchCompletion();\n #endif\n-}\n"},
    )
    check("text-hunk", "int a;\n", "// head\nint a;\n", params={"hunk": "+// head\n int a;\n"})
    # lines after the hunk are not its business: it stands; another line instead is not it
    twice = CUH + "// SM120\n// SM120\n"
    assert state("text-hunk", twice, params={"hunk": " }\n+// SM120\n"}).state == "done"
    assert state("text-hunk", CUH + "// other\n", params={"hunk": " }\n+// SM120\n"}).state == "pending"
