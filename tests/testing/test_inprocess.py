"""The in-process harness: its CLI (:func:`companyd.testing.inprocess.cli_in_thread`) and
its clock (:meth:`InProcessDaemon.advance_until`).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

import companyd.cli
from companyd.clock import ManualClock
from companyd.testing.inprocess import InProcessDaemon, cli_in_thread, settle


def test_a_cli_in_a_thread_captures_its_own_output_and_no_other_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon runs in the same process as the CLI: while a command runs, a daemon thread
    that starts an MCP server takes ``sys.stderr.fileno()`` (a captured ``StringIO`` has
    none: the server failed to start) and its writes are not the command's output.
    """
    seen: dict[str, object] = {}

    def elsewhere() -> None:
        try:
            seen["fileno"] = sys.stderr.fileno()
        except Exception as exc:
            seen["fileno"] = exc
        print("a daemon thread's line", file=sys.stderr)

    def command(argv: Sequence[str] | None = None) -> int:
        print("the command's answer")
        print("the command's warning", file=sys.stderr)
        other = threading.Thread(target=elsewhere)
        other.start()
        other.join(10)
        return 3

    monkeypatch.setattr(companyd.cli, "main", command)
    got = cli_in_thread(["anything"])
    assert isinstance(seen["fileno"], int), seen["fileno"]
    assert (got.rc, got.out, got.err) == (
        3,
        "the command's answer\n",
        "the command's warning\n",
    )


@pytest.mark.anyio
async def test_advance_until_lets_real_time_pass_while_nothing_is_due_on_the_clock(
    tmp_path: Path,
) -> None:
    """What is left may be I/O in real time (a model call, a delivery): with nothing due on
    the clock before the limit, the clock stays and the I/O gets the real seconds. A jump
    to the limit raced it, and lost under a whole suite's load. A sleeper before the limit
    is still reached by moving the clock to it.
    """
    clock = ManualClock(1_000.0)
    harness = InProcessDaemon(tmp_path / "company.yaml", tmp_path / "s", clock=clock)
    io_done = threading.Event()
    timer = threading.Timer(0.3, io_done.set)  # the I/O, finishing 0.3 real seconds later
    timer.start()
    try:
        took = await harness.advance_until(io_done.is_set, limit=60, timeout=10)
    finally:
        timer.cancel()
    assert took == 0.0

    woke: list[float] = []

    async def sleeper() -> None:
        await clock.sleep(5)
        woke.append(clock.monotonic())

    task = asyncio.create_task(sleeper())
    await settle()
    assert await harness.advance_until(lambda: bool(woke), limit=60, timeout=10) == 5.0
    await task
