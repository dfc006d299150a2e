"""More interop against the official MCP memory server (npm 2026.8.31): the cases a reviewer
tries first. Each scenario runs the same calls on `companyd memory serve-mcp` and on the
official server and compares answers (texts, structuredContent, isError) and, for the file
cases, what each leaves on disk. Where the answers differ, the test pins the documented,
deliberate difference (docs/memory.md "Semantics" and "Reading and repair").

Process starts (each costs ~0.8 s of CPU for ours, some for node): the call sequences run on
one pair of real server processes for the module (ours forked from the worker's fork server,
mcp_helpers.ServeMcpForks, which has paid those imports once for every serve-mcp process of
the worker). A file case needs ours fresh on that file (serve-mcp reads it, repairs it and
compacts it on the way out), so ours runs in this process (mcp_helpers.InProcessServer:
serve-mcp's serve_stdio over pipes), one per case (~0.02 s of CPU each; a forked process
costs ~0.06 s); the official server keeps no state between calls (it re-reads
MEMORY_FILE_PATH on every call, reference mcp-memory.md §0), so the module's one official
process serves every file case, its file rewritten before each.

Needs node; skipped with the reason when COMPANYD_OFFICIAL_MEMORY_SERVER is not set.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from companyd.memory._codec import parse_graph

from .conftest import require_official
from .mcp_helpers import (
    InProcessServer,
    RawClient,
    ServeMcpForks,
    Session,
    inprocess_session,
    interop_pair,
)

# one worker runs the module (`--dist loadgroup`): its pair of servers starts once; the
# group is the one of every memory module with serve-mcp processes from the fork server
# (conftest.serve_mcp_forks), so that one worker starts it
pytestmark = [pytest.mark.node, pytest.mark.xdist_group("memory_serve_mcp")]

INDEX = require_official()  # skips the whole module, with the reason, when unavailable

Call = tuple[str, dict[str, Any] | None]


def E(name: str, kind: str = "t", *obs: str) -> dict[str, Any]:
    return {"name": name, "entityType": kind, "observations": list(obs)}


def R(a: str, b: str, t: str) -> dict[str, str]:
    return {"from": a, "to": b, "relationType": t}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pair")


@pytest.fixture(scope="module")
async def pair(
    pair_dir: Path, serve_mcp_forks: ServeMcpForks
) -> AsyncIterator[tuple[Session, Session]]:
    async with interop_pair(serve_mcp_forks, INDEX, pair_dir) as both:
        yield both


# -- call sequences: identical answers -----------------------------------------------------------

SCENARIOS: dict[str, list[Call]] = {
    "unicode: emoji, RTL, controls, separators": [
        (
            "create_entities",
            {
                "entities": [
                    E("🙂‍👩‍👩‍👧", "טיפוס", "שלום עולם", "\u202ertl\u202c"),
                    E("a\u0001b\u001f", "\u007f", "\u2028\u2029", "tab\tnl\ncr\r"),
                ]
            },
        ),
        ("search_nodes", {"query": "שלום"}),
        ("search_nodes", {"query": "\u2028"}),
        ("open_nodes", {"names": ["a\u0001b\u001f"]}),
        ("read_graph", {}),
    ],
    "very long observations": [
        ("create_entities", {"entities": [E("L", "t", "x" * 200_000)]}),
        ("add_observations", {"observations": [{"entityName": "L", "contents": ["y" * 100_000]}]}),
        ("search_nodes", {"query": "yyy"}),
        (
            "delete_observations",
            {"deletions": [{"entityName": "L", "observations": ["x" * 200_000]}]},
        ),
        ("read_graph", {}),
    ],
    "pipes, quotes, backslashes, newlines in names": [
        (
            "create_entities",
            {"entities": [E("a|b", "t|u", '"q"'), E("a", "b|c"), E("l\nb", "t\r\n"), E("\\", "'")]},
        ),
        (
            "create_relations",
            {"relations": [R("a|b", "c", "r"), R("a", "b|c", "r"), R("a", "b", "c|r")]},
        ),
        # the same triples again, and ones a "|"-joined key would confuse with them
        (
            "create_relations",
            {"relations": [R("a|b", "c", "r"), R("a", "b|c|r", ""), R("l\nb", "\\", '"')]},
        ),
        ("delete_relations", {"relations": [R("a", "b|c", "r")]}),
        ("open_nodes", {"names": ["a|b", "l\nb"]}),
        ("read_graph", {}),
    ],
    "dangling relations and cascading deletes": [
        ("create_entities", {"entities": [E("a"), E("b")]}),
        (
            "create_relations",
            {
                "relations": [
                    R("a", "b", "r"),
                    R("b", "a", "r"),
                    R("a", "ghost", "r"),
                    R("ghost", "b", "q"),
                    R("ghost", "ghost", "z"),
                ]
            },
        ),
        ("delete_entities", {"entityNames": ["a", "nope"]}),
        ("read_graph", {}),
        ("delete_entities", {"entityNames": ["ghost"]}),  # no such entity: still cascades
        ("read_graph", {}),
    ],
    "missing entities in add/delete_observations": [
        ("create_entities", {"entities": [E("a", "t", "1")]}),
        (
            "delete_observations",
            {
                "deletions": [
                    {"entityName": "nobody", "observations": ["1"]},
                    {"entityName": "a", "observations": ["1"]},
                ]
            },
        ),
        (
            "add_observations",
            {
                "observations": [
                    {"entityName": "a", "contents": ["2"]},
                    {"entityName": "nobody", "contents": ["x"]},
                ]
            },
        ),
        ("add_observations", {"observations": [{"entityName": "", "contents": ["x"]}]}),
        ("add_observations", {"observations": [{"entityName": "A", "contents": ["x"]}]}),
        ("read_graph", {}),
    ],
    "empty arrays everywhere": [
        ("create_entities", {"entities": []}),
        ("create_relations", {"relations": []}),
        ("add_observations", {"observations": []}),
        ("delete_entities", {"entityNames": []}),
        ("delete_observations", {"deletions": []}),
        ("delete_relations", {"relations": []}),
        ("open_nodes", {"names": []}),
        ("search_nodes", {"query": ""}),
        ("read_graph", {}),
    ],
    "missing and mistyped arguments": [
        ("create_entities", {}),
        ("create_entities", None),
        ("create_entities", {"entities": [None]}),
        ("create_entities", {"entities": [{"name": "a", "entityType": "t"}]}),
        (
            "create_entities",
            {"entities": [{"name": "a", "entityType": "t", "observations": [1, None]}]},
        ),
        ("create_entities", {"entities": [{"name": 1.0, "entityType": True, "observations": []}]}),
        ("create_relations", {"relations": [{"from": "a"}]}),
        ("add_observations", {"observations": [{"contents": ["x"]}]}),
        ("delete_entities", {}),
        ("delete_observations", {"deletions": [{"entityName": "a"}]}),
        ("delete_relations", {"relations": [{"from": "a", "to": "b"}]}),
        ("search_nodes", {}),
        ("search_nodes", {"query": None}),
        ("search_nodes", {"query": ["a"]}),
        ("open_nodes", {}),
        ("open_nodes", {"names": "a"}),
        ("read_graph", None),
        ("read_graph ", {}),
        ("READ_GRAPH", {}),
    ],
    "unknown extra arguments are ignored and not stored": [
        (
            "create_entities",
            {
                "entities": [
                    {**E("a", "t", "o"), "extra": 1, "type": "relation", "createdAt": "x"}
                ],
                "bogus": True,
            },
        ),
        ("create_relations", {"relations": [{**R("a", "a", "r"), "weight": 3}], "x": []}),
        ("read_graph", {"foo": "bar"}),
        ("search_nodes", {"query": "a", "limit": 3}),
        ("open_nodes", {"names": ["a"], "depth": 2}),
        ("add_observations", {"observations": [{"entityName": "a", "contents": ["p"], "x": 1}]}),
        (
            "delete_observations",
            {"deletions": [{"entityName": "a", "observations": ["p"], "y": 2}]},
        ),
        ("delete_relations", {"relations": [{**R("a", "a", "r"), "z": 1}]}),
        ("delete_entities", {"entityNames": ["zz"], "cascade": False}),
        ("read_graph", {}),
    ],
    "search: case, type, observations, not relation types": [
        (
            "create_entities",
            {
                "entities": [
                    E("Alice", "Person", "Likes TEA"),
                    E("bob", "COMPANY", "x"),
                    E("İstanbul", "city"),
                    E("Straße", "street"),
                    E("ǅemal", "ǈ"),
                    E("ΌΣΟΣ", "Σ"),
                ]
            },
        ),
        (
            "create_relations",
            {"relations": [R("Alice", "bob", "KNOWS"), R("bob", "zed", "x"), R("q", "w", "alice")]},
        ),
        *[
            ("search_nodes", {"query": q})
            for q in [
                "ALICE",
                "company",
                "tea",
                "knows",
                "istanbul",
                "i̇",
                "STRASSE",
                "ǆ",
                "ǉ",
                "όσος",
                "όσοσ",
                "ς",
                " ",
                "ALICE BOB",
                "zed",
            ]
        ],
    ],
    "open_nodes: request order, unknown names, relations of found ends": [
        ("create_entities", {"entities": [E("a"), E("b"), E("c")]}),
        (
            "create_relations",
            {
                "relations": [
                    R("a", "b", "r"),
                    R("b", "c", "r"),
                    R("c", "ghost", "r"),
                    R("ghost", "a", "r"),
                ]
            },
        ),
        ("open_nodes", {"names": ["c", "a", "ghost", "nobody"]}),
        ("open_nodes", {"names": ["ghost"]}),
        ("open_nodes", {"names": ["a", "a"]}),
        ("open_nodes", {"names": ["b"]}),
    ],
    "observations: duplicates sent at create, delete removes every copy": [
        ("create_entities", {"entities": [E("a", "t", "x", "x", "y")]}),
        ("add_observations", {"observations": [{"entityName": "a", "contents": ["y", "z"]}]}),
        ("delete_observations", {"deletions": [{"entityName": "a", "observations": ["x"]}]}),
        ("read_graph", {}),
    ],
    "delete_relations: repeated and missing triples": [
        ("create_relations", {"relations": [R("a", "b", "r"), R("b", "a", "r")]}),
        (
            "delete_relations",
            {"relations": [R("a", "b", "r"), R("a", "b", "r"), R("x", "y", "z")]},
        ),
        ("read_graph", {}),
    ],
    "empty and blank strings": [
        ("create_entities", {"entities": [E("", "", ""), E(" ", "  ")]}),
        ("create_relations", {"relations": [R("", "", "")]}),
        ("search_nodes", {"query": ""}),
        ("open_nodes", {"names": [""]}),
        ("delete_entities", {"entityNames": [""]}),
        ("read_graph", {}),
    ],
    "prototype-ish names": [
        ("create_entities", {"entities": [E("__proto__"), E("constructor"), E("toString")]}),
        ("add_observations", {"observations": [{"entityName": "__proto__", "contents": ["p"]}]}),
        (
            "add_observations",
            {"observations": [{"entityName": "hasOwnProperty", "contents": ["p"]}]},
        ),
        ("open_nodes", {"names": ["__proto__", "valueOf"]}),
        ("read_graph", {}),
    ],
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_scenario_gets_identical_answers(pair: tuple[Session, Session], name: str) -> None:
    ours, theirs = pair
    async with asyncio.timeout(60):
        await ours.reset()
        await theirs.reset()
        for step, (tool, args) in enumerate(SCENARIOS[name]):
            a, b = await ours.call(tool, args), await theirs.call(tool, args)
            assert a == b, (name, step, tool, args)
        assert await ours.call("read_graph", {}) == await theirs.call("read_graph", {})


# -- what each leaves on disk --------------------------------------------------------------------


async def _both(
    theirs: tuple[Session, Path], tmp_path: Path, data: bytes | None, calls: list[Call]
) -> dict[str, Any]:
    """Run ``calls`` on each server, each on its own copy of ``data`` (None: no file): ours
    started fresh on it (in process) and stopped (what it leaves on disk), the official
    server on its file rewritten to ``data``.
    """
    official, theirs_path = theirs
    ours = tmp_path / "ours" / "memory.jsonl"
    ours.parent.mkdir(parents=True)
    for p in (ours, theirs_path):
        p.unlink(missing_ok=True)
        if data is not None:
            p.write_bytes(data)

    async def run_ours() -> list[dict[str, Any]]:
        async with inprocess_session(ours) as s:
            return [await s.call(tool, args) for tool, args in calls]

    async def run_theirs() -> list[dict[str, Any]]:
        return [await official.call(tool, args) for tool, args in calls]

    async with asyncio.timeout(90):
        a, b = await asyncio.gather(run_ours(), run_theirs())
    return {
        "ours": a,
        "theirs": b,
        "ours_file": ours.read_bytes() if ours.exists() else None,
        "theirs_file": theirs_path.read_bytes() if theirs_path.exists() else None,
        "corrupt": ours.with_name("memory.jsonl.corrupt"),
    }


_A = b'{"type":"entity","name":"a","entityType":"t","observations":["o"]}'
_B = b'{"type":"entity","name":"b","entityType":"t","observations":[]}'
_R = b'{"type":"relation","from":"a","to":"b","relationType":"r"}'
_NEW = {"entities": [E("new")]}
_READ_WRITE_READ: list[Call] = [
    ("read_graph", {}),
    ("search_nodes", {"query": "a"}),
    ("create_entities", _NEW),
    ("read_graph", {}),
]

# Files both servers read the same way; after one write both leave the same lines (ours
# ends with a newline, a documented choice both readers accept).
SAME_FILES: dict[str, bytes] = {
    "crlf line endings": _A + b"\r\n" + _B + b"\r\n" + _R + b"\r\n",
    "trailing blank lines": _A + b"\n" + _B + b"\n\n\n",
    "whitespace-only lines": _A + b"\n   \n" + _B + b"\n \t ",
    "a BOM alone on the first line": b"\xef\xbb\xbf\n" + _A,
    "empty file": b"",
    "only a newline": b"\n",
    "only relations": _R + b"\n" + b'{"type":"relation","from":"x","to":"y","relationType":"z"}',
    "keys in another order": (
        b'{"observations":["o"],"entityType":"t","name":"a","type":"entity"}\n'
        b'{"relationType":"r","to":"a","from":"a","type":"relation"}'
    ),
    "spaces inside the JSON": (
        b'{ "type": "entity", "name": "a", "entityType": "t", "observations": [ "o" ] }'
    ),
    "escaped unicode and slash": (
        b'{"type":"entity","name":"\\u00e9\\ud83d\\ude42","entityType":"t","observations":["\\/x"]}'
    ),
    "a duplicated key": (
        b'{"type":"entity","name":"a","name":"b","entityType":"t","observations":[]}'
    ),
    "NUL escaped in a string": (
        b'{"type":"entity","name":"a\\u0000b","entityType":"t","observations":[]}'
    ),
    "raw U+2028 in a string": (
        '{"type":"entity","name":"a\u2028b","entityType":"t","observations":[]}'.encode()
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(SAME_FILES))
async def test_odd_but_valid_files_are_read_and_rewritten_alike(
    theirs: tuple[Session, Path], tmp_path: Path, case: str
) -> None:
    got = await _both(theirs, tmp_path, SAME_FILES[case], _READ_WRITE_READ)
    assert got["ours"] == got["theirs"]
    assert not got["theirs"][0]["error"], got["theirs"][0]["text"]
    assert got["ours_file"].rstrip(b"\n") == got["theirs_file"]
    assert not got["corrupt"].exists()


@pytest.mark.anyio
async def test_a_file_with_a_bom_is_read_whole_and_rewritten_without_it(
    theirs: tuple[Session, Path], tmp_path: Path
) -> None:
    # Official: JSON.parse refuses the BOM, so every call fails until the file is hand-edited.
    # Ours (deliberate, documented): the BOM is removed, line 1 is read, the original line
    # goes to .corrupt, and the rewritten file is readable by the official server again.
    data = b"\xef\xbb\xbf" + _A + b"\n" + _B
    got = await _both(theirs, tmp_path, data, _READ_WRITE_READ)
    assert all(r["error"] and "is not valid JSON" in r["text"] for r in got["theirs"])
    assert got["ours"][0]["structured"]["entities"] == [E("a", "t", "o"), E("b")]
    new = b'{"type":"entity","name":"new","entityType":"t","observations":[]}'
    assert got["ours_file"] == _A + b"\n" + _B + b"\n" + new + b"\n"
    assert b"\xef\xbb\xbf" + _A in got["corrupt"].read_bytes()
    again = await _both(theirs, tmp_path / "again", got["ours_file"], [("read_graph", {})])
    assert again["ours"] == again["theirs"] and not again["theirs"][0]["error"]


@pytest.mark.anyio
async def test_extra_keys_are_dropped_on_rewrite_by_both_and_kept_in_corrupt_by_us(
    theirs: tuple[Session, Path], tmp_path: Path
) -> None:
    data = (
        b'{"type":"entity","name":"a","entityType":"t","observations":["o"],"createdAt":"2024"}\n'
        b'{"type":"relation","from":"a","to":"a","relationType":"r","weight":1}'
    )
    got = await _both(theirs, tmp_path, data, _READ_WRITE_READ)
    assert got["ours"] == got["theirs"]
    assert got["ours_file"].rstrip(b"\n") == got["theirs_file"]
    assert b'"createdAt"' not in got["ours_file"]
    corrupt = got["corrupt"].read_bytes()
    assert data.split(b"\n")[0] in corrupt and data.split(b"\n")[1] in corrupt


@pytest.mark.anyio
async def test_unknown_type_lines_are_kept_by_us_dropped_by_them(
    theirs: tuple[Session, Path], tmp_path: Path
) -> None:
    data = _A + b'\n{"type":"_aim","source":"mcp-knowledge-graph"}\n{"name":"untyped"}\n' + _B
    got = await _both(theirs, tmp_path, data, _READ_WRITE_READ)
    assert got["ours"] == got["theirs"]
    # documented: preserved verbatim and written back first; the official server drops them
    assert got["ours_file"].split(b"\n")[:2] == [
        b'{"type":"_aim","source":"mcp-knowledge-graph"}',
        b'{"name":"untyped"}',
    ]
    assert got["ours_file"].split(b"\n", 2)[2].rstrip(b"\n") == got["theirs_file"]


@pytest.mark.anyio
async def test_a_noop_first_call_creates_no_file_for_us(
    theirs: tuple[Session, Path], tmp_path: Path
) -> None:
    # Official: every mutation rewrites the file, so create_entities([]) creates an empty one.
    # Ours (documented): no-op calls write nothing. Both read a missing file as empty.
    got = await _both(
        theirs, tmp_path, None, [("create_entities", {"entities": []}), ("read_graph", {})]
    )
    assert got["ours"] == got["theirs"]
    assert got["theirs_file"] == b"" and got["ours_file"] is None


# -- lone surrogates (the SDK client cannot send them; JSON and both servers can) ---------------


def _raw(client: RawClient, calls: list[Call]) -> list[dict[str, Any]]:
    return [
        client.request("tools/call", {"name": tool, "arguments": args})["result"]
        for tool, args in calls
    ]


def _ours_raw(path: Path, calls: list[Call]) -> list[dict[str, Any]]:
    client = RawClient(InProcessServer(path))
    try:
        return _raw(client, calls)
    finally:
        assert client.close() == 0


def test_lone_surrogates_round_trip_like_the_official_server(tmp_path: Path) -> None:
    calls: list[Call] = [
        ("create_entities", {"entities": [E("x\ud800y", "t", "\udfff", "ok\U0001f642")]}),
        ("search_nodes", {"query": "\ud800"}),
        ("search_nodes", {"query": "\ud83d"}),  # half of the pair of "🙂" (UTF-16 units)
        (
            "add_observations",
            {"observations": [{"entityName": "x\ud800y", "contents": ["\udc00"]}]},
        ),
        ("create_relations", {"relations": [R("x\ud800y", "\ud800", "r")]}),
        ("open_nodes", {"names": ["x\ud800y"]}),
        ("read_graph", {}),
    ]
    # one official process: it re-reads its file on every call, so reading our file is
    # reading a copy of it at its path
    their_path = tmp_path / "theirs.jsonl"
    official = RawClient(["node", INDEX], {"MEMORY_FILE_PATH": str(their_path)})
    try:
        ours = _ours_raw(tmp_path / "ours.jsonl", calls)
        theirs = _raw(official, calls)
        assert ours == theirs
        ours_file = (tmp_path / "ours.jsonl").read_bytes()
        their_file = their_path.read_bytes()
        assert ours_file.rstrip(b"\n") == their_file
        _, report = parse_graph(ours_file, check_format=True)
        assert not report.needs_repair and report.noncanonical == 0
        # each reads the other's file
        read: list[Call] = [("read_graph", {})]
        (tmp_path / "theirs-copy.jsonl").write_bytes(their_file)
        assert _ours_raw(tmp_path / "theirs-copy.jsonl", read) == [ours[-1]]
        their_path.write_bytes(ours_file)
        assert _raw(official, read) == [theirs[-1]]
    finally:
        assert official.close() == 0
