"""serve-mcp's fast path for ``tools/call`` (mcp_server._FastCalls): the same bytes on the
wire as the SDK path, calls in flight answered when stdin closes, and no acknowledged write
lost when the server is SIGKILLed mid-writes.

The byte comparison runs serve_stdio in this process (mcp_helpers.InProcessServer: its own
thread and event loop, stdin and stdout two OS pipes), which is what a ``python -c
"asyncio.run(serve_stdio(...))"`` process ran, minus ~0.8 s of CPU per start; closing stdin
and SIGKILL are about a process and start one: ``companyd memory serve-mcp`` forked from the
worker's fork server (mcp_helpers.ServeMcpForks: a real process, pid, pipes, kill -9 and
exit status, without the ~0.75 s of imports each of its seven starts paid).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from companyd.memory._codec import parse_graph

from .mcp_helpers import ForkedProcess, InProcessServer, ServeMcpForks

# the group of every memory module with serve-mcp processes from the fork server
# (conftest.serve_mcp_forks): one worker runs them all and starts it once
pytestmark = pytest.mark.xdist_group("memory_serve_mcp")


def _line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def _init(version: str) -> bytes:
    return _line(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
    )


_INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'


def _call(rid: int | str, name: Any, arguments: Any = ..., **extra: Any) -> bytes:
    params: dict[str, Any] = {"name": name}
    if arguments is not ...:
        params["arguments"] = arguments
    params.update(extra)
    return _line({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def _exchange(path: Path, lines: list[bytes], *, fast: bool) -> list[bytes]:
    """Send each line, then read one line back per line that expects an answer (requests);
    returns every line the server wrote, in order.
    """
    proc = InProcessServer(path, fast_calls=fast)
    assert proc.stdin is not None and proc.stdout is not None
    out: list[bytes] = []
    try:
        for line in lines:
            proc.stdin.write(line)
            proc.stdin.flush()
            if b'"id"' not in line:
                continue
            while True:  # notifications (resource updates) come before the answer
                got = proc.stdout.readline()
                assert got, f"server closed its stdout; sent {line!r}"
                out.append(got)
                if b'"id"' in got:
                    break
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()
    return out


def E(name: str, kind: str = "t", *obs: str) -> dict[str, Any]:
    return {"name": name, "entityType": kind, "observations": list(obs)}


def _battery() -> list[bytes]:
    odd = 'é \u2028 "quoted" \\ back\\slash 🙂 <tag> \x00 \x1f'
    return [
        _call(1, "create_entities", {"entities": [E("a", "person", "x"), E(odd, odd, odd)]}),
        _call(2, "create_entities", {"entities": [E("a")]}),  # exists: nothing created
        _call(
            "three",
            "create_relations",
            {"relations": [{"from": "a", "to": odd, "relationType": "r"}]},
        ),
        _call(
            4, "add_observations", {"observations": [{"entityName": "a", "contents": ["y", "x"]}]}
        ),
        _call(
            5, "add_observations", {"observations": [{"entityName": "nobody", "contents": ["y"]}]}
        ),
        _call(6, "search_nodes", {"query": "quoted"}),
        _call(7, "open_nodes", {"names": ["a", "missing"]}),
        _call(8, "read_graph", {}),
        _call(9, "read_graph"),  # no arguments
        _call(10, "read_graph", None),
        _call(11, "create_entities", {"entities": 5}),  # invalid: zod's text
        _call(12, "create_entities", {"entities": [{"name": 1}], "extra": True}),
        _call(13, "no_such_tool", {}),
        _call(14, "create_entities", {"entities": [E("x\ud800y", "t", "\udfff")]}),  # surrogates
        _call(15, "search_nodes", {"query": "\ud800"}),
        _call(16, 5, {}),  # not a name: the SDK's params error
        # what Python's json and pydantic's parser both read although JSON has no such thing
        b'{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"search_nodes",'
        b'"arguments":{"query":NaN}}}\n',
        b'{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"search_nodes",'
        b'"arguments":{"query":1e400}}}\n',
        b'{"jsonrpc":"2.0","id":26,"method":"tools/call","params":{"name":"search_nodes",'
        b'"arguments":{"query":"a","query":5}}}\n',  # a key twice: the last one counts
        _call(17, "read_graph", {}, _meta={"progressToken": 3}),  # left to the SDK
        _call(
            18, "delete_observations", {"deletions": [{"entityName": "a", "observations": ["y"]}]}
        ),
        _call(
            19, "delete_relations", {"relations": [{"from": "a", "to": odd, "relationType": "r"}]}
        ),
        _call(20, "delete_entities", {"entityNames": ["a", odd]}),
        _line(
            {
                "jsonrpc": "2.0",
                "id": 21,
                "method": "resources/subscribe",
                "params": {"uri": "memory://knowledge-graph"},
            }
        ),
        _call(22, "create_entities", {"entities": [E("while subscribed")]}),
        _call(23, "read_graph", {}),
    ]


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_the_fast_path_writes_what_the_sdk_path_writes(tmp_path: Path, version: str) -> None:
    # A call before initialize was answered is the SDK's to refuse, in both.
    lines = [_call(100, "read_graph", {}), _init(version), _INITIALIZED, *_battery()]
    sdk = _exchange(tmp_path / "sdk.jsonl", lines, fast=False)
    fast = _exchange(tmp_path / "fast.jsonl", lines, fast=True)
    assert len(fast) == len(sdk) == 29  # 28 answers and the subscription's notification
    for got, want in zip(fast, sdk, strict=True):
        assert got == want
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "sdk.jsonl").read_bytes()


def _initialised_server(forks: ServeMcpForks, path: Path) -> ForkedProcess:
    """``companyd memory serve-mcp --file PATH`` as a process, its ``initialize``
    (2025-11-25) sent and answered; stdin and stdout are pipes, stderr is dropped.
    """
    proc = forks.serve_mcp(path)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(_init("2025-11-25"))
    proc.stdin.flush()
    assert b'"id":0' in proc.stdout.readline()
    return proc


def test_calls_in_flight_when_stdin_closes_are_answered_and_kept(
    tmp_path: Path, serve_mcp_forks: ServeMcpForks
) -> None:
    # `serve-mcp < calls.jsonl`, or a client that writes its last calls and closes: every
    # call gets its true answer. (Through the SDK alone they were answered "Connection
    # closed" while some of them had been written.)
    path = tmp_path / "memory.jsonl"
    proc = _initialised_server(serve_mcp_forks, path)
    calls = [_call(10 + i, "create_entities", {"entities": [E(f"e{i}")]}) for i in range(8)]
    out, _ = proc.communicate(b"".join([_INITIALIZED, *calls]), timeout=60)  # and close stdin
    assert proc.returncode == 0
    answers = {msg["id"]: msg for msg in map(json.loads, out.splitlines())}
    assert sorted(answers) == list(range(10, 18))
    for i in range(8):
        assert answers[10 + i]["result"]["structuredContent"] == {"entities": [E(f"e{i}")]}
    graph, report = parse_graph(path.read_bytes())
    assert not report.needs_repair
    assert {e.name for e in graph.entities()} == {f"e{i}" for i in range(8)}


def test_sigkill_mid_writes_loses_no_acknowledged_write(
    tmp_path: Path, serve_mcp_forks: ServeMcpForks
) -> None:
    # The fast path answers from the event loop; an answer must still mean "fsynced". A
    # client keeps 8 calls in flight; the server is SIGKILLed at a random moment; every
    # entity it acknowledged must be in the file afterwards (read by a fresh load).
    rng = random.Random(31)
    for trial in range(6):
        path = tmp_path / f"m{trial}.jsonl"
        proc = _initialised_server(serve_mcp_forks, path)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(_INITIALIZED)
        acked: set[str] = set()
        sent = 0
        kill_after = rng.randint(5, 150)
        while True:
            while sent - len(acked) < 8:
                proc.stdin.write(
                    _call(sent + 1, "create_entities", {"entities": [E(f"e{sent + 1}")]})
                )
                sent += 1
            proc.stdin.flush()
            msg = json.loads(proc.stdout.readline())
            assert not msg["result"].get("isError"), msg
            acked.add(f"e{msg['id']}")
            if len(acked) == kill_after:
                os.kill(proc.pid, signal.SIGKILL)
                break
        assert proc.wait(timeout=30) == -signal.SIGKILL  # the server died of the kill
        proc.stdin.close()
        proc.stdout.close()
        time.sleep(0.01)
        from companyd.memory._store import GraphStore

        with GraphStore(path) as store:
            store.open()
            names = set(store.read(lambda g: [e.name for e in g.entities()]))
        assert acked <= names, f"trial {trial}: lost {sorted(acked - names)}"
