"""`gates --draft`, writing the TOML: the drafted ops as a recipe, by capture's writer, with a
summary and a rationale that say what it widens and what it does not prove (opening a gate does
not make the code behind it work on the part; where it reaches CUDA code, `verify --build`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.core.goals.device import Device

if TYPE_CHECKING:
    from patchkit.authoring.draft import Draft

# -- the recipe ---------------------------------------------------------------------------------------

SLOW = (
    "WARNING: opening a gate does not make the code behind it work on the new part. allreduce-fusion opened its\n"
    "gates on SM120 and took throughput from about 3,700 to 236 tok/s (8x RTX PRO 6000, GLM-5-NVFP4): the\n"
    "kernels behind the gates started, and were slow or empty. Measure before you keep this recipe."
)


def _toml_text(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"""', '""\\"')


def rationale(d: Draft, dev: Device, cmp_: Device, targets: dict) -> tuple[str, str]:
    """(summary, rationale) of the drafted recipe: what it widens, and what it does not prove."""
    files = sorted({(w.gate.engine, w.gate.file) for w in d.widened})
    summary = (
        f"Widen {len(d.widened)} gate(s) closed for {dev} and open for {cmp_} in {len(files)} file(s); opening a gate"
        f" does not make the code behind it work on {dev}"
    )
    lines = [
        "Drafted by `patchkit gates --draft` from "
        + ", ".join(
            f"{e} {targets[e].version} at {targets[e].root}" for e in sorted({w.gate.engine for w in d.widened})
        )
        + f": each gate below read false for {dev} and true for {cmp_}; with this recipe applied",
        f"it reads for {dev} as for {cmp_} (read back by the same scan). The gates, as `patchkit gates` numbers them:",
    ]
    for w in d.widened:
        g = w.gate
        where = f" in {g.function}" if g.function else ""
        lines.append(f"- #{w.n} {g.file}:{g.line}{where}: `{g.condition}` ({w.how})")
    lines += ["", SLOW]
    if d.reaches_cuda():
        lines += [
            "",
            "The closed branches reach CUDA code (C/C++ `#if __CUDA_ARCH__` guards, JIT arch lists): before measuring,",
            f"prove the device code with `patchkit verify {d.rid} --build` (it compiles the edited sources for",
            f"sm_{dev.sm}a, pristine and patched, and reports empty kernels).",
        ]
    return summary, _toml_text("\n".join(lines))


def recipe_text(d: Draft, dev: Device, cmp_: Device, targets: dict) -> str:
    """The recipe, written by capture's writer (recipe_toml), each Python op with its site's
    identity as the scanned tree holds it (docs: site identity)."""
    from patchkit.authoring import capture as cap
    from patchkit.core.carried import TreeFiles

    used = {op.engine for op in d.ops}
    tg = {e: t for e, t in targets.items() if e in used}
    refs = {e: TreeFiles(t) for e, t in tg.items()}
    summary, why = rationale(d, dev, cmp_, targets)
    kw = dict(
        header="# Drafted by `patchkit gates --draft`; `patchkit check` validates it.",
        summary=summary,
        rationale=why,
    )
    text = cap.recipe_toml(d.rid, tg, refs, d.ops, **kw)
    return cap.recipe_toml(d.rid, tg, refs, d.ops, idents=cap.identities(text, d.rid, tg, refs), **kw)
