"""Relocation: find an op's site when it is no longer in its named file or scope.

Anchors are found by content, not by names, so a function that was renamed or moved to
another module is still found.  Parsing a whole SGLang tree with libcst takes minutes, so
files are first filtered, from what the op says it reads (``Op.reads``, a ``Reads``), by
tests that get dearer as the files get fewer:

1. ``grep -F`` for the first of the words every file holding the site contains
   (``Reads.file_words``: identifiers and string contents), then all of them, as bytes;
2. the tokens of each fragment of one of ``Reads.sites``, in order with any layout, in the
   text (``could_hold``);
3. with several fragments, ``ast`` (~50x libcst): one statement holds them all;

and only the few files left are parsed with libcst and asked (``scan_file``).  Every test is
derived from that data: no op kind has filtering code of its own.

Every place found is scored against the site's identity by the judge (identity.py,
context.py); ``original_context`` is that identity when no release in range can be read.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Optional

from patchkit.base import fsio, sparse
from patchkit.base.errors import TargetError
from patchkit.base.model import OpSpec
from patchkit.base.target import ENGINES, Target
from patchkit.core import context, pyast, pyscope, view
from patchkit.core.ops import DONE, PENDING, Located
from patchkit.core.ops._cst import tokens, words


def word_bytes(src: str) -> tuple[bytes, ...]:
    """Identifiers and string contents of a code fragment, as bytes to search for."""
    return tuple(w.encode() for w in words(src))


def needles(op: OpSpec) -> tuple[bytes, ...]:
    """Bytes that every file holding the op's site contains, applied or not
    (``Reads.file_words``: their words; a text op's fragments are plain text)."""
    frags = op.impl.reads.file_words
    if op.impl.language == "text":
        return tuple(f.encode() for f in frags if f)
    return tuple(w for f in frags for w in word_bytes(f))


# What may stand between two tokens of a statement: whitespace, a comment up to its line's
# end, a backslash continuation.  The three start differently, so a failed match backtracks
# in linear time.
_GAP = r"(?:\s|\\\r?\n|#[^\r\n]*(?=[\r\n]|\Z))*"


@lru_cache(maxsize=1024)
def _fragment_re(frag: str, language: str) -> Optional[re.Pattern]:
    """A regex for a fragment in source text: its tokens in order with any layout between them
    (a text op's fragment: its exact text).  None when it has no tokens: it holds nothing."""
    if language == "text":
        return re.compile(re.escape(frag)) if frag else None
    toks = tokens(frag)
    return re.compile(_GAP.join(re.escape(t) for t in toks)) if toks else None


def could_hold(op: OpSpec, text: str) -> bool:
    """Can this file hold the op's site, done or pending?  False only when no alternative of
    ``Reads.sites`` has all its fragments in the text, in one statement (``_in_one_statement``)."""
    reads, language = op.impl.reads, op.impl.language
    if reads.sites is None:
        return True
    tree = None
    for alt in reads.sites:
        regexes = [r for r in (_fragment_re(f, language) for f in alt) if r is not None]
        if not all(r.search(text) for r in regexes):
            continue
        if len(regexes) < 2 or language != "python":
            return True
        if tree is None:
            try:
                tree = pyast.parsed(text)  # the same tree the scan reads next (_scopes_at)
            except (SyntaxError, ValueError):
                return True  # the real parser will say what it makes of this file
        if _in_one_statement(text, tree, regexes, reads.whole_statements):
            return True
    return False


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _children(s) -> list:
    """The statements nested directly in ``s`` (or in its except handlers / match cases)."""
    out = []
    for name in _BODIES:
        for c in getattr(s, name, ()):
            out += c.body if not isinstance(c, ast.stmt) else [c]
    return out


def _in_one_statement(text: str, tree: ast.Module, regexes: list, whole: bool) -> bool:
    """Does one statement hold a match of every regex?  The statements looked at are those
    whose own text holds a line where the first regex matches; a statement's own text is its
    lines without those of the statements nested in it (``whole``: with them), so the
    fragments of an expression, which never spans a nested statement, stand in it."""
    lines = view.split_lines(text)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    own: dict[int, str] = {}

    def own_text(s) -> str:
        if id(s) not in own:
            first, end = view.first_line(s), s.end_lineno or s.lineno
            keep = [True] * (end - first + 1)
            if not whole:
                for c in _children(s):
                    a, b = view.first_line(c), c.end_lineno or c.lineno
                    if not _shares_line(lines, c):
                        keep[a - first] = False
                    for k in range(a + 1, b + 1):
                        keep[k - first] = False
            own[id(s)] = "".join(lines[first - 1 + k] for k, y in enumerate(keep) if y)
        return own[id(s)]

    def owners(line: int) -> list:
        """The statements whose own text holds this line."""
        out, body = [], tree.body
        while body:
            spanning = [s for s in body if view.first_line(s) <= line <= (s.end_lineno or s.lineno)]
            if not spanning:
                break
            nxt = []
            for s in spanning:
                if whole:
                    out.append(s)
                    continue
                inner = [c for c in _children(s) if view.first_line(c) <= line <= (c.end_lineno or c.lineno)]
                if not inner or any(view.first_line(c) == line and _shares_line(lines, c) for c in inner):
                    out.append(s)
                nxt += inner
            body = [] if whole else nxt
        return out

    seen: set[int] = set()
    for m in regexes[0].finditer(text):
        line = bisect.bisect_right(starts, m.start())
        if line in seen:
            continue
        seen.add(line)
        for s in owners(line):
            t = own_text(s)
            if all(r.search(t) for r in regexes):
                return True
    return False


def _shares_line(lines: list[str], c: ast.stmt) -> bool:
    """Does text of the enclosing statement stand before ``c`` on its first line
    (``if x: y = 1``)?  Compound statements always start a line of their own."""
    if view.first_line(c) != c.lineno:
        return False  # decorated
    before = lines[c.lineno - 1].encode("utf-8", "surrogateescape")[: c.col_offset]
    return bool(before.strip())


def tree_files(target: Target, suffix: str) -> list[tuple[str, Path]]:
    """(logical name, path) of every file with this suffix in the target's layout."""
    _whole(target, suffix)
    out = []
    for lp, pp in ENGINES[target.engine].layouts[target.layout]:
        base = target.root / pp
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != ".patchkit" and not d.startswith("."))
            # The package prefix maps include/ and csrc/ too; do not list them twice.
            if lp == ENGINES[target.engine].layouts[target.layout][0][0]:
                rel_dir = os.path.relpath(dirpath, base)
                if any(rel_dir == other.rstrip("/") or rel_dir.startswith(other) for _, other in _nested(target)):
                    dirnames[:] = []
                    continue
            for fn in sorted(filenames):
                if fn.endswith(suffix):
                    p = Path(dirpath) / fn
                    out.append((lp + str(p.relative_to(base)), p))
    return out


def _whole(target: Target, suffix: str) -> None:
    """A sparse release tree (patchkit/base/sparse.py) brings in every file this search
    reads first: it sees what a whole tree would show it."""
    sparse.need_suffix(target.root, [pp for _, pp in ENGINES[target.engine].layouts[target.layout]], suffix)


def logical_of(target: Target, path: Path) -> str | None:
    """The logical name of a file inside the target, or None (outside any package prefix,
    or in patchkit's own state)."""
    try:
        rel = path.relative_to(target.root).as_posix()
    except ValueError:
        return None
    if any(part.startswith(".") for part in rel.split("/")):
        return None
    for lp, pp in sorted(ENGINES[target.engine].layouts[target.layout], key=lambda x: -len(x[1])):
        if rel.startswith(pp):
            return lp + rel[len(pp) :]
    return None


def read_each(files) -> Iterator[tuple[str, bytes]]:
    """(logical, bytes) of each of ``files`` ((logical, path) pairs) that is a regular
    file patchkit can read.  A FIFO, a directory or an unreadable file is passed over: no
    site we could vouch for stands there (fsio.read_file checks what it opens before reading
    a byte, and never blocks)."""
    for logical, path in files:
        try:
            data = fsio.read_file(path)
        except TargetError:
            continue
        if data is not None:
            yield logical, data


def candidates(target: Target, suffix: str, words: tuple[bytes, ...]) -> list[tuple[str, Path]]:
    """Files that may hold a site: with words, those ``grep -F`` finds the first word in
    (C speed over thousands of files, and no Python walk of the tree); the caller checks
    the other words."""
    grep = shutil.which("grep")
    if not words or not grep:
        return tree_files(target, suffix)
    _whole(target, suffix)
    roots = sorted(
        {
            str(target.root / pp)
            for _, pp in ENGINES[target.engine].layouts[target.layout]
            if (target.root / pp).is_dir()
        }
    )
    if not roots:
        return []
    try:
        proc = subprocess.run(
            [grep, "-rlF", f"--include=*{suffix}", "-e", words[0].decode(), "--", *roots], capture_output=True
        )
    except OSError:
        return tree_files(target, suffix)
    if proc.returncode not in (0, 1):
        return tree_files(target, suffix)
    out = {}
    for line in proc.stdout.splitlines():
        p = Path(os.fsdecode(line))
        lf = logical_of(target, p)
        if lf is not None:
            out[lf] = p
    return sorted(out.items())


def _nested(target: Target) -> list[tuple[str, str]]:
    """Other path prefixes nested under the first one (flashinfer/data/include in a wheel)."""
    lay = ENGINES[target.engine].layouts[target.layout]
    first = lay[0][1]
    return [(lp, pp[len(first) :]) for lp, pp in lay[1:] if pp.startswith(first)]


MAX_CANDIDATES = 64  # more files than this hold the anchor's words: it is not distinctive


class TooCommon(Exception):
    """The anchor's words are in too many files to say where the site went."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.n = n


def search(session, op: OpSpec, skip: str) -> list[tuple[str, str, Located]]:
    """(logical file, scope, Located) for every scope in the engine's tree where the op's
    site is found (DONE or PENDING), innermost scope per site, skipping file ``skip``."""
    if not op.impl.RELOCATABLE:
        return []
    target = session.targets[op.engine]
    suffix = ".py" if op.impl.language == "python" else os.path.splitext(op.file)[1]
    words = needles(op)
    chosen = []
    for logical, data in read_each(candidates(target, suffix, words)):
        if logical == skip:
            continue
        if all(w in data for w in words) and could_hold(op, data.decode("utf-8", "replace")):
            chosen.append(logical)
    if len(chosen) > MAX_CANDIDATES:
        raise TooCommon(len(chosen))
    # Scanned last-read first, so that the trees could_hold parsed are still those pyast
    # remembers (the last 16); the hits keep the candidates' order.
    found: dict[str, list] = {}
    for logical in reversed(chosen):
        try:
            found[logical] = [(logical, name, loc) for name, loc in scan_file(op, session.file(op.engine, logical))]
        except TargetError:  # a candidate that does not parse (Document.module) is not a site
            continue
    return [hit for logical in chosen for hit in found.get(logical, ())]


def _scopes_at(text: str, words: tuple[bytes, ...]) -> list[str]:
    """Qualified names of the innermost defs/classes around each line holding a word
    (``ast`` is ~50x faster than libcst, so this narrows where libcst has to look)."""
    try:
        tree = pyast.parsed(text)
    except (SyntaxError, ValueError):  # ValueError: a null byte (Python < 3.12)
        return [""]
    spans: list[tuple[int, int, str]] = []

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                spans.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name)
            elif isinstance(child, ast.stmt):
                visit(child, prefix)  # defs under if/try keep the enclosing prefix

    visit(tree, "")
    lines = text.splitlines()
    found: list[str] = []
    for i, line in enumerate(lines, 1):
        if words and not any(w.decode() in line for w in words):
            continue
        inner = [sp for sp in spans if sp[0] <= i <= sp[1]]
        name = min(inner, key=lambda sp: sp[1] - sp[0])[2] if inner else ""
        if name not in found:
            found.append(name)
    return found or [""]


def scan_file(op: OpSpec, f, skip_scope: str | None = None) -> list[tuple[str, Located]]:
    """(scope, Located) for each site of the op in this file, innermost scope per site."""
    if not f.is_python:
        loc = op.impl.locate(f.text)
        return [("", loc)] if loc.state in (DONE, PENDING) else []
    names = _scopes_at(f.text, needles(op)) if op.impl.SCOPED else [""]
    found = []
    seen: set[int] = set()  # one site is one candidate: the module also holds its defs' nodes
    # Innermost scopes first (a method before its class, whose locate also reaches the
    # method's nodes: one site is named by its innermost scope), the module last.
    for name in sorted(names, key=lambda n: (n == "", -n.count("."))):
        if name == skip_scope:
            continue
        try:
            chain = pyscope.resolve(f.whole_module(), name)
        except pyscope.ScopeError:
            continue  # e.g. a def nested in an if: not addressable as a scope
        loc = op.impl.locate(chain[-1])
        # A scope holding the pattern several times offers each place (Op.each), scored
        # one by one (identity.py): the site may be one of them.
        for one in (loc,) if loc.state in (DONE, PENDING) else op.impl.each(loc):
            ids = {id(n) for n in one.nodes}
            if not (ids and ids <= seen):
                found.append((name, one))
                seen |= ids
    if not found and op.impl.SCOPED and "" not in names and skip_scope != "":
        loc = op.impl.locate(f.whole_module())
        if loc.state in (DONE, PENDING):
            found.append(("", loc))
    return found


# -- the original site's context, when no release in range gives its identity -------------------


def _parse(text: str) -> Optional[ast.Module]:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _pristine_site(op: OpSpec, ref, text: str) -> Optional[int]:
    """The line where the op's site stands in the pristine copy of its named file and
    scope (parsed with libcst, once per invocation: Reference.module), or None."""
    if op.impl.language != "python":
        loc = op.impl.locate(text)
        nodes = [n for n in loc.nodes if isinstance(n, int)] if loc.state in (DONE, PENDING) else []
        return min(nodes) if nodes else None
    module = ref.module(op.file)
    if module is None:
        return None
    try:
        scope = pyscope.resolve(module, op.scope)[-1]
    except pyscope.ScopeError:
        return None
    loc = op.impl.locate(scope)
    if loc.state not in (DONE, PENDING) or not loc.nodes:
        return None
    lines = pyscope.line_numbers(module, None, loc.nodes, text)
    return min(lines.values()) if lines else None


def original_context(session, op: OpSpec, named) -> context.Context:
    """The context of the op's original site, from the best copy that has it:

    1. the pristine release's copy of the named file, when its named scope holds the site
       (a checkout moved on since its tag, code moved by hand): the statements around it;
    2. else the named scope as it stands, in the tree (``named``) or else in the pristine
       copy: its statements are the site's siblings;
    3. else only what the recipe says: the scope's name (its locator's words are in every
       candidate, since the search requires them, so they cannot rank).

    The file's imports (what the file the code left refers to) come from the tree's copy,
    or else the pristine one.  The pristine copy is read only when it differs from the
    tree's (the site is not in the tree's), and parsed only when it may hold the site."""
    python = op.impl.language == "python"
    here = named.tree if named.exists and python else None
    ref = session.reference(op.engine)
    data = ref.read(op.file) if ref.available else None
    text = data.decode("utf-8", "surrogateescape") if data is not None else None
    there = None
    if text is not None and python and (here is None or data != named.original):
        there = _parse(text)
    tree = here or there
    imports = context.imports_of(tree, op.file) if tree is not None else frozenset()
    if text is not None and (not named.exists or data != named.original):
        if all(w in data for w in needles(op)) and could_hold(op, text):
            line = _pristine_site(op, ref, text)
            if line is not None:
                if not python:
                    return context.of_lines(text, line, op.file)
                if there is not None:
                    return context.of_site(there, line, op.file, op.scope, imports)
    for t in (here, there):
        if t is not None:
            got = context.of_scope(t, op.file, op.scope, imports)
            if got is not None:
                return got
    return context.Context(op.file, op.scope, imports=imports)
