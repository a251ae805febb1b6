"""Site identity in miniature (offline): the similarity measure and its threshold and
margin (context.similarity, identity.decide), the identity cache (bad entries are misses),
the revert invariant's test of "the reference holds this line in place" (provenance.held),
a marker that matches the recipe's own text, equivalent fixes (equivalent.py), and a text
op whose fragment moved to an unrelated line of a git checkout (its tag is the release)."""

from __future__ import annotations

import ast
import json
from types import SimpleNamespace

from patchkit.core import context, equivalent, identity, provenance
from patchkit.core.recipe import load_recipe
from tests.conftest import gate_recipe, git, mini_sglang

# -- the measure -------------------------------------------------------------------------------

ORIGINAL = """
class Runner:
    def should_tune(self):
        if self.disabled:
            return False
        backend = self.args.backend
        if backend not in ["a", "b"]:
            return False
        major = capability()
        if major < 9:
            return False
        return True
"""


def ctx(src: str, needle: str, file: str = "m.py", scope: str = "Runner.should_tune") -> context.Context:
    tree = ast.parse(src)
    line = next(i for i, ln in enumerate(src.splitlines(), 1) if needle in ln)
    return context.of_site(tree, line, file, scope, context.imports_of(tree, file))


def sim(cand_src: str, needle: str, **kw) -> float:
    return context.similarity(ctx(ORIGINAL, 'not in ["a"'), ctx(cand_src, needle, **kw))[0]


def test_the_site_itself_is_wholly_similar():
    score, parts = context.similarity(ctx(ORIGINAL, 'not in ["a"'), ctx(ORIGINAL, 'not in ["a"'))
    assert score == 1.0 and parts == ("scope", "site", "before 2/2", "after 2/2")  # `return True` names nothing


def test_a_decoy_in_the_sites_own_scope_does_not_reach_the_threshold():
    decoy = ORIGINAL.replace('if backend not in ["a", "b"]:', "if backend not in KNOWN:").replace(
        "        return True\n", '        seen = ["a", "b"]\n        log(seen)\n        return True\n'
    )
    assert sim(decoy, 'seen = ["a"') < identity.THRESHOLD


def test_a_renamed_scope_with_the_same_body_is_the_site():
    renamed = ORIGINAL.replace("should_tune", "tuning_wanted")
    assert sim(renamed, 'not in ["a"', scope="Runner.tuning_wanted") >= 0.9


def test_a_moved_function_keeps_its_identity_and_a_look_alike_elsewhere_does_not():
    moved = ORIGINAL.replace("class Runner:", "class Tuner:")
    assert sim(moved, 'not in ["a"', file="n.py", scope="Tuner.should_tune") >= 0.8
    alike = "def report(backend):\n    print(backend)\n    if backend not in ['a', 'b']:\n        return 'other'\n"
    assert sim(alike, "not in ['a'", file="r.py", scope="report") < identity.THRESHOLD


def test_a_text_sites_context_lines_decide():
    text = "a\nb\nc\nCHECK(major == 10)\nd\ne\nf\n" + "x\n" * 20 + "g\nCHECK(major == 10) // new\nh\n"
    orig = context.of_lines(text, 4, "k.cu")
    assert context.similarity(orig, context.of_lines(text, 4, "k.cu"))[0] == 1.0
    assert context.similarity(orig, context.of_lines(text, 29, "k.cu"))[0] < identity.THRESHOLD


def C(score: float) -> identity.Candidate:
    return identity.Candidate("f.py", "s", 1, score, ())


def test_moved_needs_the_threshold_and_a_margin_over_the_runner_up():
    assert identity.decide([C(0.9)]) == "moved"
    assert identity.decide([C(0.9), C(0.74)]) == "moved"
    assert identity.decide([C(0.9), C(0.8)]) == "ambiguous"
    assert identity.decide([C(0.55), C(0.45)]) == "ambiguous"  # the runner-up too close, though below
    assert identity.decide([C(0.49)]) == "missing"
    assert identity.decide([]) == "missing"


def test_a_tie_across_scopes_goes_to_the_one_that_kept_the_sites_def_name():
    """As git breaks a tie between rename sources by basename (identity.by_name): the class
    renamed around a method that kept its name, a twin of the call in another def within
    the margin.  The best keeps its place and gains the part; nothing else is promoted."""
    home = identity.Identity("r", (context.Context("a.py", "Native.init_forward_metadata"),))

    def at(scope: str, score: float) -> identity.Candidate:
        return identity.Candidate("b.py", scope, 1, score, ("site 94%",))

    same, twin = at("Deepseek.init_forward_metadata", 0.54), at("Deepseek._build_forward_metadata_cuda_graph", 0.41)
    assert identity.decide([same, twin]) == "ambiguous"
    got = identity.by_name(home, [same, twin])
    assert got is not None and (got.scope, got.score, got.parts) == (same.scope, 0.54, ("site 94%", "its scope's name"))
    # It never fires where the name tells nothing, or against the scores:
    assert identity.by_name(home, [twin, same]) is None  # a runner-up is never promoted
    assert identity.by_name(home, [same, at("Other.init_forward_metadata", 0.50)]) is None  # both kept it
    # A method moved with its class, beside a sibling class's method of the same name: the
    # class's name too.
    kept = identity.by_name(home, [at("Native.init_forward_metadata", 0.6), at("Other.init_forward_metadata", 0.55)])
    assert kept is not None and kept.scope == "Native.init_forward_metadata"
    assert (
        identity.by_name(home, [at("Other.init_forward_metadata", 0.6), at("Native.init_forward_metadata", 0.55)])
        is None
    )
    assert identity.by_name(home, [at("Deepseek.init", 0.54), twin]) is None  # neither did
    assert identity.by_name(home, [at("Deepseek.init_forward_metadata", 0.49), twin]) is None  # below 0.5
    assert identity.by_name(home, [same, at("Deepseek.x", 0.39)]) is None  # no tie: decide's own "moved"
    text = identity.Identity("r", (context.Context("k.cu", ""),))
    assert identity.by_name(text, [at("", 0.6), at("", 0.55)]) is None  # a text file has no scope


# -- the cache -----------------------------------------------------------------------------------


def test_a_cached_identity_round_trips_and_a_bad_entry_is_a_miss(tmp_path, monkeypatch):
    from patchkit.base import store

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    site = ctx(ORIGINAL, 'not in ["a"')
    k = store.key("x")
    identity._save(k, (site,))
    assert identity._load(k) == (site,)
    identity._save(k, None)
    assert identity._load(k) is False  # "the release does not hold the site", remembered
    for bad in (b"", b"\x00garbage", b"[\xff\xff\xff\x7f", b"[" * 100_000, b'[["a", "b"]]', b"5", b"[[1,2,3,4,5,6,7]]"):
        store.put("identity", k, bad)  # sealed as this user's: only its shape stands
        assert identity._load(k) is None
    store.put("identity", k, b'[["f", "s", [["x", ""]], 5, [], [], [], [], [], []]]')  # `at` out of the block
    assert identity._load(k) is None


# -- the revert invariant's test -----------------------------------------------------------------


def test_a_line_the_reference_holds_in_place_is_upstreams():
    ref = ["a", "b", "c = 1", "d", "e"]
    ours = ["a", "b", "c = 2", "d", "e"]  # patchkit's edit of line 3
    assert provenance.held(ours, [2], ref) is None
    moved = ["x", "b", "c = 1", "d", "y"]  # upstream's lines, moved: line 3 is in a run of 3
    assert provenance.held(moved, [2], ref) == (3, 3)
    alone = ["x", "y", "c = 1", "z", "w"]  # one line alike, nothing around it: not in place
    assert provenance.held(alone, [2], ref) is None


# -- markers never match the recipe's own text ---------------------------------------------------

INSERT = """
id = "flag"
summary = "define the SM120 flag"
[engines]
sglang = ">=0"
[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/gate.py"
[ops.locator]
anchor = "_is_b = False"
[ops.params]
code = "_is_sm120 = probe(120)"
[[ops.markers]]
file = "sglang/srt/gate.py"
contains = ["_is_sm120", "probe(120)"]
"""


def test_a_marker_never_matches_the_text_the_recipe_itself_inserted(tmp_path, run_cli, monkeypatch):
    """Offline, no journal: the inserted line is there, and the marker's words are exactly
    it.  That is the recipe's own text, not upstream's: not ``upstream`` (revert would exit
    0 with the patch still there), but ``applied?``, which revert refuses to guess about."""
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    root = mini_sglang(
        tmp_path / "site", {"sglang/srt/gate.py": "_is_a = True\n_is_b = False\n_is_sm120 = probe(120)\n"}
    )
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "flag.toml").write_text(INSERT)
    code, out, err = run_cli("--recipes", str(recipes), "status", "flag", "-t", f"sglang={root}", "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "applied?", op
    upstream = "_is_sm120 = bool(probe(120))\n_is_a = True\n_is_b = False\n"  # upstream's own words: counts
    (root / "sglang/srt/gate.py").write_text(upstream)
    code, out, err = run_cli("--recipes", str(recipes), "status", "flag", "-t", f"sglang={root}", "--json")
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "upstream", out


# -- equivalent fixes ----------------------------------------------------------------------------

WIDEN = """
id = "widen"
summary = "admit SM120"
[engines]
sglang = ">=0"
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "sglang/srt/gate.py"
scope = "gate"
[ops.locator]
match = "major == 10"
[ops.params]
with = "major in (10, 12)"
"""


def test_key_tokens_are_what_the_edit_adds(tmp_path):
    (tmp_path / "widen.toml").write_text(WIDEN)
    r = load_recipe(tmp_path / "widen.toml")
    assert equivalent.key_tokens(r.ops[0]) == ("12", "major")


def test_upstreams_fix_in_other_words_is_a_hint_on_a_missing_op(tmp_path, run_cli, monkeypatch):
    """The comparison the op widens is gone; upstream's gate now says ``major >= 12 or major
    == 10`` in other words.  The op reads missing, and says where to look."""
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "sglang"
    gate = "def gate(major):\n    # SM100, and SM120 since 0.5.14\n    return major in {10} or major == 12\n"
    mini_sglang(repo / "python", {"sglang/srt/gate.py": gate})
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.5.9")
    git(repo, "tag", "v0.5.9")
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(WIDEN)
    code, out, err = run_cli("--recipes", str(recipes), "status", "widen", "-t", f"sglang={repo}", "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "missing", op
    assert (
        "upstream may have fixed this in other words at sglang/srt/gate.py:3 (it mentions 12, major;" in op["message"]
    )


# -- a text op on a git checkout -----------------------------------------------------------------

TEXT = """
id = "arch"
summary = "admit SM120"
[engines]
flashinfer = ">=0"
[[ops]]
kind = "text-replace"
engine = "flashinfer"
file = "csrc/launch.cu"
[ops.params]
find = "ECK_EQ(maj"
replace = "ECK_GE(maj"
count = 1
"""
LAUNCH = "void launch(int major) {\n  int a = 0;\n  int b = 1;\n  ICHECK_EQ(major, 10);\n  run(a, b);\n  done();\n}\n"


def flashinfer_repo(root, text: str):
    (root / "flashinfer").mkdir(parents=True)
    (root / "flashinfer/__init__.py").write_text("")
    (root / "version.txt").write_text("0.6.3\n")
    (root / "include/flashinfer").mkdir(parents=True)
    (root / "csrc").mkdir()
    (root / "csrc/launch.cu").write_text(text)
    return root


def test_a_text_ops_fragment_on_an_unrelated_new_line_of_a_checkout_is_missing(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    repo = flashinfer_repo(tmp_path / "flashinfer", LAUNCH)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.6.3")
    git(repo, "tag", "v0.6.3")
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "arch.toml").write_text(TEXT)
    args = ("--recipes", str(recipes), "status", "arch", "-t", f"flashinfer={repo}", "--json")
    assert json.loads(run_cli(*args)[1])["recipes"][0]["ops"][0]["state"] == "pending"
    moved_on = LAUNCH.replace("  ICHECK_EQ(major, 10);\n", "  ICHECK(supported(major));\n")
    moved_on += "\nvoid block_scale(int major) {\n  ICHECK_EQ(major, 10);  // SM100-only\n}\n"
    (repo / "csrc/launch.cu").write_text(moved_on)
    second = run_cli(*args)
    assert "recipes" in json.loads(second[1]), second
    op = json.loads(second[1])["recipes"][0]["ops"][0]
    assert op["state"] == "missing", op
    assert [(c["location"], c["line"]) for c in op["candidates"]] == [("csrc/launch.cu::<module>", 10)], op
    assert op["candidates"][0]["score"] < identity.THRESHOLD, op
    assert "but that is not the site as in flashinfer 0.6.3" in op["message"], op


# -- a checkout's committed code -----------------------------------------------------------------

GATE = "_is_a = True\n_is_b = False\n\n\ndef gate():\n    return _is_a or _is_b\n"
WIDEN_GATE = gate_recipe("gate")


def test_an_edit_committed_past_the_tag_is_the_checkouts_own_code(tmp_path, run_cli, monkeypatch):
    """The edit stands in the work tree, no journal: someone else's (the tag does not have
    it, and no record of patchkit's proves it patchkit's: never patchkit's by elimination).
    Once committed, HEAD holds it: the checkout's own code, ``upstream`` (and a cached
    verdict from before the commit is not reused: the cache is keyed on HEAD)."""
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "sglang"
    mini_sglang(repo / "python", {"sglang/srt/gate.py": GATE})
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.5.9")
    git(repo, "tag", "v0.5.9")
    (repo / "python/sglang/srt/gate.py").write_text(GATE.replace("_is_a or _is_b", "_is_a or _is_b or _is_c"))
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "gate.toml").write_text(WIDEN_GATE)
    args = ("--recipes", str(recipes), "status", "gate", "-t", f"sglang={repo}", "--json")
    __import__("time").sleep(1.1)  # older than the verdict cache's racy window
    first = run_cli(*args)
    assert json.loads(first[1])["recipes"][0]["ops"][0]["state"] == "someone-else", first
    git(repo, "commit", "-q", "-am", "widen the gate upstream")
    second = run_cli(*args)
    assert "recipes" in json.loads(second[1]), second
    op = json.loads(second[1])["recipes"][0]["ops"][0]
    assert op["state"] == "upstream", op
    assert "committed code (HEAD " in op["message"], op


def test_the_sites_own_statement_in_its_scope_is_the_site_however_much_changed_around_it():
    rewritten = (
        "class Runner:\n    def should_tune(self):\n        log('tuning?')\n        cfg = load()\n"
        "        backend = cfg.pick()\n        if backend not in ['a', 'b']:\n            return False\n"
        "        return probe(cfg)\n"
    )
    score, parts = context.similarity(ctx(ORIGINAL, 'not in ["a"'), ctx(rewritten, "not in ['a'"))
    assert score < identity.THRESHOLD  # the context lines alone would not say so
    python_op, text_op = (SimpleNamespace(impl=SimpleNamespace(language=lang)) for lang in ("python", "text"))
    assert identity.unchanged_in_scope(python_op, parts)
    assert not identity.unchanged_in_scope(text_op, parts)
    decoy = rewritten.replace("if backend not in ['a', 'b']:", "if backend not in ['a', 'b'] and cfg.strict:")
    assert not identity.unchanged_in_scope(
        python_op, context.similarity(ctx(ORIGINAL, 'not in ["a"'), ctx(decoy, "not in ['a'"))[1]
    )


def test_a_done_site_in_its_own_scope_needs_most_of_its_statement_not_all():
    """Found done, the site differs from its release by the edit itself: in its own scope,
    75% of the statement's tokens are enough (a pending site needs them all)."""
    python_op = SimpleNamespace(impl=SimpleNamespace(language="python"))
    assert identity.unchanged_in_scope(python_op, ("scope", "site 92%"), done=True)
    assert not identity.unchanged_in_scope(python_op, ("scope", "site 92%"))  # pending: every token
    assert identity.unchanged_in_scope(python_op, ("scope", "site 80%"), done=True)  # + an argument
    assert not identity.unchanged_in_scope(python_op, ("scope", "site 70%"), done=True)
    assert not identity.unchanged_in_scope(python_op, ("scope renamed 80%", "site 95%"), done=True)


def test_an_open_range_takes_its_home_from_where_it_starts_whatever_the_cache_holds(tmp_path, monkeypatch):
    """``>=0.6.3`` vouches for the release it was written from, not for every later one: a
    later target's own release is the home only in a range bounded above.  Decided by the
    recipe alone: the same with an empty cache as with every release cached (a verdict must
    not change with the order releases were downloaded in)."""
    from packaging.specifiers import SpecifierSet

    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.setattr(identity, "_pinned", lambda engine: None)

    def session(version):
        return SimpleNamespace(targets={"flashinfer": SimpleNamespace(version=version)})

    op = SimpleNamespace(engine="flashinfer", when=())
    open_range = SimpleNamespace(engines={"flashinfer": SpecifierSet(">=0.6.3")})
    closed = SimpleNamespace(engines={"flashinfer": SpecifierSet(">=0.6.3,<0.8")})
    no_start = SimpleNamespace(engines={"flashinfer": SpecifierSet("!=0.6.4")})
    any_release = SimpleNamespace(engines={"flashinfer": SpecifierSet(">=0")})
    when = SimpleNamespace(engine="flashinfer", when=(("flashinfer", SpecifierSet("<0.8")),))
    for cached in ((), ("0.6.3", "0.7.0")):
        for v in cached:
            (cache / "wheels" / "flashinfer-python" / v).mkdir(parents=True, exist_ok=True)
            (cache / "wheels" / "flashinfer-python" / v / f"flashinfer_python-{v}-py3-none-any.whl").write_bytes(b"")
        assert identity.floor(open_range, op) == "0.6.3"
        assert not identity.own_release_in_range(session("0.7.0"), open_range, op)  # 0.6.3 is the home
        assert identity.own_release_in_range(session("0.6.3"), open_range, op)  # where it starts
        assert identity.own_release_in_range(session("0.7.0"), closed, op)  # vouched for up to 0.8
        assert identity.own_release_in_range(session("0.7.0"), open_range, when)  # bounded by the op's when
        assert identity.own_release_in_range(session("0.7.0"), no_start, op)  # no start to go back to
        assert identity.floor(any_release, op) is None  # >=0 names no release (and none "0" is fetched)
        assert identity.own_release_in_range(session("0.7.0"), any_release, op)


def test_words_in_too_many_files_say_missing_naming_the_named_files_candidates(tmp_path, run_cli, monkeypatch):
    """The tree holds the site's words in more files than a search may open: never moved
    (the rest of the tree was not ranked), and the named file's candidates are still named."""
    from patchkit.core import relocate

    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(relocate, "MAX_CANDIDATES", 1)
    look = "_is_a = True\n_is_b = False\n\n\ndef {name}(n):\n    return (_is_a or _is_b) and n > 0\n"
    root = mini_sglang(
        tmp_path / "site",
        {
            "sglang/srt/gate.py": look.format(name="kept_gate"),
            "sglang/srt/g2.py": look.format(name="gate"),
            "sglang/srt/g3.py": look.format(name="gate"),
        },
    )
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "gate.toml").write_text(WIDEN_GATE)
    code, out, err = run_cli("--recipes", str(recipes), "status", "gate", "-t", f"sglang={root}", "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "missing", op
    assert "its words are in 2 files of the tree, too many to say where it went" in op["message"], op
    assert [c["location"] for c in op["candidates"]] == ["sglang/srt/gate.py::kept_gate"], op


def test_a_site_named_by_its_line_is_read_whole_for_an_op_kind_with_one_place(tmp_path):
    """port names the place the judge singled out (``line``) when it writes a retargeted op's
    identity; an op kind that lists no places of its own (a field's default) has its one site
    read as without a line, not dropped (the ported variant would carry no identity)."""
    from patchkit.base.target import open_target
    from patchkit.core.carried import TreeFiles

    code = "class Args:\n    a: int = 1\n    max_running_requests: int = None\n    b: int = 2\n"
    root = mini_sglang(tmp_path / "t", {"sglang/srt/args.py": code})
    recipe = tmp_path / "mrr.toml"
    recipe.write_text(
        'id = "mrr"\nsummary = "s"\nrationale = "r"\n[engines]\nsglang = ">=0.5.9"\n'
        '[[ops]]\nkind = "set-default"\nengine = "sglang"\nfile = "sglang/srt/args.py"\nscope = "Args"\n'
        '[ops.locator]\nfield = "max_running_requests"\n[ops.params]\nvalue = "1024"\nexpect = "None"\n'
    )
    (op,) = load_recipe(recipe).ops
    ref = TreeFiles(open_target("sglang", root))
    whole = identity._of_release(ref, op)
    assert whole is not None and [c.at for c in whole] == [c.at for c in identity._of_release(ref, op, 3)]


def test_an_arm_added_after_an_arm_with_the_same_body_reverts():
    """SGLang 0.5.9's attention-backend chain: an `elif is_sm120_supported():` arm added after
    `elif is_sm100_supported():`, both setting "flashinfer".  Taking it back, a diff may say
    the sm100 arm's body went (the bodies are the same line): the bytes are the same either
    way, so the revert keeps upstream's code and is not refused; removing upstream's own arm
    still is."""
    ref = ["if a:", "    x = 1", "elif b:", '    y = "flashinfer"', "else:", "    z = 0"]
    patched = ref[:4] + ["elif c:", '    y = "flashinfer"'] + ref[4:]
    assert provenance._kept(patched, ref, ref)
    wrong = ref[:2] + ref[4:]  # upstream's `elif b:` arm taken out
    assert not provenance._kept(patched, wrong, ref)
