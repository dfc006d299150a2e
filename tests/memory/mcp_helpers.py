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
