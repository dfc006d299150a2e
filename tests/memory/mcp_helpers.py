"""Talking to MCP memory servers (ours and the official one) through the mcp client SDK."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]


def companyd_server(path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "companyd", "memory", "serve-mcp", "--file", str(path)],
        env={"COMPANYD_TEST_NO_NET": "1", "PYTHONPATH": str(ROOT / "src")},
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


class RawClient:
    """A minimal newline-delimited JSON-RPC client over a server's stdio (for load tests:
    pipelining and several processes at once, which the SDK client is not built for).
    """

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        import os
        import subprocess

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
        import json

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
        import json

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
