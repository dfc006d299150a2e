"""GraphStore: journal, cross-store visibility, compaction, crash states, repair, locking."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from companyd.memory._codec import LoadReport, parse_graph, read_quarantine, serialize
from companyd.memory._errors import MemoryLocked, MemoryToolError
from companyd.memory._store import GraphStore, write_atomic


@pytest.fixture(autouse=True)
def _close_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # every store a test opens is closed at the end (they hold a lock and a journal fd)
    opened: list[GraphStore] = []
    init = GraphStore.__init__

    def tracking_init(self: GraphStore, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(GraphStore, "__init__", tracking_init)
    yield
    for store in opened:
        store.close()


def ent(name: str, *obs: str, kind: str = "t") -> dict[str, object]:
    return {"name": name, "entityType": kind, "observations": list(obs)}


def create(store: GraphStore, *entities: dict[str, object]) -> dict[str, object]:
    return store.call("create_entities", {"entities": list(entities)})


def names(store: GraphStore) -> list[str]:
    return [e["name"] for e in store.call("read_graph", {})["entities"]]


def file_graph(path: Path) -> list[str]:
    graph, report = parse_graph(path.read_bytes())
    assert not report.needs_repair, report.summary()
    return [e.name for e in graph.entities()]


def test_writes_are_journaled_and_survive_a_new_store(memfile: Path) -> None:
    a = GraphStore(memfile)
    assert create(a, ent("x", "1")) == {"entities": [ent("x", "1")]}
    a.call("add_observations", {"observations": [{"entityName": "x", "contents": ["2"]}]})
    assert a.journal_records == 2
    assert not memfile.exists()  # not compacted yet: the journal holds the writes
    a.close()
    b = GraphStore(memfile)
    assert b.call("open_nodes", {"names": ["x"]})["entities"] == [ent("x", "1", "2")]
    assert b.journal_records == 2
    assert b.compact()
    assert file_graph(memfile) == ["x"]
    assert b.journal_records == 0


def test_two_stores_see_each_others_writes_before_every_operation(memfile: Path) -> None:
    a, b = GraphStore(memfile), GraphStore(memfile)
    create(a, ent("from-a"))
    create(b, ent("from-b"))  # b reads a's journal record first
    create(a, ent("from-a-2"))
    assert names(a) == names(b) == ["from-a", "from-b", "from-a-2"]
    b.call("delete_entities", {"entityNames": ["from-a"]})
    assert names(a) == ["from-b", "from-a-2"]
    assert b.compact()
    create(a, ent("after-compaction"))  # a notices the new file and journal
    assert names(b) == ["from-b", "from-a-2", "after-compaction"]


def test_compaction_writes_the_mcp_file_and_empties_the_journal(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("a", "x"), ent("b"))
    s.call("create_relations", {"relations": [{"from": "a", "to": "b", "relationType": "r"}]})
    assert s.compact()
    assert memfile.read_bytes() == (
        b'{"type":"entity","name":"a","entityType":"t","observations":["x"]}\n'
        b'{"type":"entity","name":"b","entityType":"t","observations":[]}\n'
        b'{"type":"relation","from":"a","to":"b","relationType":"r"}\n'
    )
    journal = memfile.with_name("memory.jsonl.journal").read_bytes()
    assert journal.count(b"\n") == 1  # the header only
    header = json.loads(journal)
    assert header["base_sha256"] == hashlib.sha256(memfile.read_bytes()).hexdigest()
    assert not s.compact()  # nothing to fold
    assert [p.name for p in memfile.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_no_op_calls_do_not_touch_the_journal(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("a"))
    size = memfile.with_name("memory.jsonl.journal").stat().st_size
    create(s, ent("a"))
    s.call("delete_entities", {"entityNames": ["zz"]})
    with pytest.raises(MemoryToolError, match="Entity with name zz not found"):
        s.call("add_observations", {"observations": [{"entityName": "zz", "contents": ["q"]}]})
    assert memfile.with_name("memory.jsonl.journal").stat().st_size == size


def test_crash_before_the_graph_rename_keeps_the_old_journal(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("a"))
    s.compact()
    create(s, ent("b"))
    s.close()
    # a compaction died after writing its temporary file and next journal, before renaming
    stray = memfile.with_name(".memory.jsonl.companyd-deadbeef.tmp")
    stray.write_bytes(b"half a file")
    nxt = memfile.with_name("memory.jsonl.journal.next")
    nxt.write_bytes(b'{"companyd_memory_journal":1,"base_size":3,"base_sha256":"00"}\n')
    official_tmp = memfile.with_name("memory.jsonl.0123456789abcdef0123456789abcdef.tmp")
    official_tmp.write_bytes(b"not ours")
    t = GraphStore(memfile)
    assert names(t) == ["a", "b"]
    assert not t.report or not t.report.needs_repair
    assert not stray.exists() and not nxt.exists()
    assert official_tmp.exists()  # the official server's temporaries are not ours to delete


def test_crash_between_the_two_renames_adopts_the_next_journal(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("a", "1"))
    s.compact()
    create(s, ent("b"))
    s.call("add_observations", {"observations": [{"entityName": "a", "contents": ["2"]}]})
    full = s.read(serialize)
    s.close()
    # the compaction renamed the new graph file into place, then died before renaming the
    # next journal: the old journal (with records already in the file) is still in place
    write_atomic(memfile, full)
    sha = hashlib.sha256(full).hexdigest()
    header = json.dumps(
        {"companyd_memory_journal": 1, "base_size": len(full), "base_sha256": sha},
        separators=(",", ":"),
    ).encode()
    memfile.with_name("memory.jsonl.journal.next").write_bytes(header + b"\n")
    t = GraphStore(memfile)
    report = t.open()
    assert not report.needs_repair and not report.foreign_rewrite
    assert t.call("read_graph", {})["entities"] == [ent("a", "1", "2"), ent("b")]
    assert memfile.with_name("memory.jsonl.journal").read_bytes() == header + b"\n"
    assert not memfile.with_name("memory.jsonl.journal.next").exists()


def test_a_foreign_rewrite_gets_our_journaled_writes_merged_back(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("ours", "1"))
    s.compact()
    create(s, ent("ours-2"))
    s.call("add_observations", {"observations": [{"entityName": "ours", "contents": ["2"]}]})
    # an official server that read the file before our last two writes rewrites it
    official = (
        b'{"type":"entity","name":"ours","entityType":"t","observations":["1"]}\n'
        b'{"type":"entity","name":"theirs","entityType":"t","observations":[]}'
    )
    tmp = memfile.with_name("memory.jsonl.aaaa.tmp")
    tmp.write_bytes(official)
    os.replace(tmp, memfile)
    seen: list[LoadReport] = []
    s.on_repair = seen.append
    assert s.call("read_graph", {})["entities"] == [
        ent("ours", "1", "2"),
        ent("theirs"),
        ent("ours-2"),
    ]
    assert len(seen) == 1 and seen[0].foreign_rewrite and seen[0].journal_records == 2
    assert file_graph(memfile) == ["ours", "theirs", "ours-2"]


def test_a_foreign_rewrite_with_nothing_pending_is_simply_followed(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("a"))
    s.compact()
    seen: list[LoadReport] = []
    s.on_repair = seen.append
    memfile.write_bytes(b'{"type":"entity","name":"edited","entityType":"t","observations":[]}')
    assert names(s) == ["edited"]
    assert seen == []  # nothing of ours was at risk: no repair to report
    create(s, ent("b"))
    assert names(GraphStore(memfile, readonly=True)) == ["edited", "b"]


def test_a_torn_journal_tail_is_quarantined_and_cut_off(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("kept"))
    s.close()
    journal = memfile.with_name("memory.jsonl.journal")
    with open(journal, "ab") as f:
        f.write(b'1234abcd {"op":"create_entities","entities":[{"name":"lo')
    t = GraphStore(memfile)
    report = t.open()
    assert report.journal_torn and report.needs_repair
    assert names(t) == ["kept"]
    create(t, ent("next"))
    assert names(GraphStore(memfile)) == ["kept", "next"]
    quarantined = list(read_quarantine(memfile.with_name("memory.jsonl.corrupt").read_bytes()))
    assert [q.raw for q in quarantined] == [
        b'1234abcd {"op":"create_entities","entities":[{"name":"lo'
    ]


def test_a_damaged_journal_record_is_quarantined_and_the_rest_applied(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("one"))
    create(s, ent("two"))
    create(s, ent("three"))
    s.close()
    journal = memfile.with_name("memory.jsonl.journal")
    lines = journal.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"two"', b'"twx"')  # checksum no longer matches
    journal.write_bytes(b"\n".join(lines))
    t = GraphStore(memfile)
    assert names(t) == ["one", "three"]
    assert t.report is not None and t.report.needs_repair
    (q,) = read_quarantine(memfile.with_name("memory.jsonl.corrupt").read_bytes())
    assert b'"twx"' in q.raw and "checksum mismatch" in q.reason


def test_another_store_follows_a_torn_tail_left_by_a_dead_writer(memfile: Path) -> None:
    a, b = GraphStore(memfile), GraphStore(memfile)
    create(a, ent("a"))
    assert names(b) == ["a"]
    with open(memfile.with_name("memory.jsonl.journal"), "ab") as f:
        f.write(b"0000")  # a writer died mid-record
    create(b, ent("b"))  # b repairs under the lock, then writes
    assert names(a) == ["a", "b"]


def test_readonly_stores_never_write(memfile: Path) -> None:
    broken = b'{"type":"entity","name":"a","entityType":"t","observations":[]}\n{bad\n'
    memfile.write_bytes(broken)
    r = GraphStore(memfile, readonly=True)
    report = r.open()
    assert report.needs_repair and names(r) == ["a"]
    with pytest.raises(PermissionError):
        create(r, ent("b"))
    assert memfile.read_bytes() == broken
    assert sorted(p.name for p in memfile.parent.iterdir()) == ["memory.jsonl", "memory.jsonl.lock"]


def test_repair_quarantines_and_rewrites_atomically(memfile: Path) -> None:
    good = b'{"type":"entity","name":"a","entityType":"t","observations":["x"]}'
    dup = b'{"type":"entity","name":"a","entityType":"t","observations":["y"]}'
    bad = b'{"type":"entity","name":"b"'
    memfile.write_bytes(good + b"\n" + bad + b"\n" + dup)
    report = GraphStore(memfile).repair()
    assert report.merged_entities == 1 and report.dropped_lines == 1
    assert memfile.read_bytes() == (
        b'{"type":"entity","name":"a","entityType":"t","observations":["x","y"]}\n'
    )
    (q,) = read_quarantine(memfile.with_name("memory.jsonl.corrupt").read_bytes())
    assert (q.lineno, q.raw) == (2, bad)
    again = GraphStore(memfile).repair()
    assert not again.needs_repair


def test_change_marker_follows_content_not_storage(memfile: Path) -> None:
    s = GraphStore(memfile)
    empty = s.change_marker()
    create(s, ent("a"))
    one = s.change_marker()
    assert one != empty
    s.compact()
    assert s.change_marker() == one
    assert GraphStore(memfile).change_marker() == one  # a "restart"
    s.call("add_observations", {"observations": [{"entityName": "a", "contents": ["x"]}]})
    assert s.change_marker() != one


def test_a_big_journal_asks_for_compaction(memfile: Path) -> None:
    s = GraphStore(memfile)
    create(s, ent("a"))
    assert not s.should_compact()
    create(s, ent("big", "x" * (1 << 20)))
    assert s.should_compact()


def test_lock_held_by_another_process_times_out_with_a_clear_message(memfile: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, filelock
                lock = filelock.FileLock({str(memfile) + ".lock"!r})
                lock.acquire()
                print("locked", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        s = GraphStore(memfile, lock_timeout=0.2)
        with pytest.raises(
            MemoryLocked, match=r"locked by another process .*held for more than 0\.2s"
        ):
            s.open()
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        holder.stdout.close()
    assert names(GraphStore(memfile, lock_timeout=5)) == []  # released with the process


def test_a_deleted_lock_file_is_recreated_and_still_excludes(memfile: Path) -> None:
    a, b = GraphStore(memfile), GraphStore(memfile)
    create(a, ent("a"))
    memfile.with_name("memory.jsonl.lock").unlink()
    create(b, ent("b"))
    create(a, ent("c"))
    assert names(b) == ["a", "b", "c"]
    # a and b now lock the same inode again
    assert os.fstat(a._lock_fd or -1).st_ino == os.fstat(b._lock_fd or -1).st_ino


def test_journal_write_failure_makes_the_store_refuse_further_use(tmp_path: Path) -> None:
    # A real failure: the file size limit makes the journal append fail with EFBIG.
    script = textwrap.dedent(
        """
        import json, resource, signal, sys
        from pathlib import Path
        from companyd.memory._store import GraphStore
        from companyd.memory._errors import MemoryInconsistent
        path = Path(sys.argv[1])
        s = GraphStore(path)
        def create(name, *obs):
            e = {"name": name, "entityType": "t", "observations": list(obs)}
            s.call("create_entities", {"entities": [e]})
        create("ok")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        size = path.with_name(path.name + ".journal").stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
        out = {}
        try:
            create("big", "x" * 100)
        except MemoryInconsistent as exc:
            out["first"] = str(exc)
        try:
            s.call("read_graph", {})
        except MemoryInconsistent as exc:
            out["second"] = str(exc)
        print(json.dumps(out))
        """
    )
    memfile = tmp_path / "memory.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", script, str(memfile)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "writing the journal" in out["first"] and "must restart and reload" in out["first"]
    assert out["second"] == out["first"]  # refuses every further use
    fresh = GraphStore(memfile)
    report = fresh.open()
    # the part of the refused record that reached the file was cut off again (issue 15): the
    # acknowledged write is there, the refused one is not, and there is nothing to repair
    assert names(fresh) == ["ok"]
    assert not report.journal_torn and not report.quarantined


def test_write_atomic_replaces_and_cleans_up(tmp_path: Path) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing-dir" / "f", b"x")
