"""Tool definitions, zod-compatible validation texts, results, journal effects and replay.

The expected error texts are the official server's (2026.8.31) answers to the same calls,
recorded with its stdio interface; test_interop.py re-checks them against the live server
when it is installed.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companyd.memory._codec import serialize
from companyd.memory._errors import MemoryToolError
from companyd.memory._graph import KnowledgeGraph
from companyd.memory._tools import (
    TOOL_NAMES,
    pretty,
    replay,
    result_text,
    run_tool,
    tool_definitions,
    validate_arguments,
)

PREFIX = "MCP error -32602: Input validation error: Invalid arguments for tool "


@pytest.mark.parametrize(
    ("tool", "args", "text"),
    [
        (
            "create_entities",
            {"entities": [{"name": "a", "entityType": "t"}]},
            "create_entities: Invalid input: expected array, received undefined at "
            "entities[0].observations",
        ),
        (
            "create_entities",
            {},
            "create_entities: Invalid input: expected array, received undefined at entities",
        ),
        (
            "create_entities",
            {"entities": [{"name": 1, "entityType": 2}], "extra": 5},
            "create_entities: Invalid input: expected string, received number at "
            "entities[0].name\nInvalid input: expected string, received number at "
            "entities[0].entityType\nInvalid input: expected array, received undefined at "
            "entities[0].observations",
        ),
        (
            "create_entities",
            {"entities": {}},
            "create_entities: Invalid input: expected array, received object at entities",
        ),
        (
            "open_nodes",
            {"names": [1, None, True, [], {}, 1.5]},
            "open_nodes: Invalid input: expected string, received number at names[0]\n"
            "Invalid input: expected string, received null at names[1]\n"
            "Invalid input: expected string, received boolean at names[2]\n"
            "Invalid input: expected string, received array at names[3]\n"
            "Invalid input: expected string, received object at names[4]\n"
            "Invalid input: expected string, received number at names[5]",
        ),
        (
            # 1e400 and -1e400 are valid JSON and parse to +-Infinity in both languages;
            # zod names them by value (text taken from the official server 2026.8.31)
            "open_nodes",
            {"names": [float("inf"), 1e308, float("-inf")]},
            "open_nodes: Invalid input: expected string, received Infinity at names[0]\n"
            "Invalid input: expected string, received number at names[1]\n"
            "Invalid input: expected string, received -Infinity at names[2]",
        ),
        (
            "open_nodes",
            {"names": "a"},
            "open_nodes: Invalid input: expected array, received string at names",
        ),
        (
            "search_nodes",
            {},
            "search_nodes: Invalid input: expected string, received undefined at query",
        ),
        (
            "create_relations",
            {"relations": [{"from": "a", "to": "b"}]},
            "create_relations: Invalid input: expected string, received undefined at "
            "relations[0].relationType",
        ),
        (
            "add_observations",
            {"observations": [{"entityName": "a", "contents": "x"}]},
            "add_observations: Invalid input: expected array, received string at "
            "observations[0].contents",
        ),
        (
            "delete_observations",
            {"deletions": [None]},
            "delete_observations: Invalid input: expected object, received null at deletions[0]",
        ),
    ],
)
def test_validation_errors_have_the_official_text(tool: str, args: Any, text: str) -> None:
    with pytest.raises(MemoryToolError) as err:
        validate_arguments(tool, args)
    assert str(err.value) == PREFIX + text


def test_unknown_tool_text() -> None:
    with pytest.raises(MemoryToolError) as err:
        validate_arguments("no_such_tool", {})
    assert str(err.value) == "MCP error -32602: Tool no_such_tool not found"


def test_validation_strips_unknown_keys_and_accepts_missing_arguments() -> None:
    args = validate_arguments(
        "create_entities",
        {"entities": [{"name": "a", "entityType": "t", "observations": [], "x": 1}], "y": 2},
    )
    assert args == {"entities": [{"name": "a", "entityType": "t", "observations": []}]}
    assert validate_arguments("read_graph", None) == {}
    assert validate_arguments("read_graph", {"anything": 1}) == {}


def test_tool_list_has_the_official_names_order_and_annotations() -> None:
    tools = tool_definitions()
    assert (
        [t["name"] for t in tools]
        == list(TOOL_NAMES)
        == [
            "create_entities",
            "create_relations",
            "add_observations",
            "delete_entities",
            "delete_observations",
            "delete_relations",
            "read_graph",
            "search_nodes",
            "open_nodes",
        ]
    )
    flags = {
        t["name"]: (
            t["annotations"]["readOnlyHint"],
            t["annotations"]["destructiveHint"],
            t["annotations"]["idempotentHint"],
            t["annotations"]["openWorldHint"],
        )
        for t in tools
    }
    assert (
        flags["read_graph"]
        == flags["search_nodes"]
        == flags["open_nodes"]
        == (True, False, True, False)
    )
    assert flags["delete_entities"] == flags["delete_relations"] == (False, True, True, False)
    assert flags["create_entities"] == flags["add_observations"] == (False, False, False, False)
    for t in tools:
        assert t["execution"] == {"taskSupport": "forbidden"}
        assert t["inputSchema"]["$schema"] == "http://json-schema.org/draft-07/schema#"
        assert t["outputSchema"]["additionalProperties"] is False
        assert "additionalProperties" not in t["inputSchema"]
    create = tools[0]["inputSchema"]["properties"]["entities"]["items"]
    assert create["required"] == ["name", "entityType", "observations"]
    assert tools[6]["inputSchema"] == {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {},
    }


def test_results_and_texts_match_the_official_shapes() -> None:
    g = KnowledgeGraph()
    out, effect = run_tool(
        g, "create_entities", {"entities": [{"name": "a", "entityType": "t", "observations": []}]}
    )
    assert out == {"entities": [{"name": "a", "entityType": "t", "observations": []}]}
    assert result_text("create_entities", out) == (
        '[\n  {\n    "name": "a",\n    "entityType": "t",\n    "observations": []\n  }\n]'
    )
    assert effect is not None
    out, effect = run_tool(g, "delete_entities", {"entityNames": ["zz"]})
    assert out == {"success": True, "message": "Entities deleted successfully"}
    assert result_text("delete_entities", out) == "Entities deleted successfully"
    assert effect is None  # nothing changed: nothing to journal
    out, _ = run_tool(g, "read_graph", {})
    assert result_text("read_graph", out) == pretty(out)
    assert pretty({"s": "\ud800"}) == '{\n  "s": "\\ud800"\n}'


_names = st.sampled_from(["a", "b", "c", "d", "é", ""])
_strs = st.sampled_from(["x", "y", "z", "\ud800", "ü"])
_ent = st.fixed_dictionaries(
    {
        "name": _names,
        "entityType": st.sampled_from(["p", "q"]),
        "observations": st.lists(_strs, max_size=3),
    }
)
_rel = st.fixed_dictionaries(
    {"from": _names, "to": _names, "relationType": st.sampled_from(["r", "s"])}
)
_calls = st.one_of(
    st.tuples(
        st.just("create_entities"), st.fixed_dictionaries({"entities": st.lists(_ent, max_size=3)})
    ),
    st.tuples(
        st.just("create_relations"),
        st.fixed_dictionaries({"relations": st.lists(_rel, max_size=3)}),
    ),
    st.tuples(
        st.just("add_observations"),
        st.fixed_dictionaries(
            {
                "observations": st.lists(
                    st.fixed_dictionaries(
                        {"entityName": _names, "contents": st.lists(_strs, max_size=3)}
                    ),
                    max_size=2,
                )
            }
        ),
    ),
    st.tuples(
        st.just("delete_entities"),
        st.fixed_dictionaries({"entityNames": st.lists(_names, max_size=2)}),
    ),
    st.tuples(
        st.just("delete_observations"),
        st.fixed_dictionaries(
            {
                "deletions": st.lists(
                    st.fixed_dictionaries(
                        {"entityName": _names, "observations": st.lists(_strs, max_size=2)}
                    ),
                    max_size=2,
                )
            }
        ),
    ),
    st.tuples(
        st.just("delete_relations"),
        st.fixed_dictionaries({"relations": st.lists(_rel, max_size=2)}),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_calls, max_size=25))
def test_replaying_the_effects_rebuilds_the_same_graph(calls: list[tuple[str, Any]]) -> None:
    # The journal stores effects, not calls; replaying them on the same starting graph must
    # give byte-identical files (this is what makes the journal a faithful log).
    live = KnowledgeGraph()
    effects = []
    for tool, args in calls:
        try:
            _, effect = run_tool(live, tool, validate_arguments(tool, args))
        except MemoryToolError:
            continue
        if effect is not None:
            effects.append(effect)
    rebuilt = KnowledgeGraph()
    for effect in effects:
        assert replay(rebuilt, effect)  # every recorded effect changes something
    assert serialize(rebuilt) == serialize(live)
    live.check_invariants()
    rebuilt.check_invariants()


def test_replay_rejects_unknown_operations() -> None:
    with pytest.raises(ValueError, match="unknown journal operation"):
        replay(KnowledgeGraph(), {"op": "format_disk"})
