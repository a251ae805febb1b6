"""`gates`: every device gate of the trees in play that is closed for a device and open for a
comparison device (patchkit/upstream/gates.py does the scan)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from patchkit.base.errors import PatchkitError
from patchkit.commands import NOT_THERE, OK, Invocation, say
from patchkit.core.goals.device import Device
from patchkit.upstream import gates as G

UNKNOWN_SHOWN = 30  # unknown gates listed per tree in the report for people (--json has all)


def _device(text: str, what: str) -> Device:
    try:
        return Device.parse(text)
    except ValueError as e:
        raise PatchkitError(f"{what} {text!r}: {e}", "e.g. --device 12.0 (or sm120), --compare 10.0") from None


def _trees(inv: Invocation, target: tuple[str, ...], to: tuple[str, ...]) -> list:
    """The targets to scan: --target/--python trees, --to releases, else the workspace's."""
    from patchkit.base.target import ENGINES, open_target, parse_target_arg
    from patchkit.upstream import fetch

    out: dict[str, object] = {}
    if inv.python:
        target = _python_trees(inv, target)
    for arg in target:
        engine, path = parse_target_arg(arg)
        if engine not in ENGINES:
            raise PatchkitError(f"--target {arg!r}: unknown engine {engine!r}", f"engines: {', '.join(ENGINES)}")
        if not path:
            raise PatchkitError(f"--target {arg!r}: no path after '='", f"e.g. --target {engine}=./{engine}")
        if engine in out:
            raise PatchkitError(f"--target {engine}= given twice", "give one tree per engine")
        out[engine] = open_target(engine, path)
    for spec in to:
        from patchkit.upstream import drift as D  # the judge and libcst: only where a release is named

        kind, engine, value = D.parse_spec(spec)
        if engine in out:
            raise PatchkitError(f"--to {spec!r}: {engine} is given twice", "give one tree per engine")
        root = open_target(engine, value).root if kind == "path" else fetch.release_tree(engine, value, say=_err)
        out[engine] = open_target(engine, root)
    if out:
        return list(out.values())
    project = inv.project
    for engine in ENGINES:
        tree = project.tree(engine)
        if tree.is_dir():
            out[engine] = open_target(engine, tree)
    if not out:
        raise PatchkitError(
            "gates: no tree to scan (no --target, --to or --python, and no workspace tree)",
            "e.g. patchkit gates --device 12.0 --to sglang==0.5.23, or -t sglang=PATH, or run `patchkit sync`",
        )
    return list(out.values())


def _python_trees(inv: Invocation, target: tuple[str, ...]) -> tuple[str, ...]:
    """``ENGINE=ROOT`` of every engine the --python interpreter (or the activated venv)
    imports, beside the trees named with -t: a scan needs no recipe to name its engines."""
    from patchkit.base.target import ENGINES

    facts = inv.probe() or {}
    given = {a.split("=", 1)[0].strip() for a in target}
    found = [
        f"{e}={m['root']}"
        for e in ENGINES
        if e not in given and (m := facts.get("modules", {}).get(ENGINES[e].package, {})).get("found")
    ]
    if not found and not target:
        raise PatchkitError(
            f"--python {inv.python}: it imports none of {', '.join(ENGINES)}",
            "name the tree with -t ENGINE=PATH, or another interpreter",
        )
    return tuple(target) + tuple(found)


def _err(s: str) -> None:
    say(s, err=True)


def _recipes(inv: Invocation) -> list:
    """The recipes in play (none where the catalog cannot be read: the scan does not need it)."""
    try:
        return list(inv.project.catalog().recipes.values())
    except PatchkitError:
        return []


def gates(
    inv: Invocation,
    device: str,
    compare: str | None,
    target: tuple[str, ...],
    to: tuple[str, ...],
    as_json: bool,
    vendored: bool,
    jobs: int = 0,
    across: str | None = None,
    html: str | None = None,
    draft: str = "",
    only: str = "",
    out: str | None = None,
    every: bool = False,
) -> int:
    dev = _device(device, "--device")
    cmp_ = _device(compare, "--compare") if compare else G.default_compare(dev)
    if cmp_.capability == dev.capability:
        raise PatchkitError(f"--compare {cmp_} is the device itself", "compare with another part, e.g. --compare 10.0")
    if every and (across or draft):
        raise PatchkitError(
            "--all unfolds the report of one scan's closed gates, not --across or --draft",
            f"e.g. patchkit gates --device {device} --to ENGINE==VERSION --all",
        )
    if across and (draft or only or out):
        raise PatchkitError(
            "--draft drafts from the trees one scan reads, not from --across",
            f"e.g. patchkit gates --device {device} --to ENGINE==VERSION --draft ID --only N",
        )
    if across:
        if target or to or inv.python:
            raise PatchkitError(
                f"--across {across} scans releases from the index: -t, --to and --python name other trees",
                f"run them apart: patchkit gates --device {device} --across {across}",
            )
        from patchkit.commands.gates_across import run

        return run(across, dev, cmp_, as_json, html, vendored, jobs)
    if html:
        raise PatchkitError(
            "--html draws the matrix of --across", "e.g. patchkit gates --device 12.0 --across sglang==0.5.9..0.5.23 "
            "--html gates.html"
        )  # fmt: skip
    trees = _trees(inv, tuple(target), tuple(to))
    recipes = _recipes(inv)
    scans = []
    for t in trees:
        t0 = time.monotonic()
        res = G.scan(t.engine, t.root, t.layout, t.version, dev, cmp_, vendored=vendored, jobs=jobs)
        G.mark_recipes(res, recipes)
        scans.append((res, time.monotonic() - t0))
    if draft or only or out:
        if not draft:
            raise PatchkitError(
                "--only and --out go with --draft ID", "e.g. patchkit gates --device 12.0 --draft my-id --only 3"
            )
        from patchkit.commands.gates_draft import draft as run_draft

        return run_draft(inv, draft, only, out, dev, cmp_, trees, scans, as_json)
    closed = sum(len(r.closed) for r, _ in scans)
    if as_json:
        say(json.dumps(document(dev, cmp_, scans), indent=2), raw=True)
    else:
        for line in report(dev, cmp_, scans, vendored, every):
            say(line)
    return NOT_THERE if closed else OK


def document(dev: Device, cmp_: Device, scans) -> dict:
    return {
        "command": "gates",
        "device": str(dev),
        "compare": str(cmp_),
        "closed": sum(len(r.closed) for r, _ in scans),
        "unknown": sum(len(r.unknown) for r, _ in scans),
        "trees": [
            {
                "engine": r.engine,
                "version": r.version,
                "root": r.root,
                "files": r.files,
                "parsed": r.parsed,
                "vendored_skipped": r.vendored_skipped,
                "cpp": r.cpp,
                "seconds": round(dt, 3),
                "errors": r.errors,
                "closed": [{"n": n, **g.to_json()} for n, g in _numbers(scans, r)],
                "unknown": [g.to_json() for g in r.unknown],
            }
            for r, dt in scans
        ],
    }


def _numbers(scans, r) -> list:
    """(n, gate) of ``r``'s closed gates, numbered across the scans as the report prints
    them (what `--draft --only N` names)."""
    from patchkit.authoring.draft import numbered

    return [(x.n, x.gate) for x in numbered(scans) if x.root == r.root and x.engine == r.engine]


LINES_SHOWN = 4  # lines named on a folded row before "... and N more" (--all prints each gate)
RUNS_SHOWN = 6  # runs of numbers (12-15) named on a folded row
SPREAD = 3  # files of one directory with the same gate folded into one row of the directory


@dataclass(frozen=True)
class Fold:
    """Gates of one file and function with the same kind, condition, reason and recipes: one row."""

    path: str
    function: str
    gates: tuple  # G.Gate, in file order
    numbers: tuple[int, ...]  # their report numbers (what `--draft --only` names)
    mechanism: bool = False  # one arch list or #if guard, however spelled, over many files


def folds(numbered: list) -> list[Fold]:
    """(n, gate) in report order -> one Fold per (file, function, kind, condition, why, recipes),
    in the order of each fold's first gate; then the same gate in SPREAD files of one directory
    folded into one (``spread``)."""
    out: dict[tuple, list] = {}
    for n, g in numbered:
        key = (g.path, g.function, g.kind, g.condition, g.why, g.recipes, g.vendored)
        out.setdefault(key, []).append((n, g))
    return spread([Fold(k[0], k[1], tuple(g for _, g in v), tuple(n for n, _ in v)) for k, v in out.items()])


def spread(fs: list[Fold]) -> list[Fold]:
    """Folds of SPREAD or more files of one directory with the same kind, condition, reason and
    recipes (a generated kernel per file, each with its own guard) -> one fold of that directory
    (path "DIR/", function ""), at its first file's place; the files and lines stay named."""
    by: dict[tuple, list[Fold]] = {}
    for f in fs:
        g = f.gates[0]
        by.setdefault((f.path.rpartition("/")[0], g.kind, g.condition, g.why, g.recipes, g.vendored), []).append(f)
    out: list[Fold] = []
    for f in fs:
        g = f.gates[0]
        group = by[(f.path.rpartition("/")[0], g.kind, g.condition, g.why, g.recipes, g.vendored)]
        if len({x.path for x in group}) < SPREAD:
            out.append(f)
        elif group[0] is f:
            pairs = sorted(((n, x) for y in group for n, x in zip(y.numbers, y.gates, strict=True)), key=lambda p: p[0])
            dirname = f.path.rpartition("/")[0]
            out.append(Fold(dirname + "/", "", tuple(x for _, x in pairs), tuple(n for n, _ in pairs)))
    return out


# Kinds whose condition is a statement of archs alone (a JIT arch list, a compile guard): one
# such condition spread over many files is one mechanism (a generator's output, a JIT spec per
# kernel), read once.  A Python condition or a run-time check stays on its file's row.
MECHANISMS = ("arch-list", "#if", "#elif")
MECHANISM_SHOWN = 2  # files named on a mechanism's row
COMPONENTS_SHOWN = 4  # components named on a mechanism's row


def _outer_parens(c: str) -> bool:
    """Whether ``c`` is one parenthesised expression: ``(a)``, not ``(a)||(b)``."""
    if not (c.startswith("(") and c.endswith(")")):
        return False
    depth = 0
    for ch in c[1:-1]:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def shape(g) -> tuple[str, str]:
    """What the gates of one mechanism share: the kind's class and the condition without its
    spelling (blanks, brackets, quotes, a trailing comma, a keyword, outer parentheses):
    ``targets=("sm_100a", "sm_103a")`` and ``[ "sm_100a", "sm_103a", ]`` are one list."""
    c = g.condition
    if g.kind == "arch-list":
        c = re.sub(r"^\w+\s*=", "", c)
        return ("arch-list", re.sub(r"[\s\"'()\[\]{}]", "", c).strip(","))
    c = "".join(c.split())
    while _outer_parens(c):
        c = c[1:-1]
    return ("#if", c)


def mechanisms(fs: list[Fold]) -> tuple[list[Fold], list[Fold]]:
    """(the mechanisms, the other folds): folds of ``MECHANISMS`` kinds whose gates share one
    ``shape``, recipes and vendoring over SPREAD or more files -> one fold each (most gates
    first), its gates and numbers in report order; the rest as they were, in their order."""

    def key(f: Fold):
        g = f.gates[0]
        return (shape(g), g.recipes, g.vendored) if g.kind in MECHANISMS else None

    by: dict[tuple, list[Fold]] = {}
    for f in fs:
        k = key(f)
        if k is not None:
            by.setdefault(k, []).append(f)
    wide = {k for k, group in by.items() if len(group) > 1 and len({x.path for y in group for x in y.gates}) >= SPREAD}
    out, rest = [], []
    for f in fs:
        k = key(f)
        if k not in wide:
            rest.append(f)
        elif by[k][0] is f:
            pairs = sorted(((n, x) for y in by[k] for n, x in zip(y.numbers, y.gates, strict=True)), key=lambda p: p[0])
            out.append(Fold("", "", tuple(x for _, x in pairs), tuple(n for n, _ in pairs), mechanism=True))
    out.sort(key=lambda f: (-len(f.gates), f.numbers[0]))
    return out, rest


def _mechanism_rows(f: Fold, of: dict[str, str], mark: str) -> list[str]:
    g = f.gates[0]
    files = {x.path for x in f.gates}
    spellings = len({x.condition for x in f.gates})
    per: dict[str, int] = {}
    for x in f.gates:
        per[of[x.path]] = per.get(of[x.path], 0) + 1
    comps = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{c} {n}" for c, n in comps[:COMPONENTS_SHOWN])
    more = len(comps) - COMPONENTS_SHOWN
    at = [f"{x.path}:{x.line}" for x in f.gates[:MECHANISM_SHOWN]]
    left = len(f.gates) - MECHANISM_SHOWN
    gen = sum(1 for x in f.gates if generated(x.path))
    head = (
        f"{'arch list' if g.kind == 'arch-list' else 'guard'} {g.condition}"
        + (f" ({spellings} spellings)" if spellings > 1 else "")
        + f" in {len(files)} files of {len(comps)} component{'s' if len(comps) > 1 else ''}"
        + (" [vendored]" if g.vendored else "")
        + ("" if not gen else " [generated]" if gen == len(f.gates) else f" [{gen} in generated code]")
    )
    return [
        "",
        head,
        f"    #{f.numbers[0]:<3} x{len(f.gates):<4} {g.kind:<9} {g.condition}{mark}",
        f"           in {shown}" + (f" ... and {more} more component{'s' if more > 1 else ''}" if more > 0 else ""),
        f"           at {', '.join(at)}"
        + (f" ... and {left} more" if left > 0 else "")
        + f"; numbers {runs(f.numbers)}",
        f"           {g.why}",
    ]


def runs(numbers) -> str:
    """3,4,5,9 -> "3-5,9" (the syntax of --only)."""
    parts: list[str] = []
    ns = sorted(numbers)
    i = 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        parts.append(str(ns[i]) if i == j else f"{ns[i]}-{ns[j]}")
        i = j + 1
    if len(parts) > RUNS_SHOWN:
        more = len(parts) - RUNS_SHOWN
        return ",".join(parts[:RUNS_SHOWN]) + f",... ({more} more run{'s' if more > 1 else ''}; --all numbers each)"
    return ",".join(parts)


def components(paths: list[str]) -> dict[str, str]:
    """path -> its component: the first directory below the tree's common top (``flashinfer/jit/``),
    the top's own files as ``flashinfer/*``; a component that holds more than half of the paths,
    spread over several sub-directories, is split one level further (``sglang/srt/layers/``)."""
    out: dict[str, str] = {}

    def place(ps: list[str], depth: int) -> None:
        by: dict[str, list[str]] = {}
        for p in ps:
            parts = p.split("/")
            if len(parts) > depth + 1:  # below a directory of this level
                by.setdefault("/".join(parts[: depth + 1]) + "/", []).append(p)
            else:  # a file of the level above
                by.setdefault("/".join(parts[:depth]) + "/*" if depth else "*", []).append(p)
        for c, cps in by.items():
            children = {p.split("/")[depth + 1] for p in cps} if c.endswith("/") else set()
            if len(children) > 1 and (len(by) == 1 or 2 * len(cps) > len(paths)) and depth < 4:
                place(cps, depth + 1)
            else:
                for p in cps:
                    out[p] = c

    place(paths, 0)
    return out


def generated(path: str) -> bool:
    return "generated" in path.split("/")[:-1]


def summary(closed: list) -> list[str]:
    """One line per component, the most gates first: closed gates, files, distinct conditions."""
    of = components([g.path for g in closed])
    by: dict[str, list] = {}
    for g in closed:
        by.setdefault(of[g.path], []).append(g)
    width = max((len(c) for c in by), default=0)
    out = []
    for c, gs in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        gen = sum(1 for g in gs if generated(g.path))
        mark = "" if not gen else "  [generated]" if gen == len(gs) else f"  [{gen} in generated code]"
        out.append(
            f"  {c:<{width}}  {len(gs):>5} closed  {len({g.path for g in gs}):>4} files  "
            f"{len({(g.kind, g.condition) for g in gs}):>4} conditions{mark}"
        )
    return out


def _lines(gs, files: bool = False) -> str:
    """ "lines 3, 9 ... and 4 more", or with ``files`` "at a.cu:3, b.cu:9 ... and 4 more"."""
    at = [f"{g.path.rpartition('/')[2]}:{g.line}" if files else str(g.line) for g in gs[:LINES_SHOWN]]
    more = len(gs) - LINES_SHOWN
    return ("at " if files else "lines ") + ", ".join(at) + (f" ... and {more} more" if more > 0 else "")


def report(dev: Device, cmp_: Device, scans, vendored: bool, every: bool = False) -> list[str]:
    """The report for people. Gates of one file and function with the same condition are folded
    into one row (their count, lines and numbers), after a summary per component; ``every``
    prints each gate on its own row, as --json lists them."""
    out = [f"gates closed for {dev} and open for {cmp_}"]
    for r, dt in scans:
        files = len({g.path for g in r.closed})
        left = f", {r.vendored_skipped} vendored files left out (--vendored adds them)" if r.vendored_skipped else ""
        out.append("")
        out.append(
            f"{r.engine} {r.version or '(unknown version)'} at {r.root}: {len(r.closed)} closed in {files} files, "
            f"{len(r.unknown)} unknown; {r.files} files scanned, {r.parsed} parsed{left}, {dt:.1f} s"
        )
        if not r.cpp:
            out.append("  (C/C++/CUDA files not scanned: tree-sitter is not installed; pip install patchkit[goals])")
        numbered = _numbers(scans, r)
        mech, fs = mechanisms(folds(numbered))
        if r.closed and not every:
            out.append("")
            out.append(
                f"by component ({len(mech) + len(fs)} rows below for {len(r.closed)} gates: repeats of one condition "
                "in one function are folded, and one arch list or #if guard in many files; --all prints each):"
            )
            out.extend(summary(r.closed))
        if mech and not every:
            of = components([g.path for g in r.closed])
            out.append("")
            out.append(
                f"by mechanism ({len(mech)} rows for {sum(len(f.gates) for f in mech)} gates: one arch list or "
                f"#if guard, however spelled, in {SPREAD}+ files):"
            )
            for f in mech:
                g = f.gates[0]
                out.extend(_mechanism_rows(f, of, f"  [widened by {', '.join(g.recipes)}]" if g.recipes else ""))
            if fs:
                out.append("")
                out.append("by file:")
        last = None
        lastf = None
        for f in fs if not every else [Fold(g.path, g.function, (g,), (n,)) for n, g in numbered]:
            g = f.gates[0]
            many = f.path.endswith("/")
            if f.path != last or many:
                out.append("")
                files = f" ({len({x.path for x in f.gates})} files with this gate)" if many else ""
                out.append(
                    f.path
                    + files
                    + (" [vendored]" if g.vendored else "")
                    + (" [generated]" if generated(f.path + "x") else "")
                )
                last, lastf = f.path, None
            if many:
                lastf = None
            elif f.function != lastf:
                out.append(f"  {f.function or '(module level)'}")
                lastf = f.function
            mark = f"  [widened by {', '.join(g.recipes)}]" if g.recipes else ""
            if len(f.gates) == 1:
                out.append(f"    #{f.numbers[0]:<3} {g.line:>5}  {g.kind:<9} {g.condition}{mark}")
            else:
                out.append(f"    #{f.numbers[0]:<3} x{len(f.gates):<4} {g.kind:<9} {g.condition}{mark}")
                out.append(f"           {_lines(f.gates, many)}; numbers {runs(f.numbers)}")
            out.append(f"           {g.why}")
            if g.guards:
                others = len({x.guards for x in f.gates}) - 1
                out.append(
                    f"           guards: {g.guards}"
                    + (f" (and {others} other{'s' if others > 1 else ''})" if others else "")
                )
        if r.unknown:
            out.append("")
            out.append(f"unknown for {dev} ({len(r.unknown)}; never counted as closed):")
            for g in r.unknown[:UNKNOWN_SHOWN]:
                cond = g.condition if len(g.condition) <= 80 else g.condition[:77] + "..."
                out.append(f"  {g.path}:{g.line}  {cond}  -- {g.why.split(': ', 1)[-1]}")
            if len(r.unknown) > UNKNOWN_SHOWN:
                out.append(f"  ... {len(r.unknown) - UNKNOWN_SHOWN} more (--json lists them all)")
        for e in r.errors:
            out.append(f"  not scanned: {e}")
    out.append("")
    out.append(
        "A gate read open says only that the condition admits the device: the code behind it may not work "
        "there (run-time configuration, kernels that compile but fail); see `patchkit verify --build`."
    )
    return out
