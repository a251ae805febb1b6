"""`fork sync | upgrade | status | export`: recipes as a git branch on an upstream tag.

The work is done by patchkit.fleet.fork, which returns values; this module picks the repository,
base and recipes, renders the values for people or as one JSON document, and returns the
exit code: 0 the branch is in the asked-for state, 1 it is not (a recipe is missing or
ambiguous, a commit is stale), 2 usage or target error (raised as PatchkitError).

``--json`` documents (one per invocation):

* sync / upgrade: ``{command, ok, engine, repo, branch, base: {rev, commit, version},
  previous, previous_base, previous_recipes, head, changed, recipes: [{id, state, action,
  commit, files, notes, ops}], other_engines, errors}`` (+ ``pin`` for upgrade), where
  action is committed | dropped | blocked | not-built;
* status: ``{command, ok, engine, repo, branches: [{branch, head, base, carried: [{commit,
  recipe, sha256, current_sha256, stale, subject}], stale, up_to_date, expected_head,
  expected, drift, problem}]}``;
* export: ``{command, ok, engine, repo, branch, base, out, series, patches}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from patchkit.base import term
from patchkit.base.errors import PatchkitError
from patchkit.base.model import per_engine
from patchkit.base.states import State
from patchkit.base.target import ENGINES, parse_target_arg
from patchkit.commands import NOT_THERE, OK, say
from patchkit.core import pins as pins_mod
from patchkit.core.project import Project
from patchkit.fleet import fork as F

_COLORS = {F.COMMITTED: "green", F.DROPPED: "cyan", F.BLOCKED: "red", F.NOT_BUILT: "bright_black"}


def open_fork_target(target: str):
    """--target ENGINE=REPO -> (engine, gitcli.Repo)."""
    engine, path = parse_target_arg(target)
    if engine not in ENGINES:
        raise PatchkitError(f"--target {target!r}: unknown engine {engine!r}", f"engines: {', '.join(ENGINES)}")
    return engine, F.open_repo(path)


def _short(sha: Optional[str]) -> str:
    return sha[:12] if sha else "-"


def _branch_for(repo, names: tuple[str, ...], command: str) -> str:
    if names:
        return F.branch_name(names)
    have = F.fork_branches(repo)
    if len(have) == 1:
        return have[0]
    if not have:
        raise PatchkitError(
            f"no patchkit/* branch in {repo.working_tree_dir}",
            "build one with `patchkit fork sync NAME -t ENGINE=REPO`",
        )
    raise PatchkitError(
        f"{repo.working_tree_dir} has several fork branches ({', '.join(have)})",
        f"name one: `patchkit fork {command} NAME ...`",
    )


def _steps_human(steps: list[F.Step]) -> list[str]:
    out = []
    for s in steps:
        line = (
            f"  {s.recipe:<24} {s.state:<9} "
            f"{term.style(s.action, fg=_COLORS.get(s.action))}{' ' * (10 - len(s.action))}"
        )
        if s.commit:
            line += f" {_short(s.commit)}  {', '.join(s.files)}"
        elif s.action == F.DROPPED:
            line += " upstream already does it; no commit"
        out.append(line.rstrip())
        if s.action == F.BLOCKED and s.result:
            for o in s.result.ops:
                if o.state not in (State.PENDING, State.UPSTREAM, State.APPLIED):
                    where = f"{o.file}:{o.line}" if o.line else o.file
                    out.append(f"      #{o.index} {o.kind} {o.state} {where}  {o.message}".rstrip())
        for n in s.notes:
            out.append(f"      {n}")
    return out


def _rebuild_json(command: str, res: F.Rebuild, repo, **extra) -> dict:
    b = res.build
    return {
        "command": f"fork {command}",
        "ok": b.ok,
        "engine": b.engine,
        "repo": repo.working_tree_dir,
        "branch": res.branch,
        "base": {"rev": b.base_rev, "commit": b.base, "version": b.version},
        "previous": res.previous,
        "previous_base": res.previous_base,
        "previous_recipes": [c.recipe for c in res.previous_carried],
        "head": b.head if b.ok else res.previous,
        "changed": res.changed,
        "recipes": [s.to_json() for s in b.steps],
        "other_engines": b.elsewhere,
        "errors": b.blockers,
        **extra,
    }


def _rebuild_human(command: str, res: F.Rebuild, repo) -> None:
    b = res.build
    say(
        f"{b.engine} fork {res.branch} on {b.base_rev} ({_short(b.base)}, {b.engine} "
        f"{b.version or 'unknown version'}) in {repo.working_tree_dir}"
    )
    for line in _steps_human(b.steps):
        say(line)
    if b.elsewhere:
        say(f"  ({', '.join(b.elsewhere)}: no {b.engine} edits; not part of this fork)")
    if not b.ok:
        for e in b.blockers:
            say(f"error: {e}", err=True)
        left = f"left at {_short(res.previous)}" if res.previous else "not created"
        say(
            f"fork {command}: stopped; {res.branch} {left}. Fix or retire the recipe (`patchkit show ID`), then "
            "run it again.",
            err=True,
        )
        return
    n = sum(1 for s in b.steps if s.action == F.COMMITTED)
    dropped = [s.recipe for s in b.steps if s.action == F.DROPPED]
    if res.previous is None:
        say(f"\ncreated {res.branch} at {_short(b.head)}: {n} commit(s) on {b.base_rev}")
    elif res.changed:
        say(
            f"\nmoved {res.branch}: {_short(res.previous)} -> {_short(b.head)} ({n} commit(s) on {b.base_rev}; the "
            f"old head stays in `git reflog {res.branch}`)"
        )
    else:
        say(f"\n{res.branch} unchanged at {_short(b.head)}: the recipes and the base give the same commits")
    if dropped:
        say(
            f"upstream already does {', '.join(dropped)}: not carried; these recipes can be retired for {b.engine} "
            f"{b.version or b.base_rev}."
        )


def sync(
    project: Project,
    names: tuple[str, ...],
    target: str,
    base: Optional[str] = None,
    force: bool = False,
    as_json: bool = False,
) -> int:
    """Create or rebuild patchkit/<name> on ``base`` (default: the pinned rev)."""
    branch = F.branch_name(names)
    recipes = project.catalog().select(names)
    engine, repo = open_fork_target(target)
    if base is None:
        if project.pins_path is None:
            tag = _head_tag(repo)
            raise PatchkitError(
                f"fork sync: no --base, and no upstream_pins.toml here or above to take {engine}'s pinned rev from",
                f"name the upstream tag or commit to build on: `patchkit fork sync {'+'.join(names)} -t {target} "
                f"--base {tag or 'TAG'}`" + (f" ({tag} is the tag the checkout is on)" if tag else ""),
            )
        pins = project.pins()
        pin = pins.get(engine)
        if pin is None or not pin.rev:
            raise PatchkitError(
                f"no pinned rev for {engine} in {project.pins_path}",
                f'pass --base REV (a tag or commit of the upstream repo), or add rev = "..." under [{engine}]',
            )
        base = pin.rev
    if not per_engine(recipes, engine):
        raise PatchkitError(
            f"{', '.join(names)}: no recipe edits {engine}",
            "name recipes whose [engines] include the target's engine (`patchkit list`)",
        )
    res = F.rebuild(repo, engine, branch, recipes, base, "sync", force=force)
    if as_json:
        say(json.dumps(_rebuild_json("sync", res, repo), indent=2))
    else:
        _rebuild_human("sync", res, repo)
    return OK if res.build.ok else NOT_THERE


def _head_tag(repo) -> Optional[str]:
    """The tag the checkout's HEAD is on, if any (the base a user most likely means)."""
    from patchkit.base.gitcli import GitError

    try:
        return repo.git("describe", "--tags", "--exact-match", "HEAD") or None
    except GitError:  # no tag there, or no commit yet: then there is nothing to suggest
        return None


def upgrade(
    project: Project,
    names: tuple[str, ...],
    target: str,
    to: str,
    move_pin: bool = False,
    force: bool = False,
    as_json: bool = False,
) -> int:
    """Rebuild an existing fork branch on ``to``; move the pin only when asked."""
    engine, repo = open_fork_target(target)
    branch = _branch_for(repo, names, "upgrade")
    if F.branch_head(repo, branch) is None:
        raise PatchkitError(
            f"no branch {branch} in {repo.working_tree_dir}",
            f"create it first: `patchkit fork sync {branch[len(F.BRANCH_PREFIX) :]} -t {target}`",
        )
    recipes = project.catalog().select(F.names_of(branch))
    if move_pin:
        project.pins()  # fail before building if the pins file is missing or broken
    res = F.rebuild(repo, engine, branch, recipes, to, "upgrade", force=force)
    pin_moved = {}
    if res.build.ok and move_pin:
        pin_moved = _move_pin(project, engine, to, res.build.version)
    if as_json:
        say(json.dumps(_rebuild_json("upgrade", res, repo, pin=pin_moved or None), indent=2))
    else:
        _rebuild_human("upgrade", res, repo)
        if res.build.ok:
            was = {c.recipe for c in res.previous_carried}
            gone = [s.recipe for s in res.build.steps if s.action == F.DROPPED and s.recipe in was]
            if gone:
                say(
                    f"dropped from {res.branch}: {', '.join(gone)} (upstream {to} already does "
                    f"{'it' if len(gone) == 1 else 'them'})"
                )
            for s in res.build.steps:
                if any("moved upstream" in n for n in s.notes):
                    say(f"carried {s.recipe} to where upstream moved its code (see the notes above)")
            if pin_moved:
                say(
                    f"moved the {engine} pin in {project.pins_path}: "
                    + ", ".join(f"{k} = {v!r}" for k, v in pin_moved.items())
                )
                if "version" in pin_moved:
                    say("  the wheel's sha256 is recorded by the next `patchkit sync`")
            elif project.pins_path is None:
                say(
                    f"no upstream_pins.toml here, so no pin to move: a later `fork sync` takes --base {to} "
                    f"(`patchkit fork sync {branch[len(F.BRANCH_PREFIX) :]} -t {target} --base {to}`)"
                )
            else:
                say(
                    f"the {engine} pin did not move; pass --move-pin to move it (a later `fork sync` without "
                    "--base builds on the pin)"
                )
    return OK if res.build.ok else NOT_THERE


def _move_pin(project: Project, engine: str, rev: str, version: Optional[str]) -> dict:
    pin = project.pins().get(engine)
    if pin is None:
        raise PatchkitError(
            f"no [{engine}] section in {project.pins_path}",
            f"add [{engine}] with version and rev, then run with --move-pin again",
        )
    changed = {}
    if pin.rev != rev:
        pins_mod.set_value(project.pins_path, engine, "rev", rev)
        changed["rev"] = rev
    if version and version != pin.version:
        # The pinned wheel belongs to the old version; `patchkit sync` records the new one.
        pins_mod.set_value(project.pins_path, engine, "version", version)
        pins_mod.set_value(project.pins_path, engine, "wheel", "")
        pins_mod.set_value(project.pins_path, engine, "sha256", "")
        changed.update(version=version, wheel="", sha256="")
    return changed


def status(project: Project, names: tuple[str, ...], target: str, as_json: bool = False) -> int:
    """What each fork branch carries, which commits are stale, whether it is up to date."""
    engine, repo = open_fork_target(target)
    branches = [F.branch_name(names)] if names else F.fork_branches(repo)
    if not branches:
        raise PatchkitError(
            f"no patchkit/* branch in {repo.working_tree_dir}",
            "build one with `patchkit fork sync NAME -t ENGINE=REPO`",
        )
    catalog = project.catalog()
    all_sha = {r.id: r.sha256 for r in catalog.recipes.values()}
    found = []
    for branch in branches:
        try:
            recipes = catalog.select(F.names_of(branch))
        except PatchkitError:
            recipes = None
        found.append(F.status(repo, engine, branch, recipes, all_sha))
    ok = all(st.up_to_date and not st.stale for st in found)
    if as_json:
        say(
            json.dumps(
                {
                    "command": "fork status",
                    "ok": ok,
                    "engine": engine,
                    "repo": repo.working_tree_dir,
                    "branches": [
                        {
                            "branch": st.branch,
                            "head": st.head,
                            "base": st.base,
                            "carried": [c.to_json() for c in st.carried],
                            "stale": [c.recipe for c in st.stale],
                            "up_to_date": st.up_to_date,
                            "expected_head": st.expected.head if st.expected and st.expected.ok else None,
                            "expected": [s.to_json() for s in st.expected.steps] if st.expected else [],
                            "drift": st.drift(),
                            "problem": st.problem,
                        }
                        for st in found
                    ],
                },
                indent=2,
            )
        )
        return OK if ok else NOT_THERE
    for st in found:
        say(
            f"{st.branch} at {_short(st.head)} on {_short(st.base)} ({len(st.carried)} patchkit commit(s)) in "
            f"{repo.working_tree_dir}"
        )
        for c in st.carried:
            flag = "gone" if c.current_sha256 is None else ("STALE" if c.stale else "current")
            why = {"gone": "  the recipe no longer exists", "STALE": "  the recipe file changed since this commit"}.get(
                flag, ""
            )
            label = term.style(flag, fg={"current": "green"}.get(flag, "red"))
            say(f"  {_short(c.commit)} {c.recipe:<24} {label}" + (f"{' ' * (8 - len(flag))}{why}" if why else ""))
        if st.up_to_date:
            say("  up to date: `fork sync` would build exactly these commits")
        elif st.problem:
            say(f"  cannot compare with a rebuild: {st.problem}")
        else:
            say(f"  out of date: a rebuild on the same base gives {_short(st.expected.head)}:")
            for d in st.drift():
                say(f"    {d}")
            say(
                f"  rebuild it with `patchkit fork sync {'+'.join(F.names_of(st.branch))} -t {target} --base "
                f"{_short(st.base)}`"
            )
    return OK if ok else NOT_THERE


def export(project: Project, name: str, target: str, out: str, force: bool = False, as_json: bool = False) -> int:
    """Write patchkit/<name> as numbered git format-patch files plus a quilt series."""
    engine, repo = open_fork_target(target)
    ex = F.export(repo, F.branch_name((name,)), Path(out), force=force)
    if as_json:
        say(
            json.dumps(
                {
                    "command": "fork export",
                    "ok": True,
                    "engine": engine,
                    "repo": repo.working_tree_dir,
                    "branch": ex.branch,
                    "base": ex.base,
                    "out": str(ex.out),
                    "series": str(ex.series),
                    "patches": [str(p) for p in ex.patches],
                },
                indent=2,
            )
        )
        return OK
    if not ex.patches:
        say(
            f"{ex.branch} carries no commit on {_short(ex.base)} (upstream has every recipe); wrote an empty "
            f"{ex.series}"
        )
        return OK
    say(f"exported {ex.branch} ({len(ex.patches)} patch(es) on {_short(ex.base)}) to {ex.out}:")
    for p in ex.patches:
        say(f"  {p.name}")
    say("  series")
    say(
        f"every patch parsed back as a unified diff; apply them on {_short(ex.base)} with `git am "
        f"{ex.out}/*.patch`, `quilt push -a`, or `patch -p1` in series order"
    )
    return OK
