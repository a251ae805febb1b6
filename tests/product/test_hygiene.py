"""Engine hygiene: line numbers from libcst's public API only (and equal to its slow
PositionProvider), a token cache that cannot confuse two nodes, no module-level memo of
patchkit's code hash, and a `status` fast path that hides no bug."""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from patchkit.base.errors import TargetError
from patchkit.commands import Options, status
from patchkit.core import pyscope, verdicts
from patchkit.core.ops._cst import _LAYOUT, kids, node_tokens, walk

ROOT = Path(__file__).resolve().parents[2]


def _reference(module: cst.Module) -> dict[int, int]:
    """libcst's public answer, several parses' worth of time: the syntactic start of each
    node that is printed (a match mapping without ``**rest`` holds whitespace it never prints)."""
    pos = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {id(n): pos[n].start.line for n in walk(module, layout=True) if n in pos}


def _structural(module: cst.Module, nodes, ref: dict[int, int]) -> dict[int, int]:
    """line_numbers without the file's text (every node takes the path that prints code),
    of the nodes in ``ref``."""
    return pyscope.line_numbers(module, None, [n for n in nodes if id(n) in ref])


TRICKY = '''\
# header comment

import os  # trailing
@decorator(
    1)
# between decorator and def
@other
async def f(a: int = (
        2), *args: "str", b=3, **kw) -> (
        int):
    """Doc
    string."""
    x = (
        # comment after the paren
        a
        + b  # operand comment
        if a
        else b
    )
    yield from \\
        g()
    return f"""
    {x!r}
    """


class C(Base,
        metaclass=M):

    # comment above a field
    y: dict[str, int] = {"k": [1,
                               2]}  # trailing
    if y: pass
    else:
        pass

    def h(self): return (yield)

    try:
        pass
    except (ValueError,
            TypeError) as e:
        raise
    finally:
        pass

    match y:
        case {"k": [1, *rest]} if rest:
            pass
        case _:
            pass

lambda: (a,
         b)
with (open(a) as f,
      open(b) as g):
    pass
# footer comment
'''


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("trailing", [True, False])
def test_line_numbers_equal_position_provider_on_every_node_of_tricky_code(newline, trailing):
    src = TRICKY.replace("\n", newline)
    module = cst.parse_module(src if trailing else src.rstrip(newline))
    ref = _reference(module)
    assert _structural(module, walk(module, layout=True), ref) == ref


def _walk_agrees(module: cst.Module) -> None:
    """kids() holds the nodes of libcst's own ``children`` (in field order, not printing
    order); walk() leaves out exactly the layout nodes, which hold nothing but layout, and
    keeps the order of the rest."""
    every = list(walk(module, layout=True))
    for n in every:
        assert sorted(map(id, kids(n))) == sorted(map(id, n.children)), type(n).__name__
        if isinstance(n, _LAYOUT):
            assert all(isinstance(d, _LAYOUT) for d in walk(n, layout=True)), type(n).__name__
    code = [n for n in every if not isinstance(n, _LAYOUT)]
    got = list(walk(module))
    assert len(got) == len(code) and all(a is b for a, b in zip(got, code, strict=True))
    assert len(code) < len(every) / 2  # the point of leaving them out
    code_kinds = (cst.BaseExpression, cst.BaseStatement, cst.BaseSmallStatement, cst.BaseSuite, cst.BaseElement)
    assert not [t for t in _LAYOUT if issubclass(t, code_kinds)]  # nothing an op looks for


def test_walk_leaves_out_only_layout_nodes_on_tricky_code():
    _walk_agrees(cst.parse_module(TRICKY))


def test_line_numbers_count_the_pass_line_of_an_empty_block():
    module = cst.parse_module("def f():\n    x = 1\n    # end of f\n\ny = 2\n")
    f = module.body[0]
    empty = f.body.with_changes(body=[])  # prints `pass` on a line of its own
    module = module.with_changes(body=[f.with_changes(body=empty), *module.body[1:]])
    assert "    pass\n    # end of f\n" in module.code
    ref = _reference(module)
    assert _structural(module, walk(module, layout=True), ref) == ref


def test_line_numbers_equal_position_provider_on_a_real_file(release_dir):
    path = release_dir("sglang", "0.5.9") / "sglang" / "srt" / "server_args.py"
    text = path.read_text()
    module = cst.parse_module(text)
    ref = _reference(module)
    assert _structural(module, walk(module, layout=True), ref) == ref
    # A few nodes at a time, as ops ask, and through the regex on the file's text: the
    # statements with a unique start land on the same lines.
    _walk_agrees(module)
    stmts = [n for n in walk(module) if isinstance(n, cst.SimpleStatementLine)]
    some = stmts[:: len(stmts) // 25]
    assert _structural(module, some, ref) == {id(n): ref[id(n)] for n in some}
    assert pyscope.line_numbers(module, None, some, text) == {id(n): ref[id(n)] for n in some}


def test_no_private_libcst_api_in_patchkit():
    private = re.compile(r"\blibcst\._|\._codegen\b|CodegenState")
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "patchkit").rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not hits, hits


def test_node_tokens_cannot_confuse_two_nodes_that_share_an_id():
    # The hazard is real: the id of a node that is dropped is soon another node's.
    ids: set[int] = set()
    reused = 0
    for i in range(200):
        n = cst.parse_expression(f"x{i} + {i}")
        reused += id(n) in ids
        ids.add(id(n))
        del n
    assert reused
    for i in range(200):
        n = cst.parse_expression(f"y{i} * {i}")
        assert node_tokens(n) == (f"y{i}", "*", str(i))
        del n
    # Even once an entry is evicted and its node dropped, the next node with that id is a
    # different key: the cache compares nodes by identity, not by id.
    tiny = lru_cache(maxsize=1)(node_tokens.__wrapped__)
    ids.clear()
    reused = 0
    for i in range(200):
        n = cst.parse_expression(f"z{i} - {i}")
        reused += id(n) in ids
        ids.add(id(n))
        assert tiny(n) == (f"z{i}", "-", str(i))
        del n
    assert reused
    assert node_tokens.cache_info().maxsize is not None  # bounded: keeps few old trees alive


def test_code_hash_is_computed_not_remembered(monkeypatch):
    mutable = (dict, list, set)
    assert not [
        k
        for k, v in vars(verdicts).items()
        if not k.startswith("__") and ((k.isupper() and not isinstance(v, int)) or isinstance(v, mutable))
    ]  # an int constant (RACY_NS) remembers nothing
    before = verdicts.code_hash()
    assert verdicts.code_hash() == before
    monkeypatch.setattr(sys, "version", sys.version + " (another build)")
    assert verdicts.code_hash() != before


def test_code_hash_covers_all_of_patchkit(monkeypatch):
    """Every module of the package and the shipped engine table, not only patchkit/core/
    (where verdicts.py lies): a cache keyed on the code misses when any of it changes."""
    import types

    import patchkit

    before = verdicts.code_hash()
    real = os.stat
    for rel in ("upstream/gates.py", "base/engines.toml", "core/verdicts.py"):
        changed = os.path.join(os.path.dirname(os.path.abspath(patchkit.__file__)), rel)

        def stat(path, *a, changed=changed, **k):
            st = real(path, *a, **k)
            if os.path.abspath(path) != changed:
                return st
            return types.SimpleNamespace(st_size=st.st_size, st_mtime_ns=st.st_mtime_ns + 1)

        monkeypatch.setattr(os, "stat", stat)
        assert verdicts.code_hash() != before, rel
        monkeypatch.setattr(os, "stat", real)
    assert verdicts.code_hash() == before


def test_verdict_key_uses_the_code_hash_it_is_given(tmp_path):
    assert verdicts.key(tmp_path, ("a",), {}) == verdicts.key(tmp_path, ("a",), {}, code=verdicts.code_hash())
    assert verdicts.key(tmp_path, ("a",), {}, code="x") != verdicts.key(tmp_path, ("a",), {}, code="y")


class _Project:
    """Just what status._fast reads of a Project; ``targets`` raises ``error``."""

    def __init__(self, tmp_path: Path, error: Exception) -> None:
        self.workspace, self.recipes_dir, self.error = tmp_path, tmp_path, error

    def targets(self, target_args, needed):
        raise self.error


def test_status_fast_path_steps_aside_for_a_user_error(tmp_path):
    opts = Options(names=(), targets=(), project=_Project(tmp_path, TargetError("no such tree")))
    assert status._fast(opts, "code") is None  # the full path reports it


def test_status_fast_path_lets_a_bug_through(tmp_path):
    opts = Options(names=(), targets=(), project=_Project(tmp_path, RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        status._fast(opts, "code")


def test_a_bug_in_the_status_fast_path_exits_3(monkeypatch, capsys, tmp_path):
    from patchkit import cli
    from patchkit.core.project import Project

    def broken(self, target_args, needed):
        raise RuntimeError("a bug in targets")

    monkeypatch.setattr(Project, "targets", broken)
    monkeypatch.delenv("PATCHKIT_DEBUG", raising=False)
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as e:
        cli.main(["status", "-t", f"sglang={tmp_path}"])
    assert e.value.code == 3
    assert "internal error: RuntimeError: a bug in targets" in capsys.readouterr().err


def test_path_replace_prints_as_deep_replace_and_keeps_every_other_subtree():
    from patchkit.core.ops._cst import path_replace

    module = cst.parse_module(TRICKY)
    nodes = [n for n in walk(module, layout=True) if n is not module]
    for old in nodes[:: max(1, len(nodes) // 60)]:
        new = cst.Name("swapped") if isinstance(old, cst.BaseExpression) else old.deep_clone()
        try:
            want = module.deep_replace(old, new)
        except Exception:  # noqa: BLE001 - a node libcst will not take there; path_replace must refuse too
            with pytest.raises(Exception):  # noqa: B017
                path_replace(module, old, new)
            continue
        got = path_replace(module, old, new)
        assert got.code == want.code and got.deep_equals(want)
        kept = {id(n) for n in walk(got, layout=True)}
        inside = {id(n) for n in walk(old, layout=True)}
        untouched = [
            n
            for n in walk(module, layout=True)
            if id(n) not in inside and not any(a is old for a in walk(n, layout=True))
        ]
        assert all(id(n) in kept for n in untouched)  # shared, not rebuilt
    # A node that stands twice (one object in two places): deep_replace's answer, both swapped.
    x = cst.Name("x")
    twice = cst.parse_module("a = 1\n").with_changes(
        body=[cst.SimpleStatementLine([cst.Expr(x)]), cst.SimpleStatementLine([cst.Expr(x)])]
    )
    assert path_replace(twice, x, cst.Name("y")).code == "y\ny\n"


@pytest.mark.parametrize("rel", ["base/engines.toml", "upstream/pristine.py", "base/target.py", "core/judge.py"])
def test_code_hash_covers_every_layer_that_decides_a_verdict(rel, monkeypatch):
    """The engine definitions (base/engines.toml), the pristine readers (upstream/) and the
    target's layout (base/) decide verdicts as the judge (core/) does: a change to any of them
    must miss the verdict and plan caches.  Before, only core/ was hashed."""
    path = os.path.realpath(Path(verdicts.__file__).resolve().parents[1] / rel)
    before = verdicts.code_hash()
    real_stat = os.stat

    def stat(p, *a, **k):  # the file rewritten: one byte longer
        st = real_stat(p, *a, **k)
        if os.path.realpath(p) != path:
            return st
        return os.stat_result(
            (
                st.st_mode,
                st.st_ino,
                st.st_dev,
                st.st_nlink,
                st.st_uid,
                st.st_gid,
                st.st_size + 1,
                int(st.st_atime),
                int(st.st_mtime),
                int(st.st_ctime),
            )
        )

    monkeypatch.setattr(verdicts.os, "stat", stat)
    assert verdicts.code_hash() != before
    monkeypatch.undo()
    assert verdicts.code_hash() == before
