"""Issue 15 item 8 for the memory owner, on a real full disk (a small tmpfs): a journal write
the disk refuses is not a crash. The owner raises the shared "state disk full" alarm once,
refuses writes (nothing acknowledged that is not durable), keeps serving reads, and takes
writes again — clearing the alarm — once the disk has room. A memory tool the model called
gets a tool error, not a crashed run.

Chaos week, seeds 2 and 3: the full-disk fault hit the memory journal first; the owner exited
``MemoryInconsistent`` ~94 times in 6 s (each a crash alert) and no disk alert was raised.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from companyd.agents import ToolCallContext, ToolError
from companyd.agents._tools import memory_tools
from companyd.events import Event, EventBus
from companyd.memory._codec import parse_graph
from companyd.memory._errors import MemoryUnavailable
from companyd.memory._service import MemoryService
from companyd.memory._store import GraphStore
from companyd.testing.disk import DiskUnavailable, fill, small_disk

from .conftest import ChildCtx

pytestmark = pytest.mark.anyio


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with small_disk(tmp_path / "disk", "4m") as d:
            yield d
    except DiskUnavailable as exc:
        pytest.skip(f"no real full disk here: {exc}")


def ent(name: str, *obs: str) -> dict[str, object]:
    return {"name": name, "entityType": "t", "observations": list(obs)}


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events if e.kind.startswith("state_disk")]


async def test_a_full_disk_pauses_memory_writes_without_a_crash_and_recovers(
    disk: Path,
) -> None:
    path = disk / "state" / "memory.jsonl"
    bus = EventBus()
    events: list[Event] = []
    bus.add_listener(events.append)
    service = MemoryService(path, bus=bus, disk_retry_seconds=0.05)
    ctx = ChildCtx()
    owner = asyncio.create_task(service.run(ctx))
    try:
        async with asyncio.timeout(10):
            await ctx.ready.wait()
        await service.call("create_entities", {"entities": [ent("before", "kept")]})
        filler = fill(disk)
        big = "x" * 200_000  # more than the disk's last free page
        for n in range(3):
            with pytest.raises(MemoryUnavailable, match="state disk is full") as refused:
                await service.call("create_entities", {"entities": [ent(f"lost {n}", big)]})
            assert "not saved" in str(refused.value) and "retry later" in str(refused.value)
        assert not owner.done(), "the memory owner exited on a full disk"
        assert kinds(events) == ["state_disk_full"]  # one alarm for the outage
        assert events[-1].data["what"] == "memory journal"
        # the alert names what the disk said, not the owner's internal "must restart"
        assert events[-1].data["error"].startswith("OSError: [Errno 28]"), events[-1].data
        assert "restart" not in events[-1].data["message"]
        # reads are served meanwhile, from what is durable
        graph = await service.call("read_graph", {})
        assert [e["name"] for e in graph["entities"]] == ["before"]
        assert (await service.recall("before"))["found"]

        # the model sees a tool error, and the run goes on
        tool = {t.name: t for t in memory_tools(service)}["create_entities"]
        call_ctx = ToolCallContext(agent="ceo", run_id="run-1", task_id="task-1")
        with pytest.raises(ToolError, match="memory not saved: the state disk is full"):
            await tool.handler({"entities": [ent("by the model")]}, call_ctx)

        os.unlink(filler)
        await eventually(lambda: kinds(events) == ["state_disk_full", "state_disk_recovered"])
        await service.call("create_entities", {"entities": [ent("after")]})
        assert not owner.done()
    finally:
        ctx.stopping.set()
        async with asyncio.timeout(10):
            await owner  # a clean return: no MemoryInconsistent
    names = [e.name for e in parse_graph(path.read_bytes())[0].entities()]
    assert names == ["before", "after"]
    assert ctx.started_calls == 1


async def test_refused_writes_leave_no_partial_record_in_the_journal(disk: Path) -> None:
    """A record the full disk cut short is cut off again: the reload (and a later process)
    sees only acknowledged writes.
    """
    path = disk / "memory.jsonl"
    service = MemoryService(path, bus=EventBus(), disk_retry_seconds=0.05)
    ctx = ChildCtx()
    owner = asyncio.create_task(service.run(ctx))
    try:
        async with asyncio.timeout(10):
            await ctx.ready.wait()
        await service.call("create_entities", {"entities": [ent("a")]})
        journal = path.with_name(path.name + ".journal")
        size = journal.stat().st_size
        filler = fill(disk)
        with pytest.raises(MemoryUnavailable):
            await service.call("create_entities", {"entities": [ent("b", "y" * 100_000)]})
        assert journal.stat().st_size == size
        os.unlink(filler)
    finally:
        ctx.stopping.set()
        async with asyncio.timeout(10):
            await owner
    # what another process loads (the graph file and the journal): only the acknowledged write
    with GraphStore(path, readonly=True) as other:
        assert [e["name"] for e in other.call("read_graph", {})["entities"]] == ["a"]
