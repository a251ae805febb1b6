"""Provenance by proof: an edit is patchkit's only where patchkit's own record proves it.

"The pristine release lacks this edit, so patchkit must have written it" is an argument by
elimination, and it is wrong whenever someone else made the edit: a user who set a default
by hand, or widened a gate in their own formatting, would see ``applied``, and ``revert``
would destroy their work.  So when an apply writes an op, the journal records the op, the
file of its site and a digest of the code the edit left at the site (``digest``: what the
op's ``site_text`` reads there).  A later reader takes an edit that is there for
patchkit's only when

* the file is byte for byte what patchkit last wrote (the journal's digest of the file), or
* the op's site holds exactly the bytes the record names (the file changed elsewhere), or
* a patched wheel patchkit built installed it (its ``patchkit.json``),

in the target's journal or in its mirror under the user's state directory
(patchkit/base/journal.py).  Anything else that is there is upstream's (the pristine release
holds it at the site) or someone else's (``someone-else``), and is never taken back.
"""

from __future__ import annotations

from typing import Any

from patchkit.base.journal import mirrored_site, sha256

AS_WRITTEN = "the file is byte for byte what patchkit wrote"


def digest(impl: Any, scope: Any, located: Any) -> str:
    """The digest of the code at the site ``located`` found in ``scope`` ("" when there is
    no site to read)."""
    if not located.nodes:
        return ""
    return sha256(impl.site_text(scope, located).encode("utf-8", "surrogateescape"))


def of_verdict(ev: Any) -> str:
    """The digest of the code at a judged site, as the judge found it (its own scope, or the
    whole text for a text op)."""
    impl = ev.impl or ev.op.impl
    if not ev.located.nodes:
        return ""
    if all(isinstance(n, int) for n in ev.located.nodes):
        if impl.language == "python":
            return ""  # a site found by line alone (edited.py): no node to read
        return digest(impl, ev.file.text, ev.located)
    return digest(impl, None, ev.located)


def recorded(session: Any, recipe: Any, op: Any, ev: Any) -> str:
    """Why patchkit's record proves it wrote the edit at the judged site, or "" when none
    does."""
    j = session.journal(op.engine)
    if op.index in j.by_wheel(op.engine, recipe.id):
        return "written into the patched wheel installed here (its patchkit.json)"
    entry = j.written(op.engine, ev.file.logical)
    if (
        op.index in j.applied_ops(op.engine, recipe.id)
        and entry is not None
        and entry["sha256"] == sha256(ev.file.original)
    ):
        return AS_WRITTEN
    sources = (  # the mirror is read only when the journal does not prove it (what it read keys the caches)
        ("patchkit's journal", lambda: j.site(op.engine, recipe.id, op.index)),
        ("the journal's mirror", lambda: mirrored_site(session.mirror(op.engine), op.engine, recipe.id, op.index)),
    )
    here = None
    for where, site_of in sources:
        site = site_of()
        if site is None or site["file"] != ev.file.logical:
            continue
        if here is None:
            here = of_verdict(ev)
        if here and site["digest"] == here:
            return f"{where} records these very bytes at the site"
    return ""
