"""SIGKILL real `patchkit apply sm120` / `revert sm120` processes at many moments, and check
that the tree, the journal and `status` tell the truth after every kill, and that one
command finishes the job.

Each kill is either at an exact write step (PATCHKIT_TEST_CRASH_AT=N, as SQLite's crash
tests kill at each write) or after a random delay: three attempts in four are exact.  The
moments are sampled anew on every run (the seed is printed; PATCHKIT_KILL_SEED replays
one); PATCHKIT_KILLS sets how many (default 24, about a minute on two cores;
PATCHKIT_KILLS=200 is the full run, 3-4 minutes).  Exact steps are dealt from a shuffled
deck of every write step of `apply` and of `revert` (about 60 each), split between the
workers, so a run never kills twice at one step before it has killed at every other:
24 kills reach about 18 distinct write points, and successive runs, each with a new seed,
cover them all.  The trees hold the real files the sm120 bundle reads, copied from the
pinned SGLang and FlashInfer wheels with their dist-info (so RECORD is kept true too).
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patchkit.core.project import Project
from tests.conftest import PINNED, ROOT

pytestmark = pytest.mark.real

KILLS = int(os.environ.get("PATCHKIT_KILLS", "24"))
WORKERS = 2


def _bundle_files() -> dict[str, set[str]]:
    """engine -> logical files the sm120 bundle reads."""
    out: dict[str, set[str]] = {}
    for r in Project.locate(recipes=str(ROOT / "recipes")).catalog().select(["sm120"]):
        for op in r.ops:
            files = out.setdefault(op.engine, set())
            files.add(op.file)
            files.update(m.file for m in op.markers)
            files.update(op.impl.context_files)
    return out


def _small_tree(src: Path, dest: Path, engine: str, logical: set[str]) -> None:
    """The package's __init__ and version files, its dist-info, and the bundle's files."""
    pkg = "sglang" if engine == "sglang" else "flashinfer"
    keep = {f"{pkg}/__init__.py", f"{pkg}/version.py", f"{pkg}/_build_meta.py", f"{pkg}/_version.py"}
    for lf in logical:
        keep.add(lf if lf.startswith(pkg + "/") else f"flashinfer/data/{lf}")
    for rel in keep:
        p = src / rel
        if p.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dest / rel)
    for di in src.glob("*.dist-info"):
        shutil.copytree(di, dest / di.name)


def _path(engine: str, logical: str) -> str:
    """A logical name's path in the wheel layout."""
    return logical if engine == "sglang" or logical.startswith("flashinfer/") else f"flashinfer/data/{logical}"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".patchkit" not in p.relative_to(root).parts and not p.name.endswith(".patchkit-tmp")
    }


def _pk(args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _run_forked(args, crash_at: int | None = None, kill_after: float | None = None) -> int:
    """Run `patchkit ARGS` as a real process forked from this warm one (no interpreter start
    or imports to pay per run), optionally SIGKILLed at a write step or after a delay.
    Returns its exit code, or -SIGKILL."""
    pid = os.fork()
    if pid == 0:  # the child: the real command, then exit without running the parent's cleanup
        code = 0
        try:
            os.environ.pop("_PATCHKIT_CRASH_SEEN", None)
            if crash_at is not None:
                os.environ["PATCHKIT_TEST_CRASH_AT"] = str(crash_at)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            from patchkit.cli import main

            main(args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            code = 99
        os._exit(code)
    if kill_after is not None:
        deadline = time.monotonic() + kill_after
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _status_in_process(args) -> tuple[int, str, str]:
    """`patchkit status` in this (worker) process: the same code as the command, without
    paying for an interpreter start per check."""
    from patchkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


class Worker:
    def __init__(self, base: Path, release_dir, seed: int, quota: int, index: int = 0) -> None:
        self.rng = random.Random(seed)
        self.quota = quota
        self.index = index  # this worker deals the write steps n with (n - 1) % WORKERS == index
        self.decks: dict[str, list[int]] = {}
        self.modes: list[bool] = []
        self.roots = {}
        for engine, logical in _bundle_files().items():
            dest = base / engine
            _small_tree(release_dir(engine, PINNED[engine]), dest, engine, logical)
            self.roots[engine] = dest
        self.t = [a for e, r in self.roots.items() for a in ("-t", f"{e}={r}")]
        self.kills = 0
        self.exact = 0
        self.finished = 0
        self.problems: list[str] = []
        self.log: list[str] = []

    def snap(self) -> dict:
        return {e: _snapshot(r) for e, r in self.roots.items()}

    def calibrate(self) -> None:
        """Reference trees, the number of write steps of each command, and how long each takes."""
        self.pristine = self.snap()
        self.steps, self.took = {}, {}
        for cmd in ("apply", "revert"):
            env = {**os.environ, "PATCHKIT_TEST_CRASH_AT": "count"}
            t0 = time.monotonic()
            p = _pk([cmd, "sm120", *self.t], env=env)
            self.took[cmd] = time.monotonic() - t0
            assert p.returncode == 0, p.stderr
            self.steps[cmd] = sum(1 for ln in p.stderr.splitlines() if ln.startswith("patchkit-crash-point"))
            assert self.steps[cmd] >= 10, p.stderr
            if cmd == "apply":
                self.applied = self.snap()
        assert self.snap() == self.pristine
        import patchkit.core.planner  # noqa: F401  (warm, as in run())

        for cmd in ("apply", "revert"):  # how long a forked run takes: random kills fall within it
            t0 = time.monotonic()
            assert _run_forked([cmd, "sm120", *self.t]) == 0
            self.took[cmd] = time.monotonic() - t0

    def calibrated_like(self, other: "Worker") -> None:
        """The same reference trees and step counts as ``other``, whose trees are copies of the
        same files: calibrating each worker again would only repeat its runs."""
        assert self.snap() == other.pristine
        self.pristine, self.applied = other.pristine, other.applied
        self.steps, self.took = dict(other.steps), dict(other.took)

    def exact_step(self, cmd: str) -> int:
        """The next write step of ``cmd`` from this worker's shuffled deck (its share of every
        step; dealt anew once each has been used)."""
        deck = self.decks.get(cmd)
        if not deck:
            mine = [n for n in range(1, self.steps[cmd] + 1) if (n - 1) % WORKERS == self.index]
            deck = self.decks[cmd] = mine or list(range(1, self.steps[cmd] + 1))
            self.rng.shuffle(deck)
        return deck.pop()

    def exact_next(self) -> bool:
        """Whether the next kill is at an exact write step: three in every four, in a shuffled order."""
        if not self.modes:
            self.modes = [True, True, True, False]
            self.rng.shuffle(self.modes)
        return self.modes.pop()

    def truth(self, snap) -> dict:
        """(engine, logical file) -> True when it holds the bundle's edits, False when pristine."""
        out = {}
        for engine, files in snap.items():
            for rel, data in files.items():
                if data == self.applied[engine][rel] == self.pristine[engine][rel]:
                    continue
                if data == self.applied[engine][rel]:
                    out[(engine, rel)] = True
                elif data == self.pristine[engine][rel]:
                    out[(engine, rel)] = False
                else:
                    self.problems.append(f"{engine}/{rel}: neither the pristine nor the applied bytes")
        return out

    def check_status(self, what: str) -> None:
        snap = self.snap()
        truth = self.truth(snap)
        code, out, err = _status_in_process(["status", "sm120", "--json", *self.t])
        if code not in (0, 1):
            self.problems.append(f"{what}: status exit {code}: {err.strip()[-300:]}")
            return
        doc = json.loads(out)
        for r in doc["recipes"]:
            for o in r["ops"]:
                root, rel = self.roots[o["engine"]], _path(o["engine"], o["file"])
                has = truth.get((o["engine"], rel))
                want = "applied" if has else "pending"
                if o["state"] != want:
                    self.problems.append(
                        f"{what}: {r['id']} op #{o['index']} reads {o['state']}, but {root.name}/{rel} "
                        f"{'holds' if has else 'does not hold'} the edit"
                    )
            mixed = len({truth.get((o["engine"], _path(o["engine"], o["file"]))) for o in r["ops"]}) > 1
            if mixed and r["state"] != "interrupted":
                self.problems.append(f"{what}: {r['id']} is half-written but reads {r['state']}")

    def run(self) -> None:
        import patchkit.core.planner  # noqa: F401  (warm: each forked run starts with the engine imported)

        cmd = "apply"
        while self.kills < self.quota and len(self.problems) < 5:
            if self.exact_next():
                n = self.exact_step(cmd)
                how = f"{cmd} killed at write step {n}/{self.steps[cmd]}"
                code = _run_forked([cmd, "sm120", *self.t], crash_at=n)
                self.exact += code == -signal.SIGKILL
            else:
                delay = self.rng.uniform(0, self.took[cmd])
                how = f"{cmd} killed after {delay:.3f}s"
                code = _run_forked([cmd, "sm120", *self.t], kill_after=delay)
            if code != -signal.SIGKILL:
                # It ran to the end: the job is finished.
                if code != 0:
                    self.problems.append(f"{how}: not killed, but exit {code}")
                    return
                self.finish(cmd)
                cmd = "revert" if cmd == "apply" else "apply"
                continue
            self.kills += 1
            self.log.append(how)
            self.check_status(how)
            # Half the time the next command is the same one, killed again (recovery killed
            # too); otherwise one uninterrupted run of the same command must finish the job.
            if self.rng.random() < 0.5:
                code = _run_forked([cmd, "sm120", *self.t])
                if code != 0:
                    self.problems.append(f"after {how}: `{cmd}` did not finish the job (exit {code})")
                    return
                self.finish(cmd)
                cmd = "revert" if cmd == "apply" else "apply"

    def finish(self, cmd: str) -> None:
        want = self.applied if cmd == "apply" else self.pristine
        if self.snap() != want:
            self.problems.append(f"after a finished `{cmd}` the tree is not the {cmd}-ed tree")
        for e, root in self.roots.items():
            state = root / ".patchkit"
            left = [p.name for p in state.glob("txn-*")] + [p.name for p in root.rglob("*.patchkit-tmp")]
            if left:
                self.problems.append(f"after a finished `{cmd}`: {e} still has {left}")
            j = json.loads((state / "journal.json").read_text())
            applied = j["engines"].get(e, {}).get("applied", {})
            if (cmd == "apply") != bool(applied):
                self.problems.append(f"after a finished `{cmd}` the {e} journal says {sorted(applied)} are applied")
        self.finished += 1


def _work(w: Worker, queue) -> None:
    try:
        w.run()
    except Exception as e:  # reported to the parent, which fails the test with it
        w.problems.append(f"worker crashed: {type(e).__name__}: {e}")
    queue.put({"problems": w.problems, "kills": w.kills, "exact": w.exact, "finished": w.finished})


def test_sigkill_at_any_moment_leaves_a_truthful_tree_that_one_command_finishes(release_dir, tmp_path):
    seed = int(os.environ.get("PATCHKIT_KILL_SEED", random.randrange(1 << 30)))
    print(f"kill test seed: {seed} (PATCHKIT_KILL_SEED={seed} replays it)")
    workers = [Worker(tmp_path / f"w{i}", release_dir, seed + i, -(-KILLS // WORKERS), i) for i in range(WORKERS)]
    workers[0].calibrate()
    for w in workers[1:]:
        w.calibrated_like(workers[0])
    # One process per worker (forked), so that their in-process status checks run in parallel.
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_work, args=(w, queue)) for w in workers]
    for pr in procs:
        pr.start()
    done = [queue.get(timeout=1800) for _ in procs]
    for pr in procs:
        pr.join()
    problems = [p for d in done for p in d["problems"]]
    kills = sum(d["kills"] for d in done)
    exact = sum(d["exact"] for d in done)
    print(f"{kills} kills ({exact} at exact write steps), {sum(d['finished'] for d in done)} finished runs")
    assert not problems, f"seed {seed}: " + "\n".join(problems[:10])
    assert kills >= KILLS
    assert exact >= KILLS // 2
