"""The latest writes to company memory, for the operator ("recent changes").

The graph file keeps no times and no authors (it is the MCP format, read by other tools),
so the memory owner remembers its last writes in a bounded list: :class:`ChangeLog`, one
per :class:`~companyd.memory._service.MemoryService`, owned by it and appended to on the
event loop when a write tool call has been made durable. It lives as long as the service
object (the daemon), survives restarts of the owner child, and is empty after a daemon
restart; writes made outside the daemon (``companyd memory import``, another MCP server on
the same file) are not in it. docs/memory.md, "Recent changes", says why no file keeps them.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from companyd._frozen import Frozen

__all__ = ["Change", "ChangeLog", "describe"]

#: How many writes :class:`ChangeLog` keeps by default.
KEPT = 500
#: A summary is cut at this many characters (an observation can be long).
_SUMMARY_CHARS = 240


class Change(Frozen):
    """One write: when (epoch seconds), which MCP tool, by whom (an agent, or None), the
    entities it touched and a one-line summary.
    """

    at: float
    tool: str
    by: str | None
    entities: tuple[str, ...]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        """The change as JSON data (``entities`` a list)."""
        return {
            "at": self.at,
            "tool": self.tool,
            "by": self.by,
            "entities": list(self.entities),
            "summary": self.summary,
        }


class ChangeLog:
    """The last ``keep`` writes, oldest first; not thread-safe (the event loop's).

    A write is kept as given and described (:func:`describe`) only when read: recording
    sits on every durable write's path, reading on the operator's.
    """

    def __init__(self, keep: int = KEPT) -> None:
        self._changes: collections.deque[_Recorded] = collections.deque(maxlen=keep)

    def record(self, at: float, tool: str, arguments: Mapping[str, Any], by: str | None) -> None:
        """Remember a durable write of ``tool`` with its (validated) ``arguments``, which
        the caller must not change afterwards.
        """
        self._changes.append((at, tool, arguments, by))

    def recent(self, limit: int) -> list[Change]:
        """The latest ``limit`` changes, newest first."""
        out: list[Change] = []
        for at, tool, arguments, by in reversed(self._changes):
            if len(out) >= limit:
                break
            entities, summary = describe(tool, arguments)
            out.append(Change(at=at, tool=tool, by=by, entities=tuple(entities), summary=summary))
        return out


_Recorded = tuple[float, str, Mapping[str, Any], "str | None"]


def describe(tool: str, arguments: Mapping[str, Any]) -> tuple[list[str], str]:
    """The entity names a write tool call touches (first seen first) and a one-line summary
    of it, e.g. ``add_observations: Acme +2``.
    """
    names: list[str] = []
    parts: list[str] = []

    def touch(name: Any) -> None:
        if isinstance(name, str) and name not in names:
            names.append(name)

    for item in _items(arguments.get("entities")):
        touch(item.get("name"))
        parts.append(f"{item.get('name')} [{item.get('entityType')}]")
    for item in _items(arguments.get("relations")):
        touch(item.get("from"))
        touch(item.get("to"))
        parts.append(f"{item.get('from')} -{item.get('relationType')}-> {item.get('to')}")
    for key, sign in (("observations", "+"), ("deletions", "-")):
        for item in _items(arguments.get(key)):
            touch(item.get("entityName"))
            texts = item.get("contents" if sign == "+" else "observations")
            count = len(texts) if isinstance(texts, list) else 0
            parts.append(f"{item.get('entityName')} {sign}{count}")
    for name in arguments.get("entityNames") or ():
        touch(name)
        parts.append(str(name))
    summary = f"{tool}: {', '.join(parts)}" if parts else tool
    if len(summary) > _SUMMARY_CHARS:
        summary = summary[: _SUMMARY_CHARS - 1] + "…"
    return names, summary


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []
