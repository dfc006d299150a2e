"""Event kinds of the memory owner (:mod:`companyd.memory`, source: the memory service)."""

from __future__ import annotations

from companyd.events._base import Event, Severity

__all__ = ["MemoryRepaired"]


class MemoryRepaired(Event):
    """The memory file was repaired at load: what was kept aside, dropped or merged."""

    KIND = "memory_repaired"
    severity: Severity = Severity.WARNING
    path: str
    summary: str
    quarantined_lines: int
    dropped_lines: int
    torn_tail: bool
    merged_entities: int
    duplicate_relations: int
    observations_fixed: int
    journal_torn: bool
    foreign_rewrite: bool
    corrupt_file: str | None
