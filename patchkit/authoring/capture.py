"""`patchkit capture`: a recipe from a hand edit of a tree.

The tree is compared with the pristine release of its version (patchkit/upstream/pristine.py: the
release's wheel, from the cache or the index, or a git checkout's tagged commit).  Each
changed file is diffed line by line, and each hunk is expressed as the op that makes it:

- Python (patchkit/authoring/pycapture.py): the smallest piece of code that differs between the
  pristine and the edited statement (``ast``, walked in parallel) names the op: an element
  added to (or taken from) a list, tuple or set literal -> list-element (an element that was
  a commented-out line -> ``uncomment``); an operand added to an ``or`` (``and``) chain ->
  or-operand (and-operand); a changed field, parameter or keyword default -> set-default
  (several changed in one statement, as three defaults of one ``def`` header: one op each,
  made in order); a keyword argument added or removed -> call-arg; a dict key ->
  dict-entry; an elif/else arm -> add-branch; a name added to ``from M import ...`` ->
  ensure-import; statements added -> insert, deleted ->
  delete-stmt, anchored on neighbouring statements; any other expression -> replace-expr, any
  other simple statement -> replace-stmt; comments and blank lines -> text-hunk.
- Other files: text-hunks of whole lines, with as much context as makes each stand at
  exactly the places it changes (identical hunks become one op with a count).

Every candidate op is made on the file as edited so far, in memory, and kept only when the
file then equals the pristine one with exactly the hunks it claims applied, byte for byte;
the first candidate that does is kept.  A hunk no candidate makes (a new file, a parameter
added to a def) is reported, file and line, with the nearest op kind and why it did not
fit.  Nothing here touches the disk; patchkit/commands/author.py proves the whole recipe
with the planner on a pristine copy before it writes it (with --partial: what was captured).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Optional

from patchkit.authoring.hunks import (  # noqa: F401  (capture's lower half, re-exported)
    CONTEXTS,
    CapturedOp,
    Lines,
    Unexpressed,
    _claims,
    _claims_any,
    capture_text,
    hunk_text,
    text_hunks,
    toml_str,
)
from patchkit.base import regular
from patchkit.base.target import ENGINES, STATE_DIR, Target


@dataclass
class Changed:
    """One file that differs from the pristine release."""

    engine: str
    logical: str
    pristine: Optional[bytes]  # None: the release has no such file
    edited: Optional[bytes]  # None: the tree has no such file
    captured: Optional[bytes] = None  # what the captured ops make of it (--partial: not all of the edit)


# -- which files changed ------------------------------------------------------------------------


def _logical(target: Target, rel: str) -> Optional[str]:
    """The logical name of a path relative to the target root, or None outside the engine."""
    pairs = sorted(ENGINES[target.engine].layouts[target.layout], key=lambda p: -len(p[1]))
    for lp, pp in pairs:
        if rel.startswith(pp):
            return lp + rel[len(pp) :]
    return None


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    return "__pycache__" in parts or rel.endswith((".pyc", ".pyo")) or STATE_DIR in parts


def changed_files(target: Target, ref) -> list[Changed]:
    """Every file of the engine that differs from the pristine release ``ref``."""
    roots = [pp for _, pp in ENGINES[target.engine].layouts[target.layout]]
    members = ref.members()
    commit = ref.commit
    if members is not None:
        names = [n for n in members if n.startswith(tuple(roots))]
        listed = set(names)
    else:  # a git checkout: what differs from the tagged commit, tracked or not

        def git(*args: str) -> list[str]:
            got = subprocess.run(
                ["git", "-C", str(target.root), *args, "--", *roots], capture_output=True, text=True, check=False
            )
            return [ln for ln in got.stdout.splitlines() if ln]

        names = git("diff", "--name-only", "--no-renames", commit) + git("ls-files", "--others", "--exclude-standard")
        listed = set()
    out: list[Changed] = []
    for rel in sorted(set(names)):
        if _skipped(rel):
            continue
        logical = _logical(target, rel)
        if logical is None:
            continue
        old = ref.read(logical, keep=False)
        new = regular.read_file(target.root / rel)  # a FIFO never blocks; a directory is an error
        if old != new:
            out.append(Changed(target.engine, logical, old, new))
    if members is not None:  # files the release does not have
        for top in {r.split("/")[0] for r in roots}:
            for dirpath, dirnames, files in os.walk(target.root / top):
                dirnames[:] = [d for d in dirnames if d not in ("__pycache__", STATE_DIR)]
                for name in files:
                    rel = os.path.relpath(os.path.join(dirpath, name), target.root).replace(os.sep, "/")
                    if rel in listed or _skipped(rel) or not rel.startswith(tuple(roots)):
                        continue
                    logical = _logical(target, rel)
                    if logical is not None:
                        out.append(Changed(target.engine, logical, None, regular.read_file(target.root / rel)))
    return sorted(out, key=lambda c: c.logical)


def capture_python(engine: str, logical: str, old: str, new: str) -> tuple[list[CapturedOp], list[Unexpressed]]:
    """A Python file's changes as ops (patchkit/authoring/pycapture.py)."""
    from patchkit.authoring.pycapture import capture_python as run

    return run(engine, logical, old, new)


# -- a whole target -------------------------------------------------------------------------------


def capture(targets: dict[str, Target], refs: dict) -> tuple[list[CapturedOp], list[Unexpressed], list[Changed]]:
    """The ops that turn each target's pristine release into the tree, or what could not be
    expressed.  ``refs``: engine -> pristine.Reference."""
    from patchkit.core.document import decode_source

    ops: list[CapturedOp] = []
    failed: list[Unexpressed] = []
    changed: list[Changed] = []
    for engine, t in targets.items():
        for ch in changed_files(t, refs[engine]):
            changed.append(ch)
            if ch.pristine is None:
                failed.append(Unexpressed(engine, ch.logical, 0, "a new file: no op kind creates files"))
                continue
            if ch.edited is None:
                failed.append(Unexpressed(engine, ch.logical, 0, "deleted: no op kind deletes files"))
                continue
            python = ch.logical.endswith(".py")
            path = t.root / t.relpath(ch.logical)
            try:
                old, enc, errors = decode_source(path, ch.pristine, python)
                new, enc2, _ = decode_source(path, ch.edited, python)
            except Exception as e:  # a file patchkit would not edit either
                failed.append(Unexpressed(engine, ch.logical, 0, str(e)))
                continue
            if enc != enc2:
                failed.append(Unexpressed(engine, ch.logical, 0, f"its encoding changed ({enc} -> {enc2})"))
                continue
            if python:
                from patchkit.authoring.pycapture import capture_with_text

                got, bad, made = capture_with_text(engine, ch.logical, old, new)
            else:
                got, bad = capture_text(engine, ch.logical, old, new)
                made = new if got else old
            ch.captured = made.encode(enc, errors)
            ops += got
            failed += bad
    return ops, failed, changed


# -- the recipe as TOML ---------------------------------------------------------------------------


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_str(x) for x in v) + "]"
    return toml_str(v)


def identities(text: str, rid: str, targets: dict[str, Target], refs: dict) -> dict[int, dict]:
    """op number -> its ``[ops.identity]`` table (carried.py): each Python op's site as the
    pristine release holds it, from the recipe ``text`` as captured."""
    import tempfile
    from pathlib import Path

    from packaging.version import Version

    from patchkit.authoring.port import identity_table
    from patchkit.base.errors import RecipeError
    from patchkit.core.recipe import load_recipe

    with tempfile.TemporaryDirectory(prefix="patchkit-capture-") as tmp:
        path = Path(tmp) / f"{rid}.toml"
        path.write_text(text, encoding="utf-8")
        try:
            recipe = load_recipe(path)
        except RecipeError:
            return {}  # prove() says why
    out = {}
    for op in recipe.ops:
        label = f"{op.engine} {Version(targets[op.engine].version).public}"
        tab = identity_table(refs[op.engine], op, label)
        if tab:
            out[op.index] = compact(tab)
    return out


MAX_IMPORTS = 8  # of a captured identity: the imports its site's lines name, at most these


def compact(tab: dict) -> dict:
    """A captured identity as data a reviewer reads, not a dump: of what the file imports
    from the engine, only what the site's own lines name (an import names the site's code
    where that code moved into the module it came from: context.alike's import bonus), at
    most MAX_IMPORTS; a file's 80 imports are a 2,900-character line otherwise."""
    import re

    words: set[str] = set()
    for site in tab.get("sites", ()):
        for v in site.values():
            for text in v if isinstance(v, list) else [v]:
                if isinstance(text, str):
                    words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))

    def named(imp: str) -> bool:
        module, _, name = imp.partition(":")
        return (name or module.rsplit(".", 1)[-1]) in words

    return {**tab, "imports": [i for i in tab.get("imports", ()) if named(i)][:MAX_IMPORTS]}


def recipe_toml(
    rid: str,
    targets: dict[str, Target],
    refs: dict,
    ops: list[CapturedOp],
    failed: Optional[list] = None,
    idents: Optional[dict[int, dict]] = None,
    header: str = "",
    summary: str = "",
    rationale: str = "",
) -> str:
    """The recipe as TOML.  ``header``, ``summary`` and ``rationale`` (the text inside its
    triple quotes): another writer's words instead of capture's TODOs (`gates --draft`)."""
    from packaging.version import Version

    from patchkit.authoring.port import next_release

    engines = sorted({op.engine for op in ops})
    versions = {e: Version(targets[e].version).public for e in engines}
    made = ", ".join(f"{e} {versions[e]}" for e in engines)
    why = (
        [rationale]
        if rationale
        else [
            f"Captured from {', '.join(str(targets[e].root) for e in engines)} against "
            f"{', '.join(refs[e].what for e in engines)}.",
            "TODO: why, with numbers.",
        ]
    )
    out = [
        header or "# Captured by `patchkit capture` from a hand edit; `patchkit check` validates it.",
        f'id = "{rid}"',
        f"summary = {toml_str(summary)}"
        if summary
        else f'summary = "TODO: say in one line what this does (captured from a hand edit of {made})"',
        'rationale = """',
        *why,
        '"""',
        "bundles = []",
        "",
        # A range, not a pin, so that `port` can end it and draft the next variant; it holds
        # the release's post-releases, widened after `patchkit drift --across` or `port`.
        "[engines]  # the release line it was captured on; widen after `patchkit drift --across` or `port`",
        *[f'{e} = ">={versions[e]},<{next_release(versions[e])}"' for e in engines],
    ]
    if failed:
        out += ["", f"# Not captured ({len(failed)}; `capture --partial`): write these by hand."]
        out += [f"#   {f}" for f in failed]
    for n, op in enumerate(ops, 1):
        out += ["", "[[ops]]"]
        if op.hunks:
            out[-1] += f"  # {op.hunks}"
        out += [f'kind = "{op.kind}"', f'engine = "{op.engine}"', f"file = {toml_str(op.file)}"]
        if op.scope:
            out.append(f"scope = {toml_str(op.scope)}")
        if op.jit_modules:
            out.append(f"jit_modules = {_value(list(op.jit_modules))}")
        for section in ("locator", "params"):
            table = getattr(op, section)
            if table:
                out.append(f"[ops.{section}]")
                out += [f"{k} = {_value(v)}" for k, v in table.items()]
        if idents and n in idents:
            from patchkit.core.carried import toml_lines

            out += toml_lines("ops", idents[n], toml_str)
    return "\n".join(out) + "\n"
