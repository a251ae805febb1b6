"""libcst helpers shared by the Python ops: parsing snippets, comparing code, walking,
and inserting into / removing from comma-separated sequences without losing bytes."""

from __future__ import annotations

import ast
import dataclasses
import io
import keyword
import re
import textwrap
import tokenize
from functools import lru_cache
from typing import Iterator, Optional, Sequence

import libcst as cst

from patchkit.core.ops import OpParamError

_EMPTY = cst.Module(body=[])
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


# Parsed once per text for the process: libcst takes ~0.1 s per 1,000 lines, and one process
# judges the same release files again and again (each command's session, each release of a
# `drift --across` worker, each test).  A module is immutable, so sharing it is safe, and the
# node-keyed caches below then hit across sessions too.  Bounded: the biggest release files
# make modules of a few MB each.
@lru_cache(maxsize=32)
def parsed(text: "str | bytes") -> cst.Module:
    """``cst.parse_module(text)``, the same Module for the same text (its exceptions, every
    time).  Bytes are decoded as libcst decodes a file (PEP 263)."""
    return cst.parse_module(text)


@lru_cache(maxsize=4096)
def tokens(src: str) -> tuple[str, ...]:
    """Python tokens of ``src`` without comments, newlines and indentation.

    Two pieces of code with equal tokens differ only in layout and comments.
    """
    try:
        toks = tokenize.generate_tokens(io.StringIO(textwrap.dedent(src)).readline)
        return tuple(t.string for t in toks if t.type not in _SKIP)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return tuple(src.split())


def word_sequence(src: str) -> Optional[list[str]]:
    """Identifiers and string contents of code, in order and repeated as they stand; None
    when it does not tokenize."""
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
        return None
    return out


@lru_cache(maxsize=1024)
def words(src: str) -> tuple[str, ...]:
    """Identifiers and string contents of a code fragment: text that any code holding
    the fragment contains, whatever its layout (prefilters for relocation and views)."""
    seq = word_sequence(src)
    return tuple(dict.fromkeys([src] if seq is None else seq))


def ast_near(tree: ast.Module, lines: Sequence[int]) -> Iterator[ast.AST]:
    """The ``ast`` nodes of the statements spanning one of ``lines`` (1-based, sorted).
    Other statements are skipped whole, so a few hits do not cost a walk of the file."""
    import bisect

    def exprs(value):
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, ast.AST):
                yield from ast.walk(v)

    todo: list = list(tree.body)
    while todo:
        node = todo.pop()
        k = bisect.bisect_left(lines, node.lineno)
        if k == len(lines) or lines[k] > (node.end_lineno or node.lineno):
            continue
        yield node
        for name, value in ast.iter_fields(node):
            if name in ("body", "orelse", "finalbody"):
                todo += value
            elif name in ("handlers", "cases"):
                for h in value:
                    yield from exprs([getattr(h, f, None) for f in ("type", "pattern", "guard")])
                    todo += h.body
            else:
                yield from exprs(value)


# Keyed by the node itself, not by id(node): an id is reused once its node is garbage
# collected, so an id-keyed cache could hand one node's tokens to another.  libcst nodes
# hash and compare by identity (CSTNode.__eq__/__hash__), and the cache holds each key, so
# an entry can only ever be found again by the very node it was made for.  Trees are
# immutable and an edit shares every untouched subtree, so a statement is printed once
# per invocation, not once per op that reads it (planning `apply sm120` on whole files
# prints 120 nodes instead of 480, ~0.25 s less).  Bounded, unlike a plain dict, so it
# keeps no more than this many old subtrees alive.
@lru_cache(maxsize=1 << 16)
def node_tokens(node: cst.CSTNode) -> tuple[str, ...]:
    """tokens(code(node)), remembered per node (see above)."""
    return tokens(code(node))


@lru_cache(maxsize=1 << 14)
def meaning(src: str) -> str:
    """What an expression's code means: its ``ast``, with layout, comments, parentheses and
    spelling (quotes, ``0xA``) aside.  The post-conditions compare code this way, not by the
    tokens their ``locate`` matches with, so that the two are separate opinions."""
    try:
        return ast.dump(ast.parse(f"(\n{src}\n)", mode="eval").body)
    except SyntaxError:  # a starred element, a slice: its tokens, then
        return " ".join(tokens(src))


def node_meaning(node: cst.CSTNode) -> str:
    return meaning(code(node))


def contains_seq(hay: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if n == 0:
        return True
    first = needle[0]
    for i in range(len(hay) - n + 1):
        if hay[i] == first and tuple(hay[i : i + n]) == tuple(needle):
            return True
    return False


def parse_expr(src: str, field: str) -> cst.BaseExpression:
    try:
        return cst.parse_expression(src)
    except cst.ParserSyntaxError as e:
        raise OpParamError(field, f"is not a Python expression: {src!r} ({e.message})") from None


def parse_stmts(src: str, field: str) -> tuple[cst.BaseStatement, ...]:
    """Statements of a snippet; blank lines and comments above the first statement are kept."""
    try:
        mod = cst.parse_module(textwrap.dedent(src).rstrip("\n") + "\n")
    except cst.ParserSyntaxError as e:
        raise OpParamError(field, f"is not valid Python statements ({e.message})") from None
    if not mod.body:
        raise OpParamError(field, "holds no statement")
    body = list(mod.body)
    # parse_module puts leading blank lines/comments in Module.header; they belong to the
    # first statement.  A blank line must not take the block's indentation.
    header = [ln.with_changes(indent=False) if ln.comment is None else ln for ln in mod.header]
    body[0] = body[0].with_changes(leading_lines=(*header, *body[0].leading_lines))
    return tuple(body)


_FIELDS: dict[type, tuple[str, ...]] = {}

# Nodes that only lay code out: whitespace, comments, newlines, brackets, commas and the
# operator tokens (``or``, ``+``, ``==``).  They hold nothing but other such nodes, and
# nothing an op looks for is one, so ``walk`` leaves them out: two thirds of a module's
# nodes, so a walk is about 3x faster.
_LAYOUT = (
    cst.BaseParenthesizableWhitespace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Comment,
    cst.Newline,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
)
# What a field's value is, by its type: 0 not a node, 1 a node of code, 2 a layout node.
# Looked up by type, since isinstance(v, cst.CSTNode) goes through ABCMeta (slow).
_KIND: dict[type, int] = {}


def _kind(t: type) -> int:
    k = _KIND[t] = 0 if not issubclass(t, cst.CSTNode) else 2 if issubclass(t, _LAYOUT) else 1
    return k


def _children(node: cst.CSTNode, most: int) -> list:
    """The child nodes of ``node`` whose kind (``_KIND``) is at most ``most``, in field
    order, read straight from its dataclass fields (libcst's ``children`` rebuilds the node
    through a visitor, which is ~10x slower)."""
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(f.name for f in dataclasses.fields(node))
    out = []
    kinds = _KIND
    for name in names:
        v = getattr(node, name)
        k = kinds.get(type(v))
        if k is None:
            k = _kind(type(v))
        if k:
            if k <= most:
                out.append(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                k = kinds.get(type(x))
                if k is None:
                    k = _kind(type(x))
                if k and k <= most:
                    out.append(x)
    return out


def kids(node: cst.CSTNode) -> list:
    """The child nodes of ``node``, layout nodes included."""
    return _children(node, 2)


def walk(node: cst.CSTNode, layout: bool = False) -> Iterator[cst.CSTNode]:
    """Pre-order walk over ``node`` and its descendants, without the layout nodes
    (``_LAYOUT``) unless ``layout``: the nodes of code come in the same order either way."""
    most = 2 if layout else 1
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(_children(n, most)))


_SCOPES = (cst.FunctionDef, cst.ClassDef)


def blocks(scope: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, tuple]]:
    """Every statement list of ``scope`` itself: its body and the bodies of its if/for/
    while/with/try statements, outermost first, but not the bodies of nested defs and
    classes (those are scopes of their own)."""
    stack = [scope]
    while stack:
        n = stack.pop(0)
        if isinstance(n, _SCOPES) and n is not scope:
            continue
        if isinstance(n, (cst.Module, cst.IndentedBlock)):
            yield n, tuple(n.body)
        if isinstance(n, (cst.BaseExpression, cst.SimpleStatementLine)):
            continue  # no statement lists inside
        stack.extend(kids(n))


def _stmts(node):
    if isinstance(node, cst.Module):
        return node.body
    body = getattr(node, "body", None)
    return body.body if isinstance(body, cst.IndentedBlock) else None


def _with_stmts(node, stmts):
    if isinstance(node, cst.Module):
        return node.with_changes(body=stmts)
    return node.with_changes(body=node.body.with_changes(body=stmts))


def replace_node(scope: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """``scope`` with ``old`` replaced by ``new``.  Direct children of the scope's body are
    swapped in place; deeper nodes are swapped by ``path_replace``."""
    if old is scope:
        return new
    if getattr(scope, "body", None) is old:
        return scope.with_changes(body=new)
    stmts = _stmts(scope)
    if stmts is not None:
        for i, s in enumerate(stmts):
            if s is old:
                return _with_stmts(scope, (*stmts[:i], new, *stmts[i + 1 :]))
            if isinstance(s, cst.SimpleStatementLine) and any(small is old for small in s.body):
                line = s.with_changes(body=[new if small is old else small for small in s.body])
                return _with_stmts(scope, (*stmts[:i], line, *stmts[i + 1 :]))
        # Descend only into the one statement that holds ``old``.
        for i, s in enumerate(stmts):
            if _holds(s, old):
                return _with_stmts(scope, (*stmts[:i], path_replace(s, old, new), *stmts[i + 1 :]))
    return path_replace(scope, old, new)


def _is_layout(node) -> bool:
    t = type(node)
    return (_KIND.get(t) or _kind(t)) != 1


def _holds(node, target) -> bool:
    return any(n is target for n in walk(node, layout=_is_layout(target)))


def path_replace(root: cst.CSTNode, old: cst.CSTNode, new) -> cst.CSTNode:
    """``root.deep_replace(old, new)``, rebuilding only the nodes on the way down to ``old``:
    every other subtree stays the very same object.  libcst's deep_replace rebuilds every
    node of ``root``, so each statement of an edited def would be printed anew by
    ``same_code`` (the round-trip check) and by ``node_tokens`` (cached per node).  Where
    ``old`` is not reached by exactly one path (absent, or inside a subtree that stands
    twice), or ``new`` is no node (a removal), deep_replace itself decides."""
    most = 2 if _is_layout(old) else 1
    parent: dict[int, cst.CSTNode] = {}
    found = 0
    stack = [root]
    while stack:  # the whole tree: a second path to ``old`` must be seen
        n = stack.pop()
        if n is old:
            found += 1
            continue
        for c in _children(n, most):
            parent[id(c)] = n
            stack.append(c)
    if found != 1 or not isinstance(new, cst.CSTNode):
        return root.deep_replace(old, new)
    node, child = new, old
    while child is not root:
        up = parent[id(child)]
        node, child = _swap_child(up, child, node), up
    return node


def _swap_child(parent: cst.CSTNode, child: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    for name in _FIELDS[type(parent)]:
        v = getattr(parent, name)
        if v is child:
            return parent.with_changes(**{name: new})
        if isinstance(v, (list, tuple)) and any(x is child for x in v):
            items = [new if x is child else x for x in v]
            return parent.with_changes(**{name: items if isinstance(v, list) else tuple(items)})
    raise LookupError(f"internal: {type(child).__name__} is not a child of {type(parent).__name__}")


def same_code(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Would ``a`` and ``b`` print the same?  libcst shares unchanged subtrees, so only
    the statements that are not the very same objects are printed and compared."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    sa, sb = _stmts(a), _stmts(b)
    if sa is None or sb is None or len(sa) != len(sb):
        return code(a) == code(b)
    stub = (cst.SimpleStatementLine(body=[cst.Pass()]),)
    if not isinstance(a, cst.Module) and code(_with_stmts(a, stub)) != code(_with_stmts(b, stub)):
        return False
    if isinstance(a, cst.Module) and (code(a.with_changes(body=())) != code(b.with_changes(body=()))):
        return False
    return all(same_code(x, y) for x, y in zip(sa, sb, strict=True))  # lengths checked above


# --- comma-separated sequences (list/tuple/set elements, import aliases) -----------------


def strip_comma(comma):
    """The same separator without the comments that happen to follow it."""
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        ws = comma.whitespace_after
        return comma.with_changes(
            whitespace_after=ws.with_changes(
                first_line=cst.TrailingWhitespace(newline=ws.first_line.newline), empty_lines=()
            )
        )
    return comma


def separator(items: Sequence, index: int, opening_ws=None):
    """A comma that separates two items the way this sequence already does.

    ``opening_ws`` is the whitespace after the opening bracket; it tells a one-item
    multi-line sequence's layout.
    """
    n = len(items)
    if n >= 2:
        k = min(max(index - 1, 0), n - 2)
        return strip_comma(items[k].comma)
    if isinstance(opening_ws, cst.ParenthesizedWhitespace):
        return cst.Comma(
            whitespace_after=cst.ParenthesizedWhitespace(
                first_line=cst.TrailingWhitespace(newline=opening_ws.first_line.newline),
                indent=opening_ws.indent,
                last_line=opening_ws.last_line,
            )
        )
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _first_line(comma):
    ws = getattr(comma, "whitespace_after", None)
    return ws.first_line if isinstance(ws, cst.ParenthesizedWhitespace) else None


def _with_first_line(comma, first_line):
    ws = getattr(comma, "whitespace_after", None)
    if first_line is None or not isinstance(ws, cst.ParenthesizedWhitespace):
        return comma
    return comma.with_changes(whitespace_after=ws.with_changes(first_line=first_line))


def insert_item(items: Sequence, index: int, new, opening_ws=None) -> tuple:
    """Insert ``new`` at ``index``.  ``remove_item(result, index)`` gives ``items`` back exactly.

    The comma (and the comment lines) after the previous item move to the new one, so
    comments stay above the item they precede; a comment on the previous item's own
    line stays with it.
    """
    items = list(items)
    if not items and not isinstance(opening_ws, cst.ParenthesizedWhitespace):
        # the only item of a one-line collection: no separator after it (``["a"]``, not
        # ``["a", ]``); libcst writes a one-element tuple's own comma (``("a",)``)
        return (new.with_changes(comma=cst.MaybeSentinel.DEFAULT),)
    sep = separator(items, index, opening_ws)
    if index == 0:
        return (new.with_changes(comma=sep), *items)
    prev = items[index - 1]
    own = _first_line(prev.comma)
    clean = cst.TrailingWhitespace(newline=own.newline) if own is not None else None
    new = new.with_changes(comma=_with_first_line(prev.comma, clean))
    items[index - 1] = prev.with_changes(comma=_with_first_line(sep, own))
    items.insert(index, new)
    return tuple(items)


def remove_item(items: Sequence, index: int) -> tuple:
    items = list(items)
    gone = items.pop(index)
    if index > 0:
        prev = items[index - 1]
        items[index - 1] = prev.with_changes(comma=_with_first_line(gone.comma, _first_line(prev.comma)))
    return tuple(items)


# --- statements and clauses (replace-stmt, delete-stmt, add-branch, insert's `inside`) ------

_PASS_BLOCK = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Pass()])])
_CLAUSE_PARTS = {"orelse": None, "handlers": (), "finalbody": None}


@lru_cache(maxsize=1 << 14)
def header_tokens(clause: cst.CSTNode) -> tuple[str, ...]:
    """The tokens of a compound statement's (or clause's) own header, up to its colon:
    ``if a:`` of an if/elif/else chain, ``except E as e:`` of a handler.  An ``If`` prints
    as ``if``; the chain walker (``clauses``) says ``elif`` where it is one."""
    if not isinstance(getattr(clause, "body", None), cst.BaseSuite):
        return node_tokens(clause)
    if isinstance(clause, (cst.Try, cst.TryStar)):
        return ("try", ":")
    changes = {"body": _PASS_BLOCK, **{k: v for k, v in _CLAUSE_PARTS.items() if hasattr(clause, k)}}
    toks = tokens(code(clause.with_changes(**changes)))
    i = len(toks) - 1 - toks[::-1].index("pass")
    return toks[:i]


# The first token of a compound statement (its decorators' ``@``, ``async``) and of no simple one.
_COMPOUND_FIRST = frozenset({"if", "for", "while", "try", "with", "def", "class", "async", "@"})
_FIRST_WORD = re.compile(r"[A-Za-z_]\w*|@")


def may_print_as(stmt: cst.CSTNode, want: tuple[str, ...]) -> bool:
    """False where ``node_tokens(stmt) == want`` cannot hold, told without printing ``stmt``:
    the first token says whether a statement is compound (``if``, ``def``, ``@``...) or
    simple.  Printing a compound statement prints its whole body, so comparing every
    statement of a scope by its tokens printed each nested one once per enclosing block.
    (``match`` begins either kind; a first token that is not a word tells nothing.)"""
    if not want:
        return True
    m = _FIRST_WORD.match(want[0])
    if m is None or m.group() == "match":
        return True
    return (m.group() in _COMPOUND_FIRST) != isinstance(stmt, cst.SimpleStatementLine)


def statement_tokens(text: str) -> tuple[str, ...]:
    """A locator's statement text as tokens; a header alone may end without its colon."""
    toks = tokens(text)
    return toks if not toks or toks[-1] == ":" or toks[0] not in _HEADS else (*toks, ":")


_HEADS = {"if", "elif", "else", "for", "while", "with", "try", "except", "finally", "def", "class", "async"}


def clauses(scope: cst.CSTNode) -> Iterator[tuple[tuple[str, ...], cst.CSTNode, cst.CSTNode]]:
    """(header tokens, clause, the statement it belongs to) of every clause of every compound
    statement of ``scope`` (not of nested defs and classes): ``if``/``elif``/``else``,
    ``for``/``while`` and their ``else``, ``with``, ``try``/``except``/``else``/``finally``."""
    for _, body in blocks(scope):
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine) or (isinstance(stmt, _SCOPES) and stmt is not scope):
                continue
            yield header_tokens(stmt), stmt, stmt
            node = stmt
            while isinstance(getattr(node, "orelse", None), cst.If):  # elif arms
                node = node.orelse
                yield ("elif", *header_tokens(node)[1:]), node, stmt
            for h in getattr(node, "handlers", ()) or ():
                yield header_tokens(h), h, stmt
            for part in ("orelse", "finalbody"):
                sub = getattr(node, part, None)
                if isinstance(sub, (cst.Else, cst.Finally)):
                    yield header_tokens(sub), sub, stmt


def find_statements(scope: cst.CSTNode, want: tuple[str, ...]) -> list[tuple[cst.CSTNode, int]]:
    """(owner block, index) of each statement of ``scope``, at any depth, that is ``want``:
    a simple statement whole, a compound one by its whole text or by its header."""
    out = []
    for owner, body in blocks(scope):
        for i, stmt in enumerate(body):
            if (may_print_as(stmt, want) and node_tokens(stmt) == want) or (
                not isinstance(stmt, cst.SimpleStatementLine) and header_tokens(stmt) == want
            ):
                out.append((owner, i))
    return out


def stmt_at(owner: cst.CSTNode, i: int) -> cst.CSTNode:
    return owner.body[i]
