"""``companyd memory serve-mcp``: a drop-in replacement for the official MCP memory server.

Built on the ``mcp`` Python SDK's low-level :class:`mcp.server.lowlevel.Server`, it exposes
what ``@modelcontextprotocol/server-memory`` 2026.8.31 exposes over stdio, so Claude Desktop
and Claude Code can use it unchanged: the nine tools (same names, order, titles,
descriptions, input/output schemas, annotations, results, texts and errors), the
``memory://knowledge-graph`` resource with subscriptions, and the same ``serverInfo``.

Unlike the official server it never loses a write: calls go through a
:class:`~companyd.memory._service.MemoryService` (one owner, group commit, fsynced journal,
cross-process lock), so several ``serve-mcp`` processes, the daemon and the CLI can share one
file, and eight calls in flight on one connection are all kept.

Transport: newline-delimited JSON-RPC on stdin/stdout, like the SDK's ``stdio_server`` but
reading and writing the pipes with asyncio instead of a worker thread per line (which costs
~1 ms per call on a 2-core VM; docs/benchmarks.md). Non-pipe stdin (a regular file) falls
back to the SDK's ``stdio_server``, and so does a stdin epoll cannot watch (/dev/null:
``serve-mcp < /dev/null`` reads the end of its input at once and exits 0; the command puts
/dev/null on a closed stdin, ``serve-mcp <&-``). While serving, fd 0 and 1 point at
/dev/null and stderr so that stray output cannot corrupt the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import selectors
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pydantic_core
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.runner import serve_loop
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from companyd._aio import race
from companyd._heap import freeze_startup_heap
from companyd.clock import Clock, SystemClock
from companyd.events import Event, EventBus, MemoryRepaired
from companyd.memory._errors import (
    MemoryNotAGraph,
    MemoryToolError,
    MemoryUnavailable,
    MemoryUnsafePath,
)
from companyd.memory._service import MemoryService
from companyd.memory._tools import MUTATING_TOOLS, pretty, result_text, tool_definitions
from companyd.supervision import StandaloneContext

__all__ = [
    "RESOURCE_URI",
    "SERVER_NAME",
    "SERVER_VERSION",
    "build_server",
    "serve_connection",
    "serve_stdio",
]

log = logging.getLogger("companyd.memory.mcp_server")

#: What the official server reports as ``serverInfo``; clients may key on it.
SERVER_NAME = "memory-server"
SERVER_VERSION = "0.6.3"
RESOURCE_URI = "memory://knowledge-graph"
_RESOURCE = {
    "uri": RESOURCE_URI,
    "name": "knowledge-graph",
    "title": "Knowledge Graph",
    "description": "The full knowledge graph with all entities and relations",
    "mimeType": "application/json",
}

Ctx = ServerRequestContext[Any, Any]


def build_server(service: MemoryService, subscribed: set[str] | None = None) -> Server[Any]:
    """The MCP server object serving ``service`` (one connection's worth of state: the
    resource subscriptions, kept in ``subscribed`` when given).
    """
    subscribed = set() if subscribed is None else subscribed

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return {"tools": tool_definitions()}

    async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        name = params.name
        result = await tool_result(service, name, params.arguments)
        if name in MUTATING_TOOLS and RESOURCE_URI in subscribed and not result.get("isError"):
            await ctx.session.send_resource_updated(RESOURCE_URI)
        return result

    async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return {"resources": [dict(_RESOURCE)]}

    async def list_templates(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return {"resourceTemplates": []}

    async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        if uri != RESOURCE_URI:
            raise MCPError(-32602, f"MCP error -32602: Resource {uri} not found")
        graph = await service.call("read_graph", {})
        return {"contents": [{"uri": uri, "mimeType": "application/json", "text": pretty(graph)}]}

    async def subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> Any:
        subscribed.add(str(params.uri))
        return {}

    async def unsubscribe(ctx: Ctx, params: types.UnsubscribeRequestParams) -> Any:
        subscribed.discard(str(params.uri))
        return {}

    server: Server[Any] = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
    )
    # The SDK wraps every message in a no-op OpenTelemetry span by default; without an
    # exporter it only costs time (measured ~8 % of a call).
    server.middleware = []
    return server


async def tool_result(
    service: MemoryService, name: str, arguments: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The ``tools/call`` result of one call, as the SDK puts it on the wire (its keys in
    that order): the text content and the ``structuredContent``, or, for a failed call, the
    error text with ``isError`` — like the official server, a tool failure is a result,
    never a JSON-RPC error. Returns once a write is durable.
    """
    try:
        structured = await service.call(name, arguments or {})
    except (MemoryToolError, MemoryUnavailable) as exc:
        return {"content": [{"text": str(exc), "type": "text"}], "isError": True}
    return {
        "content": [{"text": result_text(name, structured), "type": "text"}],
        "structuredContent": structured,
    }


async def serve_connection(server: Server[Any], read_stream: Any, write_stream: Any) -> None:
    """Serve one MCP connection in the handshake protocol era (``initialize``; protocol
    versions up to 2025-11-25), which is what the official server speaks.

    ``Server.run`` would also accept the 2026-07-28 per-request era, at the price of relaying
    every message through one more stream and task; a drop-in for the official server does
    not need it.
    """
    try:
        await serve_loop(
            server,
            read_stream,
            write_stream,
            lifespan_state={},
            init_options=initialization_options(server),
        )
    finally:
        await write_stream.aclose()


def initialization_options(server: Server[Any]) -> Any:
    """Capabilities as the official server announces them: tools and resources with
    ``listChanged``, resources with ``subscribe``.
    """
    return server.create_initialization_options(
        NotificationOptions(tools_changed=True, resources_changed=True)
    )


async def _supervise(
    service: MemoryService,
    ctx: StandaloneContext,
    clock: Clock,
    *,
    max_restarts: int = 5,
    within: float = 60.0,
) -> None:
    """Run the owner, restarting it after a crash (the daemon's supervisor does this there):
    at most ``max_restarts`` within ``within`` seconds, then give up (re-raise). A file that
    is not a graph, or an unsafe path, is raised at once: no restart can change it (the
    daemon exits 78 on them).
    """
    crashes: list[float] = []
    while True:
        try:
            await service.run(ctx)
            return
        except (MemoryNotAGraph, MemoryUnsafePath):
            raise
        except Exception as exc:
            now = clock.monotonic()
            crashes = [t for t in crashes if now - t < within] + [now]
            if len(crashes) > max_restarts or ctx.stopping.is_set():
                raise
            log.warning("memory owner crashed (%s); restarting", exc)
            await clock.sleep(0.1 * len(crashes))


async def serve_stdio(
    path: Path,
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    bus: EventBus | None = None,
    clock: Clock | None = None,
    fast_calls: bool = True,
) -> None:
    """Serve the graph at ``path`` over MCP stdio until stdin closes, then compact and return.

    ``fast_calls``: answer plain ``tools/call`` requests without the SDK's per-request
    machinery (:class:`_FastCalls`; the same bytes on the wire). False serves every request
    through the SDK (the tests compare the two).

    Raises:
        MemoryLocked, OSError: the file could not be opened (the message says which).
    """
    clock = clock or SystemClock()
    bus = bus or EventBus(clock)

    def report(event: Event) -> None:
        match event:
            case MemoryRepaired(path=path, summary=summary):
                sys.stderr.write(f"companyd memory: repaired {path}: {summary}\n")

    remove = bus.add_listener(report)
    service = MemoryService(path, bus=bus, clock=clock)
    ctx = StandaloneContext("serve-mcp/memory")
    owner = asyncio.create_task(_supervise(service, ctx, clock))
    ready = asyncio.create_task(ctx.ready.wait())
    try:
        await race(owner, ready)
        if owner.done():
            owner.result()  # raises why the file could not be opened
            return
        subscribed: set[str] = set()
        server = build_server(service, subscribed)
        freeze_startup_heap()  # the loaded graph: see companyd._heap
        sys.stderr.write(
            f"companyd memory MCP server ({SERVER_NAME} {SERVER_VERSION} compatible) "
            f"running on stdio, file {str(service.path)!r}\n"
        )
        async with _stdio_streams(stdin_fd, stdout_fd) as (read_stream, write_stream):
            if fast_calls and isinstance(read_stream, _LineReader):
                read_stream.fast = _FastCalls(service, write_stream, subscribed)
            serving = asyncio.create_task(serve_connection(server, read_stream, write_stream))
            # SIGTERM/SIGINT (a client shutting us down, Ctrl-C) end the connection the way
            # closing stdin does: what is queued is answered, the journal is folded in.
            loop = asyncio.get_running_loop()
            handled = []
            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(ValueError, NotImplementedError, RuntimeError):
                    loop.add_signal_handler(signum, serving.cancel)
                    handled.append(signum)
            try:
                await race(serving, owner)
                if owner.done():  # the owner gave up: stop serving rather than fail every call
                    serving.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await serving
                    owner.result()
                elif not serving.cancelled():
                    serving.result()
            finally:
                for signum in handled:
                    loop.remove_signal_handler(signum)
    finally:
        ready.cancel()
        ctx.stopping.set()
        with contextlib.suppress(Exception):
            await owner  # serves what is queued and compacts
        remove()


@contextlib.asynccontextmanager
async def _stdio_streams(stdin_fd: int, stdout_fd: int) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stream pair over non-blocking pipes (see the module docstring)."""
    loop = asyncio.get_running_loop()
    wire_in = os.dup(stdin_fd)
    wire_out = os.dup(stdout_fd)
    saved_in = os.dup(stdin_fd)
    saved_out = os.dup(stdout_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, stdin_fd)
    os.close(devnull)
    os.dup2(2, stdout_fd)
    rtransport: asyncio.BaseTransport | None = None
    wtransport: asyncio.WriteTransport | None = None
    try:
        reader = asyncio.StreamReader(limit=1 << 30)
        try:
            if not _watchable(wire_in):
                # /dev/null (``serve-mcp < /dev/null``) passes connect_read_pipe's check but
                # epoll refuses it later, in a callback: the server would log a traceback and
                # wait for ever instead of reading the end of its input.
                raise ValueError("stdin cannot be watched by the event loop")
            rtransport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader),
                os.fdopen(wire_in, "rb", buffering=0),
            )
            wtransport, wproto = await loop.connect_write_pipe(
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
                os.fdopen(wire_out, "wb", buffering=0),
            )
        except ValueError:  # not a pipe, socket or character device (a regular file)
            if rtransport is not None:
                rtransport.close()
            else:
                os.close(wire_in)
            os.close(wire_out)
            async with _sdk_stdio(saved_in, saved_out) as streams:
                yield streams
            return
        writer = asyncio.StreamWriter(wtransport, wproto, None, loop)
        # The SDK's dispatcher reads straight off the pipe and its handlers write straight
        # to it: no pump task and no anyio memory stream in between, which saves two task
        # switches per message (~20 % of a call's CPU, docs/benchmarks.md).
        out = _LineWriter(writer)
        yield _LineReader(reader, out), out
    finally:
        if rtransport is not None:
            rtransport.close()
        if wtransport is not None:
            wtransport.close()
        os.dup2(saved_in, stdin_fd)
        os.dup2(saved_out, stdout_fd)
        os.close(saved_in)
        os.close(saved_out)


def _watchable(fd: int) -> bool:
    """Whether the event loop's selector can watch ``fd`` for reading (epoll refuses
    regular files and some character devices, /dev/null among them).
    """
    with selectors.DefaultSelector() as probe:
        try:
            probe.register(fd, selectors.EVENT_READ)
        except (OSError, ValueError):
            return False
    return True


def _parse_message(line: bytes) -> Any:
    try:
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        # pydantic's JSON parser refuses lone surrogate escapes ("\ud800"), which
        # JavaScript (the official server) and Python's json accept; parse with json then.
        obj = json.loads(line)
        return types.jsonrpc_message_adapter.validate_python(obj, by_name=False)


#: The ``"id"`` of a request line, when it comes before anything nested (as clients write
#: it: jsonrpc, id, method, params).
_LEADING_ID = re.compile(
    rb'^\s*\{(?:\s*"(?:[^"\\]|\\.)*"\s*:\s*(?:"(?:[^"\\]|\\.)*"|[-\w.+]+)\s*,)*'
    rb'\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")'
)


def _refusal(line: bytes, exc: Exception) -> bytes | None:
    """The error response to a request line nested too deeply for Python's json to read
    (``JSON.parse`` reads it, so the official server answers it): without one the client
    would wait forever for its id. None for anything else, which the SDK session handles
    (the official server does not answer unparseable lines either).
    """
    if not isinstance(exc, RecursionError):
        return None
    found = _LEADING_ID.match(line)
    if found is None:
        return None
    error = {
        "code": -32600,
        "message": "Invalid Request: nested too deeply for this server to read (more than "
        "about 1,000 levels); send flatter arguments",
    }
    return b'{"jsonrpc":"2.0","id":%s,"error":%s}\n' % (
        found.group(1),
        json.dumps(error).encode(),
    )


def _dump_message(item: SessionMessage) -> bytes:
    try:
        return item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
    except ValueError:
        # A lone surrogate in a string (see _parse_message): write it as a \udxxx escape,
        # as JSON.stringify does.
        obj = item.message.model_dump(mode="python", by_alias=True, exclude_unset=True)
        return json.dumps(obj, separators=(",", ":")).encode()


class _LineWriter:
    """The write half over the stdout pipe: each message is one line, written whole by the
    task that sends it (so concurrent handlers never interleave), as the SDK's
    ``WriteStream`` protocol asks.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._closed = False
        #: the id of the ``initialize`` request whose answer is awaited (see _FastCalls)
        self.initialize_id: types.RequestId | None = None
        #: set once a successful answer to ``initialize`` was written
        self.initialized = False

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if (
            self.initialize_id is not None
            and isinstance(message, types.JSONRPCResponse)
            and message.id == self.initialize_id
        ):
            self.initialized = True
        await self.send_line(_dump_message(item) + b"\n")

    async def send_line(self, line: bytes) -> None:
        """Write one complete line and wait until the pipe takes it (see write_line)."""
        self.write_line(line)
        try:
            await self._writer.drain()
        except (BrokenPipeError, ConnectionError) as exc:
            raise anyio.BrokenResourceError from exc

    def write_line(self, line: bytes) -> None:
        """Write one complete line. Raises anyio's Closed/BrokenResourceError (which the
        SDK's dispatcher treats as a gone peer) once closed or the peer is gone.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if self._writer.transport.is_closing():
            raise anyio.BrokenResourceError
        self._writer.write(line)

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> _LineWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _LineReader:
    """The read half over the stdin pipe: one message per line, parsed as it is read (the
    SDK's ``ReadStream`` protocol). A line that does not parse is handed on as the
    exception (the SDK's session decides), except a request nested too deeply, which is
    refused here (:func:`_refusal`). End of input, or a broken pipe, ends the stream.
    """

    def __init__(self, reader: asyncio.StreamReader, out: _LineWriter) -> None:
        self._reader = reader
        self._out = out
        self._closed = False
        #: answers plain tools/call requests itself when set (serve_stdio sets it)
        self.fast: _FastCalls | None = None

    async def receive(self) -> SessionMessage | Exception:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                line = await self._reader.readline()
            except (BrokenPipeError, ConnectionError):
                line = b""
            fast = self.fast
            if not line:
                if fast is not None:
                    await fast.finish()  # answer what is in flight before the SDK stops
                raise anyio.EndOfStream
            if not line.strip():
                continue
            if fast is not None and fast.take(line):
                continue
            try:
                parsed = _parse_message(line)
                if fast is not None:
                    fast.observe(parsed)
                return SessionMessage(parsed)
            except Exception as exc:
                refusal = _refusal(line, exc)
                if refusal is None:
                    return exc
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._out.write_line(refusal)

    def __aiter__(self) -> _LineReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> _LineReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _FastCalls:
    """``tools/call`` without the SDK's per-request machinery, for ``serve-mcp``.

    Each request otherwise costs a JSON-RPC model validation, the method's surface and
    params validation, a task in the dispatcher's task group with its cancel scope, the
    result's validation against ``CallToolResult`` and a response model: about as much CPU
    again as the durable write itself (docs/benchmarks.md). Here a line that is a plain
    ``tools/call`` — exactly ``jsonrpc``, ``id``, ``method`` and ``params``, the params
    exactly ``name`` and ``arguments`` (what the SDK client, Claude Desktop and Claude Code
    send) — is parsed once, handed to :func:`tool_result` (the same function the SDK
    handler calls) in a task of its own, and answered with the bytes the SDK would write
    (tests/memory/test_mcp_fast_calls.py compares them). Everything else goes to the SDK:
    requests before ``initialize`` was answered (the SDK refuses those), requests with
    ``_meta`` (progress tokens, the 2026 envelope), malformed ones, and every call while a
    client is subscribed to the resource (the SDK handler sends the update notifications).

    Like the SDK, a request the client cancels (``notifications/cancelled``) is not
    answered; a write it asked for may still be made (it may already be on its way to the
    disk, in both paths). At the end of the input the calls in flight are answered before
    the SDK stops (each within the service's call deadline).
    """

    def __init__(self, service: MemoryService, out: _LineWriter, subscribed: set[str]) -> None:
        self._service = service
        self._out = out
        self._subscribed = subscribed
        self._in_flight: dict[types.RequestId, asyncio.Task[None]] = {}
        self._cancelled: set[types.RequestId] = set()

    def take(self, line: bytes) -> bool:
        """Start answering ``line`` if it is a plain tools/call; False to leave it to the SDK."""
        if not self._out.initialized or self._subscribed or b'"tools/call"' not in line:
            return False
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if type(msg) is not dict or msg.keys() != _REQUEST_KEYS:
            return False
        rid, params = msg["id"], msg["params"]
        if (
            msg["method"] != "tools/call"
            or msg["jsonrpc"] != "2.0"
            or type(rid) not in (int, str)
            or type(params) is not dict
            or not params.keys() <= _PARAMS_KEYS
            or type(params.get("name")) is not str
            or not (params.get("arguments") is None or type(params["arguments"]) is dict)
            or rid in self._in_flight
        ):
            return False
        task = asyncio.get_running_loop().create_task(
            self._answer(rid, params["name"], params.get("arguments"))
        )
        self._in_flight[rid] = task
        return True

    def observe(self, message: Any) -> None:
        """Note what the SDK path reads: the ``initialize`` request (its answer enables the
        fast path) and cancellations of calls answered here.
        """
        if isinstance(message, types.JSONRPCRequest) and message.method == "initialize":
            self._out.initialize_id = message.id
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and isinstance(message.params, dict)
        ):
            rid = message.params.get("requestId")
            if isinstance(rid, int | str) and rid in self._in_flight:
                self._cancelled.add(rid)

    async def finish(self) -> None:
        """Wait until every call in flight is answered."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    async def _answer(self, rid: types.RequestId, name: str, arguments: Any) -> None:
        try:
            try:
                result = await tool_result(self._service, name, arguments)
            except Exception as exc:  # what the SDK's dispatcher answers for a failing handler
                log.exception("handler for 'tools/call' raised")
                reply: SessionMessage | bytes = SessionMessage(
                    types.JSONRPCError(
                        jsonrpc="2.0", id=rid, error=types.ErrorData(code=0, message=str(exc))
                    )
                )
            else:
                reply = _result_line(rid, result) or SessionMessage(
                    types.JSONRPCResponse(jsonrpc="2.0", id=rid, result=result)
                )
            if rid in self._cancelled:
                return
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                if isinstance(reply, bytes):
                    await self._out.send_line(reply)
                else:
                    await self._out.send(reply)
        finally:
            self._in_flight.pop(rid, None)
            self._cancelled.discard(rid)


_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS_KEYS = frozenset({"name", "arguments"})


def _result_line(rid: types.RequestId, result: dict[str, Any]) -> bytes | None:
    """The response line the SDK writes for ``result`` (pydantic-core's encoder, like
    ``model_dump_json``), or None when that encoder refuses it (a lone surrogate: the
    caller then lets the SDK's models write it, see _dump_message).
    """
    try:
        return b'{"jsonrpc":"2.0","id":%s,"result":%s}\n' % (
            pydantic_core.to_json(rid),
            pydantic_core.to_json(result),
        )
    except pydantic_core.PydanticSerializationError:
        return None


@contextlib.asynccontextmanager
async def _sdk_stdio(in_fd: int, out_fd: int) -> AsyncIterator[tuple[Any, Any]]:
    from mcp.server.stdio import stdio_server

    stdin = anyio.wrap_file(os.fdopen(os.dup(in_fd), "r", encoding="utf-8", errors="replace"))
    stdout = anyio.wrap_file(os.fdopen(os.dup(out_fd), "w", encoding="utf-8"))
    try:
        async with stdio_server(stdin=stdin, stdout=stdout) as streams:
            yield streams
    finally:
        await stdin.aclose()
        await stdout.aclose()
