"""Read-only views of the graph for an operator browsing company memory (the dashboard's
Memory page, through the ``memory_search`` and ``memory_entity`` operations).

Both functions take the live :class:`~companyd.memory._graph.KnowledgeGraph` and return
copies as JSON data; the daemon runs them on the memory owner's thread
(:meth:`~companyd.memory._service.MemoryService.query`), in order with writes. Their cost
depends on what they return, not on the whole graph, except the search's one scan of the
entities (the MCP ``search_nodes`` match, without building the matches' relations).
"""

from __future__ import annotations

from typing import Any

from companyd.memory._graph import KnowledgeGraph
from companyd.memory._neighbourhood import neighbourhood

__all__ = ["MAX_NEIGHBOURS", "entity_view", "search_entities"]

#: At most this many names in an entity's neighbourhood (a small graph to draw).
MAX_NEIGHBOURS = 40


def search_entities(graph: KnowledgeGraph, query: str, limit: int) -> dict[str, Any]:
    """The first ``limit`` entities (file order) whose name, type or an observation
    contains ``query``, case-insensitively (``""`` matches every entity): ``{query, total,
    truncated, entities}``, each entity ``{name, entityType, observations, relations,
    match}`` — the counts, and the first observation that matched (else the first one,
    else ``""``).

    The match is ``search_nodes``'s (Python's lower-casing; a query holding a lone UTF-16
    surrogate, which only JavaScript's code-unit comparison can match, matches nothing).
    """
    q = query.lower()
    found: list[dict[str, Any]] = []
    total = 0
    for e in graph.entities():
        hit = next((o for o in e.observations if q in o.lower()), None)
        if hit is None and q not in e.name.lower() and q not in e.entity_type.lower():
            continue
        total += 1
        if len(found) < limit:
            found.append(
                {
                    "name": e.name,
                    "entityType": e.entity_type,
                    "observations": len(e.observations),
                    "relations": 0,
                    "match": hit if hit is not None else next(iter(e.observations), ""),
                }
            )
    for item in found:  # only for what is shown
        item["relations"] = len(graph.relations_touching([item["name"]]))
    return {"query": query, "total": total, "truncated": total > len(found), "entities": found}


def entity_view(graph: KnowledgeGraph, name: str, depth: int) -> dict[str, Any] | None:
    """``name`` with its type (None: only a relation end), observations, relations (either
    end) and neighbourhood to ``depth`` hops (at most :data:`MAX_NEIGHBOURS` names):
    ``{name, entity_type, observations, relations, depth, neighbours, others, edges,
    truncated}``, the fields of :class:`~companyd.admin._results.MemoryEntity`. None when
    the graph knows nothing of ``name``.

    Raises:
        ValueError: ``depth`` is negative.
    """
    around = neighbourhood(graph, name, depth, max_nodes=MAX_NEIGHBOURS)
    if not around.found:
        return None
    entity = graph.entity(name)
    return {
        "name": name,
        "entity_type": entity.entity_type if entity is not None else None,
        "observations": list(entity.observations) if entity is not None else [],
        "relations": [r.to_dict() for r in graph.relations_touching([name])],
        "depth": depth,
        "neighbours": [
            {"name": e["name"], "entityType": e["entityType"], "distance": e["distance"]}
            for e in around.entities
            if e["name"] != name
        ],
        "others": [n for n in around.others if n != name],
        "edges": around.relations,
        "truncated": around.truncated,
    }
