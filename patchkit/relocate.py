"""Relocation: find an op's site when it is no longer in its named file or scope.

Anchors are found by content, not by names, so a function that was renamed or moved to
another module is still found.  Parsing a whole SGLang tree with libcst takes minutes, so
files are first filtered by the literal words every site must contain (identifiers and
string contents of the op's locator), read as bytes; only the few candidates are parsed.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

from patchkit import pyscope
from patchkit.model import OpSpec
from patchkit.ops import DONE, PENDING, Located
from patchkit.ops._cst import words
from patchkit.target import ENGINES, Target


def word_bytes(src: str) -> tuple[bytes, ...]:
    """Identifiers and string contents of a code fragment, as bytes to search for."""
    return tuple(w.encode() for w in words(src))


def needles(op: OpSpec) -> tuple[bytes, ...]:
    """Bytes that every file holding the op's site contains, applied or not."""
    if op.impl.language == "text":
        return ()  # the site holds either `find` or `replace`; candidates are checked by locate
    return tuple(w for lit in op.impl.literals() for w in word_bytes(lit))


def tree_files(target: Target, suffix: str) -> list[tuple[str, Path]]:
    """(logical name, path) of every file with this suffix in the target's layout."""
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


def candidates(target: Target, suffix: str, words: tuple[bytes, ...]) -> list[tuple[str, Path]]:
    """Files that may hold a site: with words, those ``grep -F`` finds the first word in
    (C speed over thousands of files, and no Python walk of the tree); the caller checks
    the other words."""
    grep = shutil.which("grep")
    if not words or not grep:
        return tree_files(target, suffix)
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
    hits = []
    chosen = []
    for logical, path in candidates(target, suffix, words):
        if logical == skip:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if all(w in data for w in words) and op.impl.prefilter(data.decode("utf-8", "replace")):
            chosen.append(logical)
    if len(chosen) > MAX_CANDIDATES:
        raise TooCommon(len(chosen))
    for logical in chosen:
        try:
            hits += [(logical, name, loc) for name, loc in scan_file(op, session.file(op.engine, logical))]
        except Exception:  # a candidate that does not parse is not a site
            continue
    return hits


def _scopes_at(text: str, words: tuple[bytes, ...]) -> list[str]:
    """Qualified names of the innermost defs/classes around each line holding a word
    (``ast`` is ~50x faster than libcst, so this narrows where libcst has to look)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
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
    for name in names:
        if name == skip_scope:
            continue
        try:
            chain = pyscope.resolve(f.whole_module(), name)
        except pyscope.ScopeError:
            continue  # e.g. a def nested in an if: not addressable as a scope
        loc = op.impl.locate(chain[-1])
        if loc.state in (DONE, PENDING):
            found.append((name, loc))
    if not found and op.impl.SCOPED and "" not in names and skip_scope != "":
        loc = op.impl.locate(f.whole_module())
        if loc.state in (DONE, PENDING):
            found.append(("", loc))
    return found
