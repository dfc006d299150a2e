"""The neighbourhood of an entity: everything within ``depth`` hops, for a prompt.

:func:`neighbourhood` follows relations in both directions through the graph's relation
index, so its cost depends on the size of the neighbourhood, not of the graph; it returns the
same nodes and edges as ``networkx.ego_graph`` on the undirected view (tests/memory/test_view.py).
It lives apart from :mod:`companyd.memory._view` because the daemon calls it on every recall
and must not import networkx to do so (networkx is ~0.2 s and several MB of the daemon's
start; docs/benchmarks.md, "daemon"). :mod:`companyd.memory._view` re-exports it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import field
from typing import Any

from companyd._frozen import Frozen
from companyd.memory._graph import KnowledgeGraph

__all__ = ["Neighbourhood", "neighbourhood"]


class Neighbourhood(Frozen):
    """The part of the graph within ``depth`` hops of ``center``.

    Attributes:
        center: the entity asked about.
        depth: hops followed (in either direction).
        found: whether ``center`` is a known entity or relation end.
        entities: entity dicts (MCP shape plus ``distance``), nearest first, then file order.
        others: names within reach that are only relation ends (no entity line).
        relations: relation dicts with both ends in the neighbourhood, in file order.
        truncated: True if ``max_nodes`` cut the neighbourhood short.
    """

    center: str
    depth: int
    found: bool
    entities: list[dict[str, Any]] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False

    def text(self) -> str:
        """A compact rendering for a prompt: one line per entity with its observations,
        then one line per relation.
        """
        if not self.found:
            return f"Company memory has nothing about {self.center!r}."
        hops = "hop" if self.depth == 1 else "hops"
        lines = [f"Company memory around {self.center!r} ({self.depth} {hops}):"]
        for e in self.entities:
            obs = "; ".join(e["observations"]) if e["observations"] else "(no observations)"
            lines.append(f"- {e['name']} [{e['entityType']}]: {obs}")
        for name in self.others:
            lines.append(f"- {name} (mentioned in relations only)")
        if self.relations:
            lines.append("Relations:")
            for r in self.relations:
                lines.append(f"- {r['from']} --{r['relationType']}--> {r['to']}")
        if self.truncated:
            lines.append("(truncated: more is connected further out)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The neighbourhood as a JSON-serialisable dict, with its :meth:`text` rendering under
        ``text``.
        """
        return {
            "entity": self.center,
            "depth": self.depth,
            "found": self.found,
            "entities": self.entities,
            "others": self.others,
            "relations": self.relations,
            "truncated": self.truncated,
            "text": self.text(),
        }


def neighbourhood(
    graph: KnowledgeGraph, name: str, depth: int = 1, *, max_nodes: int = 200
) -> Neighbourhood:
    """Breadth-first neighbourhood of ``name`` to ``depth`` hops (see the module docstring).

    Raises:
        ValueError: ``depth`` is negative or ``max_nodes`` < 1.
    """
    if depth < 0:
        raise ValueError(f"depth must be 0 or more, got {depth!r}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes!r}")
    first = graph.relations_touching([name])
    if graph.entity(name) is None and not first:
        return Neighbourhood(center=name, depth=depth, found=False)
    distance = {name: 0}
    queue = deque([name])
    truncated = False
    while queue:
        node = queue.popleft()
        d = distance[node]
        if d >= depth:
            continue
        for rel in graph.relations_touching([node]):
            for other in (rel.source, rel.target):
                if other not in distance:
                    if len(distance) >= max_nodes:
                        truncated = True
                        continue
                    distance[other] = d + 1
                    queue.append(other)
    order = sorted(distance, key=lambda n: distance[n])  # stable: BFS order within a distance
    entities = []
    others = []
    for n in order:
        entity = graph.entity(n)
        if entity is None:
            others.append(n)
        else:
            entities.append({**entity.to_dict(), "distance": distance[n]})
    relations = [
        r.to_dict()
        for r in graph.relations_touching(distance)
        if r.source in distance and r.target in distance
    ]
    return Neighbourhood(
        center=name,
        depth=depth,
        found=True,
        entities=entities,
        others=others,
        relations=relations,
        truncated=truncated,
    )
