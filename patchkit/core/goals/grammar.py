"""tree-sitter grammars, loaded once per process: the C++ grammar (cppeval.py) and the CMake
one (cmakeeval.py), both optional (the ``goals`` extra).  ``parser(NAME)`` is a parser or None
where tree-sitter or that grammar is not installed; ``modules()`` the grammar modules that are,
for a cache key that must miss when one is installed, upgraded or removed."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

GRAMMARS = ("tree_sitter_cpp", "tree_sitter_cmake")
_PARSERS: dict[str, object] = {}


def parser(grammar: str):
    """A tree-sitter parser for ``grammar`` (a module such as ``tree_sitter_cpp``), or None."""
    if grammar not in _PARSERS:
        try:
            import tree_sitter

            lang = importlib.import_module(grammar)
        except ImportError:
            return None
        _PARSERS[grammar] = tree_sitter.Parser(tree_sitter.Language(lang.language()))
    return _PARSERS[grammar]


def modules(grammars: tuple[str, ...] = GRAMMARS) -> list[ModuleType]:
    """tree-sitter itself and those of ``grammars`` that are installed (none without tree-sitter)."""
    if importlib.util.find_spec("tree_sitter") is None:
        return []
    out = [importlib.import_module("tree_sitter")]
    for g in grammars:
        if importlib.util.find_spec(g) is not None:
            out.append(importlib.import_module(g))
    return out
