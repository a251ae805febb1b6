"""Targets: where an engine's source lives, in which layout, at which version.

A recipe names a file once, by its *logical* name (the path inside the installed package,
plus ``include/`` and ``csrc/`` for FlashInfer's C++).  A Target maps that name onto the
layout it finds: a git checkout of the upstream repository, or a directory holding the
installed package (an unpacked wheel, or site-packages).  This is also where paths are
checked so that no recipe can write outside its target.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple, Optional

from patchkit.base.engines import ENGINES, EngineInfo  # noqa: F401  (the engine table, re-exported)
from patchkit.base.errors import TargetError

STATE_DIR = ".patchkit"  # patchkit's journal, lock and transaction records, inside a target root
TXN_PENDING = "txn-pending.json"  # in STATE_DIR while a write is under way (patchkit/core/transaction.py)


def logical_prefixes(engine: str) -> tuple[str, ...]:
    """Every logical prefix of the engine (the git layout's: a superset of the package's)."""
    return tuple(lp for lp, _ in ENGINES[engine].layouts["git"])


class Target(NamedTuple):
    engine: str
    root: Path  # resolved
    layout: str  # "git" | "package"
    version: Optional[str]

    def relpath(self, logical: str) -> str:
        """The path of a logical file, relative to the target root."""
        for lp, pp in ENGINES[self.engine].layouts[self.layout]:
            if logical.startswith(lp):
                return pp + logical[len(lp) :]
        if logical.startswith(logical_prefixes(self.engine)):  # the engine's file, not this layout's
            here = ", ".join(lp for lp, _ in ENGINES[self.engine].layouts[self.layout])
            what = "an installed or unpacked wheel" if self.layout == "package" else "a checkout or an unpacked sdist"
            raise TargetError(
                f"{logical}: not in {self.engine}'s {self.layout} layout ({what}: {here} only) at {self.root}",
                f"only {self.engine}'s checkout or unpacked sdist has it: apply the recipe there"
                f" (-t {self.engine}=PATH)",
            )
        raise TargetError(
            f"{logical}: not a file of {self.engine}",
            f"logical names start with {', '.join(logical_prefixes(self.engine))}",
        )

    def path(self, logical: str) -> Path:
        """Absolute path of a logical file; refuses anything that leads out of the target."""
        rel = self.relpath(logical)
        p = self.root / rel
        real = Path(os.path.realpath(p))
        if real != self.root and self.root not in real.parents:
            raise TargetError(
                f"{p}: leads outside the target {self.root} (symlink to {real})",
                "patchkit never writes outside its target; replace the symlink with the real file",
            )
        return p

    def describe(self) -> str:
        v = self.version or "unknown version"
        return f"{self.engine} {v} ({self.layout} layout) at {self.root}"


def _read_text(path: Path) -> Optional[str]:
    """A small metadata file's text, or None when there is no regular file there.  A file
    that cannot be read is a TargetError (exit 2); a FIFO never blocks (regular.read_file)."""
    from patchkit.base import regular

    if not path.is_file():  # follows symlinks; a FIFO or a directory is not a version file
        return None
    data = regular.read_file(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def _metadata(d: Path) -> tuple[str, str]:
    """(Name, Version) from a dist-info's METADATA headers ("" where absent)."""
    meta = _read_text(d / "METADATA")
    got = {"name": "", "version": ""}
    for line in (meta or "").splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key.strip().lower() in got and not got[key.strip().lower()]:
            got[key.strip().lower()] = value.strip()
    return got["name"], got["version"]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_info_version(root: Path, engine: str) -> Optional[tuple[str, Path]]:
    """(version, its METADATA) of the engine's one dist-info in ``root``; None with none.
    Two that disagree (an upgrade that stopped half-way, two pip runs at once) are a
    TargetError: which one the code belongs to cannot be told, and judging by either could
    apply the wrong recipes."""
    dist = ENGINES[engine].dist
    found: dict[str, Path] = {}
    dirs = {*root.glob(f"{dist.replace('-', '_')}-*.dist-info"), *root.glob(f"{dist}-*.dist-info")}
    for d in sorted(dirs):
        name, version = _metadata(d)
        if version and (not name or _canonical(name) == _canonical(dist)):
            found.setdefault(version, d / "METADATA")
    if len(found) > 1:
        (v1, p1), (v2, p2) = sorted(found.items(), key=lambda kv: kv[1])[:2]
        more = f" and {len(found) - 2} more" if len(found) > 2 else ""
        raise TargetError(
            f"{root}: holds two {dist} installs, {p1.parent.name} ({v1}) and {p2.parent.name} ({v2}){more};"
            " patchkit cannot tell which one the code is",
            f"reinstall the one you run (`pip install --force-reinstall {dist}==VERSION` removes the other's"
            " dist-info), or delete the stale .dist-info directory",
        )
    return next(iter(found.items()), None)


def _read_version(root: Path, engine: str, layout: str) -> Optional[tuple[str, Path]]:
    """(version, the file that says it), or None when nothing does."""
    if layout == "package":
        got = _dist_info_version(root, engine)
        if got is not None:
            return got
    pkg_dir = root / (ENGINES[engine].layouts[layout][0][1])
    for rel, pattern in (
        ("_version.py", r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]"""),
        ("_build_meta.py", r"""^__version__\s*=\s*['"]([^'"]+)['"]"""),
        ("version.py", r"""^__version__\s*=\s*['"]([^'"]+)['"]"""),
    ):
        text = _read_text(pkg_dir / rel)
        if text is not None:
            m = re.search(pattern, text, re.M)
            if m:
                return m.group(1), pkg_dir / rel
    vt = _read_text(root / "version.txt") if layout == "git" else None
    return (vt.strip(), root / "version.txt") if vt is not None and vt.strip() else None


# The usual release forms (0.5.9, 0.7.4rc1, 0.5.10.post1.dev3+cu128): each a PEP 440 version,
# so the common case needs no import of packaging (``status`` reads versions at start-up).
_PLAIN_VERSION = re.compile(
    r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?", re.I | re.A
)


def _checked_version(found: Optional[tuple[str, Path]]) -> Optional[str]:
    """The version, if it is one (PEP 440); one that is not is a TargetError naming the file:
    every version range would read it as out of range, which is not what is wrong."""
    if found is None:
        return None
    version, where = found
    if _PLAIN_VERSION.fullmatch(version):
        return version
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        shown = version if len(version) <= 80 else version[:80] + "..."
        raise TargetError(
            f"{where}: {shown!r} is not a version (PEP 440), so no recipe's version range can be judged",
            "the install's metadata is damaged; reinstall the package (pip install --force-reinstall), or fix the file",
        ) from None
    return version


def open_target(engine: str, path: str | os.PathLike) -> Target:
    if engine not in ENGINES:
        raise TargetError(f"unknown engine {engine!r}", f"engines: {', '.join(ENGINES)}")
    root = Path(path).expanduser()
    try:
        return _open(engine, root)
    except OSError as e:  # a directory of the tree this user may not read, a symlink loop...
        where = e.filename or root
        raise TargetError(
            f"{where}: cannot be read ({e.strerror or e}) while opening the {engine} target {root}",
            "fix its permissions (this user must read the whole tree), or patch a copy you own",
        ) from None


def _open(engine: str, root: Path) -> Target:
    if not root.exists():
        raise TargetError(
            f"{root}: target for {engine} does not exist",
            f"pass --target {engine}=DIR with an existing tree, or run `patchkit sync`",
        )
    if not root.is_dir():
        raise TargetError(
            f"{root}: target for {engine} is not a directory",
            f"point --target {engine}= at the directory holding the tree"
            " (a git checkout, an unpacked wheel, site-packages)",
        )
    root = root.resolve()
    info = ENGINES[engine]
    if (root / info.git_marker).exists() and (root / info.layouts["git"][0][1] / "__init__.py").is_file():
        layout = "git"
    elif (root / info.package / "__init__.py").is_file():
        layout = "package"
    else:
        looked = ", ".join(sorted({pp for lay in info.layouts.values() for _, pp in lay[:1]}))
        raise TargetError(
            f"{root}: no {engine} sources found (looked for {looked})",
            f"point --target {engine}= at a git checkout of {engine}, an unpacked wheel, or site-packages",
        )
    version = _checked_version(_read_version(root, engine, layout))
    return Target(engine=engine, root=root, layout=layout, version=version)


def parse_target_arg(value: str) -> tuple[str, str]:
    if "=" not in value:
        raise TargetError(
            f"--target {value!r}: expected ENGINE=PATH",
            f"e.g. --target sglang=./sglang-checkout (engines: {', '.join(ENGINES)})",
        )
    engine, path = value.split("=", 1)
    return engine.strip(), path
