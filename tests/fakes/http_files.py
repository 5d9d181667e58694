"""A loopback HTTP file server for tests: fixed bytes per path, ranges honoured, 404 otherwise.

Plays the plain URL host of URL assets, and the CDN the fake hub redirects large files to. Every
request is logged as ``(method, path, range header)`` so a test can assert that nothing was asked.
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"^bytes=(\d+)-$")


class HttpFiles:
    """Serves `files` (path -> bytes) on 127.0.0.1 from a thread; use as a context manager."""

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = dict(files or {})
        self.requests: list[tuple[str, str, str | None]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http-files", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HttpFiles:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- overridable ------------------------------------------------------------------------
    def respond(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = handler.path.split("?", 1)[0]
        body = self.files.get(path)
        if body is None:
            send(handler, method, 404, b"not found\n")
            return
        send_bytes(handler, method, body, {})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
                return

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
                server.requests.append(("HEAD", self.path, self.headers.get("Range")))
                server.respond(self, "HEAD")

            def do_GET(self) -> None:  # noqa: N802
                server.requests.append(("GET", self.path, self.headers.get("Range")))
                server.respond(self, "GET")

        return Handler


def send(handler: BaseHTTPRequestHandler, method: str, status: int, body: bytes,
         headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if method != "HEAD":
        handler.wfile.write(body)


def send_bytes(handler: BaseHTTPRequestHandler, method: str, body: bytes, headers: dict[str, str]) -> None:
    """200 with the whole body, or 206 with its tail when the request asks for ``bytes=N-``."""
    match = _RANGE.match(handler.headers.get("Range") or "")
    if match and int(match.group(1)) < len(body):
        start = int(match.group(1))
        headers = headers | {"Content-Range": f"bytes {start}-{len(body) - 1}/{len(body)}"}
        send(handler, method, 206, body[start:], headers)
        return
    send(handler, method, 200, body, headers)
