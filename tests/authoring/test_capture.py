"""`patchkit capture`: a hand edit of a tree becomes a recipe that reproduces it exactly.

Offline: a small SGLang checkout in git (its tag v0.5.9 is the pristine release), edited by
hand, one op kind at a time, and the cases capture must refuse.  Real tier: each of the
four sm120 recipes applied by patchkit to SGLang 0.5.9 / FlashInfer 0.6.3, its journal
deleted (so the tree is a plain hand edit), captured, and the captured recipe applied to a
fresh pristine copy gives the edited bytes exactly."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from tests.conftest import ROOT, downloaded, git

# -- offline: a checkout with a tag -------------------------------------------------------------

PRISTINE = {
    "python/sglang/srt/mod.py": '''\
"""A module."""

from sglang.srt.utils import (
    is_a,
    is_b,
)

_A = is_a()
_B = is_b()


class Args:
    max_requests: int = None
    backend: str = "auto"

    def check(self, major):
        if _A or _B:
            return major in [9, 10]
        backends = [
            "trtllm",
            # "cutlass",
            "mxfp4",
        ]
        return backends


def add(parser, mode="fast"):
    parser.add_argument("--level", type=int, default=1)
    if mode == "slow":
        return None
    # keep going
    return mode
''',
    "python/sglang/srt/kernel.cuh": "#if (__CUDA_ARCH__ < 1200)\nint x;\n#endif\n"
    "#if (__CUDA_ARCH__ < 1200)\nint y;\n#endif\n",
}


@pytest.fixture
def checkout(tmp_path):
    """A git checkout of a small sglang 0.5.9, tagged v0.5.9."""
    repo = tmp_path / "sglang"
    files = {
        "python/sglang/__init__.py": "",
        "python/sglang/version.py": '__version__ = "0.5.9"\n',
        **PRISTINE,
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.5.9")
    git(repo, "tag", "v0.5.9")
    return repo


MOD = "python/sglang/srt/mod.py"

# (name, the hand edit of mod.py (old, new), the op kind capture must choose)
EDITS = [
    ("list element", ("major in [9, 10]", "major in [9, 10, 12]"), "list-element"),
    ("uncomment", ('# "cutlass",', '"cutlass",'), "list-element"),
    ("or operand", ("if _A or _B:", "if _A or _B or is_b():"), "or-operand"),
    ("field default", ("max_requests: int = None", "max_requests: int = 1024"), "set-default"),
    ("keyword default", ("type=int, default=1)", "type=int, default=2)"), "set-default"),
    ("parameter default", ('mode="fast"', 'mode="slow"'), "set-default"),
    ("import joined", ("    is_b,\n)", "    is_b,\n    is_c,\n)"), "ensure-import"),
    ("statements inserted", ("_B = is_b()\n", "_B = is_b()\n_C = _A and _B\n"), "insert"),
    (
        "block inserted",
        ("    # keep going\n", "    if mode == 'odd':\n        mode = 'even'\n    # keep going\n"),
        "insert",
    ),
    ("expression replaced", ('mode == "slow"', 'mode in ("slow", "slower")'), "replace-expr"),
    ("hand-formatted list", ("major in [9, 10]", "major in [9,10,12]"), "replace-expr"),
    ("two operands", ("if _A or _B:", "if _A or is_a() or _B or is_b():"), "or-operand"),  # two ops
    ("two elements", ("major in [9, 10]", "major in [9, 11, 10, 12]"), "list-element"),  # two ops
    ("a statement deleted", ('    parser.add_argument("--level", type=int, default=1)\n', ""), "delete-stmt"),
    ("a statement replaced", ("        return backends\n", "        return list(backends)\n"), "replace-stmt"),
    ("a comment changed", ("# keep going", "# keep on going"), "text-hunk"),
    ("a comment added", ("    return mode\n", "    # the mode, checked\n    return mode\n"), "text-hunk"),
    (
        "a branch added",
        ("        return None\n", '        return None\n    elif mode == "odd":\n        return 1\n'),
        "add-branch",
    ),
    ("a keyword added", ("type=int, default=1)", 'type=int, default=1, help="level")'), "call-arg"),
    ("a keyword removed", ("type=int, default=1)", "default=1)"), "call-arg"),
]


def _edit(repo: Path, rel: str, old: str, new: str) -> None:
    p = repo / rel
    text = p.read_text()
    assert text.count(old) == 1, old
    p.write_text(text.replace(old, new))


def _fresh(repo: Path, dest: Path) -> Path:
    """A pristine copy of the checkout at its tag."""
    shutil.copytree(repo, dest)
    git(dest, "checkout", "-q", "--", ".")
    git(dest, "clean", "-qfd")
    return dest


def _files(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".patchkit", "__pycache__")]
        for name in files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


@pytest.mark.parametrize("name,edit,kind", EDITS, ids=[e[0] for e in EDITS])
def test_capture_expresses_each_kind_of_hand_edit(tmp_path, checkout, run_cli, name, edit, kind):
    _edit(checkout, MOD, *edit)
    out = tmp_path / "out" / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    assert "gives exactly the edited bytes" in stdout
    text = out.read_text()
    assert text.count(f'kind = "{kind}"') == text.count("[[ops]]") == (2 if name.startswith("two") else 1), text
    # the recipe, applied by patchkit to a pristine copy, gives the edited bytes
    fresh = _fresh(checkout, tmp_path / "fresh")
    code, stdout, err = run_cli("--recipes", str(out.parent), "apply", "mine", "-t", f"sglang={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    assert _files(fresh) == _files(checkout)
    code, stdout, err = run_cli("check", str(out), cwd=tmp_path)
    assert code == 0, stdout


def test_capture_several_edits_and_files_at_once(tmp_path, checkout, run_cli):
    for _, edit, _ in EDITS[:4] + EDITS[6:8]:
        _edit(checkout, MOD, *edit)
    _edit(checkout, "python/sglang/srt/kernel.cuh", "int y;", "int y = 1;")
    out = tmp_path / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "-o", str(out), cwd=tmp_path)
    assert code == 0, err
    assert out.read_text().count("[[ops]]") == 7
    fresh = _fresh(checkout, tmp_path / "fresh")
    assert run_cli("--recipes", str(tmp_path), "apply", "mine", "-t", f"sglang={fresh}", cwd=tmp_path)[0] == 0
    assert _files(fresh) == _files(checkout)


def test_a_change_no_structural_op_makes_becomes_a_text_op(tmp_path, checkout, run_cli):
    """C++ has no structural op: a text-hunk of whole lines with context (never a fragment
    of a line); two changes a context apart are one hunk."""
    _edit(
        checkout,
        "python/sglang/srt/kernel.cuh",
        "int x;\n#endif\n#if (__CUDA_ARCH__ < 1200)",
        "int x;\n#endif\n#if (__CUDA_ARCH__ < 1300)",
    )
    p = checkout / "python/sglang/srt/kernel.cuh"
    p.write_text(p.read_text().replace("#if (__CUDA_ARCH__ < 1200)\nint x;", "#if (__CUDA_ARCH__ < 1300)\nint x;"))
    out = tmp_path / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "-o", str(out), cwd=tmp_path)
    assert code == 0, err
    text = out.read_text()
    assert 'kind = "text-hunk"' in text and text.count("[[ops]]") == 1, text
    assert "-#if (__CUDA_ARCH__ < 1200)\n+#if (__CUDA_ARCH__ < 1300)\n int x;\n #endif\n" in text, text
    fresh = _fresh(checkout, tmp_path / "fresh")
    assert run_cli("--recipes", str(tmp_path), "apply", "mine", "-t", f"sglang={fresh}", cwd=tmp_path)[0] == 0
    assert _files(fresh) == _files(checkout)


def test_one_op_may_make_hunks_far_apart():
    """replace-expr with a count: the same expression changed in two places is one op."""
    from patchkit.authoring.capture import capture_python

    old = "def f(major):\n    if major == 10:\n        a = 1\n    b = 2\n    if major == 10:\n        return a\n"
    new = old.replace("major == 10", "major in (10, 12)").replace("b = 2", "b = 3")  # another change between
    ops, failed = capture_python("sglang", "sglang/srt/m.py", old, new)
    assert not failed
    assert [(o.kind, o.locator, o.params) for o in ops] == [
        ("replace-expr", {"match": "major == 10", "count": 2}, {"with": "major in (10, 12)"}),
        ("set-default", {"field": "b"}, {"value": "3", "expect": "2"}),
    ]


# (name, edit of mod.py or a new file, what capture says about it)
UNEXPRESSIBLE = [
    (
        "a parameter added",
        (MOD, 'def add(parser, mode="fast"):', 'def add(parser, mode="fast", extra=None):'),
        "mod.py:27: a line changed: no op kind makes this change",
    ),
    (
        "a condition wrapped in a larger one",
        (MOD, "if _A or _B:", "if (_A or _B) and major:"),
        "mod.py:17: a line changed: nearest op kind replace-expr, which does not fit: params.with contains"
        " locator.match",
    ),
    ("a new file", ("python/sglang/srt/new.py", None, "x = 1\n"), "sglang/srt/new.py: a new file"),
]


@pytest.mark.parametrize("name,edit,said", UNEXPRESSIBLE, ids=[u[0] for u in UNEXPRESSIBLE])
def test_what_capture_cannot_express_writes_nothing(tmp_path, checkout, run_cli, name, edit, said):
    rel, old, new = edit
    if old is None:
        (checkout / rel).write_text(new)
    else:
        _edit(checkout, rel, old, new)
    _edit(checkout, MOD, *EDITS[0][1])  # and one change it can express
    out = tmp_path / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "-o", str(out), cwd=tmp_path)
    assert code == 1, stdout + err
    assert not out.exists()
    lines = err.strip().splitlines()
    assert lines[-1].startswith("capture: nothing was written"), err
    assert len(lines) == 2 and said in lines[0], err
    assert "--partial writes the rest" in lines[-1]


def test_partial_writes_what_it_can_and_lists_the_rest(tmp_path, checkout, run_cli):
    _edit(checkout, MOD, 'def add(parser, mode="fast"):', 'def add(parser, mode="fast", extra=None):')
    _edit(checkout, MOD, *EDITS[0][1])
    _edit(checkout, "python/sglang/srt/kernel.cuh", "int y;", "int y = 1;")
    out = tmp_path / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "-o", str(out), "--partial")
    assert code == 1, stdout + err
    assert "capture: cannot express sglang:sglang/srt/mod.py:27: a line changed" in err
    text = out.read_text()
    assert text.count("[[ops]]") == 2 and "#   sglang:sglang/srt/mod.py:27:" in text, text
    assert "1 change(s) are not in it" in stdout
    # applied, it makes the two changes it holds and leaves the third for a person
    fresh = _fresh(checkout, tmp_path / "fresh")
    assert run_cli("--recipes", str(tmp_path), "apply", "mine", "-t", f"sglang={fresh}", cwd=tmp_path)[0] == 0
    got = (fresh / MOD).read_text()
    assert "major in [9, 10, 12]" in got and 'mode="fast"):' in got
    assert (fresh / "python/sglang/srt/kernel.cuh").read_text() == (
        checkout / "python/sglang/srt/kernel.cuh"
    ).read_text()


def test_capture_refuses_what_it_cannot_compare_or_would_overwrite(tmp_path, checkout, run_cli):
    out = tmp_path / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "-o", str(out), cwd=tmp_path)
    assert code == 1 and "nothing to capture" in err and not out.exists()
    out.write_text("keep me")
    _edit(checkout, MOD, *EDITS[0][1])
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "-o", str(out), cwd=tmp_path)
    assert code == 2 and "already exists" in err and out.read_text() == "keep me"
    git(checkout, "tag", "-d", "v0.5.9")
    code, stdout, err = run_cli("capture", "other", "-t", f"sglang={checkout}", "-o", str(tmp_path / "other.toml"))
    assert code == 2 and "no pristine release" in err


# -- real releases: the four sm120 recipes -------------------------------------------------------

SM120 = ["autotune-cutlass", "max-running-requests", "moe-backend-sm120", "allreduce-fusion"]


@pytest.fixture(scope="module")
def pristine_trees():
    from patchkit.upstream.drift import release_tree

    return {"sglang": release_tree("sglang", "0.5.9"), "flashinfer": release_tree("flashinfer", "0.6.3")}


def _copies(trees: dict[str, Path], dest: Path) -> dict[str, Path]:
    out = {}
    for engine, src in trees.items():
        # a real copy, not hard links: the cache's tree must never be written through
        out[engine] = Path(shutil.copytree(src, dest / engine, ignore=shutil.ignore_patterns(".patchkit")))
    return out


@pytest.mark.real
@pytest.mark.parametrize("rid", SM120)
def test_capture_reproduces_each_sm120_recipe(tmp_path, run_cli, pristine_trees, rid):
    from patchkit.core.recipe import load_recipe

    engines = load_recipe(ROOT / "recipes" / f"{rid}.toml").engines  # only the trees it edits
    pristine_trees = {e: p for e, p in pristine_trees.items() if e in engines}
    edited = _copies(pristine_trees, tmp_path / "edited")
    targets = [a for e, p in edited.items() for a in ("-t", f"{e}={p}")]
    code, out, err = run_cli("--recipes", str(ROOT / "recipes"), "apply", rid, *targets, cwd=tmp_path)
    assert code == 0, out + err
    for p in edited.values():  # a hand edit: nothing says patchkit made it
        shutil.rmtree(p / ".patchkit")
    recipes = tmp_path / "captured"
    code, out, err = run_cli("capture", f"cap-{rid}", *targets, "--out", str(recipes / f"cap-{rid}.toml"))
    assert code == 0, err
    fresh = _copies(pristine_trees, tmp_path / "fresh")
    fresh_targets = [a for e, p in fresh.items() for a in ("-t", f"{e}={p}")]
    code, out, err = run_cli("--recipes", str(recipes), "apply", f"cap-{rid}", *fresh_targets, cwd=tmp_path)
    assert code == 0, out + err
    for engine in edited:
        assert _files(fresh[engine]) == _files(edited[engine]), engine


@pytest.mark.real
def test_capture_port_check_apply_on_a_later_release(tmp_path, run_cli, pristine_trees):
    """The whole path on real releases: a hand edit of SGLang 0.5.9 is captured, ported to
    0.5.22 (where ServerArgs' fields moved to arg_groups/fields in 0.5.20), checked, and
    applied to (and reverted from) the pristine 0.5.22."""
    from patchkit.upstream.drift import release_tree

    edited = _copies({"sglang": pristine_trees["sglang"]}, tmp_path / "edited")["sglang"]
    _edit(
        edited,
        "sglang/srt/server_args.py",
        "    max_running_requests: Optional[int] = None\n",
        "    max_running_requests: Optional[int] = 1024\n",
    )
    recipes = tmp_path / "recipes"
    code, out, err = run_cli("capture", "mrr", "-t", f"sglang={edited}", "--out", str(recipes / "mrr.toml"))
    assert code == 0, err
    assert 'sglang = ">=0.5.9,<0.5.10"' in (recipes / "mrr.toml").read_text()
    # The op carries its site as 0.5.9 holds it (docs/identity.md).
    ident = tomllib.loads((recipes / "mrr.toml").read_text())["ops"][0]["identity"]
    (site,) = ident["sites"]
    assert ident["release"] == "sglang 0.5.9" and site["enclosing"] == ["server", "args"]
    assert site["block"][site["at"] - 1] == "max_running_requests: Optional[int] = None"

    code, out, err = run_cli("--recipes", str(recipes), "port", "mrr", "--to", "sglang==0.5.22", "--write")
    assert code == 0, out + err
    assert "retargeted to sglang/srt/arg_groups/fields/schedule.py::Schedule" in err
    data = tomllib.loads((recipes / "mrr.toml").read_text())
    # drift --bisect saw the field leave server_args.py at 0.5.20: the bounds say so, not 0.5.22
    assert data["ops"][0]["when"] == {"sglang": "<0.5.20"}
    (variant,) = data["variants"]
    assert variant["when"] == {"sglang": ">=0.5.20"} and len(variant["ops"]) == 1
    assert (variant["ops"][0]["file"], variant["ops"][0]["scope"]) == (
        "sglang/srt/arg_groups/fields/schedule.py",
        "Schedule",
    )
    ident = variant["ops"][0]["identity"]  # the site as the release it was ported to holds it
    (site,) = ident["sites"]
    assert ident["release"] == "sglang 0.5.22" and site["enclosing"] == ["schedule"]
    assert site["block"][site["at"] - 1].startswith("max_running_requests: A[")

    code, out, err = run_cli("check", str(recipes / "mrr.toml"))
    assert code == 0, out + err
    later = _copies({"sglang": release_tree("sglang", "0.5.22")}, tmp_path / "later")["sglang"]
    before = _files(later)
    code, out, err = run_cli("--recipes", str(recipes), "apply", "mrr", "-t", f"sglang={later}")
    assert code == 0, out + err
    text = (later / "sglang/srt/arg_groups/fields/schedule.py").read_text()
    field = text[text.index("    max_running_requests: A[") :]
    assert field[: field.index("\n    max_queued_requests")].endswith("] = 1024"), field[:200]
    code, out, err = run_cli("--recipes", str(recipes), "revert", "mrr", "-t", f"sglang={later}")
    assert code == 0, out + err
    assert _files(later) == before


@pytest.mark.real
def test_an_elif_arm_added_to_sglangs_backend_choice_is_captured_as_add_branch(tmp_path, run_cli, pristine_trees):
    """The real case of issue 20: an `elif` arm added to the if/elif chain that picks the
    default attention backend in SGLang 0.5.9's server_args.py."""
    edited = _copies({"sglang": pristine_trees["sglang"]}, tmp_path / "edited")["sglang"]
    arm = '                elif is_sm100_supported():\n                    self.attention_backend = "flashinfer"\n'
    _edit(
        edited,
        "sglang/srt/server_args.py",
        arm,
        arm + '                elif is_sm120_supported():\n                    self.attention_backend = "flashinfer"\n',
    )
    out = tmp_path / "recipes" / "arm.toml"
    code, stdout, err = run_cli("capture", "arm", "-t", f"sglang={edited}", "--out", str(out))
    assert code == 0, err
    (op,) = tomllib.loads(out.read_text())["ops"]
    assert (op["kind"], op["locator"]) == ("add-branch", {"branch": "elif is_sm100_supported()"}), op
    fresh = _copies({"sglang": pristine_trees["sglang"]}, tmp_path / "fresh")["sglang"]
    code, stdout, err = run_cli("--recipes", str(out.parent), "apply", "arm", "-t", f"sglang={fresh}")
    assert code == 0, stdout + err
    f = "sglang/srt/server_args.py"  # (apply also brings the wheel's RECORD up to date)
    assert (fresh / f).read_bytes() == (edited / f).read_bytes()
    # and it reverts: the added arm's body is the same line as the arm above it (the revert
    # invariant must not take that for upstream's code)
    code, stdout, err = run_cli("--recipes", str(out.parent), "revert", "arm", "-t", f"sglang={fresh}")
    assert code == 0, stdout + err
    assert (fresh / f).read_bytes() == (pristine_trees["sglang"] / f).read_bytes()


def test_text_files_append_delete_and_a_file_with_no_unchanged_line():
    from patchkit.authoring.capture import capture_text

    old = "int a;\nint b;\n"
    (op,), _ = capture_text("sglang", "k.cuh", old, old + "int c;\n")
    assert op.params == {"hunk": " int a;\n int b;\n+int c;\n"}
    (op,), _ = capture_text("sglang", "k.cuh", old, "int a;\n")
    assert op.params == {"hunk": " int a;\n-int b;\n"}
    ops, (why,) = capture_text("sglang", "k.cuh", "x\n", "y\n")
    assert not ops and "nearest op kind text-hunk, which does not fit: no line of the file is left unchanged" in why.why


def test_dict_entries_and_keyword_arguments_are_captured_as_their_kinds():
    from patchkit.authoring.capture import capture_python

    old = 'TABLE = {\n    "a": 1,\n    "b": 2,\n}\nx = f(1, k=2, m=3)\n'
    new = old.replace('    "a": 1,\n', '    "a": 1,\n    "c": 3,\n').replace("f(1, k=2, m=3)", "f(1, m=3)")
    ops, failed = capture_python("sglang", "sglang/srt/m.py", old, new)
    assert not failed
    assert [(o.kind, o.locator, o.params) for o in ops] == [
        ("dict-entry", {"target": "TABLE"}, {"key": '"c"', "value": "3", "after": '"a"'}),
        ("call-arg", {"call": "f"}, {"action": "remove", "keyword": "k", "value": "2", "before": "m"}),
    ]


def test_an_operand_added_to_an_and_chain_is_captured_as_and_operand():
    """The GLM-5 guide's edit, made by hand: ``... and is_deepseek_dsa`` gains ``and
    compute_cap[0] >= 10``; capture writes and-operand (or-operand's op on ``and``), which
    applies to the old text and gives the new."""
    from patchkit.authoring.pycapture import capture_python

    old = (
        "def f(self, is_deepseek_dsa, compute_cap):\n"
        '    if self.dtype in ("auto", "fp8") and is_deepseek_dsa:\n'
        "        pass\n"
    )
    new = old.replace("and is_deepseek_dsa:", "and is_deepseek_dsa and compute_cap[0] >= 10:")
    ops, unexpressed = capture_python("sglang", "sglang/srt/server_args.py", old, new)
    assert not unexpressed
    (op,) = ops
    assert (op.kind, op.scope, op.params) == ("and-operand", "f", {"operand": "compute_cap[0] >= 10"})
    assert op.locator == {"operands": ['self.dtype in ("auto", "fp8")', "is_deepseek_dsa"]}


@pytest.mark.parametrize(
    "new, header, footer",
    [
        (
            "def f(self):\n    self.load()\n    if not _is_sm120:\n        self.tune()\n"
            "        self.check()\n    return self\n",
            "if not _is_sm120:",
            None,
        ),
        (
            "def f(self):\n    self.load()\n    try:\n        self.tune()\n        self.check()\n"
            "    except RuntimeError:\n        pass\n    return self\n",
            "try:",
            "except RuntimeError:\n    pass",
        ),
    ],
    ids=["if", "try"],
)
def test_a_guard_put_around_statements_is_captured_as_one_wrap_stmts(new, header, footer):
    """Capture chooses wrap-stmts for a block put inside a new if/try: one op, which reads
    back (a delete-stmt plus a replace-stmt would not)."""
    from patchkit.authoring.capture import capture_python

    old = "def f(self):\n    self.load()\n    self.tune()\n    self.check()\n    return self\n"
    ops, failed = capture_python("sglang", "sglang/srt/m.py", old, new)
    assert not failed, failed
    assert [o.kind for o in ops] == ["wrap-stmts"], ops
    assert ops[0].locator["match"] == "self.tune()\nself.check()" and ops[0].params["header"] == header
    assert ops[0].params.get("footer") == footer


def test_a_captured_identity_keeps_only_the_imports_its_site_names(tmp_path, checkout, run_cli):
    """A file that imports 60 names of the engine: the captured op's identity lists only the
    one its site's lines use (a reviewable recipe, not an 80-line dump), and the recipe
    still reproduces the edit and passes check."""
    many = "".join(f"from sglang.srt.layers.mod{i} import helper_{i}\n" for i in range(60))
    text = (checkout / MOD).read_text().replace('"""A module."""\n', '"""A module."""\n' + many)
    text = text.replace("return major in [9, 10]", "return helper_7(major) in [9, 10]")
    (checkout / MOD).write_text(text)
    git(checkout, "commit", "-qam", "v0.5.9 with imports")
    git(checkout, "tag", "-f", "v0.5.9")
    _edit(checkout, MOD, "helper_7(major) in [9, 10]", "helper_7(major) in [9, 10, 12]")
    out = tmp_path / "out" / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    ident = tomllib.loads(out.read_text())["ops"][0]["identity"]
    assert ident["imports"] == ["sglang.srt.layers.mod7:helper_7"], ident["imports"]
    assert max(len(line) for line in out.read_text().splitlines()) < 200
    fresh = _fresh(checkout, tmp_path / "fresh")
    code, stdout, err = run_cli("--recipes", str(out.parent), "apply", "mine", "-t", f"sglang={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    assert _files(fresh) == _files(checkout)
    assert run_cli("check", str(out), cwd=tmp_path)[0] == 0


# -- sdist and git layouts: files outside the Python package ------------------------------------

VLLM_SDIST = {
    "PKG-INFO": "Name: vllm\nVersion: 0.33.0\n",
    "setup.py": "",
    "CMakeLists.txt": 'cmake_minimum_required(VERSION 3.26)\nset(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0")\n'
    "project(vllm_extensions LANGUAGES CXX)\n",
    "cmake/utils.cmake": "macro (clear_cuda_arches CUDA_ARCH_FLAGS)\nendmacro()\n",
    "csrc/k.cu": "// kernel\n#if defined(ENABLE_SM100)\nint x;\n#endif\nint y;\n",
    "vllm/__init__.py": "",
    "vllm/_version.py": "__version__ = version = '0.33.0'\n",
    "vllm/config/vllm.py": "SUPPORTED = [90, 100]\n",
}


def _vllm_sdist(cache: Path, files: dict[str, str], version: str = "0.33.0") -> None:
    """A vLLM sdist in patchkit's cache (cache/sdists/vllm/V), as the index would serve it."""
    import io
    import tarfile

    d = cache / "sdists" / "vllm" / version
    d.mkdir(parents=True)
    with tarfile.open(d / f"vllm-{version}.tar.gz", "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    downloaded(d / f"vllm-{version}.tar.gz", cache)  # as a download from the index records it


@pytest.fixture
def vllm_sdist(tmp_path, monkeypatch):
    """An unpacked vLLM 0.33.0 sdist (git layout: csrc/, cmake/, CMakeLists.txt beside vllm/,
    no .git) whose pristine release is the sdist in patchkit's cache."""
    cache = tmp_path / "cache"
    _vllm_sdist(cache, VLLM_SDIST)
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.delenv("PATCHKIT_OFFLINE", raising=False)  # cached: the index is never asked
    root = tmp_path / "vllm-0.33.0"
    for rel, text in VLLM_SDIST.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_capture_on_an_sdist_takes_files_outside_the_package(tmp_path, vllm_sdist, run_cli):
    """CMakeLists.txt, cmake/ and csrc/ of an unpacked vLLM sdist are captured as text-hunks
    beside the Python op; the recipe applies to a fresh copy of the sdist byte for byte and
    reverts, and in the package layout (site-packages, which has no csrc/) the op on vllm/
    applies and the others are not this layout's."""
    from patchkit.base.target import open_target

    assert open_target("vllm", vllm_sdist).layout == "git"
    pristine = _files(vllm_sdist)
    fresh = tmp_path / "fresh"
    shutil.copytree(vllm_sdist, fresh)
    _edit(vllm_sdist, "CMakeLists.txt", '"8.0;9.0;10.0"', '"8.0;9.0;10.0;12.0"')
    _edit(vllm_sdist, "csrc/k.cu", "defined(ENABLE_SM100)", "defined(ENABLE_SM100) || defined(ENABLE_SM120)")
    _edit(vllm_sdist, "cmake/utils.cmake", "endmacro()\n", "  set(X 1)\nendmacro()\n")
    _edit(vllm_sdist, "vllm/config/vllm.py", "[90, 100]", "[90, 100, 120]")
    out = tmp_path / "recipes" / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"vllm={vllm_sdist}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    assert "over 4 file(s)" in stdout, stdout
    ops = tomllib.loads(out.read_text())["ops"]
    assert sorted((o["kind"], o["file"]) for o in ops) == [
        ("list-element", "vllm/config/vllm.py"),
        ("text-hunk", "CMakeLists.txt"),
        ("text-hunk", "cmake/utils.cmake"),
        ("text-hunk", "csrc/k.cu"),
    ], ops
    rec = ["--recipes", str(out.parent)]
    code, stdout, err = run_cli(*rec, "apply", "mine", "-t", f"vllm={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    assert _files(fresh) == _files(vllm_sdist)
    code, stdout, err = run_cli(*rec, "status", "mine", "-t", f"vllm={fresh}", "--json", cwd=tmp_path)
    assert [o["state"] for o in json.loads(stdout)["recipes"][0]["ops"]] == ["applied"] * 4, stdout
    code, stdout, err = run_cli(*rec, "revert", "mine", "-t", f"vllm={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    assert _files(fresh) == pristine
    # the same release installed (package layout: vllm/ alone) has no csrc/: applying there
    # is one line that says so, and nothing is written
    sp = tmp_path / "site-packages"
    for rel, text in VLLM_SDIST.items():
        if rel.startswith("vllm/"):
            (sp / rel).parent.mkdir(parents=True, exist_ok=True)
            (sp / rel).write_text(text)
    (sp / "vllm-0.33.0.dist-info").mkdir()
    (sp / "vllm-0.33.0.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.33.0\n")
    before = _files(sp)
    code, stdout, err = run_cli(*rec, "apply", "mine", "-t", f"vllm={sp}", cwd=tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, stdout + err
    said = "mine > op #1 (text-hunk) > CMakeLists.txt: not in vllm's package layout (an installed or unpacked wheel"
    assert said in err, err
    assert "apply the recipe there (-t vllm=PATH)" in err and "logical names start with" not in err
    assert _files(sp) == before


FLASHINFER = {
    "version.txt": "0.6.3\n",
    "flashinfer/__init__.py": "",
    "flashinfer/jit/core.py": 'SM = ["90a", "100a"]\n',
    "include/flashinfer/arch.cuh": "#if __CUDA_ARCH__ >= 900\n#define HAS_TMA 1\n#endif\n",
    "csrc/gemm.cu": "// gemm\nvoid run();\n",
}


def test_capture_on_a_checkout_maps_include_and_csrc_through_the_engines_layouts(tmp_path, run_cli):
    """A FlashInfer checkout's include/ and csrc/ edits are captured by logical name, and
    the recipe applies to the same release installed, where those files lie under
    flashinfer/data/ (engines.toml's package layout), byte for byte, and reverts."""
    repo = tmp_path / "flashinfer"
    for rel, text in FLASHINFER.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.6.3")
    git(repo, "tag", "v0.6.3")
    _edit(repo, "include/flashinfer/arch.cuh", "#if __CUDA_ARCH__ >= 900\n", "#if __CUDA_ARCH__ >= 900 || SM120\n")
    _edit(repo, "csrc/gemm.cu", "void run();\n", "void run();\nvoid run_sm120();\n")
    _edit(repo, "flashinfer/jit/core.py", '"100a"]', '"100a", "120a"]')
    out = tmp_path / "recipes" / "fi.toml"
    code, stdout, err = run_cli("capture", "fi", "-t", f"flashinfer={repo}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    ops = tomllib.loads(out.read_text())["ops"]
    assert sorted((o["kind"], o["file"]) for o in ops) == [
        ("list-element", "flashinfer/jit/core.py"),
        ("text-hunk", "csrc/gemm.cu"),
        ("text-hunk", "include/flashinfer/arch.cuh"),
    ], ops
    sp = tmp_path / "site-packages"
    installed = {"flashinfer/jit/core.py": "flashinfer/jit/core.py", "flashinfer/__init__.py": "flashinfer/__init__.py"}
    installed |= {"include/flashinfer/arch.cuh": "flashinfer/data/include/flashinfer/arch.cuh"}
    installed |= {"csrc/gemm.cu": "flashinfer/data/csrc/gemm.cu"}
    for logical, rel in installed.items():
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_text(FLASHINFER[logical])
    (sp / "flashinfer_python-0.6.3.dist-info").mkdir()
    (sp / "flashinfer_python-0.6.3.dist-info" / "METADATA").write_text("Name: flashinfer-python\nVersion: 0.6.3\n")
    before = _files(sp)
    rec = ["--recipes", str(out.parent)]
    code, stdout, err = run_cli(*rec, "apply", "fi", "-t", f"flashinfer={sp}", cwd=tmp_path)
    assert code == 0, stdout + err
    for logical, rel in installed.items():
        assert (sp / rel).read_bytes() == (repo / logical).read_bytes(), rel
    code, stdout, err = run_cli(*rec, "revert", "fi", "-t", f"flashinfer={sp}", cwd=tmp_path)
    assert code == 0, stdout + err
    assert _files(sp) == before


# -- several changes in one statement --------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new",
    [
        ('def add(parser, mode="fast", k=1, *, v=None):', 'def add(parser, mode="slow", k=2, *, v=True):'),
        (
            'def add(\n    parser,\n    mode="fast",\n    k=1,\n    *,\n    v=None,\n):',
            'def add(\n    parser,\n    mode="slow",\n    k=1,\n    *,\n    v=True,\n):',
        ),
    ],
    ids=["one line", "one default a line"],
)
def test_several_defaults_changed_in_one_def_header_are_one_set_default_each(tmp_path, checkout, run_cli, old, new):
    """Three (two) parameter defaults changed in one `def` header: one set-default per default,
    in the order they stand; the recipe applies to a pristine copy byte for byte, reads
    applied there, and reverts byte for byte."""
    p = checkout / MOD
    p.write_text(p.read_text().replace('def add(parser, mode="fast"):', old))
    git(checkout, "commit", "-qam", "v0.5.9, its header")
    git(checkout, "tag", "-f", "v0.5.9")
    pristine = _fresh(checkout, tmp_path / "pristine")
    _edit(checkout, MOD, old, new)
    out = tmp_path / "recipes" / "mine.toml"
    code, stdout, err = run_cli("capture", "mine", "-t", f"sglang={checkout}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    ops = tomllib.loads(out.read_text())["ops"]
    want = [("mode", '"slow"'), ("k", "2"), ("v", "True")] if "k=2" in new else [("mode", '"slow"'), ("v", "True")]
    assert [(o["kind"], o["scope"], o["locator"]["param"], o["params"]["value"]) for o in ops] == [
        ("set-default", "add", name, value) for name, value in want
    ], out.read_text()
    fresh = _fresh(checkout, tmp_path / "fresh")
    rec = ["--recipes", str(out.parent)]
    code, stdout, err = run_cli(*rec, "apply", "mine", "-t", f"sglang={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    assert _files(fresh) == _files(checkout)
    code, stdout, err = run_cli(*rec, "status", "mine", "-t", f"sglang={fresh}", "--json", cwd=tmp_path)
    assert [o["state"] for o in json.loads(stdout)["recipes"][0]["ops"]] == ["applied"] * len(want), stdout
    code, stdout, err = run_cli(*rec, "revert", "mine", "-t", f"sglang={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    assert _files(fresh) == _files(pristine)


def test_several_keywords_of_one_call_are_one_op_each():
    """Three keyword values changed in one call: one set-default each (not the whole
    statement's value replaced)."""
    from patchkit.authoring.pycapture import capture_python

    old = "def f(parser):\n    parser.add_argument('--n', type=int, default=1, choices=[1, 2], nargs=None)\n"
    new = old.replace("default=1", "default=2").replace("nargs=None", "nargs='?'")
    ops, failed = capture_python("sglang", "sglang/srt/m.py", old, new)
    assert not failed, failed
    assert [(o.kind, o.locator["keyword"], o.params["value"]) for o in ops] == [
        ("set-default", "default", "2"),
        ("set-default", "nargs", "'?'"),
    ], ops


@pytest.mark.real
def test_capture_on_a_real_vllm_sdist_with_cmake_csrc_and_a_def_header(tmp_path, run_cli):
    """vLLM 0.17.0's sdist (the smallest the vLLM tests download), unpacked as the
    repository lays it out, edited by hand: CMakeLists.txt's architectures, a csrc/ kernel
    gate, three defaults of one multi-line `def` header and a one-line list.  capture writes
    text-hunks, three set-defaults and a list-element; the recipe applies to a fresh copy of
    the sdist byte for byte, reads applied, and reverts byte for byte; the installed layout
    (vllm/ alone) is told, in one line, which op edits a file it does not have."""
    from patchkit.upstream.drift import release_tree
    from tests.conftest import copy_linked

    release = release_tree("vllm", "0.17.0")

    def sdist(name: str) -> Path:
        root = copy_linked(release, tmp_path / name)
        shutil.rmtree(root / ".patchkit")
        return root

    edited = sdist("edited")
    edits = [
        (
            "CMakeLists.txt",
            '"7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0")',
            '"7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0;12.1")',
        ),
        (
            "csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu",
            "  if (version_num >= 100 && version_num < 110) {\n",
            "  if (version_num >= 100 && version_num < 130) {\n",
        ),
        (
            "vllm/utils/flashinfer.py",
            "    force_use_trtllm: bool | None = None,\n    has_sinks: bool = False,\n    has_spec: bool = False,\n",
            "    force_use_trtllm: bool | None = True,\n    has_sinks: bool = True,\n    has_spec: bool = True,\n",
        ),
        (
            "vllm/platforms/interface.py",
            'machine in ("x86_64", "amd64", "i386", "i686")',
            'machine in ("x86_64", "amd64", "i386", "i686", "x64")',
        ),
    ]
    for rel, old, new in edits:
        p = edited / rel
        text = p.read_text()
        assert text.count(old) == 1, rel
        p.unlink()  # a hard link to the cache's release: never written through
        p.write_text(text.replace(old, new))
    out = tmp_path / "recipes" / "cap.toml"
    code, stdout, err = run_cli("capture", "cap", "-t", f"vllm={edited}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    recipe = out.read_text()
    ops = tomllib.loads(recipe)["ops"]
    assert [(o["kind"], o["file"], o.get("locator", {}).get("param")) for o in ops] == [
        ("text-hunk", "CMakeLists.txt", None),
        ("text-hunk", "csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu", None),
        ("list-element", "vllm/platforms/interface.py", None),
        ("set-default", "vllm/utils/flashinfer.py", "force_use_trtllm"),
        ("set-default", "vllm/utils/flashinfer.py", "has_sinks"),
        ("set-default", "vllm/utils/flashinfer.py", "has_spec"),
    ], recipe
    for o in ops[2:]:  # a compact identity: of the file's imports, only those its site names
        assert len(o["identity"]["imports"]) <= 8, o["identity"]["imports"]
    rec = ["--recipes", str(out.parent)]
    fresh = sdist("fresh")
    code, stdout, err = run_cli(*rec, "apply", "cap", "-t", f"vllm={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    for rel, _, _ in edits:
        assert (fresh / rel).read_bytes() == (edited / rel).read_bytes(), rel
    code, stdout, err = run_cli(*rec, "status", "cap", "-t", f"vllm={fresh}", "--json", cwd=tmp_path)
    assert [o["state"] for o in json.loads(stdout)["recipes"][0]["ops"]] == ["applied"] * 6, stdout
    code, stdout, err = run_cli(*rec, "revert", "cap", "-t", f"vllm={fresh}", cwd=tmp_path)
    assert code == 0, stdout + err
    for rel, _, _ in edits:
        assert (fresh / rel).read_bytes() == (release / rel).read_bytes(), rel
    # installed: vllm/ alone, without csrc/ or CMakeLists.txt
    sp = tmp_path / "site-packages"
    copy_linked(release / "vllm", sp / "vllm")
    (sp / "vllm-0.17.0.dist-info").mkdir()
    (sp / "vllm-0.17.0.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.17.0\n")
    code, stdout, err = run_cli(*rec, "apply", "cap", "-t", f"vllm={sp}", cwd=tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, stdout + err
    assert "cap > op #1 (text-hunk) > CMakeLists.txt: not in vllm's package layout" in err, err
    for rel, _, _ in edits[2:]:
        assert (sp / rel).read_bytes() == (release / rel).read_bytes(), rel


def test_a_one_line_edit_of_a_choices_list_is_a_list_element_on_its_name():
    """SGLang's server_args.py holds lists of backend names at module level, several of them
    holding the same names (`contains` cannot single one out).  An element added to one of
    them on its line is a list-element on the name it is assigned to, not the whole
    statement's value rewritten (set-default) or the statement replaced."""
    from patchkit.authoring.pycapture import capture_python

    old = (
        'DETERMINISTIC_ATTENTION_BACKEND_CHOICES = ["flashinfer", "fa3", "triton"]\n'
        'RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND = ["fa3", "triton"]\n'
        'MAMBA_BACKEND_CHOICES = ["triton", "flashinfer"]\n'
        "\n\nclass ServerArgs:\n    def check(self):\n"
        '        self.backends = ["triton", "flashinfer"]\n'
        '        self.fallback = ["triton", "flashinfer"]\n'
    )
    for line, new, target in [
        (0, '"flashinfer", "fa3", "triton", "trtllm_mha"]', "DETERMINISTIC_ATTENTION_BACKEND_CHOICES"),
        (1, '"fa3", "triton", "flashinfer"]', "RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND"),
        (7, '"triton", "flashinfer", "cutlass"]', "self.backends"),
    ]:
        lines = old.splitlines(True)
        lines[line] = lines[line][: lines[line].index("[") + 1] + new + "\n"
        ops, failed = capture_python("sglang", "sglang/srt/server_args.py", old, "".join(lines))
        assert not failed, failed
        (op,) = ops
        assert (op.kind, op.locator) == ("list-element", {"target": target}), (op.kind, op.locator, op.params)


@pytest.mark.real
def test_a_choices_list_of_sglangs_server_args_is_captured_by_its_name(tmp_path, run_cli, pristine_trees):
    """SGLang 0.5.9's DETERMINISTIC_ATTENTION_BACKEND_CHOICES (its names stand in other lists
    too) gains an element on its one line: a list-element on that name, which applies to a
    fresh copy byte for byte, reads applied and reverts byte for byte."""
    from tests.conftest import copy_linked

    release, f = pristine_trees["sglang"], "sglang/srt/server_args.py"

    def copy(name: str) -> Path:
        root = copy_linked(release, tmp_path / name)
        shutil.rmtree(root / ".patchkit")
        return root

    edited = copy("edited")
    old = 'DETERMINISTIC_ATTENTION_BACKEND_CHOICES = ["flashinfer", "fa3", "triton"]'
    text = (edited / f).read_text()
    assert text.count(old) == 1
    (edited / f).unlink()  # a hard link to the cache's release: never written through
    (edited / f).write_text(text.replace(old, old[:-1] + ', "trtllm_mha"]'))
    out = tmp_path / "recipes" / "choices.toml"
    code, stdout, err = run_cli("capture", "choices", "-t", f"sglang={edited}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    (op,) = tomllib.loads(out.read_text())["ops"]
    assert (op["kind"], op["locator"]) == ("list-element", {"target": "DETERMINISTIC_ATTENTION_BACKEND_CHOICES"})
    fresh = copy("fresh")
    rec = ["--recipes", str(out.parent)]
    assert run_cli(*rec, "apply", "choices", "-t", f"sglang={fresh}", cwd=tmp_path)[0] == 0
    assert (fresh / f).read_bytes() == (edited / f).read_bytes()
    code, stdout, err = run_cli(*rec, "status", "choices", "-t", f"sglang={fresh}", "--json", cwd=tmp_path)
    assert [o["state"] for o in json.loads(stdout)["recipes"][0]["ops"]] == ["applied"], stdout
    assert run_cli(*rec, "revert", "choices", "-t", f"sglang={fresh}", cwd=tmp_path)[0] == 0
    assert (fresh / f).read_bytes() == (release / f).read_bytes()


def test_an_element_put_first_or_into_an_empty_list_is_a_list_element():
    """At the front of a list (params.before) and into an empty one: list-element, not the
    whole value rewritten."""
    from patchkit.authoring.pycapture import capture_python

    for old, new, params in [
        ('X = ["a", "b"]\n', 'X = ["c", "a", "b"]\n', {"element": '"c"', "before": '"a"'}),
        ("X = []\n", 'X = ["a"]\n', {"element": '"a"'}),
    ]:
        ops, failed = capture_python("sglang", "sglang/srt/m.py", old, new)
        assert not failed, failed
        assert [(o.kind, o.locator, o.params) for o in ops] == [("list-element", {"target": "X"}, params)], ops
