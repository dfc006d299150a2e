"""networkx views: neighbourhood (against nx.ego_graph), paths, types, hubs, exports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companyd.memory._codec import serialize
from companyd.memory._graph import KnowledgeGraph, Relation
from companyd.memory._view import (
    entities_by_type,
    export_graphml,
    export_node_link,
    graph_from_node_link,
    most_connected,
    neighbourhood,
    shortest_path,
    to_networkx,
)


@pytest.fixture
def company() -> KnowledgeGraph:
    g = KnowledgeGraph()
    g.create_entities(
        [
            ("Ann", "person", ["founder"]),
            ("Acme", "client", ["pays late"]),
            ("Bolt", "client", []),
            ("Cid", "person", ["accountant"]),
            ("Far", "place", []),
        ]
    )
    g.create_relations(
        [
            Relation("Ann", "Acme", "sells_to"),
            Relation("Ann", "Bolt", "sells_to"),
            Relation("Cid", "Ann", "works_for"),
            Relation("Bolt", "Far", "located_in"),
            Relation("Acme", "Invoice-7", "owes"),  # dangling end
        ]
    )
    return g


def test_neighbourhood_depth_one_and_two(company: KnowledgeGraph) -> None:
    one = neighbourhood(company, "Acme", 1)
    assert [e["name"] for e in one.entities] == ["Acme", "Ann"]
    assert one.others == ["Invoice-7"]
    assert [e["distance"] for e in one.entities] == [0, 1]
    assert one.relations == [
        {"from": "Ann", "to": "Acme", "relationType": "sells_to"},
        {"from": "Acme", "to": "Invoice-7", "relationType": "owes"},
    ]
    two = neighbourhood(company, "Acme", 2)
    assert {e["name"] for e in two.entities} == {"Acme", "Ann", "Bolt", "Cid"}
    assert "Far" not in {e["name"] for e in two.entities}
    text = two.text()
    assert text.startswith("Company memory around 'Acme' (2 hops):")
    assert "- Acme [client]: pays late" in text
    assert "- Cid --works_for--> Ann" in text
    assert "- Invoice-7 (mentioned in relations only)" in text


def test_neighbourhood_of_unknown_and_limits(company: KnowledgeGraph) -> None:
    assert neighbourhood(company, "Nobody").found is False
    assert "nothing about 'Nobody'" in neighbourhood(company, "Nobody").text()
    capped = neighbourhood(company, "Ann", 3, max_nodes=3)
    assert capped.truncated and len(capped.entities) + len(capped.others) == 3
    with pytest.raises(ValueError, match="depth must be 0 or more, got -1"):
        neighbourhood(company, "Ann", -1)


@settings(max_examples=80, deadline=None)
@given(
    edges=st.lists(
        st.tuples(st.integers(0, 9), st.integers(0, 9), st.sampled_from(["r", "s"])), max_size=25
    ),
    start=st.integers(0, 9),
    depth=st.integers(0, 4),
)
def test_neighbourhood_equals_networkx_ego_graph(
    edges: list[tuple[int, int, str]], start: int, depth: int
) -> None:
    g = KnowledgeGraph()
    g.create_entities((f"n{i}", "t", []) for i in range(10))
    g.create_relations(Relation(f"n{a}", f"n{b}", r) for a, b, r in edges)
    mine = neighbourhood(g, f"n{start}", depth, max_nodes=10_000)
    ego = nx.ego_graph(to_networkx(g).to_undirected(as_view=True), f"n{start}", radius=depth)
    assert {e["name"] for e in mine.entities} == set(ego.nodes)
    dist = nx.single_source_shortest_path_length(to_networkx(g).to_undirected(), f"n{start}")
    assert {e["name"]: e["distance"] for e in mine.entities} == {n: dist[n] for n in ego.nodes}
    want = {(a, b, k) for a, b, k in to_networkx(g).subgraph(ego.nodes).edges(keys=True)}
    assert {(r["from"], r["to"], r["relationType"]) for r in mine.relations} == want


def test_shortest_path_follows_relations_both_ways(company: KnowledgeGraph) -> None:
    assert shortest_path(company, "Cid", "Far") == [
        {"from": "Cid", "to": "Ann", "relationType": "works_for"},
        {"from": "Ann", "to": "Bolt", "relationType": "sells_to"},
        {"from": "Bolt", "to": "Far", "relationType": "located_in"},
    ]
    assert shortest_path(company, "Far", "Cid", directed=True) is None
    assert shortest_path(company, "Ann", "Ann") == []
    assert shortest_path(company, "Ann", "Nobody") is None


def test_entities_by_type_and_most_connected(company: KnowledgeGraph) -> None:
    assert [e["name"] for e in entities_by_type(company, "client")] == ["Acme", "Bolt"]
    assert most_connected(company, 3) == [
        {"name": "Ann", "entityType": "person", "degree": 3},
        {"name": "Acme", "entityType": "client", "degree": 2},
        {"name": "Bolt", "entityType": "client", "degree": 2},
    ]


def test_graphml_export_is_valid_and_complete(company: KnowledgeGraph) -> None:
    data = export_graphml(company)
    root = ET.fromstring(data)
    assert root.tag.endswith("graphml")
    back = nx.read_graphml(__import__("io").BytesIO(data), force_multigraph=True)
    assert set(back.nodes) == {"Ann", "Acme", "Bolt", "Cid", "Far", "Invoice-7"}
    assert json.loads(back.nodes["Acme"]["observations"]) == ["pays late"]
    assert back.number_of_edges() == 5


def test_node_link_round_trip(company: KnowledgeGraph) -> None:
    doc = export_node_link(company)
    json.dumps(doc)
    assert doc["directed"] is True and doc["multigraph"] is True
    assert serialize(graph_from_node_link(doc)) == serialize(company)
    with pytest.raises(ValueError, match="nodes"):
        graph_from_node_link({"links": []})
