"""Upstream releases from the package index: a release wheel is downloaded once, with the
standard library, from the index's simple API (PEP 691 JSON; PEP 503 HTML from an index
that serves only that), checked against the sha256 the index lists (and the pin's, when
there is one), cached, and unpacked into a tree.  No pip is needed: patchkit installed with
`uv tool install` or pipx has none in its environment.

The index is ``PATCHKIT_INDEX_URL``, else uv's (``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``),
else pip's (``PIP_INDEX_URL``), else PyPI; credentials in the URL or in ``~/.netrc`` are
sent, proxies come from the usual ``HTTPS_PROXY`` variables.  The cache is
``~/.cache/patchkit/wheels/DIST/VERSION/*.whl`` (sdists:
``sdists/DIST/VERSION/*.tar.gz``; ``PATCHKIT_CACHE`` moves it); a release in the cache is
reused without touching the network, and ``PATCHKIT_OFFLINE=1`` forbids the network
altogether."""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator, Optional
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from patchkit.base import fsio, paths
from patchkit.base.errors import FetchError
from patchkit.base.paths import cache_dir  # noqa: F401  (re-exported: fetch.cache_dir is the public name)
from patchkit.upstream import recorded

DEFAULT_INDEX = "https://pypi.org/simple/"
INDEX_ENVS = ("PATCHKIT_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")
OFFLINE_ENV = "PATCHKIT_OFFLINE"
TIMEOUT = 60.0  # seconds without a byte before a request is given up
ATTEMPTS = 3  # a connection reset or a 5xx is tried again, after 1 s, then 2 s
PROGRESS_MIN = 1 << 20  # a progress line on a terminal for downloads of 1 MiB and more
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


def file_sha256(path: Path) -> str:
    """The sha256 of a regular file (a FIFO or a device in the cache is regular.NotRegular,
    never a hang)."""
    from patchkit.base import regular

    h = hashlib.sha256()
    with regular.open_file(path) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def normalize(dist: str) -> str:
    """A project name as the simple API and the cache spell it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def wheel_dir(dist: str, version: str) -> Path:
    from patchkit.base.paths import wheels_dir

    return wheels_dir(dist) / version


def sdist_dir(dist: str, version: str) -> Path:
    return cache_dir() / "sdists" / normalize(dist) / version


def index_url() -> tuple[str, str]:
    """(the index's simple API URL, the variable that named it, or "" for PyPI)."""
    for env in INDEX_ENVS:
        value = (paths.env_value(env) or "").strip()
        if value:
            try:
                urlsplit(value).port  # noqa: B018  (read for its check: a bad port is a ValueError)
            except ValueError as e:  # e.g. http://[::1: a bracket left open
                raise FetchError(
                    f"{env}={shown(value, '***@')!r}: not a URL ({e})",
                    f"set {env} to a simple-API URL, like {DEFAULT_INDEX}, or unset it",
                ) from None
            return (value if value.endswith("/") else value + "/"), env
    return DEFAULT_INDEX, ""


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV) == "1"


def shown(url: str, mask: str = "") -> str:
    """A URL fit for a message and a log: its user information (``user:password@``; the user
    name alone may be the secret, a token as ``https://TOKEN@host/``) replaced by ``mask``.
    Works on the text, so a URL that does not parse is shown without it too."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    _, at, hostport = rest[:end].rpartition("@")
    return f"{scheme}://{mask}{hostport}{rest[end:]}" if at else url


# -- the index --------------------------------------------------------------------------------


class _Links:
    """The anchors of a PEP 503 project page: filename, href, data-yanked.  An HTMLParser's
    handlers, made where a page is read: html.parser (and html.entities) is not imported by
    every command that merely names the cache, as apply and status do (~2 ms)."""

    def __init__(self) -> None:
        from html.parser import HTMLParser

        self.links: list[tuple[str, str, bool]] = []
        self._href: Optional[str] = None
        self._yanked = False
        self._text: list[str] = []
        self._parser = HTMLParser()
        self._parser.handle_starttag = self.handle_starttag  # type: ignore[method-assign]
        self._parser.handle_data = self.handle_data  # type: ignore[method-assign]
        self._parser.handle_endtag = self.handle_endtag  # type: ignore[method-assign]

    def feed(self, data: str) -> None:
        self._parser.feed(data)

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            a = dict(attrs)
            self._href, self._yanked, self._text = a.get("href") or "", "data-yanked" in a, []

    def handle_data(self, data):
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            name = "".join(self._text).strip() or unquote(urlsplit(self._href).path.rsplit("/", 1)[-1])
            self.links.append((name, self._href, self._yanked))
            self._href = None


def _request(url: str, accept: str = "*/*", extra: Optional[dict] = None):
    """An open response for ``url`` (credentials from the URL or ~/.netrc sent as basic
    auth, never shown); a file: URL of a directory reads its index.html.  ``extra``: more
    request headers (a ``Range``, for patchkit/upstream/lazywheel.py)."""
    import urllib.request

    parts = urlsplit(url)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
        if path.is_dir():
            url = urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/index.html"))
        return urllib.request.urlopen(url, timeout=TIMEOUT)
    headers = {"Accept": accept, "User-Agent": f"patchkit (python {sys.version.split()[0]})", **(extra or {})}
    user, password = parts.username, parts.password
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    if user is not None:
        url = urlunsplit(parts._replace(netloc=host))
        _CREDENTIALS[host] = (user, password)  # the files an index page links to, on the same host
    elif host in _CREDENTIALS:
        user, password = _CREDENTIALS[host]
    elif parts.hostname:
        user, password = _netrc(parts.hostname)
    req = urllib.request.Request(url, headers=headers)
    if user is not None:  # never sent on to another host a redirect names
        token = base64.b64encode(f"{unquote(user)}:{unquote(password or '')}".encode()).decode()
        req.add_unredirected_header("Authorization", f"Basic {token}")
    return urllib.request.urlopen(req, timeout=TIMEOUT, context=_ssl_context() if parts.scheme == "https" else None)


_CREDENTIALS: dict[str, tuple[str, Optional[str]]] = {}  # host[:port] -> credentials its index URL carried


def _netrc(host: str) -> tuple[Optional[str], Optional[str]]:
    path = paths.env_value("NETRC") or os.path.expanduser("~/.netrc")
    if not os.path.isfile(path):
        return None, None
    import netrc

    try:
        got = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None, None
    return (got[0], got[2]) if got else (None, None)


_SSL: dict[tuple, object] = {}  # (PIP_CERT, SSL_CERT_FILE, SSL_CERT_DIR) -> its context, for this process


def _ssl_context():
    """The system's certificates (SSL_CERT_FILE / SSL_CERT_DIR are OpenSSL's own), or the
    bundle pip was told to use (PIP_CERT), as pip's index URL is honoured too.  Made once
    per process and setting (loading the bundle costs ~20 ms of CPU, and a sparse tree's
    search makes one range request per run of members)."""
    import ssl

    cafile = paths.env_value("PIP_CERT")
    cafile = cafile if cafile and os.path.isfile(cafile) else None
    key = (cafile, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    if key not in _SSL:
        _SSL[key] = ssl.create_default_context(cafile=cafile)
    return _SSL[key]


def _retrying(what: str, url: str, call):
    """``call()`` with a retry on what may pass (a reset connection, a 5xx, a timeout);
    anything else, or the last failure, is a FetchError naming ``what`` and the index."""
    import http.client
    import urllib.error

    index, env = index_url()
    where = f"{shown(index)}" + (f" (from {env})" if env else "")
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except urllib.error.HTTPError as e:
            if e.code >= 500 and attempt + 1 < ATTEMPTS:
                time.sleep(1 << attempt)
                continue
            raise _http_error(e, what, url, where) from None
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS):
                raise FetchError(
                    f"cannot write to patchkit's cache {cache_dir()} to {what} ({e.strerror or e})",
                    "free space, fix its permissions, or point PATCHKIT_CACHE elsewhere",
                ) from None
            if attempt + 1 < ATTEMPTS and not isinstance(e, (urllib.error.URLError, FileNotFoundError)):
                time.sleep(1 << attempt)
                continue
            raise _unreachable(e, what, where) from None
        except http.client.HTTPException as e:
            if attempt + 1 < ATTEMPTS:
                time.sleep(1 << attempt)
                continue
            raise _unreachable(e, what, where) from None


def _unreachable(e: Exception, what: str, where: str) -> FetchError:
    reason = getattr(e, "reason", None) or e
    return FetchError(
        f"cannot reach the package index {where} to {what} ({reason})",
        "check the network (and HTTPS_PROXY), or set PATCHKIT_INDEX_URL to an index you can reach; "
        f"wheels already in {cache_dir() / 'wheels'} need no network",
    )


def _http_error(e, what: str, url: str, where: str) -> FetchError:
    if e.code in (401, 403):
        return FetchError(
            f"the package index {where} refused to {what} (HTTP {e.code})",
            "give credentials in the index URL or in ~/.netrc",
        )
    return FetchError(
        f"the package index {where} could not {what}: HTTP {e.code} for {shown(url)}",
        "check PATCHKIT_INDEX_URL (a simple API URL, like https://pypi.org/simple/)",
    )


def project_files(dist: str) -> list[dict]:
    """Every file the index lists for ``dist``: {"filename", "url", "sha256", "yanked"}."""
    if offline():
        raise FetchError(
            f"{dist}: the package index is not asked while {OFFLINE_ENV}=1",
            f"unset {OFFLINE_ENV}, or use releases already in patchkit's cache ({cache_dir() / 'wheels'})",
        )
    index, env = index_url()
    url = urljoin(index, normalize(dist) + "/")

    def get() -> tuple[bytes, str, str]:
        with _request(url, ACCEPT) as resp:
            return resp.read(), resp.headers.get("Content-Type", ""), resp.geturl()

    try:
        body, ctype, final = _retrying(f"list the files of {dist}", url, get)
    except FetchError as e:
        if "HTTP 404" in e.message:
            raise FetchError(
                f"{dist}: no such project on the package index {shown(index)}" + (f" (from {env})" if env else ""),
                "check the name, or PATCHKIT_INDEX_URL",
            ) from None
        raise
    if "json" in ctype:
        try:
            doc = json.loads(body)
            files = [
                {
                    "filename": f["filename"],
                    "url": urljoin(final, f["url"]),
                    "sha256": (f.get("hashes") or {}).get("sha256", ""),
                    "yanked": bool(f.get("yanked")),
                }
                for f in doc["files"]
            ]
        except (ValueError, KeyError, TypeError) as e:
            raise FetchError(
                f"the package index sent a project page for {dist} that is not PEP 691 JSON ({e})",
                "check PATCHKIT_INDEX_URL",
            ) from None
        return files
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    out = []
    for name, href, yanked in parser.links:
        link = urljoin(final, href)
        frag = urlsplit(link).fragment
        sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else ""
        out.append({"filename": name, "url": link.split("#", 1)[0], "sha256": sha, "yanked": yanked})
    return out


def _by_version(files: list[dict], kind: str) -> dict[str, list[dict]]:
    """The index's files of one kind by version (the version as the file names it), yanked
    ones left out: ``"wheel"`` (each with its ``tags``) or ``"sdist"`` (``.tar.gz``)."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    out: dict[str, list[dict]] = {}
    for f in files:
        if not f["filename"].endswith(".whl" if kind == "wheel" else ".tar.gz") or f["yanked"]:
            continue
        try:
            if kind == "wheel":
                _, version, _, tags = parse_wheel_filename(f["filename"])
                f = {**f, "tags": tags}
            else:
                _, version = parse_sdist_filename(f["filename"])
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        out.setdefault(str(version), []).append(f)
    return out


def versions(dist: str, kind: str = "wheel") -> list[str]:
    """Every release of ``dist`` the index has a wheel for (``kind="any"``: a wheel or an
    sdist), yanked ones left out, oldest first."""
    from packaging.version import Version

    files = project_files(dist)
    got = set(_by_version(files, "wheel")) | (set(_by_version(files, "sdist")) if kind == "any" else set())
    return sorted(got, key=Version)


def _pick(candidates: list[dict]) -> Optional[dict]:
    """The wheel this interpreter would install: the best-ranked tag it supports."""
    from packaging.tags import sys_tags

    rank = {t: i for i, t in enumerate(sys_tags())}
    best = [(min(rank.get(t, len(rank)) for t in c["tags"]), c["filename"], c) for c in candidates]
    best = [b for b in best if b[0] < len(rank)]
    return min(best, key=lambda b: b[:2])[2] if best else None


def nearest(version: str, available: list[str], n: int = 3) -> list[str]:
    """Up to n releases on each side of ``version``, in order."""
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return available[-n:]
    i = sum(1 for a in available if Version(a) < v)
    return available[max(0, i - n) : i + n]


# -- wheels -----------------------------------------------------------------------------------


def fetch_wheel(dist: str, version: str, sha256: str = "", say: Callable[[str], None] = lambda s: None) -> Path:
    """The release wheel of ``dist==version``, from the cache or the index."""
    return _fetch("wheel", dist, version, sha256, say)


def fetch_sdist(dist: str, version: str, sha256: str = "", say: Callable[[str], None] = lambda s: None) -> Path:
    """The release's source distribution (``DIST-VERSION.tar.gz``), from the cache or the
    index: for an engine whose wheels are ten times larger than its sdist (vLLM)."""
    return _fetch("sdist", dist, version, sha256, say)


def locate(kind: str, dist: str, version: str) -> dict:
    """The index's file of ``dist==version`` this interpreter would use (``kind`` "wheel" or
    "sdist"): {"filename", "url", "sha256", ...}; a FetchError naming the nearest releases
    when there is none."""
    from packaging.version import InvalidVersion, Version

    try:
        want = Version(version)
    except InvalidVersion:
        raise FetchError(f"{dist}: {version!r} is not a version", "e.g. 0.5.13") from None
    by_version = _by_version(project_files(dist), kind)
    found = [f for v, fs in by_version.items() if Version(v) == want for f in fs]
    if not found:
        listed = sorted(by_version, key=Version)
        close = nearest(version, listed)
        raise FetchError(
            f"{dist} {version}: no such release on the package index {shown(index_url()[0])}",
            f"nearest releases: {', '.join(close)}" if close else f"the index lists no {kind} of it",
        )
    pick = _pick(found) if kind == "wheel" else found[0]
    if pick is None:
        raise FetchError(
            f"{dist} {version}: no wheel for this platform ({', '.join(f['filename'] for f in found)})",
            "patchkit reads the release's wheel; run it where one of these installs",
        )
    return pick


def _fetch(kind: str, dist: str, version: str, sha256: str, say: Callable[[str], None]) -> Path:
    d = wheel_dir(dist, version) if kind == "wheel" else sdist_dir(dist, version)
    suffix = ".whl" if kind == "wheel" else ".tar.gz"
    cached = sorted(p for p in d.glob(f"*{suffix}") if p.is_file()) if d.is_dir() else []
    unchecked = []  # (file, why): not the bytes recorded when it was downloaded (recorded.py)
    for w in cached:
        if sha256:  # the pin's sha256 is the record (and recorded: a reference reads it offline)
            if file_sha256(w) == sha256:
                if recorded.recorded(w) != sha256:
                    recorded.record(w, sha256)
                return w
            continue
        why = recorded.why_not(w)
        if why is None:
            return w
        unchecked.append((w, why))
    if offline():
        if unchecked:
            raise recorded.refusal(*unchecked[0], OFFLINE_ENV)
        raise FetchError(
            f"{dist} {version} is not in patchkit's cache ({d}), and {OFFLINE_ENV}=1 forbids downloading it",
            f"unset {OFFLINE_ENV}, or put the release's {kind} in {d}",
        )
    pick = locate(kind, dist, version)
    for w, _ in unchecked:  # the index's own file, already here: checked against its sha256 now
        if w.name == pick["filename"] and pick["sha256"] and file_sha256(w) == pick["sha256"]:
            recorded.record(w, pick["sha256"])
            return w
    from patchkit.base import fsio

    fsio.owned_dir(cache_dir(), d.relative_to(cache_dir()).as_posix())  # the download lands there only
    say(f"downloading {dist}=={version} from the package index ({pick['filename']}) ...")
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        part = Path(tmp) / pick["filename"]
        actual = _retrying(f"download {pick['filename']}", pick["url"], lambda: _download(pick["url"], part))
        if pick["sha256"] and actual != pick["sha256"]:
            raise FetchError(
                f"{pick['filename']}: sha256 mismatch: the index lists {pick['sha256']}, downloaded {actual}; "
                "refusing to use it",
                "a proxy or mirror served a different file; try again, or investigate the index",
            )
        if sha256 and actual != sha256:
            raise FetchError(
                f"{pick['filename']}: sha256 mismatch: pinned {sha256}, downloaded {actual}; refusing to use it",
                "the index served a different artifact than the pin records; investigate before updating the pin",
            )
        dest = d / pick["filename"]
        os.replace(part, dest)
        recorded.record(dest, actual)
    say(f"cached {dest}")
    return dest


def _download(url: str, dest: Path) -> str:
    """Stream ``url`` into ``dest``; its sha256.  A progress line on a terminal."""
    from patchkit.base.progress import working

    h = hashlib.sha256()
    with _request(url) as resp, open(dest, "wb") as out:
        total = int(resp.headers.get("Content-Length") or 0)
        show = total >= PROGRESS_MIN and _tty()
        done, last = [0], 0.0

        def got() -> str:  # off a terminal, every progress.EVERY seconds
            return f"{done[0] / 1e6:.1f} of {total / 1e6:.1f} MB" if total else f"{done[0] / 1e6:.1f} MB"

        with working(f"downloading {dest.name}", got):
            for chunk in iter(lambda: resp.read(1 << 16), b""):
                out.write(chunk)
                h.update(chunk)
                done[0] += len(chunk)
                now = time.monotonic()
                if show and (now - last > 0.2 or done[0] == total):
                    last = now
                    print(
                        f"\r  {done[0] / 1e6:.1f}/{total / 1e6:.1f} MB {100 * done[0] // total}%",
                        end="",
                        file=sys.stderr,
                    )
        if show:
            print(file=sys.stderr, flush=True)
        if total and done[0] != total:
            raise OSError(f"the download stopped at {done[0]} of {total} bytes")
    return h.hexdigest()


def _tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def unpack(wheel: Path, dest: Path, source: dict) -> None:
    """Unpack a wheel into ``dest`` (atomically: a temp dir beside it, then a rename)."""
    from patchkit.base.progress import working

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    try:
        checked = recorded.tree_record(wheel, source)
        with zipfile.ZipFile(wheel) as z, working(f"unpacking {wheel.name}"):
            z.extractall(tmp)
        recorded.seal_tree(tmp, dest, checked)
        _into_place(tmp, dest, source)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _into_place(tmp: Path, dest: Path, source: dict) -> None:
    """Record what a finished tree was made from (``.patchkit/source.json``, which
    ``tree_source`` reads) and rename it into ``dest``.  Another process unpacking or reading
    the same release may have put it there meanwhile (whole or sparse), and a third may be
    reading it: that tree is kept and ours dropped (clearing it would pull files from under the
    reader, who then finds no sources); a sparse one kept where ours is whole is filled.
    Anything else there (an older tree, one sealed under another key, a link planted in its
    place) is cleared first: unlinked, never followed.  The look and the swap are one step
    among patchkit's processes (``_placing``): two that found the same stale tree never
    clear each other's new one."""
    (tmp / ".patchkit").mkdir(exist_ok=True)
    (tmp / ".patchkit" / ".gitignore").write_text("*\n")
    (tmp / ".patchkit" / "source.json").write_text(json.dumps(source, indent=1, sort_keys=True) + "\n")
    sealed = (tmp / recorded.TREE_RECORD).is_file()

    def held() -> Optional[str]:
        """What is there already serves: the release, tied to its archive ("whole" or
        "sparse", _holds_release), or, where ours is tied to nothing, the same tree."""
        return _holds_release(dest, source) or ("same" if not sealed and tree_source(dest) == source else None)

    with _placing(dest.parent):
        kept = held()
        if kept is None:
            fsio.clear_entry(dest)
            try:
                os.replace(tmp, dest)
                return
            except OSError:
                kept = held()
                if kept is None:  # a patchkit that takes no lock put the same tree there meanwhile
                    raise
    shutil.rmtree(tmp, ignore_errors=True)
    if kept == "sparse" and "sparse" not in source:
        from patchkit.upstream import lazytree

        lazytree.fill(dest, lambda s: None)  # a sparse one kept where ours is whole: filled


@contextlib.contextmanager
def _placing(parent: Path) -> Iterator[None]:
    """An exclusive flock of the directory trees are placed in (it creates nothing), held
    while a process looks at what is at a tree's place and swaps its own in; where the
    filesystem will not flock a directory, unlocked (each step is still a rename)."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def _holds_release(dest: Path, source: dict) -> Optional[str]:
    """Does ``dest`` already hold the release ``source`` names, authenticated (so a reader may
    be in it, and clearing it would pull its files from under them)?  "whole" or "sparse"
    where it does, else None.  A whole tree serves every reader, sparse or not; a sparse one,
    where ours is whole, is kept too (the caller fills it in place: files are only added,
    each by a rename) rather than replaced."""
    engine = str(source.get("engine", ""))
    version = str(source.get("sparse") or source.get("version") or "")
    if not engine or not version:
        return None
    if recorded.tree_why_not(dest, engine, version) is None:
        return "whole"
    return "sparse" if recorded.sparse_why_not(dest, engine, version) is None else None


def tree_source(dest: Path) -> Optional[dict]:
    """What ``.patchkit/source.json`` says a tree was made from, or None: nothing there, or
    what is there is not a regular file patchkit wrote (a link, a FIFO, not a JSON table)."""
    from patchkit.base import regular

    try:
        doc = json.loads(regular.read_owned(dest, ".patchkit/source.json", 1 << 20))
    except (OSError, ValueError, RecursionError, regular.NotRegular, regular.TooBig):
        return None
    return doc if isinstance(doc, dict) else None


def unpack_sdist(sdist: Path, dest: Path, prefixes: tuple[str, ...], source: dict) -> int:
    """Unpack the files of an sdist (``NAME-VERSION/...``) whose path under its top
    directory starts with one of ``prefixes`` (the engine's git-layout path prefixes) into
    ``dest``, atomically, as the repository lays them out; the number of files.  Only
    regular files are taken; a member that would land outside ``dest`` is refused."""
    import tarfile

    from patchkit.base.progress import working

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    n = 0
    try:
        checked = recorded.tree_record(sdist, source)
        with tarfile.open(sdist, "r:gz") as tar, working(f"unpacking {sdist.name}", lambda: f"{n} files"):
            for m in tar:
                parts = m.name.split("/", 1)
                if len(parts) != 2 or not m.isfile():
                    continue
                rel = parts[1]
                if not (rel.startswith(prefixes) or rel == "PKG-INFO"):
                    continue
                if rel.startswith("/") or ".." in rel.split("/") or "\\" in rel:
                    raise FetchError(f"{sdist.name}: member {m.name!r} leads outside the tree", "a damaged sdist")
                out = tmp / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                if src is None:
                    continue
                with src, open(out, "wb") as f:
                    shutil.copyfileobj(src, f)
                n += 1
        recorded.seal_tree(tmp, dest, checked)
        _into_place(tmp, dest, source)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return n


def release_tree(engine: str, version: str, say: Callable[[str], None] = lambda s: None, lazy: bool = False) -> Path:
    """A pristine unpacked release, from the cache or the index: its sdist where the engine's
    reference is the sdist (and the index has one), else its wheel (drift and the pristine
    references read releases here).

    ``lazy`` (drift): where the release is read from its wheel, a *sparse* tree
    (patchkit/upstream/lazytree.py) that fetches each file by HTTP range when something reads
    it, unless ``PATCHKIT_LAZY=0`` or the index serves no ranges.  Without it the tree is
    whole: a sparse one left by an earlier drift is filled in place."""
    # cache/trees is patchkit's own (checked without following a link); the release's own
    # directory is never made empty in advance: another process must see it whole or not at
    # all (fetch.unpack renames a finished tree into place).
    dest = fsio.owned_dir(cache_dir(), "trees") / f"{engine}-{version}"
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        from patchkit.base.errors import TargetError

        raise TargetError(
            f"{dest}: not a directory patchkit made ({'a symlink' if dest.is_symlink() else 'not a directory'});"
            " patchkit keeps its own files there",
            "remove it (patchkit makes it again)",
        )
    if recorded.tree_why_not(dest, engine, version) is None:  # unpacked from a checked archive
        return dest
    src = tree_source(dest)
    # a sparse tree patchkit made (no "version": a patchkit before sparse trees makes it again)
    if src and src.get("sparse") == version and recorded.sparse_why_not(dest, engine, version) is None:
        if not lazy:
            from patchkit.upstream import lazytree

            say(f"{engine} {version}: a sparse tree in the cache; filling it from the whole wheel ...")
            lazytree.fill(dest, say)
        return dest
    from patchkit.base.target import ENGINES

    info = ENGINES[engine]
    if lazy and info.reference != "sdist":
        from patchkit.upstream import lazytree

        if lazytree.enabled():
            try:
                if lazytree.make(engine, version, dest, say):
                    return dest
            except FetchError as e:
                if "no such release" not in e.message:
                    raise
                return _sdist_only(engine, version, dest, e, say)
    if info.reference == "sdist":
        try:
            sdist = fetch_sdist(info.dist, version, say=say)
        except FetchError as e:
            if "no such release" not in e.message:
                raise
            say(f"{engine} {version}: no sdist on the index; its wheel will do")
        else:
            prefixes = tuple(pp for _, pp in info.layouts["git"])
            say(f"unpacking {sdist.name} ({', '.join(prefixes)}) ...")
            source = {"engine": engine, "source": "index", "version": version, "sdist": sdist.name}
            unpack_sdist(sdist, dest, prefixes, source)
            return dest
    try:
        whl = fetch_wheel(info.dist, version, say=say)
    except FetchError as e:
        if info.reference == "sdist" or "no such release" not in e.message:
            raise
        return _sdist_only(engine, version, dest, e, say)
    unpack(whl, dest, {"engine": engine, "source": "index", "version": version, "wheel": whl.name})
    return dest


def _sdist_only(engine: str, version: str, dest: Path, no_wheel: FetchError, say: Callable[[str], None]) -> Path:
    """A release the index has only as an sdist (FlashInfer 0.3.1, 0.4.0): unpacked as the
    repository lays it out, where the sdist holds the engine's files at the repository's
    paths; ``no_wheel`` (the index has neither) otherwise."""
    from patchkit.base.target import ENGINES

    info = ENGINES[engine]
    try:
        sdist = fetch_sdist(info.dist, version, say=say)
    except FetchError as e:
        if "no such release" in e.message:
            raise no_wheel from None
        raise
    prefixes = tuple(pp for _, pp in info.layouts["git"])
    say(f"{engine} {version}: the index has no wheel of it; reading its sdist ({', '.join(prefixes)}) ...")
    source = {"engine": engine, "source": "index", "version": version, "sdist": sdist.name}
    if unpack_sdist(sdist, dest, prefixes, source) == 0:
        shutil.rmtree(dest, ignore_errors=True)
        raise FetchError(
            f"{sdist.name}: holds none of {engine}'s files where its repository has them ({', '.join(prefixes)})",
            f"the index has no wheel of {engine} {version}, and its sdist is laid out otherwise; pick another release",
        )
    return dest
