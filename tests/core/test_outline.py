"""Outlines (patchkit/core/outline.py): a file's statement structure, cached by its bytes.

A golden case; the cache read back in place of ``ast.parse`` (so a second Document of the
same bytes parses nothing with ``ast``, and a view or a scope lookup answers the same);
every bad entry a miss; and the marker search's local parse (markers.near) against the
whole file's ``ast``, on real SGLang and FlashInfer trees."""

from __future__ import annotations

import ast
import json
import os
import random

import pytest

from patchkit.base.target import open_target
from patchkit.core import learned, markers, outline, view
from patchkit.core.document import Document
from patchkit.core.ops._cst import ast_near
from tests.conftest import mini_sglang

SOURCE = '''\
"""Module docstring."""
import os


@decorated
class Config:
    limit: int = 3
    a = 1; b = 2

    def method(self):
        if self.limit:
            return os.sep
        return None


for i in range(3):
    x = i
'''


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir()
    monkeypatch.setenv("PATCHKIT_CACHE", str(d))
    return d


def test_the_outline_of_a_module():
    o = outline.of_tree(ast.parse(SOURCE))
    assert [(s.kind, s.name, s.lineno, s.end_lineno, s.first) for s in o.body] == [
        ("doc", "", 1, 1, 1),
        ("import", "", 2, 2, 2),
        ("def", "Config", 6, 13, 5),  # the decorator's line is its first
        ("compound", "", 16, 17, 16),
    ]
    cls = o.body[2]
    assert [(s.kind, s.name, s.lineno, s.col_offset) for s in cls.body] == [
        ("simple", "", 7, 4),
        ("simple", "", 8, 4),
        ("simple", "", 8, 11),  # two statements on one line
        ("def", "method", 10, 4),
    ]
    assert [s.kind for s in cls.body[3].body] == ["compound", "simple"]
    assert cls.body[3].body[0].body == ()  # an if's statements are not outlined
    assert o.bindings == {"os": 1, "Config": 1, "i": 1, "x": 1}


class _Kept(Document):
    """A Document whose outline, once read, is kept as a command keeps what judging learned
    (patchkit/core/learned.py: the judge itself writes nothing)."""

    @property
    def outline(self):
        got = Document.outline.fget(self)
        learned.keep(self.learned)
        return got


def _doc(tmp_path, text: str, name: str = "m.py") -> Document:
    root = mini_sglang(tmp_path / "tree", {f"sglang/{name}": text})
    return _Kept(open_target("sglang", root), f"sglang/{name}")


def test_a_file_outlined_before_is_not_parsed_again(tmp_path, cache, monkeypatch):
    first = _doc(tmp_path, SOURCE)
    assert first.outline == outline.of_tree(ast.parse(SOURCE))
    assert len(list((cache / "outlines").iterdir())) == 1

    def refused(*a, **k):
        raise AssertionError("ast.parse of the whole file")

    with monkeypatch.context() as m:
        m.setattr("patchkit.core.document.python_ast", refused)
        again = _doc(tmp_path, SOURCE)
        assert again.outline == first.outline
        assert again.scope_span("Config.method") == (10, 13)
        assert again.scope_text("Config.method").startswith("def method(self):\n")
        again.want("Config", [(("limit: int",), False)])
        assert again.view is None and again.module is not None and again.view is not None
        assert "limit: int = 3" in again.module.code and "return os.sep" not in again.module.code
    # Other bytes are outlined afresh: the cache is keyed by the file's bytes.
    other = _doc(tmp_path, SOURCE.replace("limit", "limits"), "n.py")
    assert other.outline.body[2].body[0].lineno == 7
    assert len(list((cache / "outlines").iterdir())) == 2


def _entry(cache, text: str):
    return cache / "outlines" / outline.key(text.encode())


@pytest.mark.parametrize(
    "bad",
    [
        "{bad",
        "[]",
        '{"format": 0, "body": [], "bindings": {}}',
        "FORMAT_OK_EMPTY_BODY",
        "LINE_PAST_END",
        "NAME_NOT_ON_ITS_LINE",
        "OUT_OF_ORDER",
        "CHILD_OUTSIDE_ITS_DEF",
        "BINDING_NOT_A_COUNT",
    ],
)
def test_a_bad_outline_entry_is_a_miss_and_is_replaced(tmp_path, cache, bad):
    good = outline.of_tree(ast.parse(SOURCE))
    doc = json.loads(json.dumps({"format": outline.FORMAT, "body": [outline._encode(s) for s in good.body]}))
    doc["bindings"] = dict(good.bindings)
    if bad == "FORMAT_OK_EMPTY_BODY":
        doc["body"] = []
    elif bad == "LINE_PAST_END":
        doc["body"][3][3] = 999
    elif bad == "NAME_NOT_ON_ITS_LINE":
        doc["body"][2][1] = "Other"
    elif bad == "OUT_OF_ORDER":
        doc["body"][0], doc["body"][1] = doc["body"][1], doc["body"][0]
    elif bad == "CHILD_OUTSIDE_ITS_DEF":
        doc["body"][2][6][0][2] = 17
    elif bad == "BINDING_NOT_A_COUNT":
        doc["bindings"]["os"] = "1"
    text = bad if not bad.isupper() else json.dumps(doc)
    _entry(cache, SOURCE).parent.mkdir(parents=True)
    _entry(cache, SOURCE).write_text(text)
    assert outline.read(SOURCE.encode(), view.split_lines(SOURCE)) is None
    assert _doc(tmp_path, SOURCE).outline == good  # parsed again, with ast
    assert outline.read(SOURCE.encode(), view.split_lines(SOURCE)) == good  # and the entry replaced


def test_an_outline_entry_that_is_a_link_or_a_fifo_is_a_miss(tmp_path, cache):
    victim = tmp_path / "victim.json"
    good = outline.of_tree(ast.parse(SOURCE))
    victim.write_text(json.dumps({"format": 1, "body": [outline._encode(s) for s in good.body], "bindings": {}}))
    _entry(cache, SOURCE).parent.mkdir(parents=True)
    _entry(cache, SOURCE).symlink_to(victim)
    assert outline.read(SOURCE.encode(), view.split_lines(SOURCE)) is None
    assert _doc(tmp_path, SOURCE).outline is not None
    assert not _entry(cache, SOURCE).is_symlink() and victim.read_text().startswith('{"format": 1')
    os.unlink(_entry(cache, SOURCE))
    os.mkfifo(_entry(cache, SOURCE))
    assert outline.read(SOURCE.encode(), view.split_lines(SOURCE)) is None


def test_a_file_python_refuses_is_refused_though_never_outlined(tmp_path, cache):
    from patchkit.base.errors import TargetError

    with pytest.raises(TargetError, match="does not parse as Python"):
        _ = _doc(tmp_path, "def f(:\n").outline
    assert not (cache / "outlines").exists()


# -- the marker search's local parse ----------------------------------------------------------


def _stmts(tree, line):
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return sorted(
        (type(n).__name__, n.lineno, n.end_lineno)
        for n in ast_near(tree, [line])
        if isinstance(n, ast.stmt) and not isinstance(n, defs)
    )


def test_near_parses_only_the_statements_around_its_lines():
    tree = ast.parse(SOURCE)
    o = outline.of_tree(tree)
    got = markers.near(SOURCE, o, [12])
    assert [type(s).__name__ for s in got.body] == ["If"] and got.body[0].lineno == 11
    assert _stmts(got, 12) == _stmts(tree, 12) == [("If", 11, 12), ("Return", 12, 12)]
    assert [type(s).__name__ for s in markers.near(SOURCE, o, [8]).body] == ["Assign", "Assign"]  # not the class
    assert [(s.lineno, s.col_offset) for s in markers.near(SOURCE, o, [8]).body] == [(8, 4), (8, 11)]
    assert markers.near(SOURCE, o, [9]).body == []  # a blank line: no statement
    # A statement whose line another statement starts is not cut out: the whole file decides.
    cut = outline.Outline((outline.Stmt("simple", "", 2, 2, 2, 7),), {})
    assert markers.near("x = (1,\n    2); y = 3\n", cut, [2]) is None
    assert markers.near(SOURCE, None, [12]) is None


@pytest.mark.real
@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("flashinfer", "0.7.4")])
def test_near_finds_the_same_statements_as_the_whole_file(engine, version):
    """On 400 Python files of a release (drawn at random, seeded), at random lines: the
    statements ``near`` parses around a line are those the whole file's ``ast`` has there
    (or it declines)."""
    from patchkit.upstream import drift

    rnd = random.Random(f"{engine}{version}")
    root = drift.release_tree(engine, version)
    checked = declined = 0
    files = sorted(root.rglob("*.py"))
    for p in rnd.sample(files, min(400, len(files))):
        if p.stat().st_size > 100_000:
            continue  # generated tables: seconds of ast.parse each, no statement shapes the rest lacks
        text = p.read_text("utf-8", "replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        o, n = outline.of_tree(tree), len(view.split_lines(text))
        for line in (rnd.randint(1, n) for _ in range(8)) if n else ():
            got = markers.near(text, o, [line])
            if got is None:
                declined += 1
                continue
            checked += 1
            assert _stmts(got, line) == _stmts(tree, line), f"{p}:{line}"
    assert checked > 2000 and declined < checked / 20
