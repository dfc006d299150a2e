"""The stdio link to a tool server: the mcp SDK's stdio transport, with its input bounded.

The SDK's ``stdio_client`` keeps a server's line until its newline comes, copying all of it
again at each 64 KiB read: a server that answers with 100 MB on one line — a whole file, a
page, or a bug that never ends the line — makes the daemon hold it (several times over while
it is decoded and parsed) and spend minutes of CPU on the event loop copying it, and no
option of the SDK bounds it. A server's stdout is third-party output, so the daemon reads it
the way it reads a server's stderr (bounded): :class:`StdioLink` is the SDK's sequence —
the server in a session of its own, one task reading its stdout and one writing its stdin,
and at the end: stdin closed, a grace period, SIGTERM to its process group, SIGKILL — with
a reader that keeps at most ``max_message_bytes`` of a line:

* a longer message is skipped as it streams in (memory stays bounded, the copying linear).
  If it answers a request whose id stands at the start or the end of the line (where the
  Python and TypeScript SDKs put it), that request fails at once with a JSON-RPC error
  saying how large the answer was (:data:`ANSWER_TOO_LARGE` in its ``data``): the server
  keeps running and the model can ask for less. Otherwise (no id to be read, or the message
  is the server's own request or notification) the link is **broken**;
* a line that is not a JSON-RPC message (a server printing a banner, or a debug line per
  call, to stdout) is skipped with a log line, the first few of them; after
  :data:`MAX_JUNK_LINES` of them in a row, with no MCP message between, the link is broken:
  a server flooding its stdout would otherwise keep the event loop parsing. (In a row, not
  in all: one stray line per call would otherwise break a long-running server's link every
  thousand calls.)
* requests and notifications of the server's own (progress, log messages, list changes)
  are each parsed and handled on the event loop, ~0.1 ms apiece: a server sending them as
  fast as it can write would keep the loop busy for as long as it runs. They are metered by
  a token bucket: a burst of :data:`OWN_MESSAGES_BURST`, then :data:`OWN_MESSAGES_PER_SECOND`
  a second for as long as the server likes; past that the link is broken.

A broken link stops reading (the session's pending requests fail) and calls ``on_broken``
with the reason, so the server is stopped and restarted like one that died.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TextIO

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

__all__ = ["ANSWER_TOO_LARGE", "MAX_JUNK_LINES", "stdio_link"]

log = logging.getLogger(__name__)

#: The ``data`` marker of the error a request gets when its answer was over the bound.
ANSWER_TOO_LARGE = "companyd:answer_too_large"
#: Lines that are not JSON-RPC a server may write to its stdout in a row (no MCP message
#: between them) before its link is broken.
MAX_JUNK_LINES = 1000
#: How many of them are logged (each with its first characters).
LOGGED_JUNK_LINES = 3
#: Requests and notifications of a server's own it may send at once (a burst of progress or
#: log messages), and how many a second after that, before its link is broken: ~5 % of a core
#: at the rate, where a flood takes all of it.
OWN_MESSAGES_BURST = 5_000
OWN_MESSAGES_PER_SECOND = 500.0

# The SDK's own timings (mcp.client.stdio), for the same steps.
_WRITER_FLUSH_SECONDS = 0.5
_EXIT_GRACE_SECONDS = 2.0
_KILL_AFTER_SECONDS = 2.0
_REAP_SECONDS = 2.0
_EXIT_POLL_SECONDS = 0.01

# How much of an over-long line is kept to find its id: its first and its last bytes.
_EDGE = 512
# A top-level "id" at the start of a message ({"jsonrpc": "2.0", "id": 7, …) or at its end
# (…, "jsonrpc": "2.0", "id": 7}); nested objects cannot match either: a nested key is
# neither right after the opening brace nor right before the closing one.
_ID = rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")'
_HEAD_ID = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?' + _ID + rb"\s*,")
_TAIL_ID = re.compile(rb",\s*" + _ID + rb"\s*\}\s*\Z")
# A request or a notification: a top-level "method" before any nested value (both SDKs write
# "jsonrpc" and "id", when they come first, before it). Its id is the server's own, not one
# of the session's requests: an over-long one must not fail the session's request of that id.
_METHOD_HEAD = re.compile(
    rb'\A\s*\{(?:\s*"(?:jsonrpc|id)"\s*:\s*(?:-?\d{1,18}|"[^"\\]{0,200}")\s*,)*\s*"method"\s*:'
)


class _Broken(Exception):
    """Ends the reader: the link cannot go on (the reason is in ``args[0]``)."""


@asynccontextmanager
async def stdio_link(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    errlog: TextIO,
    name: str,
    max_message_bytes: int,
    on_broken: Callable[[str], None],
    clock: Callable[[], float] = anyio.current_time,
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``command`` and yield the session's ``(read_stream, write_stream)`` pair, as
    ``mcp.client.stdio.stdio_client`` does; stop the server when the block ends (bounded
    waits, shielded from cancellation). Raises ``OSError`` if it cannot be started.
    ``clock``: seconds, for the rate of the server's own messages.
    """
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | dict(env or {}),
        stderr=errlog,
        cwd=cwd,
        start_new_session=True,
    )
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    stopping = False

    async def reader() -> None:
        assert process.stdout is not None
        try:
            async with read_in:
                await _read_messages(process.stdout, read_in, name, max_message_bytes, clock)
        except _Broken as exc:
            if not stopping:
                log.warning("MCP server %r: %s; stopping it", name, exc.args[0])
                on_broken(exc.args[0])
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the session is gone, or our own stop closed the pipe under the read
        finally:
            await _drain(process.stdout)

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_out:
                async for message in write_out:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading (it may still run): end the session's reads so
            # that a request does not wait for an answer that cannot come.
            await read_in.aclose()
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_out, write_in
        finally:
            stopping = True
            with anyio.CancelScope(shield=True):
                read_out.close()
                write_in.close()
                with anyio.move_on_after(_WRITER_FLUSH_SECONDS):
                    await writer_done.wait()
                await _stop(process, name)
                for stream in (read_out, write_in, read_in, write_out):
                    await stream.aclose()
            tg.cancel_scope.cancel()


async def _read_messages(
    stdout: anyio.abc.ByteReceiveStream,
    send: Any,
    name: str,
    limit: int,
    clock: Callable[[], float] = anyio.current_time,
) -> None:
    """Parse ``stdout`` line by line into ``send`` until the end of the stream, each line
    kept to at most ``limit`` bytes, the server's own requests and notifications metered on
    ``clock`` (see the module's docstring for what happens past either).
    """
    own = _OwnMessages(clock)
    line = bytearray()
    over: int | None = None  # bytes of the current line once it is past the limit
    head = tail = b""
    junk = 0  # lines that are not MCP, in all (the first few are logged)
    in_a_row = 0  # ... since the last MCP message
    while True:
        try:
            chunk = await stdout.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if junk > LOGGED_JUNK_LINES:
                log.warning(
                    "MCP server %r wrote %d more line(s) to its stdout that are not MCP "
                    "messages, not logged",
                    name,
                    junk - LOGGED_JUNK_LINES,
                )
            return
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            part = chunk[start:end]
            if over is None and len(line) + len(part) > limit:
                over = len(line)
                head = (bytes(line[:_EDGE]) + part[:_EDGE])[:_EDGE]
                tail = bytes(line[-_EDGE:])
                line.clear()
            if over is not None:
                over += len(part)
                tail = (tail + part[-_EDGE:])[-_EDGE:]
            else:
                line += part
            if newline < 0:
                break
            start = newline + 1
            if over is not None:
                await send.send(_too_large(head, tail, over, limit, name))
                over, head, tail = None, b"", b""
                continue
            text, line = bytes(line), bytearray()
            if not text.strip():
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
            except ValueError:
                junk += 1
                in_a_row += 1
                if junk <= LOGGED_JUNK_LINES:
                    log.warning(
                        "MCP server %r wrote a line to its stdout that is not an MCP message "
                        "(skipped; stdout carries MCP only, a server's own messages belong on "
                        "stderr): %r",
                        name,
                        text[:200].decode("utf-8", "replace"),
                    )
                if in_a_row >= MAX_JUNK_LINES:
                    raise _Broken(
                        f"wrote {in_a_row} lines in a row to its stdout that are not MCP messages"
                    ) from None
                continue
            in_a_row = 0
            if isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification):
                own.count()
            await send.send(SessionMessage(message))


class _OwnMessages:
    """The token bucket of a server's own requests and notifications: it holds
    :data:`OWN_MESSAGES_BURST` tokens, refilled at :data:`OWN_MESSAGES_PER_SECOND` on
    ``clock``; a message takes one, and one with none left breaks the link.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._tokens = float(OWN_MESSAGES_BURST)
        self._at = clock()

    def count(self) -> None:
        now = self._clock()
        refill = max(0.0, now - self._at) * OWN_MESSAGES_PER_SECOND
        self._tokens = min(float(OWN_MESSAGES_BURST), self._tokens + refill)
        self._at = now
        if self._tokens < 1:
            raise _Broken(
                f"sent requests and notifications of its own faster than "
                f"{OWN_MESSAGES_PER_SECOND:,.0f} a second for longer than a burst of "
                f"{OWN_MESSAGES_BURST:,}"
            )
        self._tokens -= 1


def _too_large(head: bytes, tail: bytes, size: int, limit: int, name: str) -> SessionMessage:
    """The error answer to the request an over-long message answered; :class:`_Broken` if
    the message's id cannot be read (its request would otherwise wait until its timeout), or
    if it is not an answer at all (a request or a notification of the server's).
    """
    mib = f"{size / 2**20:.1f} MiB"
    bound = f"more than its limits.message_mb, {limit // 2**20} MiB"
    if _METHOD_HEAD.match(head):
        raise _Broken(f"sent a request or notification of {mib} ({bound})")
    m = _HEAD_ID.match(head) or _TAIL_ID.search(tail)
    if m is None:
        raise _Broken(f"wrote a message of {mib} ({bound}) whose request could not be told")
    request_id = json.loads(m.group(1))
    log.warning(
        "MCP server %r answered request %r with %s, more than its limits.message_mb (%d MiB); "
        "the answer was dropped and the call fails",
        name,
        request_id,
        mib,
        limit // 2**20,
    )
    error = types.ErrorData(
        code=types.INTERNAL_ERROR,
        message=(
            f"the answer was {mib}, more than the {limit // 2**20} MiB a message of this tool "
            "server may be (limits.message_mb in company.yaml); ask for less — a part, a "
            "page, a shorter length"
        ),
        data={"reason": ANSWER_TOO_LARGE, "bytes": size, "limit": limit},
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


async def _drain(stdout: anyio.abc.ByteReceiveStream | None) -> None:
    """Read and discard the rest of ``stdout``: a server blocked writing to a full pipe
    could not see its stdin close and exit. Ends when the stop closes the pipe.
    """
    if stdout is None:
        return
    with anyio.CancelScope(shield=True), suppress(Exception):
        while True:
            await stdout.receive()


async def _stop(process: anyio.abc.Process, name: str) -> None:
    """Close the server's stdin, give it :data:`_EXIT_GRACE_SECONDS` to exit, then SIGTERM
    its process group and SIGKILL it :data:`_KILL_AFTER_SECONDS` later (the MCP spec's
    sequence, the SDK's timings). Every wait is bounded.
    """
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    if not await _exited(process, _EXIT_GRACE_SECONDS):
        await terminate_posix_process_tree(process, _KILL_AFTER_SECONDS)
        if not await _exited(process, _REAP_SECONDS):
            log.warning("MCP server %r (pid %d) is still alive after SIGKILL", name, process.pid)
    if process.stdout is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()
    with anyio.move_on_after(_REAP_SECONDS), suppress(Exception):
        await process.aclose()


async def _exited(process: anyio.abc.Process, seconds: float) -> bool:
    """Whether the process exits within ``seconds`` (its return code polled: waiting on it
    would also wait for its pipes, which a child of it may hold open).
    """
    with anyio.move_on_after(seconds):
        while process.returncode is None:  # noqa: ASYNC110 (no event says a process exited)
            await anyio.sleep(_EXIT_POLL_SECONDS)
        return True
    return False
