"""Relocation scores every candidate against the site's identity, like patch's context lines
(patchkit/core/context.py, identity.py).

A candidate is where the site moved only when its similarity reaches the threshold and
leads the runner-up by the margin (``moved``, the runners-up named as
file::scope:line (score: parts)); several alike are ``ambiguous``, and none alike
``missing``, every candidate named.  The measure is a pure function over values; then
whole status runs on small hand-written trees: the identity from the pristine release (a
git checkout's tag), from the named scope as it stands, from the recipe alone, and what
the file the code left imports.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from patchkit.core import context, identity
from patchkit.core.context import Context
from patchkit.upstream import fetch
from tests.conftest import git, mini_sglang

SA = "sglang/srt/server_args.py"


def ctx(src: str, marker: str, file: str = "sglang/srt/m.py", scope: str = "", imports=frozenset()) -> Context:
    """The context of the first line of ``src`` holding ``marker``."""
    line = next(i for i, ln in enumerate(src.splitlines(), 1) if marker in ln)
    return context.of_site(ast.parse(src), line, file, scope, imports)


def block(*fields: str, site: str = "max_running_requests") -> str:
    body = [f"    {f}: Optional[int] = None" for f in fields]
    return "class C:\n" + "\n".join(body) + "\n"


# -- the similarity, over values (context.similarity, identity.decide) ------------------------


def sim(original: Context, cand: Context) -> float:
    return round(context.similarity(original, cand)[0], 4)


def C(score: float):
    return identity.Candidate("f.py", "s", 1, score, ())


def test_statements_around_the_site_are_its_context_lines():
    original = ctx(block("a", "b", "max_running_requests", "c", "d"), "max_running")
    near = ctx(block("x", "b", "max_running_requests", "c", "y"), "max_running")
    far = ctx(block("x", "y", "max_running_requests", "z", "w"), "max_running")
    assert context.similarity(original, near) == (4 / 6, ("scope", "site", "before 1/2", "after 1/2"))
    assert sim(original, far) == round(2 / 6, 4) < identity.THRESHOLD  # the scope and the statement alone
    assert identity.decide([C(sim(original, near)), C(sim(original, far))]) == "moved"


def test_a_neighbour_on_the_wrong_side_or_too_far_counts_a_quarter():
    original = ctx(block("a", "max_running_requests", "b"), "max_running")
    assert sim(original, ctx(block("b", "max_running_requests", "a"), "max_running")) == 2.5 / 4
    assert sim(original, ctx(block("a", "p", "q", "r", "max_running_requests"), "max_running")) == 2.25 / 4
    assert sim(original, ctx(block("p", "a", "max_running_requests"), "max_running")) == 3 / 4


def test_siblings_beyond_the_near_statements_count_as_one_part():
    fields = ["s1", "s2", "s3", "n1", "n2", "n3", "max_running_requests", "m1", "m2", "m3"]
    original = ctx(block(*fields), "max_running")
    kin = ctx(block("s1", "s2", "s3", "x1", "x2", "x3", "max_running_requests", "y1"), "max_running")
    stranger = ctx(block("t1", "t2", "t3", "x1", "x2", "x3", "max_running_requests", "y1"), "max_running")
    assert context.similarity(original, kin)[1] == ("scope", "site", "siblings 100%")
    assert sim(original, kin) - sim(original, stranger) == pytest.approx(1 / 9, abs=1e-3)


def test_a_neighbour_that_changed_but_binds_the_same_name_counts_by_its_likeness():
    original = ctx("class C:\n    a: Optional[int] = None\n    max_running_requests = None\n", "max_running")
    annotated = ctx(
        'class C:\n    a: A[Optional[int], "help"] = None\n    max_running_requests = None\n', "max_running"
    )
    score, parts = context.similarity(original, annotated)
    assert parts == ("scope", "site", "before 0.88/1") and 0.95 < score < 1  # a string literal is one token


def test_layout_and_comments_do_not_matter_and_statements_that_name_nothing_are_no_context():
    original = ctx("def f(n):\n    pass\n    y = g( n ,\n  2)  # c\n    return [n]\n", "return")
    same = ctx("def f(n):\n    y = g(n, 2)\n    return [n]\n", "return")
    empty = ctx("def f(n):\n    pass\n    return None\n    return [n]\n", "return [n]")
    assert sim(original, same) == 1.0
    assert context.similarity(original, empty)[1] == ("scope", "site")


def test_enclosing_names_and_a_renamed_scope():
    original = Context("sglang/srt/old.py", "Config.ServerArgs")
    assert sim(original, Context("sglang/srt/a.py", "Config.ServerArgs")) == 1.0
    assert sim(original, Context("sglang/srt/b.py", "_Legacy.ServerArgs")) == 0.5  # one name of two, `_` ignored
    tree = ast.parse("def apply_ar_fusion(batch_size: int):\n    return x\n")
    renamed = ast.parse("def ar_fusion_applies(batch_size: int):\n    return x\n")
    a = context.of_site(tree, 2, "m.py", "apply_ar_fusion")
    b = context.of_site(renamed, 2, "n.py", "ar_fusion_applies")
    assert a.header == (("apply", "ar", "fusion"), "batch_size: int")
    # Words shared: 2 of 4 (0.5), the same parameters (1): the scope 0.75, the site 1.
    assert context.similarity(a, b) == (0.875, ("scope renamed 75%", "site"))


def test_the_file_the_code_left_importing_a_candidate_points_at_it():
    src = "from .fields.schedule import Schedule\nimport sglang.srt.pool\n"
    imports = context.imports_of(ast.parse(src), SA)
    assert ("sglang.srt.fields.schedule", "Schedule") in imports
    body = (("a: int = 0", "a"), ("b: int = 0", "b"))
    original = Context(SA, "ServerArgs", body, imports=imports)
    moved = body + (("x: int = 0", "x"),)  # the siblings kept, the scope not: 0.5 alike
    assert context.similarity(original, Context("sglang/srt/fields/schedule.py", "Schedule", moved)) == (
        1.0,
        ("siblings 100%", "imported"),
    )
    assert sim(original, Context("sglang/srt/fields/schedule.py", "Other", moved)) == 0.5
    assert sim(original, Context("sglang/srt/pool.py", "", moved)) == 1.0  # a module-level candidate
    assert sim(original, Context("sglang/srt/elsewhere.py", "Schedule", moved)) == 0.5


def test_an_import_never_makes_unlike_code_the_site():
    """Where the code went is no likeness: a candidate with less than IMPORT_FLOOR of the
    site's identity stays unlike, whatever the file it left imports (SGLang 0.5.20's
    server_args.py imports ExecComm, whose unrelated `"trtllm"` field read moved so)."""
    imports = context.imports_of(ast.parse("from .fields.schedule import Schedule\n"), SA)
    body = (("a: int = 0", "a"), ("b: int = 0", "b"), ("c: int = 0", "c"), ("d: int = 0", "d"))
    original = Context(SA, "ServerArgs", body, imports=imports)
    weak = body[:1] + (("x: int = 0", "x"),)  # a quarter of the siblings, no scope: 0.125
    assert context.IMPORT_FLOOR == 0.4
    assert context.similarity(original, Context("sglang/srt/fields/schedule.py", "Schedule", weak)) == (
        0.125,
        ("siblings 25%",),
    )


def test_twins_are_ambiguous_and_the_margin_is_fifteen_hundredths():
    original = ctx(block("a", "max_running_requests", "b"), "max_running")
    twin = ctx(block("a", "max_running_requests", "b"), "max_running")
    assert identity.decide([C(sim(original, twin)), C(sim(original, twin))]) == "ambiguous"
    assert identity.THRESHOLD == 0.5 and identity.MARGIN == 0.15
    assert identity.decide([C(0.65), C(0.5)]) == "moved"
    assert identity.decide([C(0.64), C(0.5)]) == "ambiguous"
    assert identity.decide([C(0.5)]) == "moved" and identity.decide([C(0.4999)]) == "missing"


def test_the_site_block_is_the_innermost_one_holding_the_line():
    src = "def f(x):\n    a = 1\n    if x:\n        b = 2\n        return [x,\n                b]\n    c = 3\n"
    inner = ctx(src, "b]")  # a line inside the statement: the statement is the site
    assert inner.block[inner.at][0] == "return [x, b]"
    # Its context lines run across the blocks around it, as a diff's do: the `if`'s header,
    # and the statements before it; its siblings are its own block's.
    assert inner.before == (("b = 2", "b"), ("if x", ""), ("a = 1", "a"))
    assert inner.after == (("c = 3", "c"),) and inner.siblings == ()
    outer = ctx(src, "if x")
    assert outer.block[outer.at][0] == "if x" and outer.before == (("a = 1", "a"),)
    assert outer.after == (("b = 2", "b"), ("return [x, b]", ""), ("c = 3", "c"))


def test_a_site_alone_in_its_block_has_the_blocks_around_it_as_context():
    """SGLang 0.5.12's `_set_default_nsa_backends`: the decode default stands alone under
    `if not user_set_decode:`; only the statements around that `if` tell the bf16 branch's
    from the fp8 branch's, and a renamed binding (nsa -> dsa) is still that neighbour."""
    src = (
        "def f(major, fp8):\n"
        "    if fp8:\n"
        "        if not user_set_prefill:\n"
        "            self.nsa_prefill_backend = 'trtllm'\n"
        "        if not user_set_decode:\n"
        "            self.nsa_decode_backend = 'trtllm'\n"
        "    else:\n"
        "        if not user_set_prefill:\n"
        "            self.nsa_prefill_backend = 'flashmla_sparse'\n"
        "        if not user_set_decode:\n"
        "            self.nsa_decode_backend = 'trtllm'\n"
        "        self.done = True\n"
    )
    lines = src.splitlines()
    fp8, bf16 = (i for i, ln in enumerate(lines, 1) if "nsa_decode_backend = 'trtllm'" in ln)
    tree = ast.parse(src)
    a, b = (context.of_site(tree, n, "m.py", "f") for n in (fp8, bf16))
    assert a.block == b.block == (("self.nsa_decode_backend = 'trtllm'", "self.nsa_decode_backend"),)
    assert b.before[:2] == (
        ("if not user_set_decode", ""),
        ("self.nsa_prefill_backend = 'flashmla_sparse'", "self.nsa_prefill_backend"),
    )
    original = b
    renamed = ast.parse(src.replace("nsa_", "dsa_"))
    ra, rb = (context.of_site(renamed, n, "m.py", "f") for n in (fp8, bf16))
    assert context.similarity(original, rb)[0] > context.similarity(original, ra)[0]
    assert "before 2.8/3" in context.similarity(original, rb)[1]  # the renamed neighbour: 0.8


def test_a_text_file_site_is_judged_by_its_lines():
    original = context.of_lines("a\n\n  b   c\nSITE\nd\n", 4, "include/x.cuh")
    assert original.before == (("b c", ""), ("a", "")) and original.after == (("d", ""),)
    near = context.of_lines("b c\nSITE\nd\n", 2, "include/y.cuh")
    far = context.of_lines("d\nSITE\nq\n", 2, "include/z.cuh")
    assert context.similarity(original, near) == (0.75, ("site", "before 1/2", "after 1/1"))
    assert sim(original, far) == round(1.25 / 4, 4)


# -- whole runs on small trees --------------------------------------------------------------

RECIPE = """
id = "mrr"
summary = "raise the default"
[engines]
sglang = ">=0"
[[ops]]
kind = "set-default"
engine = "sglang"
file = "sglang/srt/server_args.py"
scope = "{scope}"
[ops.locator]
field = "max_running_requests"
[ops.params]
value = "1024"
expect = "None"
"""


def fields(cls: str, *names: str) -> str:
    return f"class {cls}:\n" + "".join(f"    {n}: Optional[int] = None\n" for n in names)


ORIGINAL = "from typing import Optional\n\n\n" + fields(
    "ServerArgs", "model_path", "mem_fraction_static", "max_running_requests", "max_queued_requests", "port"
)
SCHEDULE = "from typing import Optional\n\n\n" + fields(
    "Schedule", "mem_fraction_static", "max_running_requests", "max_queued_requests"
)
POOL = "from typing import Optional\n\n\n" + fields("PoolConfig", "total_tokens", "max_running_requests", "swa_tokens")


@pytest.fixture
def status(tmp_path, run_cli, monkeypatch):
    """status(root, scope="ServerArgs") -> the op's verdict, with no pristine release to be
    had but a git checkout's tag (offline, an empty cache)."""
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))

    def run(root, scope: str = "ServerArgs") -> dict:
        recipes = tmp_path / "recipes"
        recipes.mkdir(exist_ok=True)
        (recipes / "mrr.toml").write_text(RECIPE.format(scope=scope))
        code, out, err = run_cli("--recipes", str(recipes), "status", "mrr", "-t", f"sglang={root}", "--json")
        assert code == 1, err  # moved or ambiguous: not the asked-for state
        return json.loads(out)["recipes"][0]["ops"][0]

    return run


def line_of(path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def test_the_statements_around_the_original_site_in_the_tagged_release_decide(tmp_path, status):
    """A checkout moved on since its tag: the fields left server_args.py, and two classes now
    hold the field.  The tag has the original site; its neighbours are in sched.py."""
    repo = tmp_path / "sglang"
    pkg = repo / "python" / "sglang"
    mini_sglang(repo / "python", {"sglang/srt/__init__.py": "", SA: ORIGINAL})
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.5.9")
    git(repo, "tag", "v0.5.9")
    (pkg / "srt/server_args.py").write_text(
        "from typing import Optional\n\n\n" + fields("ServerArgs", "model_path", "port")
    )
    (pkg / "srt/sched.py").write_text(SCHEDULE)
    (pkg / "srt/pool.py").write_text(POOL)
    op = status(repo)
    sched, pool = line_of(pkg / "srt/sched.py", "max_running"), line_of(pkg / "srt/pool.py", "max_running")
    assert op["state"] == "moved", op["message"]
    assert op["location"] == f"sglang/srt/sched.py::Schedule:{sched}"
    assert op["message"] == (
        f"moved from {SA}::ServerArgs; similarity 0.50 to the site as in sglang 0.5.9 (site, before 1/2, after 1/2);"
        f" runners-up: sglang/srt/pool.py::PoolConfig:{pool} (0.17: site)"
    )
    assert [(c["location"], c["score"]) for c in op["candidates"]] == [
        ("sglang/srt/sched.py::Schedule", 0.5),
        ("sglang/srt/pool.py::PoolConfig", 0.167),
    ]


def test_the_named_scope_as_it_stands_gives_siblings(tmp_path, status):
    """No pristine release: the named class as it stands (its other fields) is the context."""
    root = mini_sglang(
        tmp_path / "site",
        {
            SA: "from typing import Optional\n\n\n"
            + fields("ServerArgs", "mem_fraction_static", "max_queued_requests"),
            "sglang/srt/sched.py": SCHEDULE,
            "sglang/srt/pool.py": POOL,
        },
    )
    op = status(root)
    assert op["state"] == "moved" and op["location"].startswith("sglang/srt/sched.py::Schedule:"), op
    assert re.search(
        r"similarity 0.50 to the site as in its named scope \(siblings 100%\); "
        r"runners-up: sglang/srt/pool.py::PoolConfig:\d+ \(0.00: nothing matched\)$",
        op["message"],
    )


def test_the_file_the_code_left_imports_where_it_went(tmp_path, status):
    """ServerArgs assembled from namespaces (SGLang 0.5.20): server_args.py imports Schedule.
    Two look-alikes as like the site: the import says which one the code went to."""
    args = (
        "from typing import Optional\n\nfrom sglang.srt.sched import Schedule\n\n\n"
        "class ServerArgs:\n    mem_fraction_static: Optional[int] = None\n"
    )
    both = ("mem_fraction_static", "max_running_requests")
    root = mini_sglang(
        tmp_path / "site",
        {
            SA: args,
            "sglang/srt/sched.py": "from typing import Optional\n\n\n" + fields("Schedule", *both),
            "sglang/srt/pool.py": "from typing import Optional\n\n\n" + fields("PoolConfig", *both),
        },
    )
    op = status(root)
    assert op["state"] == "moved" and op["location"].startswith("sglang/srt/sched.py::Schedule:"), op
    assert "runners-up: sglang/srt/pool.py::PoolConfig:" in op["message"]


def test_an_import_alone_is_no_site(tmp_path, status):
    """Nothing but the import points at Schedule (neither candidate shares anything of the
    named scope): missing, both named, never moved."""
    args = "from sglang.srt.sched import Schedule\n\n\nclass ServerArgs:\n    NAMESPACES = [Schedule]\n"
    root = mini_sglang(
        tmp_path / "site",
        {
            SA: args,
            "sglang/srt/sched.py": "from typing import Optional\n\n\n" + fields("Schedule", "max_running_requests"),
            "sglang/srt/pool.py": "from typing import Optional\n\n\n" + fields("PoolConfig", "max_running_requests"),
        },
    )
    op = status(root)
    assert op["state"] == "missing", op
    assert sorted(c["location"] for c in op["candidates"]) == [
        "sglang/srt/pool.py::PoolConfig",
        "sglang/srt/sched.py::Schedule",
    ]


def test_enclosing_names_decide_when_the_named_file_is_gone(tmp_path, status):
    """Only the recipe's scope name is left: Config.ServerArgs is where it went, not
    Legacy.ServerArgs (both keep the leaf name, so that alone cannot tell)."""
    nested = (
        "from typing import Optional\n\n\n"
        "class {outer}:\n    class ServerArgs:\n        max_running_requests: Optional[int] = None\n"
    )
    root = mini_sglang(
        tmp_path / "site",
        {
            "sglang/srt/a.py": nested.format(outer="Legacy"),
            "sglang/srt/b.py": nested.format(outer="Config"),
        },
    )
    op = status(root, scope="Config.ServerArgs")
    assert op["state"] == "moved" and op["location"] == "sglang/srt/b.py::Config.ServerArgs:6", op
    assert op["message"].endswith(
        "similarity 1.00 to the site as in its named scope (scope);"
        " runners-up: sglang/srt/a.py::Legacy.ServerArgs:6 (0.50: scope 50%)"
    )


def test_look_alikes_that_share_nothing_with_the_site_are_missing_listing_every_candidate(tmp_path, status):
    """Three classes hold the field, and nothing of the site's identity (its class's name)
    is in any of them: none is the site (identity.THRESHOLD), so the op reads missing, and
    every candidate is named with its score."""
    root = mini_sglang(
        tmp_path / "site",
        {
            f"sglang/srt/{n}.py": "from typing import Optional\n\n\n" + fields(c, "max_running_requests")
            for n, c in (("one", "One"), ("two", "Two"), ("three", "Three"))
        },
    )
    op = status(root)
    assert op["state"] == "missing", op
    assert op["message"].endswith(
        "nearest candidates, none reaching similarity 0.5 to the site as in its named scope: "
        "sglang/srt/one.py::One:5 (0.00: nothing matched), sglang/srt/three.py::Three:5 (0.00: nothing matched), "
        "sglang/srt/two.py::Two:5 (0.00: nothing matched)"
    )
    assert [c["location"] for c in op["candidates"]] == [
        "sglang/srt/one.py::One",
        "sglang/srt/three.py::Three",
        "sglang/srt/two.py::Two",
    ]


def test_two_places_alike_the_site_with_no_margin_are_ambiguous(tmp_path, status):
    """Two classes keep every sibling of the field (the named scope as it stands): both
    reach the threshold, neither leads by the margin."""
    root = mini_sglang(
        tmp_path / "site",
        {
            SA: "from typing import Optional\n\n\n" + fields("ServerArgs", "mem_fraction_static"),
            "sglang/srt/one.py": "from typing import Optional\n\n\n"
            + fields("One", "mem_fraction_static", "max_running_requests"),
            "sglang/srt/two.py": "from typing import Optional\n\n\n"
            + fields("Two", "mem_fraction_static", "max_running_requests"),
        },
    )
    op = status(root)
    assert op["state"] == "ambiguous", op
    assert op["message"] == (
        "not in ServerArgs; 2 places reach similarity 0.5 to the site as in its named scope, none by a margin"
        " of 0.15: sglang/srt/one.py::One:6 (0.50: siblings 100%), sglang/srt/two.py::Two:6 (0.50: siblings 100%)"
    )
    assert [c["score"] for c in op["candidates"]] == [0.5, 0.5]


# -- a real release -------------------------------------------------------------------------

# max-running-requests as written for SGLang 0.5.9-0.5.19 (its first op, without `when`).
OLD_MRR = RECIPE.format(scope="ServerArgs").replace('id = "mrr"', 'id = "mrr-old"')


@pytest.mark.real
def test_max_running_requests_moved_to_schedule_on_a_real_release(tree, tmp_path, run_cli):
    """From 0.5.20 the field lives in arg_groups/fields/schedule.py::Schedule, with look-alikes
    in MemoryPoolConfig and, on 0.5.23, the API type DeploymentInfo.  server_args.py, which
    the field left, imports Schedule: the old op reads moved there, the runners-up named.
    (One release: the search of a whole tree costs ~10 s.)"""
    s = tree("sglang", "0.5.23", links=True)
    fetch.fetch_wheel("sglang", "0.5.9")  # the oldest release in range: the site's identity comes from it
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "mrr-old.toml").write_text(OLD_MRR)
    code, out, err = run_cli("--recipes", str(recipes), "status", "mrr-old", "-t", f"sglang={s}", "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    sched = "sglang/srt/arg_groups/fields/schedule.py"
    pool = "sglang/srt/model_executor/pool_configurator.py"
    api = "sglang/api/v1/api_types.py"
    assert op["state"] == "moved", op["message"]
    assert op["location"] == f"{sched}::Schedule:{line_of(s / sched, 'max_running_requests:')}"
    assert op["message"] == (
        f"moved from {SA}::ServerArgs; similarity 0.57 to the site as in sglang 0.5.9"
        " (site 76%, before 0.88/3, after 2.5/3, imported); runners-up: "
        f"{pool}::MemoryPoolConfig:{line_of(s / pool, 'max_running_requests: Optional')}"
        " (0.24: site, before 0.25/3, after 0.88/3), "
        f"{api}::DeploymentInfo:{line_of(s / api, 'max_running_requests: Optional')} (0.11: site, siblings 2%)"
    ), op


def test_a_changed_compound_header_is_half_a_neighbour_in_python_only():
    """SGLang 0.5.14 rewrote the `if` above the paged-MQA metadata call (`if is_cuda() and
    (...)`): half its token likeness.  A C++ line with the same words gets nothing."""
    orig = ("if f.is_decode() or f.is_verify()", "")
    changed = ("if is_cuda() and (f.is_decode() or f.is_verify())", "")
    got = context._neighbour(orig, (changed,), set(), set(), python=True)
    assert 0.25 <= got < 0.5
    assert context._neighbour(orig, (changed,), set(), set()) == 0.0  # a text file's line
    assert context._neighbour(orig, (("for x in f.is_decode()", ""),), set(), set(), python=True) == 0.0


NARROW = """
id = "narrow"
summary = "exact SM120"
[engines]
sglang = ">=0"
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "sglang/srt/old.py"
scope = "Runner.supports"
[ops.locator]
match = "p.is_family(120)"
[ops.params]
with = "p.is_exact(120)"
"""


def test_a_match_is_named_by_its_innermost_scope_not_its_class(tmp_path, run_cli, monkeypatch):
    """The class's own lines hold the pattern's words too (``p``, in ``priority``), and the
    class's locate reaches its method's nodes: the place is still named by the method, as the
    site was (vLLM 0.22's FlashInferExperts._supports_current_device, once named by its class)."""
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    moved = (
        "class Runner:\n    priority = 0\n\n    @staticmethod\n"
        "    def supports(p) -> bool:\n        return p.is_cuda() and p.is_family(120)\n"
    )
    root = mini_sglang(tmp_path / "site", {"sglang/srt/moved/new.py": moved})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "narrow.toml").write_text(NARROW)
    code, out, err = run_cli("--recipes", str(recipes), "status", "narrow", "-t", f"sglang={root}", "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "moved" and op["location"] == "sglang/srt/moved/new.py::Runner.supports:6", op
