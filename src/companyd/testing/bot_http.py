"""The wire of the Bot API stand-in: a small HTTP/1.1 server, and Bot API requests and
answers as python-telegram-bot encodes them.

:class:`HttpListener` is a keep-alive HTTP/1.1 server on ``127.0.0.1`` that can be closed and
opened again on the same port (an outage). A handler answers each :class:`Request` with
``(status, content type, body)``, or raises :class:`Dropped` to close the connection without
an answer (a network error for the client). :func:`decode_params` reads a request's Bot API
parameters as python-telegram-bot sends them (form-encoded, string values as they are, every
other value JSON-encoded; JSON bodies too; ``multipart/form-data`` with its files as
:class:`~companyd.testing.bot_objects.Upload`); the ``*_param`` helpers read one parameter and
raise :class:`HttpError` (a ``400`` with Telegram's wording) when it is unusable.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from companyd.testing.bot_objects import Upload

__all__ = [
    "REASONS",
    "Dropped",
    "Handler",
    "HttpError",
    "HttpListener",
    "Request",
    "chat_id_param",
    "decode_params",
    "error_body",
    "int_param",
    "json_response",
    "markup_param",
]

# Parameters python-telegram-bot sends as plain strings (everything else is JSON-encoded).
_STRING_PARAMS = frozenset(
    {
        "text",
        "parse_mode",
        "callback_query_id",
        "inline_message_id",
        "url",
        "description",
        "short_description",
        "language_code",
        "business_connection_id",
        "secret_token",
        "name",
        "caption",
    }
)
# One ``key="value"`` (or ``key=value``) of a Content-Disposition header.
_DISPOSITION_PARAM = re.compile(r';\s*([\w*]+)=(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))')

_MAX_BODY = 4 * 1024 * 1024


class Dropped(Exception):
    """Close the connection without answering (a network error for the client)."""


class HttpError(Exception):
    """A Bot API error answer: ``status`` with Telegram's error body carrying ``description``."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


@dataclass
class Request:
    """One HTTP request as the listener read it (header names lower-case)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[[Request], Awaitable[tuple[int, str, bytes]]]


class HttpListener:
    """A minimal keep-alive HTTP/1.1 server on 127.0.0.1 that can be closed and reopened."""

    def __init__(self, handler: Handler, port: int, on_close: Callable[[], None]) -> None:
        self._handler = handler
        self._on_close = on_close
        self.port = port
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    @property
    def listening(self) -> bool:
        """Whether the port is open (between :meth:`open` and :meth:`close`)."""
        return self._server is not None

    async def open(self) -> None:
        """Listen on 127.0.0.1 (idempotent); the same port again after a :meth:`close`, a free
        one the first time when ``port`` is 0.
        """
        if self._server is not None:
            return
        # reuse_address lets the same port be bound again right after go_down().
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every open connection (clients see resets / refusals)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        conns = dict(self._conns)
        # Aborting the transport ends each handler on its own; cancelling the handler task
        # instead makes asyncio 3.11 log a spurious "Exception in callback" for it.
        for writer in conns.values():
            writer.transport.abort()
        self._on_close()
        if conns:
            _, pending = await asyncio.wait(conns.keys(), timeout=5.0)
            for task in pending:
                task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns[task] = writer
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                status, ctype, body = await self._handler(request)
                reason = REASONS.get(status, "Error")
                head = (
                    f"HTTP/1.1 {status} {reason}\r\n"
                    f"Content-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\n"
                    "Connection: keep-alive\r\n\r\n"
                ).encode("ascii")
                writer.write(head + body)
                await writer.drain()
                if request.headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, HttpError, Dropped):
            return
        finally:
            self._conns.pop(task, None)
            writer.transport.abort()


REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    try:
        method, target, _version = line.decode("latin-1").split()
    except ValueError as exc:
        raise HttpError(400, "malformed request line") from exc
    headers: dict[str, str] = {}
    while True:
        hline = await reader.readline()
        if hline in (b"\r\n", b"\n", b""):
            break
        name, _, value = hline.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            chunks.append(await reader.readexactly(size))
            await reader.readline()
        body = b"".join(chunks)
    else:
        length = int(headers.get("content-length", "0") or "0")
        if length > _MAX_BODY:
            raise HttpError(413, "body too large")
        body = await reader.readexactly(length) if length else b""
    return Request(method=method.upper(), path=target, headers=headers, body=body)


def decode_params(request: Request) -> dict[str, Any]:
    """Bot API parameters from the query string and the body, decoded as PTB encodes them."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw: list[tuple[str, str]] = parse_qsl(urlsplit(request.path).query, keep_blank_values=True)
    if ctype == "application/json" and request.body:
        try:
            obj = json.loads(request.body)
        except ValueError as exc:
            raise HttpError(400, f"Bad Request: invalid JSON body ({exc})") from exc
        if not isinstance(obj, dict):
            raise HttpError(400, "Bad Request: the JSON body must be an object")
        return {**dict(raw), **obj}
    if ctype == "multipart/form-data":
        fields, files = _multipart(request)
        return {**_values(raw + fields), **files}
    if request.body:
        raw += parse_qsl(request.body.decode("utf-8"), keep_blank_values=True)
    return _values(raw)


def _values(raw: list[tuple[str, str]]) -> dict[str, Any]:
    """Form values as python-telegram-bot meant them: strings as they are, else JSON."""
    params: dict[str, Any] = {}
    for key, value in raw:
        if key in _STRING_PARAMS:
            params[key] = value
            continue
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    return params


def _multipart(request: Request) -> tuple[list[tuple[str, str]], dict[str, Upload]]:
    """A ``multipart/form-data`` body as its form fields and its files (by field name).

    Raises:
        HttpError: 400 when the body is not the multipart its Content-Type announces.
    """
    boundary = re.search(r'boundary="?([^";]+)"?', request.headers.get("content-type", ""))
    if boundary is None:
        raise HttpError(400, "Bad Request: multipart body without a boundary")
    fields: list[tuple[str, str]] = []
    files: dict[str, Upload] = {}
    delimiter = b"--" + boundary.group(1).encode("latin-1")
    chunks = request.body.split(delimiter)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        raise HttpError(400, "Bad Request: malformed multipart body")
    for chunk in chunks[1:-1]:
        head, sep, data = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            raise HttpError(400, "Bad Request: malformed multipart part")
        data = data.removesuffix(b"\r\n")  # the line break before the next delimiter
        headers = {}
        for line in head.decode("utf-8").split("\r\n"):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        disposition = {
            m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
            for m in _DISPOSITION_PARAM.finditer(headers.get("content-disposition", ""))
        }
        field = disposition.get("name")
        if not field:
            continue
        if "filename" in disposition:
            mime = headers.get("content-type", "application/octet-stream")
            files[field] = Upload(file_name=disposition["filename"], mime_type=mime, data=data)
        else:
            fields.append((field, data.decode("utf-8")))
    return fields, files


def json_response(status: int, obj: Any) -> tuple[int, str, bytes]:
    """A handler's answer carrying ``obj`` as JSON."""
    return status, "application/json", json.dumps(obj).encode("utf-8")


def error_body(status: int, description: str | None) -> dict[str, Any]:
    """Telegram's error body for ``status``: ``description``, or the status's reason phrase."""
    default = f"{REASONS.get(status, 'Error')}"
    return {"ok": False, "error_code": status, "description": description or default}


def int_param(value: Any, default: int) -> int:
    """``value`` as an int, or ``default`` when it is missing or not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def chat_id_param(value: Any) -> int | str:
    """A ``chat_id`` parameter: an int when it is one, else the text (an ``@channel`` name).

    Raises:
        HttpError: 400 when it is missing or empty, as Telegram answers.
    """
    if value is None or value == "":
        raise HttpError(400, "Bad Request: chat_id is empty")
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def markup_param(value: Any) -> dict[str, Any] | None:
    """A ``reply_markup`` parameter as a dict (given as an object or as JSON text), None when
    absent.

    Raises:
        HttpError: 400 when it is not a JSON object, as Telegram answers.
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise HttpError(400, "Bad Request: can't parse reply keyboard markup JSON") from exc
    if not isinstance(value, dict):
        raise HttpError(400, "Bad Request: reply markup must be a JSON object")
    return value
