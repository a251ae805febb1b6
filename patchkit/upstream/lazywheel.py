"""A release wheel read member by member over HTTP ranges, for the pristine references
(patchkit/upstream/pristine.py): the judge reads a handful of a release's files, and a wheel
is a zip whose central directory, at its end, lists every member with its offset.

- One ``Range: bytes=-65536`` request reads the end of central directory (and, for most
  wheels, the whole central directory; a larger one is one more request).  Python's
  ``zipfile`` parses it, over a file object that fetches the byte ranges it reads.
- A member is one more request: its local header and compressed data, ``[offset, next
  member's offset)``; ``zipfile`` inflates it and checks its CRC.
- **What a member read alone trusts**: the index's listing of the wheel (its URL, over the
  index's TLS), and the wheel's own ``RECORD``, read the same way.  A member is used only
  when its sha256 is the one ``RECORD`` lists for it; a member ``RECORD`` gives no digest for
  is not used alone.  **What it does not check**: the sha256 the index lists for the whole
  file (that needs every byte).  A server that answered ranges from a different but
  self-consistent wheel (its RECORD rewritten to match) would pass; commands whose output is
  installed or published (``wheel``, ``publish``, ``sync``) read whole files and check the
  index's sha256, as before.
- Checked members go into ``CACHE/blobs/sha256/`` by digest (releases that share a file
  share its bytes), and the release's listing (member -> digest) into
  ``CACHE/lazy/DIST/VERSION/FILENAME.json``: a second run reads them without the network.
- Anything else falls back to the whole download, checked against the index's sha256 as
  today, said once per process: a server that answers a range with ``200`` (no range
  support), a ``file:`` index, a range answered with other bytes or another length than
  asked, a central directory that does not parse, a member that does not match ``RECORD``.

``PATCHKIT_LAZY=0`` turns it off (whole wheels, as before).  Counted in ``STATS`` (requests,
bytes), which the bench prints.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import zipfile
from pathlib import Path
from typing import Callable, Optional

from patchkit.base import store
from patchkit.base.errors import FetchError

LAZY_ENV = "PATCHKIT_LAZY"  # "0": whole wheels only
TAIL = 1 << 16  # the first request: the last 64 KiB (the EOCD, and mostly the whole directory)
# Members read by range from one wheel before the rest comes whole: a caller reading a release
# file by file (capture compares every file) is better served by one download.
MAX_MEMBERS = 64
STATS = {"requests": 0, "bytes": 0, "fallbacks": 0}
_SAID: set[str] = set()


class RangeError(Exception):
    """The lazy read cannot go on (no range support, an inconsistent answer, a zip that does
    not parse): the caller reads the whole file instead."""


_WHOLE_ONLY = False


def whole_only() -> None:
    """For the rest of this process, pristine releases are whole files checked against the
    index's sha256 (``wheel`` and ``publish``: what they build is installed)."""
    global _WHOLE_ONLY
    _WHOLE_ONLY = True


def enabled() -> bool:
    return not _WHOLE_ONLY and os.environ.get(LAZY_ENV, "1") != "0"


def say_once(say: Callable[[str], None], msg: str) -> None:
    if msg not in _SAID:
        _SAID.add(msg)
        say(msg)


# -- byte ranges ------------------------------------------------------------------------------


def _get_range(url: str, start: int, end: Optional[int]) -> tuple[int, bytes, int]:
    """``(start, data, total)`` for bytes ``[start, end)`` of ``url`` (``start`` < 0 and
    ``end`` None: the last ``-start`` bytes).  RangeError unless the server answers 206 with
    exactly the bytes asked for."""
    from patchkit.upstream import fetch

    spec = f"bytes={start}" if end is None else f"bytes={start}-{end - 1}"

    def get():
        with fetch._request(url, extra={"Range": spec}) as resp:
            status = getattr(resp, "status", None)
            if status != 206:
                raise RangeError(f"the server answered a range request with HTTP {status}, not 206")
            crange = resp.headers.get("Content-Range", "")
            body = resp.read()
        STATS["requests"] += 1
        STATS["bytes"] += len(body)
        return crange, body

    crange, body = fetch._retrying(f"read bytes {spec[6:]} of {url.rsplit('/', 1)[-1]}", url, get)
    m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", crange.strip())
    if not m:
        raise RangeError(f"a range answer without a usable Content-Range ({crange!r})")
    first, last, total = (int(g) for g in m.groups())
    want_first = max(total + start, 0) if end is None else start
    want_last = total - 1 if end is None else min(end, total) - 1
    if (first, last) != (want_first, want_last) or len(body) != last - first + 1:
        raise RangeError(
            f"asked for bytes {spec[6:]}, got {first}-{last} ({len(body)} bytes) of {total}: an inconsistent answer"
        )
    return first, body, total


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over an HTTP URL: what ``read`` needs and has not been
    fetched is fetched by range; fetched bytes are kept as segments (``forget`` drops them)."""

    def __init__(self, url: str, size: Optional[int] = None) -> None:
        """``size``: the file's, as a previous run found it (no request made here); else the
        last 64 KiB are fetched, which tells the size."""
        super().__init__()
        self.url = url
        self._segs: list[tuple[int, bytes]] = []
        self._pos = 0
        if size is None:
            start, data, size = _get_range(url, -TAIL, None)
            self._segs.append((start, data))
        self.size = size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def fetch(self, start: int, end: int) -> None:
        """Have bytes ``[start, end)`` in hand (what is missing of it, in one request)."""
        end = min(end, self.size)
        while start < end:
            seg = self._seg_at(start)
            if seg is not None:
                start = seg[0] + len(seg[1])
                continue
            nxt = min((s for s, _ in self._segs if start < s < end), default=end)
            from patchkit.base.progress import working

            with working(f"reading {self.url.rsplit('/', 1)[-1]} by ranges ({(nxt - start) / 1e6:.1f} MB)"):
                got_start, data, total = _get_range(self.url, start, nxt)
            if total != self.size:
                raise RangeError(f"the file's size changed between two answers ({self.size}, then {total})")
            self._segs.append((got_start, data))
            self._segs.sort(key=lambda s: s[0])
            start = nxt

    def forget(self, start: int, end: int) -> None:
        self._segs = [s for s in self._segs if not (start <= s[0] and s[0] + len(s[1]) <= end)]

    def _seg_at(self, pos: int) -> Optional[tuple[int, bytes]]:
        for s, data in self._segs:
            if s <= pos < s + len(data):
                return s, data
        return None

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self._pos
        end = min(self._pos + n, self.size)
        out = bytearray()
        while self._pos < end:
            seg = self._seg_at(self._pos)
            if seg is None:
                self.fetch(self._pos, end)
                continue
            s, data = seg
            piece = data[self._pos - s : end - s]
            out += piece
            self._pos += len(piece)
        return bytes(out)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


# -- the store --------------------------------------------------------------------------------


def manifest_path(dist: str, version: str) -> Path:
    from patchkit.base.paths import cache_dir
    from patchkit.upstream.fetch import normalize

    return cache_dir() / "lazy" / normalize(dist) / version / "manifest.json"


def _record(data: bytes) -> dict[str, str]:
    """RECORD's rows as {path: sha256 hex} (rows without a sha256 left out)."""
    out: dict[str, str] = {}
    for row in csv.reader(io.StringIO(data.decode("utf-8", "replace"))):
        if len(row) < 2 or not row[1].startswith("sha256="):
            continue
        b64 = row[1][7:]
        try:
            out[row[0]] = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
        except ValueError:
            continue
    return out


# -- a release ----------------------------------------------------------------------------------


def _names(raw: bytes) -> tuple[str, ...]:
    """A local header's file name as zipfile may have decoded it (UTF-8 flag or cp437)."""
    return (raw.decode("utf-8", "replace"), raw.decode("cp437"))


_LOCAL = "<4s5H3L2H"  # a local file header: signature .. extra field length (30 bytes)


class LazyWheel:
    """A release wheel as the pristine reference reads it: ``namelist()`` and ``read(name)``
    (KeyError for a name the wheel does not have), as zipfile.ZipFile's.  Members come from
    the store, else by range from the index (checked against RECORD), else (any doubt) from
    the whole wheel, downloaded and checked against the index's sha256."""

    def __init__(self, dist: str, version: str, say: Callable[[str], None], pick: dict) -> None:
        self.dist, self.version, self.say = dist, version, say
        self.filename = pick.get("filename", "")
        self.size = 0
        # name -> [local header offset, end (the next member's offset), method, compressed size, size, crc]
        self._members: dict[str, list[int]] = {}
        self._record: dict[str, str] = {}
        self._file: Optional[RangeFile] = None
        self._whole: Optional[zipfile.ZipFile] = None
        self._pick = pick
        self.fetched = 0  # members read by range in this process
        # the RECORD's own name and digest (it lists none for itself): as read by open
        self.record_name, self.record_digest = "", ""

    # opening
    @classmethod
    def stored(cls, dist: str, version: str, say: Callable[[str], None]) -> Optional["LazyWheel"]:
        """The release as a previous run listed it (``lazy/DIST/VERSION/manifest.json``), or None."""
        # an entry of patchkit's store (patchkit/base/store.py): a listing planted or copied into
        # the cache, naming blobs of its own as the release's members, is a miss
        doc = store.get_json("lazy", manifest_path(dist, version), dict)
        try:
            lw = cls(dist, version, say, dict(doc["pick"]))
            lw.size, lw._record = int(doc["size"]), dict(doc["record"])
            lw._members = {str(k): [int(x) for x in v] for k, v in doc["members"].items()}
            lw.record_name, lw.record_digest = str(doc.get("record_name", "")), str(doc.get("record_digest", ""))
            if any(len(v) != 6 for v in lw._members.values()):
                return None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return lw

    @classmethod
    def open(cls, dist: str, version: str, say: Callable[[str], None]) -> Optional["LazyWheel"]:
        """The release's wheel on the index, its directory and RECORD read by range; None (said
        once) where that cannot be done, and the caller downloads the whole wheel."""
        from patchkit.upstream import fetch

        pick = fetch.locate("wheel", dist, version)  # a FetchError (no such release, ...) is the caller's
        url = pick["url"]
        lw = cls(dist, version, say, pick)
        if not url.startswith(("http://", "https://")):
            say_once(say, f"the package index is not HTTP ({url.split(':', 1)[0]}:): whole wheels are read")
            return None
        try:
            lw._directory()
            rec = [n for n in lw._members if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
            if len(rec) != 1:
                raise RangeError(f"{len(rec)} RECORD files in the wheel's directory")
            raw = lw._range_read(rec[0])
            lw._record = _record(raw)
            lw.record_name, lw.record_digest = rec[0], hashlib.sha256(raw).hexdigest()
            store.put_blob(lw.record_digest, raw)  # the tree's RECORD (patchkit/upstream/lazytree.py)
        except (RangeError, FetchError, OSError) as e:
            lw._fallback_said(e)
            return None
        lw._save()
        return lw

    def _directory(self) -> None:
        """Read the central directory (zipfile parses it, over ranges)."""
        import struct
        import zlib

        self._file = RangeFile(self._pick["url"])
        self.size = self._file.size
        try:
            z = zipfile.ZipFile(self._file)
            infos = sorted(z.infolist(), key=lambda i: i.header_offset)
            start_dir = z.start_dir
        except (zipfile.BadZipFile, struct.error, zlib.error, EOFError, ValueError, KeyError) as e:
            raise RangeError(f"the wheel's central directory does not parse ({e or type(e).__name__})") from None
        for i, info in enumerate(infos):
            end = infos[i + 1].header_offset if i + 1 < len(infos) else start_dir
            if info.filename.endswith("/"):
                continue
            if not (0 <= info.header_offset < end <= self.size) or info.filename in self._members:
                raise RangeError(f"the wheel's central directory is inconsistent at {info.filename!r}")
            self._members[info.filename] = [
                info.header_offset,
                end,
                info.compress_type,
                info.compress_size,
                info.file_size,
                info.CRC,
            ]

    def _fallback_said(self, e: Exception) -> None:
        STATS["fallbacks"] += 1
        reason = getattr(e, "message", None) or str(e)
        say_once(
            self.say, f"{self.filename or self.dist}: not read by ranges ({reason}); the whole wheel is downloaded"
        )

    def _save(self) -> None:
        doc = {
            "pick": {k: self._pick[k] for k in ("filename", "url", "sha256")},
            "size": self.size,
            "members": self._members,
            "record": self._record,
            "record_name": self.record_name,
            "record_digest": self.record_digest,
        }
        store.put_json("lazy", manifest_path(self.dist, self.version), doc)

    # reading
    def namelist(self) -> list[str]:
        if self._whole is not None:
            return self._whole.namelist()
        return list(self._members)

    def _range_read(self, name: str) -> bytes:
        """A member's bytes, by one range request: its local header checked against the
        directory, inflated, its size and CRC checked."""
        import struct
        import zlib

        if self._file is None:
            self._file = RangeFile(self._pick["url"], self.size)
        start, end, method, csize, usize, crc = self._members[name]
        self._file.fetch(start, end)
        f = self._file
        try:
            f.seek(start)
            sig, _, flags, lmethod, _, _, _, _, _, nlen, elen = struct.unpack(_LOCAL, f.read(30))
            lname = f.read(nlen)
            if sig != b"PK\x03\x04" or lmethod != method or flags & 1 or name not in _names(lname):
                raise RangeError(f"{name}: its local header does not match the directory")
            f.seek(start + 30 + nlen + elen)
            raw = f.read(csize)
            if start + 30 + nlen + elen + csize > end or len(raw) != csize:
                raise RangeError(f"{name}: its data runs past the next member")
            if method == zipfile.ZIP_STORED:
                data = raw
            elif method == zipfile.ZIP_DEFLATED:
                d = zlib.decompressobj(-15)
                data = d.decompress(raw, usize + 1)
            else:
                raise RangeError(f"{name}: compression method {method} is not read by ranges")
            if len(data) != usize or zlib.crc32(data) != crc:
                raise RangeError(f"{name}: its bytes do not match the directory's size and CRC")
        except (struct.error, zlib.error, ValueError) as e:
            raise RangeError(f"{name}: its bytes do not inflate ({e})") from None
        finally:
            f.forget(start, end)
        return data

    def read(self, name: str) -> bytes:
        if self._whole is not None:
            return self._whole.read(name)
        if name not in self._members:
            raise KeyError(name)
        digest = self._record.get(name, "")
        if digest:
            data = store.get_blob(digest)
            if data is not None:
                return data
            if self.fetched >= MAX_MEMBERS:
                say_once(
                    self.say,
                    f"{self.filename}: more than {MAX_MEMBERS} members read by ranges; the whole wheel is downloaded",
                )
            elif not os.environ.get("PATCHKIT_OFFLINE") == "1":
                try:
                    data = self._range_read(name)
                except (RangeError, FetchError, OSError) as e:
                    self._fallback_said(e)
                else:
                    self.fetched += 1
                    if hashlib.sha256(data).hexdigest() == digest:
                        store.put_blob(digest, data)
                        return data
                    STATS["fallbacks"] += 1
                    say_once(
                        self.say,
                        f"{self.filename}: {name} does not match the wheel's RECORD; refused, and the whole wheel "
                        "is downloaded and checked against the index's sha256",
                    )
        else:
            say_once(self.say, f"{self.filename}: {name} has no sha256 in the wheel's RECORD; the whole wheel is read")
        return self._open_whole().read(name)

    def _open_whole(self) -> zipfile.ZipFile:
        from patchkit.base import regular
        from patchkit.upstream import fetch

        whl = fetch.fetch_wheel(self.dist, self.version, say=self.say)
        self._whole = zipfile.ZipFile(regular.open_file(whl))
        return self._whole
