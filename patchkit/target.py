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

from patchkit.engines import ENGINES, EngineInfo  # noqa: F401  (the engine table, re-exported)
from patchkit.errors import TargetError

STATE_DIR = ".patchkit"  # patchkit's journal, lock and transaction records, inside a target root
TXN_PENDING = "txn-pending.json"  # in STATE_DIR while a write is under way (patchkit/transaction.py)


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
    from patchkit import regular

    if not path.is_file():  # follows symlinks; a FIFO or a directory is not a version file
        return None
    data = regular.read_file(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def _read_version(root: Path, engine: str, layout: str) -> Optional[str]:
    info = ENGINES[engine]
    if layout == "package":
        norm = info.dist.replace("-", "_")
        for d in sorted(root.glob(f"{norm}-*.dist-info")) + sorted(root.glob(f"{info.dist}-*.dist-info")):
            meta = _read_text(d / "METADATA")
            if meta is not None:
                for line in meta.splitlines():
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break
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
                return m.group(1)
    vt = _read_text(root / "version.txt") if layout == "git" else None
    return (vt.strip() or None) if vt is not None else None


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
    return Target(engine=engine, root=root, layout=layout, version=_read_version(root, engine, layout))


def parse_target_arg(value: str) -> tuple[str, str]:
    if "=" not in value:
        raise TargetError(
            f"--target {value!r}: expected ENGINE=PATH",
            f"e.g. --target sglang=./sglang-checkout (engines: {', '.join(ENGINES)})",
        )
    engine, path = value.split("=", 1)
    return engine.strip(), path
