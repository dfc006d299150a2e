"""Graph views for agents and operators: neighbourhoods, paths, types, hubs, exports.

Functions take a :class:`KnowledgeGraph` (inside the daemon, run them through
``MemoryService.query`` so they see a consistent graph on the owner thread).

* :func:`neighbourhood` — everything within ``depth`` hops of an entity, with a compact text
  rendering to put in a prompt; defined in :mod:`companyd.memory._neighbourhood` (which does
  not import networkx: the daemon uses it) and re-exported here.
* :func:`to_networkx` — a ``networkx.MultiDiGraph`` (one node per entity and per dangling
  relation end, one keyed edge per relation) for everything else: :func:`shortest_path`,
  :func:`most_connected`, :func:`export_graphml`, :func:`export_node_link`. Building it is
  O(graph), so these are for occasional questions, not per-prompt use.
"""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import networkx as nx

from companyd.memory._graph import KnowledgeGraph, Relation
from companyd.memory._neighbourhood import Neighbourhood, neighbourhood

__all__ = [
    "Neighbourhood",
    "entities_by_type",
    "export_graphml",
    "export_node_link",
    "graph_from_node_link",
    "most_connected",
    "neighbourhood",
    "shortest_path",
    "to_networkx",
]


def to_networkx(graph: KnowledgeGraph) -> nx.MultiDiGraph:
    """A ``MultiDiGraph``: entity nodes carry ``entityType``, ``observations`` and
    ``entity=True``; relation ends that are not entities are nodes with ``entity=False``;
    each relation is an edge keyed by its ``relationType``.
    """
    g = nx.MultiDiGraph()
    for e in graph.entities():
        g.add_node(e.name, entity=True, entityType=e.entity_type, observations=list(e.observations))
    for r in graph.relations():
        for end in (r.source, r.target):
            if end not in g:
                g.add_node(end, entity=False)
        g.add_edge(r.source, r.target, key=r.relation_type, relationType=r.relation_type)
    return g


def shortest_path(
    graph: KnowledgeGraph, source: str, target: str, *, directed: bool = False
) -> list[dict[str, Any]] | None:
    """The relations on a shortest path from ``source`` to ``target`` (following relations
    either way unless ``directed``), as relation dicts in path order; ``[]`` when source is
    target; None when there is no path or either end is unknown.
    """
    g = to_networkx(graph)
    if source not in g or target not in g:
        return None
    view = g if directed else g.to_undirected(as_view=True)
    try:
        nodes = nx.shortest_path(view, source, target)
    except nx.NetworkXNoPath:
        return None
    steps: list[dict[str, Any]] = []
    for a, b in itertools.pairwise(nodes):
        if g.has_edge(a, b):
            key = min(g[a][b])
            steps.append(Relation(a, b, key).to_dict())
        else:
            key = min(g[b][a])
            steps.append(Relation(b, a, key).to_dict())
    return steps


def entities_by_type(graph: KnowledgeGraph, entity_type: str) -> list[dict[str, Any]]:
    """Entities whose ``entityType`` equals ``entity_type`` exactly, in file order."""
    return [e.to_dict() for e in graph.entities() if e.entity_type == entity_type]


def most_connected(graph: KnowledgeGraph, limit: int = 10) -> list[dict[str, Any]]:
    """Entities with the most relations (in or out), most first, ties in file order:
    ``[{name, entityType, degree}]``.
    """
    g = to_networkx(graph)
    order = {e.name: i for i, e in enumerate(graph.entities())}
    ranked = sorted(
        ((name, deg) for name, deg in g.degree() if name in order),
        key=lambda item: (-item[1], order[item[0]]),
    )
    out = []
    for name, deg in ranked[: max(0, limit)]:
        entity = graph.entity(name)
        assert entity is not None
        out.append({"name": name, "entityType": entity.entity_type, "degree": deg})
    return out


def export_graphml(graph: KnowledgeGraph) -> bytes:
    """GraphML (UTF-8). GraphML attributes are scalars, so ``observations`` is a JSON array
    in a string attribute.
    """
    g = to_networkx(graph)
    for _, data in g.nodes(data=True):
        data["observations"] = json.dumps(data.get("observations", []), ensure_ascii=False)
        data.setdefault("entityType", "")
    buf = io.BytesIO()
    nx.write_graphml(g, buf, encoding="utf-8", named_key_ids=True)
    return buf.getvalue()


def export_node_link(graph: KnowledgeGraph) -> dict[str, Any]:
    """The networkx node-link JSON (``{"directed": true, "multigraph": true, "nodes": [...],
    "links": [...]}``); :func:`graph_from_node_link` reads it back.
    """
    data: dict[str, Any] = nx.node_link_data(to_networkx(graph), edges="links")
    # networkx lists edges by adjacency; put them back in file order so a round trip
    # through this format keeps the graph file byte for byte.
    order = {(r.source, r.target, r.relation_type): i for i, r in enumerate(graph.relations())}
    data["links"].sort(key=lambda link: order[(link["source"], link["target"], link["key"])])
    return data


def graph_from_node_link(data: dict[str, Any]) -> KnowledgeGraph:
    """The graph of a node-link document written by :func:`export_node_link`.

    Raises:
        ValueError: the document is not node-link JSON of a memory graph.
    """
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ValueError("expected a node-link JSON object with a 'nodes' list")
    graph = KnowledgeGraph()
    for node in data["nodes"]:
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            raise ValueError(f"node without a string id: {node!r}")
        if node.get("entity", True):
            obs: Any = node.get("observations", [])
            if isinstance(obs, str):
                obs = json.loads(obs)
            if not isinstance(obs, list):
                raise ValueError(f"node {node['id']!r}: observations is not a list")
            graph.load_entity(node["id"], str(node.get("entityType", "")), [str(o) for o in obs])
    links = data.get("links", data.get("edges", []))
    if not isinstance(links, list):
        raise ValueError("expected 'links' to be a list")
    for link in links:
        if not isinstance(link, dict):
            raise ValueError(f"link is not an object: {link!r}")
        source, target = link.get("source"), link.get("target")
        rtype = link.get("relationType", link.get("key"))
        if not (isinstance(source, str) and isinstance(target, str) and isinstance(rtype, str)):
            raise ValueError(f"link without string source/target/relationType: {link!r}")
        graph.load_relation(Relation(source, target, rtype))
    return graph
