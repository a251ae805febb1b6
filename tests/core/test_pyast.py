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
