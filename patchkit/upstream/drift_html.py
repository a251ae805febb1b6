"""`drift --across ... --html FILE`: the matrix as one page to look at.

Rows are recipes and, under each, its ops; columns are releases.  Each cell carries its state
as text, as a class (one colour per state) and as ``data-state``; a cell whose state differs
from the release before it is marked as a transition (a thick left edge and a ``▶``); the
evidence (where the op stands, patchkit's message: the candidates of a moved or ambiguous
op, the standing blockers) is the cell's ``title``, shown on hover.  Everything is inline:
no script, font or style is fetched, so the file works offline and can be attached to an
issue.  The script only adds row and column highlighting and a count of the transitions.
"""

from __future__ import annotations

from html import escape

from patchkit.upstream.drift import cell

# One colour per state (background, text), readable in print as well.
PALETTE = {
    "applied": ("#2e7d32", "#fff"),
    "applied?": ("#81c784", "#000"),
    "pending": ("#fff59d", "#000"),
    "partial": ("#ffcc80", "#000"),
    "upstream": ("#4dd0e1", "#000"),
    "moved": ("#ce93d8", "#000"),
    "missing": ("#e53935", "#fff"),
    "ambiguous": ("#ad1457", "#fff"),
    "modified": ("#6d4c41", "#fff"),
    "blocked": ("#212121", "#fff"),
    "skipped": ("#bdbdbd", "#000"),
    "interrupted": ("#ff6f00", "#000"),
    "none": ("#ffffff", "#999"),
}

CSS = """
body{font:13px/1.35 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px}p{margin:4px 0 12px;color:#555}
table{border-collapse:collapse}th,td{border:1px solid #ddd;padding:2px 6px;white-space:nowrap}
thead th{position:sticky;top:0;background:#fafafa;font-weight:600;writing-mode:vertical-rl;transform:rotate(180deg)}
th.row{text-align:left;font-weight:600;background:#fafafa;position:sticky;left:0}
thead th.row{writing-mode:horizontal-tb;transform:none;vertical-align:bottom}
tr.op th.row{font-weight:400;padding-left:20px;color:#444}
td{text-align:center;font-size:12px;cursor:default}
td.transition{border-left:4px solid #000}td.transition::before{content:"\\25B6 ";font-size:9px}
tr.hl th.row,td.hl{outline:2px solid #1565c0;outline-offset:-2px}
.legend span{display:inline-block;padding:1px 6px;margin:0 4px 4px 0;border:1px solid #ccc}
"""

JS = """
(function(){
  var t=document.getElementById('matrix');
  t.addEventListener('mouseover',function(e){
    var c=e.target.closest('td');if(!c)return;
    document.querySelectorAll('.hl').forEach(function(x){x.classList.remove('hl')});
    c.parentNode.classList.add('hl');
    document.querySelectorAll('td[data-version="'+c.dataset.version+'"]').forEach(function(x){x.classList.add('hl')});
  });
  var n=document.querySelectorAll('td.transition').length;
  document.getElementById('summary').textContent=
    t.tBodies[0].rows.length+' rows x '+(t.tHead.rows[0].cells.length-1)+' releases, '+n+' transitions';
})();
"""


def _state_css() -> str:
    return "".join(f'td[data-state="{s}"]{{background:{bg};color:{fg}}}' for s, (bg, fg) in PALETTE.items())


def _op_title(o: dict) -> str:
    where = o["location"] or (f"{o['file']}:{o['line']}" if o["line"] else o["file"])
    return "\n".join(x for x in (f"op #{o['index']} {o['kind']}: {o['state']}", f"at {where}", o["message"]) if x)


def _recipe_title(r: dict) -> str:
    lines = [f"{r['id']}: {cell(r)}"]
    if r.get("message"):
        lines.append(r["message"])
    for b in r.get("blockers", ()):
        lines.append(
            f"blocker {b.get('blocker', '')} at {b.get('file', '')}:{b.get('line', '')} {b.get('message', '')}"
        )
    return "\n".join(lines)


def rows(versions: list[str], matrix: dict[str, list[dict]]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(recipe id, "" or "op #n", [(state, hover text) per release]): what the page shows,
    and what the test compares with --json."""
    ids: list[str] = []
    ops: dict[str, list[int]] = {}
    for v in versions:
        for r in matrix[v]:
            if r["id"] not in ids:
                ids.append(r["id"])
            for o in r["ops"]:
                if o["index"] not in ops.setdefault(r["id"], []):
                    ops[r["id"]].append(o["index"])
    out = []
    for rid in ids:
        found = {v: next((r for r in matrix[v] if r["id"] == rid), None) for v in versions}
        out.append((rid, "", [(r["state"], _recipe_title(r)) if r else ("none", "") for r in found.values()]))
        for i in sorted(ops[rid]):
            cells = []
            for r in found.values():
                o = next((o for o in r["ops"] if o["index"] == i), None) if r else None
                cells.append((o["state"], _op_title(o)) if o else ("none", "not in this release's variant"))
            out.append((rid, f"op #{i}", cells))
    return out


def render(engine: str, spec: str, versions: list[str], matrix: dict[str, list[dict]], changes=None) -> str:
    head = "".join(f"<th>{escape(v)}</th>" for v in versions)
    body = []
    for rid, op, cells in rows(versions, matrix):
        tds, prev = [], None
        for v, (state, title) in zip(versions, cells, strict=True):
            cls = ' class="transition"' if prev is not None and state != prev else ""
            tds.append(
                f'<td{cls} data-recipe="{escape(rid)}" data-op="{escape(op)}" data-version="{escape(v)}" '
                f'data-state="{escape(state)}" title="{escape(title)}">{escape(state)}</td>'
            )
            prev = state
        kind = "op" if op else "recipe"
        label = escape(op) if op else escape(rid)
        body.append(f'<tr class="{kind}"><th class="row">{label}</th>{"".join(tds)}</tr>')
    legend = "".join(f'<span style="background:{bg};color:{fg}">{escape(s)}</span>' for s, (bg, fg) in PALETTE.items())
    listed = ""
    if changes:
        items = "".join(
            f"<li>{escape(c[0])}{' ' + escape(c[1]) if c[1] else ''}: {escape(c[2])} &rarr; {escape(c[3])}: "
            f"{escape(c[4])} &rArr; {escape(c[5])}</li>"
            for c in changes
        )
        listed = f"<h2>Changes (bisect)</h2><ul>{items}</ul>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>patchkit drift {escape(spec)}</title><style>{CSS}{_state_css()}</style></head><body>"
        f"<h1>patchkit drift --across {escape(spec)}</h1>"
        f"<p>{escape(engine)}: {len(versions)} releases, each judged pristine. A cell with a thick left edge "
        "changed state since the release before it; hover a cell for where the op stands and why. "
        '<span id="summary"></span></p>'
        f'<div class="legend">{legend}</div>'
        f'<table id="matrix"><thead><tr><th class="row">recipe / op</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{listed}<script>{JS}</script></body></html>\n"
    )
