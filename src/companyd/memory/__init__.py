"""The company memory: an MCP-compatible JSONL knowledge graph that never loses a write.

* :class:`MemoryService` — the in-daemon owner of the graph file (a supervised child);
  agents and the daemon call :meth:`MemoryService.call`, :meth:`~MemoryService.recall`,
  :meth:`~MemoryService.change_marker` and :meth:`~MemoryService.query`.
* :class:`GraphStore` — the durable file (journal, cross-process lock, atomic compaction),
  used by the service, the CLI and ``companyd memory serve-mcp``.
* :class:`KnowledgeGraph` — the graph in memory with the nine MCP memory operations.
* :mod:`companyd.memory.view` — neighbourhoods, paths, hubs, GraphML / node-link export.

Design and crash argument: docs/memory.md.
"""

from companyd.memory.codec import LoadReport, QuarantinedLine, parse_graph, serialize
from companyd.memory.errors import (
    MemoryInconsistent,
    MemoryLocked,
    MemoryToolError,
    MemoryUnavailable,
)
from companyd.memory.graph import Entity, KnowledgeGraph, Relation
from companyd.memory.service import MemoryService
from companyd.memory.store import GraphStore
from companyd.memory.tools import TOOL_NAMES

__all__ = [
    "TOOL_NAMES",
    "Entity",
    "GraphStore",
    "KnowledgeGraph",
    "LoadReport",
    "MemoryInconsistent",
    "MemoryLocked",
    "MemoryService",
    "MemoryToolError",
    "MemoryUnavailable",
    "QuarantinedLine",
    "Relation",
    "parse_graph",
    "serialize",
]
