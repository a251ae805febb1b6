"""Shared fixtures, and the two test tiers.

Real upstream releases come from the package index through patchkit's own cache
(``PATCHKIT_CACHE``, default ~/.cache/patchkit), unpacked once per session and copied per
test, so every test works on a pristine tree of its own (``tree(..., links=True)``: hard
links for the files the test leaves to patchkit, guarded).  A test that needs them carries
``@pytest.mark.real`` (one that uses the ``release_dir``/``tree`` fixtures gets it here).
`make test` runs that tier on two pytest-xdist workers (``--dist loadgroup``).

The offline tier (``make test-fast``: ``PATCHKIT_OFFLINE_TESTS=1 pytest -m "not real"``; a
plain ``-m "not real"`` counts too) runs behind a network guard: an internet socket, a name
look-up, or a pip/git subprocess that would reach an index fails the test, naming it, even
where the code under test swallows the error.  The cache is an empty directory there, so a
test that only passes thanks to releases already downloaded fails as on a clean machine."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from patchkit.base.target import ENGINES
from patchkit.upstream import fetch

ROOT = Path(__file__).resolve().parents[1]
PINNED = {"sglang": "0.5.9", "flashinfer": "0.6.3"}
OFFLINE_ENV = "PATCHKIT_OFFLINE_TESTS"


# -- the two tiers -----------------------------------------------------------------------------


class NetworkInOfflineTier(RuntimeError):
    """A test of the offline tier tried to reach the network."""


def offline_tier(config: pytest.Config) -> bool:
    return os.environ.get(OFFLINE_ENV) == "1" or " ".join(config.option.markexpr.split()) == "not real"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real: runs against real releases downloaded from the package index")
    # pytest-xdist's own marker (`make test` runs the real tier with --dist loadgroup): the
    # tests of one group run on one worker, in one go.  Declared here too for a run without xdist.
    config.addinivalue_line("markers", "xdist_group(name): run on the same pytest-xdist worker as its group")
    # Recipes are only those a test names or finds from its working directory: none from
    # the user's ~/.config/patchkit/recipes, none shipped with the installed patchkit (a test
    # of those layers sets them up itself: tests/core/test_project.py, tests/product/test_install.py).
    # The workers of one pytest-xdist run share the controller's: its cache key
    # (patchkit/base/store.py) is theirs too, so the releases one worker unpacks into the shared
    # cache (tied to their archive under that key, patchkit/upstream/recorded.py) are the others'.
    inherited = os.environ.get("XDG_CONFIG_HOME", "")
    if os.environ.get("PYTEST_XDIST_WORKER") and os.path.basename(inherited).startswith("patchkit-empty-config-"):
        config._patchkit_empty_config = ""  # the controller's, removed by it
    else:
        config._patchkit_empty_config = tempfile.mkdtemp(prefix="patchkit-empty-config-")
        _users_cache_key(Path(config._patchkit_empty_config) / "patchkit")
    os.environ.update(
        {"XDG_CONFIG_HOME": config._patchkit_empty_config or inherited, "PATCHKIT_NO_SHIPPED_RECIPES": "1"}
    )
    if offline_tier(config):
        # Children (python -m patchkit, pip, git) inherit these: no index, no remote git, an
        # empty cache.  The in-process guard below names the test; these stop what it cannot see.
        config._patchkit_empty_cache = tempfile.mkdtemp(prefix="patchkit-offline-cache-")
        os.environ.update(
            {
                OFFLINE_ENV: "1",
                "PATCHKIT_CACHE": config._patchkit_empty_cache,
                "PATCHKIT_OFFLINE": "1",  # a pristine release is never downloaded (pristine.py)
                "PIP_NO_INDEX": "1",
                "PIP_INDEX_URL": "http://offline.invalid/simple",
                "GIT_ALLOW_PROTOCOL": "file",
            }
        )


def _users_cache_key(config_dir: Path) -> None:
    """This user's own cache key (patchkit/base/store.py; made as patchkit makes it where
    there is none yet), given to the tests' empty config directory.  The real tier reads and
    writes this user's cache (~/.cache/patchkit), and one user has one cache and one key:
    under a key of their own, every tree the user's patchkit (or `make bench`) sealed there
    would read forged to the tests and theirs to it, and each would make the other's again
    over its readers.  Where this user's key cannot be used, the tests make one of their own."""
    from patchkit.base import store

    _give_key(config_dir, store.secret() or os.urandom(store.KEY_SIZE))


def share_cache_key(config_home: Path) -> None:
    """Give a child that runs with its own config directory (``config_home``: its
    XDG_CONFIG_HOME, or ``HOME/.config``) but patchkit's shared cache the key that cache is
    sealed with, as one user has one cache and one key: under a key of its own every tree
    and record there would read forged to it, and it would make them again over the ones
    another test is reading."""
    from patchkit.base import paths, store

    mine = paths.config_dir() / store.KEY_NAME
    if mine.is_file():
        _give_key(config_home / "patchkit", mine.read_bytes())


def _give_key(config_dir: Path, key: bytes) -> None:
    """``key`` as the cache key of patchkit's config directory ``config_dir`` (0600, made
    without following a link); one there already (given before) is kept."""
    from patchkit.base import store

    config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(config_dir / store.KEY_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(key)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(getattr(config, "_patchkit_empty_config", ""), ignore_errors=True)
    cache = getattr(config, "_patchkit_empty_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


# The longest tests of the real tier (a minute or more each), run first: on two pytest-xdist
# workers the short ones then fill in around them, and no long one is left for the end.
LONGEST_FIRST = (
    "tests/verify/test_verify.py::test_one_real_unit",  # two nvcc builds of minutes: start them first
    "tests/product/test_kill.py::",
    "tests/core/test_view.py::",
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "release_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))  # stable: the rest keeps its order


_PIP_NETWORK = {"download", "install", "index", "wheel", "search"}
_GIT_NETWORK = {"clone", "fetch", "pull", "push", "ls-remote", "submodule"}


def _network_command(args) -> str | None:
    """What a subprocess command line would fetch over the network, or None."""
    argv = os.fsdecode(args).split() if isinstance(args, (str, bytes)) else [os.fsdecode(a) for a in args]
    if not argv:
        return None
    prog, rest = Path(argv[0]).name, argv[1:]
    if rest[:2] == ["-m", "pip"]:
        prog, rest = "pip", rest[2:]
    if prog in ("pip", "pip3"):
        sub = next((w for w in rest if not w.startswith("-")), "")
        if sub in _PIP_NETWORK and "--no-index" not in rest:
            return f"run `pip {sub}`"
    if prog == "git" and _GIT_NETWORK & set(rest) and any("://" in w and not w.startswith("file://") for w in rest):
        return f"run `git {' '.join(rest)}`"
    return None


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory, monkeypatch):
    """Each test has its own $XDG_STATE_HOME: the journals' mirrors one test leaves are never
    another's proof, and the user's own ~/.local/state/patchkit is never read or written."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


# Ports of servers on 127.0.0.1 that a test started itself (``local_index``): the offline
# tier's guard lets a test connect to these, and to nothing else.
LOOPBACK_PORTS: set[int] = set()


@pytest.fixture
def local_index():
    """A package index on 127.0.0.1 (tests/rangeserver.py) that the offline tier may reach:
    ``local_index(files={project: [wheel paths]}, ranges=True)`` -> a RangeIndex, stopped
    after the test."""
    from tests.rangeserver import RangeIndex

    made: list[RangeIndex] = []

    def make(files: dict | None = None, ranges: bool = True) -> RangeIndex:
        idx = RangeIndex(files, ranges=ranges)
        LOOPBACK_PORTS.add(idx.port)
        made.append(idx)
        return idx

    yield make
    for idx in made:
        idx.close()
        LOOPBACK_PORTS.discard(idx.port)


@pytest.fixture(autouse=True)
def _offline_guard(request, monkeypatch):
    """In the offline tier: the network is off, and a test that reaches for it fails by name."""
    if not offline_tier(request.config):
        yield
        return
    name = request.node.nodeid
    hits: list[str] = []

    def refuse(what: str):
        msg = f"{name}: tried to {what} in the offline tier ({OFFLINE_ENV}=1); mark the test @pytest.mark.real"
        hits.append(msg)
        raise NetworkInOfflineTier(msg)

    inet = (socket.AF_INET, socket.AF_INET6)
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def own(address) -> bool:  # a server this test started on 127.0.0.1 (the local_index fixture)
        return isinstance(address, tuple) and address[:1] == ("127.0.0.1",) and address[1] in LOOPBACK_PORTS

    def connect(self, address):
        if self.family in inet and not own(address):
            refuse(f"connect to {address!r}")
        return real_connect(self, address)

    def connect_ex(self, address):
        if self.family in inet and not own(address):
            refuse(f"connect to {address!r}")
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if own((host, args[0] if args else kwargs.get("port"))):
            return real_getaddrinfo(host, *args, **kwargs)
        refuse(f"look up {host!r}")

    real_init = subprocess.Popen.__init__

    def popen_init(self, args, *a, **kw):
        what = _network_command(args)
        if what:
            refuse(what)
        real_init(self, args, *a, **kw)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)
    yield
    if hits:  # also when the code under test caught the error and carried on
        pytest.fail("\n".join(hits), pytrace=False)


# -- real releases -----------------------------------------------------------------------------

# Files of a release (wheel layout) that tests edit by hand, in place: a linked tree (see
# ``tree``) holds private copies of these, and of every dist-info file.
EDITED_IN_PLACE = frozenset(
    {
        "sglang/srt/model_executor/model_runner.py",
        "sglang/srt/layers/communicator.py",
        "sglang/srt/server_args.py",
        "sglang/srt/utils/common.py",
        "sglang/version.py",
        "flashinfer/jit/comm.py",
        "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh",
        "flashinfer/_build_meta.py",
    }
)


def _stamp(root: Path) -> dict[str, tuple[int, int, int]]:
    """relative path -> (size, mtime, mode) of every file under ``root``."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _private(rel: str) -> bool:
    return rel in EDITED_IN_PLACE or ".dist-info/" in rel


def copy_linked(src: Path, dest: Path) -> Path:
    """A copy of the release ``src`` whose files are hard links to it, except the ones tests
    edit in place (``EDITED_IN_PLACE``, dist-info), which are private copies.  patchkit never
    writes through a link: it writes a temp file and renames it over the target
    (patchkit/base/fsio.py), which leaves the release alone.  Several times faster than a copy."""

    def link(s: str, d: str) -> str:
        if not _private(os.path.relpath(s, src).replace(os.sep, "/")):
            try:
                os.link(s, d)
                return d
            except OSError:  # another file system: copy
                pass
        return shutil.copy2(s, d)

    shutil.copytree(src, dest, symlinks=True, copy_function=link)
    return dest


class Releases:
    """The ``release_dir`` fixture: ``release_dir(engine, version)`` -> a pristine unpacked
    wheel, unpacked once per session (shared; do not modify).  ``changes(engine, version)``
    lists its files that are not as unpacked: written through a hard link (``tree``)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.unpacked: dict[tuple[str, str], Path] = {}
        self.stamps: dict[tuple[str, str], dict[str, tuple[int, int, int]]] = {}

    def __call__(self, engine: str, version: str) -> Path:
        key = (engine, version)
        if key not in self.unpacked:
            whl = fetch.fetch_wheel(ENGINES[engine].dist, version)
            dest = self.base / f"{engine}-{version}"
            shutil.rmtree(dest, ignore_errors=True)  # one a test damaged (see ``tree``)
            with zipfile.ZipFile(whl) as z:
                z.extractall(dest)
            self.stamps[key] = _stamp(dest)
            self.unpacked[key] = dest
        return self.unpacked[key]

    def changes(self, engine: str, version: str) -> list[str]:
        key = (engine, version)
        if key not in self.unpacked:
            return []
        now, was = _stamp(self.unpacked[key]), self.stamps[key]
        return sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))

    def forget(self, engine: str, version: str) -> None:
        """Unpack it afresh when next asked for."""
        self.unpacked.pop((engine, version), None)


@pytest.fixture(scope="session")
def release_dir(tmp_path_factory):
    """release_dir(engine, version) -> a pristine unpacked wheel (shared; do not modify)."""
    releases = Releases(tmp_path_factory.mktemp("releases"))
    yield releases
    # The backstop for links made outside ``tree`` (git_layout(links=True)): nothing wrote
    # through them into a release.
    damaged = {f"{e} {v}": releases.changes(e, v)[:5] for e, v in list(releases.unpacked)}
    damaged = {k: v for k, v in damaged.items() if v}
    assert not damaged, f"a test wrote through a hard link into a shared release: {damaged}"


@pytest.fixture
def tree(release_dir, tmp_path):
    """tree(engine, version=pinned, name=None, links=False) -> a private copy of a real
    release (wheel layout).

    ``links=True`` makes it in a fraction of the time: files are hard links to the shared
    release, except ``EDITED_IN_PLACE`` and the dist-info, which are copies.  For tests that
    write other files only through patchkit (temp file + rename: the link is replaced, not
    written through).  A test that writes through a link anyway fails at teardown, naming
    the files, and the damaged release is unpacked afresh for the next test."""
    linked: set[tuple[str, str]] = set()

    def make(engine: str, version: str | None = None, name: str | None = None, links: bool = False) -> Path:
        version = version or PINNED[engine]
        src = release_dir(engine, version)
        dest = tmp_path / (name or f"{engine}-{version}")
        if links:
            linked.add((engine, version))
            return copy_linked(src, dest)
        shutil.copytree(src, dest, symlinks=True)
        return dest

    yield make
    damaged = []
    for engine, version in sorted(linked):
        changed = release_dir.changes(engine, version)
        if changed:
            release_dir.forget(engine, version)
            damaged.append(f"{engine} {version}: {', '.join(changed[:5])}")
    if damaged:
        pytest.fail(
            "the test wrote through a hard link into a shared release ("
            + "; ".join(damaged)
            + "): make that tree with links=False, or add the file to conftest.EDITED_IN_PLACE",
            pytrace=False,
        )


def git_layout(engine: str, wheel_tree: Path, dest: Path, links: bool = False) -> Path:
    """Rearrange an unpacked wheel into the upstream repository layout (python/sglang, include/...).
    ``links=True``: hard links to ``wheel_tree``'s files, for a tree nothing writes in place
    (e.g. one only committed to git and cloned)."""
    copy = os.link if links else shutil.copy2
    dest.mkdir(parents=True, exist_ok=True)
    if engine == "sglang":
        shutil.copytree(wheel_tree / "sglang", dest / "python" / "sglang", copy_function=copy)
    else:
        shutil.copytree(
            wheel_tree / "flashinfer", dest / "flashinfer", ignore=shutil.ignore_patterns("data"), copy_function=copy
        )
        for sub in ("include", "csrc"):
            src = wheel_tree / "flashinfer" / "data" / sub
            if src.exists():
                shutil.copytree(src, dest / sub, copy_function=copy)
    return dest


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """run_cli(*args, cwd=None) -> (exit_code, stdout, stderr), through patchkit.cli.main (the
    console entry)."""
    from patchkit.cli import main

    def run(*args: str, cwd: Path | None = None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def recipes_dir():
    return ROOT / "recipes"


def pk(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real `patchkit` console entry (python -m patchkit) as a subprocess."""
    return subprocess.run([sys.executable, "-m", "patchkit", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def one_op_judge(tmp_path, run_cli, monkeypatch):
    """The goal tests' harness, offline: ``one_op_judge(FILE, ID, RECIPE, home=None)`` gives
    ``judge(target, pristine=None, home=...)`` -> ``(root, cli, op)``: a miniature SGLang tree
    whose ``FILE`` is ``target``, the recipe ``ID`` (``RECIPE``, written for 0.5.8, whose
    ``FILE`` in the cache is ``home`` where given; ``recipe=`` another text under that ID), the
    pristine 0.5.9 in the cache where ``pristine`` is given, ``cli(*args)`` on that tree, and
    ``status ID --json``'s one op."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.setenv("PATCHKIT_OFFLINE", "1")

    def factory(file: str, recipe_id: str, recipe: str, home: "str | None" = None):
        def judge(target: str, pristine: "str | None" = None, home: "str | None" = home, recipe: str = recipe):
            if home is not None:
                release_in_cache(cache, "sglang", "0.5.8", {file: home, "sglang/__init__.py": ""})
            if pristine is not None:
                release_in_cache(cache, "sglang", "0.5.9", {file: pristine, "sglang/__init__.py": ""})
            root = mini_sglang(tmp_path / "t", {file: target})
            recipes = tmp_path / "recipes"
            recipes.mkdir(exist_ok=True)
            (recipes / f"{recipe_id}.toml").write_text(recipe)

            def cli(*args):
                return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")

            code, out, err = cli("status", recipe_id, "--json")
            assert code in (0, 1), (out, err)
            return root, cli, json.loads(out)["recipes"][0]["ops"][0]

        return judge

    return factory


def mini_sglang(root: Path, files: dict[str, str]) -> Path:
    """A hand-made package-layout sglang 0.5.9 (``__init__``, ``version.py``) holding ``files``
    ({path under root: text}), for offline tests of the engine's own behaviour."""
    for rel, text in {"sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.9"\n', **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def release_in_cache(cache: Path, engine: str, version: str, files: dict[str, str]) -> Path:
    """A hand-made release wheel of ``engine`` ``version`` holding ``files`` ({path in the
    wheel: text}) in patchkit's cache ``cache``: a release in a recipe's range, offline, for
    the site identity (patchkit/core/identity.py) or a reference to be read from."""
    dist = ENGINES[engine].dist
    d = cache / "wheels" / dist.replace("_", "-").lower() / version
    d.mkdir(parents=True, exist_ok=True)
    whl = d / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for rel, text in files.items():
            z.writestr(rel, text)
    return downloaded(whl, cache)


def downloaded(archive: Path, cache: Path) -> Path:
    """Record ``archive`` (a wheel or sdist made in patchkit's cache ``cache``) as a download
    from the index records it (patchkit/upstream/recorded.py): its sha256, authenticated
    under this user's key.  A release placed there without it is no pristine reference."""
    from patchkit.upstream import recorded

    old = os.environ.get("PATCHKIT_CACHE")
    os.environ["PATCHKIT_CACHE"] = str(cache)
    try:
        recorded.record(archive, fetch.file_sha256(archive))
        recorded._mine.pop(str(archive), None)  # recorded by an earlier process: only the entry stands
    finally:
        if old is None:
            del os.environ["PATCHKIT_CACHE"]
        else:
            os.environ["PATCHKIT_CACHE"] = old
    return archive


# The smallest valid recipe (one list-element op), with ``{id}`` to fill: tests of recipe
# handling (check, list, completion) build on it.
def gate_recipe(rid: str = "widen", scope: str = "gate", extra: str = "") -> str:
    """The or-operand recipe several tests judge: ``_is_a or _is_b`` in sglang/srt/gate.py's
    ``scope`` gains ``_is_c`` (``extra``: more TOML at its end, e.g. a marker)."""
    return f"""
id = "{rid}"
summary = "widen the gate"
[engines]
sglang = ">=0"
[[ops]]
kind = "or-operand"
engine = "sglang"
file = "sglang/srt/gate.py"
scope = "{scope}"
[ops.locator]
operands = ["_is_a", "_is_b"]
[ops.params]
operand = "_is_c"
{extra}"""


MINIMAL_RECIPE = """\
id = "{id}"
summary = "widen a list"
bundles = ["b"]

[engines]
sglang = ">=0.5.9"

[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/x.py"
scope = "f"
[ops.locator]
contains = ['"a"']
[ops.params]
element = '"b"'
"""

# The SGLang half of allreduce-fusion as written for 0.5.9-0.5.18, before it had variants
# (ops #1-#3 of recipes/allreduce-fusion.toml without `when`): tests on releases where this
# code moved or where a second gate refuses build their recipes from these.
OLD_LAYER_GATE = """
[[ops]]
kind = "or-operand"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
scope = "apply_flashinfer_allreduce_fusion"
[ops.locator]
operands = ["_is_sm90_supported", "_is_sm100_supported"]
[ops.params]
operand = "_is_sm120_supported"
"""
# Before 0.5.19: import is_sm120_supported and define the flag (ops #1, #2).
OLD_FLAG = """
[[ops]]
kind = "ensure-import"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
[ops.locator]
module = "sglang.srt.utils"
[ops.params]
name = "is_sm120_supported"
after = "is_sm100_supported"
defined_in = "sglang/srt/utils/common.py"

[[ops]]
kind = "insert"
engine = "sglang"
file = "sglang/srt/layers/communicator.py"
[ops.locator]
anchor = "_is_sm100_supported = _is_cuda and is_sm100_supported()"
position = "after"
[ops.params]
code = "_is_sm120_supported = _is_cuda and is_sm120_supported()"
"""


@pytest.fixture
def chattr():
    """chattr(path, "+i" | "+a") sets a file attribute, undone after the test; skips the test
    where chattr or the filesystem cannot (not root, tmpfs, no e2fsprogs)."""
    done: list[tuple[Path, str]] = []

    def set_flag(path: Path, flag: str) -> None:
        exe = shutil.which("chattr")
        if exe is None:
            pytest.skip("no chattr here")
        r = subprocess.run([exe, flag, str(path)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"chattr {flag} is not supported here ({r.stderr.strip()})")
        done.append((path, "-" + flag[1:]))

    yield set_flag
    for path, undo in reversed(done):
        subprocess.run([shutil.which("chattr") or "chattr", undo, str(path)], capture_output=True)


def fail_target_rename(monkeypatch, n: int, ours=lambda dst: str(dst).endswith(".json")) -> list:
    """Make the n-th rename of one of patchkit's temps over a target's file fail with EIO.
    A cache entry's rename (inside its directory: ``src_dir_fd``/``dst_dir_fd``) and a rename
    over patchkit's own file (``ours``: the journal) are passed through uncounted.  Returns the
    renames counted so far."""
    from patchkit.base import fsio

    real, calls = os.replace, []

    def replace(src, dst, **dir_fds):
        if not dir_fds and str(src).endswith(".patchkit-tmp") and not ours(dst):
            calls.append(dst)
            if len(calls) == n:
                raise OSError(5, "Input/output error (injected)", str(dst))
        return real(src, dst, **dir_fds)

    monkeypatch.setattr(fsio.os, "replace", replace)
    return calls
