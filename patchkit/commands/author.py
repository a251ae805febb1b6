"""Writing recipes: `new` (a commented template), `check` (every error of every recipe, and
the examples they carry, run), and `capture` (a recipe from a hand edit of a tree)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Optional

from patchkit.authoring.examples import run_example
from patchkit.base.errors import PatchkitError, RecipeError
from patchkit.commands import NOT_THERE, OK, USAGE, say
from patchkit.core import learned
from patchkit.core.project import Project

# -- new ----------------------------------------------------------------------------------------


TEMPLATE = '''\
# A patchkit recipe: one TOML file per recipe, named after its id.
#   patchkit check {path}   validates it and runs its examples (every error, one line each)
#   patchkit show {id}      shows it as patchkit reads it
#   patchkit diff {id}      what apply would write, touching nothing
# Snippets of code are easiest in \'\'\'literal strings\'\'\' (no escapes).

id = "{id}"  # lowercase letters, digits and dashes; the file name without .toml
summary = "TODO: say in one line what this recipe does"  # `patchkit list` shows it
rationale = """
TODO: why, with numbers: what was measured before and after, on which hardware,
and when upstream may make this recipe unnecessary.
"""
bundles = []  # e.g. ["sm120"]: `patchkit apply sm120` applies every recipe that lists it

[engines]  # the releases the recipe is for (PEP 440); outside them apply skips it
{engine} = "{spec}"

# One [[ops]] table per edit.  Every op has:
#   kind     one of the kinds below (docs/recipes.md has the table of kinds)
#   engine   an engine named in [engines]
#   file     the path inside the installed package, the same in a git checkout, an unpacked
#            wheel or site-packages (FlashInfer's C++: include/... and csrc/...)
#   scope    "Class", "Class.method" or "function": where the op looks; leave it out for the
#            whole module.  Matching is on Python tokens: layout and comments do not matter.
#   when     optional: {{ {engine} = ">=X" }}, the releases this op is for (a version variant)
#   [ops.locator]  how the op finds its site; [ops.params]  what it writes
#   [[ops.markers]]  optional: code upstream wrote differently that does the same; the op
#                    then reads `upstream` (contains = fragments, all in the scope, in order)
#   [[ops.examples]] optional: before/after snippets that `patchkit check` runs both ways
#
# The op below is a placeholder: it names a field no release has, so apply reports it
# missing until you change it.  Uncomment and adapt the kinds you need; delete the rest.

[[ops]]
kind = "set-default"
engine = "{engine}"
file = "{pyfile}"
scope = "{cls}"
[ops.locator]
field = "todo_field"  # a class attribute / dataclass field of the scope
[ops.params]
value = "1024"  # the new default, as Python source
expect = "None"  # upstream's default, exactly as upstream writes it: revert writes it back

# apply to `before` must give exactly `after`, and revert `after` must give back `before`.
# A Python example is a small module holding the op's scope.
[[ops.examples]]
before = \'\'\'
class {cls}:
    todo_field: Optional[int] = None
\'\'\'
after = \'\'\'
class {cls}:
    todo_field: Optional[int] = 1024
\'\'\'

# --- list-element: add (or remove) an element of a list, tuple or set literal
# [[ops]]
# kind = "list-element"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# contains = [\'"todo_a"\', \'"todo_b"\']  # the collection that holds these elements
# # or: keyword = "supported_major_versions" (+ call = "f"), or: membership = "major",
# # or: target = "BACKEND_CHOICES"  (the collection assigned to that name)
# [ops.params]
# element = \'"todo_c"\'
# after = \'"todo_a"\'  # optional: where it goes (default: at the end)
# # uncomment = true   # turn the line `# "todo_c",` into the element (and back on revert)
# # action = "remove"  # take the element out instead

# --- or-operand: add an operand to an `a or b` chain
# [[ops]]
# kind = "or-operand"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# operands = ["_is_sm90_supported", "_is_sm100_supported"]  # operands the chain already has
# [ops.params]
# operand = "_is_sm120_supported"
# # after = "_is_sm100_supported"  # optional: default at the end

# --- and-operand: add an operand to an `a and b` chain (narrow a condition)
# [[ops]]
# kind = "and-operand"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# operands = ["is_deepseek_dsa", \'self.kv_cache_dtype == "auto"\']  # operands the chain already has
# [ops.params]
# operand = "major >= 10"

# --- set-default, other forms: a parameter's default, or a keyword of a call
# [[ops]]
# kind = "set-default"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# call = "parser.add_argument"  # the callee ...
# arg = \'"--todo-flag"\'  # ... whose first argument is this ...
# keyword = "default"  # ... and the keyword to set (or: param = "NAME" for a parameter of the scope)
# [ops.params]
# value = "True"
# expect = "False"

# --- insert: statements before/after an anchor statement, or at the start/end of the scope
# [[ops]]
# kind = "insert"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# anchor = \'if todo_condition:\'  # a statement, or the header of a compound one
# position = "before"  # or "after"; or instead of anchor: at = "start" / "end"
# [ops.params]
# code = \'\'\'
#
# if todo_other_condition:
#     todo_value = 1
# \'\'\'  # blank lines above the first statement are kept; revert removes exactly these

# --- ensure-import: `from MODULE import NAME` at module level (no scope)
# [[ops]]
# kind = "ensure-import"
# engine = "{engine}"
# file = "{pyfile}"
# [ops.locator]
# module = "{engine}.todo_module"
# [ops.params]
# name = "todo_name"
# # after = "other_name"  # optional: join an existing import after this name
# # defined_in = "{engine}/todo_module.py"  # optional: the name must be defined there

# --- replace-expr: replace an expression, matched token for token
# [[ops]]
# kind = "replace-expr"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# match = "major == 10"  # exactly as upstream writes it (revert writes it back)
# count = 1  # how many times the scope holds it
# [ops.params]
# with = "major in (10, 12)"

# --- text-replace: C++/CUDA/CMake/shell files (no scope); an exact number of occurrences
# [[ops]]
# kind = "text-replace"
# engine = "{engine}"
# file = "{cfile}"
# [ops.params]
# find = "(__CUDA_ARCH__ < 1200)"
# replace = "(__CUDA_ARCH__ < 1300)"  # must not occur in the pristine file
# count = 1

# --- text-hunk: a unified-diff hunk of whole lines with context (C++/CUDA/CMake, or comments in Python)
# [[ops]]
# kind = "text-hunk"
# engine = "{engine}"
# file = "{cfile}"
# [ops.params]
# hunk = \'\'\'
#  #if (__CUDA_ARCH__ >= 900)
# -#if (__CUDA_ARCH__ < 1200)
# +#if (__CUDA_ARCH__ < 1300)
#  int todo;
# \'\'\'  # ' ' context (must match exactly), '-' upstream's line, '+' the new one
# # count = 2  # optional: the same hunk at exactly this many places

# --- replace-stmt: replace one statement, at any depth of the scope
# [[ops]]
# kind = "replace-stmt"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# match = "self.todo_hook()"  # the whole statement, exactly as upstream writes it
# # after = "todo_x = 1"  # optional context: the statement above, below (before), or inside = "if todo:"
# [ops.params]
# with = "pass"

# --- wrap-stmts: put consecutive statements inside a new if / with / try (a guard around a block)
# [[ops]]
# kind = "wrap-stmts"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# match = "self.todo_hook()\\nself.todo_ready = True"  # the run, exactly as upstream writes it
# [ops.params]
# header = "if not todo_skip:"
# # footer = "except ImportError:\\n    pass"  # a try's clauses

# --- delete-stmt: take one statement out; revert puts it back between its neighbours
# [[ops]]
# kind = "delete-stmt"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# match = "self.todo_hook()"  # the whole statement, with the comment lines above it that go with it
# after = "todo_x = 1"  # the statement above it (or before = the one below it)

# --- add-branch: an elif/else clause added to an if-chain, beside a named branch
# [[ops]]
# kind = "add-branch"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# branch = \'elif todo_backend == "a"\'  # a branch of the chain: if ..., elif ... or else
# position = "after"  # or "before" (not before the chain's `if`)
# [ops.params]
# code = \'\'\'
# elif todo_backend == "b":
#     todo_value = 2
# \'\'\'

# --- call-arg: add, set or remove an argument of a located call
# [[ops]]
# kind = "call-arg"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# call = "todo_module.todo_call"  # the callee, token for token (+ arg = first argument)
# [ops.params]
# keyword = "todo_flag"  # or index = 0 for a positional argument
# value = "True"
# # action = "set" with expect = upstream's value; action = "remove" with value = upstream's value

# --- dict-entry: add, set or remove a key of a dict literal
# [[ops]]
# kind = "dict-entry"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# [ops.locator]
# target = "todo_table"  # the name it is assigned to, or keys = ['"a"'] it holds
# [ops.params]
# key = \'"todo_key"\'
# value = "todo_value"
# # after = \'"a"\'  # optional: where it goes (default: the end)

# --- a version variant: ops for some releases only (here: where upstream moved the code).
# # Op numbers run through the file: top-level [[ops]] first, then each variant's.
# [[variants]]
# when = {{ {engine} = ">=99.0" }}
# [[variants.ops]]
# kind = "set-default"
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{cls}"
# [variants.ops.locator]
# field = "todo_field_renamed"
# [variants.ops.params]
# value = "1024"
# expect = "None"

# --- a blocker: code that defeats the recipe while it stands (the recipe reads `blocked`)
# [[blockers]]
# engine = "{engine}"
# file = "{pyfile}"
# scope = "{func}"
# contains = ["if not todo_supported():", "raise ValueError"]  # fragments, in order
# message = "TODO: what goes wrong while this code stands"
# # when = {{ {engine} = ">=99.0" }}
'''


def template(rid: str, engine: str, shown_path: str = "") -> str:
    from patchkit.base.target import ENGINES

    info = ENGINES[engine]
    # the definition's template (engines.toml): a Python file, a class, a function, a C++ file
    pyfile, cls, func, cfile = info.template or (f"{info.package}/TODO.py", "Todo", "todo", f"{info.package}/TODO.cu")
    return TEMPLATE.format(
        id=rid,
        engine=engine,
        spec=">=0",
        pyfile=pyfile,
        cls=cls,
        func=func,
        cfile=cfile,
        path=shown_path or f"recipes/{rid}.toml",
    )


def new(project: Project, rid: str, engine: str, out: Optional[str]) -> int:
    """Write a commented template recipe (``-`` as --out: to stdout)."""
    from patchkit.base.target import ENGINES
    from patchkit.core.recipe import ID_HINT, ID_RE

    if not ID_RE.fullmatch(rid):
        raise RecipeError(f"{rid!r} is not a valid recipe id", f"{ID_HINT}, e.g. 'my-fix'")
    engine = engine or next(iter(ENGINES))
    if engine not in ENGINES:
        raise PatchkitError(f"--engine {engine!r}: unknown engine", f"engines: {', '.join(ENGINES)}")
    if out == "-":
        say(template(rid, engine).rstrip("\n"))
        return OK
    path = _recipe_path(project, rid, out)
    text = template(rid, engine, str(path))
    _write_new(path, out, text)
    say(f"wrote {path}: edit it, then `patchkit check {path}`")
    return OK


# -- check --------------------------------------------------------------------------------------


def _paths(project: Project, given: tuple[str, ...]) -> list[Path]:
    """The recipe files to check: the files and directories given, else every recipe in play."""
    if not given:
        try:
            cat = project.catalog()
        except RecipeError:  # e.g. a bundle named like a recipe: check every file, and say so
            dirs = [d.path for d in getattr(project, "recipe_dirs", ())] or [project.recipes_dir]
            return sorted((d / n for d in dirs if d.is_dir() for n in os.listdir(d) if n.endswith(".toml")), key=str)
        files = [r.path for r in cat.recipes.values()] + [b.path for b in getattr(cat, "broken", {}).values()]
        return sorted(set(files), key=str)
    out: list[Path] = []
    for g in given:
        p = Path(g)
        try:
            if p.is_dir():
                out += sorted(p / n for n in os.listdir(p) if n.endswith(".toml"))
            elif p.exists() or p.is_symlink():
                out.append(p)
            else:
                raise PatchkitError(f"{g}: no such recipe file or directory", "name .toml files or directories of them")
        except OSError as e:  # e.g. /proc/1/root: this user may not look inside
            from patchkit.base.regular import unreadable_hint

            raise PatchkitError(f"{g}: cannot be read ({e.strerror or e})", unreadable_hint(e)) from None
    return out


class Finding(dict):
    """One error: file, line, recipe, where, message, hint, diff (for a failing example)."""

    def line_text(self) -> str:
        loc = f"{self['file']}:{self['line']}" if self["line"] else self["file"]
        hint = f" (hint: {self['hint']})" if self["hint"] else ""
        return f"{loc}: {self['recipe']}: {self['where'] or 'recipe'}: {self['message']}{hint}"


def _finding(path: Path, rid: str, e: RecipeError) -> Finding:
    loc = getattr(e, "loc", None)
    if loc is None:  # raised before the recipe's own checks: the file itself
        msg = e.message
        head, _, rest = msg.partition(": ")
        loc, what, crumbs = head, rest or msg, []
    else:
        what, crumbs = e.what, e.crumbs
    file, _, line = loc.rpartition(":") if loc.rpartition(":")[2].isdigit() else (loc, "", "")
    return Finding(
        file=file,
        line=int(line) if line else 0,
        recipe=rid,
        where=" > ".join(crumbs),
        message=what,
        hint=e.hint,
        diff="",
    )


def _proposed(path: Path, recipe) -> list[str]:
    """A warning per proposed marker (drafted by `port`): it does not count until a person
    has read upstream's code and deleted its ``proposed`` line."""
    return [
        f"{path}:{m.line}: {recipe.id}: op #{op.index} > marker #{j}: WARNING: proposed, not counted until"
        f" confirmed: {m.proposed}"
        for op in recipe.ops
        for j, m in enumerate(op.markers, 1)
        if m.proposed
    ]


def check(project: Project, given: tuple[str, ...], as_json: bool = False) -> int:
    """Every error in every recipe file, one breadcrumb line each; exit 2 if any."""
    from patchkit.core.recipe import check_recipe

    files = _paths(project, given)
    findings: list[Finding] = []
    warnings: list[str] = []
    loaded = []
    examples = 0
    for path in files:
        recipe, errors = check_recipe(path)
        findings += [_finding(path, path.stem, e) for e in errors]
        if recipe is None:
            continue
        loaded.append(recipe)
        warnings += _proposed(path, recipe)
        for op in recipe.ops:
            for j, ex in enumerate(op.examples, 1):
                examples += 1
                bad = run_example(op, ex)
                if bad:
                    what, diff = bad
                    findings.append(
                        Finding(
                            file=str(path),
                            line=ex.line,
                            recipe=recipe.id,
                            where=f"op #{op.index} > example #{j}",
                            message=what,
                            hint="fix the example, or the op" if diff else "",
                            diff=diff,
                        )
                    )
    ids: dict[str, Path] = {}
    for r in loaded:  # across files: ids and bundle names
        if r.id in ids:
            findings.append(
                Finding(
                    file=str(r.path),
                    line=0,
                    recipe=r.id,
                    where="id",
                    message=f"also the id of {ids[r.id]}",
                    hint="one recipe per id",
                    diff="",
                )
            )
        ids.setdefault(r.id, r.path)
    for r in loaded:
        for b in r.bundles:
            if b in ids:
                findings.append(
                    Finding(
                        file=str(r.path),
                        line=0,
                        recipe=r.id,
                        where="bundles",
                        message=f"bundle name {b!r} is also a recipe id",
                        hint="rename the bundle or the recipe",
                        diff="",
                    )
                )
    if as_json:
        doc = {"ok": not findings, "files": len(files), "examples": examples, "errors": findings}
        if warnings:
            doc["warnings"] = warnings
        say(json.dumps(doc, indent=2))
    else:
        for w in warnings:
            say(w, err=True)
        for f in findings:
            say(f.line_text())
            if f["diff"]:
                say("    " + f["diff"].rstrip("\n").replace("\n", "\n    "))
        broken = len({f["file"] for f in findings})
        summary = (
            f"{len(findings)} error(s) in {broken} of {len(files)} recipe file(s)"
            if findings
            else f"{len(files)} recipe file(s), {examples} example(s): no errors"
        )
        say(summary, err=bool(findings))
    return USAGE if findings else OK


# -- capture ------------------------------------------------------------------------------------


def _write_new(path: Path, out: Optional[str], text: str) -> None:
    """A new recipe file (never over one), in its directory, made if absent; without --out,
    saying so (it is ./recipes, where no project was found: the recipe makes this directory a
    project).  A file that cannot be written is one line, and leaves no directory made for it."""
    made = [d for d in (path.parent, *path.parent.parents) if not os.path.isdir(d)]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise PatchkitError(f"{path}: already exists", "choose another id or --out, or delete the file first") from None
    except OSError as e:
        for d in made:  # nearest first (the ones never made fail too); one that holds a file stays
            try:
                d.rmdir()
            except OSError:
                if os.path.lexists(d):
                    break
        short = e.errno == errno.ENAMETOOLONG
        raise PatchkitError(
            f"{path}: cannot be written ({e.strerror or e})",
            "a shorter path, or --out FILE elsewhere" if short else "a directory this user may write, or --out FILE",
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    if made and not out:
        say(f"created {path.parent}/: no project in . or above (a directory with upstream_pins.toml or "
            "recipes/*.toml); this one is one from now on. --out FILE writes elsewhere.")  # fmt: skip


def _recipe_path(project: Project, rid: str, out: Optional[str]) -> Path:
    path = Path(out) if out else project.new_recipes_dir() / f"{rid}.toml"
    if path.name != f"{rid}.toml":
        raise PatchkitError(
            f"--out {path}: a recipe's file is named after its id",
            f"write it to {path.with_name(rid + '.toml')}, or choose the id {path.stem!r}",
        )
    if os.path.lexists(path):  # False, not an error, for a name too long to exist (_write_new says it)
        raise PatchkitError(f"{path}: already exists", "choose another id or --out, or delete the file first")
    return path


def prove(text: str, rid: str, targets: dict, refs: dict, changed: list, partial: bool = False) -> list[str]:
    """Apply the captured recipe with the planner to a pristine copy of the changed files
    (in memory: nothing is written there either) and compare with the edited bytes (with
    ``partial``: with the bytes the captured ops alone make).  Returns what is wrong, or []."""
    import tempfile

    from patchkit.base.target import ENGINES, Target
    from patchkit.core.planner import plan_apply
    from patchkit.core.recipe import load_recipe
    from patchkit.core.session import Session
    from patchkit.upstream.pristine import RELEASES

    with tempfile.TemporaryDirectory(prefix="patchkit-capture-") as tmp:
        rpath = Path(tmp) / "recipes" / f"{rid}.toml"
        rpath.parent.mkdir()
        rpath.write_text(text, encoding="utf-8")
        try:
            recipe = load_recipe(rpath)
        except RecipeError as e:
            return [f"the captured recipe does not load: {e}"]
        trees = {}
        for engine, t in targets.items():
            # in the target's own layout: an sdist's or a checkout's files outside the package
            # (vLLM's csrc/, CMakeLists.txt) have no place in a package layout
            root = (Path(tmp) / "trees" / engine).resolve()
            pkg = ENGINES[engine].package
            copy = Target(engine, root, t.layout, t.version)
            files = {f"{pkg}/__init__.py": refs[engine].read(f"{pkg}/__init__.py") or b""}
            files.update({c.logical: c.pristine for c in changed if c.engine == engine})
            if f"{pkg}/_version.py" not in files:
                files[f"{pkg}/_version.py"] = f'__version__ = "{t.version}"\n'.encode()
            for logical, data in files.items():
                p = root / copy.relpath(logical)
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
            trees[engine] = copy
        session = Session(trees, releases=RELEASES)
        plan = plan_apply(session, [recipe], ignore_range=True, dry_run=True)
        learned.keep(session.learned)
        if plan.blockers:
            return [f"applied to the pristine release: {b}" for b in plan.blockers]
        made = {(f.target.engine, f.logical): f.new for f in plan.files}
        wrong = []
        for c in changed:
            got = made.pop((c.engine, c.logical), c.pristine)
            if got != (c.captured if partial and c.pristine is not None and c.edited is not None else c.edited):
                old, new = (got or b"").decode("utf-8", "replace"), (c.edited or b"").decode("utf-8", "replace")
                first = next(
                    (i for i, (x, y) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False)) if x != y),
                    min(len(old.splitlines()), len(new.splitlines())),
                )
                wrong.append(f"{c.engine}:{c.logical}:{first + 1}: applying the recipe gives other bytes than the edit")
        wrong += [f"{e}:{lg}: the recipe changes a file the edit did not" for e, lg in made]
        return wrong


def capture(project: Project, rid: str, target_args: tuple[str, ...], out: Optional[str], partial: bool = False) -> int:
    """A recipe from a hand edit: written only when it reproduces the edit exactly (with
    ``partial``: the changes it can express, the rest listed with file:line)."""
    from patchkit.authoring import capture as cap
    from patchkit.core.recipe import ID_HINT, ID_RE
    from patchkit.upstream import pristine

    if not ID_RE.fullmatch(rid):
        raise RecipeError(f"{rid!r} is not a valid recipe id", f"{ID_HINT}, e.g. 'my-fix'")
    if not target_args:
        raise PatchkitError("capture needs the edited tree", f"e.g. `patchkit capture {rid} -t sglang=./sglang`")
    path = _recipe_path(project, rid, out)
    targets = project.targets(tuple(target_args), set())
    refs = {}
    for engine, t in targets.items():
        ref = pristine.Reference(t)
        if not ref.available:
            raise PatchkitError(
                f"{t.root}: no pristine release to compare the edit with ({ref.why_not})",
                "capture needs the release the tree was made from: go online, or put its wheel in patchkit's cache",
            )
        refs[engine] = ref
    ops, failed, changed = cap.capture(targets, refs)
    if not changed:
        say(f"nothing to capture: {', '.join(r.what for r in refs.values())} and the tree(s) are the same", err=True)
        return NOT_THERE
    for f in failed:
        say(f"capture: cannot express {f}", err=True)
    if failed and not (partial and ops):
        hint = "; --partial writes the rest" if ops and not partial else ""
        say(f"capture: nothing was written ({len(failed)} change(s) not expressed{hint})", err=True)
        return NOT_THERE
    text = cap.recipe_toml(rid, targets, refs, ops, failed)
    # Each Python op carries its site as the release holds it (docs/identity.md).
    text = cap.recipe_toml(rid, targets, refs, ops, failed, cap.identities(text, rid, targets, refs))
    wrong = prove(text, rid, targets, refs, changed, partial=bool(failed))
    if wrong:
        for w in wrong:
            say(f"capture: {w}", err=True)
        say("capture: nothing was written (the recipe would not reproduce the edit exactly)", err=True)
        return NOT_THERE
    _write_new(path, out, text)
    kinds = ", ".join(sorted({op.kind for op in ops}))
    if failed:
        say(
            f"wrote {path}: {len(ops)} op(s) ({kinds}); {len(failed)} change(s) are not in it (listed above and"
            " in the recipe's comments): applied to the pristine release it gives exactly the edit without them"
        )
        return NOT_THERE
    say(
        f"wrote {path}: {len(ops)} op(s) ({kinds}) over {len(changed)} file(s); applied to the pristine release"
        " it gives exactly the edited bytes"
    )
    return OK


__all__ = ["NOT_THERE", "capture", "check", "new", "run_example", "template"]
