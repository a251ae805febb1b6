"""Commands on trees: apply, revert, verify, status, diff."""

from __future__ import annotations

import sys

import click

from patchkit.cli.base import SAVE_HELP, cli, invocation, target_options


@cli.command()
@target_options
@click.option("--dry-run", "-n", is_flag=True, help="Plan and verify every edit, write nothing.")
@click.option(
    "--ignore-range", is_flag=True, help="Apply recipes even where the target's version is outside their range."
)
@click.option(
    "--clear-jit-cache", is_flag=True, help="Delete FlashInfer's cached builds of the kernels whose sources changed."
)
@click.option("--save", is_flag=True, help=SAVE_HELP + " A bundle joins bundles; a recipe leaves exclude.")
@click.pass_context
def apply(ctx, names, target, python, as_json, dry_run, ignore_range, clear_jit_cache, save):
    """Apply recipes and bundles (default: what the profile names).

    Every edit of the invocation is planned in memory across all files and engines and
    checked (post-condition holds, a second apply is a no-op, revert restores the bytes,
    Python still parses) before anything is written; then all files are written
    atomically, or none.  Applying an applied recipe changes nothing.  Recipes the
    profile excludes are left out of the bundles named; a recipe whose rationale
    carries a WARNING has it printed before its edits are written.
    """
    from patchkit.commands.apply import apply_command

    sys.exit(
        apply_command(
            invocation(ctx, python, target), names, target, as_json, dry_run, ignore_range, clear_jit_cache, save
        )
    )


@cli.command()
@target_options
@click.option("--dry-run", "-n", is_flag=True, help="Plan and verify, write nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Revert even if a file changed after patchkit wrote it; forget ops that can no longer be found.",
)
@click.option(
    "--clear-jit-cache", is_flag=True, help="Delete FlashInfer's cached builds of the kernels whose sources changed."
)
@click.option(
    "--save", is_flag=True, help=SAVE_HELP + " A recipe a bundle of the profile brings joins exclude; a bundle leaves."
)
@click.pass_context
def revert(ctx, names, target, python, as_json, dry_run, force, clear_jit_cache, save):
    """Take back recipes patchkit applied, leaving the others (and your own edits) alone.

    Refuses, with exit 1, when a file changed after patchkit wrote it, and says which
    lines; --force reverts anyway.  Code upstream already has is never touched.
    """
    from patchkit.commands.apply import revert_command

    sys.exit(
        revert_command(invocation(ctx, python, target), names, target, as_json, dry_run, force, clear_jit_cache, save)
    )


@cli.command()
@target_options
@click.option("--dry-run", "-n", is_flag=True, help="Say what would be adopted, write nothing.")
@click.pass_context
def adopt(ctx, names, target, python, as_json, dry_run):
    """Take on edits someone else made, as patchkit's own (`someone-else` -> `applied`).

    \b
    patchkit calls an edit its own only where its record proves it: the file as patchkit
    wrote it, or the very bytes at the op's site, in the target's journal or in its
    mirror ($XDG_STATE_HOME/patchkit/journals).  An edit that is there without such a proof,
    and that the pristine release does not have, reads `someone-else`: apply leaves it,
    revert never touches it.  When you know it is patchkit's (its record was lost with the
    target's .patchkit/) or want patchkit to own it, adopt records it; then `revert` takes
    it back like any edit patchkit made.  Only the journal is written; `upstream` and
    `applied?` edits are never adopted.  Exit 0 when no op is left someone else's.

    \b
      patchkit adopt max-running-requests --python ~/venv/bin/python
    """
    from patchkit.commands.apply import adopt_command

    sys.exit(adopt_command(invocation(ctx, python, target), names, target, as_json, dry_run))


@cli.command()
@target_options
@click.option(
    "--build", is_flag=True, help="Also compile the CUDA the edits reach, pristine and patched, with nvcc, to PTX."
)
@click.option("--arch", metavar="LIST", help="Archs to build for, e.g. 120a,90a (default: the recipe's [verify] arch).")
@click.option("--nvcc", metavar="PATH", help="The nvcc to use (default: $CUDA_HOME/bin/nvcc, else nvcc on PATH).")
@click.option("--jobs", "-j", type=int, metavar="N", help="nvcc processes at once (default: every core).")
@click.option(
    "--nvcc-timeout",
    type=float,
    metavar="SECONDS",
    help="Kill an nvcc run (with its process group) after this long and report it (default: 1800).",
)
@click.pass_context
def verify(ctx, names, target, python, as_json, build, arch, nvcc, jobs, nvcc_timeout):
    """Prove recipes on the real toolchain: names resolve, and (--build) the CUDA compiles.

    \b
    Python: apply is planned in memory with every check, the names check among them
    (no edited scope is left with a name the edit made undefined).  --build: the FlashInfer
    translation units that include an edited file, and the sources of the JIT modules the
    recipe names (read from flashinfer/jit/*.py, never imported), compiled pristine and
    patched for each arch, in parallel, cached in ~/.cache/patchkit/verify; per unit and
    kernel family: built or nvcc's first error, empty kernels (a lone `ret`), counts of PTX
    instructions (griddepcontrol, and what [verify] names), wall time.  Exit 1 when a
    patched build fails or an expectation of [verify] does not hold.

    \b
      patchkit verify allreduce-fusion --build --arch 120a,90a
    """
    from patchkit.commands.verify import verify_command

    inv = invocation(ctx, python, target)
    sys.exit(
        verify_command(
            inv, names, target, as_json, build=build, arch=arch, nvcc=nvcc, jobs=jobs, nvcc_timeout=nvcc_timeout
        )
    )


@cli.command()
@target_options
@click.option("--quiet", "-q", is_flag=True, help="Only show ops whose state differs from their recipe's.")
@click.pass_context
def status(ctx, names, target, python, as_json, quiet):
    """Judge recipes against the code as it is now (default: the profile's, else all recipes).

    \b
    States:
      applied      patchkit's edit is there, and patchkit's record proves it wrote it
      someone-else the edit is there, but not patchkit's: someone else made it (see adopt)
      applied?     the edit is there; with no pristine release, who made it is unknown
      upstream     the release already does it: retire the recipe
      pending      the site is found, the edit is not made yet
      partial      some ops applied, some pending
      moved        found, but not in the named file or scope (see where)
      missing      the site is not found
      ambiguous    several candidate sites (listed)
      modified     patchkit wrote it, and the code changed since
      blocked      a blocker the recipe declares stands: its goal is not reached
      skipped      the target's version is outside the recipe's range
      interrupted  a kill stopped an apply/revert mid-write; the next one finishes it
    Exit 0 only if every named recipe is applied, applied?, someone-else or upstream; a recipe the
    profile excludes counts as it should be while none of its edits is in the code.
    """
    from patchkit.commands.status import status_command

    sys.exit(status_command(invocation(ctx, python, target), names, target, as_json, quiet))


@cli.command()
@target_options
@click.option(
    "--applied",
    is_flag=True,
    help="Show what patchkit has applied (the patch to revert), instead of what apply would write.",
)
@click.option("--ignore-range", is_flag=True, help="Include recipes outside their version range.")
@click.pass_context
def diff(ctx, names, target, python, as_json, applied, ignore_range):
    """Print a unified diff of what apply would write; touches nothing.

    Paths are relative to each target's root, so the output applies with
    `git apply` or `patch -p1` there.  --json: one document, the verdicts of
    `status --json` plus each file's diff.
    """
    from patchkit.commands.apply import diff as run

    sys.exit(
        run(invocation(ctx, python, target).options(names, target, as_json), applied=applied, ignore_range=ignore_range)
    )
