"""The company memory: an MCP-compatible JSONL knowledge graph that never loses a write.

* :class:`MemoryService` — the in-daemon owner of the graph file (a supervised child);
  agents and the daemon call :meth:`MemoryService.call`, :meth:`~MemoryService.recall`,
  :meth:`~MemoryService.change_marker` and :meth:`~MemoryService.query`.
* :class:`GraphStore` — the durable file (journal, cross-process lock, atomic compaction),
  used by the service, the CLI and ``companyd memory serve-mcp``.
* :class:`KnowledgeGraph` — the graph in memory with the nine MCP memory operations.
* :mod:`companyd.memory._view` — neighbourhoods, paths, hubs, GraphML / node-link export.

Design and crash argument: docs/memory.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from companyd.memory._codec import LoadReport, QuarantinedLine, parse_graph, serialize
from companyd.memory._errors import (
    MemoryInconsistent,
    MemoryLocked,
    MemoryToolError,
    MemoryUnavailable,
)
from companyd.memory._graph import Entity, KnowledgeGraph, Relation
from companyd.memory._service import MemoryService
from companyd.memory._store import GraphStore
from companyd.memory._tools import TOOL_NAMES

if TYPE_CHECKING:
    from companyd.memory._browse import entity_view, search_entities
    from companyd.memory._codec import counted
    from companyd.memory._errors import MemoryNotAGraph, MemoryUnsafePath
    from companyd.memory._journal import decode_record, parse_header
    from companyd.memory._mcp_server import serve_stdio
    from companyd.memory._neighbourhood import neighbourhood
    from companyd.memory._store import write_atomic
    from companyd.memory._tools import MUTATING_TOOLS, tool_definitions
    from companyd.memory._view import export_graphml, export_node_link, graph_from_node_link


__all__ = [
    "MUTATING_TOOLS",
    "TOOL_NAMES",
    "Entity",
    "GraphStore",
    "KnowledgeGraph",
    "LoadReport",
    "MemoryInconsistent",
    "MemoryLocked",
    "MemoryNotAGraph",
    "MemoryService",
    "MemoryToolError",
    "MemoryUnavailable",
    "MemoryUnsafePath",
    "QuarantinedLine",
    "Relation",
    "counted",
    "decode_record",
    "entity_view",
    "export_graphml",
    "export_node_link",
    "graph_from_node_link",
    "neighbourhood",
    "parse_graph",
    "parse_header",
    "search_entities",
    "serialize",
    "serve_stdio",
    "tool_definitions",
    "write_atomic",
]


_HOMES: dict[str, str] = {
    "MUTATING_TOOLS": "companyd.memory._tools",
    "parse_header": "companyd.memory._journal",
    "decode_record": "companyd.memory._journal",
    "MemoryNotAGraph": "companyd.memory._errors",
    "MemoryUnsafePath": "companyd.memory._errors",
    "counted": "companyd.memory._codec",
    "entity_view": "companyd.memory._browse",
    "export_graphml": "companyd.memory._view",
    "export_node_link": "companyd.memory._view",
    "graph_from_node_link": "companyd.memory._view",
    "neighbourhood": "companyd.memory._neighbourhood",
    "search_entities": "companyd.memory._browse",
    "serve_stdio": "companyd.memory._mcp_server",
    "tool_definitions": "companyd.memory._tools",
    "write_atomic": "companyd.memory._store",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
