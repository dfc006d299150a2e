"""The memory on PostgreSQL (memory/_shared.py): daemons on two hosts — here, two local
copies of ``memory.jsonl`` — share one change log in the company schema of a real server
(a throwaway cluster): nothing acknowledged is lost, writers take turns, the local file
stays an MCP-format copy, and a first start imports the file it had.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import psycopg
import pytest

from companyd.events import EventBus
from companyd.memory._codec import parse_graph
from companyd.memory._errors import MemoryInconsistent
from companyd.memory._service import MemoryService
from companyd.memory._shared import MIGRATIONS, SharedGraphStore
from companyd.storage import Backend, Fence, PgDatabase, open_database

from .conftest import ChildCtx
from .test_service import running

pytestmark = pytest.mark.anyio


def ent(name: str, *obs: str) -> dict[str, object]:
    return {"name": name, "entityType": "t", "observations": list(obs)}


def store(backend: Backend, path: Path, *, readonly: bool = False) -> SharedGraphStore:
    db = open_database(
        backend, path=None, store="memory", migrations=MIGRATIONS, what="memory log",
        readonly=readonly, worker=False,
    )  # fmt: skip
    assert isinstance(db, PgDatabase)
    path.parent.mkdir(parents=True, exist_ok=True)
    return SharedGraphStore(path, db, readonly=readonly)


def names(path: Path) -> list[str]:
    graph, _ = parse_graph(path.read_bytes())
    return sorted(e.name for e in graph.entities())


def test_a_write_on_one_host_is_read_on_the_other(tmp_path: Path, pg_backend: Backend) -> None:
    a, b = store(pg_backend, tmp_path / "a" / "memory.jsonl"), None
    try:
        a.open()
        a.call("create_entities", {"entities": [ent("plan", "ship")]})
        b = store(pg_backend, tmp_path / "b" / "memory.jsonl")
        b.open()
        assert b.call("open_nodes", {"names": ["plan"]})["entities"] == [ent("plan", "ship")]
        b.call("add_observations", {"observations": [{"entityName": "plan", "contents": ["now"]}]})
        # a folds in b's row before its next call
        assert a.call("open_nodes", {"names": ["plan"]})["entities"] == [ent("plan", "ship", "now")]
        # the local file is an MCP-format copy, complete after a compaction
        assert a.compact()
        assert names(tmp_path / "a" / "memory.jsonl") == ["plan"]
    finally:
        a.close()
        if b is not None:
            b.close()


def test_concurrent_writers_on_two_hosts_lose_nothing(tmp_path: Path, pg_backend: Backend) -> None:
    stores = [store(pg_backend, tmp_path / h / "memory.jsonl") for h in ("a", "b")]
    for s in stores:
        s.open()
    errors: list[BaseException] = []

    def writer(s: SharedGraphStore, host: str) -> None:
        try:
            for i in range(40):
                s.call("create_entities", {"entities": [ent(f"{host}{i}", "x")]})
                if i % 15 == 14:
                    s.compact()  # compactions race with the other host's writes
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(s, h)) for s, h in zip(stores, "ab", strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == [] and not any(t.is_alive() for t in threads)
        for s in stores:
            graph = s.call("read_graph", {})
            assert len(graph["entities"]) == 80
    finally:
        for s in stores:
            s.close()
    fresh = store(pg_backend, tmp_path / "c" / "memory.jsonl", readonly=True)
    try:
        fresh.open()
        assert len(fresh.call("read_graph", {})["entities"]) == 80
    finally:
        fresh.close()


def test_a_deposed_daemons_compaction_still_brings_its_local_copy_up_to_date(
    tmp_path: Path, pg_backend: Backend
) -> None:
    # A daemon's stop resigns its leadership; its memory's final compaction may come after
    # (seen in bench/chaos.py --backend postgres: the local copy trailed the log by the last
    # writes). The fenced transaction must not leave memory.jsonl behind: reads are not
    # fenced, so the copy is rewritten from the database; memory_base is the leader's.
    fence = Fence()
    ours = store(dataclasses.replace(pg_backend, fence=fence), tmp_path / "a" / "memory.jsonl")
    other = store(pg_backend, tmp_path / "b" / "memory.jsonl")
    try:
        ours.open()
        other.open()
        ours.call("create_entities", {"entities": [ent("ours", "x")]})
        other.call("create_entities", {"entities": [ent("theirs", "y")]})
        fence.epoch, fence.deposed = 1, True  # it led, and resigned before compacting
        assert ours.compact()
        assert names(tmp_path / "a" / "memory.jsonl") == ["ours", "theirs"]
        # nothing was written in the database: the log still holds both rows
        assert other.compact()
        assert names(tmp_path / "b" / "memory.jsonl") == ["ours", "theirs"]
    finally:
        ours.close()
        other.close()


def test_the_first_start_imports_the_local_file_once(tmp_path: Path, pg_backend: Backend) -> None:
    local = tmp_path / "a" / "memory.jsonl"
    local.parent.mkdir()
    local.write_text('{"type":"entity","name":"old","entityType":"t","observations":["kept"]}\n')
    other = tmp_path / "b" / "memory.jsonl"
    other.parent.mkdir()
    other.write_text('{"type":"entity","name":"stray","entityType":"t","observations":[]}\n')
    a = store(pg_backend, local)
    a.open()
    a.close()
    b = store(pg_backend, other)  # the schema has a memory now: b's file is not imported
    try:
        b.open()
        assert [e["name"] for e in b.call("read_graph", {})["entities"]] == ["old"]
        assert names(other) == ["old"]  # and its local copy now says what the log says
    finally:
        b.close()


async def test_the_memory_owner_on_postgres_survives_a_restart_on_another_host(
    tmp_path: Path, pg_backend: Backend
) -> None:
    first = MemoryService(tmp_path / "a" / "memory.jsonl", bus=EventBus(), backend=pg_backend)
    async with running(first):
        await first.call("create_entities", {"entities": [ent("a", "x")]})
    second = MemoryService(tmp_path / "b" / "memory.jsonl", bus=EventBus(), backend=pg_backend)
    ctx = ChildCtx()
    async with running(second, ctx):
        assert ctx.info["entities"] == 1
        out = await second.call("open_nodes", {"names": ["a"]})
    assert out["entities"] == [ent("a", "x")]
    assert names(tmp_path / "b" / "memory.jsonl") == ["a"]


def test_a_failed_commit_breaks_the_store_and_a_failed_section_does_not(
    tmp_path: Path, pg_backend: Backend
) -> None:
    # A section's error is rolled back and raised, the store usable after; a COMMIT that
    # fails once the section ran (here: the server ends the connection) leaves the graph in
    # memory ahead of the database, so the store refuses further use until reloaded.
    s = store(pg_backend, tmp_path / "a" / "memory.jsonl")
    assert pg_backend.dsn is not None
    dsn = pg_backend.dsn
    broken: list[str | None] = []

    def fails(graph: object) -> None:
        raise ValueError("the section's own error")

    def connection_dies(graph: object) -> None:
        with s.database.session() as conn:  # the section's own connection
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))

    try:
        s.open()
        s.call("create_entities", {"entities": [ent("plan", "ship")]})
        with pytest.raises(ValueError, match="own error"):
            s.read(fails)
        broken.append(s.broken)
        s.call("add_observations", {"observations": [{"entityName": "plan", "contents": ["b"]}]})
        with pytest.raises(MemoryInconsistent, match="committing to the memory log"):
            s.read(connection_dies)
        broken.append(s.broken)
        with pytest.raises(MemoryInconsistent):
            s.call("open_nodes", {"names": ["plan"]})
    finally:
        s.close()
    assert broken[0] is None and broken[1] is not None and "committing to" in broken[1]
