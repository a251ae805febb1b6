"""Patched wheels: the released wheel of an engine, patched by the same engine, relabelled.

A fleet installs a wheel, not a tree.  ``build`` takes the release wheel from the package
index (cached, hash-checked against the pin when the version is the pinned one), unpacks
it into a private temp dir, applies the recipes there exactly as ``patchkit apply`` would
(Session, plan_apply, commit: all edits verified, or nothing is built), and zips it again:

* the version gets a PEP 440 local label, the label given and a short digest of the recipes
  the wheel carries (``0.5.9`` -> ``0.5.9+sm120.1a2b3c4d``: ``recipes_digest``), in the
  dist-info directory name, METADATA's ``Version:`` and the file name.  A changed recipe is
  a new version, so pip installs it over the old build instead of saying "already installed";
* ``<dist-info>/patchkit.json`` names the recipes and their sha256, and the source wheel,
  and (``profile``) the bundles and recipes built: what ``patchkit run`` guards a host
  installed from the wheels against, with no profile written on the host;
* RECORD is written anew, one row per file (sha256, urlsafe base64, no padding; size);
* the zip is reproducible: entries sorted (dist-info last, RECORD at the very end), one fixed
  timestamp (SOURCE_DATE_EPOCH, else 1980-01-01), modes 644/755, deflate at a fixed level.
  The same inputs give the same bytes.

patchkit's own state (``.patchkit/``) never goes into the wheel.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from patchkit import __version__
from patchkit.base import fsio
from patchkit.base.errors import PatchkitError
from patchkit.base.model import Recipe, per_engine
from patchkit.base.results import RecipeResult
from patchkit.base.states import State
from patchkit.base.target import ENGINES, open_target
from patchkit.core import record
from patchkit.upstream import fetch

EPOCH_1980 = (1980, 1, 1, 0, 0, 0)
COMPRESSLEVEL = 6
STATE_DIR = ".patchkit"


@dataclass(frozen=True)
class Source:
    engine: str
    version: str


@dataclass
class Built:
    engine: str
    dist: str
    base_version: str
    version: str
    path: Path
    sha256: str
    source_wheel: str
    source_sha256: str
    recipes: list[dict]
    seconds: float
    recipes_digest: str = ""  # the label's last part (recipes_digest)

    def to_json(self) -> dict:
        return {
            "engine": self.engine,
            "dist": self.dist,
            "base_version": self.base_version,
            "version": self.version,
            "path": str(self.path),
            "sha256": self.sha256,
            "source_wheel": self.source_wheel,
            "source_sha256": self.source_sha256,
            "recipes": self.recipes,
            "recipes_digest": self.recipes_digest,
            "seconds": round(self.seconds, 2),
        }


# -- arguments -------------------------------------------------------------------------------


def parse_from(value: str, pins: Optional[dict] = None) -> Source:
    """``ENGINE==VERSION`` (or ``ENGINE``: the pinned version).  ENGINE may be the index name."""
    by_dist = {canonicalize_name(i.dist): e for e, i in ENGINES.items()}
    name, sep, version = value.partition("==")
    name = name.strip()
    engine = name if name in ENGINES else by_dist.get(canonicalize_name(name))
    if engine is None:
        raise PatchkitError(
            f"--from {value!r}: unknown engine {name!r}", f"engines: {', '.join(ENGINES)}; e.g. --from sglang==0.5.9"
        )
    version = version.strip()
    if not sep:
        if not pins or engine not in pins:
            raise PatchkitError(
                f"--from {value!r}: no version given and no pin for {engine}", f"write --from {engine}==VERSION"
            )
        version = pins[engine].version
    try:
        Version(version)
    except InvalidVersion:
        raise PatchkitError(f"--from {value!r}: {version!r} is not a version", f"e.g. --from {engine}==0.5.9") from None
    return Source(engine, version)


def local_label(label: str) -> str:
    """A PEP 440 local label, normalised ('sm120', 'autotune-cutlass' -> 'autotune.cutlass')."""
    norm = re.sub(r"[^A-Za-z0-9]+", ".", label).strip(".").lower()
    try:
        if not norm or Version(f"0+{norm}").local != norm:
            raise InvalidVersion(label)
    except InvalidVersion:
        raise PatchkitError(
            f"--label {label!r}: not usable as a PEP 440 local version label",
            "use letters, digits and dots, e.g. --label sm120 or --label sm120.v2",
        ) from None
    return norm


DIGEST_CHARS = 8


def recipes_digest(recipes: list[Recipe]) -> str:
    """A short digest of the recipes' content (each file's sha256, by id): the last part of a
    wheel's local label.  The same recipes give the same digest; any byte changed in one of
    them gives another."""
    h = hashlib.sha256()
    for r in sorted(recipes, key=lambda r: r.id):
        h.update(f"{r.id}\0{r.sha256}\n".encode())
    return h.hexdigest()[:DIGEST_CHARS]


def labelled(version: str, label: str) -> str:
    v = Version(version)
    return str(Version(f"{v}.{label}" if v.local else f"{v}+{label}"))


def check_engines(recipes: list[Recipe], sources: list[Source]) -> None:
    """A recipe spanning two engines is one patch: build both wheels, or neither."""
    given = {s.engine for s in sources}
    if len(given) != len(sources):
        raise PatchkitError("--from names the same engine twice", "give one --from per engine")
    for r in recipes:
        missing = sorted({op.engine for op in r.ops} - given)
        if missing:
            pin = " ".join(f"--from {e}==VERSION" for e in missing)
            raise PatchkitError(
                f"recipe {r.id} also edits {', '.join(missing)}: a wheel of one engine would carry half of it",
                f"add {pin} to build the matching wheels in the same run, or leave {r.id} out",
            )
    unused = sorted(given - {op.engine for r in recipes for op in r.ops})
    if unused:
        raise PatchkitError(
            f"no selected recipe edits {', '.join(unused)}", "drop that --from, or name a recipe that edits it"
        )


# -- zip -------------------------------------------------------------------------------------


def zip_date_time() -> tuple[int, int, int, int, int, int]:
    sde = os.environ.get("SOURCE_DATE_EPOCH")
    if sde:
        try:
            t = time.gmtime(max(int(sde), 315532800))  # zip cannot say anything before 1980
        except ValueError:
            raise PatchkitError(
                f"SOURCE_DATE_EPOCH={sde!r} is not a number of seconds", "unset it, or give an integer"
            ) from None
        return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec - t.tm_sec % 2)
    return EPOCH_1980


def _order(name: str, dist_info: str) -> tuple:
    in_di = name.startswith(dist_info + "/")
    return (in_di, name == f"{dist_info}/RECORD", name)


def write_wheel(tree: Path, dist_info: str, dest: Path, executables: set[str]) -> None:
    """Zip ``tree`` into ``dest`` reproducibly, with a RECORD that matches every entry."""
    names = []
    for dirpath, dirnames, filenames in os.walk(tree):
        rel_dir = Path(dirpath).relative_to(tree).as_posix()
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != STATE_DIR]
        for fn in filenames:
            names.append(fn if rel_dir == "." else f"{rel_dir}/{fn}")
    rec_name = f"{dist_info}/RECORD"
    names = sorted(set(names) | {rec_name}, key=lambda n: _order(n, dist_info))
    rows = []
    for n in names:
        if n == rec_name:
            continue
        data = (tree / n).read_bytes()
        rows.append((n, record.hash_of(data), str(len(data))))
    rows.append((rec_name, "", ""))
    (tree / rec_name).write_bytes(record.render(rows))
    dt = zip_date_time()
    # The output directory may be shared: the temp is patchkit's own (random name, O_EXCL,
    # never through a link planted there), and the rename replaces whatever stands at dest.
    # A run killed while writing (7 MB and more) left its temp: the next run removes such
    # leftovers (patchkit's temp form, regular, this user's, held by no live run).
    fsio.sweep_temps(dest.parent, ".whl")
    try:
        fd, tmp = fsio.new_temp(dest, hold=True)
    except OSError as e:
        raise fsio.cannot_write(dest, e) from None
    try:
        with os.fdopen(fd, "w+b") as f:
            os.fchmod(f.fileno(), 0o644)
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESSLEVEL) as z:
                for n in names:
                    zi = zipfile.ZipInfo(n, date_time=dt)
                    zi.compress_type = zipfile.ZIP_DEFLATED
                    zi.create_system = 3  # unix, so the mode bits below mean what they say
                    zi.external_attr = ((0o100755 if n in executables else 0o100644) & 0xFFFF) << 16
                    data = (tree / n).read_bytes()
                    z.writestr(zi, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=COMPRESSLEVEL)
        os.replace(tmp, dest)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):  # a directory in the way, a full disk: the environment, not a bug
            raise fsio.cannot_write(dest, e) from None
        raise


def check_wheel(path: Path) -> list[str]:
    """Problems with a wheel's RECORD: entries missing from it, or whose hash or size differ."""
    problems = []
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        recs = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
        if len(recs) != 1:
            return [f"{path.name}: expected one .dist-info/RECORD, found {len(recs)}"]
        rows = {p: (h, s) for p, h, s in record.parse(z.read(recs[0]))}
        for n in names:
            if n == recs[0]:
                continue
            if n not in rows:
                problems.append(f"{n}: in the wheel but not in RECORD")
                continue
            data = z.read(n)
            h, s = rows.pop(n)
            if h != record.hash_of(data) or s != str(len(data)):
                problems.append(f"{n}: hash or size differs from RECORD")
        rows.pop(recs[0], None)
        problems += [f"{n}: in RECORD but not in the wheel" for n in rows]
    return problems


# -- build -----------------------------------------------------------------------------------


def _dist_info(tree: Path, dist: str, version: str) -> Path:
    norm = canonicalize_name(dist).replace("-", "_")
    found = [
        d
        for d in tree.glob("*.dist-info")
        if canonicalize_name(d.name[: -len(".dist-info")].rsplit("-", 1)[0]) == canonicalize_name(dist)
    ]
    if len(found) != 1:
        raise PatchkitError(
            f"the {dist} {version} wheel has {len(found)} .dist-info directories for {dist}",
            f"expected {norm}-{version}.dist-info; is this a wheel of {dist}?",
        )
    return found[0]


def _set_metadata_version(meta: bytes, version: str) -> bytes:
    text = meta.decode("utf-8")
    head, sep, body = text.partition("\n\n")
    new_head, n = re.subn(r"(?m)^Version:[ \t]*\S.*$", f"Version: {version}", head, count=1)
    if n != 1:
        raise PatchkitError(
            "the wheel's METADATA has no Version: header",
            "the wheel is damaged; fetch it again (delete it from the patchkit cache)",
        )
    return (new_head + sep + body).encode("utf-8")


def build_one(
    src: Source,
    recipes: list[Recipe],
    label: str,
    out_dir: Path,
    pin_sha: str = "",
    ignore_range: bool = False,
    say: Callable[[str], None] = lambda s: None,
    profile: Optional[dict] = None,
) -> Built:
    from patchkit.core import learned, transaction
    from patchkit.core.judge import evaluate
    from patchkit.core.planner import plan_apply
    from patchkit.core.session import Session
    from patchkit.core.verdict import results
    from patchkit.upstream.pristine import RELEASES

    t0 = time.monotonic()
    info = ENGINES[src.engine]
    whl = fetch.fetch_wheel(info.dist, src.version, pin_sha, say=say)
    src_sha = fetch.file_sha256(whl)
    wheel_name_parts = whl.name[: -len(".whl")].split("-")
    if len(wheel_name_parts) not in (5, 6):
        raise PatchkitError(f"{whl.name}: not a wheel file name (name-version-[build-]python-abi-platform.whl)")
    mine = per_engine(recipes, src.engine)
    digest = recipes_digest(mine)
    label = f"{label}.{digest}"
    new_version = labelled(src.version, label)
    with tempfile.TemporaryDirectory(prefix=f"patchkit-wheel-{src.engine}-") as tmp:
        tree = Path(tmp) / "tree"
        executables = set()
        with zipfile.ZipFile(whl) as z:
            for zi in z.infolist():
                if zi.filename.startswith(("/", "../")) or "/../" in zi.filename:
                    raise PatchkitError(
                        f"{whl.name}: entry {zi.filename!r} leads outside the wheel", "refusing a malformed wheel"
                    )
                if (zi.external_attr >> 16) & 0o111:
                    executables.add(zi.filename)
            z.extractall(tree)
        old_di = _dist_info(tree, info.dist, src.version)
        if Version(old_di.name[: -len(".dist-info")].rsplit("-", 1)[1]) != Version(src.version):
            raise PatchkitError(f"{whl.name}: its {old_di.name} does not say version {src.version}")
        target = open_target(src.engine, tree)
        session = Session({src.engine: target}, releases=RELEASES)
        plan = plan_apply(session, mine, ignore_range=ignore_range)
        if plan.blockers:
            raise WheelBlocked(src, plan.blockers)
        bad = [r for r in plan.results if r.state not in (State.APPLIED, State.UPSTREAM)]
        if bad:
            raise WheelBlocked(src, [f"{r.id}: {r.state}" + (f" ({r.message})" if r.message else "") for r in bad])
        with transaction.locked(session.targets):  # the one way a plan is written
            transaction.commit(transaction.freeze(session, plan, "apply"))
        # Black's rule: judge the result once more; every recipe must read applied now.
        again = Session({src.engine: open_target(src.engine, tree)}, releases=RELEASES)
        after = results(again, evaluate(again, mine))
        learned.keep(session.learned)  # what judging learned, cached once it is done
        learned.keep(again.learned)
        not_done = [r for r in after if r.state not in (State.APPLIED, State.UPSTREAM)]
        if not_done:
            raise WheelBlocked(src, [f"{r.id}: reads {r.state} after patching" for r in not_done])
        states = _states(plan.results)
        written = {r.id: [o.index for o in r.ops if o.state == State.APPLIED] for r in plan.results}
        # Relabel: dist-info name, METADATA, file name.
        stem = old_di.name[: -len(".dist-info")].rsplit("-", 1)[0]
        new_di = tree / f"{stem}-{new_version}.dist-info"
        old_di.rename(new_di)
        meta = new_di / "METADATA"
        meta.write_bytes(_set_metadata_version(meta.read_bytes(), new_version))
        provenance = {
            "tool": "patchkit",
            "patchkit_version": __version__,
            "label": label,
            "recipes_digest": digest,
            "engine": src.engine,
            "base": {"dist": info.dist, "version": src.version, "wheel": whl.name, "sha256": src_sha},
            "version": new_version,
            # "ops": the ops patchkit wrote (not those the release already had); status reads this.
            "recipes": [{"id": r.id, "sha256": r.sha256, "ops": written[r.id], "state": states[r.id]} for r in mine],
        }
        if profile:
            # the names built ({"bundles", "recipes"}): the profile a host installed from
            # these wheels is guarded against (`patchkit run`), with no `apply --save` first
            provenance["profile"] = {k: list(profile.get(k, ())) for k in ("bundles", "recipes")}
        (new_di / "patchkit.json").write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
        executables = {n.replace(f"{old_di.name}/", f"{new_di.name}/", 1) for n in executables}
        wheel_name_parts[1] = new_version.replace("-", "_")
        out_dir.mkdir(parents=True, exist_ok=True)
        dest = out_dir / ("-".join(wheel_name_parts) + ".whl")
        write_wheel(tree, new_di.name, dest, executables)
    problems = check_wheel(dest)
    if problems:
        raise PatchkitError(
            f"{dest.name}: the built wheel does not check out: {problems[0]}",
            "this is a patchkit bug; please report it with the command line",
        )
    return Built(
        engine=src.engine,
        dist=info.dist,
        base_version=src.version,
        version=new_version,
        path=dest,
        sha256=fetch.file_sha256(dest),
        source_wheel=whl.name,
        source_sha256=src_sha,
        recipes=provenance["recipes"],
        seconds=time.monotonic() - t0,
        recipes_digest=digest,
    )


def _states(res: list[RecipeResult]) -> dict[str, str]:
    # "applied" = patchkit wrote it into this wheel; "upstream" = the release already does it.
    return {r.id: r.state for r in res}


class WheelBlocked(Exception):
    """The recipes do not apply cleanly to this release; nothing was built for it."""

    def __init__(self, src: Source, reasons: list[str]) -> None:
        super().__init__(f"{src.engine}=={src.version}")
        self.source = src
        self.reasons = reasons


def build(
    recipes: list[Recipe],
    sources: list[Source],
    label: str,
    out_dir: Path,
    pins: Optional[dict] = None,
    ignore_range: bool = False,
    say: Callable[[str], None] = lambda s: None,
    profile: Optional[dict] = None,
) -> list[Built]:
    """One patched wheel per engine in ``sources``; all built, or none left in ``out_dir``."""
    check_engines(recipes, sources)
    label = local_label(label)
    built: list[Built] = []
    try:
        for src in sources:
            pin = (pins or {}).get(src.engine)
            pin_sha = pin.sha256 if pin is not None and pin.version == src.version else ""
            built.append(build_one(src, recipes, label, Path(out_dir), pin_sha, ignore_range, say, profile))
    except BaseException:
        # A recipe spanning two engines is one patch: never leave half of it on disk.
        for b in built:
            b.path.unlink(missing_ok=True)
        raise
    return built
