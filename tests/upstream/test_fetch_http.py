"""patchkit/upstream/fetch.py over HTTP, against an index served on 127.0.0.1 (so in the real tier,
whose tests may open sockets; nothing leaves the machine): PEP 691 JSON negotiated by
Accept, credentials from the index URL sent to the files of the same host and never on to
another host a redirect names, a 5xx retried, a 404 named."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from patchkit.base.errors import FetchError
from patchkit.upstream import fetch

pytestmark = pytest.mark.real

AUTH = "Basic " + base64.b64encode(b"me:s3cret").decode()


def _wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("sglang/__init__.py", "")
    return buf.getvalue()


WHEEL = _wheel()


class Server:
    def __init__(self, handler) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.seen = []  # (path, Authorization, Accept)
        self.httpd.count = {}
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def handler_for(other: str):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send(self, code: int, body: bytes = b"", ctype: str = "text/plain", headers: dict | None = None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            srv = self.server
            srv.seen.append((self.path, self.headers.get("Authorization"), self.headers.get("Accept", "")))
            srv.count[self.path] = srv.count.get(self.path, 0) + 1
            if self.path.startswith("/blob/"):  # the other host: no credentials of ours wanted here
                return self.send(200, WHEEL, "application/octet-stream")
            if self.headers.get("Authorization") != AUTH:
                return self.send(401, b"who are you", headers={"WWW-Authenticate": 'Basic realm="x"'})
            if self.path == "/simple/flaky/" and srv.count[self.path] == 1:
                return self.send(503, b"try again")
            if self.path in ("/simple/sglang/", "/simple/flaky/"):
                assert "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
                sha = hashlib.sha256(WHEEL).hexdigest()
                doc = {
                    "meta": {"api-version": "1.1"},
                    "name": "sglang",
                    "files": [
                        {
                            "filename": "sglang-0.5.9-py3-none-any.whl",
                            "url": "../../files/a.whl",
                            "hashes": {"sha256": sha},
                        },
                        {
                            "filename": "sglang-0.5.10-py3-none-any.whl",
                            "url": "/moved/b.whl",
                            "hashes": {"sha256": sha},
                        },
                    ],
                }
                return self.send(200, json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
            if self.path == "/files/a.whl":
                return self.send(200, WHEEL, "application/octet-stream")
            if self.path == "/moved/b.whl":
                return self.send(302, headers={"Location": f"{other}/blob/b.whl"})
            return self.send(404, b"not found")

    return Handler


@pytest.fixture
def servers(tmp_path, monkeypatch):
    other = Server(handler_for(""))
    index = Server(handler_for(other.url))
    monkeypatch.setenv("PATCHKIT_INDEX_URL", index.url.replace("http://", "http://me:s3cret@") + "/simple/")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PATCHKIT_OFFLINE", raising=False)
    yield index.httpd, other.httpd
    index.close()
    other.close()


def test_json_index_with_credentials_for_the_same_host_only(servers):
    index, other = servers
    w = fetch.fetch_wheel("sglang", "0.5.9")
    assert w.read_bytes() == WHEEL
    assert [(p, a) for p, a, _ in index.seen] == [("/simple/sglang/", AUTH), ("/files/a.whl", AUTH)]
    w = fetch.fetch_wheel("sglang", "0.5.10")  # redirected to another host
    assert w.read_bytes() == WHEEL
    assert [(p, a) for p, a, _ in other.seen] == [("/blob/b.whl", None)]


def test_a_5xx_is_tried_again_and_a_404_is_named(servers, monkeypatch):
    index, _ = servers
    monkeypatch.setattr(fetch.time, "sleep", lambda s: None)
    assert fetch.versions("flaky") == ["0.5.9", "0.5.10"]
    assert index.count["/simple/flaky/"] == 2
    with pytest.raises(FetchError) as e:
        fetch.versions("no-such-project")
    assert e.value.message.startswith("no-such-project: no such project on the package index http://127.0.0.1:")
    assert "s3cret" not in str(e.value)


def test_wrong_credentials_are_named_without_the_password(servers, monkeypatch):
    index, _ = servers
    monkeypatch.setattr(fetch, "_CREDENTIALS", {})
    url = index.server_address
    monkeypatch.setenv("PATCHKIT_INDEX_URL", f"http://me:wrong@{url[0]}:{url[1]}/simple/")
    with pytest.raises(FetchError) as e:
        fetch.fetch_wheel("sglang", "0.5.9")
    assert "refused to list the files of sglang (HTTP 401)" in e.value.message
    assert "wrong" not in str(e.value) and "~/.netrc" in e.value.hint
