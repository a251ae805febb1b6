"""`publish`: a fleet through its package index.  The patched wheels `wheel` builds are
uploaded with twine to a PEP 503 index (pypiserver, devpi, Artifactory, Nexus...), and each
host installs them with pip or uv as it installs everything else.

Credentials stay where twine and pip keep them: TWINE_USERNAME / TWINE_PASSWORD, ~/.pypirc,
keyring for the upload; PIP_INDEX_URL, ~/.netrc, keyring for the hosts.  patchkit never
takes a password as an argument (it would be on a command line, in `ps` and in shell
history): a URL that carries one is refused, and twine's output is shown with the password
it was given masked.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from patchkit.base.errors import PatchkitError
from patchkit.commands import NOT_THERE, OK, say
from patchkit.commands.wheel import build
from patchkit.core.project import Project
from patchkit.fleet import wheel as W

CREDENTIALS_HINT = "put them in TWINE_USERNAME and TWINE_PASSWORD, or in ~/.pypirc; hosts read ~/.netrc or keyring"


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PatchkitError(f"--repository-url {url!r}: not an http(s) URL", "e.g. --repository-url http://index:8080/")
    if parts.password is not None:
        # Say it without the password: this line is a log too.
        shown = parts._replace(netloc=f"{parts.username}:****@{parts.netloc.rsplit('@', 1)[1]}").geturl()
        raise PatchkitError(f"--repository-url {shown}: carries a password, which would sit on a command line and in "
                            "logs", CREDENTIALS_HINT)  # fmt: skip
    return url


def twine_command() -> list[str] | None:
    """twine as this Python has it (``-m twine``), else on PATH; None when neither."""
    if importlib.util.find_spec("twine") is not None:
        return [sys.executable, "-m", "twine"]
    exe = shutil.which("twine")
    return [exe] if exe else None


def _masked(text: str) -> str:
    secret = os.environ.get("TWINE_PASSWORD")
    return text.replace(secret, "****") if secret else text


def publish(
    project: Project,
    names: tuple[str, ...],
    sources: tuple[str, ...],
    url: str,
    label: str | None,
    out: str | None,
    dry_run: bool = False,
    ignore_range: bool = False,
) -> int:
    if not out:  # the wheels are built in patchkit's cache unless --out says where
        from patchkit.base.paths import cache_dir

        out = str(cache_dir() / "publish")
    check_url(url)
    twine = twine_command()
    if twine is None and not dry_run:
        raise PatchkitError(
            "publish uploads with twine, which neither this Python nor PATH has",
            "pip install twine beside patchkit (pipx inject patchkit twine), or see the command with --dry-run",
        )
    Path(out).mkdir(parents=True, exist_ok=True)
    try:
        built = build(project, names, sources, label, out, ignore_range, lambda s: say(s, err=True))
    except W.WheelBlocked as e:
        for r in e.reasons:
            say(f"error: {e.source.engine}=={e.source.version}: {r}", err=True)
        say("publish: the recipes do not apply cleanly; nothing was built or uploaded", err=True)
        return NOT_THERE
    for b in built:
        say(f"built {b.path}  ({b.dist} {b.base_version} -> {b.version})", err=True)
    # No --skip-existing: twine allows it only for PyPI-like servers, and refuses it elsewhere.
    cmd = [*(twine or ["twine"]), "upload", "--repository-url", url, "--non-interactive", "--disable-progress-bar",
           *(str(b.path) for b in built)]  # fmt: skip
    if dry_run:
        say(shlex.join(cmd))
        say("publish --dry-run: built, not uploaded; credentials come from TWINE_USERNAME/TWINE_PASSWORD or ~/.pypirc",
            err=True)  # fmt: skip
        return OK
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    for stream, err in ((proc.stdout, False), (proc.stderr, True)):
        if stream.strip():
            say(_masked(stream.rstrip()), err=err)
    if proc.returncode != 0:
        say(f"publish: twine upload failed (exit {proc.returncode}); the wheels stay in {out}", err=True)
        return NOT_THERE
    say(f"published to {url}:")
    for b in built:
        say(f"  {b.dist}=={b.version}  (sha256 {b.sha256})")
    pins = " ".join(f"'{b.dist}=={b.version}'" for b in built)
    say(f"on each host, from that index's simple API: pip install --no-deps --index-url INDEX {pins}")
    return OK
