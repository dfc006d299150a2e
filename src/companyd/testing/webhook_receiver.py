"""A loopback webhook receiver for tests: records every request, answers as told, goes
down and comes back up on the same port.

    with WebhookReceiver(secret) as rx:
        ...  # point alerts.webhooks[].url at rx.url
        rx.go_down()        # connections refused
        rx.come_up()        # the same port again
        rx.status = 503     # answer 503 from now on (200 by default)
        rx.delivered()      # the requests that verified with standardwebhooks, in order

Each request is kept as a :class:`Received`: its headers, raw body, the status answered and
whether its signature verified with the ``standardwebhooks`` package (the receiving side's
reference implementation) against the receiver's ``secret``. The server runs on its own
thread (``http.server``), so the daemon under test meets it over a real socket.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["Received", "WebhookReceiver"]


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    #: the standardwebhooks package verified its signature and timestamp
    verified: bool
    #: why it did not verify ("" when it did)
    problem: str

    @property
    def id(self) -> str:
        """Its ``webhook-id`` header."""
        return self.headers.get("webhook-id", "")

    def json(self) -> Any:
        """The body, parsed."""
        return json.loads(self.body)


class WebhookReceiver:
    """See module docstring. ``secret``: the Standard Webhooks secret (``whsec_…``) the
    requests are verified with.
    """

    def __init__(self, secret: str, host: str = "127.0.0.1") -> None:
        self.secret = secret
        self.host = host
        self.port = 0
        #: the status answered to each request from now on
        self.status = 200
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where to POST (``/hook``)."""
        return f"http://{self.host}:{self.port}/hook"

    def __enter__(self) -> WebhookReceiver:
        self.come_up()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.go_down()

    def come_up(self) -> None:
        """Listen (again, on the same port once it had one)."""
        if self._server is not None:
            return
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                receiver._got(self, body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer((self.host, self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def go_down(self) -> None:
        """Stop listening: connections are refused until :meth:`come_up`."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _got(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        from standardwebhooks import Webhook

        headers = {k.lower(): v for k, v in handler.headers.items()}
        try:
            Webhook(self.secret).verify(body, headers)
            verified, problem = True, ""
        except Exception as exc:
            verified, problem = False, f"{type(exc).__name__}: {exc}"
        status = self.status
        with self._lock:
            self.requests.append(Received(handler.path, headers, body, status, verified, problem))
        handler.send_response(status)
        handler.send_header("content-length", "0")
        handler.end_headers()

    def received(self) -> list[Received]:
        """Every request so far, in order."""
        with self._lock:
            return list(self.requests)

    def delivered(self) -> list[Received]:
        """The requests answered 2xx that verified, in order."""
        return [r for r in self.received() if r.verified and 200 <= r.status < 300]
