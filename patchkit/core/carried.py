"""A Python op's site identity carried in its recipe (``[ops.identity]``), as `capture` and
`port` write it: the site as it stood in the release the op was written for.

A text-hunk carries its identity in its own context lines.  A Python op names a pattern
and a scope; its identity (identity.py: the enclosing def or class, the statements of the
block the site stands in, its place there, what the file imports) is otherwise derived
from a pristine release in range and cached.  Carried, it needs no release to be read (a
git checkout ahead of any release, an offline machine), and it says in the recipe what the
author's site looked like::

    [ops.identity]  # the site as in sglang 0.5.9
    release = "sglang 0.5.9"
    imports = ["sglang.srt.utils:is_sm120_supported", "sglang.srt.layers"]
    [[ops.identity.sites]]  # one per place the op edits (usually one)
    enclosing = ["handle", "moe", "kernel", "config"]  # the def/class's name words
    params = ""  # its parameters (a class: its bases); absent at module level
    block = ["moe = self.moe_runner_backend", "if moe == 'auto'", "..."]
    at = 2  # the site is the 2nd statement of block
    before = ["moe = self.moe_runner_backend"]  # context lines across the blocks around it,
    after = ["return moe"]                      # as a diff shows them (nearest first before)
    arms = ["else kv == 'fp8'", "if major >= 10"]  # the ifs around the site, its arm of each
    fold = ["if major >= 10", "'trtllm'", "'fa3'"]  # the if/else it folds out of (folds.py):
    folded = ["after 1", "after 2"]                 # its arm, value, the other's; lines taken in
    feeds = ["run(bias=)"]  # the calls the names the site binds feed (context.feeds)

Statements are written as ``ast.unparse`` prints them (a compound statement by its header,
a def or class by its name and signature; "" for one that names nothing), imports as
``module:name`` (``module`` for ``import module``), only the engine's own modules (no other
import can name a module of its tree); a block longer than MAX_BLOCK statements is written
as the MAX_BLOCK around the site.  This module only converts; recipe.py validates.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

MAX_SITES = 16  # identity.MAX_SITES: occurrences compared
NEAR = 3  # context.NEAR: context lines on each side (``before``/``after``)
# Statements of a block written, around the site: a class of 400 fields (SGLang's
# ServerArgs) would put 400 lines into the recipe, and its siblings' share (context.py) is
# read as well from the 64 nearest.  A block up to this size judges exactly as derived.
MAX_BLOCK = 64
_DEF = re.compile(r"^(def|class) ([A-Za-z_]\w*)\(")


def head_of(text: str) -> str:
    """The head (context._head) of a statement as written in ``block``: the name it binds
    or calls, ``def f`` or ``class C``; "" when it has none (a compound statement's header)."""
    if not text:
        return ""
    m = _DEF.match(text)
    if m:
        return f"{m.group(1)} {m.group(2)}"
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ""  # `if x`, `for a in b`, `try`: a header alone is no statement
    if len(tree.body) != 1:
        return ""
    from patchkit.core.context import _head

    return _head(tree.body[0])


def _arm(text: str) -> tuple[str, bool]:
    """``"if C"`` / ``"else C"`` -> (C, in the true arm)."""
    word, _, cond = text.partition(" ")
    return cond, word == "if"


def _arm_text(cond: str, side: bool) -> str:
    return f"{'if' if side else 'else'} {cond}"


def build(release: str, file: str, scope: str, imports: list[str], sites: list[dict]) -> tuple:
    """(release, contexts) from a recipe's validated ``[ops.identity]``: identity.of makes
    its Identity of them (this module sits below identity.py, which reads releases)."""
    from patchkit.core import context

    pairs = {tuple(i.split(":", 1)) if ":" in i else (i, "") for i in imports}
    pairs = frozenset(pairs | {(f"{m}.{n}", "") for m, n in pairs if n})  # as context.imports_of
    ctxs = []
    for s in sites:
        block = tuple((t, head_of(t)) if t else ("", "") for t in s["block"])
        at = s["at"] - 1 if "at" in s else None
        header = (tuple(s.get("enclosing", ())), s["params"]) if "params" in s else ()
        near = ()
        if "before" in s or "after" in s:  # the context lines across the blocks around the site
            near = tuple(tuple((t, head_of(t)) for t in s.get(side, ())) for side in ("before", "after"))
        arms = tuple(_arm(a) for a in s.get("arms", ()))
        fold = ()
        if s.get("fold"):
            took = [
                [int(n) - 1 for side_, n in (f.split() for f in s.get("folded", ())) if side_ == side]
                for side in ("before", "after")
            ]
            fold = (*_arm(s["fold"][0]), s["fold"][1], s["fold"][2], tuple(took[0]), tuple(took[1]))
        feeds = tuple(sorted(str(x) for x in s.get("feeds", ())))
        ctxs.append(context.Context(file, scope, block, at, pairs, header, near, arms, fold, feeds))
    return release, tuple(ctxs)


def table(release: str, contexts: tuple, package: str) -> dict:
    """The ``[ops.identity]`` table of a site's contexts (identity.Identity's), in one file:
    its imports of the engine's own ``package`` only."""
    pairs = {(m, n) for c in contexts for m, n in c.imports if m == package or m.startswith(package + ".")}
    implied = {f"{m}.{n}" for m, n in pairs if n}  # `from m import n` also names module m.n: build() adds it
    imports = sorted(f"{m}:{n}" if n else m for m, n in pairs if n or m not in implied)
    sites = []
    for c in contexts[:MAX_SITES]:
        s: dict = {}
        if c.header:
            s["enclosing"], s["params"] = list(c.header[0]), c.header[1]
        lo = 0
        if len(c.block) > MAX_BLOCK:
            lo = 0 if c.at is None else min(max(0, c.at - MAX_BLOCK // 2), len(c.block) - MAX_BLOCK)
        s["block"] = [t for t, _ in c.block[lo : lo + MAX_BLOCK]]
        if c.at is not None:
            s["at"] = c.at - lo + 1
        if c.near:
            s["before"], s["after"] = [t for t, _ in c.near[0]], [t for t, _ in c.near[1]]
        if c.arms:
            s["arms"] = [_arm_text(t, side) for t, side in c.arms]
        if c.fold:
            s["fold"] = [_arm_text(c.fold[0], c.fold[1]), c.fold[2], c.fold[3]]
            s["folded"] = [
                f"{side} {k + 1}" for side, ks in zip(("before", "after"), c.fold[4:6], strict=True) for k in ks
            ]
        if c.feeds:
            s["feeds"] = list(c.feeds)
        sites.append(s)
    return {"release": release, "imports": imports, "sites": sites}


def toml_lines(prefix: str, tab: dict, toml_str) -> list[str]:
    """``[prefix.identity]`` and its ``[[prefix.identity.sites]]``, one statement a line."""

    def strs(xs: list[str]) -> str:
        return "[" + ", ".join(toml_str(x) for x in xs) + "]"

    out = [f"[{prefix}.identity]  # the site as in {tab['release']} (docs/identity.md)"]
    out += [f"release = {toml_str(tab['release'])}", f"imports = {strs(tab['imports'])}"]
    for s in tab["sites"]:
        out.append(f"[[{prefix}.identity.sites]]")
        if "params" in s:
            out += [f"enclosing = {strs(s['enclosing'])}", f"params = {toml_str(s['params'])}"]
        out.append("block = [")
        out += [f"    {toml_str(t)}," for t in s["block"]]
        out.append("]")
        if "at" in s:
            out.append(f"at = {s['at']}")
        for key in ("before", "after", "arms", "fold", "folded", "feeds"):
            if key in s:
                out.append(f"{key} = {strs(s[key])}")
    return out


class TreeFiles:
    """A tree's files read as a pristine.Reference reads a release's (``read``, ``module``):
    the identity of a site in the tree `port` drafts for."""

    def __init__(self, target) -> None:
        self.target = target

    def read(self, logical: str) -> Optional[bytes]:
        from patchkit.base import fsio, sparse
        from patchkit.base.errors import PatchkitError

        try:
            sparse.need(self.target.root, [self.target.relpath(logical)])
            return fsio.read_file(self.target.path(logical))
        except PatchkitError:
            return None

    def module(self, logical: str):
        import libcst as cst

        from patchkit.core.ops import _cst

        data = self.read(logical)
        try:
            if data is None:
                return None
            ast.parse(data)  # CPython's parser first: libcst's crashes on deep nesting
            return _cst.parsed(data)
        except (SyntaxError, ValueError, MemoryError, RecursionError, cst.ParserSyntaxError):
            return None
