"""Garbage-collector policy for companyd's long-running processes."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collection_paused", "freeze_startup_heap", "resume_collection"]

#: True while :func:`collection_paused` holds the cyclic GC off (this module owns it).
_paused = False


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic GC off while a process starts: on again when :func:`resume_collection`
    or :func:`freeze_startup_heap` is called inside, or at the latest on exit.

    A start-up allocates ~100,000 objects that live as long as the process (modules, the
    configuration, the tree) and almost no garbage: the collections the allocations
    trigger meanwhile (~130, the later ones walking the whole growing heap) find ~1,000
    objects and cost ~40 ms of the daemon's ~370 ms of CPU to ``READY=1`` (issue 31).
    ``companyd run`` keeps it off until the company is up, when
    :func:`freeze_startup_heap` collects once; every other command turns it back on once
    its arguments are parsed. Nothing is lost: cycles made meanwhile are collected then.
    If the GC was already off (the caller's choice), this leaves it as it is.
    """
    global _paused
    if not gc.isenabled():
        yield
        return
    gc.disable()
    _paused = True
    try:
        yield
    finally:
        resume_collection()


def resume_collection() -> None:
    """Turn the cyclic GC back on if :func:`collection_paused` turned it off (else nothing)."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()


def freeze_startup_heap() -> None:
    """Take what start-up loaded out of the cyclic GC's full collections.

    Modules, the SDKs, the configuration and the memory graph live as long as the process;
    a full collection walks all of them (~160,000 objects for the daemon, two per entity
    of a loaded graph) with the event loop stopped, whenever enough new objects have
    survived — a burst of routines, a heartbeat or an MCP call that meets one is that much
    late. Garbage is collected first, so only live objects are frozen; they are still freed
    by reference counting as usual (a frozen object that later becomes part of a cycle is
    simply never collected — start-up state does not do that). Then the GC is on again if
    :func:`collection_paused` held it off for the start-up.

    Call once, after start-up, from ``companyd run`` and ``companyd serve-mcp``.
    """
    gc.collect()
    gc.freeze()
    resume_collection()
