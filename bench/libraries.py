"""Maintained libraries against patchkit's own code, measured (docs/development.md, "Design notes: libraries").

Each row times the same job both ways, in one process, best of N runs, plus each side's
import cost in a fresh interpreter (what a CLI start-up pays).  The libraries are not
patchkit's dependencies, so this runs in a scratch venv:

    python -m venv /tmp/libs && /tmp/libs/bin/pip install -e . installer wheel pypi-simple unearth \
        remotezip fsspec aiohttp
    /tmp/libs/bin/python bench/libraries.py          # needs a cached sglang 0.5.9 wheel (make demo)

It prints a Markdown table.  The decisions it backs are in docs/development.md.
"""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

N = 7


def best(fn, n: int = N) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def import_ms(stmt: str, n: int = 5) -> float:
    """Wall time of ``python -c stmt`` minus ``python -c pass`` (median of n)."""

    def run(s):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", s], check=True)
        return time.perf_counter() - t0

    base = statistics.median(run("pass") for _ in range(n))
    return 1000 * max(0.0, statistics.median(run(stmt) for _ in range(n)) - base)


def record_row(wheel: Path) -> tuple:
    from installer.records import parse_record_file

    from patchkit.core import record

    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        data = z.read(name)
    ours = best(lambda: record.parse(data))
    theirs = best(lambda: list(parse_record_file(io.StringIO(data.decode()))))
    rows = len(record.parse(data))
    assert rows == len(list(parse_record_file(io.StringIO(data.decode()))))
    return (
        f"RECORD: parse sglang 0.5.9's ({rows} rows)",
        f"patchkit/core/record.py (csv): {ours * 1000:.1f} ms,"
        f" import {import_ms('import patchkit.core.record'):.0f} ms",
        f"installer.records: {theirs * 1000:.1f} ms, import {import_ms('import installer.records'):.0f} ms",
    )


def wheel_row(wheel: Path) -> tuple:
    from wheel.wheelfile import WheelFile

    from patchkit.fleet import wheel as pk_wheel

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tree)
        dist_info = next(p.name for p in tree.glob("*.dist-info"))
        out1 = Path(tmp) / "a" / wheel.name
        out2 = Path(tmp) / "b" / wheel.name
        out1.parent.mkdir()
        out2.parent.mkdir()

        def ours():
            pk_wheel.write_wheel(tree, dist_info, out1, set())

        def theirs():
            with WheelFile(out2, "w") as wf:
                wf.write_files(str(tree))

        t_ours, t_theirs = best(ours, 3), best(theirs, 3)
        first = out1.read_bytes()
        ours()
        same = first == out1.read_bytes()
        theirs()
        again = out2.read_bytes()
        theirs()
        same_theirs = again == out2.read_bytes()
        return (
            "wheel: write sglang 0.5.9 back to a .whl",
            f"patchkit/fleet/wheel.py (zipfile): {t_ours:.2f} s, reproducible: {same}",
            f"wheel.wheelfile.WheelFile: {t_theirs:.2f} s, reproducible: {same_theirs},"
            f" import {import_ms('import wheel.wheelfile'):.0f} ms",
        )


def git_row() -> tuple:
    import git

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["git", "init", "-q", tmp], check=True)
        subprocess.run(["git", "-C", tmp, "commit", "-q", "--allow-empty", "-m", "x"], check=True,
                       env={"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
                            "GIT_COMMITTER_EMAIL": "b@b", "PATH": "/usr/bin:/bin"})  # fmt: skip
        t_sub = best(lambda: subprocess.run(["git", "-C", tmp, "rev-parse", "HEAD"], capture_output=True, check=True))
        t_gp = best(lambda: git.Repo(tmp).head.commit.hexsha)
    return (
        "git: read HEAD of a repository",
        f"subprocess git: {t_sub * 1000:.1f} ms, import 0 ms",
        f"gitpython: {t_gp * 1000:.1f} ms, import {import_ms('import git'):.0f} ms",
    )


def index_row() -> tuple:
    from patchkit.upstream import fetch

    def ours():
        return fetch.project_files("sglang")

    def pypi_simple_list():
        from pypi_simple import PyPISimple

        with PyPISimple() as c:
            return c.get_project_page("sglang").packages

    t_ours, t_ps = best(ours, 3), best(pypi_simple_list, 3)
    return (
        "index: list sglang's files on PyPI (PEP 691)",
        f"patchkit/upstream/fetch.py (urllib): {t_ours:.2f} s,"
        f" import {import_ms('import patchkit.upstream.fetch'):.0f} ms",
        f"pypi-simple: {t_ps:.2f} s, import {import_ms('import pypi_simple'):.0f} ms;"
        f" unearth import {import_ms('import unearth'):.0f} ms",
    )


def recipe_row() -> tuple:
    from patchkit.core import recipe

    files = sorted(Path(__file__).resolve().parents[1].joinpath("recipes").glob("*.toml"))
    t = best(lambda: [recipe.load_recipe(f) for f in files])
    return (
        f"recipes: load and check the {len(files)} shipped recipes",
        f"patchkit/core/recipe.py: {t * 1000:.1f} ms, import {import_ms('import patchkit.core.recipe'):.0f} ms",
        f"pydantic/msgspec: checks types, but tomllib gives no line numbers to point at;"
        f" pydantic import {import_ms('import pydantic'):.0f} ms",
    )


# The sm120 bundle's SGLang files: what a judge of one release reads from its wheel.
MEMBERS = (
    "sglang/srt/model_executor/model_runner.py",
    "sglang/srt/layers/communicator.py",
    "sglang/srt/server_args.py",
    "sglang/srt/utils/common.py",
)


def lazy_zip_row(wheel: Path, latency: float = 0.02, rate: float = 20e6) -> tuple:
    """Four members of a wheel on an index on 127.0.0.1 paced as a link (``latency`` s a
    request, ``rate`` bytes/s): patchkit's reader (lazywheel.RangeFile under zipfile, members
    by one range each) against remotezip and fsspec's HTTP file system under zipfile.  Each
    side opens the wheel afresh (its central directory) and reads the same members; the
    index counts requests and bytes."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from patchkit.upstream import lazywheel
    from tests.rangeserver import RangeIndex

    idx = RangeIndex({"sglang": [wheel]}, latency=latency, rate=rate)
    url = f"http://127.0.0.1:{idx.port}/files/{wheel.name}"
    try:
        with zipfile.ZipFile(wheel) as z:
            want = {n: z.read(n) for n in MEMBERS}

        def ours():  # as LazyWheel._range_read: each member's span [offset, next offset) in one range
            rf = lazywheel.RangeFile(url)
            z = zipfile.ZipFile(rf)
            infos = sorted(z.infolist(), key=lambda i: i.header_offset)
            ends = {
                i.filename: (infos[k + 1].header_offset if k + 1 < len(infos) else z.start_dir)
                for k, i in enumerate(infos)
            }
            got = {}
            for n in MEMBERS:
                rf.fetch(z.getinfo(n).header_offset, ends[n])
                got[n] = z.read(n)
            assert got == want

        def remotezip_():
            from remotezip import RemoteZip

            with RemoteZip(url) as z:
                assert {n: z.read(n) for n in MEMBERS} == want

        def fsspec_():
            import fsspec

            with fsspec.open(url, "rb", block_size=1 << 16) as f, zipfile.ZipFile(f) as z:
                assert {n: z.read(n) for n in MEMBERS} == want

        out = []
        for name, fn in (("patchkit", ours), ("remotezip", remotezip_), ("fsspec", fsspec_)):
            idx.reset()
            fn()
            reqs, got = idx.requests, idx.bytes
            t = best(fn, 3)
            out.append(f"{name}: {t:.2f} s, {reqs} requests, {got / 1e6:.2f} MB")
    finally:
        idx.close()
    return (
        f"wheel by ranges: {len(MEMBERS)} members of {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB),"
        f" link {latency * 1000:.0f} ms, {rate / 1e6:.0f} MB/s",
        f"patchkit/upstream/lazywheel.py ({out[0]}), import {import_ms('import patchkit.upstream.lazywheel'):.0f} ms",
        f"{out[1]}, import {import_ms('import remotezip'):.0f} ms; {out[2]},"
        f" import {import_ms('import fsspec.implementations.http'):.0f} ms",
    )


def main() -> None:
    from patchkit.upstream import fetch

    wheel = fetch.fetch_wheel("sglang", "0.5.9")
    rows = [record_row(wheel), wheel_row(wheel), lazy_zip_row(wheel), git_row(), index_row(), recipe_row()]
    print("| job | patchkit's code | the library |\n|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
