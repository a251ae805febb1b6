"""A text-hunk on drift: found by its context at another line of its file, or in another
file (``moved``); never at a place whose context differs, and a comment in a Python file
applied and reverted through the planner."""

from __future__ import annotations

import json

from tests.conftest import mini_sglang

BODY = "  setup();\n#if (__CUDA_ARCH__ < 1200)\n  sync();\n#endif\n"
RECIPE = """
id = "hunk"
summary = "widen a guard"
[engines]
sglang = ">=0.5"

[[ops]]
kind = "text-hunk"
engine = "sglang"
file = "sglang/srt/k1.cuh"
[ops.params]
hunk = '''
   setup();
-#if (__CUDA_ARCH__ < 1200)
+#if (__CUDA_ARCH__ < 1300)
   sync();
'''

[[ops]]
kind = "text-hunk"
engine = "sglang"
file = "sglang/srt/m.py"
[ops.params]
hunk = '''
 def f():
+    # SM120 too
     return 1
'''
"""


def _status(run_cli, tmp_path, root):
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    (d / "hunk.toml").write_text(RECIPE)
    code, out, err = run_cli("--recipes", str(d), "status", "hunk", "-t", f"sglang={root}", "--json")
    return code, json.loads(out)["recipes"][0]["ops"], d


def test_found_at_another_line_then_applied_and_reverted(tmp_path, run_cli):
    files = {"sglang/srt/k1.cuh": "// moved down\n\n" + BODY, "sglang/srt/m.py": "def f():\n    return 1\n"}
    root = mini_sglang(tmp_path / "t", files)
    _, ops, d = _status(run_cli, tmp_path, root)
    assert [(o["state"], o["location"]) for o in ops] == [
        ("pending", "sglang/srt/k1.cuh::<module>:4"),
        ("pending", "sglang/srt/m.py::<module>:2"),
    ]
    code, out, err = run_cli("--recipes", str(d), "apply", "hunk", "-t", f"sglang={root}")
    assert code == 0, out + err
    assert "< 1300" in (root / "sglang/srt/k1.cuh").read_text()
    assert (root / "sglang/srt/m.py").read_text() == "def f():\n    # SM120 too\n    return 1\n"
    code, out, err = run_cli("--recipes", str(d), "revert", "hunk", "-t", f"sglang={root}")
    assert code == 0, out + err
    assert (root / "sglang/srt/k1.cuh").read_text() == files["sglang/srt/k1.cuh"]
    assert (root / "sglang/srt/m.py").read_text() == files["sglang/srt/m.py"]


def test_moved_to_another_file_with_its_context_and_not_where_the_context_differs(tmp_path, run_cli):
    files = {
        "sglang/srt/k1.cuh": "// the guard left this file\n",
        "sglang/srt/k2.cuh": "// here now\n" + BODY,
        # the same guard with other context: not the hunk's place
        "sglang/srt/k3.cuh": "  other();\n#if (__CUDA_ARCH__ < 1200)\n  sync();\n#endif\n",
        "sglang/srt/m.py": "def f():\n    return 1\n",
    }
    root = mini_sglang(tmp_path / "t", files)
    _, ops, _ = _status(run_cli, tmp_path, root)
    assert (ops[0]["state"], ops[0]["location"]) == ("moved", "sglang/srt/k2.cuh::<module>:3"), ops[0]
    (root / "sglang/srt/k2.cuh").write_text("// gone everywhere\n")
    _, ops, _ = _status(run_cli, tmp_path, root)
    assert ops[0]["state"] == "missing", ops[0]
