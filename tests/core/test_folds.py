"""Arm polarity and folded if/else (folds.py), on miniatures of the GLM-5 guide's NSA decode
default (SGLang 0.5.9 `_set_default_nsa_backends`, 0.5.20 `_dsa_split_backend_resolution`)."""

import ast

from patchkit.core import context, folds, identity

HOME = """class S:
    def f(self, kv, major):
        a = self.a is not None
        b = self.b is not None
        if kv == "fp8":
            if not a:
                self.p = "auto"
            if not b:
                self.d = "kv"
        else:
            if major >= 10:
                if not a:
                    self.p = "sparse"
                if not b:
                    self.d = "trt"
            else:
                if not a:
                    self.p = "sparse"
                if not b:
                    self.d = "fa3"
        log(self.d)
"""

NEW = """def g(kv, major, a, b):
    declared = {}
    if hip():
        declared["p"] = "tl"
    elif kv == "fp8":
        default = "trt" if major >= 10 else "kv"
        if not a:
            declared["p"] = default
        if not b:
            declared["d"] = default
    else:
        if not a:
            declared["p"] = "sparse"
        if not b:
            declared["d"] = "trt" if major >= 10 else "fa3"
    return declared
"""


def line_of(text: str, needle: str, nth: int = 0) -> int:
    return [n for n, ln in enumerate(text.splitlines(), 1) if needle in ln][nth]


def site(text: str, needle: str, scope: str, nth: int = 0) -> context.Context:
    return context.of_site(ast.parse(text), line_of(text, needle, nth), "m.py", scope)


def home() -> context.Context:
    return site(HOME, 'self.d = "trt"', "S.f")


def test_arms_name_each_if_around_the_site_with_its_arm():
    assert home().arms == (("kv == 'fp8'", False), ("major >= 10", True), ("not b", True))
    # an elif is an if in the outer else
    assert site(NEW, 'default = "trt"', "g").arms == (("hip()", False), ("kv == 'fp8'", True))
    # an if's own header is not in one of its arms
    assert site(HOME, "if major >= 10", "S.f").arms == (("kv == 'fp8'", False),)


def test_a_candidate_in_the_other_arm_of_the_sites_own_if_is_another_site():
    fp8 = site(NEW, 'default = "trt"', "g")
    assert folds.opposite(home().arms, fp8.arms) == "kv == 'fp8'"
    assert context.similarity(home(), fp8) == (0.0, ("in the other arm of `if kv == 'fp8'`",))
    # the same condition, the site's own arm: no veto (the site against itself is the site)
    assert folds.opposite(home().arms, home().arms) is None
    assert context.similarity(home(), home())[0] == 1.0
    # another condition, word for word alike but for one token: not the same if
    other = site(NEW.replace('elif kv == "fp8"', 'elif kv == "fp16"'), 'default = "trt"', "g")
    assert folds.opposite(home().arms, other.arms) is None
    assert context.similarity(home(), other)[0] > 0


def test_the_fold_around_the_site_is_its_if_else_with_arms_alike_but_for_the_value():
    assert home().fold == ("major >= 10", True, "'trt'", "'fa3'", (), (0, 1, 2))
    # the site in the else arm: the same fold, the other way round; its context lines are
    # its own arm's and the code after the if, none folded away
    mirror = site(HOME, 'self.d = "fa3"', "S.f")
    assert mirror.fold == ("major >= 10", False, "'fa3'", "'trt'", (), ())


def test_no_fold_where_the_other_arm_assigns_another_target_or_differs_elsewhere():
    other_target = HOME.replace('self.d = "fa3"', 'self.e = "fa3"')
    assert site(other_target, 'self.d = "trt"', "S.f").fold == ()
    other_stmt = HOME.replace(
        'self.p = "sparse"\n                if not b:\n                    self.d = "fa3"',
        'self.p = "x"\n                if not b:\n                    self.d = "fa3"',
    )
    assert other_stmt != HOME
    assert site(other_stmt, 'self.d = "trt"', "S.f").fold == ()
    same_value = HOME.replace('self.d = "fa3"', 'self.d = "trt"')
    assert site(same_value, 'self.d = "trt"', "S.f").fold == ()
    no_else = "def f(c):\n    if c:\n        x = 1\n"
    assert site(no_else, "x = 1", "f").fold == ()


def test_unfold_reads_the_folded_statement_as_the_sites_arm_had_it():
    f = home().fold
    assert folds.unfold(f, "declared['d'] = 'trt' if major >= 10 else 'fa3'") == "declared['d'] = 'trt'"
    assert folds.unfold(f, "x = 'fa3' if not major >= 10 else 'trt'") == "x = 'trt'"  # the mirror
    for text in (
        "x = 'trt' if minor >= 10 else 'fa3'",  # an unrelated condition
        "x = 'trt' if major >= 10 else 'kv'",  # another value in the other arm
        "x = 'fa3' if major >= 10 else 'trt'",  # the arms swapped: the opposite
        "x = 'trt'",
        "f('trt' if major >= 10 else 'fa3')",
        "if major >= 10",
    ):
        assert folds.unfold(f, text) is None, text


def test_the_folded_site_passes_and_the_fp8_default_does_not():
    true = site(NEW, 'declared["d"] = "trt" if', "g")
    score, parts = context.similarity(home(), true)
    assert score >= identity.THRESHOLD and "folded `if major >= 10`" in parts
    assert "after 3/3" in parts
    # the same statement under an unrelated condition is not the fold: its context is lost
    unrelated = site(
        NEW.replace('"trt" if major >= 10 else "fa3"', '"trt" if minor >= 10 else "fa3"'),
        'declared["d"] = "trt" if',
        "g",
    )
    low, parts = context.similarity(home(), unrelated)
    assert low < identity.THRESHOLD and not any(p.startswith("folded") for p in parts)
    # a home whose other arm assigns another target carries no fold: no credit either
    other = site(HOME.replace('self.d = "fa3"', 'self.e = "fa3"'), 'self.d = "trt"', "S.f")
    assert context.similarity(other, true)[0] < identity.THRESHOLD


def test_a_cached_identity_keeps_arms_and_fold(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    identity._save("x", (home(),))
    assert identity._load("x") == (home(),)


def test_a_carried_identity_keeps_arms_and_fold_through_its_toml():
    """capture and port write them into ``[ops.identity]`` (carried.py): read back, the same."""
    import tomllib

    from patchkit.authoring.hunks import toml_str
    from patchkit.core import carried

    tab = carried.table("sglang 0.5.9", (home(),), "sglang")
    (s,) = tab["sites"]
    assert s["arms"] == ["else kv == 'fp8'", "if major >= 10", "if not b"]
    assert s["fold"] == ["if major >= 10", "'trt'", "'fa3'"] and s["folded"] == ["after 1", "after 2", "after 3"]
    lines = carried.toml_lines("ops", tab, toml_str)
    back = tomllib.loads("[[ops]]\n" + "\n".join(lines))["ops"][0]["identity"]
    _, (site,) = carried.build(back["release"], "m.py", "S.f", back["imports"], back["sites"])
    assert (site.arms, site.fold) == (home().arms, home().fold)
    true = context.of_site(ast.parse(NEW), line_of(NEW, 'declared["d"] = "trt" if'), "m.py", "g")
    assert context.similarity(site, true)[1][1] == "folded `if major >= 10`"
