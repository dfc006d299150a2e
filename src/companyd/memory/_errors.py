"""Errors raised by the company memory.

* :class:`MemoryToolError` — a tool call was refused (bad arguments, unknown entity). Its
  message is exactly the text the official MCP memory server returns for the same call, so
  it can go back to a model or an MCP client unchanged.
* :class:`MemoryUnavailable` — the memory owner could not serve the call in time (it is
  restarting, or a write failed). The message says whether the call was applied.
* :class:`MemoryInconsistent` — the owner found its state out of step with the files. The
  owner raises it on purpose so its supervisor restarts it; the restart reloads and repairs.
* :class:`MemoryLocked` — another process held ``<file>.lock`` for longer than the deadline.
"""

from __future__ import annotations

from companyd.errors import CompanydError

__all__ = [
    "MemoryInconsistent",
    "MemoryLocked",
    "MemoryNotAGraph",
    "MemoryToolError",
    "MemoryUnavailable",
    "MemoryUnsafePath",
]


class MemoryToolError(CompanydError):
    """A memory tool refused a call; ``str(exc)`` is the official server's error text."""


class MemoryUnavailable(CompanydError):
    """The memory owner did not answer in time, or failed while answering."""


class MemoryInconsistent(CompanydError):
    """In-memory state and files disagree; the owner must restart and reload."""


class MemoryLocked(CompanydError):
    """The cross-process lock ``<file>.lock`` could not be taken before the deadline."""


class MemoryNotAGraph(CompanydError):
    """The graph file holds no memory graph line (or is not a regular file); it was left
    untouched rather than "repaired" into an empty graph.
    """


class MemoryUnsafePath(CompanydError):
    """A side file next to the graph (journal, lock, ``.corrupt``) is a symlink; companyd
    writes only where docs/memory.md says, so it refuses to write through it.
    """
