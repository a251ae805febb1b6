"""`patchkit gates --draft ID`: a recipe that widens the chosen gates of a scan.

In three steps, each a module of its own:

- choosing the op (draft_ops.py): each chosen gate widened by the smallest edit that admits the
  device beside the part it was written for (an ``or`` chain gains the analog, a list the
  device, an ``#if`` loses the bound that shuts it out...), read back by the scanner and
  expressed as ops by `capture`'s machinery; a gate no op kind widens safely is refused with
  one line;
- writing the TOML (draft_toml.py): the ops as a recipe, by capture's writer, with the site
  identities of the scanned tree and a rationale that says what the recipe does not prove;
- the proofs (draft_proof.py): check, pending on the tree, the planner's bytes, applied after.

This module numbers the gates as the report prints them, and puts the draft together
(``make``); patchkit/commands/gates_draft.py writes it once proved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from patchkit.authoring.draft_ops import Numbered, Refused, definer, draft_file
from patchkit.authoring.draft_proof import prove  # noqa: F401 (the command proves a draft with draft.prove)
from patchkit.authoring.draft_toml import recipe_text
from patchkit.core.goals.device import Device
from patchkit.upstream import gates as G

# -- numbering --------------------------------------------------------------------------------------


def numbered(scans) -> list[Numbered]:
    """The closed gates of the scans, numbered as the report prints them (from 1)."""
    out: list[Numbered] = []
    for r, *_ in scans:
        for _path, _function, gs in G.groups(r.closed):
            for g in gs:
                out.append(Numbered(len(out) + 1, r.engine, r.root, g))
    return out


@dataclass
class Draft:
    rid: str
    text: str = ""
    files: list = field(default_factory=list)  # FileDraft
    widened: list = field(default_factory=list)  # Widened
    refused: list = field(default_factory=list)  # Refused
    checks: list = field(default_factory=list)  # (name, ok, detail)

    @property
    def ops(self) -> list:
        return [op for f in self.files for op in f.ops]

    def reaches_cuda(self) -> bool:
        return any(w.gate.kind.startswith("#") or w.gate.kind == "arch-list" for w in self.widened)


def make(rid: str, chosen: list[Numbered], targets: dict, dev: Device, cmp_: Device, progress=None) -> Draft:
    """Widen the chosen gates: per file, the edits, read back and expressed as ops."""
    d = Draft(rid)
    by_file: dict[tuple[str, str], list[Numbered]] = {}
    for c in chosen:
        if c.gate.recipes:  # two recipes must not edit the same code
            d.refused.append(
                Refused(
                    c.n, c.gate, f"{', '.join(c.gate.recipes)} (in play) already edits it: apply that recipe instead"
                )
            )
            continue
        by_file.setdefault((c.engine, c.gate.path), []).append(c)
    for (engine, path), cs in by_file.items():
        t = targets[engine]
        if progress:
            progress(f"drafting {engine}:{path} ({len(cs)} gate(s))")
        fd, refused, kept = draft_file(engine, t.root, path, cs[0].gate.file, cs, dev, cmp_, definer(t))
        d.refused += refused
        if fd is not None:
            d.files.append(fd)
            d.widened += kept
    d.widened.sort(key=lambda w: w.n)
    d.refused.sort(key=lambda r: r.n)
    if d.files:
        d.text = recipe_text(d, dev, cmp_, targets)
    return d
