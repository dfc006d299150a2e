"""Garbage-collector policy for companyd's long-running processes."""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_heap"]


def freeze_startup_heap() -> None:
    """Take what start-up loaded out of the cyclic GC's full collections.

    Modules, the SDKs, the configuration and the memory graph live as long as the process;
    a full collection walks all of them (~160,000 objects for the daemon, two per entity
    of a loaded graph) with the event loop stopped, whenever enough new objects have
    survived — a burst of routines, a heartbeat or an MCP call that meets one is that much
    late. Garbage is collected first, so only live objects are frozen; they are still freed
    by reference counting as usual (a frozen object that later becomes part of a cycle is
    simply never collected — start-up state does not do that).

    Call once, after start-up, from ``companyd run`` and ``companyd serve-mcp``.
    """
    gc.collect()
    gc.freeze()
