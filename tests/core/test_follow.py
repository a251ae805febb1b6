"""One call level down (patchkit/core/follow.py, judge._followed), offline: a site that left its
named def for a helper of the same module that the def calls reads `upstream` there when the
helper holds the edit and the pristine release does too, and in no other case: a helper
holding it pending, two helpers holding it, a def the named one does not call, a helper two
calls down, one imported from another module, or an edit the release lacks all stay
`missing`.  (FlashInfer 0.7.4's ``gen_trtllm_gen_fused_moe_sm100_module`` and its helper
``trtllm_gen_fused_moe_build_inputs`` in miniature.)"""

from __future__ import annotations

import json

import pytest

from patchkit.core import follow
from tests.conftest import mini_sglang, release_in_cache

FILE = "sglang/srt/jit.py"
RECIPE = """
id = "widen"
summary = "build for major 12 too"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/jit.py"
scope = "{scope}"
[ops.locator]
keyword = "supported_major_versions"
[ops.params]
element = "12"
"""

HOME = """
def gen_module():
    flags = get_flags(supported_major_versions=[10])
    return build("mod", flags)
"""

HELPER = """
def build_inputs(name):
    path = fetch_artifact(name)
    verify_headers(path)
    flags = get_flags(supported_major_versions={versions}, map_sm107=True)
    return path, flags


def gen_module():
    path, flags = build_inputs("mod")
    return build("mod", flags, path)
"""
DONE = HELPER.format(versions="[10, 12]")
LINE = 1 + DONE[: DONE.index("supported_major_versions")].count("\n")


def _status(tmp_path, run_cli, monkeypatch, now, released=None, scope="gen_module", home=HOME, rel=FILE):
    root = mini_sglang(tmp_path / "site", {rel: now, "sglang/version.py": '__version__ = "0.5.12"\n'})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "widen.toml").write_text(RECIPE.format(scope=scope))
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    release_in_cache(cache, "sglang", "0.5.9", {"sglang/__init__.py": "", FILE: home})
    if released is not False:
        release_in_cache(cache, "sglang", "0.5.12", {"sglang/__init__.py": "", rel: released or now})
    _, out, _ = run_cli("--recipes", str(tmp_path / "recipes"), "status", "widen", "-t", f"sglang={root}", "--json")
    return json.loads(out)["recipes"][0]["ops"][0]


def test_the_edit_upstream_made_in_the_helper_the_named_def_calls_reads_upstream(tmp_path, run_cli, monkeypatch):
    o = _status(tmp_path, run_cli, monkeypatch, DONE)
    assert o["state"] == "upstream", o
    assert o["location"] == f"{FILE}::build_inputs:{LINE}", o
    assert "calls build_inputs" in o["message"], o


def test_with_no_release_to_read_it_is_missing_and_not_cached(tmp_path, run_cli, monkeypatch):
    """Who made the helper's edit cannot be told without the release: missing, and the
    verdict is not cacheable (judge.cacheable), so the release had later decides."""
    from patchkit.base.target import open_target
    from patchkit.core import judge
    from patchkit.core.recipe import load_recipe
    from patchkit.core.session import Session
    from patchkit.core.verdict import cacheable
    from patchkit.upstream.pristine import RELEASES

    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")  # no release to read: none in the cache, none downloaded
    o = _status(tmp_path, run_cli, monkeypatch, DONE, released=False)
    assert o["state"] == "missing", o
    session = Session({"sglang": open_target("sglang", tmp_path / "site")}, releases=RELEASES)
    evaluated = judge.evaluate(session, [load_recipe(tmp_path / "recipes" / "widen.toml")])
    assert evaluated[0][1][0].state == "missing" and not cacheable(session, evaluated)
    release_in_cache(tmp_path / "cache", "sglang", "0.5.12", {"sglang/__init__.py": "", FILE: DONE})
    _, out, _ = run_cli(
        "--recipes", str(tmp_path / "recipes"), "status", "widen", "-t", f"sglang={tmp_path / 'site'}", "--json"
    )
    assert json.loads(out)["recipes"][0]["ops"][0]["state"] == "upstream", out


def test_a_method_calling_a_method_of_its_class_on_self(tmp_path, run_cli, monkeypatch):
    def cls(src):
        body = "".join(f"    {ln}\n" if ln else "\n" for ln in src.strip("\n").splitlines())
        body = body.replace("def build_inputs(name)", "def build_inputs(self, name)").replace(
            "def gen_module()", "def gen_module(self)"
        )
        return "\nclass Jit:\n" + body.replace('build_inputs("mod")', 'self.build_inputs("mod")')

    o = _status(tmp_path, run_cli, monkeypatch, cls(DONE), scope="Jit.gen_module", home=cls(HOME))
    assert o["state"] == "upstream", o
    assert "::Jit.build_inputs:" in o["location"], o


NOT_CALLED = DONE.replace('    path, flags = build_inputs("mod")', '    path, flags = other_inputs("mod")')
TWO_DOWN = DONE.replace(
    "def build_inputs(name):", "def build_inputs(name):\n    return deeper(name)\n\n\ndef deeper(name):"
)
TWO_HELPERS = (
    DONE
    + """

def gen_other():
    return get_flags(supported_major_versions=[10, 12])
""".replace("def gen_module", "def gen_module").replace(
        "def gen_module():\n    path, flags", "def gen_module():\n    gen_other()\n    path, flags"
    )
)
TWO_HELPERS = TWO_HELPERS.replace(
    'def gen_module():\n    path, flags = build_inputs("mod")',
    'def gen_module():\n    gen_other()\n    path, flags = build_inputs("mod")',
)


@pytest.mark.parametrize(
    "now, released",
    [
        (HELPER.format(versions="[10]"), None),  # pending in the helper: a shared helper is never edited
        (DONE, HELPER.format(versions="[10]")),  # the release lacks the edit: nothing says who made it
        (NOT_CALLED, None),  # a def of the module that the named one does not call
        (TWO_DOWN, None),  # two calls down
        (TWO_HELPERS, None),  # two callees hold it: which one is the site is not said
    ],
    ids=["pending-in-helper", "release-lacks-it", "not-called", "two-down", "two-helpers"],
)
def test_no_follow_where_one_call_level_does_not_say(tmp_path, run_cli, monkeypatch, now, released):
    o = _status(tmp_path, run_cli, monkeypatch, now, released)
    assert o["state"] == "missing", o


def test_a_helper_imported_from_another_module_is_not_followed(tmp_path, run_cli, monkeypatch):
    now = 'from sglang.srt.jit_inputs import build_inputs\n\n\ndef gen_module():\n    return build_inputs("mod")\n'
    o = _status(tmp_path, run_cli, monkeypatch, now)
    assert o["state"] == "missing", o


def test_callees_are_direct_calls_to_defs_of_the_same_module_in_order():
    import libcst as cst

    src = """
import os
from x import imported

def a():
    b(); os.path.join("x"); imported(); c(); b()
    def inner():
        d()
    return [e() for _ in range(2)]

def b(): pass
def c(): pass
def d(): pass
def e(): pass

class K:
    def m(self):
        self.n(); a(); self.missing()
    def n(self): pass
"""
    module = cst.parse_module(src)
    assert follow.callees(module, "a") == ["b", "c", "e"]  # not os.path.join, imported, nor inner's d
    assert follow.callees(module, "K.m") == ["K.n", "a"]
    assert follow.callees(module, "K") == [] and follow.callees(module, "nowhere") == []


# The statement whole: a condition's body and arms are part of what it says.
SUFFIX_RECIPE = """
id = "widen"
summary = "the a suffix for major 9 only"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "replace-expr"
engine = "sglang"
file = "sglang/srt/jit.py"
scope = "Ctx.__init__"
[ops.locator]
match = "major >= 9"
[ops.params]
with = "major == 9"
"""
SUFFIX_HOME = """
class Ctx:
    def __init__(self):
        for major, minor in caps():
            if major >= 9:
                minor = str(minor) + "a"
            self.archs.add((major, minor))
"""
SUFFIX_HELPER = """
class Ctx:
    def __init__(self):
        for major, minor in caps():
            self.archs.add(self._normalize(major, minor))

    @staticmethod
    def _normalize(major, minor):
{body}
        return (major, minor)
"""
# FlashInfer 0.6.8's dispatcher: `major == 9` leads it, but 10 and up still get the suffix.
DISPATCHER = """        if major == 9:
            return (major, str(minor) + "a")
        elif major >= 10:
            return (major, str(minor) + "a")"""
SAME = """        if major == 9:
            minor = str(minor) + "a\""""


@pytest.mark.parametrize("body, want", [(DISPATCHER, "missing"), (SAME, "upstream")], ids=["dispatcher", "same"])
def test_the_callee_statement_is_the_site_statement_whole(tmp_path, run_cli, monkeypatch, body, want):
    now = SUFFIX_HELPER.format(body=body)
    root = mini_sglang(tmp_path / "site", {FILE: now, "sglang/version.py": '__version__ = "0.5.12"\n'})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "widen.toml").write_text(SUFFIX_RECIPE)
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    release_in_cache(cache, "sglang", "0.5.9", {"sglang/__init__.py": "", FILE: SUFFIX_HOME})
    release_in_cache(cache, "sglang", "0.5.12", {"sglang/__init__.py": "", FILE: now})
    _, out, _ = run_cli("--recipes", str(tmp_path / "recipes"), "status", "widen", "-t", f"sglang={root}", "--json")
    o = json.loads(out)["recipes"][0]["ops"][0]
    assert o["state"] == want, o


def test_statement_is_the_innermost_whole_and_alike_is_a_token_share():
    import libcst as cst

    scope = cst.parse_module("def f(x):\n    if x:\n        y = g(x, 1)\n    else:\n        y = 0\n").body[0]
    call = scope.body.body[0].body.body[0].body[0].value
    assert follow.statement(scope, call) == ("y", "=", "g", "(", "x", ",", "1", ")")
    cond = scope.body.body[0].test
    assert follow.statement(scope, cond)[:3] == ("if", "x", ":") and "else" in follow.statement(scope, cond)
    assert follow.alike(("a", "b"), ("a", "b")) == 1.0 and follow.alike((), ("a",)) == 0.0
