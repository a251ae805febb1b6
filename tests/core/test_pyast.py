"""patchkit/core/pyast.py: a file's ast, parsed once per text."""

import pytest

from patchkit.core import pyast


def test_the_same_text_is_one_tree_and_a_text_that_does_not_parse_raises_each_time():
    text = "def f(x):\n    return x + 1\n"
    assert pyast.parsed(text) is pyast.parsed(text)
    assert pyast.parsed(text) is not pyast.parsed(text + "\n")
    for _ in range(2):
        with pytest.raises(SyntaxError):
            pyast.parsed("def f(:\n")


def test_segment_is_the_stdlibs_on_every_node():
    """pyast.segment cuts what ast.get_source_segment cuts, line endings (\\r\\n, \\r),
    multi-byte characters, multi-line nodes and a last line without a newline included."""
    import ast

    from patchkit.core import pyast

    texts = [
        "x = 1\nif a and \\\n   b:\n    y = f(\n        'é', 2)\n",
        "def f():\r\n    return {'ü': [1,\r\n  2]}\r\n",
        "a = 1\rb = (2 +\r 3)\rc = '日本' + d",
        "class C:\n    x: int = 3  # ünï\n\n    def m(self): return self.x\n",
    ]
    n = 0
    for text in texts:
        for node in ast.walk(ast.parse(text)):
            if getattr(node, "end_lineno", None) is not None:
                assert pyast.segment(text, node) == ast.get_source_segment(text, node), (text, ast.dump(node))
                n += 1
    assert n > 40
    assert pyast.segment("x", ast.Module(body=[], type_ignores=[])) is None  # no position: None
