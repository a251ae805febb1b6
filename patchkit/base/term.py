"""Writing to the terminal: one line out, colour when it is wanted.

What ``click.echo`` and ``click.style`` do for patchkit's output, in a few lines and without
importing click, so that the modules below the command line (patchkit/commands/ and
down) write output without depending on it; click's layer writes through here too, so
the two cannot differ.
A test holds the bytes to click's own.

Colour: ``--color auto`` (the default) colours on a terminal unless NO_COLOR is set
(no-color.org); ``always`` and ``never`` say it outright.  Escapes are written only where
colour is on; elsewhere they are stripped, as click does.

Control characters: everything ``echo`` writes shows them escaped (``\x1b``, ``\r``,
``\u202e``), whatever the stream, so that text from a recipe (its summary, rationale, a
blocker's message) or a tree cannot move the cursor, erase a line or recolour the output:
the only escapes written are the ones ``style`` made.  JSON documents are untouched (json
escapes these characters itself); a diff, whose bytes are the patch, is written ``raw``.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional

# click's colour numbers (click/termui.py _ansi_colors), foreground.
_CODES = {
    "black": 30,
    "red": 31,
    "green": 32,
    "yellow": 33,
    "blue": 34,
    "magenta": 35,
    "cyan": 36,
    "white": 37,
    "reset": 39,
    "bright_black": 90,
    "bright_red": 91,
    "bright_green": 92,
    "bright_yellow": 93,
    "bright_blue": 94,
    "bright_magenta": 95,
    "bright_cyan": 96,
    "bright_white": 97,
}
_RESET = "\033[0m"
_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")

# None: decide per stream (a terminal, not NO_COLOR); True/False: --color always/never.
_color: Optional[bool] = None

# What a terminal acts on: C0 but tab and newline (ESC, CR, backspace...), C1 (0x9b is a CSI
# of its own) and the bidirectional overrides, which reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x80-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_OWN: set[str] = set()  # every string ``style`` returned: the escapes echo writes as they are
_own_re: Optional[re.Pattern] = None


def printable(text: str) -> str:
    """``text`` with each control character a terminal would act on escaped, as Python's
    repr writes it (``\x1b``, ``\r``, ``\u202e``)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text) if _CONTROL.search(text) else text


def _escaped(message: str) -> str:
    """``message`` with its control characters escaped, but for the styled spans ``style``
    made (their text was made printable there)."""
    global _own_re
    if not _CONTROL.search(message):
        return message
    if not _OWN:
        return printable(message)
    if _own_re is None:
        _own_re = re.compile("|".join(re.escape(x) for x in sorted(_OWN, key=len, reverse=True)))
    out, pos = [], 0
    for m in _own_re.finditer(message):
        out += [printable(message[pos : m.start()]), m.group()]
        pos = m.end()
    return "".join(out) + printable(message[pos:])


def set_color(value: Optional[str]) -> None:
    """--color auto|always|never (None: not given, nothing changes)."""
    global _color
    if value == "auto":
        _color = False if os.environ.get("NO_COLOR") else None
    elif value is not None:
        _color = value == "always"


def style(text: str, fg: Optional[str] = None) -> str:
    """``text`` in colour ``fg`` (a name of click's), reset after, as click.style writes it
    (``text`` made printable first: only the colour is an escape)."""
    global _own_re
    out = (f"\033[{_CODES[fg]}m" if fg else "") + printable(text) + _RESET
    if out not in _OWN:
        _OWN.add(out)
        _own_re = None
    return out


def _strip(stream) -> bool:
    if _color is not None:
        return not _color
    try:
        tty = stream.isatty()
    except Exception:
        tty = False
    return not tty and not type(stream).__module__.startswith("ipykernel.")


def echo(message: str = "", err: bool = False, raw: bool = False) -> None:
    """``message`` and a newline on stdout (stderr with ``err``), flushed; control
    characters escaped (unless ``raw``: a diff), and colour escapes stripped unless colour
    is on for that stream."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:  # pythonw, a daemon with its streams closed
        return
    out = (message if raw else _escaped(message)) + "\n"
    if _strip(stream):
        out = _ANSI.sub("", out)
    try:
        stream.write(out)
    except UnicodeEncodeError:  # a stream in ASCII (PYTHONIOENCODING=ascii): UTF-8, as click writes it
        stream.flush()
        stream.buffer.write(out.encode("utf-8", "replace"))
    stream.flush()
