"""The site identified by its context alone (patchkit/core/edited.py), over values and sources:
the words an edit changes, whether a statement holds them, the alignment of a scope's
statements that breaks a tie, and relocation's words for replace-expr."""

from __future__ import annotations

import ast

from patchkit.base.states import State
from patchkit.core import context, edited, identity
from patchkit.core.ops import KINDS, Located

BRANCHES = """def f(major, fp8):
    if fp8:
        if not user_set_prefill:
            self.nsa_prefill_backend = 'trtllm'
        if not user_set_decode:
            self.nsa_decode_backend = 'trtllm'
    else:
        if not user_set_prefill:
            self.nsa_prefill_backend = 'flashmla_sparse'
        if not user_set_decode:
            self.nsa_decode_backend = 'trtllm'
    log(self.nsa_decode_backend)
"""


def _stmts(src: str, scope: str = "f") -> tuple[ast.Module, list[ast.stmt]]:
    tree = ast.parse(src)
    return tree, edited.statements(tree, scope)


def test_a_statement_holds_an_edit_with_every_word_it_adds_and_none_it_takes_away():
    edit = (frozenset({"trtllm"}), frozenset({"flashinfer"}))
    assert edited.holds("self.dsa_decode_backend = 'flashinfer'", edit)
    assert not edited.holds("x = 'trtllm' if major >= 10 else 'flashinfer'", edit)  # the old word stands
    assert not edited.holds("self.dsa_decode_backend = 'fa3'", edit)  # the new one does not
    added = (frozenset(), frozenset({"DeepseekV32ForCausalLM"}))
    assert edited.holds("if draft and arch in ['DeepseekV3ForCausalLM', 'DeepseekV32ForCausalLM']", added)


def test_the_alignment_pairs_the_site_with_its_own_branch_after_a_rename():
    """The decode default of the second branch, its names renamed (nsa -> dsa) and a third
    branch added before both: a diff of the statements pairs it with the second branch's."""
    home, mine = _stmts(BRANCHES)
    renamed = BRANCHES.replace("nsa_", "dsa_").replace(
        "    if fp8:\n", "    if hip:\n        self.dsa_decode_backend = 'tilelang'\n    if fp8:\n"
    )
    tree, theirs = _stmts(renamed)
    pairs = edited.align([context.stmt(s) for s in mine], [context.stmt(s) for s in theirs])
    site = next(k for k, s in enumerate(mine) if s.lineno == 11)
    assert theirs[pairs[site]].lineno == 13  # the bf16 branch's, not the fp8 branch's (:7)
    # The renamed binding pairs with itself, an `if` with an `if` only.
    assert edited._alike(("self.nsa_x = 1", "self.nsa_x"), ("self.dsa_x = 1", "self.dsa_x")) >= 0.5
    assert edited._alike(("a = 1", "a"), ("b = 1", "b")) == 0.0
    assert edited._alike(("if x", ""), ("for x in y", "")) == 0.0


def test_a_tie_is_broken_only_by_the_alignment_and_only_among_the_tied():
    """edited.identify: candidates that pass but do not lead read ambiguous, unless the
    home scope's alignment pairs the site with one of them."""
    # Two ifs of unrelated tests (in one if's two arms, the other arm's would be another site:
    # folds.py, and no tie; below)
    src = BRANCHES.replace("    else:\n", "    if bf16:\n")
    home = ast.parse(src)
    site_line = 11
    ident = identity.Identity("home", (context.of_site(home, site_line, "m.py", "f"),))

    class Doc:  # renamed, and the statement after both branches gone: they tie on context
        logical = "m.py"
        tree = ast.parse(src.replace("nsa_", "dsa_").replace("    log(self.dsa_decode_backend)\n", ""))

    verdict, ranked = edited.identify(ident, Doc, "f")
    assert verdict == "ambiguous" and ranked[0].score - ranked[1].score < identity.MARGIN
    verdict, ranked = edited.identify(ident, Doc, "f", home, "f")
    assert verdict == "moved" and ranked[0].line == site_line and "aligned" in ranked[0].parts

    class Else(Doc):  # the if/else itself: the fp8 arm's default is scored 0, no tie to break
        tree = ast.parse(BRANCHES.replace("nsa_", "dsa_").replace("    log(self.dsa_decode_backend)\n", ""))

    ident = identity.Identity("home", (context.of_site(ast.parse(BRANCHES), site_line, "m.py", "f"),))
    verdict, ranked = edited.identify(ident, Else, "f")
    assert verdict == "moved" and ranked[0].line == site_line and ranked[-1].score == 0.0


def test_edit_words_are_the_diff_of_the_scope_before_and_after_the_op():
    op = KINDS["list-element"](
        {"contains": ['"DeepseekV3ForCausalLM"', '"GlmMoeDsaForCausalLM"']},
        {"element": '"DeepseekV32ForCausalLM"', "after": '"DeepseekV3ForCausalLM"'},
    )
    import libcst as cst

    src = (
        'def f():\n    if arch in [\n        "DeepseekV3ForCausalLM",\n'
        '        "GlmMoeDsaForCausalLM",\n    ]:\n        x = 1\n'
    )
    module = cst.parse_module(src)

    class Ref:
        def module(self, logical):
            return module

    class Spec:
        impl, file, scope = op, "m.py", "f"

    assert edited.edit_words(Ref(), Spec) == (frozenset(), frozenset({"DeepseekV32ForCausalLM"}))


def test_replace_expr_greps_for_the_words_both_forms_hold():
    """A done site elsewhere (upstream's code, moved) lacks the words only the match has."""
    op = KINDS["replace-expr"](
        {"match": 'major == 12 and minor == 0 and version_at_least(torch.version.cuda, "12.9")'},
        {"with": 'major == 12 and version_at_least(torch.version.cuda, "12.9")'},
    )
    assert "minor" not in op.reads.file_words and "major" in op.reads.file_words
    assert "'12.9'" in op.reads.file_words  # a string's contents, as a fragment
    swap = KINDS["replace-expr"]({"match": '"trtllm"'}, {"with": '"flashinfer"'})
    assert swap.reads.file_words == ('"trtllm"',)  # nothing in common: what upstream wrote


def test_an_ambiguous_replace_expr_offers_each_match_to_relocation():
    op = KINDS["replace-expr"]({"match": '"trtllm"'}, {"with": '"flashinfer"'})
    import libcst as cst

    scope = cst.parse_module('a = \'x\'\nb = "trtllm"\nc = "trtllm"\n')
    loc = op.locate(scope)
    assert loc.state == State.AMBIGUOUS
    each = op.each(loc)
    assert [x.state for x in each] == [State.PENDING, State.PENDING] and all(len(x.nodes) == 1 for x in each)
    two = KINDS["replace-expr"]({"match": '"trtllm"', "count": 2}, {"with": '"flashinfer"'})
    assert two.each(Located(State.AMBIGUOUS, loc.nodes)) == ()  # sites of two places are not one each
