"""Version variants (``when``) and blockers, offline: which ops a version gets, the nearest
variant outside the range, and where a blocker's fragments stand."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from patchkit.base.model import Blocker, OpSpec, Recipe, describe_when
from patchkit.core import blockers


def _op(i: int, when: str = "") -> OpSpec:
    w = (("sglang", SpecifierSet(when)),) if when else ()
    return OpSpec(index=i, kind="k", engine="sglang", file="sglang/x.py", scope="", impl=None, when=w)


RECIPE = Recipe(
    id="r",
    summary="s",
    rationale="",
    bundles=(),
    engines={"sglang": SpecifierSet(">=0.5.9,<0.5.24")},
    ops=(_op(1), _op(2, "<0.5.19"), _op(3, ">=0.5.19,<0.5.21"), _op(4, ">=0.5.21")),
    path=Path("r.toml"),
    sha256="0",
    blockers=(Blocker(1, "sglang", "sglang/y.py", "", ("raise",), "m", (("sglang", SpecifierSet(">=0.5.14")),)),),
)


@pytest.mark.parametrize(
    "version,ops,blocked,note",
    [
        ("0.5.9", [1, 2], [], ""),
        ("0.5.14", [1, 2], [1], ""),
        ("0.5.19", [1, 3], [1], ""),
        ("0.5.20.post1", [1, 3], [1], ""),
        ("0.5.23", [1, 4], [1], ""),
        ("0.5.30", [1, 4], [1], "no variant for sglang 0.5.30: judged with the newest variant"),
        ("0.5.8", [1, 2], [], "no variant for sglang 0.5.8: judged with the oldest variant"),
        ("0.4.0", [1, 2], [], "no variant for sglang 0.4.0: judged with the oldest variant"),
        (None, [1, 4], [1], "sglang version unknown: judged with the newest variant"),
    ],
)
def test_a_version_gets_its_variant(version, ops, blocked, note):
    cut, said = RECIPE.for_versions({"sglang": version})
    assert [o.index for o in cut.ops] == ops
    assert [b.index for b in cut.blockers] == blocked
    assert said == note


def test_variants_are_listed_in_file_order():
    assert [(describe_when(w), ix) for w, ix in RECIPE.variants()] == [
        ("every version", (1,)),
        ("sglang <0.5.19", (2,)),
        ("sglang <0.5.21,>=0.5.19", (3,)),
        ("sglang >=0.5.21", (4,)),
    ]


CODE = """\
def _resolve_backend(x):
    if x not in (9, 10):
        raise ValueError(
            "allreduce fusion requires SM90 or "
            "SM10X"
        )


def other():
    raise ValueError("requires SM90 or SM10X")
"""


@pytest.mark.parametrize(
    "scope,contains,line",
    [
        ("_resolve_backend", ("raise ValueError", "requires SM90 or"), 3),
        ("_resolve_backend", ("if x not in (9,   10):",), 2),  # any whitespace between words
        ("_resolve_backend", ("requires SM90 or SM10X",), None),  # split across two literals
        ("other", ("requires SM90 or SM10X",), 10),
        ("", ("def other",), 9),
        ("missing_scope", ("raise",), None),
        ("_resolve_backend", ("SM10X", "raise ValueError"), None),  # order matters
    ],
)
def test_a_blocker_stands_where_its_fragments_do(scope, contains, line):
    assert blockers.search(CODE, scope, contains) == line


def test_a_blocker_holds_for_the_real_version_outside_the_range():
    """Ops outside the range come from the nearest variant; a blocker is a fact about the
    code at hand, so the real version decides (what `apply --ignore-range` runs into)."""
    import dataclasses

    narrow = dataclasses.replace(RECIPE, engines={"sglang": SpecifierSet(">=0.5.9,<0.5.13")})
    cut, said = narrow.for_versions({"sglang": "0.5.14"})
    assert [o.index for o in cut.ops] == [1, 4] and said.startswith("no variant for sglang 0.5.14")
    assert [b.index for b in cut.blockers] == [1]


# -- a blocker matches code, never prose: comments and docstrings are left out --------------

PY_QUOTED = '''\
"""Once, this module's gate read `if major not in (9, 10): raise` with "requires SM90 or SM10X"."""


def _resolve_backend(major):
    """Used to say: if major not in (9, 10): raise ValueError("requires SM90 or SM10X")."""
    # if major not in (9, 10):
    #     raise ValueError("requires SM90 or SM10X")
    "if major not in (9, 10): requires SM90 or SM10X"  # a bare string runs nothing either
    return "trtllm"
'''

PY_CODE = PY_QUOTED.replace(
    '    return "trtllm"\n',
    "    if major not in (9, 10):  # the gate\n"
    '        raise ValueError("requires SM90 or SM10X")\n'
    '    return "trtllm"\n',
)
GATE = ("if major not in (9, 10):", "requires SM90 or SM10X")


@pytest.mark.parametrize("scope", ["_resolve_backend", ""])
def test_a_blocker_quoted_in_comments_and_docstrings_does_not_stand(scope):
    assert blockers.search(PY_QUOTED, scope, GATE, "sglang/srt/x.py") is None
    assert blockers.search(PY_CODE, scope, GATE, "sglang/srt/x.py") == 9
    assert blockers.search(PY_CODE, scope, ("requires SM90",), "sglang/srt/x.py") == 10  # a raise's string is code


def test_a_blocker_in_cuda_text_skips_its_comments_not_its_strings():
    quoted = (
        "// #if (__CUDA_ARCH__ < 1200)\n"
        "/* upstream used to write\n   #if (__CUDA_ARCH__ < 1200) here */\n"
        'const char* url = "http://x//y"; // #if (__CUDA_ARCH__ < 1200)\n'
        "int n = 1'000; // #if (__CUDA_ARCH__ < 1200)\n"
        "#if defined(__CUDA_ARCH__)\n#endif\n"
    )
    frag = ("#if (__CUDA_ARCH__ < 1200)",)
    assert blockers.search(quoted, "", frag, "include/flashinfer/comm.cuh") is None
    code = quoted + "#if (__CUDA_ARCH__ < 1200)  // the gate\n"
    assert blockers.search(code, "", frag, "include/flashinfer/comm.cuh") == 8
    assert blockers.search('s = "a /* b";\nint x; /* c */ GATE\n', "", ("GATE",), "csrc/x.cu") == 2


def test_masking_keeps_every_offset_and_line():
    for text, file in [(PY_CODE, "x.py"), ("a /* b\nc */ d // e\n", "x.cuh"), ("x = 'é'  # ü\n", "x.py")]:
        m = blockers.masked(text, file)
        assert len(m) == len(text) and m.count("\n") == text.count("\n")
