"""Compiling translation units pristine and patched with nvcc, in parallel, cached by content.

No GPU is needed: nvcc compiles device code for any arch (``sm_120a`` on an H200 or a
laptop).  Each unit is compiled to PTX (``-ptx``), which is what the kernels' instructions
are counted on (patchkit/verify/ptx.py).

- **Sources.** A variant (pristine or patched) is the target's tree with the edited files'
  bytes swapped in.  It is built in a *mirror*: a temporary directory holding a symlink per
  file of the tree's ``include/`` and ``csrc/`` and the edited files as real files, so that
  ``#include "../x.cuh"`` resolves exactly as in the tree.  Third-party headers (spdlog,
  cutlass) and the tvm-ffi headers of the ``apache-tvm-ffi`` package are included from
  where they are installed; CUDA's from the toolkit.
- **Units.** Those that include an edited file, directly or transitively (``#include`` read
  in the tree), and the sources of the FlashInfer JIT modules the recipe names.
- **Cache.** A build is keyed by the sha256 of nvcc's ``--version``, the flags, the arch, and
  the bytes of every file the unit includes (found by the same scan); its PTX (gzipped) and
  its figures live in ``~/.cache/patchkit/verify/``.  A pristine and a patched build with the
  same key (a unit no edit reaches) are one build.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from patchkit.base import paths
from patchkit.base.errors import PatchkitError
from patchkit.base.target import Target
from patchkit.verify import ptx

# Close to FlashInfer's JIT (flashinfer/jit/core.py gen_jit_spec and cpp_ext.py, 0.6.x),
# without -static-global-template-stub and --threads (they change no device code).
BASE_FLAGS = (
    "-std=c++17",
    "-O3",
    "--expt-relaxed-constexpr",
    "-DNDEBUG",
    "-use_fast_math",
    "-DFLASHINFER_ENABLE_F16",
    "-DFLASHINFER_ENABLE_BF16",
    "-DFLASHINFER_ENABLE_FP8_E4M3",
    "-DFLASHINFER_ENABLE_FP8_E5M2",
)
COMMON_ARCH_FLAGS = ("-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1")  # sm90a and newer
ARCH_FLAGS = {"90a": ("-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",)}

# Logical roots patchkit mirrors (recipes edit files there), and third-party include dirs
# per layout, relative to the target root.
MIRRORED = ("include/", "csrc/")
THIRD_PARTY = {
    "package": (
        "flashinfer/data/spdlog/include",
        "flashinfer/data/cutlass/include",
        "flashinfer/data/cutlass/tools/util/include",
    ),
    "git": ("3rdparty/spdlog/include", "3rdparty/cutlass/include", "3rdparty/cutlass/tools/util/include"),
}
FALLBACK_NVCC = (Path("/usr/local/cuda/bin/nvcc"),)
UNIT_SUFFIXES = (".cu",)
C_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".inc", ".inl")
_RUNNING: set = set()  # nvcc processes under way, killed if the run is interrupted
_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set under _LOCK when a run is interrupted: no nvcc starts after it
DEFAULT_TIMEOUT = 1800  # seconds per nvcc run: FlashInfer's largest comm unit takes ~4 min on one loaded core
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


# -- the toolchain ----------------------------------------------------------------------------


NO_NVCC_HINT = "install the CUDA toolkit (nvcc), set CUDA_HOME to it, or pass --nvcc PATH"


def find_nvcc(explicit: Optional[str] = None) -> Path:
    """nvcc: ``--nvcc``, else ``$CUDA_HOME/bin/nvcc``, else on PATH, else /usr/local/cuda.
    None of them: a PatchkitError (exit 2) saying where it looked."""
    if explicit:
        p = Path(explicit).expanduser()
        if p.is_dir():
            p = p / "bin" / "nvcc" if (p / "bin" / "nvcc").exists() else p / "nvcc"
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise PatchkitError(f"--nvcc {explicit}: no executable nvcc there", NO_NVCC_HINT)
    home = paths.env_value("CUDA_HOME")
    if home:
        p = Path(home) / "bin" / "nvcc"
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise PatchkitError(f"verify --build: CUDA_HOME={home} holds no bin/nvcc", NO_NVCC_HINT)
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    for p in FALLBACK_NVCC:
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise PatchkitError(
        "verify --build needs nvcc, and there is none (not on PATH, CUDA_HOME unset, no "
        + ", ".join(str(p) for p in FALLBACK_NVCC)
        + ")",
        NO_NVCC_HINT,
    )


def nvcc_version(nvcc: Path) -> str:
    """nvcc's ``--version`` text (part of every cache key)."""
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
    if out.returncode != 0:
        raise PatchkitError(f"{nvcc} --version failed (exit {out.returncode})", NO_NVCC_HINT)
    return out.stdout.strip()


TVM_FFI_HINT = (
    "FlashInfer's sources include the tvm-ffi headers of the apache-tvm-ffi package: "
    "pip install 'apache-tvm-ffi>=0.1.6,<0.2' beside FlashInfer or into patchkit's environment"
)


def find_tvm_ffi(fi: Target, say=lambda s: None) -> Path:
    """tvm-ffi's headers (``tvm_ffi/include``) of the installed ``apache-tvm-ffi``: beside the
    FlashInfer target (the same site-packages) or installed for this Python, found from
    its distribution metadata (nothing is imported); else the release FlashInfer requires,
    from the package index into patchkit's cache (patchkit/verify/tvmffi.py)."""
    beside = fi.root / "tvm_ffi" / "include"
    if (beside / "tvm" / "ffi").is_dir():
        return beside
    from importlib import metadata

    try:
        dist = metadata.distribution("apache-tvm-ffi")
        inc = Path(str(dist.locate_file("tvm_ffi/include")))
        if (inc / "tvm" / "ffi").is_dir():
            return inc
    except metadata.PackageNotFoundError:
        pass
    from patchkit.base.errors import FetchError
    from patchkit.verify import tvmffi

    try:
        return tvmffi.fetch_headers(fi.root, say)
    except FetchError as e:
        raise PatchkitError(
            f"verify --build: the tvm-ffi headers are missing (no apache-tvm-ffi beside {fi.root}, none installed for"
            f" this Python, and its wheel could not be fetched: {e.message})",
            TVM_FFI_HINT,
        ) from None


def flags_for(arch: str, module_flags: list[str]) -> list[str]:
    digits = int("".join(c for c in arch if c.isdigit()))
    extra = list(COMMON_ARCH_FLAGS) if digits >= 90 else []
    return [*BASE_FLAGS, *module_flags, *extra, *ARCH_FLAGS.get(arch, ())]


# -- the tree, its includes and its variants --------------------------------------------------


class Tree:
    """A FlashInfer target's C++ as nvcc sees it: include dirs, and a scan of ``#include``
    (cached per file and variant) to find a unit's closure."""

    def __init__(self, fi: Target, tvm_ffi: Optional[Path]) -> None:
        self.target = fi
        self.mirrored = [fi.root / fi.relpath(lp).rstrip("/") for lp in MIRRORED]
        self.third = [fi.root / d for d in THIRD_PARTY[fi.layout] if (fi.root / d).is_dir()]
        self.external = [*self.third, *([tvm_ffi] if tvm_ffi else [])]
        self._includes: dict[tuple, list] = {}
        self._digests: dict[Path, str] = {}

    def rel(self, p: Path) -> str:
        return p.relative_to(self.target.root).as_posix()

    def logical(self, p: Path) -> Optional[str]:
        for lp, d in zip(MIRRORED, self.mirrored, strict=True):
            if p == d or d in p.parents:
                return lp + p.relative_to(d).as_posix()
        return None

    def units(self) -> list[Path]:
        """Every translation unit under csrc/."""
        csrc = self.mirrored[1]
        return sorted(p for p in csrc.rglob("*") if p.suffix in UNIT_SUFFIXES and p.is_file())

    def _read(self, p: Path, over: dict) -> Optional[bytes]:
        if p in over:
            return over[p]
        try:
            return p.read_bytes()
        except OSError:
            return None

    def includes(self, p: Path, over: dict, external: bool) -> list[Path]:
        """The files ``p`` includes that exist here (in the tree, and with ``external`` in
        third-party and tvm-ffi dirs too)."""
        key = (p, id(over) if p in over else 0, external)
        if key in self._includes:
            return self._includes[key]
        data = self._read(p, over) or b""
        dirs = self.mirrored + (self.external if external else [])
        out = []
        for kind, name in _INCLUDE.findall(data):
            name = name.decode("utf-8", "replace").strip()
            cands = ([p.parent] if kind == b'"' else []) + dirs
            for d in cands:
                q = Path(os.path.normpath(d / name))
                if q.is_file():
                    if external or any(q == m or m in q.parents for m in self.mirrored):
                        out.append(q)
                    break
        self._includes[key] = out
        return out

    def closure(self, unit: Path, over: dict, external: bool = True) -> list[Path]:
        seen, stack = {unit}, [unit]
        while stack:
            for q in self.includes(stack.pop(), over, external):
                if q not in seen:
                    seen.add(q)
                    stack.append(q)
        return sorted(seen)

    def digest(self, files: list[Path], over: dict) -> str:
        h = hashlib.sha256()
        for p in files:
            if p in over:
                d = hashlib.sha256(over[p]).hexdigest()
            else:
                d = self._digests.get(p)
                if d is None:
                    d = self._digests[p] = hashlib.sha256(self._read(p, over) or b"").hexdigest()
            h.update(f"{self._name(p)}\0{d}\n".encode())
        return h.hexdigest()

    def _name(self, p: Path) -> str:
        """A file as a cache key names it: relative to the target root when inside it, so
        that a copy of the same tree elsewhere answers from the same builds."""
        root = self.target.root
        return p.relative_to(root).as_posix() if root in p.parents else str(p)

    def mirror(self, dest: Path, over: dict) -> None:
        """``dest``: the tree's include/ and csrc/ as symlinks per file, the edited files
        (``over``) as real files, at the same paths relative to the target root."""
        for d in self.mirrored:
            for dirpath, _, files in os.walk(d):
                rel = Path(dirpath).relative_to(self.target.root)
                (dest / rel).mkdir(parents=True, exist_ok=True)
                for name in files:
                    src = Path(dirpath) / name
                    if src in over:
                        (dest / rel / name).write_bytes(over[src])
                    else:
                        os.symlink(src, dest / rel / name)

    def include_flags(self, mirror: Path) -> list[str]:
        return [f"-I{mirror / self.rel(d)}" for d in self.mirrored] + [f"-I{d}" for d in self.external]


# -- builds -----------------------------------------------------------------------------------


@dataclass
class Job:
    unit: Path  # in the tree
    arch: str
    variant: str  # "pristine" | "patched"
    flags: list[str]
    key: str


@dataclass
class Result:
    built: bool
    error: Optional[str]
    seconds: float
    cached: bool
    summary: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "built": self.built,
            "error": self.error,
            "seconds": round(self.seconds, 1),
            "cached": self.cached,
            **self.summary,
        }


def key_for(nvcc_id: str, unit_rel: str, arch: str, flags: list[str], content: str) -> str:
    blob = json.dumps([nvcc_id, unit_rel, arch, flags, content])
    return hashlib.sha256(blob.encode()).hexdigest()


def first_error(stderr: str) -> str:
    """nvcc's first error line (``x.cuh(12): error: ...``, ``fatal error: ...``), else its last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"\berror\b|\bfatal\b", ln) and "warning" not in ln.split("error")[0]:
            return ln[:500]
    return (lines[-1] if lines else "nvcc failed without a message")[:500]


def _tag(count: tuple[str, ...]) -> str:
    """A summary's key in a cache entry: what it counts, and how the PTX was read (a
    summary read the old way is read again from the cached PTX)."""
    return f"{ptx.READER}:" + ",".join(count)


ENTRY_LIMIT = 64 << 20  # bytes of a cached build's figures
PTX_LIMIT = 1 << 30  # bytes of a cached build's PTX, gzipped and unpacked


def _shapes() -> tuple[dict, dict]:
    from patchkit.base import shape

    family = {"name": str, "kernels": int, "empty": int, "instructions": [int], "counts": {str: int}}
    summary = {"kernels": int, "empty": int, "counts": {str: int}, "families": [family]}
    return {"built": bool, "error": (str, None), "seconds": shape.NUMBER}, {"summaries": {str: summary}}


def _entry(key: str) -> Optional[dict]:
    """A build's cached figures, or None: patchkit's store misses it (patchkit/base/store.py),
    or it is not the shape ``_store`` writes (built again, replaced)."""
    from patchkit.base import shape, store

    head, built = _shapes()
    entry = store.get_json("verify/builds", key, head, limit=ENTRY_LIMIT)
    return None if entry is None or (entry["built"] and not shape.fits(entry, built)) else entry


def _ptx(key: str) -> Optional[str]:
    """A build's cached PTX, or None (as ``_entry``; a gzip stream that is damaged or
    unpacks past PTX_LIMIT is a miss too)."""
    import io
    import zlib

    from patchkit.base import store

    data = store.get("verify/ptx", key, limit=PTX_LIMIT)
    if data is None:
        return None
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as z:
            text = z.read(PTX_LIMIT + 1)
    except (OSError, EOFError, zlib.error):  # what gzip says of a stream it cannot unpack
        return None
    return text.decode("utf-8", "replace") if len(text) <= PTX_LIMIT else None


def _cached(key: str, count: tuple[str, ...]) -> Optional[Result]:
    data = _entry(key)
    if data is None:
        return None
    tag = _tag(count)
    if not data["built"]:
        return Result(False, data["error"], data["seconds"], True)
    if tag not in data["summaries"]:
        text = _ptx(key)
        if text is None:
            return None
        data["summaries"][tag] = ptx.summary(ptx.kernels(text, count), count)
        _store(key, data)
    return Result(True, None, data["seconds"], True, data["summaries"][tag])


def _store(key: str, data: dict, ptx_text: Optional[str] = None) -> None:
    """A build's figures (and PTX) in patchkit's store."""
    from patchkit.base import store

    if ptx_text is not None:
        store.put("verify/ptx", key, gzip.compress(ptx_text.encode(), 6))
    store.put_json("verify/builds", key, data)


def compile_one(nvcc: Path, job: Job, mirror: Path, tree: Tree, count: tuple[str, ...], timeout: float) -> Result:
    """One nvcc run: the unit to PTX for one arch, in the mirror of its variant.  A run past
    ``timeout`` seconds is killed with its process group and reported as a failed build."""
    with tempfile.TemporaryDirectory(prefix="patchkit-ptx-") as tmp:
        out = Path(tmp) / "unit.ptx"
        cmd = [
            str(nvcc),
            *job.flags,
            *tree.include_flags(mirror),
            f"-arch=sm_{job.arch}",
            "-ptx",
            "-o",
            str(out),
            str(mirror / tree.rel(job.unit)),
        ]
        t0 = time.monotonic()
        with _LOCK:  # started and registered as one step, so an interrupt cannot fall between them
            if _STOPPING.is_set():
                raise KeyboardInterrupt
            proc = subprocess.Popen(
                cmd,
                cwd=mirror,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,  # its own process group: cicc and ptxas go with it when killed
            )
            _RUNNING.add(proc)
        timed_out = False
        try:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill(proc)
                stdout, stderr = proc.communicate()
        finally:
            with _LOCK:
                _RUNNING.discard(proc)
        seconds = time.monotonic() - t0
        if _STOPPING.is_set():  # killed by an interrupt: not a result, and never cached as one
            raise KeyboardInterrupt
        if timed_out:  # not cached: a slower machine or a longer --nvcc-timeout may finish it
            said = f"nvcc ran past {timeout:g} s and was killed (raise it with --nvcc-timeout SECONDS)"
            return Result(False, said, seconds, False)
        if proc.returncode != 0 or not out.is_file():
            said = first_error(stderr + stdout).replace(f"{mirror}{os.sep}", "")  # tree-relative paths
            data = {"built": False, "error": said, "seconds": seconds}
            _store(job.key, data)
            return Result(False, data["error"], seconds, False)
        text = out.read_text("utf-8", "replace")
    summary = ptx.summary(ptx.kernels(text, count), count)
    _store(job.key, {"built": True, "error": None, "seconds": seconds, "summaries": {_tag(count): summary}}, text)
    return Result(True, None, seconds, False, summary)


PROGRESS_EVERY = 30.0  # seconds between progress lines while nvcc runs and none finishes


def run(
    nvcc: Path,
    tree: Tree,
    jobs: list[Job],
    variants: dict[str, dict],
    count: tuple[str, ...],
    workers: int,
    progress=lambda s: None,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, Result]:
    """Every job's result by key: from the cache, else compiled (distinct keys only, on
    ``workers`` nvcc processes at once)."""
    results: dict[str, Result] = {}
    todo: dict[str, Job] = {}
    for j in jobs:
        if j.key in results or j.key in todo:
            continue
        hit = _cached(j.key, count)
        if hit is not None:
            results[j.key] = hit
        else:
            todo[j.key] = j
    if not todo:
        return results
    with tempfile.TemporaryDirectory(prefix="patchkit-verify-") as tmp:
        mirrors = {}
        for v in sorted({j.variant for j in todo.values()}):
            mirrors[v] = Path(tmp) / v
            tree.mirror(mirrors[v], variants[v])
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers))
        try:
            futs = {
                pool.submit(compile_one, nvcc, j, mirrors[j.variant], tree, count, timeout): j for j in todo.values()
            }
            progress(
                f"{len(todo)} nvcc run(s) to make, {min(workers, len(todo))} at once ({len(results)} from the cache)"
            )
            t0, pending = time.monotonic(), set(futs)
            while pending:
                # A line at least every PROGRESS_EVERY seconds: one nvcc run takes minutes on 2 cores.
                done, pending = concurrent.futures.wait(
                    pending, timeout=PROGRESS_EVERY, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for fut in done:
                    j = futs[fut]
                    results[j.key] = r = fut.result()
                    said = "built" if r.built else "FAILED"
                    progress(
                        f"{tree.rel(j.unit)} sm_{j.arch} {j.variant}: {said} in {r.seconds:.0f} s "
                        f"({len(futs) - len(pending)}/{len(futs)})"
                    )
                if not done:
                    progress(
                        f"{len(futs) - len(pending)}/{len(futs)} nvcc run(s) done, {len(_RUNNING)} running, "
                        f"{time.monotonic() - t0:.0f} s so far"
                    )
        except BaseException:  # Ctrl-C, or a bug: no nvcc is left running behind us
            with _LOCK:
                _STOPPING.set()  # a worker about to start nvcc sees this and starts none
                for proc in list(_RUNNING):
                    _kill(proc)
            # Every worker now returns at once (its nvcc is dead, or it never started one) and
            # reaps its process, so none outlives the run, not even as a zombie.
            pool.shutdown(wait=True, cancel_futures=True)
            _STOPPING.clear()
            raise
        pool.shutdown()
    return results


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
