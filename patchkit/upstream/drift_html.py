"""`drift --across ... --html FILE`: the matrix as one page to look at.

Rows are recipes and, under each, its ops; columns are releases.  Each cell carries its state
as text, as a class (one colour per state) and as ``data-state``; a cell whose state differs
from the release before it is marked as a transition (a thick left edge and a ``▶``), except
where the op enters or leaves play as the recipe hands over to another variant (``none``
beside it: a dashed edge, a hand-over, not counted as a transition); the
evidence (where the op stands, patchkit's message: the candidates of a moved or ambiguous
op, the standing blockers) is the cell's ``title``, shown on hover.  Everything is inline:
no script, font or style is fetched, so the file works offline and can be attached to an
issue.  The script only adds row and column highlighting and a count of the transitions.
"""

from __future__ import annotations

from html import escape

from patchkit.upstream.drift import cell, pairing_lines

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

# The matrix scrolls in its own box (the page's height and width), its header row and
# first column sticky, and the script scrolls it to the newest releases on load: at 1400 px
# the newest column is in view beside the row names (tests/upstream/test_drift_html.py measures it).
CSS = """
body{font:13px/1.35 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px}p{margin:4px 0 12px;color:#555}
#wrap{overflow:auto;max-width:100%;max-height:calc(100vh - 32px);border:1px solid #ddd}
table{border-collapse:separate;border-spacing:0}th,td{border:1px solid #ddd;padding:2px 4px;white-space:nowrap}
thead th{position:sticky;top:0;z-index:1;background:#fafafa;font-weight:600;
writing-mode:vertical-rl;transform:rotate(180deg)}
thead tr.with th{top:var(--head,0px);writing-mode:horizontal-tb;transform:none;font-weight:400;
font-size:11px;color:#555}
th.row{text-align:left;font-weight:600;background:#fafafa;position:sticky;left:0;z-index:2;max-width:420px;
overflow:hidden;text-overflow:ellipsis}
thead th.row{writing-mode:horizontal-tb;transform:none;vertical-align:bottom;z-index:3}
tr.op th.row{font-weight:400;padding-left:20px;color:#444}
th.row .kind{color:#1565c0}th.row .file{color:#777;font-family:ui-monospace,monospace;font-size:11px}
td{text-align:center;font-size:11px;cursor:default}
td.transition{border-left:4px solid #000}td.transition::before{content:"\\25B6 ";font-size:9px}
td.handover{border-left:2px dashed #999}
tr.hl th.row,td.hl{outline:2px solid #1565c0;outline-offset:-2px}
.legend span{display:inline-block;padding:1px 6px;margin:0 4px 4px 0;border:1px solid #ccc}
"""

JS = """
(function(){
  var t=document.getElementById('matrix'),w=document.getElementById('wrap');
  var h=t.tHead.rows[0].cells[0].getBoundingClientRect().height;
  t.style.setProperty('--head',h+'px');
  w.scrollLeft=w.scrollWidth;
  var last=t.tHead.rows[0].cells[t.tHead.rows[0].cells.length-1],r=last.getBoundingClientRect();
  var names=t.tHead.rows[0].cells[0].getBoundingClientRect();
  var seen=document.getElementById('layout');
  seen.dataset.viewport=document.documentElement.clientWidth;
  seen.dataset.newestLeft=Math.round(r.left);seen.dataset.newestRight=Math.round(r.right);
  seen.dataset.namesRight=Math.round(names.right);
  t.addEventListener('mouseover',function(e){
    var c=e.target.closest('td');if(!c)return;
    document.querySelectorAll('.hl').forEach(function(x){x.classList.remove('hl')});
    c.parentNode.classList.add('hl');
    document.querySelectorAll('td[data-version="'+c.dataset.version+'"]').forEach(function(x){x.classList.add('hl')});
  });
  var n=document.querySelectorAll('td.transition').length;
  document.getElementById('summary').textContent=
    t.tBodies[0].rows.length+' rows x '+(t.tHead.rows[0].cells.length-1)+' releases, '+n+' transitions';
  seen.dataset.newest=last.textContent;
})();
"""


def _pairing(engine: str, versions: list[str], with_: dict) -> list[str]:
    return [why for _, why in pairing_lines(engine, versions, with_)]


def _state_css(palette: dict = PALETTE) -> str:
    return "".join(f'td[data-state="{s}"]{{background:{bg};color:{fg}}}' for s, (bg, fg) in palette.items())


def legend(palette: dict = PALETTE) -> str:
    """One swatch per state, in the cells' colours."""
    return "".join(f'<span style="background:{bg};color:{fg}">{escape(s)}</span>' for s, (bg, fg) in palette.items())


def page(title: str, heading: str, intro: str, said: str, corner: str, head: str, body: str, after: str = "",
         paired: str = "", palette: dict = PALETTE) -> str:  # fmt: skip
    """The page around a matrix (``intro``, ``said``, ``head``, ``body``, ``after``: HTML):
    its sticky header row (``head``: a <th> per release, ``paired``: more header rows) and
    first column (``corner`` names it), scrolled to the newest release on load."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}{_state_css(palette)}</style></head><body>"
        f"<h1>{escape(heading)}</h1>"
        f'<p>{intro}<span id="summary"></span><span id="layout"></span></p>'
        f'{said}<div class="legend">{legend(palette)}</div>'
        f'<div id="wrap"><table id="matrix"><thead><tr><th class="row">{escape(corner)}</th>{head}</tr>{paired}</thead>'
        f"<tbody>{body}</tbody></table></div>{after}<script>{JS}</script></body></html>\n"
    )


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


def op_label(rid: str, i: int, versions: list[str], matrix: dict[str, list[dict]]) -> tuple[str, str]:
    """An op row's (kind, file): as the newest release that has the op reads it."""
    for v in reversed(versions):
        r = next((r for r in matrix[v] if r["id"] == rid), None)
        o = next((o for o in r["ops"] if o["index"] == i), None) if r else None
        if o:
            return o["kind"], o["file"]
    return "", ""


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


def paired_rows(versions: list[str], with_: dict) -> str:
    """A header row per other engine: its release paired with each column (``with_``:
    {version: {engine: {"version", "by"}}})."""
    paired = ""
    for e in sorted({e for v in versions for e in with_.get(v, {})}):
        cells = "".join(
            f'<th data-engine="{escape(e)}" data-version="{escape(v)}" title="{escape(with_[v][e]["by"])}">'
            f"{escape(with_[v][e]['version'])}</th>"
            if e in with_.get(v, {})
            else "<th>-</th>"
            for v in versions
        )
        paired += f'<tr class="with"><th class="row">with {escape(e)}</th>{cells}</tr>'
    return paired


def render(engine: str, spec: str, versions: list[str], matrix: dict[str, list[dict]], changes=None, with_=None) -> str:
    """The page.  ``with_``: {version: {engine: {"version", "by"}}}, the other engines'
    release each column was judged with: a header row per engine."""
    with_ = with_ or {}
    head = "".join(f"<th>{escape(v)}</th>" for v in versions)
    paired = paired_rows(versions, with_)
    said = "".join(f"<p>{escape(why)}</p>" for why in _pairing(engine, versions, with_))
    body = []
    for rid, op, cells in rows(versions, matrix):
        tds, prev = [], None
        for v, (state, title) in zip(versions, cells, strict=True):
            cls = ""
            if prev is not None and state != prev:
                # an op leaving (or entering) play where the recipe hands over to another
                # variant is no change of its verdict: a hand-over, not a transition
                cls = ' class="handover"' if "none" in (state, prev) else ' class="transition"'
            tds.append(
                f'<td{cls} data-recipe="{escape(rid)}" data-op="{escape(op)}" data-version="{escape(v)}" '
                f'data-state="{escape(state)}" title="{escape(title)}">{escape(state)}</td>'
            )
            prev = state
        kind = "op" if op else "recipe"
        if op:
            okind, ofile = op_label(rid, int(op.split("#")[1]), versions, matrix)
            name = f"{rid} {op} {okind} {ofile}"
            label = (
                f'{escape(rid)} {escape(op)} <span class="kind">{escape(okind)}</span> '
                f'<span class="file">{escape(ofile)}</span>'
            )
        else:
            name, label = rid, escape(rid)
        body.append(f'<tr class="{kind}"><th class="row" title="{escape(name)}">{label}</th>{"".join(tds)}</tr>')
    listed = ""
    if changes:
        items = "".join(
            f"<li>{escape(c[0])}{' ' + escape(c[1]) if c[1] else ''}: {escape(c[2])} &rarr; {escape(c[3])}: "
            f"{escape(c[4])} &rArr; {escape(c[5])}</li>"
            for c in changes
        )
        listed = f"<h2>Changes (bisect)</h2><ul>{items}</ul>"
    intro = (
        f"{escape(engine)}: {len(versions)} releases, each judged pristine. A cell with a thick left edge "
        "changed state since the release before it; hover a cell for where the op stands and why. "
    )
    return page(f"patchkit drift {spec}", f"patchkit drift --across {spec}", intro, said, "recipe / op", head,
                "".join(body), listed, paired)  # fmt: skip
