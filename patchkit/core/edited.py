"""Is the op's edit at its site, in other words?  The site found by its identity alone.

An op's pattern is how the recipe finds its site; upstream may make the same edit and
change the pattern with it (slime's `"DeepseekV32ForCausalLM"` added to a draft-arch list
that, later, also lost the `"GlmMoeDsaForCausalLM"` the locator names).  The pattern then
matches nowhere, but the site is still there: the statement of the op's named scope that is
like the site in its home release (identity.py: its own statement, its context lines), by
the same threshold and margin as a move.  Its statement holds the edit when it has every
word the edit adds and none it takes away (the words of the home release's scope, before
and after the op's own edit, compared as a diff compares them).

Only a Python op with a scope is judged so, and only where the pattern reads ``missing``;
the answer is a place and the verdict stays the judge's: ``upstream`` only where the
pristine release holds that very statement there (provenance by content).
"""

from __future__ import annotations

import ast
import difflib
from typing import Optional

import libcst as cst

from patchkit.base.model import OpSpec, Recipe
from patchkit.core import context, identity, pyast, pyscope
from patchkit.core.learned import EDIT
from patchkit.core.ops._cst import word_sequence

MAX_STATEMENTS = 400  # statements of one scope scored (a 6,000-line class is no site's scope)


def _words(src: str) -> list[str]:
    """Identifiers and string contents of code, in order (a diff of what an edit changes)."""
    return word_sequence(src) or []


def edit_words(ref, op: OpSpec) -> Optional[tuple[frozenset, frozenset]]:
    """(taken away, added): the words the op's edit changes in its scope as the release
    ``ref`` holds it (pending there), or None (not pending there, or the edit adds none)."""
    module = ref.module(op.file)
    if module is None:
        return None
    try:
        scope = pyscope.resolve(module, op.scope)[-1]
        if op.impl.locate(scope).state != identity.PENDING:
            return None
        after = op.impl.apply(scope)
    except (pyscope.ScopeError, ValueError, LookupError, cst.CSTValidationError):
        return None  # the op cannot be made there: nothing to compare
    old, new = _words(module.code_for_node(scope)), _words(module.code_for_node(after))
    gone, added = set(), set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            gone |= set(old[i1:i2])
            added |= set(new[j1:j2])
    gone, added = gone - added, added - gone
    return (frozenset(gone), frozenset(added)) if added else None


def _edit_cached(session, recipe: Recipe, op: OpSpec, release: str, ref) -> Optional[tuple[frozenset, frozenset]]:
    """``edit_words`` once per (patchkit, recipe, op, release), on disk beside the identity
    (it parses the home release's file with libcst: seconds for a 5,000-line module); an
    answer worked out here is learned (session.learned), written after judging."""
    import json  # not marshal: a cache entry is input (marshal trusts the lengths it reads)

    from patchkit.base import store

    path = identity._cache_path(session, recipe, op, f"{release}|edit")
    if session.learned.knows(EDIT, str(path)):
        raw = session.learned.get(EDIT, str(path))
        return None if raw is False else (frozenset(raw[0]), frozenset(raw[1]))
    data = store.get("identity", path, limit=1 << 20)
    if data is not None:
        try:
            raw = json.loads(data)
            if raw is False:
                return None
            gone, added = raw
            if all(isinstance(w, str) for w in (*gone, *added)):
                return frozenset(gone), frozenset(added)
        except (ValueError, TypeError, RecursionError):
            pass  # not one: judged again
    edit = edit_words(ref, op)
    raw = False if edit is None else (sorted(edit[0]), sorted(edit[1]))
    session.learned.add(EDIT, str(path), raw)  # kept after judging (learned.keep: _save)
    return edit


def _save(key, raw) -> None:
    """Cache ``_edit_cached``'s answer (False, or [taken away, added]) under ``key``."""
    import json

    from patchkit.base import store

    store.put("identity", key, json.dumps(raw).encode())


def holds(statement: str, edit: tuple[frozenset, frozenset]) -> bool:
    """Does a (normalised) statement hold the edit: every word it adds, none it takes away?"""
    have = set(_words(statement))
    gone, added = edit
    return added <= have and not (gone & have)


def statements(tree: ast.Module, scope: str) -> list[ast.stmt]:
    """The statements of a def or class (the module's for ""), in source order, nested ones
    too (context._flat); [] when the scope is not there once."""
    node = context.scope_node(tree, scope)
    if node is None:
        return []
    out: list[ast.stmt] = []
    context._flat(list(getattr(node, "body", ())), out)
    return out[:MAX_STATEMENTS]


MAX_ALIGN = 40_000  # statement pairs compared by likeness; beyond, equal statements only


def _alike(a: context.Stmt, b: context.Stmt) -> float:
    """Two statements' likeness for the alignment: 1 equal; else, for the same statement
    changed (its head's words mostly kept, or both compound headers of one kind), their
    token ratio when at least a half; else 0."""
    if a == b:
        return 1.0
    (ta, ha), (tb, hb) = a, b
    if not ta or not tb:
        return 0.0
    if ha or hb:
        if not (ha and hb and context._kept(ha, hb) >= 0.5):
            return 0.0
    elif ta.split(" ", 1)[0] != tb.split(" ", 1)[0]:
        return 0.0  # an `if` is not a `for`
    r = context._ratio(ta, tb)
    return r if r >= 0.5 else 0.0


def align(a: list, b: list) -> dict[int, int]:
    """Statement i of ``a`` -> statement j of ``b`` (``context.Stmt`` each): the in-order
    pairing of the most total likeness (``_alike``), as a diff pairs lines, with changed
    statements paired too."""
    n, m = len(a), len(b)
    if n * m > MAX_ALIGN:
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        return {i + k: j + k for i, j, size in sm.get_matching_blocks() for k in range(size)}
    like = [[_alike(x, y) for y in b] for x in a]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            pair = best[i + 1][j + 1] + like[i][j] if like[i][j] else 0.0
            best[i][j] = max(best[i + 1][j], best[i][j + 1], pair)
    out, i, j = {}, 0, 0
    while i < n and j < m:
        if like[i][j] and best[i][j] == best[i + 1][j + 1] + like[i][j]:
            out[i], i, j = j, i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return out


def _aligned_line(home: Optional[ast.Module], ident: identity.Identity, tree: ast.Module, scope: str, home_scope: str):
    """The line of the statement of ``scope`` that the site's home scope, aligned with it
    statement by statement, pairs the site with; None when it pairs it with none."""
    if home is None:
        return None
    got = aligned(home, ident, tree, scope, home_scope)
    return got.lineno if got is not None else None


def aligned(home: ast.Module, ident: identity.Identity, tree: ast.Module, scope: str, home_scope: str):
    """The statement of ``scope`` (in ``tree``) that the alignment of the site's home scope
    with it pairs the site with, or None."""
    site = ident.sites[0]
    if site.at is None:
        return None
    mine = statements(home, home_scope)
    stmts = [context.stmt(s) for s in mine]
    want = site.block[site.at][0]
    at = [k for k, st in enumerate(stmts) if st[0] == want]
    if len(at) > 1:  # the same statement twice in its home scope: the one with the site's context lines
        at = [k for k in at if context.of_site(home, mine[k].lineno, site.file, home_scope).near == site.near]
    if len(at) != 1:
        return None
    theirs = statements(tree, scope)
    j = align(stmts, [context.stmt(s) for s in theirs]).get(at[0])
    return theirs[j] if j is not None else None


def break_tie(session, recipe: Recipe, op: OpSpec, ident: identity.Identity, ranked, docs: dict):
    """Of candidates that tie (each passes the threshold, none leads by the margin), all in
    one scope of one file, the one the alignment of the site's home scope with that scope
    pairs the site with (``aligned``); None when they are not so, or it pairs it with none.
    ``docs``: file -> Document of the candidates."""
    if op.impl.language != "python" or len(ident.sites) != 1 or not ranked:
        return None
    tied = [c for c in ranked if c.score >= identity.THRESHOLD and ranked[0].score - c.score < identity.MARGIN]
    if len(tied) < 2 or len({(c.file, c.scope) for c in tied}) != 1 or not tied[0].scope:
        return None
    home = next((r for label, r in identity._homes(session, recipe, op) if label == ident.release), None)
    home_tree = _parsed(home, op.file)
    f = docs.get(tied[0].file)
    if home_tree is None or f is None or f.tree is None:
        return None
    s = aligned(home_tree, ident, f.tree, tied[0].scope, op.scope)
    if s is None:
        return None
    return next((c for c in tied if c.line is not None and s.lineno <= c.line <= (s.end_lineno or s.lineno)), None)


def identify(
    ident: identity.Identity, f, scope: str, home: Optional[ast.Module] = None, home_scope: str = ""
) -> tuple[str, list[identity.Candidate]]:
    """The statement of ``scope`` in document ``f`` that is the site by its identity alone:
    (answer, candidates best first).  The answer is identity.decide's; where candidates
    pass the threshold but none leads by the margin (a sibling branch alike but for a
    value), the tie is broken by the alignment of the site's home scope with this one
    (``align``, a diff of their statements): the tied candidate it pairs the site with is
    the site ("moved", first, its parts saying "aligned"), and none, still ambiguous."""
    tree = f.tree
    if tree is None or len(ident.sites) != 1:
        return "missing", []  # a site of several places is not one statement
    imports = context.imports_of(tree, f.logical)
    ranked = []
    for s in statements(tree, scope):
        ctx = context.of_site(tree, s.lineno, f.logical, scope, imports)
        if ctx.at is None or not ctx.block[ctx.at][0]:
            continue
        value, parts = identity.score(ident, (ctx,))
        ranked.append(identity.Candidate(f.logical, scope, s.lineno, value, parts))
    ranked.sort(key=lambda c: -c.score)
    verdict = identity.decide(ranked)
    if verdict != "ambiguous":
        return verdict, ranked
    line = _aligned_line(home, ident, tree, scope, home_scope)
    tied = [c for c in ranked if c.score >= identity.THRESHOLD and ranked[0].score - c.score < identity.MARGIN]
    pick = next((c for c in tied if c.line == line), None)
    if pick is None:
        return verdict, ranked
    rest = [c for c in ranked if c is not pick]
    return "moved", [identity.Candidate(pick.file, pick.scope, pick.line, pick.score, (*pick.parts, "aligned")), *rest]


def _parsed(ref, logical: str) -> Optional[ast.Module]:
    data = ref.read(logical) if ref is not None else None
    try:
        return pyast.parsed(data.decode("utf-8", "surrogateescape")) if data is not None else None
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _text_at(tree: ast.Module, line: int) -> str:
    block, at = context.site_block(tree, line)
    return context.stmt(block[at])[0] if at is not None else ""


def upstream_in_place(session, recipe: Recipe, op: OpSpec, f) -> Optional[tuple[Optional[int], str]]:
    """(line, why) where the op's named scope holds its edit at the statement identified as
    its site, and the pristine release holds that statement there too; (None, why) where it
    holds the edit and no pristine release can be read to tell whose it is; None otherwise."""
    if op.impl.language != "python" or not op.scope or not f.exists or not f.is_python:
        return None
    ident = identity.of(session, recipe, op)
    if ident is None:
        return None
    home = next((r for label, r in identity._homes(session, recipe, op) if label == ident.release), None)
    if home is None:
        return None
    verdict, ranked = identify(ident, f, op.scope, _parsed(home, op.file), op.scope)
    if verdict != "moved":  # "moved" here: identified (identify)
        return None
    edit = _edit_cached(session, recipe, op, ident.release, home)
    if edit is None:
        return None
    best = ranked[0]
    tree = f.tree
    text = _text_at(tree, best.line)
    if not holds(text, edit):
        return None
    ref = session.reference(op.engine)
    if not ref.available:
        return None, (
            f"the statement identified as the site ({f.logical}:{best.line}) holds this edit in other words;"
            f" whose it is cannot be told (no pristine release to compare: {ref.why_not})"
        )
    data = ref.read(f.logical)
    if data is None:
        return None
    if data != f.original:
        try:
            theirs = ast.parse(data.decode("utf-8", "surrogateescape"))
        except (SyntaxError, ValueError):
            return None
        if not any(context.stmt(s)[0] == text for s in statements(theirs, op.scope)):
            return None
    runner = f"; runner-up {ranked[1].describe()}" if len(ranked) > 1 else ""
    return best.line, (
        f"{ref.what} has this edit in its own words at {f.logical}:{best.line}, the statement identified as the"
        f" site by its context (similarity {best.score:.2f} to the site as in {ident.release}:"
        f" {', '.join(best.parts)}{runner}); its pattern no longer matches there"
    )


# -- a site whose statement changed, in a scope that moved (relocation found no pattern) ----------

MAX_FILES = 64  # files holding the site's rarest word, as relocate.MAX_CANDIDATES
MOST = 0.6  # of the site statement's words a file must hold (an argument renamed, say)


def _qualname(tree: ast.Module, line: int) -> str:
    """The qualified name of the innermost def or class holding ``line`` ("" at module level)."""
    names, body = [], tree.body
    while body:
        s = next((s for s in body if context._spans(s, line)), None)
        if s is None:
            break
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if s.lineno == line:
                break  # the def's own header: it is the site, in its enclosing scope
            names.append(s.name)
        body = [c for b in context._blocks(s) for c in b]
    return ".".join(names)


def changed_elsewhere(session, op: OpSpec, ident: identity.Identity) -> list[tuple[object, identity.Candidate]]:
    """(document, candidate) for each statement of the engine's tree like the site's own
    (its head the same, or half its tokens), in a file holding most of its words, scored
    against the identity, best first: where the site went when its pattern changed with the
    move (an argument renamed as a class and module were)."""
    from patchkit.core import relocate

    if op.impl.language != "python" or not op.scope or len(ident.sites) != 1 or ident.sites[0].at is None:
        return []
    site = ident.sites[0]
    text, head = site.block[site.at]
    words = [w for w in dict.fromkeys(_words(text)) if len(w) > 3]
    if not text or not words:
        return []
    target = session.sweep(op.engine)
    rare = max(words, key=len)
    files = relocate.candidates(target, ".py", (rare.encode(),))
    if len(files) > MAX_FILES:
        return []
    out = []
    for logical, data in relocate.read_each(files):
        if sum(w.encode() in data for w in words) < MOST * len(words):
            continue
        f = session.file(op.engine, logical)
        tree = f.tree if f.exists and f.is_python else None
        if tree is None:
            continue
        imports = context.imports_of(tree, logical)
        for s in ast.walk(tree):
            if not isinstance(s, ast.stmt) or isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            mine, their_head = context.stmt(s)
            if not mine or not ((head and their_head == head) or context._ratio(text, mine) >= 0.5):
                continue
            scope = _qualname(tree, s.lineno)
            if not scope:
                continue  # code of a def or class does not move to module level (judge._relocate)
            ctx = context.of_site(tree, s.lineno, logical, scope, imports)
            value, parts = identity.score(ident, (ctx,))
            out.append((f, identity.Candidate(logical, scope, s.lineno, value, parts)))
    out.sort(key=lambda fc: -fc[1].score)
    return out
