"""Browsing memory for the operator: the search and entity views (memory/_browse.py) and the
memory owner's log of recent writes (memory/_changes.py, MemoryService.changes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.memory._browse import MAX_NEIGHBOURS, entity_view, search_entities
from companyd.memory._changes import ChangeLog, describe
from companyd.memory._errors import MemoryToolError
from companyd.memory._graph import KnowledgeGraph, Relation
from companyd.memory._service import MemoryService

from .test_service import running


def company_graph() -> KnowledgeGraph:
    g = KnowledgeGraph()
    g.create_entities(
        [
            ("Acme", "customer", ["pays 400 EUR a month", "renewal in March"]),
            ("Bob", "person", ["CFO of Acme"]),
            ("Clinic Plan", "product", []),
            ("Zed", "person", ["likes tea"]),
        ]
    )
    g.create_relations(
        [
            Relation("Bob", "Acme", "works_at"),
            Relation("Acme", "Clinic Plan", "buys"),
            Relation("Clinic Plan", "Northwind", "made_by"),  # Northwind: no entity line
        ]
    )
    return g


def test_search_matches_name_type_and_observations_case_insensitively() -> None:
    g = company_graph()
    found = search_entities(g, "acme", 10)
    assert [e["name"] for e in found["entities"]] == ["Acme", "Bob"]  # file order
    acme, bob = found["entities"]
    assert acme == {
        "name": "Acme",
        "entityType": "customer",
        "observations": 2,
        "relations": 2,
        "match": "pays 400 EUR a month",  # matched by name: the first observation
    }
    assert bob["match"] == "CFO of Acme" and bob["relations"] == 1
    assert search_entities(g, "PERSON", 10)["total"] == 2
    assert search_entities(g, "march", 10)["entities"][0]["match"] == "renewal in March"
    assert search_entities(g, "nothing like it", 10) == {
        "query": "nothing like it",
        "total": 0,
        "truncated": False,
        "entities": [],
    }


def test_search_stops_at_the_limit_but_counts_every_match() -> None:
    g = company_graph()
    everything = search_entities(g, "", 2)
    assert everything["total"] == 4 and everything["truncated"] is True
    assert [e["name"] for e in everything["entities"]] == ["Acme", "Bob"]
    assert search_entities(g, "", 2)["entities"][1]["match"] == "CFO of Acme"


def test_an_entity_with_its_relations_and_neighbours() -> None:
    view = entity_view(company_graph(), "Acme", 1)
    assert view is not None
    assert view["entity_type"] == "customer"
    assert view["observations"] == ["pays 400 EUR a month", "renewal in March"]
    assert view["relations"] == [
        {"from": "Bob", "to": "Acme", "relationType": "works_at"},
        {"from": "Acme", "to": "Clinic Plan", "relationType": "buys"},
    ]
    assert [(n["name"], n["distance"]) for n in view["neighbours"]] == [
        ("Bob", 1),
        ("Clinic Plan", 1),
    ]
    assert view["others"] == [] and view["truncated"] is False
    two = entity_view(company_graph(), "Acme", 2)
    assert two is not None and two["others"] == ["Northwind"]
    assert {"from": "Clinic Plan", "to": "Northwind", "relationType": "made_by"} in two["edges"]


def test_a_relation_end_without_an_entity_line_is_shown_and_an_unknown_name_is_none() -> None:
    g = company_graph()
    end = entity_view(g, "Northwind", 1)
    assert end is not None and end["entity_type"] is None and end["observations"] == []
    assert [n["name"] for n in end["neighbours"]] == ["Clinic Plan"]
    assert entity_view(g, "Nobody", 1) is None
    assert entity_view(g, "Zed", 1) == {
        "name": "Zed",
        "entity_type": "person",
        "observations": ["likes tea"],
        "relations": [],
        "depth": 1,
        "neighbours": [],
        "others": [],
        "edges": [],
        "truncated": False,
    }


def test_a_hub_s_neighbourhood_is_cut_to_a_drawable_size() -> None:
    g = KnowledgeGraph()
    g.create_entities([("hub", "t", [])] + [(f"n{i}", "t", []) for i in range(100)])
    g.create_relations([Relation("hub", f"n{i}", "has") for i in range(100)])
    view = entity_view(g, "hub", 1)
    assert view is not None and view["truncated"] is True
    assert len(view["neighbours"]) + len(view["others"]) == MAX_NEIGHBOURS - 1
    assert len(view["relations"]) == 100  # its own relations are all listed


def test_each_write_tool_is_described_by_the_names_it_touches() -> None:
    assert describe(
        "create_entities", {"entities": [{"name": "A", "entityType": "t", "observations": []}]}
    ) == (["A"], "create_entities: A [t]")
    assert describe(
        "create_relations", {"relations": [{"from": "A", "to": "B", "relationType": "r"}]}
    ) == (["A", "B"], "create_relations: A -r-> B")
    assert describe(
        "add_observations", {"observations": [{"entityName": "A", "contents": ["x", "y"]}]}
    ) == (["A"], "add_observations: A +2")
    assert describe(
        "delete_observations", {"deletions": [{"entityName": "A", "observations": ["x"]}]}
    ) == (["A"], "delete_observations: A -1")
    assert describe("delete_entities", {"entityNames": ["A", "B"]}) == (
        ["A", "B"],
        "delete_entities: A, B",
    )
    long = describe("delete_entities", {"entityNames": ["x" * 500]})[1]
    assert len(long) == 240 and long.endswith("…")


def test_the_change_log_keeps_the_latest_newest_first() -> None:
    log = ChangeLog(keep=3)
    for i in range(5):
        log.record(float(i), "delete_entities", {"entityNames": [f"e{i}"]}, "cfo")
    assert [c.entities for c in log.recent(10)] == [("e4",), ("e3",), ("e2",)]
    assert [c.at for c in log.recent(2)] == [4.0, 3.0]


@pytest.mark.anyio
async def test_the_memory_owner_logs_durable_writes_with_who_made_them(memfile: Path) -> None:
    clock = ManualClock(start=1_800_000_000.0)
    service = MemoryService(memfile, bus=EventBus(), clock=clock)
    async with running(service):
        ent = {"name": "Acme", "entityType": "customer", "observations": []}
        await service.call("create_entities", {"entities": [ent]}, by="cfo")
        clock.advance(5)
        await service.call("search_nodes", {"query": "Acme"}, by="cfo")  # a read: not logged
        await service.call(
            "add_observations", {"observations": [{"entityName": "Acme", "contents": ["x"]}]}
        )
        with pytest.raises(MemoryToolError, match="not found"):  # refused: nothing changed
            await service.call(
                "add_observations", {"observations": [{"entityName": "B", "contents": ["y"]}]}
            )
    changes = [c.to_dict() for c in service.changes.recent(10)]
    assert changes == [
        {
            "at": 1_800_000_005.0,
            "tool": "add_observations",
            "by": None,
            "entities": ["Acme"],
            "summary": "add_observations: Acme +1",
        },
        {
            "at": 1_800_000_000.0,
            "tool": "create_entities",
            "by": "cfo",
            "entities": ["Acme"],
            "summary": "create_entities: Acme [customer]",
        },
    ]
    assert service.changes_since == 1_800_000_000.0
