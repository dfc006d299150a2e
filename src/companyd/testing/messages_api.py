"""A loopback stand-in for the Anthropic Messages API, for tests and benchmarks.

It is a real HTTP server on ``127.0.0.1`` (thread-based, so it serves sync tests, async
tests and other processes alike). The real ``anthropic`` SDK is pointed at it with
``base_url=srv.base_url`` (or ``ANTHROPIC_BASE_URL`` for a daemon subprocess); nothing in
companyd's tests mocks an SDK object.

What it speaks (the shapes captured from the real SDK 2.12, ops-notes §3.2–3.4):

* ``POST /v1/messages`` → a ``message`` object (text / tool_use blocks, ``stop_reason``,
  ``usage`` with ``cache_creation_input_tokens``, ``cache_read_input_tokens`` and the
  ``cache_creation.ephemeral_5m/1h_input_tokens`` breakdown) and a ``request-id`` header;
* errors as ``{"type": "error", "error": {"type", "message", "details"?}, "request_id"}``
  with optional ``retry-after`` / ``retry-after-ms`` / ``x-should-retry`` headers;
* authentication by ``Authorization: Bearer KEY`` (what SDK 2.12 sends) or ``x-api-key``;
* request validation the real API also does (a ``tool_use`` must be answered by a
  ``tool_result`` in the next user turn), so a broken tool-use loop fails here too.

Scripting::

    with MessagesAPIServer() as srv:
        srv.enqueue(reply_tool_use("remember", {"fact": "x"}), overloaded(), reply_text("done"))
        client = AsyncAnthropic(api_key="test", base_url=srv.base_url, max_retries=0)
        ...
        assert srv.served == 2 and srv.errors == 1

Each request takes the next scripted item (:class:`Reply`, :class:`Fault` or
:class:`Stall`); when the script is empty the *responder* answers (by default
:class:`AgentLikeResponder`: calls one offered tool, then ends the turn, with realistic,
deterministic token usage and simulated prompt caching). Seeded random fault injection
(``fault_rate=0.2``) makes a share of requests fail with 529/500 without consuming the
script. Every request is recorded (:attr:`MessagesAPIServer.requests`); :attr:`served`
counts successful responses actually written to a client that was still there, separately
from :attr:`errors` and :attr:`abandoned` (client gone before the answer, e.g. it timed out).

From another process: ``python -m companyd.testing.messages_api --port 0 --script s.json``
prints ``MESSAGES_API_URL=http://127.0.0.1:PORT``; the ``/_standin/*`` control endpoints
(``enqueue``, ``stats``, ``requests``, ``release``, ``reset``) script and inspect it over HTTP.

This module is the server (serving, recording, counters, the slow-API and stall faults, the
control endpoints, the command line). The script items and their builders live in
:mod:`companyd.testing.messages_script`, the recorded request and the real API's request
checks in :mod:`companyd.testing.messages_requests`, the default responder in
:mod:`companyd.testing.messages_responders`; their names are re-exported here, where the
tests and benchmarks import them.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import select
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from companyd.llm import BUILTIN_PRICES, Usage

# Re-exported: tests and benchmarks import the whole stand-in from this module.
from companyd.testing.messages_requests import RecordedRequest as RecordedRequest
from companyd.testing.messages_requests import validate_request
from companyd.testing.messages_responders import AgentLikeResponder as AgentLikeResponder
from companyd.testing.messages_responders import Responder as Responder
from companyd.testing.messages_script import Fault as Fault
from companyd.testing.messages_script import Reply as Reply
from companyd.testing.messages_script import ScriptItem as ScriptItem
from companyd.testing.messages_script import Stall as Stall
from companyd.testing.messages_script import bad_request as bad_request
from companyd.testing.messages_script import fault as fault
from companyd.testing.messages_script import item_from_json as item_from_json
from companyd.testing.messages_script import overloaded as overloaded
from companyd.testing.messages_script import rate_limited as rate_limited
from companyd.testing.messages_script import reply_text as reply_text
from companyd.testing.messages_script import reply_tool_use as reply_tool_use
from companyd.testing.messages_script import server_error as server_error
from companyd.testing.messages_script import spend_limit as spend_limit
from companyd.testing.messages_script import stall as stall
from companyd.testing.messages_script import usage_of as usage_of
from companyd.testing.messages_script import usage_to_api

__all__ = [
    "AgentLikeResponder",
    "Fault",
    "MessagesAPIServer",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptItem",
    "Stall",
    "bad_request",
    "fault",
    "item_from_json",
    "overloaded",
    "rate_limited",
    "reply_text",
    "reply_tool_use",
    "server_error",
    "spend_limit",
    "stall",
    "usage_of",
]

# ---------------------------------------------------------------------------------------
# The server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    standin: MessagesAPIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-exchange (a timeout, a killed process) is routine here.
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    # Idle keep-alive connections end on their own; the server also closes them on stop.
    timeout = 60

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: with Nagle's algorithm on, the body waits
        # for the client's delayed ACK of the headers — 40 ms added to every call.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.standin._track(self.connection, add=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.standin._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read records
        pass

    def do_POST(self) -> None:
        self.server.standin._handle(self)

    def do_GET(self) -> None:
        self.server.standin._handle(self)


class MessagesAPIServer:
    """The loopback Messages API stand-in. Use as a context manager (or start/stop).

    Args:
        responder: answers when the script is empty; if None, an
            :class:`AgentLikeResponder` — or, with ``default_responder=False``, a 400 saying
            the script is exhausted (for tests that must not make unplanned calls).
        api_key: if set, requests with another credential get a 401.
        latency: seconds added before every answer.
        fault_rate: share of ``/v1/messages`` requests (0–1) that fail with a random status
            from ``fault_statuses`` instead of being answered (the script is not consumed).
        fault_statuses: statuses for injected faults.
        seed: seeds fault injection, so a benchmark run is reproducible.
        validate: reject malformed requests with a 400 like the real API.
        host / port: where to listen (loopback only; port 0 picks a free one).
        script: items to start with (as :meth:`enqueue`).
        default_responder: see ``responder``.
        bill_abandoned: the "slow API" mode: a reply whose client gave up before it was
            written (a timeout, a connection broken mid-call) is billed anyway, as the
            real API bills a request it processed whatever became of the connection
            (:meth:`billed_usage`, ``stats()["billed_abandoned"]``). Combine with
            ``latency`` longer than the client's timeout.
    """

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        api_key: str | None = None,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        fault_statuses: Sequence[int] = (529, 500),
        seed: int = 0,
        validate: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        script: Iterable[ScriptItem] = (),
        default_responder: bool = True,
        bill_abandoned: bool = False,
    ) -> None:
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be between 0 and 1, got {fault_rate!r}")
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(f"the stand-in listens on loopback only, not {host!r}")
        if responder is None and default_responder:
            responder = AgentLikeResponder()
        self.responder = responder
        self.api_key = api_key
        self.latency = latency
        self.fault_rate = fault_rate
        self.fault_statuses = tuple(fault_statuses)
        self.validate = validate
        self.bill_abandoned = bill_abandoned
        self._billed_abandoned: list[dict[str, Any]] = []
        self._host = host
        self._port = port
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._script: deque[ScriptItem] = deque(script)
        self._requests: list[RecordedRequest] = []
        self._responses: list[dict[str, Any]] = []
        self._served = 0
        self._errors = 0
        self._abandoned = 0
        #: ``GET /v1/models`` requests answered (the key check of ``companyd doctor``)
        self.models_listed = 0
        self._injected = 0
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._release = threading.Event()
        self._conns: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> MessagesAPIServer:
        """Bind and serve in a background thread; returns self."""
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self._host, self._port), _Handler)
        httpd.standin = self
        self._httpd = httpd
        self._stopping.clear()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"messages-api-standin:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, abort stalls and close every connection."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stopping.set()
        self._release.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> MessagesAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the stand-in listens on.

        Raises:
            RuntimeError: it is not started.
        """
        if self._httpd is None:
            raise RuntimeError("the stand-in is not started; call start() or use `with`")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` — pass as ``base_url`` / ``ANTHROPIC_BASE_URL``."""
        host = self._host if self._host != "::1" else "[::1]"
        return f"http://{host}:{self.port}"

    # -- scripting ------------------------------------------------------------------------

    def enqueue(self, *items: ScriptItem) -> None:
        """Append replies / faults / stalls; each ``/v1/messages`` request takes the next."""
        for item in items:
            if not isinstance(item, Reply | Fault | Stall):
                raise TypeError(
                    f"expected a Reply, Fault or Stall (see reply_text, fault, stall), got {item!r}"
                )
        with self._lock:
            self._script.extend(items)

    def release_stalls(self) -> None:
        """Let every held :class:`Stall` with ``seconds=None`` proceed (now and later)."""
        self._release.set()

    def reset(self) -> None:
        """Forget the script, the records and the counters."""
        with self._lock:
            self._script.clear()
            self._requests.clear()
            self._responses.clear()
            self._served = self._errors = self._abandoned = self._injected = 0
            self._billed_abandoned.clear()
            self._release.clear()

    # -- inspection -----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Script items not yet used."""
        with self._lock:
            return len(self._script)

    @property
    def served(self) -> int:
        """Successful ``/v1/messages`` responses written to a client that was still there."""
        with self._lock:
            return self._served

    @property
    def errors(self) -> int:
        """Error responses written (scripted, injected, validation, auth)."""
        with self._lock:
            return self._errors

    @property
    def abandoned(self) -> int:
        """Requests whose client left before the answer (no response counted)."""
        with self._lock:
            return self._abandoned

    @property
    def injected_faults(self) -> int:
        """Errors produced by random fault injection."""
        with self._lock:
            return self._injected

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every ``/v1/messages`` request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def responses(self) -> list[dict[str, Any]]:
        """The message bodies of every served response, in order."""
        with self._lock:
            return list(self._responses)

    def served_usage(self) -> Usage:
        """The sum of the usage reported in every served response."""
        total = Usage()
        for r in self.responses:
            total = total + usage_of(r)
        return total

    @property
    def billed_abandoned(self) -> list[dict[str, Any]]:
        """The message bodies billed although their client had gone (``bill_abandoned``)."""
        with self._lock:
            return list(self._billed_abandoned)

    def billed_usage(self) -> Usage:
        """What the provider billed: every served response plus, with ``bill_abandoned``,
        every reply whose client gave up before it was written.
        """
        total = self.served_usage()
        for r in self.billed_abandoned:
            total = total + usage_of(r)
        return total

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``n`` ``/v1/messages`` requests arrived (from sync code; use
        ``asyncio.to_thread`` from async code).

        Raises:
            TimeoutError: if they do not arrive within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"the stand-in received {len(self._requests)} requests, expected "
                        f"at least {n} within {timeout} s"
                    )
                self._cond.wait(left)
            return list(self._requests)

    def stats(self) -> dict[str, Any]:
        """Counters and the total served usage, as JSON."""
        with self._lock:
            out: dict[str, Any] = {
                "requests": len(self._requests),
                "served": self._served,
                "errors": self._errors,
                "abandoned": self._abandoned,
                "injected_faults": self._injected,
                "pending_script": len(self._script),
                "billed_abandoned": len(self._billed_abandoned),
            }
        out["usage"] = self.served_usage().to_dict()
        out["billed_usage"] = self.billed_usage().to_dict()
        return out

    # -- serving (handler threads) --------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _handle(self, h: _Handler) -> None:
        path = urlsplit(h.path).path
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in h.headers.items()}
        if path.startswith("/_standin/"):
            self._control(h, path, body)
            return
        if h.command == "GET" and path.rstrip("/") == "/v1/models":
            self._models(h, path, headers)
            return
        with self._cond:
            rec = RecordedRequest(
                index=len(self._requests),
                method=h.command,
                path=path,
                headers=headers,
                body=body,
                received=time.time(),
            )
            self._requests.append(rec)
            self._cond.notify_all()
        if h.command != "POST" or path.rstrip("/") != "/v1/messages":
            self._write_fault(h, rec, fault(404, f"no route for {h.command} {path}"))
            return
        key = rec.api_key
        if not key or (self.api_key is not None and key != self.api_key):
            self._write_fault(h, rec, fault(401, "invalid x-api-key"))
            return
        if raw and body is None:
            self._write_fault(h, rec, bad_request("request body is not valid JSON"))
            return
        if self.validate:
            problem = validate_request(body)
            if problem:
                self._write_fault(h, rec, bad_request(problem))
                return
        item = self._next_item(rec)
        if item is None:
            return
        self._answer(h, rec, item)

    def _models(self, h: _Handler, path: str, headers: dict[str, str]) -> None:
        """``GET /v1/models``: the catalog's model ids, one page, as the real API lists
        them (the key check of ``companyd doctor``). Counted in :attr:`models_listed`, not
        as a Messages request.
        """
        rec = RecordedRequest(
            index=-1, method="GET", path=path, headers=headers, body=None, received=time.time()
        )
        key = rec.api_key
        if not key or (self.api_key is not None and key != self.api_key):
            self._write_fault(h, rec, fault(401, "invalid x-api-key"))
            return
        with self._lock:
            self.models_listed += 1
        data = [
            {
                "type": "model",
                "id": model,
                "display_name": model,
                "created_at": "2026-09-01T00:00:00Z",
            }
            for model in sorted(BUILTIN_PRICES)
        ]
        page = {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"],
            "last_id": data[-1]["id"],
        }
        self._write(h, rec, 200, page, {"request-id": f"req_standin_{next(self._ids):08d}"})

    def _next_item(self, rec: RecordedRequest) -> ScriptItem | None:
        with self._lock:
            if self.fault_rate and self._rng.random() < self.fault_rate:
                self._injected += 1
                status = self._rng.choice(self.fault_statuses)
                return fault(status, f"injected fault (HTTP {status})")
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(rec)
        return bad_request(
            f"stand-in script exhausted at request #{rec.index} and no default responder "
            "is set; enqueue more replies"
        )

    def _answer(self, h: _Handler, rec: RecordedRequest, item: ScriptItem) -> None:
        if isinstance(item, Stall):
            if not self._hold(h, item.seconds, until_released=item.seconds is None):
                self._abandon(h, rec, self._message(rec, item.then))
                return
            if item.then is None:
                self._abandon(h, rec)
                return
            item = item.then
        delay = self.latency + item.latency
        if delay > 0 and not self._hold(h, delay):
            self._abandon(h, rec, self._message(rec, item))
            return
        if isinstance(item, Fault):
            self._write_fault(h, rec, item)
            return
        message = self._message(rec, item)
        assert message is not None
        n = int(str(message["id"]).rsplit("_", 1)[-1])
        self._write(h, rec, 200, message, {"request-id": f"req_standin_{n:08d}"})

    def _message(self, rec: RecordedRequest, item: ScriptItem | None) -> dict[str, Any] | None:
        """The message body answering ``rec`` with ``item`` (None unless it is a Reply)."""
        if not isinstance(item, Reply):
            return None
        body = rec.body if isinstance(rec.body, dict) else {}
        n = next(self._ids)
        return {
            "id": f"msg_standin_{n:08d}",
            "type": "message",
            "role": "assistant",
            "model": item.model or body.get("model", "claude-sonnet-5-5"),
            "content": [dict(b) for b in item.content],
            "stop_reason": item.stop_reason,
            "stop_sequence": None,
            "usage": usage_to_api(item.usage, item.usage_breakdown),
        }

    def _hold(self, h: _Handler, seconds: float | None, *, until_released: bool = False) -> bool:
        """Wait; False if the client hung up or the server is stopping."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            # Read "released" before "stopping": stop() sets stopping first, so a release
            # caused by stop() is always seen together with it.
            released = until_released and self._release.is_set()
            if self._stopping.is_set() or _client_gone(h.connection):
                return False
            if released:
                return True
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                self._stopping.wait(min(left, 0.02))
            else:
                self._release.wait(0.02)

    def _abandon(
        self, h: _Handler, rec: RecordedRequest, message: dict[str, Any] | None = None
    ) -> None:
        """The client left before its answer; with ``bill_abandoned`` a reply is billed."""
        with self._lock:
            rec.outcome = "abandoned"
            self._abandoned += 1
            if message is not None and self.bill_abandoned and not self._stopping.is_set():
                self._billed_abandoned.append(message)
                rec.billed = message
        h.close_connection = True

    def _write_fault(self, h: _Handler, rec: RecordedRequest, item: Fault) -> None:
        n = next(self._ids)
        rid = f"req_standin_{n:08d}"
        error: dict[str, Any] = {"type": item.error_type, "message": item.message}
        if item.error_code:
            error["details"] = {"error_code": item.error_code}
        headers = {"request-id": rid, **dict(item.headers)}
        if item.retry_after is not None:
            headers["retry-after"] = str(item.retry_after)
        if item.retry_after_ms is not None:
            headers["retry-after-ms"] = str(item.retry_after_ms)
        if item.should_retry is not None:
            headers["x-should-retry"] = "true" if item.should_retry else "false"
        self._write(
            h, rec, item.status, {"type": "error", "error": error, "request_id": rid}, headers
        )

    def _write(
        self,
        h: _Handler,
        rec: RecordedRequest,
        status: int,
        payload: dict[str, Any],
        headers: Mapping[str, str],
    ) -> bool:
        """Write one response; True if it reached a connected client.

        The counters are updated *before* the bytes go out (and reverted if the write
        fails), so a client never sees its response while ``served`` still lags behind.
        """
        data = json.dumps(payload).encode()
        # A client that gave up (timeout, kill) must not count as served: check just before
        # writing, since a write into a half-closed socket can still "succeed".
        if _client_gone(h.connection):
            self._abandon(h, rec, payload if status == 200 and rec.index >= 0 else None)
            return False
        control = rec.index < 0
        ok = status == 200
        with self._lock:
            rec.outcome = "control" if control else ("served" if ok else "error")
            rec.status = status
            rec.response = payload
            if not control:
                if ok:
                    self._served += 1
                    self._responses.append(payload)
                else:
                    self._errors += 1
        try:
            h.send_response(status)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
            h.wfile.flush()
        except OSError:
            with self._lock:
                if not control:
                    if ok:
                        self._served -= 1
                        self._responses.remove(payload)
                    else:
                        self._errors -= 1
            self._abandon(h, rec, payload if ok and not control else None)
            return False
        return True

    # -- control endpoints (for other processes) ------------------------------------------

    def _control(self, h: _Handler, path: str, body: Any) -> None:
        rec = RecordedRequest(
            index=-1, method=h.command, path=path, headers={}, body=body, received=time.time()
        )
        try:
            if path == "/_standin/enqueue" and h.command == "POST":
                items = body if isinstance(body, list) else [body]
                self.enqueue(*(item_from_json(i) for i in items))
                out: Any = {"pending": self.pending}
            elif path == "/_standin/stats":
                out = self.stats()
            elif path == "/_standin/requests":
                out = [r.to_json() for r in self.requests]
            elif path == "/_standin/release" and h.command == "POST":
                self.release_stalls()
                out = {"released": True}
            elif path == "/_standin/reset" and h.command == "POST":
                self.reset()
                out = {"reset": True}
            else:
                self._write(h, rec, 404, {"error": f"unknown control path {path!r}"}, {})
                return
        except (ValueError, KeyError, TypeError) as exc:
            self._write(h, rec, 400, {"error": str(exc)}, {})
            return
        self._write(h, rec, 200, out, {})


def _client_gone(conn: socket.socket) -> bool:
    """Whether the peer closed the connection (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


# ---------------------------------------------------------------------------------------
# python -m companyd.testing.messages_api


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in until SIGTERM/SIGINT; print ``MESSAGES_API_URL=…`` once listening."""
    p = argparse.ArgumentParser(
        prog="python -m companyd.testing.messages_api",
        description="Loopback Anthropic Messages API stand-in for tests and benchmarks.",
    )
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: pick a free one)")
    p.add_argument("--script", help="JSON file: a list of script items (see item_from_json)")
    p.add_argument(
        "--responder",
        choices=("agent", "none"),
        default="agent",
        help="who answers when the script is empty (default: agent-like)",
    )
    p.add_argument("--prefer-tool", help="tool the agent-like responder calls when offered")
    p.add_argument("--api-key", help="reject other credentials with 401")
    p.add_argument("--latency", type=float, default=0.0, help="seconds before every answer")
    p.add_argument("--fault-rate", type=float, default=0.0, help="share of injected faults")
    p.add_argument("--fault-statuses", default="529,500", help="comma-separated statuses")
    p.add_argument("--seed", type=int, default=0, help="seed of fault injection")
    p.add_argument("--url-file", help="also write the base URL to this file once listening")
    p.add_argument(
        "--bill-abandoned",
        action="store_true",
        help="slow-API mode: bill a reply even when its client gave up (see stats)",
    )
    args = p.parse_args(argv)

    script: list[ScriptItem] = []
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, list):
            p.error(f"--script {args.script!r}: expected a JSON list of items")
        script = [item_from_json(d) for d in data]
    responder: Responder | None = (
        AgentLikeResponder(prefer=args.prefer_tool) if args.responder == "agent" else None
    )
    srv = MessagesAPIServer(
        responder=responder,
        default_responder=False,
        api_key=args.api_key,
        latency=args.latency,
        fault_rate=args.fault_rate,
        fault_statuses=[int(s) for s in args.fault_statuses.split(",") if s.strip()],
        seed=args.seed,
        port=args.port,
        script=script,
        bill_abandoned=args.bill_abandoned,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    with srv:
        if args.url_file:
            tmp = args.url_file + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(srv.base_url + "\n")
            os.replace(tmp, args.url_file)
        print(f"MESSAGES_API_URL={srv.base_url}", flush=True)
        while not done.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
