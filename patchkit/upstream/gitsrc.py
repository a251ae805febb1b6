"""Pinned trees from git: clone the pinned repository or a local mirror and check out the
pinned revision (through ``git`` itself, as everything else does: patchkit/base/gitcli.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Callable

from patchkit.base import fsio, gitcli
from patchkit.base.errors import FetchError

_PCT = re.compile(r"^([A-Za-z ]+):\s+(\d+)%")


def _clone(url: str, dest: Path, say: Callable[[str], None]) -> None:
    """``git clone --no-checkout --progress``, its progress said every 10%, its last words kept."""
    proc = subprocess.Popen(
        ["git", "clone", "--no-checkout", "--progress", url, str(dest)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"},
    )
    last, tail = {}, []
    buf = b""
    assert proc.stderr is not None
    while chunk := proc.stderr.read1(4096):  # progress lines end in \r, not \n
        buf += chunk
        *lines, buf = re.split(rb"[\r\n]", buf)
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            tail = (tail + [line])[-5:]
            m = _PCT.match(line)
            if m and int(m.group(2)) // 10 != last.get(m.group(1), -1) // 10:
                last[m.group(1)] = int(m.group(2))
                say(f"  clone: {m.group(1).lower()} {m.group(2)}%")
    if proc.wait() != 0:
        raise gitcli.GitError(("clone", url), "\n".join(tail + [buf.decode("utf-8", "replace")]))


def clone(url: str, rev: str, dest: Path, source: dict, say: Callable[[str], None]) -> None:
    say(f"cloning {url} at {rev} ...")
    try:
        _clone(url, dest, say)
        gitcli.run(dest, "checkout", "--quiet", rev)
    except gitcli.GitError as e:
        raise FetchError(
            f"git could not clone {url} at {rev}: {e.last_line()}",
            "check the URL and revision, or pass --mirror ENGINE=PATH to a local mirror",
        ) from None
    # patchkit's own files, in a tree the repository filled: never through a link it ships
    try:
        fsio.write_owned(dest, ".patchkit/.gitignore", b"*\n")
        fsio.write_owned(dest, ".patchkit/source.json", (json.dumps(source, indent=1, sort_keys=True) + "\n").encode())
    except OSError as e:
        raise fsio.cannot_write(dest / ".patchkit", e) from None
