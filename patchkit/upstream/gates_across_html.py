"""`gates --across ... --html FILE`: the gates x releases matrix as one page, in drift's layout
(patchkit/upstream/drift_html.py: sticky header row and gate column, scrolled to the newest
release on load, everything inline).

Each cell carries the gate's state in that release as text, class and ``data-state``
(closed, unknown, open, none), its lines and the scanner's words on hover; a cell whose state
changed since the release before it is marked as a transition.
"""

from __future__ import annotations

from html import escape

from patchkit.upstream.drift_html import page, paired_rows
from patchkit.upstream.gates_across import Across, pairing_lines

PALETTE = {
    "closed": ("#e53935", "#fff"),
    "unknown": ("#fff59d", "#000"),
    "open": ("#2e7d32", "#fff"),
    "none": ("#ffffff", "#999"),
}


def _title(row, i: int, res: Across) -> str:
    c = row.cells[i]
    key = row.key_at(i)
    where = f"{c['path'] or key[0]}:{','.join(str(x) for x in c['lines'])}" if c["lines"] else (c["path"] or key[0])
    lines = [f"{res.versions[i]}: {c['state']}" + (f" x{c['closed']}" if c["closed"] > 1 else ""), f"at {where}"]
    if c.get("kind"):
        lines.append(f"{c['kind']}: {key[2]}")
    lines.append(c.get("why", ""))
    if c.get("guards"):
        lines.append(f"guards: {c['guards']}")
    return "\n".join(x for x in lines if x)


def cells(res: Across) -> list[tuple[int, list[tuple[str, str, bool]]]]:
    """(row index, [(state, hover text, transition) per release]): what the page shows, and
    what the tests compare with --json."""
    out = []
    for n, row in enumerate(res.rows):
        got, prev = [], None
        for i in range(len(res.versions)):
            c = row.cells[i]
            now = (c["state"], c["closed"], row.key_at(i))
            got.append((c["state"], _title(row, i, res), prev is not None and now != prev))
            prev = now
        out.append((n, got))
    return out


def render(res: Across, spec: str, with_: dict | None = None) -> str:
    """The page; ``with_``: the release of each engine the ranged one requires, per release
    (a header row each, as drift's page has)."""
    with_ = with_ or {}
    head = "".join(f"<th>{escape(v)}</th>" for v in res.versions)
    body = []
    last = len(res.versions) - 1
    for n, got in cells(res):
        row = res.rows[n]
        file, function, condition = row.key_at(last)
        tds = []
        for v, (state, title, moved) in zip(res.versions, got, strict=True):
            cls = ' class="transition"' if moved else ""
            tds.append(
                f'<td{cls} data-gate="{n}" data-version="{escape(v)}" data-state="{escape(state)}" '
                f'title="{escape(title)}">{escape(state)}</td>'
            )
        name = f"{file} {function or '(module level)'} {row.kind}: {condition}"
        label = (
            f'<span class="file">{escape(file)}</span> {escape(function or "(module level)")} '
            f'<span class="kind">{escape(row.kind)}</span> {escape(condition)}'
        )
        body.append(f'<tr class="recipe"><th class="row" title="{escape(name)}">{label}</th>{"".join(tds)}</tr>')
    items = "".join(
        f"<li>{escape(c['from'])} &rarr; {escape(c['to'])}: <b>{escape(c['change'])}</b> "
        f"{escape(c['file'])}:{escape(','.join(str(x) for x in c['lines']))} "
        f"{escape(c['function'] or '(module level)')}: <code>{escape(c['condition'])}</code>"
        f"{' &mdash; ' + escape(c['why']) if c['change'] in ('opened', 'gone', 'undecided', 'moved') else ''}</li>"
        for c in res.changes
    )
    listed = f"<h2>Changes</h2><ul>{items}</ul>" if items else "<p>No gate changed across the range.</p>"
    intro = (
        f"{escape(res.engine)}: {len(res.versions)} releases, each scanned pristine for the gates closed for "
        f"{escape(str(res.device))} and open for {escape(str(res.compare))}. A row is a gate (file, function, "
        "condition as written); closed: it shuts the device out; open: it still stands and does not; unknown: "
        "the evaluator cannot tell; none: not in that release as written. A cell with a thick left edge changed "
        "since the release before it; hover a cell for its lines and why. "
    )
    return page(
        f"patchkit gates {spec}",
        f"patchkit gates --device {res.device} --across {spec}",
        intro,
        "".join(f"<p>{escape(why)}</p>" for why in pairing_lines(res, with_)),
        "gate",
        head,
        "".join(body),
        listed,
        paired_rows(res.versions, with_),
        palette=PALETTE,
    )
