"""A text hunk upstream made with its context rewritten (patchkit/core/fuzzed.py): found as GNU
patch finds a previously applied hunk, with up to two context lines ignored at each end,
and read ``upstream`` only where the pristine release (a checkout's tag) holds it; never
``applied`` or ``pending``.  Offline, on small git checkouts."""

from __future__ import annotations

import json

from patchkit.core.ops.text_hunk import TextHunk
from tests.conftest import git

HUNK = (
    """
   if (fp8) {
     CHECK(
         major * 10 + minor == 89 ||
-            major * 10 + minor == 120,
-        "SM89 or SM120 only");
+            major == 12,
+        "SM89 or SM12x only");
   }
"""
    + " \n"
)  # a blank context line, as the patch has it
RECIPE = f'''
id = "sm12x"
summary = "admit SM12x"
[engines]
flashinfer = ">=0"
[[ops]]
kind = "text-hunk"
engine = "flashinfer"
file = "csrc/marlin/marlin.cu"
[ops.params]
hunk = """{HUNK}"""
'''
BEFORE = "void mm() {\n  if (fp8) {\n    CHECK(\n        major * 10 + minor == 89 ||\n"
BEFORE += '            major * 10 + minor == 120,\n        "SM89 or SM120 only");\n  }\n\n  run();\n}\n'
# Upstream's own fix, its context rewritten: STD_CHECK( for CHECK(, a new check above it.
FIXED = BEFORE.replace("    CHECK(\n", '    STD_CHECK(ada, "Ada");\n    STD_CHECK(\n')
FIXED = FIXED.replace("major * 10 + minor == 120,", "major == 12,").replace("SM120 only", "SM12x only")


def test_the_edited_side_is_found_with_fuzz_and_never_with_every_context_line_of_an_end_dropped():
    op = TextHunk({}, {"hunk": HUNK})
    assert op.locate(FIXED).state == "missing"  # exact: the context changed
    assert op.fuzzed(FIXED) == ([], [FIXED.splitlines().index("            major == 12,") + 1])
    assert op.fuzzed(BEFORE) == ([5], [])  # the upstream side, at its first changed line
    # The whole leading context gone (only `CHECK(` and the `if` were, now both rewritten):
    one = TextHunk({}, {"hunk": "   CHECK(\n-  a == 1,\n+  a == 2,\n   ok);\n"})
    assert one.fuzzed("  STD_CHECK(\n  a == 2,\n   ok);\n") == ([], [])


def test_a_hunk_that_only_takes_lines_away_is_never_found_with_fuzz(tmp_path, run_cli, monkeypatch):
    """Its edited side is context alone: two lines that happen to stand together are no
    evidence that upstream removed anything."""
    cut = HUNK.replace('+            major == 12,\n+        "SM89 or SM12x only");\n', "")
    text = FIXED.replace('            major == 12,\n        "SM89 or SM12x only");\n', "")
    assert TextHunk({}, {"hunk": cut}).fuzzed(text)[1]  # GNU patch would take it as applied
    repo = _checkout(tmp_path, {"csrc/marlin/marlin.cu": text})
    assert _status(tmp_path, run_cli, monkeypatch, repo, RECIPE.replace(HUNK, cut))["state"] == "missing"


def _checkout(tmp_path, files: dict[str, str]):
    repo = tmp_path / "flashinfer"
    (repo / "flashinfer").mkdir(parents=True)
    (repo / "flashinfer/__init__.py").write_text("")
    (repo / "version.txt").write_text("0.6.3\n")
    (repo / "include/flashinfer").mkdir(parents=True)
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.6.3")
    git(repo, "tag", "v0.6.3")
    return repo


def _status(tmp_path, run_cli, monkeypatch, repo, recipe: str = RECIPE) -> dict:
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    recipes = tmp_path / "recipes"
    recipes.mkdir(exist_ok=True)
    (recipes / "sm12x.toml").write_text(recipe)
    code, out, err = run_cli("--recipes", str(recipes), "status", "sm12x", "-t", f"flashinfer={repo}", "--json")
    assert code in (0, 1), err
    return json.loads(out)["recipes"][0]["ops"][0]


def test_upstreams_fix_with_its_context_rewritten_reads_upstream(tmp_path, run_cli, monkeypatch):
    repo = _checkout(tmp_path, {"csrc/marlin/marlin.cu": FIXED})
    op = _status(tmp_path, run_cli, monkeypatch, repo)
    assert op["state"] == "upstream", op
    assert op["location"] == "csrc/marlin/marlin.cu::<module>:6", op
    assert "GNU patch's fuzz" in op["message"], op


def test_a_moved_file_with_a_twin_elsewhere_is_found_by_its_basename(tmp_path, run_cli, monkeypatch):
    """The file moved (a new directory level) and a MoE kernel holds the same check: the
    file of the hunk's basename is the site, as git breaks a tie between rename sources."""
    repo = _checkout(tmp_path, {"csrc/stable/marlin/marlin.cu": FIXED, "csrc/moe/ops.cu": FIXED})
    op = _status(tmp_path, run_cli, monkeypatch, repo)
    assert op["state"] == "upstream" and op["location"] == "csrc/stable/marlin/marlin.cu::<module>:6", op


def test_twins_of_no_basename_and_a_fix_by_hand_are_missing(tmp_path, run_cli, monkeypatch):
    """Two moved copies, neither of the hunk's basename: no site.  The same lines written by
    hand over a tag that lacks them: not upstream's, and not patchkit's either (apply is
    exact, it never wrote them; revert would not find them): missing."""
    repo = _checkout(tmp_path, {"csrc/a/one.cu": FIXED, "csrc/b/two.cu": FIXED})
    assert _status(tmp_path, run_cli, monkeypatch, repo)["state"] == "missing"
    hand = _checkout(tmp_path / "hand", {"csrc/marlin/marlin.cu": BEFORE})
    (hand / "csrc/marlin/marlin.cu").write_text(FIXED)
    op = _status(tmp_path / "hand", run_cli, monkeypatch, hand)
    assert op["state"] == "missing", op
