"""Settled calls held in memory while the state disk refuses the ledger's writes.

A call that was paid for must be recorded, whatever the disk says. When its ledger row cannot
be written (a full or failing disk), the row and the events that follow it are held here,
oldest first; the cost already counts in the book's memory, so budgets stay right. The rows
are written again, in order, by :meth:`HeldCalls.flush` — which the book's ``run`` calls every
:data:`UNRECORDED_RETRY_SECONDS` (or at once, after :meth:`HeldCalls.kick`) and ``close``
calls once more. A new settled call waits behind the held ones, so the ledger stays in order.
The ``disk`` alarm is raised on each failure and cleared when the last held row is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from companyd._fs import DiskAlarm, is_disk_failure
from companyd.events import EventBus
from companyd.spend._ledger import Ledger, LedgerError
from companyd.spend._ledger_thread import LedgerThread

__all__ = ["UNRECORDED_RETRY_SECONDS", "HeldCalls"]

log = logging.getLogger("companyd.spend.held")

#: How often settled calls held in memory are retried while the ledger cannot be written.
UNRECORDED_RETRY_SECONDS = 5.0

#: one held call: its ledger write, then the events it publishes once written
Held = tuple[Callable[[Ledger], Any], Callable[[], object]]


class HeldCalls:
    """The settled calls whose ledger rows wait for the disk (see module docstring).

    Args:
        db: the ledger thread the rows are written on.
        bus: where the disk alarm goes.
    """

    def __init__(self, db: LedgerThread, bus: EventBus) -> None:
        self._db = db
        self._bus = bus
        self._rows: list[Held] = []
        #: set to retry at once; created by the book's run()
        self.wake: asyncio.Event | None = None
        #: the last disk failure of a held row (the cause a held call's error carries)
        self.disk_error: BaseException | None = None
        #: one flush at a time: the run loop's retry, a settle and a new period all flush,
        #: and two at once would write the same held row twice
        self._flushing = asyncio.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, record: Callable[[Ledger], Any], publish: Callable[[], object]) -> None:
        """Hold one more settled call, behind the others."""
        self._rows.append((record, publish))

    def failed(self, exc: BaseException) -> None:
        """The disk refused a write: remember why and raise the disk alarm."""
        self.disk_error = exc
        DiskAlarm.of(self._bus).failed("spend ledger", self._db.path, exc)

    async def flush(self) -> bool:
        """Write the settled calls held in memory, in order; True when none is left. A
        flush that begins while another runs waits for it, then writes what is left.
        """
        async with self._flushing:
            return await self._flush()

    async def _flush(self) -> bool:
        while self._rows and self._db.running:
            record, publish = self._rows[0]
            try:
                await self._db.write(record, then=publish)
            except LedgerError as exc:
                if is_disk_failure(exc):
                    self.failed(exc)
                return False
            self._rows.pop(0)
            if not self._rows:
                log.warning(
                    "the spend ledger %s takes writes again; held calls recorded", self._db.path
                )
                DiskAlarm.of(self._bus).recovered("spend ledger")
        return not self._rows

    def kick(self) -> None:
        """Retry at the next turn of the book's run loop instead of waiting."""
        wake = self.wake
        if wake is not None and not wake.is_set():
            wake.set()
