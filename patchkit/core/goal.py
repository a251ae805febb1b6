"""Goals in the judge: an op that widens or narrows a device gate is *for* the gate's answer
on the recipe's device, not for its text.

``or-operand`` adds a disjunct, so it can only widen a gate: its goal is "the gate admits the
device".  ``and-operand`` adds a conjunct: "the gate refuses it".  ``list-element`` adds (or
removes) an element of a device list (``supported_major_versions=[9, 10]``, arch strings):
"the list admits (refuses) it".  A recipe names its device (``device = "sm120"``), and the
engine definitions say what each device check means (``predicates``, patchkit/base/engines.toml);
patchkit/core/goals/pyeval.py evaluates a gate in three values, unknown never counting as true.

Two questions, each answered only when the code proves it:

* ``in_place``: the op's pattern is found (``pending``), but the gate there already gives the
  goal's answer (``major >= 12`` among its operands): the edit would change nothing the
  goal is about, so writing it would be a duplicate;
* ``in_scope``: the pattern is not found, and the op's named scope holds exactly one device
  gate of the op's shape, as its home release's scope did (where the op's site was that
  gate): that gate is the site in other words, and it gives the goal's answer.  Several gates,
  or none, and nothing is concluded: a look-alike is never the site.

Who reached the goal (upstream, or someone else) is the judge's to say, from the pristine
release's answer to the same question.  Pure: reads what it is handed.
"""

from __future__ import annotations

import ast
from typing import Any, NamedTuple, Optional

from patchkit.core.goals import pyeval
from patchkit.core.goals.device import Device

# The devices a gate's answer is compared across: an expression whose answer is the same on
# all of them does not depend on the device (a constant, a flag), and is not a gate.
_PROBES = tuple(Device.parse(d) for d in ("sm80", "sm90", "sm100", "sm120", "sm121"))


class Reached(NamedTuple):
    """The goal holds at a gate: where (its first line in the file) and why, in words."""

    line: int
    why: str


def device_of(recipe: Any) -> Optional[Device]:
    name = getattr(recipe, "device", "") or ""
    try:
        return Device.parse(name) if name else None
    except ValueError:
        return None


def bound_reached(op: Any, site_node: Any) -> Optional[Reached]:
    """A set-default whose goal is a bound (``params.goal = ">= 2.9.0"``): the default at its
    site (holding neither the recipe's value nor upstream's old one) satisfies the bound."""
    from patchkit.core.ops import set_default

    bound = getattr(op.impl, "bound", None)
    if op.kind != "set-default" or bound is None:
        return None
    now = set_default.value_code(op.impl, site_node)
    if set_default.satisfies(set_default._literal(now), bound) is not True:
        return None
    return Reached(0, f"the default is `{now}`, which satisfies the goal `{bound[0]} {bound[1]}`")


def direction(op: Any) -> Optional[bool]:
    """The answer the op's edit is for: True (admit) or False (refuse), None when its kind
    states no device goal."""
    if op.kind == "or-operand":
        return True
    if op.kind == "and-operand":
        return False
    if op.kind == "list-element":
        return getattr(op.impl, "action", "add") == "add"
    return None


def _tree(text: str) -> Optional[ast.Module]:
    from patchkit.core import pyast

    try:
        return pyast.parsed(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _predicates(engine: str) -> tuple:
    from patchkit.base.target import ENGINES

    try:
        return tuple(ENGINES[engine].predicates)
    except KeyError:
        return ()


def _answer(node: ast.expr, collection: bool, device: Device, env) -> Optional[bool]:
    return pyeval.list_admits(node, device, env) if collection else pyeval.evaluate(node, device, env)


def _env(tree: ast.Module, scope_name: str, engine: str):
    scope = pyscope_ast(tree, scope_name)
    return pyeval.env_for(tree, scope, _predicates(engine)), scope


def pyscope_ast(tree: ast.Module, scope_name: str) -> Optional[ast.AST]:
    return pyeval.find_scope(tree, scope_name) if scope_name else tree


def _expr(code: str) -> Optional[ast.expr]:
    try:
        return ast.parse("(\n" + code.strip() + "\n)", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _word(v: Optional[bool], collection: bool) -> str:
    if collection:
        return {True: "admits", False: "does not admit", None: "may or may not admit"}[v]
    return {True: "is true", False: "is false", None: "is unknown"}[v]


def in_place(
    op: Any, text: str, scope_name: str, site_node: Any, line: Optional[int], device: Device
) -> Optional[Reached]:
    """The gate at a pending site already gives the goal's answer for ``device``."""
    want = direction(op)
    tree = _tree(text)
    if want is None or tree is None:
        return None
    import libcst as cst

    node = _expr(cst.Module(body=[]).code_for_node(site_node))
    if node is None:
        return None
    collection = isinstance(node, (ast.List, ast.Tuple, ast.Set))
    env, scope = _env(tree, scope_name, op.engine)
    if scope_name and scope is None:
        return None
    got = _answer(node, collection, device, env)
    if got is not want:
        return None
    shown = " ".join(ast.unparse(node).split())
    return Reached(
        line or 0, f"`{shown}` already {_word(got, collection)} for {device}: the edit would change nothing it is for"
    )


def gates(tree: ast.Module, scope: ast.AST, engine: str, collection: bool, device: Device) -> list:
    """The device gates of a scope: maximal expressions (collections, for a list op) whose
    answer is known on ``device`` and differs across devices, as (node, answer), in order.
    A nested def or class is another scope, not looked into."""
    env = pyeval.env_for(tree, scope if scope is not tree else None, _predicates(engine))
    out: list = []

    def visit(n: ast.AST, top: bool) -> None:
        if not top and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if isinstance(n, ast.expr) and _is_gate(n, collection, env):
            out.append((n, _answer(n, collection, device, env)))
            return
        for c in ast.iter_child_nodes(n):
            visit(c, False)

    for st in getattr(scope, "body", []):
        visit(st, False)
    return out


def _is_gate(n: ast.expr, collection: bool, env) -> bool:
    if collection != isinstance(n, (ast.List, ast.Tuple, ast.Set)):
        return False
    if not collection and not isinstance(n, (ast.BoolOp, ast.Compare, ast.UnaryOp, ast.Call, ast.Attribute, ast.Name)):
        return False
    answers = set()
    for d in _PROBES:
        a = _answer(n, collection, d, env)
        if a is None:
            return False
        answers.add(a)
    return len(answers) > 1


def in_scope(op: Any, text: str, home_text: Optional[str], device: Device) -> Optional[Reached]:
    """The pattern is not in the scope; the scope's one device gate is the site in other
    words (its home release's scope had one gate, which held the op's pattern), and it gives
    the goal's answer."""
    want = direction(op)
    tree, home = _tree(text), _tree(home_text) if home_text is not None else None
    if want is None or tree is None or home is None:
        return None
    collection = op.kind == "list-element"
    scope, home_scope = pyscope_ast(tree, op.scope), pyscope_ast(home, op.scope)
    if scope is None or home_scope is None:
        return None
    before = gates(home, home_scope, op.engine, collection, device)
    if len(before) != 1 or before[0][1] is want:
        return None  # the home scope's gate is not one, or it gave the answer already
    now = gates(tree, scope, op.engine, collection, device)
    if len(now) != 1 or now[0][1] is not want:
        return None
    node = now[0][0]
    shown = " ".join(ast.unparse(node).split())
    was = " ".join(ast.unparse(before[0][0]).split())
    return Reached(
        node.lineno,
        f"the one device gate of {op.scope or 'the module'} (it was `{was}`) now reads `{shown}`,"
        f" which {_word(want, collection)} for {device}: the goal is reached in other words",
    )


# -- C/C++/CUDA: a text hunk that widens a device gate -----------------------------------------

CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".inl")


def is_cpp(path: str) -> bool:
    return path.lower().endswith(CPP_SUFFIXES)


CPP_KINDS = ("text-hunk", "text-replace")


def cpp_in_scope(op: Any, text: str, home_text: Optional[str], device: Device) -> Optional[Reached]:
    """A text hunk (or replace) on a C/C++/CUDA file whose edit widens a device gate (its
    goal: "this gate admits the device"), its lines no longer found: the function the edit was
    in (the file's top level for a guard outside every function) holds one device gate, as it
    did in the op's home release, and that gate admits the device.  The goal is derived from
    the edit itself: in the home release the scope's one gate (an ``#if``/``#elif``, a runtime
    ``if`` or a check statement, ``TVM_FFI_ICHECK_EQ(major, 10)``, read by
    patchkit/core/goals/cppeval.py) does not admit the device, and with the edit made there it
    does.  Several gates, or a gate whose answer is unknown, conclude nothing.

    One call level down (as follow.py for Python): the function holds no device gate any more,
    and of the functions of the same file it calls directly (its class's methods, its direct
    bases', free functions: cppeval.callees) exactly one holds device gates, exactly one, and
    that gate admits the device: upstream moved the check into the helper every launcher calls
    (FlashInfer 0.6.8's ``FusedMoeLauncher::init_common``).  A gate two levels down, or in a
    function it does not call, is never read; nor is the callee where the function still holds
    a check of the capability whose answer is unknown (it may refuse the device itself)."""
    from patchkit.core.goals import cppeval

    if op.kind not in CPP_KINDS or not is_cpp(op.file) or home_text is None or not cppeval.available():
        return None
    site = op.impl.locate(home_text)
    from patchkit.base.states import State

    if site.state != State.PENDING or len(site.nodes) != 1:
        return None
    scope = cppeval.scope_at(home_text, site.nodes[0])
    if scope is None:
        return None
    before = cppeval.gates(home_text, scope, device, _PROBES)
    after = cppeval.gates(op.impl.apply(home_text), scope, device, _PROBES)
    if not before or not after or len(before) != 1 or len(after) != 1:
        return None
    if before[0].answer is not False or after[0].answer is not True:
        return None  # the edit is not shown to widen the gate for the device
    where = f"`{scope}`" if scope else "the file's top level"
    was = f"`{before[0].shown}` in the release the op was written for"
    undecided: list = []
    now = cppeval.gates(text, scope, device, _PROBES, undecided)
    if now is None:
        return None
    if len(now) == 1:
        if now[0].answer is not True:
            return None
        g = now[0]
        return Reached(
            g.line,
            f"the one device gate of {where} ({was}) now reads `{g.shown}` at line {g.line}: {g.why}; the goal is"
            " reached in other words",
        )
    if now or undecided or not scope:
        return None  # a check of the capability it cannot evaluate may refuse the device here
    held = []
    for callee in cppeval.callees(text, scope) or ():
        got = cppeval.gates(text, callee, device, _PROBES)
        if got:
            held.append((callee, got))
    if len(held) != 1 or len(held[0][1]) != 1 or held[0][1][0].answer is not True:
        return None  # none, two callees, or two gates in it: nothing says which is the site's
    callee, (g,) = held[0]
    return Reached(
        g.line,
        f"{where} holds no device gate now ({was}); it calls `{callee}` (same file), whose one device gate"
        f" `{g.shown}` at line {g.line} admits the device: {g.why}; the goal is reached in other words, one call"
        " level down",
    )


# -- CMake: a text hunk that adds the device to an arch list ----------------------------------


def is_cmake(path: str) -> bool:
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    return base == "CMakeLists.txt" or base.endswith(".cmake")


def text_in_scope(op: Any, text: str, home_text: Optional[str], device: Device) -> Optional[Reached]:
    """A text hunk's goal reached in other words: on a CMake file ``cmake_in_scope``, on a
    C/C++/CUDA file ``cpp_in_scope``."""
    if is_cmake(op.file):
        return cmake_in_scope(op, text, home_text, device)
    return cpp_in_scope(op, text, home_text, device)


def _toolkit_conflict(arm: Any, home: Any) -> bool:
    """``arm`` stands in another toolkit branch than ``home``: one of its conditions is one of
    home's taken the other way."""
    want = {" ".join(b.condition.split()): b.want for b in home.toolkit_path()}
    return any(want.get(" ".join(b.condition.split()), b.want) != b.want for b in arm.toolkit_path())


def cmake_in_scope(op: Any, text: str, home_text: Optional[str], device: Device) -> Optional[Reached]:
    """A text hunk (or replace) on a CMake file (``CMakeLists.txt``, ``*.cmake``) whose edit
    makes an arch list admit the device (its goal: "this arch list admits the device, under
    the toolkit branch it stands in"), its lines no longer found.  The goal is derived from the
    edit: in the release the op was written for, the one arch list at the hunk's changed line
    does not admit the device (read by patchkit/core/goals/cmakeeval.py as vLLM's
    ``cuda_archs_loose_intersection`` reads it), and with the edit made it does.  The list is
    found again by its variable: the one definition of it in the file (both releases), else the
    one that guards the same first source file; its arms (a version split: ``if(13.0) "12.0f"
    else() "12.0a"``) that stand in the home list's branch, or in a branch the home list did not
    have, must all admit the device where they may be in effect.  An arm that does not, or
    cannot be decided, concludes nothing."""
    from patchkit.core.goals import cmakeeval

    if op.kind not in CPP_KINDS or not is_cmake(op.file) or home_text is None or not cmakeeval.available():
        return None
    from patchkit.base.states import State

    site = op.impl.locate(home_text)
    if site.state != State.PENDING or len(site.nodes) != 1:
        return None
    line = site.nodes[0]
    before = [x for x in cmakeeval.arch_lists(home_text) or () if x.line <= line <= x.end_line]
    after = [x for x in cmakeeval.arch_lists(op.impl.apply(home_text)) or () if x.line <= line <= x.end_line]
    if len(before) != 1 or len(after) != 1 or before[0].var != after[0].var:
        return None
    home = before[0]
    if cmakeeval.admits(home.items, device) is not False or cmakeeval.admits(after[0].items, device) is not True:
        return None  # the edit is not shown to make the list admit the device
    home_groups = [g for g in cmakeeval.groups(cmakeeval.arch_lists(home_text) or []) if g[0].var == home.var]
    lists = cmakeeval.arch_lists(text)
    if lists is None:
        return None
    now = [g for g in cmakeeval.groups(lists) if g[0].var == home.var]
    if not (len(home_groups) == 1 and len(now) == 1):
        now = [g for g in now if home.guards and g[0].guards == home.guards]
    if len(now) != 1:
        return None  # none, or several: nothing says which is the site's
    arms = [a for a in now[0] if not _toolkit_conflict(a, home)]
    if not arms:
        return None
    got, why = cmakeeval.value(arms, device)
    if got is not True:
        return None
    first = arms[0]
    return Reached(
        first.line,
        f"the arch list {home.var} (it was `{home.shown}` in the release the op was written for) now reads: {why};"
        " the goal is reached in other words",
    )


# -- delete-stmt: absence at the identified scope ---------------------------------------------


def _stmt_dump(src: str) -> Optional[str]:
    try:
        body = ast.parse(src.strip() + "\n").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return ast.dump(body[0]) if len(body) == 1 else None


def _holds(tree: ast.Module, scope_name: str, want: str) -> Optional[int]:
    """How many statements of the scope (at any depth, nested defs included) mean ``want``
    (their ``ast``, layout and comments aside); None when the scope is not there."""
    scope = pyscope_ast(tree, scope_name)
    if scope is None:
        return None
    return sum(1 for n in ast.walk(scope) if isinstance(n, ast.stmt) and n is not scope and ast.dump(n) == want)


def absent(op: Any, text: str, home_text: Optional[str]) -> Optional[Reached]:
    """A delete-stmt whose goal is "the statement is not in its scope": its context no longer
    found (it reads missing), the op's named scope stands and holds the deleted statement
    nowhere, in any formatting, where the release the op was written for held it there.  A
    scope that is gone, or a statement that stands anywhere in it, concludes nothing."""
    if op.kind != "delete-stmt" or home_text is None:
        return None
    want = _stmt_dump(op.impl.match_src)
    tree, home = _tree(text), _tree(home_text)
    if want is None or tree is None or home is None:
        return None
    if not _holds(home, op.scope, want):
        return None  # the home scope did not hold it: nothing is shown about this scope
    if _holds(tree, op.scope, want) != 0:
        return None
    shown = " ".join(op.impl.match_src.split())
    return Reached(0, f"`{shown}` stands nowhere in {op.scope or 'the module'}: the goal (its absence) is reached")


# -- insert: presence by identity --------------------------------------------------------------


def _bodies(scope: ast.AST):
    """The statement lists of a scope: its body and those of its compound statements, not
    of nested defs and classes (scopes of their own)."""
    stack = [scope]
    while stack:
        n = stack.pop()
        for field in ("body", "orelse", "finalbody"):
            b = getattr(n, field, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt):
                yield b
                stack.extend(s for s in b if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
        for h in getattr(n, "handlers", []) or []:
            yield h.body
            stack.extend(h.body)
        for c in getattr(n, "cases", []) or []:
            yield c.body
            stack.extend(c.body)


def present(op: Any, text: str) -> Optional[Reached]:
    """An insert whose statements already stand in its scope, consecutively, in other
    formatting (their ``ast``, layout, comments, quotes and parentheses aside): the goal
    (presence of that code) is reached, and writing it would be a second copy.  Only where
    they stand exactly once."""
    if op.kind != "insert":
        return None
    try:
        want = [ast.dump(s) for s in ast.parse(_dedent(op.impl.params_code)).body]
    except (SyntaxError, ValueError, MemoryError, RecursionError, AttributeError):
        return None
    tree = _tree(text)
    scope = pyscope_ast(tree, op.scope) if tree is not None and want else None
    if scope is None:
        return None
    hits = [
        b[i]
        for b in _bodies(scope)
        for i in range(len(b) - len(want) + 1)
        if all(ast.dump(b[i + k]) == w for k, w in enumerate(want))
    ]
    if len(hits) != 1:
        return None
    return Reached(
        hits[0].lineno,
        f"the inserted code stands at line {hits[0].lineno} of {op.scope or 'the module'} in other formatting:"
        " the goal (its presence) is reached",
    )


def _dedent(src: str) -> str:
    import textwrap

    return textwrap.dedent(src).strip("\n") + "\n"


# -- insert of a def or class: presence by its name ---------------------------------------------

_DEF_KINDS = {ast.FunctionDef: "def", ast.AsyncFunctionDef: "def", ast.ClassDef: "class"}


def _defined(stmts: list) -> list:
    """(kind, name) of each inserted statement when every one is a def or a class (a helper,
    a class), else []: such an insert is for the name bound in its scope, not for its body."""
    out = [(_DEF_KINDS.get(type(s)), getattr(s, "name", "")) for s in stmts]
    return out if out and all(k for k, _ in out) else []


def _defs_of(scope: ast.AST, kind: str, name: str) -> list:
    """The defs (classes) named ``name`` that the scope binds: in its own statement lists, at
    any depth of its if/try/with arms, never in a nested def or class (another scope)."""
    return [s for b in _bodies(scope) for s in b if _DEF_KINDS.get(type(s)) == kind and s.name == name]


def defined(op: Any, text: str) -> Optional[Reached]:
    """An insert whose code is defs (classes): the goal is each name bound by a def (class)
    of the op's scope, whatever its body says (upstream may have written the helper in its own
    words: another CUDA floor, another docstring).  A name bound otherwise (an assignment, an
    import), or by a def in another scope (a method of that name, a nested def), is not the
    helper and concludes nothing.  Where the code is not defs, None (``present`` reads it)."""
    if op.kind != "insert":
        return None
    try:
        names = _defined(ast.parse(_dedent(op.impl.params_code)).body)
    except (SyntaxError, ValueError, MemoryError, RecursionError, AttributeError):
        return None
    tree = _tree(text)
    scope = pyscope_ast(tree, op.scope) if tree is not None and names else None
    if scope is None:
        return None
    found = [_defs_of(scope, kind, name) for kind, name in names]
    if not all(found):
        return None
    first = found[0][0]
    said = ", ".join(f"`{k} {n}` (line {f[0].lineno})" for (k, n), f in zip(names, found, strict=True))
    return Reached(
        first.lineno,
        f"{op.scope or 'the module'} already binds {said}, whatever its body: the goal (the name defined"
        " there) is reached, and a second def would only shadow it",
    )


def holds_defs(op: Any) -> bool:
    """The insert's code is defs (classes) only: its goal is read by ``defined``."""
    try:
        return bool(_defined(ast.parse(_dedent(op.impl.params_code)).body))
    except (SyntaxError, ValueError, MemoryError, RecursionError, AttributeError):
        return False


# -- ensure-import: the name bound from the module, a relative import resolved --------------------


def _package(logical: str) -> list:
    """The package a file's relative imports start from: its directory's parts
    (``flashinfer/gemm/gemm_base.py`` -> flashinfer.gemm; a package's ``__init__.py`` is in
    its own package)."""
    return logical.replace("\\", "/").split("/")[:-1]


def import_source(node: ast.ImportFrom, logical: str) -> str:
    """The absolute module a ``from ... import`` reads from, a relative one resolved from the
    file's package (``from ..utils import`` in flashinfer/gemm/gemm_base.py: flashinfer.utils);
    "" where it climbs out of the tree."""
    if not node.level:
        return node.module or ""
    parts = _package(logical)
    up = node.level - 1
    if up > len(parts) or (up == len(parts) and not node.module):
        return ""
    base = parts[: len(parts) - up]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported(op: Any, text: str, logical: str) -> Optional[Reached]:
    """An ensure-import whose goal is the name bound at the module's top level from the op's
    module: the last top-level statement that binds it imports it from that module (or a module
    of its package line, as the op reads an absolute import: ``EnsureImport.kin``), written
    relative or absolute.  A later def, assignment or import of the name from elsewhere rebinds
    it, and an import of the name from another module is another name: neither counts."""
    if op.kind != "ensure-import":
        return None
    tree = _tree(text)
    if tree is None:
        return None
    name, held = op.impl.name, None
    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and st.name == name:
            held = None
        elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
            if any(isinstance(t, ast.Name) and t.id == name for t in flat):
                held = None
        elif isinstance(st, ast.Import):
            if any((a.asname or a.name.split(".")[0]) == name for a in st.names):
                held = None
        elif isinstance(st, ast.ImportFrom):
            for a in st.names:
                if (a.asname or a.name) != name:
                    continue
                source = import_source(st, logical)
                held = (st, source, getattr(a, "lineno", st.lineno)) if a.name == name and op.impl.kin(source) else None
    if held is None:
        return None
    st, source, line = held
    dots = "." * st.level + (st.module or "")
    return Reached(
        line,
        f"`{name}` is bound at the module's top level by `from {dots} import ... {name}` (line {line}), that is"
        f" from {source}: the goal (the name imported from {op.impl.module}) is reached",
    )


# -- replace-stmt of an assertion by a fallback: the assertion no longer stops the run ------------

_FLIP = {
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
}


def _negated(e: ast.expr) -> str:
    """The ``ast`` of ``not e`` in its plain form: ``a is not None`` -> ``a is None``, ``not x``
    -> ``x``, a comparison of one operator flipped; else ``not (e)``."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return ast.dump(e.operand)
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _FLIP:
        return ast.dump(ast.Compare(e.left, [_FLIP[type(e.ops[0])]()], e.comparators))
    return ast.dump(ast.UnaryOp(ast.Not(), e))


def _fails_into(test: ast.expr, cond: ast.expr) -> bool:
    """``test`` holds wherever the asserted ``cond`` fails: it is ``not cond`` (in any of its
    plain forms), or a disjunction with such an operand.  A conjunction (``_is_hip and stream
    is None``) holds only where its other operands do: not."""
    want = _negated(cond)
    if ast.dump(test) == want or _negated(test) == ast.dump(cond):
        return True
    return (
        isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(_fails_into(v, cond) for v in test.values)
    )


_LEAVES = (ast.Return, ast.Continue, ast.Break)


def _stops(body: list) -> bool:
    """A statement list that may still stop the run: a ``raise`` or an ``assert`` in it, at any
    depth of its own statements (a nested def is another scope)."""
    todo = list(body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Raise, ast.Assert)):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        todo.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, ast.stmt))
    return False


class _Relaxed(NamedTuple):
    cond: ast.expr  # what the assertion asserts
    leave: str  # the ast of the statement the fallback leaves by (``return entry.runnable(*args)``)
    shown: str  # that statement, unparsed


def relaxing(op: Any) -> Optional[_Relaxed]:
    """A replace-stmt whose edit turns an assertion into a fallback: ``match`` is one
    ``assert COND``, ``with`` is one ``if`` (no ``else``) whose test holds wherever COND fails
    and whose body leaves by a ``return``/``continue``/``break`` without raising.  Its goal is
    "the assertion no longer stops the run: where COND fails, the code leaves by that fallback"
    (``relaxed``).  None for every other replace-stmt."""
    if op.kind != "replace-stmt":
        return None
    try:
        match = ast.parse(_dedent(op.impl.match_src)).body
        new = ast.parse(_dedent(op.impl.with_src)).body
    except (SyntaxError, ValueError, MemoryError, RecursionError, AttributeError):
        return None
    if len(match) != 1 or not isinstance(match[0], ast.Assert) or len(new) != 1:
        return None
    guard, cond = new[0], match[0].test
    if not isinstance(guard, ast.If) or guard.orelse or not _fails_into(guard.test, cond):
        return None
    if not isinstance(guard.body[-1], _LEAVES) or _stops(guard.body):
        return None
    return _Relaxed(cond, ast.dump(guard.body[-1]), ast.unparse(guard.body[-1]))


def _reads(st: ast.stmt, names: set) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load) for n in ast.walk(st))


def _asserts(scope: ast.AST, cond: str) -> list:
    """Where the scope asserts ``cond`` (its ``ast``): (block, index), nested defs aside."""
    return [
        (b, i)
        for b in _bodies(scope)
        for i, s in enumerate(b)
        if isinstance(s, ast.Assert) and ast.dump(s.test) == cond
    ]


def relaxed(op: Any, text: str, home_text: Optional[str]) -> Optional[Reached]:
    """An assertion turned into a fallback (``relaxing``), reached in other words: in the op's
    named scope, after the statement that stood just before the assertion in the release the
    op was written for (found once, in any formatting; from the def's start where the assertion
    was its first statement), the first statement that reads the
    asserted names is an ``if`` whose test holds wherever the assertion would fail, whose body
    does not raise and leaves by the op's own fallback statement (the same ``return``).  The
    assertion may stand only after that guard, in its block (it can no longer fail there).

    Never: a guard on another condition (``_is_hip and stream is None`` falls back on one
    platform only), one that raises or leaves otherwise (``return None`` is another result),
    one that stands after a use of the names, the assertion left before it or elsewhere in the
    scope, or a scope that is gone."""
    shape = relaxing(op)
    tree, home = _tree(text), _tree(home_text) if home_text is not None else None
    if shape is None or tree is None or home is None:
        return None
    scope, home_scope = pyscope_ast(tree, op.scope), pyscope_ast(home, op.scope)
    if scope is None or home_scope is None:
        return None
    cond = ast.dump(shape.cond)
    was = _asserts(home_scope, cond)
    if len(was) != 1:
        return None  # the home scope asserts it not once
    b, i = was[0]
    if i == 0 and b is not getattr(home_scope, "body", None):
        return None  # first in a nested block: nothing before it to place it by
    if i == 0:  # the def's first statement: the guard is read from the def's start
        blk, k, after = scope.body, -1, f"at the start of {op.scope or 'the module'}"
    else:
        prev = ast.dump(b[i - 1])
        at = [(blk, k) for blk in _bodies(scope) for k, s in enumerate(blk) if ast.dump(s) == prev]
        if len(at) != 1:
            return None  # the statement before the assertion is gone, or stands twice
        (blk, k), after = at[0], f"after `{ast.unparse(b[i - 1])}`"
    names = {n.id for n in ast.walk(shape.cond) if isinstance(n, ast.Name)}
    j = next((m for m in range(k + 1, len(blk)) if _reads(blk[m], names)), None)
    if j is None:
        return None
    guard = blk[j]
    if not (
        isinstance(guard, ast.If)
        and _fails_into(guard.test, shape.cond)
        and ast.dump(guard.body[-1]) == shape.leave
        and not _stops(guard.body)
    ):
        return None
    if any(not (ab is blk and m > j) for ab, m in _asserts(scope, cond)):
        return None  # the assertion still stands where it can fail
    shown = " ".join(ast.unparse(guard.test).split())
    return Reached(
        guard.lineno,
        f"`assert {ast.unparse(shape.cond)}` no longer stops {op.scope or 'the module'}: {after}"
        f" the first statement that reads {', '.join(sorted(names))} is"
        f" `if {shown}:` (line {guard.lineno}), which holds wherever the assertion would fail and leaves by"
        f" `{shape.shown}`, raising nothing: the goal (the fallback) is reached in other words",
    )


# -- add-branch: the chain already takes the device into the clause's body ------------------------


def _clause(op: Any) -> Optional[tuple[ast.expr, str]]:
    """(test, the body's ``ast``) of an add-branch's ``elif`` clause; None for an ``else``."""
    try:
        head = ast.parse("if __patchkit__:\n    pass\n" + _dedent(op.impl.clause_src)).body
    except (SyntaxError, ValueError, MemoryError, RecursionError, AttributeError):
        return None
    if len(head) != 1 or len(head[0].orelse) != 1 or not isinstance(head[0].orelse[0], ast.If):
        return None
    arm = head[0].orelse[0]
    return arm.test, _body_dump(arm.body)


def _body_dump(body: list) -> str:
    return "\n".join(ast.dump(s) for s in body)


def _chains(scope: ast.AST) -> list:
    """The if-chains of a scope (not of its nested defs): each as [(test or None for an
    ``else``, body, first line)], its ``if`` first."""
    elifs: set = set()
    heads = []
    for b in _bodies(scope):
        for s in b:
            if isinstance(s, ast.If):
                heads.append(s)
                if len(s.orelse) == 1 and isinstance(s.orelse[0], ast.If):
                    elifs.add(id(s.orelse[0]))
    out = []
    for s in heads:
        if id(s) in elifs:
            continue
        chain, node = [], s
        while True:
            chain.append((node.test, node.body, node.lineno))
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
                continue
            if node.orelse:
                chain.append((None, node.orelse, node.orelse[0].lineno))
            break
        out.append(chain)
    return out


def _route(chain: list, device: Device, env) -> Any:
    """The arm of a chain the device takes: (body, line); None where no arm is taken, ...
    (Ellipsis) where an arm before it cannot be decided."""
    for test, body, line in chain:
        a = True if test is None else pyeval.evaluate(test, device, env)
        if a is None:
            return ...
        if a:
            return body, line
    return None


def _anchor(op: Any) -> Optional[str]:
    """The ``ast`` of the named branch's test (``elif X`` / ``if X``); None for an ``else``."""
    src = op.impl.branch_src.strip().rstrip(":").strip()
    word, _, cond = src.partition(" ")
    if word not in ("if", "elif") or not cond.strip():
        return None
    node = _expr(cond)
    return ast.dump(node) if node is not None else None


def routed(op: Any, text: str, home_text: Optional[str], device: Device) -> Optional[Reached]:
    """An add-branch whose clause (``elif COND: BODY``, COND a device gate that admits the
    device) is for "the chain takes the device into BODY": the chain of the named branch (once
    in the scope) already does, by an arm whose test admits the device (in other words:
    ``major >= 12``) or an ``else`` every arm before it refuses, with the same statements (their
    ``ast``); every arm before it is known to refuse the device.  The named branch gone, exactly
    one chain of the scope does, where in the release the op was written for none did.  An arm
    before it whose answer is unknown, the device taken into another body, or two such chains:
    nothing is concluded."""
    if op.kind != "add-branch" or getattr(op.impl, "is_else", True):
        return None
    clause, tree = _clause(op), _tree(text)
    if clause is None or tree is None:
        return None
    cond, body = clause
    env, scope = _env(tree, op.scope, op.engine)
    if scope is None or not _is_gate(cond, False, env) or pyeval.evaluate(cond, device, env) is not True:
        return None  # the clause is not for this device (or its test cannot be read here)
    anchor = _anchor(op)

    def named(chains: list) -> list:
        return [
            c for c in chains if anchor is not None and any(t is not None and ast.dump(t) == anchor for t, _, _ in c)
        ]

    def takes(chain: list, e) -> Optional[tuple]:
        got = _route(chain, device, e)
        return got if isinstance(got, tuple) and _body_dump(got[0]) == body else None

    chains = _chains(scope)
    mine = named(chains)
    if len(mine) > 1:
        return None
    if mine:
        hit = takes(mine[0], env)
        where = "the chain of the named branch"
    else:
        home = _tree(home_text) if home_text is not None else None
        if home is None:
            return None
        home_env, home_scope = _env(home, op.scope, op.engine)
        if home_scope is None or len(named(_chains(home_scope))) != 1:
            return None
        if any(takes(c, home_env) for c in _chains(home_scope)):
            return None  # the release it was written for took the device there already
        hits = [h for h in (takes(c, env) for c in chains) if h]
        if len(hits) != 1:
            return None
        hit = hits[0]
        where = f"the one chain of {op.scope or 'the module'} that does"
    if hit is None:
        return None
    _, line = hit
    shown = " ".join(ast.unparse(cond).split())
    return Reached(
        line,
        f"{where} already takes {device} into the clause's statements (the arm at line {line}, every arm"
        f" before it false for {device}): the goal of `elif {shown}:` is reached in other words, and the"
        " clause would never run",
    )


# -- replace-stmt of an assertion by a wider one: the assertion admits the device -----------------


def widening(op: Any) -> Optional[tuple[ast.expr, ast.expr]]:
    """(the old test, the new) of a replace-stmt whose ``match`` is one ``assert A`` and whose
    ``with`` is one ``assert B``: its goal, where A refuses the recipe's device and B admits it
    in the release it was written for, is "the assertion admits the device" (``widened``)."""
    if op.kind != "replace-stmt":
        return None
    try:
        old = ast.parse(_dedent(op.impl.match_src)).body
        new = ast.parse(_dedent(op.impl.with_src)).body
    except (SyntaxError, ValueError, MemoryError, RecursionError, AttributeError):
        return None
    if len(old) != 1 or len(new) != 1 or not isinstance(old[0], ast.Assert) or not isinstance(new[0], ast.Assert):
        return None
    return old[0].test, new[0].test


def _device_asserts(scope: ast.AST, env) -> list:
    """The scope's assertions whose test is a device gate (known on every probe, not the same
    on all), nested defs aside."""
    return [s for b in _bodies(scope) for s in b if isinstance(s, ast.Assert) and _is_gate(s.test, False, env)]


def widened(op: Any, text: str, home_text: Optional[str], device: Device) -> Optional[Reached]:
    """An assertion widened for the device (``widening``: in the release the op was written
    for, its test refuses the device and the op's admits it), reached in other words: the op's
    own assertion stands once in its scope and its test now admits the device (a name it reads
    bound wider: ``_is_sm100 = is_sm100_supported() or is_sm120_supported()``); or it is gone,
    and the scope's one device assertion (one in the home release too, the site) admits it.
    Two device assertions, one whose answer is unknown, or one that refuses: nothing."""
    pair = widening(op)
    tree, home = _tree(text), _tree(home_text) if home_text is not None else None
    if pair is None or tree is None or home is None:
        return None
    old, new = pair
    home_env, home_scope = _env(home, op.scope, op.engine)
    if home_scope is None or pyeval.evaluate(old, device, home_env) is not False:
        return None
    if pyeval.evaluate(new, device, home_env) is not True:
        return None  # the op's own test is not shown to admit the device
    env, scope = _env(tree, op.scope, op.engine)
    if scope is None:
        return None
    want = ast.dump(old)
    mine = [s for b in _bodies(scope) for s in b if isinstance(s, ast.Assert) and ast.dump(s.test) == want]
    if len(mine) > 1:
        return None
    if mine:
        s = mine[0]
        if pyeval.evaluate(s.test, device, env) is not True:
            return None
        how = f"`assert {' '.join(ast.unparse(s.test).split())}` (line {s.lineno}) now admits {device}"
    else:
        was, now = _device_asserts(home_scope, home_env), _device_asserts(scope, env)
        if len(was) != 1 or ast.dump(was[0].test) != want or len(now) != 1:
            return None
        s = now[0]
        if pyeval.evaluate(s.test, device, env) is not True:
            return None
        how = (
            f"the one device assertion of {op.scope or 'the module'} (it was `assert {ast.unparse(old)}`) now reads"
            f" `assert {' '.join(ast.unparse(s.test).split())}` (line {s.lineno}), which admits {device}"
        )
    return Reached(s.lineno, f"{how}: the goal (the assertion lets the device through) is reached in other words")
