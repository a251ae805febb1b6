"""Pinned trees from git (gitpython): clone the pinned repository or a local mirror and
check out the pinned revision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import git

from patchkit import fsio
from patchkit.errors import FetchError


class _Progress(git.RemoteProgress):
    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__()
        self.say, self.last = say, -1

    def update(self, op_code, cur_count, max_count=None, message=""):
        if max_count:
            pct = int(100 * cur_count / max_count)
            if pct // 10 != self.last // 10:
                self.last = pct
                self.say(f"  clone: {pct}% {message}".rstrip())


def clone(url: str, rev: str, dest: Path, source: dict, say: Callable[[str], None]) -> None:
    say(f"cloning {url} at {rev} ...")
    try:
        repo = git.Repo.clone_from(url, dest, progress=_Progress(say), no_checkout=True)
        repo.git.checkout(rev)
    except git.GitCommandError as e:
        raise FetchError(
            f"git could not clone {url} at {rev}: {e.stderr.strip().splitlines()[-1] if e.stderr.strip() else e}",
            "check the URL and revision, or pass --mirror ENGINE=PATH to a local mirror",
        ) from None
    # patchkit's own files, in a tree the repository filled: never through a link it ships
    try:
        fsio.write_owned(dest, ".patchkit/.gitignore", b"*\n")
        fsio.write_owned(dest, ".patchkit/source.json", (json.dumps(source, indent=1, sort_keys=True) + "\n").encode())
    except OSError as e:
        raise fsio.cannot_write(dest / ".patchkit", e) from None
