"""Relocation: find an op's site when it is no longer in its named file or scope.

Anchors are found by content, not by names, so a function that was renamed or moved to
another module is still found.  Parsing a whole SGLang tree with libcst takes minutes, so
files are first filtered by the literal words every site must contain (identifiers and
string contents of the op's locator), read as bytes; only the few candidates are parsed.
"""

from __future__ import annotations

import ast
import io
import keyword
import os
import tokenize
from functools import lru_cache
from pathlib import Path

from patchkit import pyscope
from patchkit.model import OpSpec
from patchkit.ops import DONE, PENDING, Located
from patchkit.target import ENGINES, Target


@lru_cache(maxsize=512)
def _words(src: str) -> tuple[bytes, ...]:
    """Identifiers and string contents of a code fragment, as bytes to search for."""
    out: list[str] = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(src).readline):
            if t.type == tokenize.NAME and not keyword.iskeyword(t.string):
                out.append(t.string)
            elif t.type == tokenize.STRING:
                try:
                    v = ast.literal_eval(t.string)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(v, str) and v:
                    out.append(v)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        out = [src]
    return tuple(dict.fromkeys(w.encode() for w in out))


def needles(op: OpSpec) -> tuple[bytes, ...]:
    if op.impl.language == "text":
        return tuple(lit.encode() for lit in op.impl.literals())
    return tuple(w for lit in op.impl.literals() for w in _words(lit))


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


def _nested(target: Target) -> list[tuple[str, str]]:
    """Other path prefixes nested under the first one (flashinfer/data/include in a wheel)."""
    lay = ENGINES[target.engine].layouts[target.layout]
    first = lay[0][1]
    return [(lp, pp[len(first):]) for lp, pp in lay[1:] if pp.startswith(first)]


def search(session, op: OpSpec, skip: str) -> list[tuple[str, str, Located]]:
    """(logical file, scope, Located) for every scope in the engine's tree where the op's
    site is found (DONE or PENDING), innermost scope per site, skipping file ``skip``."""
    target = session.targets[op.engine]
    suffix = ".py" if op.impl.language == "python" else os.path.splitext(op.file)[1]
    words = needles(op)
    hits = []
    for logical, path in tree_files(target, suffix):
        if logical == skip:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if not all(w in data for w in words):
            continue
        try:
            hits += [(logical, name, loc) for name, loc in scan_file(op, session.file(op.engine, logical))]
        except Exception:  # a candidate that does not parse is not a site
            continue
    return hits


def scan_file(op: OpSpec, f, skip_scope: str | None = None) -> list[tuple[str, Located]]:
    """(scope, Located) for each site of the op in this file, innermost scope per site."""
    if not f.is_python:
        loc = op.impl.locate(f.text)
        return [("", loc)] if loc.state in (DONE, PENDING) else []
    found = []
    for name, chain in pyscope.all_scopes(f.module):
        if not op.impl.SCOPED and name:
            break
        loc = op.impl.locate(chain[-1])
        if loc.state in (DONE, PENDING):
            found.append((name, loc))
    # A site inside Class.method is also inside Class and the module; keep the innermost.
    inner = [h for h in found if not any(o is not h and (o[0].startswith(h[0] + ".") or (h[0] == "" and o[0])) for o in found)]
    return [h for h in inner if h[0] != skip_scope]
