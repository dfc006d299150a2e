"""KnowledgeGraph: the nine operations with the official semantics (reference §3.1) and
the documented fixes.
"""

from __future__ import annotations

import pytest

from companyd.memory._errors import MemoryToolError
from companyd.memory._graph import KnowledgeGraph, Relation


def names(g: KnowledgeGraph) -> list[str]:
    return [e.name for e in g.entities()]


@pytest.fixture
def g() -> KnowledgeGraph:
    graph = KnowledgeGraph()
    graph.create_entities(
        [
            ("Alice", "person", ["works at Acme", "likes tea"]),
            ("Acme", "company", ["makes anvils"]),
            ("Bob", "person", []),
        ]
    )
    graph.create_relations(
        [
            Relation("Alice", "Acme", "works_at"),
            Relation("Bob", "Alice", "knows"),
            Relation("Acme", "Ghost", "owes"),  # dangling: Ghost is no entity
        ]
    )
    return graph


def test_create_entities_skips_existing_names_and_returns_only_what_was_added(
    g: KnowledgeGraph,
) -> None:
    added = g.create_entities([("Alice", "robot", ["x"]), ("Carol", "person", ["y"])])
    assert [e.to_dict() for e in added] == [
        {"name": "Carol", "entityType": "person", "observations": ["y"]}
    ]
    alice = g.entity("Alice")
    assert alice is not None and alice.entity_type == "person"  # not updated
    assert names(g) == ["Alice", "Acme", "Bob", "Carol"]  # appended at the end


def test_create_entities_dedupes_within_one_call(g: KnowledgeGraph) -> None:
    # fix: the official server stores both copies
    added = g.create_entities([("Dan", "a", ["1"]), ("Dan", "b", ["2"])])
    assert [e.to_dict() for e in added] == [
        {"name": "Dan", "entityType": "a", "observations": ["1"]}
    ]
    assert names(g).count("Dan") == 1


def test_create_entities_keeps_observations_as_sent(g: KnowledgeGraph) -> None:
    added = g.create_entities([("Eve", "p", ["x", "x"])])
    assert added[0].observations == ["x", "x"]


def test_create_relations_dedupes_against_the_graph_and_within_the_call(
    g: KnowledgeGraph,
) -> None:
    added = g.create_relations(
        [
            Relation("Alice", "Acme", "works_at"),
            Relation("Alice", "Bob", "knows"),
            Relation("Alice", "Bob", "knows"),
            Relation("Nobody", "Nothing", "dangles"),  # endpoints are not checked
        ]
    )
    assert added == [Relation("Alice", "Bob", "knows"), Relation("Nobody", "Nothing", "dangles")]
    assert list(g.relations())[-2:] == added


def test_add_observations_appends_only_new_strings_in_order(g: KnowledgeGraph) -> None:
    results = g.add_observations(
        [("Alice", ["likes tea", "runs", "runs"]), ("Bob", ["new"]), ("Alice", ["runs", "sings"])]
    )
    assert results == [("Alice", ["runs"]), ("Bob", ["new"]), ("Alice", ["sings"])]
    alice = g.entity("Alice")
    assert alice is not None
    assert alice.observations == ["works at Acme", "likes tea", "runs", "sings"]


def test_add_observations_to_a_missing_entity_changes_nothing(g: KnowledgeGraph) -> None:
    before = g.read_graph()
    version = g.version
    with pytest.raises(MemoryToolError) as err:
        g.add_observations([("Bob", ["kept?"]), ("Nobody", ["x"]), ("Zed", ["y"])])
    assert str(err.value) == "Entity with name Nobody not found"
    assert g.read_graph() == before and g.version == version


def test_delete_entities_cascades_to_relations_even_without_the_entity(
    g: KnowledgeGraph,
) -> None:
    g.delete_entities(["Ghost", "Missing"])  # Ghost is only a relation end
    assert Relation("Acme", "Ghost", "owes") not in list(g.relations())
    assert names(g) == ["Alice", "Acme", "Bob"]
    g.delete_entities(["Alice"])
    assert names(g) == ["Acme", "Bob"]
    assert list(g.relations()) == []
    g.check_invariants()


def test_delete_observations_removes_every_occurrence(g: KnowledgeGraph) -> None:
    g.create_entities([("Dup", "t", ["a", "b", "a", "c"])])
    g.delete_observations([("Dup", ["a", "zzz"]), ("Nobody", ["a"])])
    dup = g.entity("Dup")
    assert dup is not None and dup.observations == ["b", "c"]


def test_delete_relations_removes_exact_triples_only(g: KnowledgeGraph) -> None:
    g.delete_relations([Relation("Alice", "Acme", "works_at"), Relation("Alice", "Acme", "owns")])
    assert list(g.relations()) == [
        Relation("Bob", "Alice", "knows"),
        Relation("Acme", "Ghost", "owes"),
    ]


def test_read_graph_returns_copies_in_file_order(g: KnowledgeGraph) -> None:
    out = g.read_graph()
    out["entities"][0]["observations"].append("mutated")
    alice = g.entity("Alice")
    assert alice is not None and "mutated" not in alice.observations
    assert [r["relationType"] for r in out["relations"]] == ["works_at", "knows", "owes"]


def test_search_is_a_case_insensitive_substring_over_name_type_and_observations(
    g: KnowledgeGraph,
) -> None:
    assert [e["name"] for e in g.search_nodes("ALI")["entities"]] == ["Alice"]
    assert [e["name"] for e in g.search_nodes("COMPANY")["entities"]] == ["Acme"]
    assert [e["name"] for e in g.search_nodes("anvil")["entities"]] == ["Acme"]
    assert g.search_nodes("works_at")["entities"] == []  # relation types are not searched
    everything = g.search_nodes("")
    assert [e["name"] for e in everything["entities"]] == ["Alice", "Acme", "Bob"]
    assert len(everything["relations"]) == 3


def test_search_returns_relations_with_either_end_among_the_matches(g: KnowledgeGraph) -> None:
    out = g.search_nodes("bob")
    assert [e["name"] for e in out["entities"]] == ["Bob"]
    assert out["relations"] == [{"from": "Bob", "to": "Alice", "relationType": "knows"}]


def test_search_lowercases_like_javascript_not_casefold() -> None:
    g = KnowledgeGraph()
    g.create_entities([("İstanbul", "city", []), ("straße", "street", []), ("ΣΟΦΟΣ", "w", [])])
    assert g.search_nodes("istanbul")["entities"] == []  # İ lowers to i + combining dot
    assert g.search_nodes("STRASSE")["entities"] == []  # no ß -> ss folding
    # final sigma: JavaScript and Python both lower "ΣΟΦΟΣ" to "σοφος" with a final ς
    assert [e["name"] for e in g.search_nodes("\u03c3\u03bf\u03c6\u03bf\u03c2")["entities"]] == [
        "ΣΟΦΟΣ"
    ]


def test_search_compares_utf16_code_units_as_javascript_does() -> None:
    # JavaScript strings are UTF-16: a query holding a lone surrogate matches one half of a
    # surrogate pair ("🙂" is "\ud83d\ude42"), as the official server's includes() does.
    g = KnowledgeGraph()
    g.create_entities([("🙂x", "t", []), ("y", "t", ["a\U00010400"]), ("\ud83d", "t", [])])
    assert [e["name"] for e in g.search_nodes("\ud83d")["entities"]] == ["🙂x", "\ud83d"]
    assert [e["name"] for e in g.search_nodes("\ude42X")["entities"]] == ["🙂x"]
    # lower-cased first: "𐐀" (U+10400) lowers to U+10428 = "\ud801\udc28"
    assert [e["name"] for e in g.search_nodes("\udc28")["entities"]] == ["y"]
    assert g.search_nodes("\udc00")["entities"] == []
    assert [e["name"] for e in g.search_nodes("🙂")["entities"]] == ["🙂x"]


def test_open_nodes_returns_file_order_and_either_endpoint_relations(g: KnowledgeGraph) -> None:
    out = g.open_nodes(["Bob", "Acme", "Nobody"])
    assert [e["name"] for e in out["entities"]] == ["Acme", "Bob"]  # file order, not request
    assert out["relations"] == [
        {"from": "Alice", "to": "Acme", "relationType": "works_at"},
        {"from": "Bob", "to": "Alice", "relationType": "knows"},
        {"from": "Acme", "to": "Ghost", "relationType": "owes"},
    ]
    # a relation to a requested but non-existent name is not returned by itself
    assert g.open_nodes(["Ghost"]) == {"entities": [], "relations": []}


def test_open_nodes_in_a_large_graph_keeps_file_order() -> None:
    g = KnowledgeGraph()
    g.create_entities((f"e{i}", "t", []) for i in range(100))
    g.create_relations(Relation(f"e{i}", f"e{i + 1}", "next") for i in range(99))
    out = g.open_nodes(["e50", "e3", "e97"])
    assert [e["name"] for e in out["entities"]] == ["e3", "e50", "e97"]
    assert [(r["from"], r["to"]) for r in out["relations"]] == [
        ("e2", "e3"),
        ("e3", "e4"),
        ("e49", "e50"),
        ("e50", "e51"),
        ("e96", "e97"),
        ("e97", "e98"),
    ]


def test_names_may_be_empty_strings_and_are_not_normalised() -> None:
    g = KnowledgeGraph()
    g.create_entities([("", "", []), (" a ", "t", []), ("a", "t", [])])
    assert names(g) == ["", " a ", "a"]


def test_version_changes_only_when_something_changed(g: KnowledgeGraph) -> None:
    v = g.version
    g.create_entities([("Alice", "x", [])])
    g.create_relations([Relation("Alice", "Acme", "works_at")])
    g.add_observations([("Alice", ["likes tea"])])
    g.delete_entities(["Nobody"])
    g.delete_observations([("Alice", ["nope"])])
    g.delete_relations([Relation("x", "y", "z")])
    assert g.version == v
    g.add_observations([("Alice", ["new"])])
    assert g.version == v + 1


def test_delete_then_recreate_moves_to_the_end(g: KnowledgeGraph) -> None:
    g.delete_entities(["Alice"])
    g.create_entities([("Alice", "person", [])])
    assert names(g) == ["Acme", "Bob", "Alice"]
    g.check_invariants()
