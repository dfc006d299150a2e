"""An entity's neighbourhood laid out for a small server-rendered SVG (no script).

:func:`ring_layout` places the entity in the middle and its neighbours on rings, one ring
per distance (names that are only relation ends on the outermost), evenly spaced and
turned a little per ring so that edges do not all overlap; it returns plain numbers the
template ``fragments/memory_graph.html`` draws (lines first, then the nodes as links).
Deterministic: the same neighbourhood always gives the same picture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["HEIGHT", "WIDTH", "Layout", "ring_layout"]

#: The drawing's coordinate space (the SVG's viewBox); it scales to the page's width.
WIDTH = 640
HEIGHT = 380
_MARGIN = 50
#: Labels longer than this are cut (the node's title has the whole name).
_LABEL_CHARS = 18


@dataclass(frozen=True)
class Layout:
    """Positions and edges to draw: ``nodes`` as ``{name, label, x, y, distance, kind}``
    (``kind``: ``center``, ``entity`` or ``end``), ``edges`` as ``{x1, y1, x2, y2, label}``.
    """

    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    width: int = WIDTH
    height: int = HEIGHT


def _label(name: str) -> str:
    return name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"


def ring_layout(
    center: str, neighbours: list[dict[str, Any]], others: list[str], edges: list[dict[str, Any]]
) -> Layout:
    """The layout of ``center`` with ``neighbours`` (``{name, distance}``, nearest first),
    ``others`` (relation ends without an entity line) and the ``edges`` among them (MCP
    relations: ``from``, ``to``, ``relationType``; those with an end not drawn are left out).
    """
    rings: dict[int, list[tuple[str, str]]] = {}
    for n in neighbours:
        rings.setdefault(int(n["distance"]), []).append((str(n["name"]), "entity"))
    if others:
        rings.setdefault(max(rings, default=0) + 1, []).extend((o, "end") for o in others)
    cx, cy = WIDTH / 2, HEIGHT / 2
    nodes = [
        {"name": center, "label": _label(center), "x": cx, "y": cy, "distance": 0, "kind": "center"}
    ]
    depth = max(rings, default=1)
    for ring, members in sorted(rings.items()):
        rx = (WIDTH / 2 - _MARGIN) * ring / depth
        ry = (HEIGHT / 2 - _MARGIN / 1.5) * ring / depth
        turn = ring * 0.35
        for i, (name, kind) in enumerate(members):
            angle = turn + 2 * math.pi * i / len(members) - math.pi / 2
            nodes.append(
                {
                    "name": name,
                    "label": _label(name),
                    "x": round(cx + rx * math.cos(angle), 1),
                    "y": round(cy + ry * math.sin(angle), 1),
                    "distance": ring,
                    "kind": kind,
                }
            )
    at = {n["name"]: n for n in nodes}
    lines = []
    for e in edges:
        a, b = at.get(str(e.get("from"))), at.get(str(e.get("to")))
        if a is None or b is None or a is b:
            continue
        lines.append(
            {
                "x1": a["x"],
                "y1": a["y"],
                "x2": b["x"],
                "y2": b["y"],
                "label": f"{e.get('from')} {e.get('relationType')} {e.get('to')}",
            }
        )
    return Layout(nodes=nodes, edges=lines)
