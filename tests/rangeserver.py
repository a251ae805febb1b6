"""A small package index on 127.0.0.1 for the lazy wheel reader's tests and `make bench`: the
simple API (PEP 691 JSON, each file with its sha256) over wheel files on disk, and the files
themselves with single byte ranges (``bytes=A-B``, ``bytes=A-``, ``bytes=-N``) answered 206.
It counts requests and bytes sent.  Switches, for the tests: ``ranges=False`` answers every
request 200 with the whole file (an index without range support); ``lie`` {filename: bytes}
answers ranges from other bytes than the whole file (a lying range response); ``short``
{filename: n} cuts n bytes off each range answer."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class RangeIndex:
    def __init__(
        self, files: dict[str, list[Path]] | None = None, ranges: bool = True, rate: float = 0, latency: float = 0
    ) -> None:
        """``files``: {project: [wheel paths]}; ``rate`` (bytes/s) and ``latency`` (s per
        request), when set, make it a slower link than the loopback (for the bench)."""
        self.rate, self.latency = rate, latency
        self.files: dict[str, bytes | Path] = {}
        self.projects: dict[str, list[str]] = {}
        self.sha: dict[str, str] = {}
        self.ranges = ranges
        self.lie: dict[str, bytes] = {}
        self.short: dict[str, int] = {}  # {filename: n}: each range answer n bytes short of its Content-Range
        self.requests = 0
        self.paths: list[str] = []  # each request's path and Range, for a test's message
        self.range_requests = 0
        self.bytes = 0
        self.lock = threading.Lock()
        for project, paths in (files or {}).items():
            for p in paths:
                self.add(project, p)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/simple/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def add(self, project: str, wheel: Path | str, data: bytes | None = None) -> None:
        """A file of ``project``: a path, or ``data`` named ``wheel``."""
        name = Path(wheel).name
        self.files[name] = data if data is not None else Path(wheel)
        self.projects.setdefault(_norm(project), []).append(name)
        if data is not None:
            self.sha[name] = hashlib.sha256(data).hexdigest()
        else:
            h = hashlib.sha256()
            with open(wheel, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self.sha[name] = h.hexdigest()

    def reset(self) -> None:
        with self.lock:
            self.requests = self.range_requests = self.bytes = 0
            self.paths = []

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def size(self, name: str) -> int:
        f = self.files[name]
        return len(f) if isinstance(f, bytes) else f.stat().st_size

    def read(self, name: str, start: int, end: int, ranged: bool) -> bytes:
        if ranged and name in self.lie:
            return self.lie[name][start:end]
        f = self.files[name]
        if isinstance(f, bytes):
            return f[start:end]
        with open(f, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)


def _handler(idx: RangeIndex):
    def _pace(n: int) -> None:
        if idx.rate:
            time.sleep(n / idx.rate)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, code: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            _pace(len(body))
            with idx.lock:
                idx.bytes += len(body)

        def do_GET(self):  # noqa: N802
            with idx.lock:
                idx.requests += 1
                idx.paths.append(f"{self.path} {self.headers.get('Range', '')}".strip())
            if idx.latency:
                time.sleep(idx.latency)
            path = self.path.split("?", 1)[0]
            m = re.fullmatch(r"/simple/([^/]+)/", path)
            if m:
                names = idx.projects.get(_norm(m.group(1)))
                if names is None:
                    return self._send(404, b"no such project", "text/plain")
                doc = {
                    "meta": {"api-version": "1.0"},
                    "name": m.group(1),
                    "files": [{"filename": n, "url": f"/files/{n}", "hashes": {"sha256": idx.sha[n]}} for n in names],
                }
                return self._send(200, json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
            m = re.fullmatch(r"/files/([^/]+)", path)
            if not m or m.group(1) not in idx.files:
                return self._send(404, b"not found", "text/plain")
            name = m.group(1)
            size = idx.size(name)
            rng = self.headers.get("Range", "")
            r = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not idx.ranges or not r or (not r.group(1) and not r.group(2)):
                self._stream(name, size)
                return
            if name in idx.lie:
                size = len(idx.lie[name])
            a, b = r.groups()
            if not a:
                start, end = max(size - int(b), 0), size
            else:
                start, end = int(a), (min(int(b) + 1, size) if b else size)
            if start >= size or start >= end:
                return self._send(416, b"", "text/plain", {"Content-Range": f"bytes */{size}"})
            with idx.lock:
                idx.range_requests += 1
            body = idx.read(name, start, end, ranged=True)
            body = body[: max(len(body) - idx.short.get(name, 0), 0)]
            self._send(206, body, "application/octet-stream", {"Content-Range": f"bytes {start}-{end - 1}/{size}"})

        def _stream(self, name: str, size: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            pos = 0
            try:
                while pos < size:
                    chunk = idx.read(name, pos, min(pos + (1 << 20), size), ranged=False)
                    self.wfile.write(chunk)
                    _pace(len(chunk))
                    pos += len(chunk)
                    with idx.lock:
                        idx.bytes += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler
