"""serve-mcp through the real mcp client SDK over stdio: the behavioural contract of the
official memory server (reference §3–§5), run against ours and, when it is installed, the
official server too (same checks, same expectations except the documented quirk fixes).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPDeprecationWarning
from mcp_types import TextResourceContents

from companyd.memory._codec import parse_graph
from companyd.memory._tools import pretty, tool_definitions

from .conftest import official_server as official_index
from .conftest import require_official
from .mcp_helpers import (
    InProcessServer,
    RawClient,
    ServeMcpForks,
    Session,
    companyd_server,
    forked_session,
    inprocess_session,
    official_server,
    session,
)

# one worker runs the module (`--dist loadgroup`): each server kind starts once; the group
# is the one of every memory module with serve-mcp processes from the fork server
# (conftest.serve_mcp_forks), so that one worker starts it
pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("memory_serve_mcp")]

# The same checks run against the official server when it is installed; when it is not,
# test_official_server_is_available says why (one skip instead of one per check).
KINDS = ["companyd"] + (
    [pytest.param("official", marks=pytest.mark.node)] if official_index() else []
)


@pytest.mark.node
def test_official_server_is_available() -> None:
    require_official()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=KINDS)
async def srv(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    serve_mcp_forks: ServeMcpForks,
) -> AsyncIterator[tuple[str, Session]]:
    kind = request.param
    path = tmp_path_factory.mktemp(kind) / "memory.jsonl"
    async with asyncio.timeout(60):
        cm = (
            forked_session(serve_mcp_forks, path)  # a serve-mcp process (mcp_helpers)
            if kind == "companyd"
            else session(official_server(require_official(), path))
        )
        s = await cm.__aenter__()
    try:
        yield kind, s
    finally:
        await cm.__aexit__(None, None, None)


@pytest.fixture
async def s(srv: tuple[str, Session]) -> Session:
    _, sess = srv
    async with asyncio.timeout(30):
        await sess.reset()
    return sess


@pytest.fixture
def kind(srv: tuple[str, Session]) -> str:
    return srv[0]


def E(name: str, kind: str = "t", *obs: str) -> dict[str, Any]:
    return {"name": name, "entityType": kind, "observations": list(obs)}


def R(a: str, b: str, t: str) -> dict[str, str]:
    return {"from": a, "to": b, "relationType": t}


async def test_initialize_reports_the_official_identity_and_capabilities(s: Session) -> None:
    assert s.init.server_info.name == "memory-server"
    assert s.init.server_info.version == "0.6.3"
    caps = s.init.capabilities
    assert caps.tools is not None and caps.tools.list_changed is True
    assert caps.resources is not None
    assert caps.resources.subscribe is True and caps.resources.list_changed is True


async def test_tools_list(s: Session) -> None:
    tools = (await s.client.list_tools()).tools
    got = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    assert got == tool_definitions()


async def test_create_entities_skips_existing_and_returns_added(s: Session) -> None:
    out = await s.call("create_entities", {"entities": [E("a", "p", "1"), E("b")]})
    assert out["structured"] == {"entities": [E("a", "p", "1"), E("b")]}
    assert out["text"] == pretty([E("a", "p", "1"), E("b")])
    out = await s.call("create_entities", {"entities": [E("a", "changed", "2"), E("c")]})
    assert out["structured"] == {"entities": [E("c")]}
    graph = await s.ok("read_graph", {})
    assert graph["entities"] == [E("a", "p", "1"), E("b"), E("c")]


async def test_create_entities_with_a_name_twice_in_one_call(s: Session, kind: str) -> None:
    out = await s.ok("create_entities", {"entities": [E("d", "x"), E("d", "y")]})
    graph = await s.ok("read_graph", {})
    if kind == "official":  # quirk: both stored
        assert out["entities"] == [E("d", "x"), E("d", "y")] == graph["entities"]
    else:  # fixed: names are unique
        assert out["entities"] == [E("d", "x")] == graph["entities"]


async def test_create_relations_dedupes_and_accepts_dangling(s: Session) -> None:
    await s.ok("create_entities", {"entities": [E("a"), E("b")]})
    out = await s.ok("create_relations", {"relations": [R("a", "b", "r"), R("a", "ghost", "r")]})
    assert out == {"relations": [R("a", "b", "r"), R("a", "ghost", "r")]}
    out = await s.ok("create_relations", {"relations": [R("a", "b", "r"), R("b", "a", "r")]})
    assert out == {"relations": [R("b", "a", "r")]}
    assert (await s.ok("read_graph", {}))["relations"] == [
        R("a", "b", "r"),
        R("a", "ghost", "r"),
        R("b", "a", "r"),
    ]


async def test_add_observations(s: Session) -> None:
    await s.ok("create_entities", {"entities": [E("a", "t", "old"), E("b")]})
    out = await s.call(
        "add_observations",
        {
            "observations": [
                {"entityName": "a", "contents": ["old", "new"]},
                {"entityName": "b", "contents": ["x"]},
                {"entityName": "a", "contents": ["new", "newer"]},
            ]
        },
    )
    results = [
        {"entityName": "a", "addedObservations": ["new"]},
        {"entityName": "b", "addedObservations": ["x"]},
        {"entityName": "a", "addedObservations": ["newer"]},
    ]
    assert out == {"text": pretty(results), "structured": {"results": results}, "error": False}
    graph = await s.ok("open_nodes", {"names": ["a"]})
    assert graph["entities"] == [E("a", "t", "old", "new", "newer")]


async def test_add_observations_to_a_missing_entity_is_all_or_nothing(s: Session) -> None:
    await s.ok("create_entities", {"entities": [E("a")]})
    out = await s.call(
        "add_observations",
        {
            "observations": [
                {"entityName": "a", "contents": ["would be added"]},
                {"entityName": "Nobody", "contents": ["x"]},
            ]
        },
    )
    assert out == {"text": "Entity with name Nobody not found", "structured": None, "error": True}
    assert (await s.ok("read_graph", {}))["entities"] == [E("a")]


async def test_add_observations_with_a_string_twice(s: Session, kind: str) -> None:
    await s.ok("create_entities", {"entities": [E("a")]})
    out = await s.ok(
        "add_observations", {"observations": [{"entityName": "a", "contents": ["y", "y"]}]}
    )
    added = out["results"][0]["addedObservations"]
    assert added == (["y", "y"] if kind == "official" else ["y"])


async def test_delete_entities_cascades(s: Session) -> None:
    await s.ok("create_entities", {"entities": [E("a"), E("b"), E("c")]})
    await s.ok(
        "create_relations",
        {"relations": [R("a", "b", "r"), R("c", "a", "r"), R("b", "c", "r"), R("x", "y", "r")]},
    )
    out = await s.call("delete_entities", {"entityNames": ["a", "missing", "y"]})
    assert out == {
        "text": "Entities deleted successfully",
        "structured": {"success": True, "message": "Entities deleted successfully"},
        "error": False,
    }
    graph = await s.ok("read_graph", {})
    assert graph == {"entities": [E("b"), E("c")], "relations": [R("b", "c", "r")]}


async def test_delete_observations_and_relations(s: Session) -> None:
    await s.ok("create_entities", {"entities": [E("a", "t", "1", "2", "3")]})
    await s.ok("create_relations", {"relations": [R("a", "a", "self"), R("a", "a", "other")]})
    out = await s.call(
        "delete_observations",
        {
            "deletions": [
                {"entityName": "a", "observations": ["2", "9"]},
                {"entityName": "zz", "observations": ["1"]},
            ]
        },
    )
    assert out["text"] == "Observations deleted successfully"
    assert out["structured"] == {"success": True, "message": "Observations deleted successfully"}
    out = await s.call(
        "delete_relations", {"relations": [R("a", "a", "self"), R("a", "a", "missing")]}
    )
    assert out["structured"] == {"success": True, "message": "Relations deleted successfully"}
    assert await s.ok("read_graph", {}) == {
        "entities": [E("a", "t", "1", "3")],
        "relations": [R("a", "a", "other")],
    }


async def test_read_graph_text_is_pretty_json(s: Session) -> None:
    await s.ok("create_entities", {"entities": [E("ünï", "ţ", "line\nbreak", "tab\t")]})
    await s.ok("create_relations", {"relations": [R("ünï", "elsewhere", "→")]})
    out = await s.call("read_graph", {})
    assert out["text"] == pretty(out["structured"])
    assert out["structured"]["relations"] == [R("ünï", "elsewhere", "→")]


async def test_search_nodes(s: Session) -> None:
    await s.ok(
        "create_entities",
        {"entities": [E("Alice", "person", "Likes TEA"), E("Acme", "company"), E("Bob", "person")]},
    )
    await s.ok(
        "create_relations",
        {"relations": [R("Alice", "Acme", "works_at"), R("Bob", "Carol", "knows")]},
    )
    found = await s.ok("search_nodes", {"query": "tea"})
    assert found == {
        "entities": [E("Alice", "person", "Likes TEA")],
        "relations": [R("Alice", "Acme", "works_at")],
    }
    assert [e["name"] for e in (await s.ok("search_nodes", {"query": "PERSON"}))["entities"]] == [
        "Alice",
        "Bob",
    ]
    assert (await s.ok("search_nodes", {"query": "works_at"}))["entities"] == []
    everything = await s.ok("search_nodes", {"query": ""})
    assert len(everything["entities"]) == 3 and len(everything["relations"]) == 2
    await s.ok("create_entities", {"entities": [E("İstanbul"), E("straße")]})
    assert (await s.ok("search_nodes", {"query": "istanbul"}))["entities"] == []
    assert (await s.ok("search_nodes", {"query": "STRASSE"}))["entities"] == []


async def test_open_nodes(s: Session) -> None:
    await s.ok("create_entities", {"entities": [E("a"), E("b"), E("c")]})
    await s.ok("create_relations", {"relations": [R("a", "b", "r"), R("c", "ghost", "r")]})
    out = await s.ok("open_nodes", {"names": ["c", "a", "nobody", "ghost"]})
    assert out == {
        "entities": [E("a"), E("c")],
        "relations": [R("a", "b", "r"), R("c", "ghost", "r")],
    }


async def test_errors_are_tool_results_with_the_official_text(s: Session) -> None:
    out = await s.call("create_entities", {"entities": [{"name": "a", "entityType": "t"}]})
    assert out == {
        "text": "MCP error -32602: Input validation error: Invalid arguments for tool "
        "create_entities: Invalid input: expected array, received undefined at "
        "entities[0].observations",
        "structured": None,
        "error": True,
    }
    out = await s.call("no_such_tool", {})
    assert out["error"] and out["text"] == "MCP error -32602: Tool no_such_tool not found"


async def test_resource_read_and_subscription(s: Session) -> None:
    listed = (await s.client.list_resources()).resources
    assert [(r.uri, r.name, r.mime_type) for r in listed] == [
        ("memory://knowledge-graph", "knowledge-graph", "application/json")
    ]
    await s.ok("create_entities", {"entities": [E("a")]})
    assert s.notifications == []  # not subscribed yet
    read = await s.client.read_resource("memory://knowledge-graph")
    (content,) = read.contents
    assert isinstance(content, TextResourceContents)
    assert json.loads(content.text) == await s.ok("read_graph", {})
    # subscribe/unsubscribe are what the official server (protocol 2025-11-25) speaks; the
    # SDK marks them deprecated for the 2026-07-28 protocol
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await s.client.subscribe_resource("memory://knowledge-graph")
    try:
        await s.ok("create_entities", {"entities": [E("b")]})
        await s.ok("delete_entities", {"entityNames": ["nobody"]})
        await s.ok("read_graph", {})
        await s.call(
            "add_observations", {"observations": [{"entityName": "zz", "contents": ["x"]}]}
        )
        async with asyncio.timeout(5):
            while len(s.notifications) < 2:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        uris = [n.params.uri for n in s.notifications]
        assert uris == ["memory://knowledge-graph"] * 2  # mutations only, not errors or reads
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await s.client.unsubscribe_resource("memory://knowledge-graph")


async def test_eight_calls_in_flight_are_all_kept(tmp_path: Path) -> None:
    # Ours only: the official server loses most of them (reference §8.2; bench_memory.py
    # measures how many).
    async with asyncio.timeout(60), inprocess_session(tmp_path / "memory.jsonl") as s:
        results = await asyncio.gather(
            *(s.ok("create_entities", {"entities": [E(f"p{i}")]}) for i in range(8))
        )
        assert sorted(r["entities"][0]["name"] for r in results) == [f"p{i}" for i in range(8)]
        names = {e["name"] for e in (await s.ok("read_graph", {}))["entities"]}
        assert names == {f"p{i}" for i in range(8)}


async def test_closing_stdin_compacts_the_file(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    async with asyncio.timeout(60), session(companyd_server(path)) as sess:
        await sess.ok("create_entities", {"entities": [E("kept", "t", "x")]})
    graph, report = parse_graph(path.read_bytes())
    assert not report.needs_repair
    assert graph.read_graph()["entities"] == [E("kept", "t", "x")]


def test_sigterm_stops_serve_mcp_cleanly(tmp_path: Path, serve_mcp_forks: ServeMcpForks) -> None:
    import signal

    path = tmp_path / "memory.jsonl"
    proc = serve_mcp_forks.serve_mcp(path)  # a serve-mcp process (mcp_helpers.ServeMcpForks)
    client = RawClient(proc)
    res = client.request(
        "tools/call",
        {"name": "create_entities", "arguments": {"entities": [E("kept", "t", "before SIGTERM")]}},
    )
    assert not res["result"].get("isError")
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
        proc.stdout.close()
    graph, report = parse_graph(path.read_bytes())  # folded into the MCP file on the way out
    assert not report.needs_repair
    assert graph.read_graph()["entities"] == [E("kept", "t", "before SIGTERM")]


@pytest.mark.parametrize(
    ("stdin", "stdout"), [("/dev/null", "pipe"), ("/dev/null", "file"), ("closed", "pipe")]
)
def test_serve_mcp_with_stdin_at_eof_exits_0_and_keeps_what_was_acknowledged(
    tmp_path: Path, serve_mcp_forks: ServeMcpForks, stdin: str, stdout: str
) -> None:
    # `serve-mcp < /dev/null`: /dev/null is a character device epoll cannot watch; the
    # server must see the end of its input at once and exit 0 (as an MCP stdio server whose
    # client went away), folding in the journal of a writer SIGKILLed after an answer.
    # `serve-mcp <&-` (no stdin at all) is the same end of input: the memory file must not
    # be opened as fd 0 and then blamed.
    path = tmp_path / "memory.jsonl"
    proc = serve_mcp_forks.serve_mcp(path)
    try:
        res = RawClient(proc).request(
            "tools/call",
            {"name": "create_entities", "arguments": {"entities": [E("acked", "t", "x")]}},
        )
        assert not res["result"].get("isError"), res
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdin.close()
        proc.stdout.close()
    out = subprocess.PIPE if stdout == "pipe" else (tmp_path / "out").open("wb")
    try:
        argv = [sys.executable, "-m", "companyd", "memory", "serve-mcp", "--file", str(path)]
        if stdin == "closed":  # the shell closes fd 0, then becomes the server
            argv = ["sh", "-c", 'exec "$@" <&-', "sh", *argv]
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=60,  # the defect: it waited on its input for ever
            env={**os.environ, "COMPANYD_TEST_NO_NET": "1"},
        )
    finally:
        if not isinstance(out, int):
            out.close()
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    graph, report = parse_graph(path.read_bytes())  # folded into the MCP file on the way out
    assert not report.needs_repair
    assert graph.read_graph()["entities"] == [E("acked", "t", "x")]


def test_a_request_nested_too_deeply_is_answered_not_left_waiting(tmp_path: Path) -> None:
    # JSON.parse reads 5,000 levels (the official server answers); Python's json cannot.
    # The client must still get an answer for that id, and the server keeps serving.
    client = RawClient(InProcessServer(tmp_path / "m"))
    try:
        assert client.proc.stdin is not None
        deep = "[" * 5000 + "]" * 5000
        client.proc.stdin.write(
            b'{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{"name":"search_nodes",'
            b'"arguments":{"query":' + deep.encode() + b"}}}\n"
        )
        client.proc.stdin.flush()
        # a request after it: if the deep one went unanswered, this answer would come first
        after = client.send("tools/call", {"name": "read_graph", "arguments": {}})
        refused = client.receive()
        assert refused["id"] == 900, refused
        assert refused["error"]["code"] == -32600
        assert "nested too deeply" in refused["error"]["message"]
        served = client.receive()
        assert served["id"] == after and not served["result"].get("isError")
    finally:
        assert client.close() == 0


def test_serve_mcp_tells_on_stderr_that_it_repaired_the_file(
    tmp_path: Path, serve_mcp_forks: ServeMcpForks
) -> None:
    # the memory_repaired event of the owner becomes one line for whoever launched it
    path = tmp_path / "memory.jsonl"
    good = json.dumps({"type": "entity", "name": "kept", "entityType": "t", "observations": []})
    path.write_text(f"{good}\nthis line is not JSON\n", encoding="utf-8")
    err_read, err_write = os.pipe()
    try:  # a serve-mcp process (mcp_helpers.ServeMcpForks), its stderr a pipe to here
        proc = serve_mcp_forks.serve_mcp(path, stderr=err_write)
    finally:
        os.close(err_write)
    with os.fdopen(err_read, "rb") as err:
        proc.communicate(b"", timeout=120)  # stdin closed at once
        stderr = err.read()
    assert proc.returncode == 0, stderr
    assert f"companyd memory: repaired {path}: ".encode() in stderr, stderr
