"""Writing recipes: a broken recipe file among good ones, `patchkit new`, `patchkit check`
and the examples a recipe carries.  Offline: recipes only, no target."""

from __future__ import annotations

import json
import shutil

import pytest

from patchkit.core import recipe
from tests.conftest import MINIMAL_RECIPE, ROOT

GOOD = MINIMAL_RECIPE


def _recipes(tmp_path, files: dict[str, str]):
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


# -- a broken recipe file among good ones -------------------------------------------------------

BROKEN = {
    "bad TOML": ('id = "bad"\nbundles = ["b"]\nsummary = "x\n', "bad.toml:3: invalid TOML"),
    "bad value": (GOOD.format(id="bad").replace('scope = "f"', 'scope = "f g"'), "bad.toml:12 > op #1 > scope"),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_a_broken_recipe_warns_commands_that_do_not_name_it(tmp_path, run_cli, case):
    text, where = BROKEN[case]
    d = _recipes(tmp_path, {"good.toml": GOOD.format(id="good").replace('"b"]', '"c"]'), "bad.toml": text})
    code, out, err = run_cli("--recipes", str(d), "list", cwd=tmp_path)
    assert code == 0, err
    assert out.startswith("good ")
    (line,) = err.strip().splitlines()  # one line, naming file:line and why
    assert line.startswith(f"patchkit: warning: {d}/{where}"), line
    assert line.endswith("(skipped; `patchkit check` lists every error)")
    recipe._WARNED.clear()  # once per process: run_cli runs in this one
    code, out, err = run_cli("--recipes", str(d), "show", "good", cwd=tmp_path)
    assert code == 0 and "patchkit: warning:" in err


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
@pytest.mark.parametrize("name", ["bad", "b"])  # the recipe itself, or the bundle it claims
def test_a_command_that_names_a_broken_recipe_fails(tmp_path, run_cli, case, name):
    text, where = BROKEN[case]
    d = _recipes(tmp_path, {"good.toml": GOOD.format(id="good"), "bad.toml": text})
    code, out, err = run_cli("--recipes", str(d), "list", name, cwd=tmp_path)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"patchkit: error: {d}/{where}"), line


def test_the_bundle_of_good_recipes_still_works_beside_a_broken_one(tmp_path, run_cli):
    """A bundle no broken file claims is unaffected; one that a broken file claims is not
    quietly applied without it."""
    d = _recipes(
        tmp_path,
        {"good.toml": GOOD.format(id="good").replace('"b"]', '"c"]'), "bad.toml": BROKEN["bad value"][0]},
    )
    code, out, err = run_cli("--recipes", str(d), "list", "c", cwd=tmp_path)
    assert code == 0 and out.startswith("good "), err


def test_shipped_recipes_have_no_broken_file(run_cli):
    code, out, err = run_cli("--recipes", str(ROOT / "recipes"), "list")
    assert code == 0 and not err, err


def _copy_shipped(tmp_path):
    d = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", d)
    return d


# -- check: every error in every file -----------------------------------------------------------

# (name, recipe text, the breadcrumb lines `check` must print for it, in order)
BAD_FILES = [
    (
        "several errors in one file",
        GOOD.format(id="many")
        .replace('summary = "widen a list"', 'summary = ""\nbundle = "x"')
        .replace('sglang = ">=0.5.9"', 'sglang = ">=banana"\ntorch = ">=2"')
        .replace('scope = "f"', 'scope = "f g"\nkindd = 1')
        .replace("element = '\"b\"'", 'element = \'"b"\'\naction = "toggle"'),
        [
            "many.toml:3: many: bundle: unknown key 'bundle' (hint: did you mean 'bundles'?)",
            "many.toml:2: many: summary: is empty (hint: say in one line what the recipe does)",
            "many.toml:7: many: engines > sglang: '>=banana' is not a valid version specifier",
            "many.toml:8: many: engines > torch: unknown engine 'torch' (hint: engines: sglang, flashinfer, vllm)",
            "many.toml:15: many: op #1 > kindd: unknown key 'kindd' (hint: did you mean 'kind'?)",
            "many.toml:12: many: op #1 > engine: engine 'sglang' is not in the recipe's [engines]",
            "many.toml:14: many: op #1 > scope: 'f g' is not a qualified name",
            "many.toml:20: many: op #1 > params.action: must be 'add' or 'remove', not 'toggle'",
        ],
    ),
    (
        "every op, variant op, marker and blocker",
        GOOD.format(id="ops")
        + """
[[ops]]
kind = "list-elemnt"
engine = "sglang"
file = "sglang/srt/x.py"

[[ops]]
kind = "text-replace"
engine = "sglang"
file = "sglang/srt/x.py"
[ops.params]
find = "a"
replace = "b"
count = 0
[[ops.markers]]
contains = []

[[variants]]
when = { sglang = ">=0.5.19" }
[[variants.ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/x.py"
when = { sglang = ">=1" }
[variants.ops.locator]
anchor = "x = 1"

[[blockers]]
engine = "sglang"
file = "/etc/passwd"
contains = ["raise"]
message = "m"
""",
        [
            "ops.toml:19: ops: op #2 > kind: unknown op kind 'list-elemnt' (hint: did you mean 'list-element'?)",
            "ops.toml:26: ops: op #3 > file: text-replace edits non-Python files, and 'sglang/srt/x.py' is one",
            "ops.toml:30: ops: op #3 > params.count: must be at least 1, not 0",
            "ops.toml:31: ops: op #3 > marker #1 > contains: is required and must not be empty",
            "ops.toml:40: ops: variant #1 > op #4 > when: an op of a variant takes the variant's `when`",
            "ops.toml:46: ops: blocker #1 > file: '/etc/passwd' is an absolute path",
        ],
    ),
    (
        "invalid TOML",
        'id = "toml"\nsummary = "x\n',
        ["toml.toml:2: toml: recipe: invalid TOML: "],
    ),
]


@pytest.mark.parametrize("name,text,lines", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_check_reports_every_error_in_every_file(tmp_path, run_cli, name, text, lines):
    rid = lines[0].split(".toml")[0]
    d = _recipes(tmp_path, {f"{rid}.toml": text, "good.toml": GOOD.format(id="good")})
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 2, out + err
    got = out.strip().splitlines()
    assert len(got) == len(lines), "\n".join(got)
    for want, line in zip(lines, got, strict=True):
        assert line.startswith(f"{d}/{want}"), f"{line}\n  wanted {want}"
    assert err.strip() == f"{len(lines)} error(s) in 1 of 2 recipe file(s)"


def test_check_reports_every_file(tmp_path, run_cli):
    """Two broken files and a good one: both broken files are reported, each error once."""
    d = _recipes(
        tmp_path,
        {
            "a.toml": GOOD.format(id="a").replace('scope = "f"', 'scope = "1"'),
            "b.toml": GOOD.format(id="b").replace('kind = "list-element"', 'kind = "nope"'),
            "c.toml": GOOD.format(id="c"),
        },
    )
    code, out, err = run_cli("check", str(d / "a.toml"), str(d / "b.toml"), str(d / "c.toml"), cwd=tmp_path)
    assert code == 2
    assert [ln.split(": ")[0:3] for ln in out.strip().splitlines()] == [
        [f"{d}/a.toml:12", "a", "op #1 > scope"],
        [f"{d}/b.toml:9", "b", "op #1 > kind"],
    ]
    code, out, err = run_cli("check", str(d / "c.toml"), "--json", cwd=tmp_path)
    assert code == 0 and json.loads(out) == {"ok": True, "files": 1, "examples": 0, "errors": []}


def test_check_finds_cross_file_errors(tmp_path, run_cli):
    d = _recipes(tmp_path, {"good.toml": GOOD.format(id="good").replace('["b"]', '["other"]')})
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "other.toml").write_text(GOOD.format(id="other"))
    code, out, err = run_cli("check", str(d), str(tmp_path / "more"), cwd=tmp_path)
    assert code == 2
    assert "good: bundles: bundle name 'other' is also a recipe id" in out


def test_check_reports_a_bundle_named_like_a_recipe_by_default(tmp_path, run_cli):
    """The catalog refuses it as a whole; check still reads every file, and says which."""
    d = _recipes(
        tmp_path,
        {"good.toml": GOOD.format(id="good").replace('["b"]', '["other"]'), "other.toml": GOOD.format(id="other")},
    )
    code, out, err = run_cli("--recipes", str(d), "check", cwd=tmp_path)
    assert code == 2
    assert out.startswith(f"{d}/good.toml: good: bundles: bundle name 'other' is also a recipe id"), out


def test_check_defaults_to_every_recipe_in_play(tmp_path, run_cli):
    d = _recipes(tmp_path, {"good.toml": GOOD.format(id="good"), "bad.toml": BROKEN["bad value"][0]})
    code, out, err = run_cli("--recipes", str(d), "check", cwd=tmp_path)
    assert code == 2
    assert out.startswith(f"{d}/bad.toml:12: bad: op #1 > scope: 'f g' is not a qualified name")
    assert err.strip() == "1 error(s) in 1 of 2 recipe file(s)"


def test_check_shipped_recipes(run_cli):
    """The shipped recipes pass, and max-running-requests's example is run."""
    code, out, err = run_cli("--recipes", str(ROOT / "recipes"), "check", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["ok"] and doc["examples"] >= 1


# -- examples -----------------------------------------------------------------------------------

EXAMPLE = """
[[ops.examples]]
before = '''
def f():
    return ["a"]
'''
after = '''
def f():
    return ["a", "b"]
'''
"""

# (name, edit of the passing example, what check says, whether a diff follows)
BAD_EXAMPLES = [
    ("after differs", lambda s: s.replace('["a", "b"]', '["a",  "b"]'), "does not give exactly `after`", True),
    ("already applied", lambda s: s.replace('return ["a"]', 'return ["b", "a"]'), "reads done on `before`", False),
    ("missing site", lambda s: s.replace('return ["a"]', "return []"), "reads missing on `before`", False),
    ("scope absent", lambda s: s.replace('def f():\n    return ["a"]', 'def g():\n    return ["a"]'), "no `f`", False),
    ("not Python", lambda s: s.replace('return ["a"]', "return [a"), "does not parse", False),
    ("no after", lambda s: s[: s.index("after =")], "example #1 > after: is required", False),
]


def _with_example(tmp_path, example: str, op_edit=lambda s: s):
    return _recipes(tmp_path, {"ex.toml": op_edit(GOOD.format(id="ex")) + example})


def test_a_passing_example(tmp_path, run_cli):
    d = _with_example(tmp_path, EXAMPLE)
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 0, out
    assert "1 example(s): no errors" in out


@pytest.mark.parametrize("name,edit,said,diff", BAD_EXAMPLES, ids=[c[0] for c in BAD_EXAMPLES])
def test_a_failing_example(tmp_path, run_cli, name, edit, said, diff):
    bad = edit(EXAMPLE)
    assert bad != EXAMPLE
    d = _with_example(tmp_path, bad)
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 2
    first, *rest = out.strip().splitlines()
    assert first.startswith(f"{d}/ex.toml:18: ex: op #1 > example #1"), first
    assert said in first, first
    if diff:
        assert rest[:2] == ["    --- after", "    +++ apply(before)"], rest
        assert '    -    return ["a",  "b"]' in rest and '    +    return ["a", "b"]' in rest
    else:
        assert rest == []


def test_an_example_whose_revert_loses_bytes(tmp_path, run_cli):
    """An op whose revert does not give back `before` (replace-expr writes `match` back as
    the recipe spells it): the example catches it, with the diff."""
    op = lambda s: s.replace(  # noqa: E731
        'kind = "list-element"', 'kind = "replace-expr"'
    ).replace(
        "[ops.locator]\ncontains = ['\"a\"']\n[ops.params]\nelement = '\"b\"'",
        '[ops.locator]\nmatch = \'["a"]\'\n[ops.params]\nwith = \'["a", "b"]\'',
    )
    example = EXAMPLE.replace('return ["a"]', 'return [ "a" ]')
    d = _with_example(tmp_path, example, op)
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 2, out
    assert "revert of `after` does not give back `before`" in out
    assert '    -    return [ "a" ]' in out and '    +    return ["a"]' in out


def test_an_example_of_a_variant_op(tmp_path, run_cli):
    """[[variants.ops.examples]]: run like any other, named by the op's number in the file."""
    variant = """
[[variants]]
when = { sglang = ">=0.5.19" }
[[variants.ops]]
kind = "set-default"
engine = "sglang"
file = "sglang/srt/x.py"
scope = "A"
[variants.ops.locator]
field = "n"
[variants.ops.params]
value = "2"
expect = "1"
[[variants.ops.examples]]
before = "class A:\\n    n = 1\\n"
after = "class A:\\n    n = 3\\n"
"""
    d = _recipes(tmp_path, {"v.toml": GOOD.format(id="v") + variant})
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 2
    assert out.startswith(f"{d}/v.toml:30: v: op #2 > example #1: apply to `before` does not give exactly `after`"), out
    (d / "v.toml").write_text(GOOD.format(id="v") + variant.replace("n = 3", "n = 2"))
    assert run_cli("check", str(d), cwd=tmp_path)[0] == 0


def test_a_text_example(tmp_path, run_cli):
    text_op = """
[[ops]]
kind = "text-replace"
engine = "sglang"
file = "sglang/srt/k.cuh"
[ops.params]
find = "arch < 1200"
replace = "arch < 1300"
count = 2
[[ops.examples]]
before = "if (arch < 1200) {}\\nif (arch < 1200) {}\\n"
after = "if (arch < 1300) {}\\nif (arch < 1300) {}\\n"
"""
    d = _recipes(tmp_path, {"t.toml": GOOD.format(id="t") + text_op})
    assert run_cli("check", str(d), cwd=tmp_path)[0] == 0
    (d / "t.toml").write_text(GOOD.format(id="t") + text_op.replace("count = 2", "count = 1"))
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 2 and "op #2 > example #1: the op reads ambiguous on `before`" in out, out


# -- new ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sglang", "flashinfer"])
def test_new_writes_a_template_that_check_accepts(tmp_path, run_cli, engine):
    d = tmp_path / "recipes"
    code, out, err = run_cli("--recipes", str(d), "new", "my-fix", "--engine", engine, cwd=tmp_path)
    assert code == 0, err
    path = d / "my-fix.toml"
    text = path.read_text()
    assert f'engine = "{engine}"' in text
    code, out, err = run_cli("check", str(path), cwd=tmp_path)
    assert code == 0, out
    assert "1 example(s): no errors" in out
    code, out, err = run_cli("--recipes", str(d), "new", "my-fix", cwd=tmp_path)
    assert code == 2 and "already exists" in err
    assert path.read_text() == text


def _blocks(text: str) -> list[tuple[str, str]]:
    """The commented-out blocks of the template: (title, the template with that block uncommented)."""
    lines = text.splitlines(True)
    out = []
    for i, ln in enumerate(lines):
        if ln.startswith("# --- "):
            j = i + 1
            while j < len(lines) and lines[j].startswith("#") and not lines[j].startswith("# --- "):
                j += 1
            body = [x[2:] if x.startswith("# ") else x[1:] for x in lines[i + 1 : j]]
            out.append((ln[6:].strip(), "".join(lines[:i] + body + lines[j:])))
    return out


@pytest.mark.parametrize("engine", ["sglang", "flashinfer"])
def test_every_commented_block_of_the_template_is_valid(tmp_path, engine):
    """Uncommenting any one block (an op of each kind, a variant, a blocker) keeps the recipe
    valid: the template teaches only what loads."""
    from patchkit.commands.author import template
    from patchkit.core.ops import KINDS
    from patchkit.core.recipe import check_recipe

    blocks = _blocks(template("t", engine))
    titles = [t for t, _ in blocks]
    for kind in KINDS:
        assert any(t.startswith(kind) for t in titles), kind
    assert any(t.startswith("a version variant") for t in titles) and any(t.startswith("a blocker") for t in titles)
    path = tmp_path / "t.toml"
    for title, text in blocks:
        path.write_text(text)
        recipe, errors = check_recipe(path)
        assert not errors, f"{title}: {[str(e) for e in errors]}"
        assert len(recipe.ops) + len(recipe.blockers) == 2, title


def test_new_refuses_a_bad_id_or_a_file_named_otherwise(tmp_path, run_cli):
    assert run_cli("new", "Bad_Id", "-o", "-", cwd=tmp_path)[0] == 2
    code, out, err = run_cli("new", "x", "-o", str(tmp_path / "y.toml"), cwd=tmp_path)
    assert code == 2 and "named after its id" in err
    code, out, err = run_cli("new", "x", "-o", "-", cwd=tmp_path)
    assert code == 0 and out.startswith("# A patchkit recipe")


def test_check_reads_every_malformed_recipe_of_the_error_table(tmp_path, run_cli):
    """Every malformed recipe of tests/core/test_recipe_errors.py: check reports it (exit 2, never
    a crash), and its first line is the error every other command gives."""
    from tests.core.test_recipe_errors import CASES
    from tests.core.test_recipe_errors import GOOD as R

    d = tmp_path / "recipes"
    d.mkdir()
    for name, edit, expected in CASES:
        (d / "r.toml").write_text(edit(R))
        code, out, err = run_cli("check", str(d / "r.toml"), cwd=tmp_path)
        assert code == 2 and "internal error" not in err, f"{name}: {out}{err}"
        first = out.splitlines()[0]
        loc, _, rest = expected.partition(" > ")
        if not rest:  # no breadcrumb: "r.toml[:N]: what"
            loc, _, rest = expected.partition(": ")
            want = f"{d}/{loc}: r: recipe: {rest}"
        else:
            want = f"{d}/{loc}: r: {rest}"
        assert first.startswith(want.removesuffix(": ")) if expected.endswith(": ") else first == want, (
            f"{name}:\n  {first}\n  {want}"
        )


def test_check_reads_past_an_op_of_an_unknown_engine(tmp_path, run_cli):
    """An op whose engine is not the recipe's, with a marker: strict loading stops at the
    engine; check goes on, and must not judge the marker's file for an engine it lacks."""
    text = GOOD.format(id="m").replace('engine = "sglang"', 'engine = "torch"') + "[[ops.markers]]\ncontains = ['x']\n"
    d = _recipes(tmp_path, {"m.toml": text})
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 2 and "internal error" not in err, err
    assert out.splitlines()[0].startswith(f"{d}/m.toml:10: m: op #1 > engine: engine 'torch' is not in the recipe's")


def test_a_proposed_marker_is_warned_about_until_confirmed(tmp_path, run_cli):
    """`port` writes a marker it proposes with `proposed = "..."`: check names it, with its
    line, and still passes (exit 0); without the line there is nothing to say."""
    marker = '\n[[ops.markers]]\ncontains = [\'"b"\']\nproposed = "read x.py:3; delete this line to confirm"\n'
    text = GOOD.format(id="p") + marker
    d = _recipes(tmp_path, {"p.toml": text})
    line = text.splitlines().index("[[ops.markers]]") + 1
    code, out, err = run_cli("check", str(d / "p.toml"), cwd=tmp_path)
    assert code == 0, out + err
    assert (
        f"{d}/p.toml:{line}: p: op #1 > marker #1: WARNING: proposed, not counted until confirmed: read x.py:3" in err
    )
    code, out, _ = run_cli("check", str(d / "p.toml"), "--json", cwd=tmp_path)
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and len(doc["warnings"]) == 1 and f"p.toml:{line}:" in doc["warnings"][0]
    (d / "p.toml").write_text(text.replace('proposed = "read x.py:3; delete this line to confirm"\n', ""))
    code, out, err = run_cli("check", str(d / "p.toml"), cwd=tmp_path)
    assert code == 0 and "WARNING" not in err


def test_check_reports_every_error_of_an_op_past_its_kind_engine_and_missing_keys(tmp_path, run_cli):
    """An unknown kind, an engine the recipe lacks and a missing key no longer hide the op's
    other errors: each is one file:line, recipe, op, why line, all in one run."""
    one = (
        GOOD.format(id="many")
        .replace('kind = "list-element"', 'kind = "list-elemnt"')
        .replace('engine = "sglang"', 'engine = "torch"')
        .replace('file = "sglang/srt/x.py"', 'file = "/abs/x.py"')
        .replace('scope = "f"', 'scope = "f g"')
    )
    two = GOOD.format(id="nokind").replace('kind = "list-element"\n', "").replace('scope = "f"', 'scope = "1f"')
    d = _recipes(tmp_path, {"many.toml": one, "nokind.toml": two})
    code, out, err = run_cli("check", str(d), cwd=tmp_path)
    assert code == 2, err
    got = [line.split(" (hint:")[0].removeprefix(f"{d}/") for line in out.strip().splitlines()]
    assert got == [
        "many.toml:9: many: op #1 > kind: unknown op kind 'list-elemnt'",
        "many.toml:10: many: op #1 > engine: engine 'torch' is not in the recipe's [engines]",
        "many.toml:11: many: op #1 > file: '/abs/x.py' is an absolute path",
        "many.toml:12: many: op #1 > scope: 'f g' is not a qualified name",
        "nokind.toml:8: nokind: op #1: missing required key 'kind'",
        "nokind.toml:11: nokind: op #1 > scope: '1f' is not a qualified name",
    ], out
