"""Concurrency: several processes on one file, and many calls in flight to one server —
0 lost writes, 0 unparseable lines (the official server loses ~66 % and ~86 %: reference
§8.2).

Several processes on one file need processes: four ``companyd memory serve-mcp`` processes
forked from the worker's fork server (mcp_helpers.ServeMcpForks: each its own process, file
descriptions and locks, without the ~0.75 s of CPU of a fresh interpreter's imports); many
calls in flight on one connection do not: that test runs serve-mcp's serve_stdio in this
process (mcp_helpers.InProcessServer, over pipes).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from companyd.memory._codec import parse_graph

from .mcp_helpers import InProcessServer, RawClient, ServeMcpForks

# the group of every memory module with serve-mcp processes from the fork server
# (conftest.serve_mcp_forks): one worker runs them all and starts it once
pytestmark = pytest.mark.xdist_group("memory_serve_mcp")


def create(name: str) -> dict[str, Any]:
    entity = {"name": name, "entityType": "race", "observations": [f"written by {name}"]}
    return {"name": "create_entities", "arguments": {"entities": [entity]}}


def check_file(path: Path, expected: set[str]) -> None:
    graph, report = parse_graph(path.read_bytes())
    assert report.quarantined == [], report.summary()  # 0 unparseable lines
    assert not report.needs_repair
    names = {e.name for e in graph.entities()}
    lost = expected - names
    assert not lost, f"{len(lost)} of {len(expected)} lost, e.g. {sorted(lost)[:5]}"


def test_four_server_processes_times_200_writes_lose_nothing(
    tmp_path: Path, serve_mcp_forks: ServeMcpForks
) -> None:
    path = tmp_path / "memory.jsonl"
    procs = [serve_mcp_forks.serve_mcp(path) for _ in range(4)]
    assert len({p.pid for p in procs}) == 4  # four processes
    clients = [RawClient(p) for p in procs]  # all initialised
    barrier = threading.Barrier(4)
    errors: list[str] = []
    acked: list[set[str]] = [set() for _ in clients]

    def run(k: int) -> None:
        barrier.wait(timeout=60)
        for i in range(200):
            name = f"p{k}-e{i}"
            res = clients[k].request("tools/call", create(name))["result"]
            if res.get("isError"):
                errors.append(res["content"][0]["text"])
            elif res["structuredContent"]["entities"][0]["name"] == name:
                acked[k].add(name)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [c.close() for c in clients] == [0, 0, 0, 0]
    assert errors == []
    assert sum(len(a) for a in acked) == 800
    check_file(path, set().union(*acked))


def test_eight_calls_in_flight_to_one_server_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    client = RawClient(InProcessServer(path))
    window = 8
    sent = 0
    answers: dict[int, dict[str, Any]] = {}
    ids: dict[int, str] = {}
    while sent < window:  # fill the window, then keep it full
        ids[client.send("tools/call", create(f"f{sent}"))] = f"f{sent}"
        sent += 1
    while len(answers) < 200:
        msg = client.receive()
        answers[msg["id"]] = msg["result"]
        if sent < 200:
            ids[client.send("tools/call", create(f"f{sent}"))] = f"f{sent}"
            sent += 1
    assert client.close() == 0
    assert not [a for a in answers.values() if a.get("isError")]
    got = {rid: a["structuredContent"]["entities"][0]["name"] for rid, a in answers.items()}
    assert got == ids
    check_file(path, set(ids.values()))
