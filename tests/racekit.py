"""Two connections to one SQLite store interleaved at a chosen statement, the same way on
every run: for tests of what one store's transaction reads staying true until it writes
(another process — the CLI beside the daemon, a second daemon — writing the same file).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any, Protocol


class _Worker(Protocol):
    async def run(self, fn: Any) -> Any: ...


async def race_at(
    first: _Worker,
    at: str,
    first_work: Awaitable[Any],
    second: _Worker,
    second_work: Awaitable[Any],
    *,
    hold: float = 0.3,
) -> tuple[Any, Any]:
    """Run ``first_work`` and ``second_work`` (each on its own store's connection: ``first``
    and ``second`` are the stores' database workers) so that ``second`` begins its
    transaction just as ``first`` starts its first statement beginning with ``at`` (before
    SQLite takes the lock that statement needs). ``first`` then waits until ``second_work``
    has ended, at most ``hold`` seconds (``second`` may be waiting for a lock ``first``
    holds). Their results or exceptions, in that order.
    """
    met = threading.Barrier(2, timeout=10.0)
    second_ended = threading.Event()
    armed = {"first": True, "second": True}

    def first_trace(sql: str) -> None:
        if armed["first"] and sql.lstrip().startswith(at):
            armed["first"] = False
            met.wait()
            second_ended.wait(hold)

    def second_trace(sql: str) -> None:
        if armed["second"] and sql.lstrip().startswith("BEGIN"):
            armed["second"] = False
            met.wait()

    await first.run(lambda db: db.set_trace_callback(first_trace))
    await second.run(lambda db: db.set_trace_callback(second_trace))
    try:
        one = asyncio.ensure_future(first_work)
        two = asyncio.ensure_future(second_work)
        two.add_done_callback(lambda _: second_ended.set())
        async with asyncio.timeout(30):
            both = await asyncio.gather(one, two, return_exceptions=True)
        return both[0], both[1]
    finally:
        await first.run(lambda db: db.set_trace_callback(None))
        await second.run(lambda db: db.set_trace_callback(None))
