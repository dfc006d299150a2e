"""Talking to MCP memory servers (ours and the official one) through the mcp client SDK."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage

from companyd.memory import serve_stdio
from companyd.testing import forkserver

ROOT = Path(__file__).resolve().parents[2]
SERVE_MCP_ENV = {"COMPANYD_TEST_NO_NET": "1", "PYTHONPATH": str(ROOT / "src")}


def companyd_server(path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "companyd", "memory", "serve-mcp", "--file", str(path)],
        env=SERVE_MCP_ENV,
        cwd=str(ROOT),
    )


def official_server(index_js: str, path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command="node", args=[index_js], env={"MEMORY_FILE_PATH": str(path)}
    )


@dataclass
class Session:
    """An initialised client session plus what the server sent unasked."""

    client: ClientSession
    init: types.InitializeResult
    notifications: list[Any] = field(default_factory=list)

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """``{text, structured, error}`` of one tools/call."""
        result = await self.client.call_tool(tool, arguments)
        texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
        assert len(texts) == len(result.content) == 1, result
        return {
            "text": texts[0],
            "structured": result.structured_content,
            "error": bool(result.is_error),
        }

    async def ok(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        out = await self.call(tool, arguments)
        assert not out["error"], out["text"]
        return out["structured"]

    async def reset(self) -> None:
        """Empty the graph (entities, and relations with dangling ends)."""
        graph = await self.ok("read_graph", {})
        names = {e["name"] for e in graph["entities"]}
        for r in graph["relations"]:
            names.update((r["from"], r["to"]))
        if names:
            await self.ok("delete_entities", {"entityNames": sorted(names)})
        self.notifications.clear()


@asynccontextmanager
async def session(params: StdioServerParameters) -> AsyncIterator[Session]:
    notes: list[Any] = []

    async def on_message(message: Any) -> None:
        if not isinstance(message, Exception):
            notes.append(message)

    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=on_message) as client,
    ):
        init = await client.initialize()
        yield Session(client, init, notes)


class _ServerPipes:
    """The test's ends of a server's stdin and stdout: two descriptors, opened as files on
    first use (``stdin``, ``stdout``) or handed to an event loop (:func:`pipe_session`).
    """

    def __init__(self, to_server: int, from_server: int) -> None:
        self.to_server, self.from_server = to_server, from_server
        self._stdin: IO[bytes] | None = None
        self._stdout: IO[bytes] | None = None

    @property
    def stdin(self) -> IO[bytes]:
        if self._stdin is None:
            self._stdin = os.fdopen(self.to_server, "wb")
        return self._stdin

    @property
    def stdout(self) -> IO[bytes]:
        if self._stdout is None:
            self._stdout = os.fdopen(self.from_server, "rb")
        return self._stdout


class InProcessServer(_ServerPipes):
    """``companyd memory serve-mcp`` without the process start: :func:`serve_stdio` (what the
    command runs once it has parsed ``--file``) on a thread of its own with its own event
    loop, its stdin and stdout two OS pipes — the same transport code, the same
    ``MemoryService`` load, repair and compaction, the same bytes on the wire and on disk.
    Popen's face (``stdin``, ``stdout``, ``wait``), so a test can drive it like a process.

    What it does not prove: the argument parsing of the command, signals and a process's
    own fds 0 and 1 — tests about those start ``python -m companyd memory serve-mcp``
    (tests/memory/test_mcp_server.py, test_mcp_fast_calls.py). A server start costs ~0.8 s
    of CPU in a new process (imports) and next to nothing here.
    """

    def __init__(self, path: Path, *, fast_calls: bool = True) -> None:
        server_in, to_server = os.pipe()
        from_server, server_out = os.pipe()
        super().__init__(to_server, from_server)
        self.returncode: int | None = None
        self.error: BaseException | None = None

        # serve_stdio freezes the heap (companyd._heap), here the test process's
        frozen_before = gc.get_freeze_count()

        def run() -> None:
            try:
                asyncio.run(
                    serve_stdio(
                        path, stdin_fd=server_in, stdout_fd=server_out, fast_calls=fast_calls
                    )
                )
                self.returncode = 0
            except BaseException as exc:  # reported by wait()
                self.error = exc
                self.returncode = 1
            finally:
                os.close(server_in)
                os.close(server_out)  # the client reads EOF, as from an exited process
                if not frozen_before:
                    # nothing was frozen before: give the objects back to the collector (a
                    # frozen heap also hides them from gc.get_referrers, which hypothesis's
                    # register_random relies on). Where the process had frozen its own
                    # heap (an xdist worker, tests/conftest.py), unfreezing would hand those
                    # ~400,000 objects back to every later full collection: left frozen.
                    gc.unfreeze()

        self._thread = threading.Thread(target=run, name=f"serve-mcp {path.name}", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> int:
        """Wait until the server returned (its stdin was closed); raise what it raised."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the in-process server did not stop within {timeout} s")
        if self.error is not None:
            raise self.error
        assert self.returncode is not None
        return self.returncode


class ServeMcpForks:
    """``companyd memory serve-mcp`` (any ``companyd ARGV``) forked from the test process's
    fork server (companyd.testing.forkserver, which has imported what the command imports).

    Each child is a real process (pid, locks, signals, ``kill -9``, pipes, exit status);
    what it does not pay is the ~0.75 s of CPU of a fresh interpreter's imports, so tests
    that start many serve-mcp processes (SIGKILL trials, several writers on one file, a
    module's long-lived server, SIGTERM, the stderr line) take them from here. Tests about
    the interpreter start or the imports start ``python -m companyd``.
    """

    def start(self, argv: list[str], *, stderr: int = subprocess.DEVNULL) -> ForkedProcess:
        """``python -m companyd ARGV`` forked, its stdin and stdout pipes to this process
        (``stderr``: DEVNULL, or a descriptor the child gets a copy of).
        """
        child_in, to_child = os.pipe()
        from_child, child_out = os.pipe()
        err = None if stderr == subprocess.DEVNULL else stderr
        # the test process's environment (what the fork server's interpreter fixed at its
        # start included) with the suite's no-network guard
        env = {**os.environ, "COMPANYD_TEST_NO_NET": "1", "PYTHONUNBUFFERED": "1"}
        try:
            child = forkserver.spawn(argv, env, ROOT, stdin=child_in, stdout=child_out, stderr=err)
        finally:
            os.close(child_in)
            os.close(child_out)
        return ForkedProcess(child, to_child, from_child)

    def serve_mcp(self, path: Path, *, stderr: int = subprocess.DEVNULL) -> ForkedProcess:
        """``companyd memory serve-mcp --file PATH``."""
        return self.start(["memory", "serve-mcp", "--file", str(path)], stderr=stderr)


class ForkedProcess(_ServerPipes):
    """A child of :class:`ServeMcpForks`, with Popen's face (``pid``, ``stdin``,
    ``stdout``, ``poll``, ``wait``, ``send_signal``, ``kill``, ``communicate``,
    ``returncode``: negative for a signal).
    """

    def __init__(self, child: forkserver.ForkedProcess, to_child: int, from_child: int) -> None:
        super().__init__(to_child, from_child)
        self._child = child
        self.pid = child.pid
        self.wait = child.wait
        self.poll = child.poll
        self.send_signal = child.send_signal
        self.kill = child.kill

    @property
    def returncode(self) -> int | None:
        return self._child.returncode

    def communicate(self, data: bytes = b"", timeout: float | None = None) -> tuple[bytes, None]:
        """Write ``data``, close stdin, read stdout to its end, wait (as Popen's)."""
        writer = threading.Thread(target=self._feed, args=(data,), daemon=True)
        writer.start()
        out = self.stdout.read()
        self.stdout.close()
        writer.join(timeout)
        self.wait(timeout)
        return out, None

    def _feed(self, data: bytes) -> None:
        try:
            self.stdin.write(data)
        except BrokenPipeError:
            pass
        finally:
            self.stdin.close()


@asynccontextmanager
async def inprocess_session(path: Path) -> AsyncIterator[Session]:
    """:func:`session` on an :class:`InProcessServer`: the real SDK client, over the pipes
    (:func:`pipe_session`). Leaving the block closes the server's stdin and waits until it
    has answered what is in flight, compacted and returned, like a process's exit.
    """
    server = InProcessServer(path)
    async with pipe_session(server) as s:
        yield s


@asynccontextmanager
async def forked_session(forks: ServeMcpForks, path: Path) -> AsyncIterator[Session]:
    """:func:`session` on ``companyd memory serve-mcp --file PATH`` forked from ``forks``
    (:func:`pipe_session`). Leaving the block closes its stdin and waits for its exit.
    """
    async with pipe_session(forks.serve_mcp(path)) as s:
        yield s


@asynccontextmanager
async def interop_pair(
    forks: ServeMcpForks, index_js: str, directory: Path
) -> AsyncIterator[tuple[Session, Session]]:
    """Ours (forked ``serve-mcp``) and theirs (the official server at ``index_js``), each
    on its own file in ``directory`` and started within 60 s, for a module to share.
    """
    async with asyncio.timeout(60):
        ours_cm = forked_session(forks, directory / "ours.jsonl")
        theirs_cm = session(official_server(index_js, directory / "theirs.jsonl"))
        ours = await ours_cm.__aenter__()
        theirs = await theirs_cm.__aenter__()
    try:
        yield ours, theirs
    finally:
        await theirs_cm.__aexit__(None, None, None)
        await ours_cm.__aexit__(None, None, None)


@asynccontextmanager
async def pipe_session(server: InProcessServer | ForkedProcess) -> AsyncIterator[Session]:
    """The real SDK client over a server's two pipes.

    The transport mirrors the SDK's ``stdio_client``: one JSON-RPC message per line, written
    with ``model_dump_json(by_alias=True, exclude_unset=True)``, read with the SDK's
    message adapter. Leaving the block closes the server's stdin and waits (60 s at most)
    until it has returned or exited.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 30)
    rtransport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(server.from_server, "rb", 0)
    )
    wtransport, wproto = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
        os.fdopen(server.to_server, "wb", 0),
    )
    writer = asyncio.StreamWriter(wtransport, wproto, None, loop)
    read_in, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_out = anyio.create_memory_object_stream[SessionMessage](0)

    async def pump_in() -> None:
        async with read_in:
            while line := await reader.readline():
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:
                    await read_in.send(exc)
                else:
                    await read_in.send(SessionMessage(message))

    async def pump_out() -> None:
        async with write_out:
            async for item in write_out:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write(data.encode() + b"\n")
                await writer.drain()

    notes: list[Any] = []

    async def on_message(message: Any) -> None:
        if not isinstance(message, Exception):
            notes.append(message)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_in)
            tg.start_soon(pump_out)
            try:
                async with ClientSession(
                    read_stream, write_stream, message_handler=on_message
                ) as c:
                    init = await c.initialize()
                    yield Session(c, init, notes)
            finally:
                await write_stream.aclose()
                wtransport.close()  # the server's stdin ends: it finishes and returns
                with anyio.fail_after(60):
                    await anyio.to_thread.run_sync(server.wait, 60)
                tg.cancel_scope.cancel()
    finally:
        wtransport.close()
        rtransport.close()


class RawClient:
    """A minimal newline-delimited JSON-RPC client over a server's stdio (for load tests:
    pipelining and several processes at once, which the SDK client is not built for).
    ``argv`` starts the server; an :class:`InProcessServer` or a :class:`ForkedProcess` is
    used as it is.
    """

    def __init__(
        self,
        argv: list[str] | InProcessServer | ForkedProcess,
        env: dict[str, str] | None = None,
    ) -> None:
        self.proc: subprocess.Popen[bytes] | InProcessServer | ForkedProcess
        if isinstance(argv, InProcessServer | ForkedProcess):
            self.proc = argv
        else:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
            )
        self._next = 0
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "companyd-tests", "version": "0"},
            },
        )
        self.notify("notifications/initialized")

    def _send(self, msg: dict[str, Any]) -> None:

        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def send(self, method: str, params: dict[str, Any]) -> int:
        self._next += 1
        self._send({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        return self._next

    def receive(self) -> dict[str, Any]:
        """The next response (notifications are skipped)."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise EOFError("server closed its stdout")
            msg = json.loads(line)
            if "id" in msg:
                return dict(msg)

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = self.send(method, params)
        msg = self.receive()
        assert msg["id"] == rid, msg
        return msg

    def close(self, timeout: float = 30) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=timeout)
        self.proc.stdout.close()
        return code
