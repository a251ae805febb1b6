"""`sync`: materialise the pinned upstream trees in the workspace."""

from __future__ import annotations

from patchkit.base import fsio
from patchkit.base.errors import FetchError, PatchkitError
from patchkit.commands import OK, say
from patchkit.core import pins as pins_mod
from patchkit.core.project import Project
from patchkit.upstream import fetch


def sync(
    project: Project,
    engines: tuple[str, ...] = (),
    source: str = "index",
    mirrors: tuple[str, ...] = (),
    force: bool = False,
) -> int:
    if project.pins_path is None:
        raise PatchkitError(
            "sync fetches the releases upstream_pins.toml pins, and there is none here or above",
            "pin one: printf '[sglang]\\nversion = \"0.5.9\"\\n' > upstream_pins.toml (sync records its sha256); or "
            "work on a tree you have, with no sync: `patchkit status --python PY` or `-t ENGINE=PATH`",
        )
    pins = project.pins()
    for e in engines:
        if e not in pins:
            raise PatchkitError(f"no pin for {e!r} in {project.pins_path}", f"pinned: {', '.join(pins)}")
    mirror_of = {}
    for m in mirrors:
        if "=" not in m:
            raise PatchkitError(f"--mirror {m!r}: expected ENGINE=PATH")
        k, v = m.split("=", 1)
        mirror_of[k] = v
    for engine in engines or tuple(pins):
        pin = pins[engine]
        dest = project.tree(engine)
        want = {
            "engine": engine,
            "source": source,
            "version": pin.version,
            "rev": pin.rev if source == "git" else None,
            "sha256": pin.sha256 if source == "index" else None,
        }
        have = fetch.tree_source(dest)
        if have and all(have.get(k) == v for k, v in want.items() if k != "sha256" or v) and not force:
            say(f"{engine} {pin.version}: up to date in {dest}")
            continue
        if dest.exists() and not force:
            was = f"{have.get('version')} from {have.get('source')}" if have else "an unknown tree"
            raise PatchkitError(
                f"{dest} holds {was}, not {engine} {pin.version} from {source}",
                "pass --force to replace it (patches applied there are lost; `patchkit status` shows them)",
            )
        if source == "index":
            whl = fetch.fetch_wheel(pin.index, pin.version, pin.sha256, say=lambda s: say(s, err=True))
            actual = fetch.file_sha256(whl)
            if not pin.sha256:
                pins_mod.set_value(project.pins_path, engine, "sha256", actual)
                pins_mod.set_value(project.pins_path, engine, "wheel", whl.name)
                say(f"{engine}: recorded sha256 {actual} in {project.pins_path.name}", err=True)
            fetch.unpack(whl, dest, {**want, "sha256": actual, "wheel": whl.name})
        else:
            from patchkit.upstream import gitsrc

            url = mirror_of.get(engine, pin.repo)
            if not url or not pin.rev:
                raise FetchError(
                    f"{engine}: the pin has no repo/rev to clone", "add repo and rev to upstream_pins.toml"
                )
            fsio.clear_entry(dest)  # a tree there, or a link planted in its place (unlinked, not followed)
            gitsrc.clone(url, pin.rev, dest, want, say=lambda s: say(s, err=True))
        say(f"{engine} {pin.version}: synced into {dest} (from {source})")
    return OK
