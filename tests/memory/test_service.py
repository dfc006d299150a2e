"""MemoryService: the supervised owner (start, serve, idle compaction, stop, restart, crash)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.memory._codec import parse_graph
from companyd.memory._errors import MemoryToolError, MemoryUnavailable
from companyd.memory._service import MemoryService
from companyd.memory._store import GraphStore

from .conftest import ChildCtx

pytestmark = pytest.mark.anyio


def ent(name: str, *obs: str) -> dict[str, object]:
    return {"name": name, "entityType": "t", "observations": list(obs)}


def file_names(path: Path) -> list[str]:
    if not path.exists():
        return []
    graph, _ = parse_graph(path.read_bytes())
    return [e.name for e in graph.entities()]


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)


@asynccontextmanager
async def running(
    service: MemoryService, ctx: ChildCtx | None = None
) -> AsyncIterator[tuple[ChildCtx, asyncio.Task[None]]]:
    ctx = ctx or ChildCtx()
    task = asyncio.create_task(service.run(ctx))
    try:
        async with asyncio.timeout(10):
            await ctx.ready.wait()
        yield ctx, task
    finally:
        ctx.stopping.set()
        async with asyncio.timeout(10):
            await asyncio.gather(task, return_exceptions=True)


async def test_start_call_and_durable_result(memfile: Path) -> None:
    bus = EventBus()
    service = MemoryService(memfile, bus=bus, clock=ManualClock())
    async with running(service) as (ctx, _):
        assert ctx.info == {"path": str(memfile), "entities": 0, "relations": 0}
        out = await service.call("create_entities", {"entities": [ent("a", "x")]})
        assert out == {"entities": [ent("a", "x")]}
        # durable before the call returned: another reader sees it now
        with GraphStore(memfile, readonly=True) as other:
            assert other.call("open_nodes", {"names": ["a"]})["entities"] == [ent("a", "x")]
        with pytest.raises(MemoryToolError, match=r"^Entity with name b not found$"):
            await service.call(
                "add_observations", {"observations": [{"entityName": "b", "contents": ["y"]}]}
            )
        with pytest.raises(MemoryToolError, match="Invalid arguments for tool search_nodes"):
            await service.call("search_nodes", {})
    assert ctx.started_calls == 1


async def test_idle_compaction_after_a_quiet_second_and_on_stop(memfile: Path) -> None:
    clock = ManualClock()
    service = MemoryService(memfile, bus=EventBus(clock), clock=clock)
    async with running(service) as (ctx, task):
        await service.call("create_entities", {"entities": [ent("a")]})
        clock.advance(0.5)
        await asyncio.sleep(0.05)
        assert file_names(memfile) == []  # still only in the journal
        await service.call("create_entities", {"entities": [ent("b")]})
        clock.advance(0.9)  # 0.9 s since the last write
        await asyncio.sleep(0.05)
        assert file_names(memfile) == []
        clock.advance(0.2)
        await eventually(lambda: file_names(memfile) == ["a", "b"])
        # a second quiet period after the first compaction compacts again
        await service.call("create_entities", {"entities": [ent("c")]})
        clock.advance(1.1)
        await eventually(lambda: file_names(memfile) == ["a", "b", "c"])
        await service.call("create_entities", {"entities": [ent("d")]})
        ctx.stopping.set()
        async with asyncio.timeout(10):
            await task
    assert file_names(memfile) == ["a", "b", "c", "d"]  # complete after stopping
    journal = memfile.with_name("memory.jsonl.journal").read_bytes()
    assert journal.count(b"\n") == 1  # header only: everything folded in


async def test_the_mcp_file_lags_at_most_max_lag_behind_a_steady_stream_of_writes(
    memfile: Path,
) -> None:
    clock = ManualClock()
    service = MemoryService(memfile, bus=EventBus(clock), clock=clock, max_lag_seconds=10.0)
    async with running(service):
        # a write every 0.5 s: never a quiet second, so only the lag bound compacts
        for i in range(19):
            await service.call("create_entities", {"entities": [ent(f"e{i}")]})
            clock.advance(0.5)
            await asyncio.sleep(0.01)
        assert file_names(memfile) == []  # 9.5 s of writes: still only in the journal
        for i in range(19, 23):
            await service.call("create_entities", {"entities": [ent(f"e{i}")]})
            clock.advance(0.5)
            await asyncio.sleep(0.01)
            if file_names(memfile):
                break
        # folded in within the lag bound (plus the half-second tick of this test)
        assert len(file_names(memfile)) >= 20
        assert clock.monotonic() <= 11.0


async def test_cancellation_still_folds_the_journal(memfile: Path) -> None:
    service = MemoryService(memfile, bus=EventBus(), clock=ManualClock())
    ctx = ChildCtx()
    task = asyncio.create_task(service.run(ctx))
    async with asyncio.timeout(10):
        await ctx.ready.wait()
    await service.call("create_entities", {"entities": [ent("a")]})
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await task
    assert file_names(memfile) == ["a"]


async def test_calls_wait_for_the_owner_and_are_served_after_it_starts(memfile: Path) -> None:
    service = MemoryService(memfile, bus=EventBus(), clock=ManualClock())
    early = asyncio.create_task(service.call("create_entities", {"entities": [ent("early")]}))
    await asyncio.sleep(0.02)
    assert not early.done()
    async with running(service):
        async with asyncio.timeout(10):
            assert await early == {"entities": [ent("early")]}


async def test_a_call_times_out_unapplied_when_no_owner_takes_it(memfile: Path) -> None:
    clock = ManualClock()
    service = MemoryService(memfile, bus=EventBus(clock), clock=clock, call_timeout=5)
    waiting = asyncio.create_task(service.call("create_entities", {"entities": [ent("late")]}))
    await asyncio.sleep(0.01)
    clock.advance(5)
    with pytest.raises(MemoryUnavailable, match=r"not running .*was not applied"):
        async with asyncio.timeout(5):
            await waiting
    async with running(service):
        assert (await service.call("read_graph", {}))["entities"] == []


async def test_restart_serves_queued_calls_and_keeps_the_change_marker(memfile: Path) -> None:
    service = MemoryService(memfile, bus=EventBus(), clock=ManualClock())
    async with running(service):
        await service.call("create_entities", {"entities": [ent("a", "1")]})
        marker = await service.change_marker()
    # the owner is down: a call made now waits for the next start
    queued = asyncio.create_task(service.call("read_graph", {}))
    async with running(service):
        assert await service.change_marker() == marker
        async with asyncio.timeout(10):
            assert (await queued)["entities"] == [ent("a", "1")]
        await service.call(
            "add_observations", {"observations": [{"entityName": "a", "contents": ["2"]}]}
        )
        assert await service.change_marker() != marker


async def test_eight_calls_in_flight_are_all_kept(memfile: Path) -> None:
    service = MemoryService(memfile, bus=EventBus(), clock=ManualClock())
    async with running(service):
        results = await asyncio.gather(
            *(service.call("create_entities", {"entities": [ent(f"e{i}")]}) for i in range(8))
        )
        assert [r["entities"][0]["name"] for r in results] == [f"e{i}" for i in range(8)]
        # reads queued behind writes see them (one order for everything)
        seen, _ = await asyncio.gather(
            service.query(lambda g: len(g)),
            service.call("create_entities", {"entities": [ent("e8")]}),
        )
        assert seen == 8
    assert file_names(memfile) == [f"e{i}" for i in range(9)]


async def test_recall_gives_prompt_context(memfile: Path) -> None:
    service = MemoryService(memfile, bus=EventBus(), clock=ManualClock())
    async with running(service):
        await service.call(
            "create_entities", {"entities": [ent("Acme", "client since 2024"), ent("Bob")]}
        )
        await service.call(
            "create_relations",
            {"relations": [{"from": "Bob", "to": "Acme", "relationType": "works_at"}]},
        )
        view = await service.recall("Acme")
        assert [e["name"] for e in view["entities"]] == ["Acme", "Bob"]
        assert "Acme [t]: client since 2024" in view["text"]
        assert "Bob --works_at--> Acme" in view["text"]
        missing = await service.recall("Nobody", depth=2)
        assert missing["found"] is False


async def test_repairs_on_start_are_published(memfile: Path) -> None:
    memfile.write_bytes(
        b'{"type":"entity","name":"a","entityType":"t","observations":["x"]}\n'
        b"{garbage\n"
        b'{"type":"entity","name":"a","entityType":"t","observations":["y"]}'
    )
    bus = EventBus()
    service = MemoryService(memfile, bus=bus, clock=ManualClock())
    async with running(service):
        assert (await service.call("read_graph", {}))["entities"] == [ent("a", "x", "y")]
    (event,) = bus.recent(kinds={"memory_repaired"})
    assert event.severity == "warning" and event.source == "memory"
    assert event.data["path"] == str(memfile)
    assert event.data["dropped_lines"] == 1 and event.data["merged_entities"] == 1
    assert event.data["corrupt_file"] == str(memfile) + ".corrupt"
    assert "1 unusable line quarantined" in event.data["summary"]
    json.dumps(event.to_dict())


def test_a_journal_write_over_the_file_size_limit_degrades_the_owner_without_a_crash(
    tmp_path: Path,
) -> None:
    # Real failure injection in a subprocess: RLIMIT_FSIZE makes the append fail (EFBIG, a
    # disk failure like ENOSPC): the owner stays up, refuses writes, and takes them again
    # once the limit is lifted (its probe passes). Before issue 15 it crashed on purpose
    # (MemoryInconsistent) and a restart-on-a-full-disk loop followed.
    script = textwrap.dedent(
        """
        import asyncio, json, resource, signal, sys
        from pathlib import Path
        from companyd.events import EventBus
        from companyd.memory._service import MemoryService
        from companyd.memory._errors import MemoryUnavailable
        from tests.memory.conftest import ChildCtx

        def ent(name, *obs):
            return {"entities": [{"name": name, "entityType": "t", "observations": list(obs)}]}

        async def main():
            path = Path(sys.argv[1])
            bus = EventBus()
            kinds = []
            bus.add_listener(lambda e: kinds.append(e.kind))
            service = MemoryService(path, bus=bus, disk_retry_seconds=0.05)
            out = {}
            ctx = ChildCtx()
            task = asyncio.create_task(service.run(ctx))
            await ctx.ready.wait()
            await service.call("create_entities", ent("ok"))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            size = path.with_name(path.name + ".journal").stat().st_size
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
            try:
                await service.call("create_entities", ent("lost", "x" * 100))
            except MemoryUnavailable as exc:
                out["call"] = str(exc)
            await asyncio.sleep(0.3)
            out["owner_up"] = not task.done()
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
            async with asyncio.timeout(10):
                while "state_disk_recovered" not in kinds:
                    await asyncio.sleep(0.01)
            await service.call("create_entities", ent("after"))
            out["names"] = [e["name"] for e in (await service.call("read_graph", {}))["entities"]]
            out["kinds"] = [k for k in kinds if k.startswith("state_disk")]
            ctx.stopping.set()
            await asyncio.wait_for(task, 10)
            out["started"] = ctx.started_calls
            print(json.dumps(out))

        asyncio.run(main())
        """
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "memory.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "memory not saved: the state disk is full or failing" in out["call"], out
    assert out["owner_up"] and out["started"] == 1
    assert out["kinds"] == ["state_disk_full", "state_disk_recovered"]
    # the refused write's partial record was cut off: it is not applied on reload
    assert out["names"] == ["ok", "after"]
    assert file_names(tmp_path / "memory.jsonl") == out["names"]
