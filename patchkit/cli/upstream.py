"""Commands on upstream's releases: sync, drift, pin."""

from __future__ import annotations

import sys

import click

from patchkit.cli.base import cli, invocation, names_argument, release_option


@cli.command()
@click.argument("engines", nargs=-1, metavar="[ENGINE]...")
@click.option(
    "--from",
    "source",
    type=click.Choice(["index", "git"]),
    default="index",
    show_default=True,
    help="Fetch release wheels from the package index, or clone the pinned git revision.",
)
@click.option(
    "--mirror",
    multiple=True,
    metavar="ENGINE=PATH",
    help="With --from git: clone from this local mirror instead of the pinned URL.",
)
@click.option(
    "--force", is_flag=True, help="Replace a workspace tree that holds something else (its patches are lost)."
)
@click.pass_context
def sync(ctx, engines, source, mirror, force):
    """Materialise the pinned upstream trees in the workspace (.patchkit/trees/ENGINE).

    Release wheels are downloaded once from the package index (its simple API; no pip
    needed; PATCHKIT_INDEX_URL, else uv's or pip's index URL, else PyPI), checked against
    the sha256 the index lists and the pinned one, cached in ~/.cache/patchkit
    (PATCHKIT_CACHE moves it) and unpacked.  A second sync is instant and works offline.
    """
    from patchkit.commands.sync import sync as run

    sys.exit(run(invocation(ctx).project, tuple(engines), source, tuple(mirror), force))


@cli.command()
@names_argument()
@release_option(
    "--to",
    "to",
    multiple=True,
    metavar="ENGINE==VERSION|ENGINE=PATH",
    help="The release to judge (from the index, cached), or a local pristine tree. Repeatable; engines not named "
    "use their pin.",
)
@release_option(
    "--across", metavar="ENGINE==A..B", help="Judge every release from A to B that the index lists, and print a matrix."
)
@click.option(
    "--bisect",
    is_flag=True,
    help="With --across: find where each recipe changes state, evaluating O(log n) releases per change.",
)
@click.option("--jobs", "-j", type=int, default=2, show_default=True, help="Releases judged in parallel.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (the shape of `status --json`; a matrix with --across)."
)
@click.option(
    "--html",
    metavar="FILE",
    help="With --across: also write the matrix as one self-contained page (recipes and ops x releases, a colour "
    "per state, transitions marked, evidence on hover; works offline).",
)
@click.pass_context
def drift(ctx, names, to, across, bisect, jobs, as_json, html):
    """Before an upgrade: which recipes still apply, which did upstream merge, which moved.

    \b
    Every op is judged on the PRISTINE release: pending (still applies), upstream (the
    release already does it; retire the recipe), moved (found elsewhere: see location),
    missing, ambiguous.  A recipe with an op moved, missing, ambiguous or modified reads so
    itself (apply refuses it), and blocked while a blocker it declares stands.

    \b
    Exit codes:
      0  every recipe judged (on every release, with --across) reads pending, partial,
         upstream, applied, applied? or someone-else: apply would apply it or finds it
         done (a recipe
         whose range leaves the release out is judged on its nearest variant and
         named; apply skips it without --ignore-range)
      1  a recipe reads moved, missing, ambiguous, modified, blocked or interrupted
      2  a usage, recipe or download error
      3  a bug in patchkit

    \b
      patchkit drift --to sglang==0.5.13
      patchkit drift sm120 --across sglang==0.5.9..0.5.23 --bisect
      patchkit drift sm120 --across sglang==0.5.9..0.5.23 --html drift.html
    """
    from patchkit.commands.drift import drift as run

    sys.exit(run(invocation(ctx).project, tuple(names), tuple(to), across, bisect, as_json, jobs, html=html))


@cli.command()
@click.argument("engine")
@click.argument("version")
@click.option(
    "--force", is_flag=True, help="Move the pin even if a recipe would be moved, missing, ambiguous or blocked."
)
@click.pass_context
def pin(ctx, engine, version, force):
    """Move ENGINE's pin in upstream_pins.toml to VERSION, after a drift preflight.

    Only the version, wheel, sha256 and rev lines change; comments and layout survive.
    A pinned engine that VERSION requires exactly (SGLang's FlashInfer, its Requires-Dist)
    moves with it: the preflight judged that pair, and it is the pair the release installs.
    """
    from patchkit.commands.drift import pin as run

    sys.exit(run(invocation(ctx).project, engine, version, force))


@cli.command()
@click.option(
    "--device",
    required=True,
    metavar="CC",
    help="The GPU the gates are judged for: 12.0, sm120, sm_120a; with its CUDA toolkit, 12.0@cuda12.9 "
    "(decides CMake branches on CMAKE_CUDA_COMPILER_VERSION).",
)
@click.option(
    "--compare",
    metavar="CC",
    help="The part a gate must admit to be reported (default: the nearest datacenter part below the device: "
    "10.0 for 12.x).",
)
@release_option(
    "--target",
    "-t",
    multiple=True,
    metavar="ENGINE=PATH",
    help="Scan this tree (a checkout, an unpacked wheel, site-packages). Repeat per engine.",
)
@release_option(
    "--to", "to", multiple=True, metavar="ENGINE==VERSION", help="Scan this release (from the index, cached)."
)
@click.option(
    "--python",
    metavar="PATH",
    help="Scan the sglang, flashinfer and vllm this interpreter imports (e.g. a venv's bin/python).",
)
@release_option(
    "--across",
    metavar="ENGINE==A..B",
    help="Scan every release from A to B that the index lists and say, release to release, which gates appeared, "
    "closed, opened or went away (each release's scan is cached).",
)
@click.option("--vendored", is_flag=True, help="Also scan vendored third-party code (CUTLASS, CuTe, 3rdparty...).")
@click.option("--jobs", "-j", type=int, default=0, help="Processes to scan with (default: by the tree's size).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Print every closed gate on its own row (by default, repeats of one condition in one file and function, "
    "or in 3+ files of one directory, are folded into one row that names their count, lines and numbers, after a "
    "summary per component).",
)
@click.option(
    "--html",
    metavar="FILE",
    help="With --across: also write the gates x releases matrix as one self-contained page (a colour per state, "
    "transitions marked, lines and why on hover; works offline).",
)
@click.option(
    "--draft",
    metavar="ID",
    default="",
    help="Write a recipe ID that widens the closed gates (or those of --only), proved before it is written.",
)
@click.option(
    "--only",
    metavar="N,...",
    default="",
    help="With --draft: these gates, by the report's numbers (3,5,7-9) or FILE:LINE.",
)
@click.option(
    "--out", "-o", metavar="DIR", help="With --draft: write ID.toml into DIR (default: the project's recipes/)."
)
@click.pass_context
def gates(ctx, device, compare, target, to, python, across, vendored, jobs, as_json, every, html, draft, only, out):
    """Find every gate that shuts out a GPU: closed for --device, open for --compare.

    \b
    Python conditions, assertions, flags and arguments built from the engine's device
    checks, JIT arch lists (supported_major_versions=[9, 10]), C/C++/CUDA #if guards
    over __CUDA_ARCH__, run-time C++ capability checks (TVM_FFI_ICHECK(major == 10)
    where the function reads its device's capability) and CMake arch lists (vLLM's CMakeLists.txt: a branch on the CUDA
    toolkit is decided by --device 12.0@cuda12.9, else unknown), each with file:line,
    the condition as written, why it is false,
    the enclosing function, what it guards, and the recipes in play that edit it.
    The report opens with a summary per component (closed gates, files, distinct
    conditions; generated code marked), then folds the repeats of one condition in
    one file and function, or in 3+ files of one directory, into one row (count,
    lines, the numbers --only reads); --all prints each.  What
    the evaluator cannot decide is listed apart as unknown, never as closed.  With no
    tree named: the activated venv's (one that holds an engine), else the workspace's.

    \b
    With --across ENGINE==A..B, every release in the range is scanned (cached) and each
    gate is followed by its file, function and condition as written: per release, which
    appeared, closed (was open), opened (still there, no longer closed) or went away.

    \b
    --draft ID writes a recipe that widens the gates numbered in the report
    (--only 3,5): an or-chain gains the device's analog (or-operand), an arch
    list the device (list-element), an #if loses the conjunct that shuts it out
    (text-hunk).  It is proved first (check, every op pending, the planner's
    bytes, every op applied after) and never written over a file.  A gate no op
    kind widens safely is refused, one line each, and nothing is written.
    Opening a gate does not make the code behind it work on the part.

    \b
    Exit codes: 0 no gate closed (with --across: none appeared or closed in the range;
    --draft: written); 1 some are (did; --draft: a gate refused or the proof failed,
    nothing written); 2 usage or target error.

    \b
      patchkit gates --device 12.0 --to sglang==0.5.23
      patchkit gates --device sm120 --compare 9.0 -t flashinfer=.venv/lib/python3.12/site-packages
      patchkit gates --device 12.0 --across flashinfer==0.6.3..0.7.4 --html gates.html
      patchkit gates --device 12.0 --to flashinfer==0.6.3 --draft fi-comm --only flashinfer/jit/comm.py:61
    """
    from patchkit.commands.gates import gates as run

    # no tree named (nor --across): the activated serving venv, as apply and status choose
    inv = invocation(ctx, python, tuple(target) + tuple(to) + ((across,) if across else ()))
    sys.exit(
        run(
            inv,
            device,
            compare,
            tuple(target),
            tuple(to),
            as_json,
            vendored,
            jobs,
            across=across,
            html=html,
            draft=draft,
            only=only,
            out=out,
            every=every,
        )
    )
