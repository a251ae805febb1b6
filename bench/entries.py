"""How many times a command enters one module from the others (issue 22: "the apply path
enters the judge's module a handful of times").

A call counts when its callee's code is in the module and its caller's frame is not: one
crossing into the module.  The command runs in this process (patchkit.cli.main), under
``sys.setprofile``; calls inside the module, and calls from it outward, do not count.

    .venv/bin/python bench/entries.py [--module patchkit/core/judge.py] -- apply sm120 --dry-run -t ... -t ...

Prints the total, the number of call sites, and each (caller -> callee) with its count.
The trees default to copies of the cached SGLang 0.5.9 / FlashInfer 0.6.3 releases
(bench/run.py's fresh_pair), made fresh in a temporary directory.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def count(module_file: str, argv: list[str]) -> collections.Counter:
    """(caller, callee) -> calls that cross into ``module_file`` while ``patchkit argv`` runs."""
    from patchkit import cli as main

    target = str(Path(module_file).resolve())
    hits: collections.Counter = collections.Counter()

    def prof(frame, event, arg):
        if event != "call" or frame.f_code.co_filename != target:
            return
        back = frame.f_back
        if back is None or back.f_code.co_filename == target:
            return
        caller = f"{Path(back.f_code.co_filename).name}:{back.f_code.co_name}"
        hits[(caller, frame.f_code.co_name)] += 1

    out, err = io.StringIO(), io.StringIO()
    sys.setprofile(prof)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main.main(argv)
            except SystemExit:
                pass
    finally:
        sys.setprofile(None)
    return hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", default="patchkit/core/judge.py")
    ap.add_argument("args", nargs="*", help="the patchkit command (default: apply sm120 --dry-run on fresh trees)")
    ns = ap.parse_args()
    args = ns.args
    with tempfile.TemporaryDirectory() as tmp:
        if not args:
            from bench.run import fresh_pair

            sg, fi = fresh_pair(Path(tmp))
            args = ["apply", "sm120", "--dry-run", "-t", f"sglang={sg}", "-t", f"flashinfer={fi}"]
        hits = count(str(HERE.parent / ns.module), args)
    print(f"{sum(hits.values())} entries into {ns.module} from {len(hits)} call sites ({' '.join(args[:3])} ...)")
    for (caller, callee), n in hits.most_common():
        print(f"  {n:4d}  {caller} -> {callee}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
