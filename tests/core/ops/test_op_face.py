"""The op face: kinds are discovered, each says what it reads as data (``Reads``), views and
relocation derive every filter from that data, ensure-import's dependence on another file
goes through the generic context hook, and relocation turns no bug into a verdict."""

from __future__ import annotations

import pkgutil
import sys
import textwrap
from pathlib import Path

import pytest

import patchkit.core.ops as ops
from patchkit.base.model import OpSpec
from patchkit.base.states import State
from patchkit.base.target import open_target
from patchkit.core import relocate, view
from patchkit.core.ops import DONE, KINDS, MISSING, Located, Op, Reads
from patchkit.core.ops.or_operand import OrOperand
from patchkit.core.session import Session
from patchkit.upstream.pristine import RELEASES


# -- discovery ---------------------------------------------------------------------------
def test_discovery_registers_every_op_module():
    modules = [m.name for m in pkgutil.iter_modules(ops.__path__) if not m.name.startswith("_")]
    assert modules, "no op modules found"
    by_module = {cls.__module__: kind for kind, cls in KINDS.items()}
    for name in modules:
        assert f"patchkit.core.ops.{name}" in by_module, f"{name} registered no kind"
    assert set(KINDS) >= {
        "ensure-import",
        "insert",
        "list-element",
        "or-operand",
        "replace-expr",
        "set-default",
        "text-replace",
    }


def test_a_new_module_is_a_new_kind_and_private_modules_are_skipped(tmp_path, monkeypatch):
    (tmp_path / "probe_kind.py").write_text(
        textwrap.dedent(
            """
            from patchkit.core.ops import Op, register

            @register("probe-kind")
            class ProbeKind(Op):
                pass
            """
        )
    )
    (tmp_path / "_private_helper.py").write_text("raise RuntimeError('a _module must not be imported')\n")
    monkeypatch.setattr(ops, "__path__", [*ops.__path__, str(tmp_path)])
    monkeypatch.setattr(ops, "KINDS", dict(ops.KINDS))
    try:
        ops._load_all()
        assert ops.KINDS["probe-kind"].__name__ == "ProbeKind"
        assert "patchkit.core.ops._private_helper" not in sys.modules
    finally:
        sys.modules.pop("patchkit.core.ops.probe_kind", None)
    assert "probe-kind" not in KINDS  # the real registry was left alone


# -- Reads: data, not methods ----------------------------------------------------------------
def test_no_op_kind_carries_filtering_code():
    for kind, cls in KINDS.items():
        for old in ("literals", "prefilter", "STATEMENTS"):
            assert not hasattr(cls, old), f"{kind} still has {old}"
        assert isinstance(cls.reads, Reads)  # the class default, until the constructor sets its own


FIELD = ("max_running_requests",)


@pytest.mark.parametrize(
    "kind,locator,params,want",
    [
        (
            "ensure-import",
            {"module": "sglang.srt.utils"},
            {"name": "is_sm120_supported"},
            Reads(patterns=(), sites=((),), shallow=True),
        ),
        (
            "insert",
            {"anchor": "x = 1", "position": "after"},
            {"code": "y = 2\nz = 3"},
            Reads(
                patterns=(("x = 1",), ("y = 2\n",), ("z = 3\n",)),  # the snippet's statements, as code
                whole_statements=True,
                file_words=("x = 1",),
                sites=(("x = 1",), ("y = 2\n",)),
            ),
        ),
        (
            "insert",
            {"at": "end"},
            {"code": "y = 2"},
            Reads(patterns=None, whole_statements=True, sites=(("y = 2\n",),)),
        ),
        (
            "list-element",
            {"contains": ['"a"', '"b"']},
            {"element": '"c"'},
            Reads(patterns=(('"a"', '"b"'),), file_words=('"a"', '"b"')),
        ),
        (
            "list-element",
            {"contains": ['"a"']},
            {"element": '"c"', "uncomment": True},
            Reads(patterns=(('"a"',),), file_words=('"a"', '"c"')),
        ),
        (
            "list-element",
            {"keyword": "supported_major_versions"},
            {"element": "12"},
            Reads(patterns=(("supported_major_versions",),), file_words=("supported_major_versions",)),
        ),
        (
            "or-operand",
            {"operands": ["a", "b"]},
            {"operand": "c"},
            Reads(patterns=(("a", "b"),), file_words=("a", "b")),
        ),
        (
            "replace-expr",
            {"match": "major == 10"},
            {"with": "major in (10, 12)"},
            # Relocation greps for the words both forms hold (a done site elsewhere lacks `10`'s line).
            Reads(patterns=(("major == 10",), ("major in (10, 12)",)), file_words=("major",)),
        ),
        (
            "set-default",
            {"field": "max_running_requests"},
            {"value": "1024", "expect": "None"},
            Reads(
                patterns=(FIELD,),
                file_words=FIELD,
                sites=(
                    ("max_running_requests =", "1024"),
                    ("max_running_requests =", "None"),
                    ("max_running_requests :", "1024"),
                    ("max_running_requests :", "None"),
                ),
                shallow=True,
            ),
        ),
        (
            "set-default",
            {"call": "parser.add_argument", "arg": '"--x"', "keyword": "default"},
            {"value": "1", "expect": "None"},
            Reads(
                patterns=(('"--x"',),),
                file_words=('"--x"',),
                sites=(
                    ("parser.add_argument", '"--x"', "default =", "1"),
                    ("parser.add_argument", '"--x"', "default =", "None"),
                ),
            ),
        ),
        (
            "text-replace",
            {},
            {"find": "< 1200", "replace": "< 1300", "count": 1},
            Reads(patterns=(("< 1200",), ("< 1300",))),
        ),
        (
            "call-arg",
            {"call": "f.g", "arg": '"--x"'},
            {"keyword": "k", "value": "1"},  # the keyword is not there while pending: not read for
            Reads(patterns=(("f.g", '"--x"'),), file_words=("f.g", '"--x"')),
        ),
        (
            "dict-entry",
            {"target": "T", "keys": ['"a"']},
            {"key": '"b"', "value": "1"},
            Reads(patterns=(("T", '"a"'),), file_words=("T",), sites=(("T",),)),
        ),
        (
            "add-branch",
            {"branch": "elif x"},
            {"code": "elif y:\n    pass\n"},
            Reads(patterns=(("elif x",),), whole_statements=True, file_words=("elif x",)),
        ),
        (
            "replace-stmt",
            {"match": "x = 1", "after": "y = 2"},
            {"with": "pass"},
            Reads(
                patterns=(("x = 1",), ("pass\n",), ("y = 2",)), whole_statements=True, sites=(("x = 1",), ("pass\n",))
            ),
        ),
        (
            "delete-stmt",
            {"match": "x = 1", "after": "y = 2"},
            {},
            Reads(patterns=(("x = 1",), ("y = 2",)), whole_statements=True, sites=(("y = 2",),)),
        ),
        (
            "text-hunk",
            {},
            {"hunk": " int a;\n-int b;\n+int c;\n"},
            Reads(
                patterns=(("int a;\nint b;\n",), ("int a;\nint c;\n",)),
                file_words=("int a;",),
                sites=(("int a;\nint b;\n",), ("int a;\nint c;\n",)),
            ),
        ),
    ],
)
def test_each_kind_says_what_it_reads(kind, locator, params, want):
    op = KINDS[kind](locator, params)
    assert op.reads == want
    # Views take exactly that data.
    if want.patterns is None:
        assert view.patterns(op) == [(None, want.whole_statements, want.shallow)]
    else:
        assert view.patterns(op) == [(p, want.whole_statements, want.shallow) for p in want.patterns]


def test_sites_default_to_patterns():
    assert Reads(patterns=(("a",),)).sites == (("a",),)
    assert Reads().sites is None
    assert Reads(patterns=(("a",),), sites=((),)).sites == ((),)


# -- the relocation prefilter, derived from the data -------------------------------------------
def _spec(op: Op, file: str = "sglang/srt/gone.py") -> OpSpec:
    return OpSpec(index=1, kind=op.kind, engine="sglang", file=file, scope="", impl=op)


def _holds(kind, locator, params, text) -> bool:
    return relocate.could_hold(_spec(KINDS[kind](locator, params)), textwrap.dedent(text))


def test_fragments_must_stand_in_one_statement():
    le = ("list-element", {"contains": ['"a"', '"b"']}, {"element": '"c"'})
    assert _holds(*le, 'X = [\n    "a",  # a comment\n    "b",\n]\n')
    assert _holds(*le, 'if v in (\n    "a",\n    "b"):\n    pass\n')  # a compound statement's header
    assert not _holds(*le, 'A = "a"\nB = "b"\n')
    assert not _holds(*le, 'if v == "a":\n    pass\nelif v == "b":\n    pass\n')
    assert not _holds(*le, 'def f():\n    x = "a"\n    return "b"\n')
    assert not _holds(*le, "X = ['a', 'b']\n")  # other tokens than the op compares
    assert _holds(*le, 'X = [\n"a", "b"\n')  # ast cannot parse it: libcst decides
    oo = ("or-operand", {"operands": ["a.b", "c"]}, {"operand": "d"})
    assert _holds(*oo, "if x: y = (a . b or \\\n c)\n")
    assert not _holds(*oo, "y = a.b\nz = c\n")


def test_a_default_holder_needs_its_name_and_a_known_value_in_one_statement():
    sd = ("set-default", {"field": "limit"}, {"value": "8", "expect": "None"})
    assert _holds(*sd, "class A:\n    limit: Optional[int] = None\n")
    assert _holds(*sd, "class A:\n    limit = 8\n")
    assert not _holds(*sd, "class A:\n    limit = 3\n    other = None\n")
    sp = ("set-default", {"param": "limit"}, {"value": "8", "expect": "None"})
    assert _holds(*sp, "@dec(None)\ndef f(\n    a,\n    limit: int = None,\n):\n    pass\n")
    assert not _holds(*sp, "def f(limit):\n    x = None\n")


def test_a_text_op_matches_its_text_exactly():
    tr = ("text-replace", {}, {"find": "< 1200)", "replace": "< 1300)", "count": 1})
    assert _holds(*tr, "#if (A < 1300)\n")
    assert not _holds(*tr, "#if (A <  1200)\n")


# -- the context hook (ensure-import's params.defined_in) -----------------------------------
def test_ensure_import_declares_and_checks_its_context_file():
    plain = KINDS["ensure-import"]({"module": "m"}, {"name": "f"})
    assert plain.context_files == ()
    assert plain.check_context({}) is None
    op = KINDS["ensure-import"]({"module": "m"}, {"name": "f", "defined_in": "pkg/m.py"})
    assert op.context_files == ("pkg/m.py",)
    gone = op.check_context({"pkg/m.py": None})
    assert gone.state == MISSING and "pkg/m.py" in gone.reason and "does not exist" in gone.reason
    undefined = op.check_context({"pkg/m.py": "g = 1\n"})
    assert undefined == Located(MISSING, reason="`f` is not defined in pkg/m.py")
    assert op.check_context({"pkg/m.py": "def f():\n    pass\n"}) is None
    assert op.check_context({"pkg/m.py": "try:\n    from x import f\nexcept ImportError:\n    f = None\n"}) is None


def test_the_base_op_has_no_context():
    assert Op.context_files == () and Op().check_context({}) is None


# -- relocation turns only a file that does not parse into "not here" -----------------------
@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "site"
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "version.py").write_text('__version__ = "0.5.9"\n')
    (root / "sglang" / "srt" / "moved.py").write_text("def gate():\n    return _is_sm90 or _is_sm100\n")
    # Holds the words, and ast cannot rule it out, but it does not parse.
    (root / "sglang" / "srt" / "broken.py").write_text("def gate(:\n    return _is_sm90 or _is_sm100\n")
    return root


def _search(root: Path, op: Op):
    session = Session({"sglang": open_target("sglang", root)}, releases=RELEASES)
    return relocate.search(session, _spec(op), skip="sglang/srt/gone.py")


def test_relocation_skips_a_candidate_that_does_not_parse(tree):
    op = KINDS["or-operand"]({"operands": ["_is_sm90", "_is_sm100"]}, {"operand": "_is_sm120"})
    hits = _search(tree, op)
    assert [(f, scope, loc.state) for f, scope, loc in hits] == [("sglang/srt/moved.py", "gate", State.PENDING)]


class _Buggy(OrOperand):
    def locate(self, scope):
        raise RuntimeError("a bug in the op")


def test_relocation_lets_a_bug_in_an_op_propagate(tree):
    op = _Buggy({"operands": ["_is_sm90", "_is_sm100"]}, {"operand": "_is_sm120"})
    with pytest.raises(RuntimeError, match="a bug in the op"):
        _search(tree, op)


def test_relocation_still_finds_a_done_site(tree):
    (tree / "sglang" / "srt" / "moved.py").write_text("def gate():\n    return _is_sm90 or _is_sm100 or _is_sm120\n")
    op = KINDS["or-operand"]({"operands": ["_is_sm90", "_is_sm100"]}, {"operand": "_is_sm120"})
    assert [loc.state for _, _, loc in _search(tree, op)] == [DONE]
