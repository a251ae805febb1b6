"""`publish`: a fleet through its package index.  The patched wheels `wheel` builds are
uploaded with twine to a PEP 503 index (pypiserver, devpi, Artifactory, Nexus...), and each
host installs them with pip or uv as it installs everything else.

Credentials stay where twine and pip keep them: TWINE_USERNAME / TWINE_PASSWORD, ~/.pypirc,
keyring for the upload; PIP_INDEX_URL, ~/.netrc, keyring for the hosts.  patchkit never
takes a password as an argument (it would be on a command line, in `ps` and in shell
history): a URL that carries one is refused, and twine's output is shown with the password
it was given masked.  A user name in the URL (maybe a token) goes to twine as TWINE_USERNAME
in its environment, never on its command line, and is shown as ``***``.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from patchkit.base.errors import PatchkitError
from patchkit.commands import NOT_THERE, OK, say
from patchkit.commands.wheel import build
from patchkit.core.project import Project
from patchkit.fleet import wheel as W
from patchkit.upstream import fetch

CREDENTIALS_HINT = "put them in TWINE_USERNAME and TWINE_PASSWORD, or in ~/.pypirc; hosts read ~/.netrc or keyring"


def _without_user(url: str) -> tuple[str, str | None]:
    """(``url`` without its user information, the user name it carried or None)."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    return urlunsplit(parts._replace(netloc=hostport)), unquote(userinfo.partition(":")[0])


def check_url(url: str) -> str:
    """``url`` as messages show it (user information as ``***``); one that does not parse, is not http(s) or
    carries a password is a PatchkitError, which shows it masked too."""
    shown = fetch.shown(url, "***@")  # the user name may be a token
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (read for its check: a port that is not a number is a ValueError)
    except ValueError as e:  # e.g. http://[::1/: a bracket left open
        raise PatchkitError(
            f"--repository-url {shown!r}: not a URL ({e})", "e.g. --repository-url http://index:8080/"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PatchkitError(
            f"--repository-url {shown!r}: not an http(s) URL", "e.g. --repository-url http://index:8080/"
        )
    if parts.password is not None:
        # Said without the credentials: this line is a log too.
        raise PatchkitError(f"--repository-url {shown}: carries a password, which would sit on a command line and in "
                            "logs", CREDENTIALS_HINT)  # fmt: skip
    return shown


def twine_command() -> list[str] | None:
    """twine as this Python has it (``-m twine``), else on PATH; None when neither."""
    if importlib.util.find_spec("twine") is not None:
        return [sys.executable, "-m", "twine"]
    exe = shutil.which("twine")
    return [exe] if exe else None


def _masked(text: str, *secrets: str | None) -> str:
    for secret in (os.environ.get("TWINE_PASSWORD"), *secrets):
        text = text.replace(secret, "****") if secret else text
    return text


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
    shown = check_url(url)
    bare, user = _without_user(url)
    twine = twine_command()
    if twine is None and not dry_run:
        raise PatchkitError(
            "publish uploads with twine, which neither this Python nor PATH has",
            "install patchkit with its publish extra (pipx install '.[publish]' in a clone, pip install"
            " 'patchkit[publish]'), or add twine beside it (pipx inject patchkit twine); --dry-run shows the command",
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
    # A user name the URL carried goes to twine in its environment (TWINE_USERNAME), never on
    # its command line, and is shown as *** (it may be a token).
    cmd = [*(twine or ["twine"]), "upload", "--repository-url", bare, "--non-interactive", "--disable-progress-bar",
           *(str(b.path) for b in built)]  # fmt: skip
    env = {**os.environ, "TWINE_USERNAME": user} if user is not None else None
    if dry_run:
        say(("TWINE_USERNAME=*** " if user is not None else "") + shlex.join(cmd))
        say("publish --dry-run: built, not uploaded; credentials come from TWINE_USERNAME/TWINE_PASSWORD or ~/.pypirc",
            err=True)  # fmt: skip
        return OK
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    for stream, err in ((proc.stdout, False), (proc.stderr, True)):
        if stream.strip():
            say(_masked(stream.rstrip(), user), err=err)
    if proc.returncode != 0:
        say(f"publish: twine upload failed (exit {proc.returncode}); the wheels stay in {out}", err=True)
        return NOT_THERE
    say(f"published to {shown}:")
    for b in built:
        say(f"  {b.dist}=={b.version}  (sha256 {b.sha256})")
    pins = " ".join(f"'{b.dist}=={b.version}'" for b in built)
    say(f"on each host, from that index's simple API: pip install --no-deps --index-url INDEX {pins}")
    return OK
