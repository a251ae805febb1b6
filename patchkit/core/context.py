"""A site's context, and how much of it a candidate has (the site identity of identity.py).

A context is a value (``Context``): the statements of the block the site stands in, the
site's position there, the qualified name and header of the enclosing def or class, and,
for the original, what its file imports.  It is built from an ``ast`` (``of_site``,
``of_scope``) or a text file's lines (``of_lines``), and ``similarity`` compares two of
them; neither reads a file.

A statement is compared as a normalised token sequence: ``ast.unparse`` of it (layout,
comments and quoting gone; a compound statement by its header, a def or class by its name
and signature), together with its *head*, the name it binds or calls (``x``/``self.x`` of
an assignment, ``f`` of a call, ``def f``).  A statement that names nothing (``pass``,
``return None``) is no context.  ``similarity`` weighs the parts of the original's context
a candidate has, each part 1, into a share in [0, 1]: the scope, the site's own statement,
each of NEAR (3) statements before and after it (a diff hunk's context lines, which run
across the blocks around it: an enclosing ``if``'s header, the statements before that), the
rest of its block, and (a bonus, for a candidate alike already) the file the code left importing
the candidate's module.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from patchkit.core import folds

NEAR = 3  # statements before and after the site that are its "context lines"

Stmt = tuple[str, str]  # (normalised text, head); ("", "") is no context
_NOTHING: Stmt = ("", "")


@dataclass(frozen=True)
class Context:
    """What surrounds a site.  ``block``: the statements of the block it stands in, in
    order; ``at``: the index of the site's statement there, or None when the site itself
    is not known (then ``block`` is the named scope's body, all of it siblings);
    ``imports``: (module, name) pairs its file imports (name "" for ``import module``)."""

    file: str = ""
    scope: str = ""
    block: tuple[Stmt, ...] = ()
    at: Optional[int] = None
    imports: frozenset = frozenset()
    # The innermost enclosing def or class as (name words, parameters or bases), for a
    # scope that was renamed: ``apply_x_fusion(batch_size: int)`` -> ``x_fusion_applies(...)``.
    header: tuple = ()
    # The NEAR statements before (nearest first) and after the site as a diff shows them,
    # across the blocks around it (``site_run``); () for the site's own block's.
    near: tuple = ()
    # The ifs around the site with the arm it is in, and the if/else it would fold out of
    # (folds.py): both the site's own, in the home release.
    arms: tuple = ()
    fold: tuple = ()
    # Where the names the site's statement binds flow next (``feeds``): the calls of its def
    # that take one of them as an argument, as ``callee(keyword=)`` or ``callee(#i)``.
    feeds: tuple = ()

    @property
    def before(self) -> tuple[Stmt, ...]:
        """Up to NEAR statements before the site, nearest first."""
        if self.near:
            return self.near[0]
        return () if self.at is None else tuple(reversed(self.block[max(0, self.at - NEAR) : self.at]))

    @property
    def after(self) -> tuple[Stmt, ...]:
        if self.near:
            return self.near[1]
        return () if self.at is None else self.block[self.at + 1 : self.at + 1 + NEAR]

    @property
    def others(self) -> tuple[Stmt, ...]:
        """The block without the site's statement."""
        return self.block if self.at is None else self.block[: self.at] + self.block[self.at + 1 :]

    @property
    def siblings(self) -> tuple[Stmt, ...]:
        """The block without the site's statement and its NEAR neighbours."""
        if self.at is None:
            return self.block
        return self.block[: max(0, self.at - NEAR)] + self.block[self.at + 1 + NEAR :]


# -- scoring helpers (pure) ----------------------------------------------------------------


def _match(st: Stmt, texts: set, heads: set, exact: float, head: float) -> float:
    text, h = st
    return exact if text in texts else head if h and h in heads else 0.0


def _pool(stmts: tuple[Stmt, ...]) -> tuple[set, set]:
    return {t for t, _ in stmts if t}, {h for t, h in stmts if t and h}


def _chain(scope: str) -> list[str]:
    return [p.lstrip("_") for p in scope.split(".") if p]


def module_of(logical: str) -> str:
    """``sglang/srt/x/y.py`` -> ``sglang.srt.x.y`` (a package's ``__init__`` -> the package)."""
    mod = logical[:-3] if logical.endswith(".py") else logical
    mod = mod.replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


# -- building contexts from code (pure, over ast) ------------------------------------------

_IDENT = re.compile(r"[A-Za-z_]\w*")


def _unparse(node) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, TypeError, AttributeError, RecursionError):  # a node unparse cannot print
        return ast.dump(node)


def _header(s: ast.stmt) -> str:
    """A compound statement by its header; a def or class by its name and signature."""
    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def {s.name}({_unparse(s.args)})"
    if isinstance(s, ast.ClassDef):
        return f"class {s.name}({', '.join(_unparse(b) for b in [*s.bases, *s.keywords])})"
    if isinstance(s, (ast.If, ast.While)):
        return f"{type(s).__name__.lower()} {_unparse(s.test)}"
    if isinstance(s, (ast.For, ast.AsyncFor)):
        return f"for {_unparse(s.target)} in {_unparse(s.iter)}"
    if isinstance(s, (ast.With, ast.AsyncWith)):
        return "with " + ", ".join(_unparse(i) for i in s.items)
    if hasattr(ast, "Match") and isinstance(s, ast.Match):
        return f"match {_unparse(s.subject)}"
    return "try"  # Try/TryStar: its header names nothing


def _head(s: ast.stmt) -> str:
    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def {s.name}"
    if isinstance(s, ast.ClassDef):
        return f"class {s.name}"
    if isinstance(s, ast.Assign):
        return " = ".join(_unparse(t) for t in s.targets)
    if isinstance(s, (ast.AnnAssign, ast.AugAssign)):
        return _unparse(s.target)
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
        return _unparse(s.value.func) + "()"
    return ""


# Keyed by the node itself (ast nodes hash and compare by identity, and the cache holds each
# key, so an entry is only ever found again by its own node); patchkit never changes a parsed
# tree.  The context of each statement of a scope (edited.identify, identity's candidates)
# holds every sibling: unparsed once each, not once per statement of the block.
@lru_cache(maxsize=1 << 16)
def stmt(s: ast.stmt) -> Stmt:
    """A statement as context: (normalised text, head), or ("", "") when it names nothing."""
    text = _header(s) if any(getattr(s, f, None) for f in _BODIES) else _unparse(s)
    if not any(not keyword.iskeyword(w) for w in _IDENT.findall(text)):
        return _NOTHING
    return text, _head(s)


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _first(s: ast.stmt) -> int:
    return min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))])


def _spans(s: ast.stmt, line: int) -> bool:
    return _first(s) <= line <= (s.end_lineno or s.lineno)


def _blocks(s: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists nested directly in ``s`` (except handlers' and match cases' bodies too)."""
    out = []
    for name in _BODIES:
        items = getattr(s, name, None) or []
        if items and isinstance(items[0], ast.stmt):
            out.append(items)
        else:
            out += [c.body for c in items if getattr(c, "body", None)]
    return out


def site_block(tree: ast.Module, line: int) -> tuple[list[ast.stmt], Optional[int]]:
    """The innermost block holding a statement whose own text holds ``line``, and that
    statement's index there (None when no statement spans the line)."""
    body: list[ast.stmt] = tree.body
    while True:
        i = next((k for k, s in enumerate(body) if _spans(s, line)), None)
        if i is None:
            return body, None
        inner = next((b for b in _blocks(body[i]) if any(_spans(c, line) for c in b)), None)
        if inner is None:
            return body, i
        body = inner


def _flat(body: list[ast.stmt], out: list[ast.stmt]) -> None:
    """Statements in source order, a compound one's header before its nested statements;
    a def or class is one statement (its header), as it is to its enclosing code."""
    for s in body:
        out.append(s)
        if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for b in _blocks(s):
                _flat(b, out)


def site_run(tree: ast.Module, line: int) -> tuple[list[ast.stmt], Optional[int]]:
    """The statements of the innermost def or class holding ``line`` (the module's, outside
    any), flattened in source order as a diff shows lines (``_flat``), and the index there of
    the innermost statement whose own text holds ``line`` (None when none does).  A site
    alone in its block (``if not user_set_decode:`` over one assignment) still has context
    lines: its enclosing headers and the statements of the blocks around it."""
    block, at = site_block(tree, line)
    if at is None:
        return block, None
    site = block[at]
    owner: list[ast.stmt] = tree.body
    body = tree.body
    while True:  # the innermost def/class holding the site's line
        s = next((s for s in body if _spans(s, line)), None)
        if s is None or s is site:
            break
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            owner = s.body
        body = [c for b in _blocks(s) for c in b]
    run: list[ast.stmt] = []
    _flat(owner, run)
    return run, next((k for k, s in enumerate(run) if s is site), None)


def _near_nodes(tree: ast.Module, line: int) -> tuple:
    """(before, nearest first; after): the NEAR statements of ``site_run`` that name
    something, around the site, as nodes; () when no statement holds the line."""
    run, at = site_run(tree, line)
    if at is None:
        return ()
    before, after = list(reversed(run[:at])), run[at + 1 :]
    return tuple([s for s in side if stmt(s)[0]][:NEAR] for side in (before, after))


def _if_path(tree: ast.Module, line: int) -> list[tuple[ast.If, bool]]:
    """The ifs whose arm holds the statement starting at ``line``, outermost first, each with
    whether it is the true arm, inside the innermost def or class holding it (an enclosing
    function's ifs are another scope's)."""
    out: list[tuple[ast.If, bool]] = []
    body = tree.body
    while body:
        s = next((s for s in body if _spans(s, line)), None)
        if s is None:
            break
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out = []
        if isinstance(s, ast.If):
            if any(_spans(c, line) for c in s.body):
                out.append((s, True))
            elif any(_spans(c, line) for c in s.orelse):
                out.append((s, False))
            else:
                break  # the site is the if's own header
        body = [c for b in _blocks(s) for c in b]
    return out


def arms(tree: ast.Module, line: int) -> tuple:
    """((condition, in its true arm), ...) of the ifs around a site (folds.py)."""
    return tuple((_unparse(s.test), side) for s, side in _if_path(tree, line))


def _one_target(s) -> Optional[str]:
    return _unparse(s.targets[0]) if isinstance(s, ast.Assign) and len(s.targets) == 1 else None


def fold(tree: ast.Module, line: int, site: ast.stmt, before: list, after: list) -> tuple:
    """The if/else a site's assignment would fold out of (folds.py; ``before``/``after``: the
    nodes of its context lines, nearest first): (condition, site in the true arm, its value,
    the other arm's, indices of the context lines the fold takes in: the if's header and the
    other arm's statements), or () when the innermost if/else around it does not fold: its
    arms must be the same statements, in order, but for the site's value."""
    target = _one_target(site)
    if target is None:
        return ()
    for node, side in reversed(_if_path(tree, line)):
        if not node.orelse:
            continue
        a: list[ast.stmt] = []
        b: list[ast.stmt] = []
        _flat(node.body if side else node.orelse, a)
        _flat(node.orelse if side else node.body, b)
        at = next((k for k, s in enumerate(a) if s is site), None)
        if at is None or len(a) != len(b) or _one_target(b[at]) != target:
            return ()
        if any(stmt(x) != stmt(y) for k, (x, y) in enumerate(zip(a, b, strict=True)) if k != at):
            return ()
        va, vb = _unparse(site.value), _unparse(b[at].value)
        if va == vb:
            return ()
        gone = {id(node), *(id(s) for s in b)}
        took = [tuple(k for k, s in enumerate(nodes) if id(s) in gone) for nodes in (before, after)]
        return (_unparse(node.test), side, va, vb, *took)
    return ()


def _own_nodes(s: ast.stmt):
    """The nodes of a statement's own text: a compound statement's header, never the
    statements nested in it (they come after it in a flattened run)."""
    todo = [s]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, (ast.stmt, ast.excepthandler)))


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def feeds(tree: ast.Module, line: int) -> tuple:
    """Where the names a site's statement binds (``x = ...``, ``x: T = ...``) flow next, in
    the statements of its def after it (``site_run``), until a statement binds the name again:
    each call that takes one as a whole argument, as ``callee(keyword=)`` or ``callee(#i)``
    (the callee by its last name: a method that became a function keeps it).  Sorted; () for
    a site that binds no plain name, or whose names feed no call."""
    block, k = site_block(tree, line)
    site = block[k] if k is not None else None
    targets = site.targets if isinstance(site, ast.Assign) else [site.target] if isinstance(site, ast.AnnAssign) else []
    live = {t.id for t in targets if isinstance(t, ast.Name)}
    if not live:
        return ()  # binds no plain name: nothing to follow (the def's run is not walked)
    run, at = site_run(tree, line)
    if at is None:
        return ()
    out: set = set()
    for s in run[at + 1 :]:
        if not live:
            break
        for n in _own_nodes(s):
            if not isinstance(n, ast.Call) or not _callee(n):
                continue
            for i, a in enumerate(n.args):
                if isinstance(a, ast.Name) and a.id in live:
                    out.add(f"{_callee(n)}(#{i})")
            for k in n.keywords:
                if k.arg and isinstance(k.value, ast.Name) and k.value.id in live:
                    out.add(f"{_callee(n)}({k.arg}=)")
        bound = (
            s.targets
            if isinstance(s, ast.Assign)
            else [s.target]
            if isinstance(s, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        live -= {t.id for t in bound if isinstance(t, ast.Name)}
    return tuple(sorted(out))


def of_site(tree: ast.Module, line: int, file: str, scope: str, imports: frozenset = frozenset()) -> Context:
    """The context of a site starting at ``line`` of a parsed Python file: its own block
    (siblings), its context lines across the blocks around it (``site_run``), the arms of the
    ifs around it and the fold it sits in (folds.py)."""
    block, at = site_block(tree, line)
    nodes = _near_nodes(tree, line) if at is not None else ()
    near = tuple(tuple(stmt(s) for s in side) for side in nodes)
    folded = fold(tree, line, block[at], *nodes) if nodes else ()
    return Context(
        file,
        scope,
        tuple(stmt(s) for s in block),
        at,
        imports,
        enclosing(tree, line),
        near,
        arms(tree, line),
        folded,
        feeds(tree, line) if at is not None else (),
    )


_WORD = re.compile(r"[A-Z]?[a-z]+\d*|[A-Z]+\d*(?![a-z])|\d+")


def name_words(name: str) -> tuple[str, ...]:
    """``apply_flashinfer_allreduce`` -> (apply, flashinfer, allreduce); ``ServerArgs`` ->
    (server, args); ``is_sm120_supported`` -> (is, sm120, supported)."""
    return tuple(w.lower() for w in _WORD.findall(name))


def enclosing(tree: ast.Module, line: int) -> tuple:
    """(name words, parameters or bases) of the innermost def or class holding ``line``;
    () at module level.  ``self`` and ``cls`` are no parameters: every method has them."""
    node, body = None, tree.body
    while body:
        s = next((s for s in body if _spans(s, line)), None)
        if s is None:
            break
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node = s
        body = [c for b in _blocks(s) for c in b]
    if node is None:
        return ()
    if isinstance(node, ast.ClassDef):
        params = ", ".join(_unparse(b) for b in [*node.bases, *node.keywords])
    else:
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params = ", ".join(_unparse(a) for a in every if a.arg not in ("self", "cls"))
        params += "".join(f", *{a.arg}" for a in (args.vararg, args.kwarg) if a is not None)
    return name_words(node.name), params


def scope_node(tree: ast.Module, qualname: str):
    """The def/class ``qualname`` (the module for ""), or None when it is not there once
    (as pyscope.resolve finds scopes: directly in the enclosing body)."""
    node: object = tree
    for part in [p for p in qualname.split(".") if p]:
        hits = [
            d
            for d in getattr(node, "body", ())
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and d.name == part
        ]
        if len(hits) != 1:
            return None
        node = hits[0]
    return node


def scope_body(tree: ast.Module, qualname: str) -> Optional[list[ast.stmt]]:
    """The body of def/class ``qualname`` (the module's for ""), or None (``scope_node``)."""
    node = scope_node(tree, qualname)
    return None if node is None else list(getattr(node, "body", ()))


def of_scope(tree: ast.Module, file: str, scope: str, imports: frozenset = frozenset()) -> Optional[Context]:
    """The context of a site that is not known, from its scope's statements; None when the
    scope is not there."""
    body = scope_body(tree, scope)
    return None if body is None else Context(file, scope, tuple(stmt(s) for s in body), None, imports)


def imports_of(tree: ast.Module, logical: str) -> frozenset:
    """(module, name) of every import in a file, anywhere in its statements; relative
    imports resolved against the file's package."""
    package = module_of(logical).split(".")
    if not logical.endswith("__init__.py"):
        package = package[:-1]
    out = set()
    todo = list(tree.body)
    while todo:
        s = todo.pop()
        if isinstance(s, ast.Import):
            out |= {(a.name, "") for a in s.names}
        elif isinstance(s, ast.ImportFrom):
            base = package[: len(package) - s.level + 1] if s.level else []
            mod = ".".join([*base, *(s.module.split(".") if s.module else [])])
            out |= {(mod, a.name) for a in s.names}
            out |= {(f"{mod}.{a.name}", "") for a in s.names}  # `from pkg import module`
        else:
            for b in _blocks(s):
                todo += b
    return frozenset(out)


def of_lines(text: str, line: int, file: str) -> Context:
    """A text file's site: its non-blank lines, whitespace collapsed, are the block."""
    block, at = [], None
    for n, ln in enumerate(text.splitlines(), 1):
        norm = " ".join(ln.split())
        if n == line:
            at = len(block)
        if norm:
            block.append((norm, ""))
        elif n == line:
            block.append(_NOTHING)
    return Context(file, "", tuple(block), at)


# -- similarity: is a candidate the same site? (identity.py) -------------------------------

W_SCOPE, W_SITE, W_NEAR, W_SIBLINGS = 1.0, 1.0, 1.0, 1.0
W_IMPORT = 1.0
# The file the code left importing a candidate's module says where code went, not what it
# is: it counts only for a candidate that has two fifths of the site's identity on its own.
# Unrelated code is not made the site by it (a `"trtllm"` in a field of a module that
# server_args.py imports read 0.06 alike, and 0.53 with the import counted; the fp8
# branch's default beside the moved bf16 one, 0.36), a moved field with its neighbours is
# (SGLang 0.5.20's Schedule.max_running_requests, 0.46).
IMPORT_FLOOR = 0.4
# The site's own statement, token for token, whose names flow into the same parameters of the
# same calls (``feeds``): data flow says what the statement is for, where the lines around it
# moved (a method made a module function, its buffer set up before the branch).  It counts 1
# more, as the import does, and only for a candidate holding the site's statement whole.
W_FEEDS = 1.0
# A string literal is one token (a long help text is one change, not fifty).
_TOKEN = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\w+|[^\w\s]")


def _ratio(a: str, b: str) -> float:
    """How alike two normalised statements are: the share of their tokens in common
    (difflib's ratio over token sequences, as git scores a rename over lines)."""
    if a == b:
        return 1.0
    import difflib

    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio() if ta and tb else 0.0


_HEADERS = ("if", "while", "for", "with")


def _neighbour(st: Stmt, near: tuple[Stmt, ...], texts: set, heads: set, python: bool = False) -> float:
    """A context statement of the original in a candidate: 1 when it stands within NEAR on
    the same side; a statement there that binds or calls the same name, changed, counts
    0.5 and half again as its tokens are alike.  Elsewhere in the candidate's block it
    counts only 0.25 (0.125 for the name): context lines are context by where they stand,
    and a look-alike in the site's own block has every statement of it somewhere."""
    best = 0.0
    for t, h in near:
        if t == st[0]:
            return 1.0
        if h and h == st[1]:
            best = max(best, 0.5 + 0.5 * _ratio(st[0], t))
        elif h and st[1] and _kept(h, st[1]) >= 0.5:
            # The same binding or call renamed (``self.nsa_x = a`` -> ``self.dsa_x = a``: most
            # of its name's words kept): as alike as its tokens, when most of them are kept.
            # Never another name (``b: int = 0`` is not ``a: int = 0``), nor a text file's
            # line (no head: C++ lines alike by half their tokens abound).
            r = _ratio(st[0], t)
            best = max(best, r if r >= 0.5 else 0.0)
        elif python and not h and not st[1] and t.split(" ", 1)[0] == st[0].split(" ", 1)[0] in _HEADERS:
            # The same compound statement with its header changed (`if a or b` -> `if c and
            # (a or b)`): half as much as its tokens are alike (any `if` looks like an `if`).
            r = _ratio(st[0], t)
            best = max(best, 0.5 * r if r >= 0.5 else 0.0)
    return max(best, _match(st, texts, heads, 0.25, 0.125))


def _kept(a: str, b: str) -> float:
    """The share of two names' words they have in common (Jaccard)."""
    wa, wb = set(name_words(a)), set(name_words(b))
    return len(wa & wb) / len(wa | wb) if wa | wb else 0.0


def _renamed(a: tuple, b: tuple) -> float:
    """How alike two enclosing defs or classes are, by name words shared (Jaccard) and,
    when they have any, their parameters (bases): a renamed scope keeps some of both."""
    if not a or not b:
        return 0.0
    wa, wb = set(a[0]), set(b[0])
    words = len(wa & wb) / len(wa | wb) if wa | wb else 0.0
    if not a[1] and not b[1]:
        return words / 2  # nothing but the name to go by
    return (words + _ratio(a[1], b[1])) / 2


def similarity(original: Context, cand: Context) -> tuple[float, tuple[str, ...]]:
    """How much of the original site's identity a candidate has, in [0, 1], and the parts
    that matched (for messages).  Each part weighs 1, and the score is the share matched:

    * ``scope`` (Python): the qualified name the same, or the share of its names kept;
    * ``site``: the site's own statement, compared by its tokens (``_ratio``);
    * each of the NEAR statements before and after it (a diff hunk's context lines): 1 when
      the candidate has it within NEAR on the same side, 0.5 when further away, or when only
      its head (the name it binds or calls) is the same;
    * ``siblings``: the share of the rest of the original's block the candidate's block holds.

    The file the code left importing the candidate's module counts 1 more (``imported``),
    up to the whole, for a candidate that has IMPORT_FLOOR of the rest.  A part the original
    does not have (no scope in a text file, no site when only the scope is known) is not
    counted either way."""
    num = den = 0.0
    parts: list[str] = []
    python = original.file.endswith(".py")
    if python:
        den += W_SCOPE
        if original.scope == cand.scope:
            num += W_SCOPE
            parts.append("scope")
        else:
            mine, theirs = _chain(original.scope), _chain(cand.scope)
            kept = len(set(mine) & set(theirs)) / len(mine) if mine else 0.0
            renamed = _renamed(original.header, cand.header)
            if renamed > kept:
                num += W_SCOPE * renamed
                parts.append(f"scope renamed {renamed:.0%}")
            elif kept:
                num += W_SCOPE * kept
                parts.append(f"scope {kept:.0%}")
    against = folds.opposite(original.arms, cand.arms)
    if against is not None:  # the other arm of the site's own if: another site (folds.py)
        return 0.0, (f"in the other arm of `if {against}`",)
    site_text = cand.block[cand.at][0] if cand.at is not None and cand.at < len(cand.block) else ""
    unfolded = folds.unfold(original.fold, site_text) if original.fold and site_text else None
    folded: tuple = ((), ())
    if unfolded is not None:  # its if's header and other arm are in this statement now
        site_text, folded = unfolded, original.fold[4:6]
        parts.append(f"folded `if {original.fold[0]}`")
    whole = False  # the candidate holds the site's own statement, token for token
    if original.at is not None and cand.at is not None and original.block[original.at][0]:
        r = _ratio(original.block[original.at][0], site_text)
        den += W_SITE
        num += W_SITE * r
        whole = r == 1
        if r:
            parts.append("site" if r == 1 else f"site {r:.0%}")
    texts, heads = _pool(cand.others)
    for side, mine, theirs, gone in (
        ("before", original.before, cand.before, folded[0]),
        ("after", original.after, cand.after, folded[1]),
    ):
        want = [st for st in mine if st[0]]
        if not want:
            continue
        got = sum(1.0 if k in gone else _neighbour(st, theirs, texts, heads, python) for k, st in enumerate(want))
        den += W_NEAR * len(want)
        num += W_NEAR * got
        if got:
            parts.append(f"{side} {got:.2g}/{len(want)}")
    sib = [st for st in original.siblings if st[0]]
    if sib:
        share = sum(1 for st in sib if st[0] in texts) / len(sib)
        den += W_SIBLINGS
        num += W_SIBLINGS * share
        if share >= 0.005:
            parts.append(f"siblings {share:.0%}")
    alike = num / den if den else 0.0
    if whole and original.feeds and set(original.feeds) <= set(cand.feeds):
        num += W_FEEDS
        parts.append("feeds " + ", ".join(original.feeds))
    if original.imports and cand.file and cand.file != original.file and alike >= IMPORT_FLOOR:
        mod, top = module_of(cand.file), cand.scope.split(".", 1)[0]
        if (mod, top) in original.imports if top else any(m == mod for m, _ in original.imports):
            num += W_IMPORT
            parts.append("imported")
    return (min(1.0, num / den) if den else 0.0), tuple(parts)
