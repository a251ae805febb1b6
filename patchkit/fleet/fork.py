"""Fork branches: a recipe set as plain git history on top of an upstream release.

``patchkit/<name>`` holds one commit per recipe that touches the engine, in recipe order,
on top of a base commit (an upstream tag).  Each commit is exactly what ``apply`` of that
recipe alone writes on the tree of the commit before it, so the branch can be reviewed,
cherry-picked, exported as a quilt series or fed to ``git am``.

Commits are deterministic: author and committer are fixed and dated with the base commit's
committer date, and the message is made only from the recipe, so the same base and the same
recipe files give the same SHAs; rebuilding an unchanged fork leaves the branch as it was.

Safety: commits are built in a temporary detached worktree (``git worktree add --detach``)
outside the user's checkout; the user's HEAD, index, work tree and other branches are never
touched.  Only ``refs/heads/patchkit/<name>`` moves, with a compare-and-swap on its old
value, and only once the whole branch has been built.

A recipe that spans engines (allreduce-fusion edits SGLang and FlashInfer) contributes to a
fork of one engine only the ops for that engine: the fork repository holds one engine's
code, and the other engine's ops go into that engine's fork.  The commit body says so.

Nothing here prints; results are values rendered by patchkit.commands.fork.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from patchkit.base import gitcli
from patchkit.base.errors import PatchkitError, TargetError
from patchkit.base.gitcli import Commit, GitError, Repo
from patchkit.base.model import Recipe, per_engine
from patchkit.base.results import RecipeResult
from patchkit.base.states import State
from patchkit.base.target import ENGINES, open_target
from patchkit.core import learned, transaction
from patchkit.core.judge import evaluate
from patchkit.core.planner import plan_apply
from patchkit.core.session import Session
from patchkit.core.verdict import results
from patchkit.upstream.pristine import RELEASES

BRANCH_PREFIX = "patchkit/"
TRAILER = "Patchkit-Recipe"
AUTHOR_NAME, AUTHOR_EMAIL = "patchkit", "patchkit@localhost"
_TRAILER_RE = re.compile(rf"^{TRAILER}:\s*([a-z0-9][a-z0-9-]*)\s+([0-9a-f]{{64}})\s*$", re.M)

# What happens to a recipe when a fork is built.
COMMITTED = "committed"  # its edits are one commit of the branch
DROPPED = "dropped"  # upstream already does it: no commit
BLOCKED = "blocked"  # missing / ambiguous / could not be applied: the build stops
NOT_BUILT = "not-built"  # would be committed, but another recipe blocked the build


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One recipe of a fork build."""

    recipe: str
    state: str  # the recipe's state on the tree it was judged on (results.STATES)
    action: str  # COMMITTED | DROPPED | BLOCKED | NOT_BUILT
    commit: Optional[str] = None
    files: tuple[str, ...] = ()  # paths relative to the repository root
    notes: tuple[str, ...] = ()  # moved ops, ops left to another engine's fork, ...
    result: Optional[RecipeResult] = None

    def to_json(self) -> dict:
        return {
            "id": self.recipe,
            "state": self.state,
            "action": self.action,
            "commit": self.commit,
            "files": list(self.files),
            "notes": list(self.notes),
            "ops": [o.to_json() for o in self.result.ops] if self.result else [],
        }


@dataclass
class Build:
    """A fork built on a base commit (not yet on any branch)."""

    engine: str
    base_rev: str
    base: str  # commit sha
    head: str  # commit sha (== base when nothing is carried)
    steps: list[Step] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    version: Optional[str] = None  # the engine version of the base tree
    elsewhere: list[str] = field(default_factory=list)  # recipes with no op for this engine

    @property
    def ok(self) -> bool:
        return not self.blockers


@dataclass(frozen=True)
class Carried:
    """A commit of a fork branch, read back from its trailer."""

    commit: str
    recipe: str
    sha256: str  # the recipe file's sha256 when the commit was made
    subject: str
    current_sha256: Optional[str] = None  # None: the recipe no longer exists

    @property
    def stale(self) -> bool:
        return self.current_sha256 != self.sha256

    def to_json(self) -> dict:
        return {
            "commit": self.commit,
            "recipe": self.recipe,
            "sha256": self.sha256,
            "current_sha256": self.current_sha256,
            "stale": self.stale,
            "subject": self.subject,
        }


# -- repositories and revisions ---------------------------------------------------------------


def branch_name(names: tuple[str, ...] | list[str]) -> str:
    """``patchkit/<name>``: the bundle or recipe named; several names are joined with '+'."""
    if not names:
        raise PatchkitError(
            "name the recipes or bundle of the fork",
            "e.g. `patchkit fork sync sm120 -t sglang=./sglang` builds branch patchkit/sm120",
        )
    return BRANCH_PREFIX + "+".join(names)


def names_of(branch: str) -> tuple[str, ...]:
    return tuple(branch[len(BRANCH_PREFIX) :].split("+"))


def open_repo(path: str | Path) -> Repo:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise TargetError(
            f"{p}: fork repository does not exist",
            "pass --target ENGINE=DIR with a git clone of the upstream repository",
        )
    found = gitcli.kind(p)
    if found == "bare":
        raise TargetError(f"{p}: a bare repository", "point --target at a clone with a work tree")
    if found != "worktree":
        raise TargetError(
            f"{p}: not a git repository",
            "fork commands work on a git clone of upstream (e.g. `git clone "
            "https://github.com/sgl-project/sglang`); use `patchkit apply` for other trees",
        )
    return Repo(p)


def resolve(repo: Repo, rev: str) -> str:
    try:
        return repo.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except GitError:
        raise TargetError(
            f"{rev}: no such revision in {repo.working_tree_dir}",
            "fetch it first (`git fetch --tags`), or pass another --base/--to",
        ) from None


def branch_head(repo: Repo, branch: str) -> Optional[str]:
    try:
        return repo.git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    except GitError:
        return None


def fork_branches(repo: Repo) -> list[str]:
    out = repo.git("for-each-ref", "--format=%(refname:short)", f"refs/heads/{BRANCH_PREFIX}")
    return [b for b in out.splitlines() if b]


def message(recipe: Recipe, engine: str, notes: tuple[str, ...] = ()) -> str:
    """The commit message of a recipe: subject, summary, rationale, notes, trailer."""
    parts = [f"patchkit: {recipe.id}", recipe.summary]
    if recipe.rationale:
        parts.append(recipe.rationale)
    if notes:
        parts.append("\n".join(notes))
    parts.append(f"{TRAILER}: {recipe.id} {recipe.sha256}")
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def _split_note(recipe: Recipe, engine: str, carried) -> Optional[str]:
    """Where the rest of a two-engine recipe belongs.  ``carried``: the ops of this engine's
    version variant; the other engine's are named with every variant (its version is
    the other fork's to know)."""
    others = sorted({op.engine for op in recipe.ops} - {engine})
    if not others:
        return None
    mine = ", ".join(f"#{op.index}" for op in carried if op.engine == engine)

    def ops_of(e: str) -> str:
        ops = recipe.ops_for(e)
        return ", ".join(f"#{op.index}" for op in ops) + (" (per version variant)" if any(o.when for o in ops) else "")

    theirs = "; ".join(f"{e} ops {ops_of(e)}" for e in others)
    return (
        f"This commit carries the {engine} ops ({mine}) of the recipe; its {theirs} belong in the "
        f"{'/'.join(others)} fork."
    )


def _identity(repo: Repo, base: str) -> dict:
    when = f"{repo.commit(base).committed_date} +0000"
    return {
        "GIT_AUTHOR_NAME": AUTHOR_NAME,
        "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
        "GIT_AUTHOR_DATE": when,
        "GIT_COMMITTER_NAME": AUTHOR_NAME,
        "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
        "GIT_COMMITTER_DATE": when,
    }


# -- building ---------------------------------------------------------------------------------


class _Worktree:
    """A temporary detached worktree of ``repo`` at ``rev``, removed on exit.

    Its index holds the whole tree of ``rev``, but only the paths asked for are written to
    disk (``materialize``): the engine reads only its package directories, and an upstream
    checkout also holds tests, docs, kernels and benchmarks.  Commits are written from the
    index, so they hold the whole tree.
    """

    def __init__(self, repo: Repo, rev: str) -> None:
        self.repo, self.rev = repo, rev
        self.path: Optional[Path] = None
        self.wt: Optional[Repo] = None

    def __enter__(self) -> "_Worktree":
        tmp = Path(tempfile.mkdtemp(prefix="patchkit-fork-"))
        self.path = tmp / "tree"
        try:
            self.repo.git("worktree", "add", "--detach", "--no-checkout", "--quiet", str(self.path), self.rev)
            self.wt = Repo(self.path)
            self.wt.git("read-tree", "HEAD")
        except GitError as e:
            self.__exit__()
            raise TargetError(
                f"git could not check out {self.rev} into a temporary worktree: {_git_err(e)}",
                "check free space in $TMPDIR and that the repository is healthy (`git worktree prune`)",
            ) from None
        return self

    def materialize(self, paths: list[str]) -> None:
        """Write these files, and every file under these directories, as ``rev`` has them."""
        files = (
            self.wt.git("ls-tree", "-r", "-z", "--name-only", "HEAD", "--", *sorted(set(paths))).split("\0")
            if paths
            else []
        )
        files = [f for f in files if f]
        for i in range(0, len(files), 500):
            self.wt.git("checkout-index", "-f", "--", *files[i : i + 500])

    def __exit__(self, *exc) -> None:
        if self.path is None:
            return
        try:
            self.repo.git("worktree", "remove", "--force", str(self.path))
        except GitError:
            # Never registered, or half-made: delete it, then let git forget it (prune only
            # drops entries whose directory is gone).
            shutil.rmtree(self.path.parent, ignore_errors=True)
            try:
                self.repo.git("worktree", "prune")
            except GitError:
                pass
        shutil.rmtree(self.path.parent, ignore_errors=True)


def _visible(engine: str) -> list[str]:
    """Every path the engine can read through a Target of the upstream layout: the package
    directories (the engine searches them by content for moved sites and upstream
    markers) and the root files that tell the version."""
    return sorted({pp for _, pp in ENGINES[engine].layouts["git"]} | {"version.txt"})


def _git_err(e: GitError) -> str:
    return e.last_line()


def _relocated(recipe: Recipe, evals) -> tuple[Recipe, tuple[str, ...]]:
    """The recipe with every moved op pointed at the one file and scope where it was found."""
    ops, notes = list(recipe.ops), []
    for ev in evals:
        if ev.state == State.MOVED:
            ops[ops.index(ev.op)] = dataclasses.replace(ev.op, file=ev.file.logical, scope=ev.scope)
            # Only names go into the note: it is part of the commit, whose SHA must not
            # change with the wording of an engine message.
            notes.append(
                f"op #{ev.op.index} ({ev.op.kind}) moved upstream from {ev.op.file}::{ev.op.scope or '<module>'}; "
                f"carried to {ev.file.logical}::{ev.scope or '<module>'}."
            )
    return dataclasses.replace(recipe, ops=tuple(ops)), tuple(notes)


def build(repo: Repo, engine: str, base_rev: str, recipes: list[Recipe]) -> Build:
    """Build the fork of ``recipes`` for ``engine`` on ``base_rev``; move no branch.

    Every recipe is first judged on the base's pristine tree: upstream -> dropped, moved ->
    carried at the one place it was found, missing/ambiguous -> blocked, and then nothing
    is built.  Otherwise each remaining recipe is applied alone (engine plan + commit) on
    the tree of the previous commit and committed with only the files it wrote.
    """
    if engine not in ENGINES:
        raise TargetError(f"unknown engine {engine!r}", f"engines: {', '.join(ENGINES)}")
    base = resolve(repo, base_rev)
    subs = per_engine(recipes, engine)
    env = _identity(repo, base)
    with _Worktree(repo, base) as tmp:
        wt = tmp.wt
        root = Path(wt.working_tree_dir)
        tmp.materialize(_visible(engine))
        try:
            target = open_target(engine, root)
            if target.layout != "git":
                raise TargetError("not the upstream layout")
        except TargetError:
            info = ENGINES[engine]
            looked = ", ".join(sorted({info.git_marker, info.layouts["git"][0][1] + "__init__.py"}))
            raise TargetError(
                f"{repo.working_tree_dir} at {base_rev}: no {engine} sources (looked for {looked})",
                f"is it a clone of {engine}? fork commands need the upstream repository layout",
            ) from None
        out = Build(
            engine=engine,
            base_rev=base_rev,
            base=base,
            head=base,
            version=target.version,
            elsewhere=[r.id for r in recipes if not r.ops_for(engine)],
        )
        session = Session({engine: target}, releases=RELEASES)
        judged = evaluate(session, subs)
        verdicts = results(session, judged)
        learned.keep(session.learned)
        steps: list = []  # a Step, or (recipe, result, notes) still to commit; recipe order
        for (r, evals), res in zip(judged, verdicts, strict=True):
            split = _split_note(next(x for x in recipes if x.id == r.id), engine, r.ops)
            if res.state in (State.MISSING, State.AMBIGUOUS, State.MODIFIED):
                bad = [o for o in res.ops if o.state == res.state]
                why = "; ".join(
                    f"op #{o.index} ({o.kind}) at {o.file}{':' + str(o.line) if o.line else ''}: {o.message or o.state}"
                    for o in bad
                )
                out.blockers.append(f"{r.id}: {res.state} on {base_rev}: {why}")
                steps.append(Step(r.id, res.state, BLOCKED, result=res))
            elif res.state == State.UPSTREAM:
                steps.append(
                    Step(r.id, res.state, DROPPED, notes=tuple(o.message for o in res.ops if o.message), result=res)
                )
            else:
                moved, notes = _relocated(r, evals)
                done = tuple(
                    f"op #{o.index} ({o.kind}): upstream already does it; not in this commit."
                    for o in res.ops
                    if o.state == State.UPSTREAM
                )
                steps.append((moved, res, notes + done + ((split,) if split else ())))
        if out.blockers:
            out.steps = [
                s if isinstance(s, Step) else Step(s[0].id, s[1].state, NOT_BUILT, notes=s[2], result=s[1])
                for s in steps
            ]
            return out
        parent = base
        for item in steps:
            if isinstance(item, Step):
                out.steps.append(item)
                continue
            r, res, notes = item
            session = Session({engine: target}, releases=RELEASES)
            plan = plan_apply(session, [r], ignore_range=True)
            learned.keep(session.learned)
            if plan.blockers:
                out.blockers += plan.blockers
                out.steps.append(Step(r.id, res.state, BLOCKED, notes=notes, result=plan.results[0]))
                return out
            with transaction.locked(session.targets):  # the one way a plan is written
                transaction.commit(transaction.freeze(session, plan, "apply"))
            files = tuple(sorted(target.relpath(f.logical) for f in plan.files))
            if not files:  # every pending op was a no-op; nothing to carry
                out.steps.append(Step(r.id, res.state, DROPPED, notes=notes, result=plan.results[0]))
                continue
            wt.git("add", "--", *files)
            tree = wt.git("write-tree")
            with tempfile.NamedTemporaryFile("w", suffix=".msg", delete=False, encoding="utf-8") as mf:
                mf.write(message(r, engine, notes))
            try:
                parent = wt.git("commit-tree", tree, "-p", parent, "-F", mf.name, "--no-gpg-sign", env=env)
            finally:
                Path(mf.name).unlink()
            wt.git("update-ref", "--no-deref", "HEAD", parent)
            out.steps.append(Step(r.id, res.state, COMMITTED, commit=parent, files=files, notes=notes, result=res))
        out.head = parent
    return out


# -- reading a branch back --------------------------------------------------------------------


def _is_ours(c: Commit) -> bool:
    return c.author_email == AUTHOR_EMAIL and bool(_TRAILER_RE.search(c.message))


def carried(repo: Repo, head: str, catalog_sha: dict[str, str]) -> tuple[str, list[Carried]]:
    """The base commit of a fork branch and its patchkit commits, oldest first.

    The base is the first first-parent ancestor that patchkit did not make."""
    out = []
    c = repo.commit(head)
    while _is_ours(c):
        m = _TRAILER_RE.search(c.message)
        out.append(
            Carried(
                commit=c.hexsha,
                recipe=m.group(1),
                sha256=m.group(2),
                subject=c.summary,
                current_sha256=catalog_sha.get(m.group(1)),
            )
        )
        if not c.parents:
            break
        c = repo.commit(c.parents[0])
    return c.hexsha, out[::-1]


def foreign_tip(repo: Repo, branch: str, head: str) -> Optional[str]:
    """A commit on the branch that patchkit did not make and that no other ref holds (it
    would be lost by a rebuild), or None."""
    base, _ = carried(repo, head, {})
    holders = [
        r
        for r in repo.git("for-each-ref", "--format=%(refname)", f"--contains={base}").splitlines()
        if r and r != f"refs/heads/{branch}"
    ]
    return None if holders else base


def checked_out_in(repo: Repo, branch: str) -> list[Path]:
    """Work trees that have ``branch`` checked out."""
    out, path = [], None
    for line in repo.git("worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = Path(line[len("worktree ") :])
        elif line == f"branch refs/heads/{branch}" and path is not None:
            out.append(path)
    return out


def check_checkouts(repo: Repo, branch: str) -> list[Path]:
    """Work trees that have ``branch`` checked out; refuses if one has local changes."""
    holders = checked_out_in(repo, branch)
    for wt_path in holders:
        dirty = Repo(wt_path).git("status", "--porcelain", "--untracked-files=no")
        if dirty:
            lines = dirty.splitlines()
            raise PatchkitError(
                f"{branch} is checked out in {wt_path} with local changes "
                f"({lines[0].strip()}{' ...' if len(lines) > 1 else ''}); refusing to rebuild it",
                f"commit or stash them, or check out another branch there; patchkit rebuilds {branch} from "
                "recipes, so edit the recipe instead",
            )
    return holders


def move_branch(repo: Repo, branch: str, new: str, old: Optional[str], reason: str) -> None:
    """Point ``branch`` at ``new`` if it still points at ``old`` (None: it must not exist).

    A work tree that has the branch checked out must be clean; its index and files follow
    the branch (``git read-tree -m -u old new``, which refuses to overwrite anything)."""
    holders = check_checkouts(repo, branch) if old else []
    for wt_path in holders:
        try:
            Repo(wt_path).git("read-tree", "-m", "-u", old, new)
        except GitError as e:
            raise PatchkitError(
                f"could not update {branch} checked out in {wt_path}: {_git_err(e)}",
                "check out another branch there and run the command again",
            ) from None
    try:
        repo.git("update-ref", "-m", reason, f"refs/heads/{branch}", new, old or "0" * 40)
    except GitError as e:
        for wt_path in holders:  # put the files back where HEAD still is
            Repo(wt_path).git("read-tree", "-m", "-u", new, old)
        raise PatchkitError(
            f"could not move {branch}: {_git_err(e)}",
            "another process changed the branch meanwhile; run the command again",
        ) from None


# -- the operations -----------------------------------------------------------------------------


@dataclass
class Rebuild:
    """sync and upgrade: a build, and what happened to the branch."""

    branch: str
    build: Build
    previous: Optional[str]  # the branch head before (None: it did not exist)
    previous_base: Optional[str] = None
    previous_carried: list[Carried] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.build.ok and self.build.head != self.previous


def rebuild(
    repo: Repo, engine: str, branch: str, recipes: list[Recipe], base_rev: str, command: str, force: bool = False
) -> Rebuild:
    """Build ``branch`` afresh on ``base_rev`` and move it there if the build succeeds."""
    old = branch_head(repo, branch)
    previous_base, previous_carried = carried(repo, old, {r.id: r.sha256 for r in recipes}) if old else (None, [])
    if old:
        lost = foreign_tip(repo, branch, old)
        if lost and not force:
            c = repo.commit(lost)
            raise PatchkitError(
                f"{branch} has a commit patchkit did not make and no other branch or tag holds ({c.hexsha[:12]} "
                f"{c.summary!r}); rebuilding would drop it",
                f"move it to a branch of its own (`git branch keep {c.hexsha[:12]}`), or pass --force to rebuild "
                "anyway",
            )
        check_checkouts(repo, branch)
    res = Rebuild(branch, build(repo, engine, base_rev, recipes), old, previous_base, previous_carried)
    if res.changed:
        move_branch(
            repo,
            branch,
            res.build.head,
            old,
            f"patchkit fork {command}: {len(res.build.steps)} recipe(s) on {base_rev}",
        )
    return res


@dataclass
class Status:
    branch: str
    head: str
    base: str
    carried: list[Carried]
    expected: Optional[Build] = None  # what sync would build now on the same base
    problem: str = ""  # why it could not be compared

    @property
    def stale(self) -> list[Carried]:
        return [c for c in self.carried if c.stale]

    @property
    def up_to_date(self) -> bool:
        return self.expected is not None and self.expected.ok and self.expected.head == self.head

    def drift(self) -> list[str]:
        """How a rebuild on the same base would differ, recipe by recipe."""
        if self.expected is None or not self.expected.ok or self.up_to_date:
            return []
        have = {c.recipe: c for c in self.carried}
        want = {s.recipe: s for s in self.expected.steps if s.action == COMMITTED}
        out = [f"{r}: would be added" for r in want if r not in have]
        out += [f"{r}: would be dropped" for r in have if r not in want]
        out += [
            f"{r}: would be rebuilt "
            f"({'the recipe changed' if have[r].stale else 'its edit or an earlier commit differs'})"
            for r in want
            if r in have and have[r].commit != want[r].commit
        ]
        return out or ["the commits differ (order or content)"]


def status(repo: Repo, engine: str, branch: str, recipes: Optional[list[Recipe]], all_sha: dict[str, str]) -> Status:
    """What ``branch`` carries, which commits are stale, and whether a rebuild on the same
    base would give the same head (``recipes`` None: its names no longer select recipes)."""
    head = branch_head(repo, branch)
    if head is None:
        have = fork_branches(repo)
        raise PatchkitError(
            f"no branch {branch} in {repo.working_tree_dir}",
            f"fork branches there: {', '.join(have)}"
            if have
            else "build it with `patchkit fork sync NAME -t ENGINE=REPO`",
        )
    base, items = carried(repo, head, all_sha)
    st = Status(branch=branch, head=head, base=base, carried=items)
    if recipes is None:
        st.problem = f"{', '.join(names_of(branch))} names no recipe or bundle any more"
    else:
        st.expected = build(repo, engine, base, recipes)
        if not st.expected.ok:
            st.problem = "a rebuild on the same base would stop: " + "; ".join(st.expected.blockers)
    return st


@dataclass
class Export:
    branch: str
    base: str
    out: Path
    patches: list[Path]
    series: Path


def export(repo: Repo, branch: str, out: Path, force: bool = False) -> Export:
    """``git format-patch base..branch`` into ``out``, plus a quilt ``series`` file; every
    patch is parsed back with unidiff and checked against the commit's changed files."""
    import unidiff

    head = branch_head(repo, branch)
    if head is None:
        have = fork_branches(repo)
        raise PatchkitError(
            f"no branch {branch} in {repo.working_tree_dir}",
            f"fork branches there: {', '.join(have)}" if have else "build it first with `patchkit fork sync`",
        )
    base, items = carried(repo, head, {})
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise PatchkitError(f"{out}: exists and is not a directory", "pass --out with a new or empty directory")
    ours = sorted(out.glob("*.patch")) + ([out / "series"] if (out / "series").exists() else []) if out.is_dir() else []
    others = [p for p in out.iterdir() if p not in ours] if out.is_dir() else []
    if others:
        raise PatchkitError(
            f"{out}: holds other files ({others[0].name}{' ...' if len(others) > 1 else ''}); refusing to write "
            "the series there",
            "pass --out with a new or empty directory",
        )
    if ours and not force:
        raise PatchkitError(
            f"{out}: already holds a patch series ({len(ours)} file(s))", "pass --force to replace it, or another --out"
        )
    for p in ours:
        p.unlink()
    out.mkdir(parents=True, exist_ok=True)
    names = []
    if items:
        listed = repo.git("format-patch", "--no-signature", f"{base}..{head}", "-o", str(out))
        names = [Path(line.strip()) for line in listed.splitlines() if line.strip()]
    patches = [p if p.is_absolute() else Path(repo.working_tree_dir) / p for p in names]
    if len(patches) != len(items):
        raise PatchkitError(
            f"git format-patch wrote {len(patches)} patch(es) for {len(items)} commit(s) of {branch}",
            "is one of them a merge or empty? rebuild the branch with `patchkit fork sync`",
        )
    for p, c in zip(patches, items, strict=True):
        expect = set(repo.git("diff-tree", "--no-commit-id", "--name-only", "-r", c.commit).splitlines())
        try:
            ps = unidiff.PatchSet(p.read_text(encoding="utf-8"))
        except unidiff.UnidiffParseError as e:
            raise PatchkitError(f"{p}: not a valid unified diff ({e})", "report this as a patchkit bug") from None
        got = {f.path for f in ps}
        if got != expect or any(not len(f) for f in ps):
            raise PatchkitError(
                f"{p}: the patch touches {sorted(got)}, but commit {c.commit[:12]} changes {sorted(expect)}",
                "report this as a patchkit bug",
            )
    series = out / "series"
    series.write_text("".join(f"{p.name}\n" for p in patches))
    return Export(branch=branch, base=base, out=out, patches=patches, series=series)
