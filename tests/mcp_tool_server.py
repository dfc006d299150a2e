"""A small external MCP tool server (stdio) for the agent tests.

Tools:
* ``post_update(text)`` — NOT idempotent: appends ``started <text>`` to the file named by
  ``$TOOL_LOG`` before doing its work and ``done <text>`` after; if ``$TOOL_BLOCK`` names an
  existing file it waits (up to 60 s) until that file is removed, so a test can kill the
  daemon while the call is in flight. With ``$TOOL_POST_ID`` set its result is
  ``posted id=<TOOL_POST_ID>: <text>`` (a result a ``done_when`` pattern can match).
* ``read_inbox()`` — read-only (annotated), returns a fixed inbox.
* ``crash()`` — the server process exits at once, mid-call.
* ``hog(mb)`` — allocates ``mb`` MiB; past the server's memory limit it exits (out of memory).
* ``chart()`` — read-only: a text, an image, an embedded text resource and a link (a
  result with more than text in it).
* ``garble()`` — writes a 2 MiB line that is not an answer to its stdout (a server bug),
  then waits.
* ``refuse()`` — answers with a JSON-RPC error (-32602), as a server does for bad
  arguments: the server is fine.
* ``scribble(mb)`` — writes ``mb`` MiB to ``scribble.bin`` in its home directory (a log that
  is never rotated); returns the size written, or the error.
* ``big(chars)`` — read-only (annotated), returns ``chars`` characters (``0123456789``
  repeated): a large answer, such as a whole file.
* ``trace_context()`` (only with ``$TOOL_TRACE`` set) — the request's ``params._meta`` as
  JSON (the W3C trace context a traced client sends).

With ``$TOOL_BAD_NAMES`` set it also offers ``post update!`` and a 200-character name,
which the Messages API would refuse (tool names are ``[a-zA-Z0-9_-]{1,64}``).

With ``$TOOL_VARIANT=2`` (an "updated" server) ``post_update`` has another description and
a new tool, ``delete_post(post_id)`` (annotated destructive), is offered.

If ``$TOOL_START_GATE`` names a file that does not exist, the server exits at once with
status 2 (a server that fails to start until the test opens the gate).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

# checked before the mcp SDK is imported (~0.6 s of CPU): a closed gate exits at once
_gate = os.environ.get("TOOL_START_GATE") if __name__ == "__main__" else None
if _gate and not Path(_gate).exists():
    raise SystemExit(2)

from mcp.server import MCPServer  # noqa: E402 (after the gate)
from mcp.server.mcpserver import Context  # noqa: E402
from mcp_types import ToolAnnotations  # noqa: E402

server = MCPServer("test-tools")
_STDOUT = os.dup(1)  # the pipe to the client, for garble()


def _log(line: str) -> None:
    path = os.environ.get("TOOL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


VARIANT = os.environ.get("TOOL_VARIANT", "1")


@server.tool(
    description="Post a status update to the outside world (not idempotent)."
    if VARIANT == "1"
    else "Post a status update, and also email it to every customer (not idempotent)."
)
def post_update(text: str) -> str:
    _log(f"started {text}")
    block = os.environ.get("TOOL_BLOCK")
    deadline = time.monotonic() + 60
    while block and Path(block).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _log(f"done {text}")
    post_id = os.environ.get("TOOL_POST_ID")
    return f"posted id={post_id}: {text}" if post_id else f"posted: {text}"


@server.tool(
    description="Read the founder's inbox.",
    annotations=ToolAnnotations(read_only_hint=True),
)
def read_inbox() -> str:
    return "1 new message: 'Can we move the launch to Friday?'"


def trace_context(ctx: Context) -> str:
    return json.dumps(dict(ctx.request_context.meta or {}))


if os.environ.get("TOOL_TRACE"):
    server.tool(description="Show the request's _meta (for tests).")(trace_context)


@server.tool(description="Crash the tool server (for tests).")
def crash() -> str:
    os._exit(1)


@server.tool(description="Allocate and touch `mb` MiB of memory (for the resource-limit tests).")
def hog(mb: int) -> str:
    try:
        block = bytearray(mb * 2**20)  # zero-filled: every page is touched
    except MemoryError:
        # Out of memory, the server dies, as a Node server does; the limit is what hit it.
        os._exit(70)
    return f"allocated {len(block) // 2**20} MiB"


@server.tool(description="Draw the sales chart.", annotations=ToolAnnotations(read_only_hint=True))
def chart() -> list[Any]:
    from mcp_types import (
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    return [
        TextContent(type="text", text="Sales, by week:"),
        ImageContent(type="image", data="iVBORw0KGgo=" * 100, mime_type="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(uri="file:///data/sales.csv", text="week,sales\n1,3"),
        ),
        ResourceLink(type="resource_link", name="full report", uri="https://example.com/r/7"),
    ]


@server.tool(description="Write a long line that is no message to stdout (for tests).")
def garble() -> str:
    # to a copy of the pipe made before the server started: while a tool runs, the SDK
    # points sys.stdout and descriptor 1 at stderr
    data = memoryview(b'{"garbage": "' + b"a" * 2**21 + b'"}\n')
    while data:
        data = data[os.write(_STDOUT, data) :]
    time.sleep(30)
    return "never read"


@server.tool(description="Write `mb` MiB to a file in the home directory (for tests).")
def scribble(mb: int) -> str:
    path = Path(os.environ["HOME"]) / "scribble.bin"
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(b"\0" * 2**20)  # past RLIMIT_FSIZE: EFBIG (Python ignores SIGXFSZ)
    return f"wrote {path.stat().st_size // 2**20} MiB"


@server.tool(description="Refuse with a JSON-RPC error (for tests).")
def refuse() -> str:
    from mcp.shared.exceptions import MCPError

    raise MCPError(code=-32602, message="no such post: 'p-404'")


@server.tool(
    description="Return `chars` characters (a large answer).",
    annotations=ToolAnnotations(read_only_hint=True),
)
def big(chars: int) -> str:
    return ("0123456789" * (chars // 10 + 1))[:chars]


if VARIANT == "2":

    @server.tool(description="Delete a post.", annotations=ToolAnnotations(destructive_hint=True))
    def delete_post(post_id: str) -> str:
        return f"deleted {post_id}"


if os.environ.get("TOOL_BAD_NAMES"):

    @server.tool(name="post update!", description="A tool with an invalid name.")
    def bad_name() -> str:
        return "never offered"

    @server.tool(name="x" * 200, description="A tool with an over-long name.")
    def long_name() -> str:
        return "never offered"


if __name__ == "__main__":
    server.run("stdio")
