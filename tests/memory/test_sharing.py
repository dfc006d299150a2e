"""Durability and cross-process probes the other tests miss: a lock holder that stops
(SIGSTOP) while a service has writes to fold in, a symlinked graph file, an unwritable
directory, a full disk.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.memory._codec import read_quarantine
from companyd.memory._errors import MemoryNotAGraph, MemoryUnsafePath
from companyd.memory._service import MemoryService
from companyd.memory._store import GraphStore

from .conftest import ChildCtx, official_server
from .mcp_helpers import RawClient
from .test_service import eventually, file_names, running

pytestmark = pytest.mark.anyio


def ent(name: str, *obs: str) -> dict[str, object]:
    return {"name": name, "entityType": "t", "observations": list(obs)}


async def test_a_lock_held_during_idle_compaction_does_not_crash_the_owner(
    memfile: Path,
) -> None:
    clock = ManualClock()
    service = MemoryService(memfile, bus=EventBus(clock), clock=clock, lock_timeout=0.2)
    async with running(service) as (_, task):
        await service.call("create_entities", {"entities": [ent("a")]})
        # another process takes the lock (e.g. a SIGSTOPped CLI): a second open file
        # description of the lock file excludes like another process would
        fd = os.open(memfile.with_name("memory.jsonl.lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            clock.advance(1.1)  # the idle compaction is due and times out on the lock
            await asyncio.sleep(0.5)
            assert not task.done(), task.exception()
        finally:
            os.close(fd)
        clock.advance(1.1)  # retried once the lock is free
        await eventually(lambda: file_names(memfile) == ["a"])
        assert await service.call("open_nodes", {"names": ["a"]}) == {
            "entities": [ent("a")],
            "relations": [],
        }
        assert not task.done()


def test_a_symlinked_graph_file_is_written_through_not_replaced(tmp_path: Path) -> None:
    # e.g. ~/.claude/memory.jsonl -> /var/lib/companyd/memory.jsonl: a compaction or repair
    # must update the target; renaming over the link would leave the target stale and split
    # the graph in two.
    real = tmp_path / "real"
    real.mkdir()
    target = real / "memory.jsonl"
    target.write_bytes(b'{"type":"entity","name":"a","entityType":"t","observations":[]}\n')
    link = tmp_path / "memory.jsonl"
    link.symlink_to(target)
    with GraphStore(link) as via_link, GraphStore(target) as via_target:
        via_link.call("create_entities", {"entities": [ent("b")]})
        via_link.compact()
        assert link.is_symlink()
        assert file_names(target) == ["a", "b"]
        # one graph, one journal and one lock, whichever name a process was given
        via_target.call("create_entities", {"entities": [ent("c")]})
        assert [e["name"] for e in via_link.call("read_graph", {})["entities"]] == ["a", "b", "c"]
        via_link.repair()
    assert link.is_symlink() and file_names(target) == ["a", "b", "c"]
    assert sorted(os.listdir(tmp_path)) == ["memory.jsonl", "real"]


def test_a_failed_quarantine_write_leaves_the_corrupt_file_readable(tmp_path: Path) -> None:
    # An existing .corrupt is appended to. When the append fails part-way (disk full; here
    # the file size limit makes the write short, then EFBIG), the torn section must not
    # stay: the byte counts would then frame everything appended later wrongly.
    script = textwrap.dedent(
        """
        import resource, signal, sys
        from pathlib import Path
        from companyd.memory._store import GraphStore
        path = Path(sys.argv[1])
        corrupt = path.with_name(path.name + ".corrupt")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (corrupt.stat().st_size + 1000, -1))
        try:
            GraphStore(path).open()
        except OSError as exc:
            print(exc.errno)
        """
    )
    memfile = tmp_path / "memory.jsonl"
    corrupt = tmp_path / "memory.jsonl.corrupt"
    corrupt.write_bytes(b"# line 3 (5 bytes) [dropped]: older repair\nabcde\n")
    broken = b"{broken" + b"x" * 5000  # the limit cuts the write inside this line
    memfile.write_bytes(broken + b'\n{"type":"entity","name":"a","entityType":"t"}\n')
    done = subprocess.run(
        [sys.executable, "-c", script, str(memfile)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == str(errno.EFBIG), done.stderr
    assert corrupt.read_bytes().endswith(b"older repair\nabcde\n")  # the torn part is gone
    with GraphStore(memfile) as store:  # space again: repaired, quarantine appended
        assert store.open().dropped_lines == 1
    kept = list(read_quarantine(corrupt.read_bytes()))
    assert [q.raw for q in kept] == [b"abcde", broken]
    assert file_names(memfile) == ["a"]


def test_the_official_server_writing_between_our_writes_is_not_clobbered(
    memfile: Path,
) -> None:
    index = official_server()
    if index is None:
        pytest.skip("official MCP memory server unavailable (COMPANYD_OFFICIAL_MEMORY_SERVER)")
    node = RawClient(["node", index], {"MEMORY_FILE_PATH": str(memfile)})

    def official(tool: str, arguments: dict[str, object]) -> None:
        res = node.request("tools/call", {"name": tool, "arguments": arguments})["result"]
        assert not res.get("isError"), res

    try:
        with GraphStore(memfile) as ours:
            ours.call("create_entities", {"entities": [ent("a", "x1")]})
            ours.compact()
            ours.call("create_entities", {"entities": [ent("b")]})  # journal only
            official("create_entities", {"entities": [ent("o")]})  # rewrites: a, o (no b)
            ours.call("create_entities", {"entities": [ent("c")]})
            # a rewrite of the very same size right after the last one (same second)
            ours.compact()
            official(
                "delete_observations", {"deletions": [{"entityName": "a", "observations": ["x1"]}]}
            )
            official(
                "add_observations", {"observations": [{"entityName": "a", "contents": ["y1"]}]}
            )
            ours.call(
                "add_observations", {"observations": [{"entityName": "o", "contents": ["z"]}]}
            )
            ours.compact()
        with GraphStore(memfile) as check:
            entities = check.call("read_graph", {})["entities"]
        graph = {e["name"]: e["observations"] for e in entities}
        assert graph == {"a": ["y1"], "o": ["z"], "b": [], "c": []}
    finally:
        assert node.close() == 0


_WRITER = """
import sys
from pathlib import Path
from companyd.memory._store import GraphStore
path, tag, compact = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
with GraphStore(path) as store:
    for i in range(120):
        e = {"name": f"{tag}{i}", "entityType": "t", "observations": [tag * i]}
        store.call("create_entities", {"entities": [e]})
        print(f"{tag}{i}", flush=True)  # acknowledged
        if compact:
            store.compact(force=True)
"""


def test_one_process_compacting_while_others_append_loses_nothing(memfile: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(memfile), tag, compact],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for tag, compact in (("c", "1"), ("j", "0"), ("k", "0"))
    ]
    acked: set[str] = set()
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        acked |= set(out.split())
    assert len(acked) == 360
    with GraphStore(memfile) as store:
        store.compact()
    assert set(file_names(memfile)) == acked


PASSWD_LIKE = (
    b"root:x:0:0:root:/root:/bin/bash\n"
    b"daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    b"founder:x:1000:1000:Founder,,,:/home/founder:/bin/bash\n"
)


@pytest.mark.parametrize(
    "content",
    [PASSWD_LIKE, b"# notes\nnot json at all\n", b"[1, 2]\nnull\n", b"\xff\xfe garbage"],
    ids=["passwd", "text", "json-not-objects", "binary"],
)
def test_a_file_that_is_not_a_memory_graph_is_left_byte_identical(
    tmp_path: Path, content: bytes
) -> None:
    # e.g. memory.path (or a symlink) pointing at some other text file: "repairing" it would
    # quarantine every line and replace the file with an empty graph.
    other = tmp_path / "etc"
    other.mkdir()
    target = other / "passwd"
    target.write_bytes(content)
    state = tmp_path / "state"
    state.mkdir()
    link = state / "memory.jsonl"
    link.symlink_to(target)
    for path in (link, target):
        with pytest.raises(MemoryNotAGraph) as caught:
            GraphStore(path).open()
        message = str(caught.value)
        assert str(target) in message and "memory.path" in message, message
        assert "not a memory graph" in message, message
    assert target.read_bytes() == content
    assert sorted(os.listdir(other)) == ["passwd"]  # no lock, journal, .corrupt, temp file
    assert os.listdir(state) == ["memory.jsonl"]


def test_a_graph_with_one_good_line_among_bad_ones_is_still_repaired(memfile: Path) -> None:
    memfile.write_bytes(b'root:x:0:0\n{"type":"entity","name":"a","entityType":"t"}\n')
    with GraphStore(memfile) as store:
        assert store.open().dropped_lines == 1
    assert file_names(memfile) == ["a"]


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_graph_path_that_is_not_a_regular_file_is_refused_at_once(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "memory.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(MemoryNotAGraph, match="not a regular file"):
        GraphStore(path).open()  # a FIFO without a writer must not hang the open


async def test_the_memory_service_fails_with_what_to_do_on_a_foreign_file(
    tmp_path: Path,
) -> None:
    target = tmp_path / "passwd"
    target.write_bytes(PASSWD_LIKE)
    clock = ManualClock()
    service = MemoryService(target, bus=EventBus(clock), clock=clock)
    with pytest.raises(MemoryNotAGraph, match=r"memory\.path"):
        async with asyncio.timeout(10):
            await service.run(ChildCtx())
    assert target.read_bytes() == PASSWD_LIKE


@pytest.mark.parametrize("side", ["corrupt", "journal", "lock"])
def test_a_side_file_that_is_a_symlink_is_never_written_through(tmp_path: Path, side: str) -> None:
    # docs/memory.md: side files live next to the graph; a planted symlink (e.g.
    # memory.jsonl.corrupt -> some other file) must not redirect repair's appends or the
    # journal's writes into another file.
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    memfile = tmp_path / "memory.jsonl"
    memfile.write_bytes(b'not json\n{"type":"entity","name":"a","entityType":"t"}\n')
    (tmp_path / f"memory.jsonl.{side}").symlink_to(victim)
    with pytest.raises(MemoryUnsafePath, match="symlink"), GraphStore(memfile) as store:
        store.call("create_entities", {"entities": [ent("b")]})
    assert victim.read_bytes() == b"precious\n"
