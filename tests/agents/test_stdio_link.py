"""The stdio link to a tool server reads its stdout bounded (companyd.agents._stdio): real
server processes (small Python scripts writing what a server could write), the real link.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import tracemalloc
from typing import Any

import anyio
import mcp_types as types
import pytest

from companyd.agents._stdio import ANSWER_TOO_LARGE, MAX_JUNK_LINES, stdio_link

pytestmark = pytest.mark.anyio

MIB = 2**20


def _server(body: str) -> list[str]:
    """A "server" that waits for one line on stdin (the client's request), then runs
    ``body`` (with ``out`` = its binary stdout), then waits for stdin to close.
    """
    script = (
        "import sys\nout = sys.stdout.buffer\nsys.stdin.readline()\n"
        + textwrap.dedent(body)
        + "\nout.flush()\nsys.stdin.read()\n"
    )
    return ["-c", script]


async def _exchange(body: str, limit: int = MIB, count: int = 10) -> tuple[list[Any], list[str]]:
    """Send one request to the server running ``body``; what the session reads (up to
    ``count`` messages, until the stream ends) and the reasons the link broke.
    """
    broken: list[str] = []
    got: list[Any] = []
    with anyio.fail_after(60):
        async with stdio_link(
            sys.executable,
            _server(body),
            env=None,
            cwd=None,
            errlog=sys.stderr,
            name="test",
            max_message_bytes=limit,
            on_broken=broken.append,
        ) as (read, write):
            from mcp.shared.message import SessionMessage

            ping = types.JSONRPCRequest(jsonrpc="2.0", id=1, method="ping")
            await write.send(SessionMessage(ping))
            async for item in read:
                got.append(item.message)
                if len(got) == count:
                    break
    return got, broken


async def test_an_answer_over_the_bound_fails_its_request_and_the_link_goes_on() -> None:
    got, broken = await _exchange(
        """
        pad = "a" * (3 * 2**20)
        # the Python SDK's order (id first), then the TypeScript SDK's (id last)
        out.write(b'{"jsonrpc":"2.0","id":1,"result":{"pad":"' + pad.encode() + b'"}}\\n')
        out.write(b'{"result":{"pad":"' + pad.encode() + b'"},"jsonrpc":"2.0","id":"b-2"}\\n')
        out.write(b'{"jsonrpc":"2.0","id":3,"result":{}}\\n')
        out.flush()
        sys.stdin.close()
        """,
        count=3,
    )
    assert broken == []
    first, second, third = got
    assert isinstance(first, types.JSONRPCError) and first.id == 1
    assert second.id == "b-2" and isinstance(second, types.JSONRPCError)
    assert first.error.data["reason"] == ANSWER_TOO_LARGE
    size = len('{"jsonrpc":"2.0","id":1,"result":{"pad":""}}') + 3 * MIB
    assert first.error.data == {"reason": ANSWER_TOO_LARGE, "bytes": size, "limit": MIB}
    assert first.error.message.startswith(
        "the answer was 3.0 MiB, more than the 1 MiB a message of this tool server may be "
        "(limits.message_mb in company.yaml); ask for less"
    )
    assert isinstance(third, types.JSONRPCResponse) and third.id == 3  # the link goes on


async def test_an_over_long_line_whose_request_cannot_be_told_breaks_the_link() -> None:
    # "id" only inside the result: nested, so not the message's id
    got, broken = await _exchange(
        """
        out.write(b'{"jsonrpc":"2.0","result":{"id":1,"pad":"' + b"a" * (2 * 2**20) + b'"}}\\n')
        out.write(b'{"jsonrpc":"2.0","id":1,"result":{}}\\n')
        """
    )
    assert got == []  # nothing after it is read: the link is broken
    assert broken == [
        "wrote a message of 2.0 MiB (more than its limits.message_mb, 1 MiB) whose request "
        "could not be told"
    ]


@pytest.mark.parametrize(
    "start",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"pad":"',  # Python
        b'{"method":"sampling/createMessage","params":{"pad":"',  # TypeScript: id last
    ],
)
async def test_an_over_long_request_of_the_server_is_not_taken_for_an_answer(
    start: bytes,
) -> None:
    # the server's own request, with the id of the session's pending request (1): failing
    # that request with "the answer was too large" would blame the wrong message
    end = b'"}}' if b'"id"' in start else b'"},"jsonrpc":"2.0","id":1}'
    got, broken = await _exchange(
        f"""
        out.write({start!r} + b"a" * (2 * 2**20) + {end!r} + b"\\n")
        out.write(b'{{"jsonrpc":"2.0","id":1,"result":{{}}}}\\n')
        """,
        count=2,
    )
    assert got == []  # nothing after it is read: the link is broken
    assert broken == [
        "sent a request or notification of 2.0 MiB (more than its limits.message_mb, 1 MiB)"
    ]


async def test_an_endless_line_is_not_held() -> None:
    # 48 MiB without a newline, then the stream ends: the link keeps at most the bound (the
    # mcp SDK's stdio client holds the whole line, and copies it again at every read)
    tracemalloc.start()
    try:
        got, broken = await _exchange(
            """
            block = b"x" * 2**20
            for _ in range(48):
                out.write(block)
            out.flush()
            out.close()
            """
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [] and broken == []
    assert peak < 8 * MIB, f"{peak / MIB:.1f} MiB held for a 48 MiB line"


async def test_lines_that_are_not_mcp_are_skipped_then_a_flood_breaks_the_link(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="companyd.agents._stdio")
    got, broken = await _exchange(
        """
        out.write(b"Server started on stdio\\n\\n")  # a banner, and an empty line
        out.write(b'{"jsonrpc":"2.0","id":1,"result":{}}\\n')
        """,
        count=1,
    )
    assert [m.id for m in got] == [1] and broken == []
    assert [r.getMessage() for r in caplog.records] == [
        "MCP server 'test' wrote a line to its stdout that is not an MCP message (skipped; "
        "stdout carries MCP only, a server's own messages belong on stderr): "
        "'Server started on stdio'"
    ]
    caplog.clear()
    got, broken = await _exchange(
        """
        for i in range(10):
            out.write(b"junk %d\\n" % i)
        out.close()
        """
    )
    assert got == [] and broken == []
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 4 and logged[2].endswith("'junk 2'")
    assert logged[3] == (
        "MCP server 'test' wrote 7 more line(s) to its stdout that are not MCP messages, not logged"
    )
    caplog.clear()
    got, broken = await _exchange(
        f"""
        for i in range({MAX_JUNK_LINES + 5}):
            out.write(b"junk %d\\n" % i)
        out.write(b'{{"jsonrpc":"2.0","id":1,"result":{{}}}}\\n')
        """
    )
    assert got == []
    assert broken == [
        f"wrote {MAX_JUNK_LINES} lines in a row to its stdout that are not MCP messages"
    ]
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 4  # the first three, and the stop
    assert logged[-1] == (
        f"MCP server 'test': wrote {MAX_JUNK_LINES} lines in a row to its stdout that are not "
        "MCP messages; stopping it"
    )


async def test_stray_lines_between_messages_never_add_up_to_a_flood() -> None:
    # a server printing a debug line to stdout with each of its messages: more such lines
    # in all than a flood, never that many in a row — the link goes on
    notification = (
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}'
    )
    got, broken = await _exchange(
        f"""
        for i in range({MAX_JUNK_LINES + 5}):
            out.write(b"debug: step %d\\n" % i)
            out.write({notification!r} + b"\\n")
        out.write(b'{{"jsonrpc":"2.0","id":1,"result":{{}}}}\\n')
        """,
        count=MAX_JUNK_LINES + 6,
    )
    assert broken == []
    assert len(got) == MAX_JUNK_LINES + 6 and got[-1].id == 1


def test_the_ids_are_read_only_at_the_top_level() -> None:
    from companyd.agents._stdio import _HEAD_ID, _TAIL_ID

    def head(text: bytes) -> Any:
        m = _HEAD_ID.match(text)
        return m and json.loads(m.group(1))

    def tail(text: bytes) -> Any:
        m = _TAIL_ID.search(text)
        return m and json.loads(m.group(1))

    assert head(b'{"jsonrpc": "2.0", "id": 12, "result"') == 12
    assert head(b'{"id":"abc","jsonrpc":"2.0"') == "abc"
    assert head(b'{"jsonrpc":"2.0","result":{"id":1,') is None  # nested
    assert tail(b'xx"},"jsonrpc":"2.0","id":-4}') == -4
    assert tail(b'xx","id":7}}') is None  # a nested object's last key
    assert tail(b'x,"id":"r-1" }\n') == "r-1"
    from companyd.agents._stdio import _METHOD_HEAD

    assert _METHOD_HEAD.match(b'{"jsonrpc": "2.0", "id": 3, "method": "roots/list"')
    assert _METHOD_HEAD.match(b'{"method":"notifications/message","params"')
    assert not _METHOD_HEAD.match(b'{"jsonrpc":"2.0","id":3,"result":{"method":"x"')  # nested
    assert not _METHOD_HEAD.match(b'{"result":{"method":"x"')


async def test_a_flood_of_the_servers_own_notifications_breaks_the_link() -> None:
    # notifications as fast as the server can write them (each is parsed and handled on the
    # daemon's event loop): past the burst, far faster than the rate — the link breaks
    from companyd.agents._stdio import OWN_MESSAGES_BURST

    notification = b'{"jsonrpc":"2.0","method":"notifications/progress","params":'
    got, broken = await _exchange(
        f"""
        for i in range({4 * OWN_MESSAGES_BURST}):
            out.write({notification!r} + b'{{"progressToken":1,"progress":%d}}}}\\n' % i)
        out.write(b'{{"jsonrpc":"2.0","id":1,"result":{{}}}}\\n')
        """,
        count=4 * OWN_MESSAGES_BURST + 1,
    )
    assert broken == [
        "sent requests and notifications of its own faster than 500 a second for longer "
        "than a burst of 5,000"
    ]
    assert OWN_MESSAGES_BURST <= len(got) < 4 * OWN_MESSAGES_BURST  # the burst went through
    assert all(isinstance(m, types.JSONRPCNotification) for m in got)


class _Lines(anyio.abc.ByteReceiveStream):
    """A server's stdout as the reader receives it: ``count`` copies of ``line``, one chunk
    each, then its end.
    """

    def __init__(self, line: bytes, count: int) -> None:
        self.line, self.left = line, count

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.left == 0:
            raise anyio.EndOfStream
        self.left -= 1
        return self.line

    async def aclose(self) -> None:
        self.left = 0


class _Session:
    """Where the reader hands the messages it read."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    async def send(self, item: Any) -> None:
        self.got.append(item.message)


@pytest.mark.parametrize(
    ("per_second", "delivered"),
    [
        (400, 30_000),  # under the rate: every one, however many
        (500, 30_000),  # at the rate: the bucket never empties
        # twice the rate: half a token net a message, so the burst of 5,000 lasts ~10,000
        # (9,998: the bucket starts full, so the first message's refill is lost to the cap)
        (1_000, 9_998),
    ],
)
async def test_the_servers_own_messages_are_metered_by_a_token_bucket(
    per_second: int, delivered: int
) -> None:
    from companyd.agents._stdio import _Broken, _read_messages

    ticks = iter(range(10**6))
    clock = lambda: next(ticks) / per_second  # noqa: E731 (one tick per message read)
    request = b'{"jsonrpc":"2.0","id":"s-1","method":"roots/list"}\n'
    session = _Session()
    if delivered < 30_000:
        with pytest.raises(_Broken, match="faster than 500 a second"):
            await _read_messages(_Lines(request, 30_000), session, "test", MIB, clock)
    else:
        await _read_messages(_Lines(request, 30_000), session, "test", MIB, clock)
    assert len(session.got) == delivered
