"""The one way patchkit talks to git: the ``git`` command line.

gitpython shells out to the same binary and costs some 300 ms to import (docs/development.md, "Design
notes: libraries"); pristine.py, fork.py and gitsrc.py need only a handful of plumbing
commands, so each is a ``subprocess.run`` of ``git -C ROOT ...`` with its output as text.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# Plumbing output must not depend on the user's configuration or locale.
_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
_SEP = "\x1f"


class GitError(Exception):
    """A git command that exited non-zero; ``stderr`` is git's own words."""

    def __init__(self, args: tuple[str, ...], stderr: str) -> None:
        super().__init__(f"git {' '.join(args)}: {stderr.strip()}")
        self.stderr = stderr

    def last_line(self) -> str:
        lines = self.stderr.strip().splitlines()
        return lines[-1].strip() if lines else str(self)


def run(cwd: Optional[Path], *args: str, env: Optional[dict] = None, timeout: Optional[float] = None) -> str:
    """``git -C cwd args...``: stdout without its trailing newline, or GitError."""
    cmd = ["git", *(("-C", str(cwd)) if cwd is not None else ()), *args]
    try:
        p = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            env={**os.environ, **_ENV, **(env or {})},
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise GitError(args, "git is not installed (no `git` on PATH)") from None
    except subprocess.TimeoutExpired:
        raise GitError(args, f"git did not finish within {timeout:g} s") from None
    if p.returncode != 0:
        raise GitError(args, p.stderr or p.stdout)
    return p.stdout[:-1] if p.stdout.endswith("\n") else p.stdout


@dataclass(frozen=True)
class Commit:
    hexsha: str
    parents: tuple[str, ...]
    author_email: str
    committed_date: int
    message: str

    @property
    def summary(self) -> str:
        return self.message.split("\n", 1)[0]


class Repo:
    """A repository with a work tree, addressed by its root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def working_tree_dir(self) -> str:
        return str(self.root)

    def git(self, *args: str, env: Optional[dict] = None) -> str:
        return run(self.root, *args, env=env)

    def commit(self, rev: str) -> Commit:
        fmt = _SEP.join(("%H", "%P", "%ae", "%ct", "%B"))
        out = self.git("show", "-s", f"--format={fmt}", f"{rev}^{{commit}}", "--")
        sha, parents, email, date, msg = out.split(_SEP, 4)
        return Commit(sha, tuple(parents.split()), email, int(date), msg)


def kind(path: Path) -> str:
    """``"worktree"`` when ``path`` is the root of a repository's work tree, ``"bare"`` for a
    bare repository, else ``"none"`` (a directory *inside* another repository is not one:
    a fork must never commit to the repository that merely contains it)."""
    try:
        if run(path, "rev-parse", "--is-bare-repository") == "true":
            return "bare" if Path(run(path, "rev-parse", "--absolute-git-dir")).resolve() == path.resolve() else "none"
        top = run(path, "rev-parse", "--show-toplevel")
    except GitError:
        return "none"
    return "worktree" if Path(top).resolve() == path.resolve() else "none"
