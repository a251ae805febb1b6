"""`doctor`: check that the interpreter that serves runs the patched engines, on a GPU they fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from patchkit.base.errors import PatchkitError
from patchkit.commands import say
from patchkit.core.project import Project
from patchkit.fleet import doctor as D


def doctor(
    project: Project, python: Optional[str] = None, as_json: bool = False, facts_file: Optional[str] = None
) -> int:
    """Collect facts (or read recorded ones), judge them, print; exit 0 if all is well, else 1."""
    if facts_file:
        data = json.loads(Path(facts_file).read_text())
        facts = data.get("facts", data)
    else:
        facts = D.collect(project, python)
    findings = D.judge(facts)
    code = D.exit_code(findings)
    if as_json:
        say(
            json.dumps(
                {"command": "doctor", "ok": code == 0, "findings": [f.to_json() for f in findings], "facts": facts},
                indent=2,
                sort_keys=True,
            )
        )
    else:
        say(D.render(findings))
        say("\n" + D.summary(findings))
    return code


def facts_file(value: Optional[str]) -> Optional[str]:
    """--facts FILE must be a JSON object recorded by `doctor --json` (checked as the option
    is read, so that a missing or garbled file is a usage error, exit 2, not a failure
    inside doctor)."""
    if value is None:
        return None
    from patchkit.base.config import decode_utf8, read_config

    hint = "pass the file `patchkit doctor --json` wrote"
    raw = read_config(Path(value), "facts file", hint)
    try:
        data = json.loads(decode_utf8(raw, value, "facts file"))
    except (ValueError, RecursionError) as e:
        raise PatchkitError(f"{value}: not JSON ({e})", hint) from None
    if not isinstance(data, dict):
        raise PatchkitError(f"{value}: holds JSON {type(data).__name__}, not the object `doctor --json` writes", hint)
    return value
