"""The one worker thread that owns the spend ledger's SQLite connection.

Every read and write of ``spend.sqlite`` runs on this thread, in the order it was queued, so
the event loop never blocks on the disk and the connection is never shared between threads.
The owner (:class:`~companyd.spend._book.SpendBook`) starts the thread, opens the
:class:`~companyd.spend._ledger.Ledger` on it (:meth:`LedgerThread.run_raw`, which sets
:attr:`LedgerThread.ledger`), and queues work with :meth:`LedgerThread.submit` /
:meth:`LedgerThread.write` / :meth:`LedgerThread.run`.

Contract:

* a job's database error (SQLite's, PostgreSQL's) or ``OSError`` (the disk, not our logic) becomes a
  :class:`~companyd.spend._ledger.LedgerError` that names the file and says what to check;
* ``then()`` (the events that follow a write) runs on the loop once the job succeeded, even
  if whoever awaited it was cancelled meanwhile;
* :meth:`LedgerThread.write` is shielded: a caller cancelled mid-write never leaves the write
  (or its events) half done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo

from companyd._frozen import Frozen
from companyd._fs import is_disk_failure
from companyd._sqlite import store_errors
from companyd.spend._ledger import InflightRow, Ledger, LedgerError
from companyd.spend._periods import day_start
from companyd.storage import SQLITE, Backend

if TYPE_CHECKING:  # types only: they import PostgreSQL's driver (issue 31)
    from companyd.storage import StoreDatabase

__all__ = ["LedgerThread", "Opening"]

log = logging.getLogger("companyd.spend.ledger_thread")

T = TypeVar("T")


class Opening(Frozen):
    """What the ledger said when it was opened (:meth:`LedgerThread.open`).

    Attributes:
        stale: reservations left in flight by a process that is gone (now dropped).
        last: the day and month the ledger was last used in (``""`` when new).
        used_day / used_month: settled spend per scope in the current periods.
        raises: today's raises per scope.
        markers: threshold and exhaustion events already published in the periods.
        history: recent spend ``(agent, ts, pusd)`` for the runaway detector.
        write_failure: why the ledger could be read but not written (a full disk), if so.
    """

    stale: list[InflightRow]
    last: tuple[str | None, str | None]
    used_day: dict[str, int]
    used_month: dict[str, int]
    raises: dict[str, int]
    markers: set[tuple[str, str, str]]
    history: list[tuple[str, float, int]]
    write_failure: BaseException | None


class LedgerThread:
    """The ledger's owner thread (see module docstring).

    Args:
        path: the ledger file, for messages.
    """

    def __init__(self, path: Path, backend: Backend = SQLITE) -> None:
        self.path = path
        self.backend = backend
        self._executor: ThreadPoolExecutor | None = None
        self._database: StoreDatabase | None = None
        #: the open ledger; touched only in the thread
        self.ledger: Ledger | None = None

    @property
    def running(self) -> bool:
        """Whether the thread is started (work can be queued)."""
        return self._executor is not None

    def start(self) -> None:
        """Start the thread: the ledger database's own worker (:mod:`companyd._sqlite`), on
        which the ledger is opened with :meth:`run_raw`.
        """
        self._database = Ledger.open_database(self.path, backend=self.backend)
        self._executor = self._database.executor

    def stop(self) -> None:
        """Let the thread end once its queued work is done; nothing can be queued after."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._executor = None

    async def open(self, *, timezone: str, day: str, month: str, since: float) -> Opening:
        """Open the ledger on the thread (:meth:`start` first): drop stale reservations,
        record the current periods and read what the book needs to start.

        On a disk that refuses writes, the ledger opens read-only in effect: the stale
        reservations stay (reported next start) and :attr:`Opening.write_failure` says why.

        Raises:
            LedgerError: the ledger cannot be opened or read.
        """
        database = self._database
        assert database is not None, "start() first"

        def _open() -> Opening:
            led = Ledger(self.path, database=database)
            failed: BaseException | None = None
            try:
                last = (led.get_meta("day"), led.get_meta("month"))
                try:
                    stale = led.take_inflight()
                    led.set_meta({"timezone": timezone, "day": day, "month": month})
                except store_errors() as exc:
                    if not is_disk_failure(exc):
                        raise
                    # Started on a full disk: come up (degraded) on what can be read. The
                    # stale reservations stay in the ledger and are reported next start.
                    failed = exc
                    stale = []
                state = Opening(
                    stale=stale,
                    last=last,
                    used_day=led.used(day),
                    used_month=led.used(month),
                    raises=led.raises(day, day_start(day, ZoneInfo(timezone))),
                    markers=led.markers([day, month]),
                    history=led.spend_since(since),
                    write_failure=failed,
                )
            except store_errors() as exc:
                led.close()
                raise LedgerError(
                    f"cannot read the spend ledger {str(self.path)!r}: {exc}; check the "
                    "file (move a damaged one aside to start a new ledger)"
                ) from exc
            self.ledger = led
            return state

        return await self.run_raw(_open)

    async def close(self) -> None:
        """Close the ledger (on the thread)."""

        def _close() -> None:
            if self.ledger is not None:
                self.ledger.close()
            self.ledger = None

        await self.run_raw(_close)

    def submit(
        self, fn: Callable[[Ledger], Any], *, then: Callable[[], object] | None = None
    ) -> asyncio.Future[Any]:
        """Queue ``fn(ledger)`` on the ledger thread; ``then()`` runs on the loop after it
        succeeds, even if whoever awaited the result was cancelled meanwhile.
        """
        if self._executor is None:
            raise LedgerError(f"the spend ledger {str(self.path)!r} is closed")
        path = self.path

        def job() -> Any:
            led = self.ledger
            if led is None:
                raise LedgerError(f"the spend ledger {str(path)!r} is closed")
            try:
                return fn(led)
            except store_errors() as exc:  # the disk, not our logic
                raise LedgerError(
                    f"the spend ledger {str(path)!r} could not be written or read: "
                    f"{type(exc).__name__}: {exc}; check free disk space and permissions"
                ) from exc

        fut = asyncio.get_running_loop().run_in_executor(self._executor, job)

        def done(f: asyncio.Future[Any]) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if exc is not None:
                if isinstance(exc, LedgerError):
                    log.error("%s", exc)
                return
            if then is not None:
                then()

        fut.add_done_callback(done)
        return fut

    async def write(
        self, fn: Callable[[Ledger], Any], *, then: Callable[[], object] | None = None
    ) -> Any:
        """:meth:`submit` and wait, shielded (see module docstring)."""
        # shield: a caller cancelled mid-write must not leave the write (or the events that
        # follow it) half done; the job finishes in the ledger thread either way.
        return await asyncio.shield(self.submit(fn, then=then))

    async def run(self, fn: Callable[[Ledger], T]) -> T:
        """``fn(ledger)`` on the ledger thread; its result."""
        result: T = await self.submit(fn)
        return result

    async def run_raw(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the ledger thread (opening and closing the connection)."""
        if self._executor is None:
            raise LedgerError(f"the spend ledger {str(self.path)!r} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
