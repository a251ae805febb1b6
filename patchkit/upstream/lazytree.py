"""A release tree read member by member: ``trees/ENGINE-VERSION`` made *sparse* for `drift`.

The wheel's central directory and RECORD come by range (patchkit/upstream/lazywheel.py);
the tree starts with the dist-info (the version, Requires-Dist) and the package's
``__init__.py`` (what ``open_target`` looks for), and ``.patchkit/sparse.json`` says it is
sparse.  Every other file comes when something reads it (patchkit/base/sparse.py):

- a file an op names, as the judge opens it (core/document.py);
- every ``*.SUFFIX`` file of the package, when the judge must search the tree for a moved
  site or a marker (core/relocate.py greps and walks exactly those): the search then sees
  the tree a whole wheel would give, so its verdict is the same.  ``extent`` says, per
  release, how far the reads went (``drift --json``: ``reads``).

Members are fetched by range, nearby ones together (a run of members whose gaps are at most
``GAP`` bytes is one request, at most ``RUN`` bytes long), each checked against the sha256
the wheel's RECORD lists before it is used, and kept once in the blob store
(``CACHE/blobs/sha256/``); a tree's file is a hard link to its blob (a copy where links
cannot be made), so releases sharing a file share its bytes on disk, and a file another
release already brought in costs no request.  ``.so``, cubins and data come only when a read
names them.

What cannot be done by ranges (an index without range support, a ``file:`` index, a member
that does not match RECORD, an inconsistent answer, a member RECORD gives no digest for)
falls back to the whole wheel, checked against the index's sha256, said once; the sparse
tree is then filled from it.  ``PATCHKIT_LAZY=0`` makes whole trees, as before."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional

from patchkit.base import sparse, store
from patchkit.upstream import recorded

GAP = 64 << 10  # bytes between two members still fetched in one request
RUN = 8 << 20  # the most bytes one request fetches
STATS = {"members": 0, "linked": 0, "runs": 0}
_WHEELS: dict[Path, object] = {}  # root -> its LazyWheel, for this process
_SEARCHED: set[tuple[Path, tuple[str, ...], str]] = set()


def _say(msg: str) -> None:
    import sys

    print(f"release tree: {msg}", file=sys.stderr)


def enabled() -> bool:
    from patchkit.upstream import lazywheel

    return lazywheel.enabled()


def _safe(name: str) -> bool:
    parts = name.split("/")
    return not (
        name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts) or parts[0].startswith(".")
    )


# -- making a sparse tree -----------------------------------------------------------------------


def make(engine: str, version: str, dest: Path, say: Callable[[str], None]) -> bool:
    """``dest`` made a sparse tree of the release's wheel; False where the wheel cannot be
    read by ranges (said once; the caller reads the whole wheel).  A FetchError (no such
    release, ...) is the caller's."""
    from patchkit.base.target import ENGINES
    from patchkit.upstream import fetch, lazywheel

    info = ENGINES[engine]
    lw = lazywheel.LazyWheel.stored(info.dist, version, say)
    if lw is None or not lw.record_digest:
        if fetch.offline():
            return False
        lw = lazywheel.LazyWheel.open(info.dist, version, say)
        if lw is None:
            return False
        say(f"{info.dist}=={version}: read by ranges from the package index (the files judged, not the wheel)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    try:
        (tmp / ".patchkit").mkdir()
        doc = {"engine": engine, "dist": info.dist, "version": version, "wheel": lw.filename}
        (tmp / sparse.MARK).write_text(json.dumps(doc, sort_keys=True) + "\n")
        first = [n for n in lw.namelist() if n.split("/", 1)[0].endswith(".dist-info")]
        first.append(f"{info.package}/__init__.py")
        _bring(lw, tmp, [n for n in first if n in lw._members], say)
        # "sparse" in place of "version": a patchkit that knows no sparse tree reads none
        source = {"engine": engine, "source": "index", "sparse": version, "wheel": lw.filename}
        recorded.seal_tree(tmp, dest, recorded.sparse_record(engine, version, lw.filename, lw.record_digest))
        fetch._into_place(tmp, dest, source)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def fill(root: Path, say: Callable[[str], None]) -> None:
    """Make a sparse tree whole, in place: the wheel downloaded and checked against the
    index's sha256, each file it lacks put in, and each file read by range before checked
    against the wheel's bytes (RECORD vouched for it; the index's sha256 now vouches for the
    whole), a reader meanwhile seeing each file whole or not at all; then the mark dropped."""
    import zipfile

    from patchkit.base import regular
    from patchkit.upstream import fetch

    doc = _mark(root)
    whl = fetch.fetch_wheel(doc["dist"], doc["version"], say=say)
    with zipfile.ZipFile(regular.open_file(whl)) as z, _Dirs(root) as dirs:
        for info in z.infolist():
            name = info.filename
            if name.endswith("/") or not _safe(name):
                continue
            data = z.read(info)
            if os.path.lexists(root / name):
                try:
                    if regular.read_owned(root, name, 1 << 30) == data:
                        continue
                except (OSError, regular.NotRegular, regular.TooBig):
                    pass
            _put(root, name, data=data, dirs=dirs)
    source = {"engine": doc["engine"], "source": "index", "version": doc["version"], "wheel": whl.name}
    # whole now: tied to the checked wheel as an unpacked tree is (recorded.tree_why_not)
    record = recorded.tree_record(whl, source)
    sealed = store.sealed(recorded.KIND, root / recorded.TREE_RECORD, record) if record is not None else None
    if sealed is not None:
        _put(root, recorded.TREE_RECORD, data=sealed)
    _put(root, ".patchkit/source.json", data=(json.dumps(source, indent=1, sort_keys=True) + "\n").encode())
    try:
        os.unlink(root / sparse.MARK)
    except FileNotFoundError:
        pass


def _mark(root: Path) -> dict:
    from patchkit.base import regular
    from patchkit.base.errors import TargetError

    try:
        doc = json.loads(regular.read_owned(root, sparse.MARK, 1 << 20))
        return {k: str(doc[k]) for k in ("engine", "dist", "version", "wheel")}
    except (OSError, ValueError, KeyError, TypeError, regular.NotRegular, regular.TooBig):
        raise TargetError(
            f"{root / sparse.MARK}: not the mark patchkit writes on a sparse release tree",
            "remove the tree from patchkit's cache (patchkit makes it again)",
        ) from None


# -- reading on demand ----------------------------------------------------------------------------


def _wheel(root: Path):
    """The root's LazyWheel (its listing from the store, else read again by range), or None
    (the tree is then filled from the whole wheel)."""
    root = Path(root)
    if root not in _WHEELS:
        from patchkit.upstream import fetch, lazywheel

        doc = _mark(root)
        lw = lazywheel.LazyWheel.stored(doc["dist"], doc["version"], _say)
        if (lw is None or not lw.record_digest) and not fetch.offline() and lazywheel.enabled():
            lw = lazywheel.LazyWheel.open(doc["dist"], doc["version"], _say)
        if lw is None or not lw.record_digest:
            fill(root, _say)
            return None
        _WHEELS[root] = lw
    return _WHEELS[root]


def need(root: Path, rels: list[str]) -> None:
    lw = _wheel(root)
    if lw is None:
        return
    names = [r for r in rels if r in lw._members and _safe(r) and not os.path.lexists(root / r)]
    if names:
        _bring(lw, root, names, _say)


def need_suffix(root: Path, prefixes: list[str], suffix: str) -> None:
    key = (Path(root), tuple(sorted(prefixes)), suffix)
    if key in _SEARCHED:
        return
    lw = _wheel(root)
    if lw is None:
        return
    pre = tuple(p if p.endswith("/") or not p else p + "/" for p in prefixes)
    names = [
        n
        for n in lw._members
        if n.startswith(pre) and n.endswith(suffix) and _safe(n) and not os.path.lexists(root / n)
    ]
    if names:
        _bring(lw, root, names, _say)
    _note_search(root, prefixes, suffix)
    _SEARCHED.add(key)


def _note_search(root: Path, prefixes: list[str], suffix: str) -> None:
    """``.patchkit/searched/NAME``: a search of the tree read every ``*suffix`` file under
    these directories (``extent`` reports it)."""
    label = ",".join(sorted(p.rstrip("/") for p in prefixes)).replace("/", "%") + "*" + (suffix or "")
    p = root / ".patchkit" / "searched" / label[:200]
    try:
        p.parent.mkdir(exist_ok=True)
        p.touch()
    except OSError:
        pass


def extent(root: Path) -> Optional[dict]:
    """How far a sparse tree's reads went: {"files": files here, "of": members of the
    wheel, "searched": ["DIR*.SUFFIX", ...] (the searches that read every such file)}; None
    for a whole tree."""
    if not sparse.is_sparse(root):
        return None
    files = 0
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (dirpath == str(root) and d == ".patchkit")]
        files += len(names)
    try:
        searched = sorted(n.replace("%", "/") for n in os.listdir(root / ".patchkit" / "searched"))
    except OSError:
        searched = []
    out: dict = {"files": files, "searched": searched}
    lw = _WHEELS.get(Path(root))
    if lw is None:
        from patchkit.upstream import lazywheel

        doc = _mark(root)
        lw = lazywheel.LazyWheel.stored(doc["dist"], doc["version"], _say)
    if lw is not None:
        out["of"] = len(lw._members)
    return out


# -- fetching members ------------------------------------------------------------------------------


def _runs(lw, names: list[str]) -> list[list[str]]:
    """The members in wheel order, cut into runs one request each fetches."""
    order = sorted(names, key=lambda n: lw._members[n][0])
    runs: list[list[str]] = []
    for n in order:
        start, end = lw._members[n][:2]
        if runs:
            first, last = lw._members[runs[-1][0]][0], lw._members[runs[-1][-1]][1]
            if start - last <= GAP and end - first <= RUN:
                runs[-1].append(n)
                continue
        runs.append([n])
    return runs


def _bring(lw, root: Path, names: list[str], say: Callable[[str], None]) -> None:
    """Put each member of ``names`` into the tree at ``root``: from the store, else by
    range (checked against RECORD), else from the whole wheel (checked against the index)."""
    with _Dirs(root) as tree:
        _bring_into(lw, tree, names, say)


def _bring_into(lw, tree: "_Dirs", names: list[str], say: Callable[[str], None]) -> None:
    from patchkit.base.errors import FetchError
    from patchkit.base.progress import working
    from patchkit.upstream import fetch, lazywheel

    root = tree.base
    todo = []
    for n in names:
        digest = lw.record_digest if n == lw.record_name else lw._record.get(n, "")
        if digest and store.get_blob(digest) is not None:
            _put(root, n, digest=digest, dirs=tree)
        elif digest:
            todo.append(n)
        else:
            lazywheel.say_once(say, f"{lw.filename}: {n} has no sha256 in the wheel's RECORD; the whole wheel is read")
            _put(root, n, data=lw._open_whole().read(n), dirs=tree)
    if not todo:
        return
    if fetch.offline() or lw._whole is not None:
        _from_whole(lw, root, todo, say, None)
        return
    runs = _runs(lw, todo)
    size = sum(lw._members[r[-1]][1] - lw._members[r[0]][0] for r in runs)
    try:
        if lw._file is None:
            lw._file = lazywheel.RangeFile(lw._pick["url"], lw.size)
        with working(f"reading {len(todo)} file(s) of {lw.filename} by ranges ({size / 1e6:.1f} MB)"):
            for run in runs:
                start, end = lw._members[run[0]][0], lw._members[run[-1]][1]
                lw._file.fetch(start, end)
                STATS["runs"] += 1
                try:
                    for n in run:
                        data = lw._range_read(n)
                        digest = lw.record_digest if n == lw.record_name else lw._record[n]
                        if hashlib.sha256(data).hexdigest() != digest:
                            raise lazywheel.RangeError(f"{n} does not match the wheel's RECORD")
                        kept = store.put_blob(digest, data)
                        STATS["members"] += 1
                        _put(root, n, digest=digest if kept else "", data=data, dirs=tree)
                finally:
                    lw._file.forget(start, end)
    except (lazywheel.RangeError, FetchError) as e:
        _from_whole(lw, root, [n for n in todo if not os.path.lexists(root / n)], say, e)


class _Dirs:
    """The directories under ``base`` that a batch of files goes into, each opened once (a
    few at a time): every component checked with O_NOFOLLOW (regular.open_dir, made where
    missing), and each file made and renamed through the descriptor, so that it lands in the
    directory checked, whatever is renamed or planted meanwhile.  (A path checked once per
    file cost ~20 system calls a file; a search brings thousands.)"""

    KEEP = 32  # descriptors held at once; a wheel lists a directory's files together

    def __init__(self, base: Path) -> None:
        from collections import OrderedDict

        self.base = Path(base)
        self._fds: "OrderedDict[str, int]" = OrderedDict()

    def __enter__(self) -> "_Dirs":
        return self

    def __exit__(self, *exc) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])

    def fd(self, rel: str) -> int:
        """The descriptor of directory ``rel`` (``/``-separated, "" for the base)."""
        fd = self._fds.get(rel)
        if fd is not None:
            self._fds.move_to_end(rel)
            return fd
        from patchkit.base import fsio, regular

        try:
            fd = regular.open_dir(self.base, rel.split("/") if rel else [], create=True)
        except OSError:
            if rel:
                fsio.owned_dir(self.base, rel)  # the TargetError that says what is in the way
            raise
        self._fds[rel] = fd
        if len(self._fds) > self.KEEP:
            os.close(self._fds.popitem(last=False)[1])
        return fd


def _made(fd: int, base: str, make: Callable[[str], None]) -> str:
    """A fresh temporary name beside ``base`` in directory ``fd``, made by ``make(name)``
    (which fails with FileExistsError where the name is taken)."""
    import secrets

    for _ in range(100):
        tmp = f".{base[:16]}-{secrets.token_hex(6)}.lazy"
        try:
            make(tmp)
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {base}")


def _write_new(fd: int, name: str, data: bytes) -> None:
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    with os.fdopen(out, "wb") as f:
        f.write(data)


def _unlink(fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=fd)
    except OSError:
        pass


def _from_whole(lw, root: Path, names: list[str], say: Callable[[str], None], why: Optional[Exception]) -> None:
    """The members from the whole wheel, downloaded once and checked against the index's
    sha256 (what was read by range and not checked is never used)."""
    if why is not None:
        lw._fallback_said(why)
    z = lw._open_whole()
    with _Dirs(root) as dirs:
        for n in names:
            _put(root, n, data=z.read(n), dirs=dirs)


def _put(root: Path, name: str, digest: str = "", data: Optional[bytes] = None, dirs: Optional[_Dirs] = None) -> None:
    """The tree's file ``name``: a hard link to the blob (``digest``), else ``data`` written;
    by a temporary file and a rename (a reader sees it whole or not at all).  ``dirs``: the
    tree's directories, held open for a batch of files."""
    if dirs is None:
        with _Dirs(root) as one:
            return _put(root, name, digest, data, one)
    parent_rel, _, base = name.rpartition("/")
    fd = dirs.fd(parent_rel)
    tmp = None
    if digest:
        try:
            tmp = _made(fd, base, lambda t: os.link(store.blob_path(digest), t, dst_dir_fd=fd))
            STATS["linked"] += 1
        except OSError:
            tmp = None  # no link here (another file system, a limit): the bytes are written
    if tmp is None:
        if data is None:
            data = store.get_blob(digest)
        if data is None:
            raise OSError(f"{name}: its blob went missing from the store")
        tmp = _made(fd, base, lambda t: _write_new(fd, t, data))
    try:
        os.replace(tmp, base, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        _unlink(fd, tmp)
        raise
    # A rename onto another link of the same file does nothing and leaves both names (POSIX):
    # where the file was there already as this blob, the temporary link is still there.
    _unlink(fd, tmp)


sparse.install(need, need_suffix)
