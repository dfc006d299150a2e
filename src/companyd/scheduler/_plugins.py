"""One scan of the installed distributions' entry points while APScheduler is imported.

``apscheduler.schedulers.base`` fills its plugin tables (triggers, executors, job stores)
in its class body, with three calls of ``importlib.metadata.entry_points(group=...)``: each
reads the metadata of every installed distribution (113 in the test environment), ~11 ms
of the daemon's start here. :func:`one_entry_point_scan` answers those calls from one scan
while the import runs, so the tables are the same and APScheduler's code is not touched.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Iterator
from typing import Any

__all__ = ["one_entry_point_scan"]


@contextlib.contextmanager
def one_entry_point_scan() -> Iterator[None]:
    """While entered, ``importlib.metadata.entry_points`` selects from one scan of every
    distribution, made at the first call; on exit it is the real function again, and a
    module that bound the stand-in meanwhile gets fresh scans from then on (a package
    installed while the daemon runs is seen, as without this).

    Only for imports at start: nothing else may call ``entry_points`` from another thread
    meanwhile (the daemon imports this before it starts any).
    """
    real = importlib.metadata.entry_points
    scan: list[Any] = []  # SelectableGroups on 3.11: select(group=...) is EntryPoints
    inside = True

    def entry_points(**params: Any) -> Any:
        if not inside:
            return real(**params)
        if not scan:
            scan.append(real())
        return scan[0].select(**params) if params else scan[0]

    importlib.metadata.entry_points = entry_points  # the same calls, answered from one scan
    try:
        yield
    finally:
        inside = False
        importlib.metadata.entry_points = real
