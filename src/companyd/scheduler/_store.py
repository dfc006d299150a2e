"""The scheduler's one writer of the routine history (:mod:`companyd.scheduler._history`):
one worker thread, group commit, on either backend.

:class:`RoutineStore` holds the history's database — ``routines.sqlite`` in the state
directory, or the ``routines`` tables of the company's PostgreSQL schema (docs/storage.md)
— and runs every statement on its own worker thread, so the event loop never waits on the
database. The tables, statements and readers are :mod:`companyd.scheduler._history`'s,
re-exported here (the scheduler reads them as ``store.<name>``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from companyd._sqlite import DatabaseClosed, SchemaTooNew, store_errors, transaction
from companyd.scheduler._history import (
    DB_NAME,
    HINT,
    MIGRATIONS,
    SCHEMA_VERSION,
    STEPS,
    STORE,
    WEBHOOK_ID_KEEP_S,
    WHAT,
    FireRecord,
    RoutineState,
    RoutineStats,
    Stmt,
    StoreError,
    advance_cursor,
    advance_cursor_stmt,
    claim_fire,
    claim_webhook_id,
    clean_stop,
    clear_clean_stop,
    close_interrupted,
    close_unrecorded,
    delete_states,
    finish_fire,
    finish_fire_stmt,
    fires_between,
    insert_fire_stmt,
    insert_fires,
    latest_fires,
    latest_scheduled,
    load_states,
    mark_clean_stop,
    open_fires,
    open_readonly,
    prune_idle,
    put_state,
    read_history,
    recent_fires,
    routine_stats,
    set_marker,
    start_fire_stmt,
)
from companyd.storage import SQLITE, Backend, Connection, open_database

__all__ = [
    "DB_NAME",
    "HINT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STEPS",
    "STORE",
    "WEBHOOK_ID_KEEP_S",
    "WHAT",
    "FireRecord",
    "RoutineState",
    "RoutineStats",
    "RoutineStore",
    "Stmt",
    "StoreError",
    "advance_cursor",
    "advance_cursor_stmt",
    "claim_fire",
    "claim_webhook_id",
    "clean_stop",
    "clear_clean_stop",
    "close_interrupted",
    "close_unrecorded",
    "delete_states",
    "finish_fire",
    "finish_fire_stmt",
    "fires_between",
    "insert_fire_stmt",
    "insert_fires",
    "latest_fires",
    "latest_scheduled",
    "load_states",
    "mark_clean_stop",
    "open_fires",
    "open_readonly",
    "prune_idle",
    "put_state",
    "read_history",
    "recent_fires",
    "routine_stats",
    "set_marker",
    "start_fire_stmt",
]

log = logging.getLogger("companyd.scheduler.store")

T = TypeVar("T")


# ---------------------------------------------------------------------------------------
# The owning writer


_Fn = Callable[[Connection], Any]
_Item = _Fn | tuple[Stmt, ...]  # a function, or statements applied in the bulk phase
_Entry = tuple[_Item, "asyncio.Future[Any] | None"]


class _ItemFailed(Exception):
    """In the per-item fallback of a batch: the item itself failed (its cause), not the
    database; its transaction is rolled back and the batch goes on.
    """


class RoutineStore:
    """The scheduler's handle on routines.sqlite: one worker thread, one connection.

    Work is a function of the connection (:meth:`call` runs one and returns its result,
    :meth:`post` queues one without waiting), or, for the hot path of every fire, plain
    statements (:meth:`execute`, :meth:`post_execute`). A failed posted write is reported to
    ``on_error``.

    Group commit: everything submitted during one turn of the event loop is handed to the
    worker as one batch and committed as one transaction, and the results come back to the
    loop in one callback. A burst of a thousand fires therefore costs one commit and two
    thread crossings, not a thousand of each (each crossing hands the GIL over). If a
    function in a batch raises, the batch is rolled back and its functions are re-run one
    transaction each, so one failure never undoes its neighbours. A future resolves only
    after its work has committed.

    Within a batch, statements come first, grouped by SQL text (one ``executemany`` each):
    INSERTs, then the others, each in first-submission order; then functions, in submission
    order. So statements must commute with what else may share their batch — inserts of new
    rows and idempotent or monotonic updates (the cursor only moves forward). Anything else
    is a function.

    :meth:`post_execute_next` queues statements behind the batch being gathered: that batch
    is handed over without them (a caller awaiting a small write does not wait for them),
    and they go, with everything submitted meanwhile, in the batch handed over once it has
    been committed and reported back. Order is kept: nothing submitted after them is
    committed before them (so an UPDATE posted later still finds the row they insert).

    Args:
        path: the database file (created with its directory if missing); unused on
            ``postgres``.
        on_error: called (on the event loop) with the exception of a failed :meth:`post`.
        backend: where the history lives (docs/storage.md): ``path`` on ``sqlite``, the
            ``routines`` tables of the company's schema on ``postgres``.
    """

    def __init__(
        self,
        path: Path,
        on_error: Callable[[BaseException], None] | None = None,
        *,
        backend: Backend = SQLITE,
    ) -> None:
        self.path = path
        self._on_error = on_error
        # At interpreter exit Python joins the worker after the work queued on it, so queued
        # history rows are written even if the loop stopped before awaiting them.
        self._db = open_database(
            backend,
            path=path,
            store=STORE,
            migrations=STEPS,
            what=WHAT,
            timeout=10.0,
            hint=HINT if backend.kind == "sqlite" else "",  # HINT is about the file
            thread_name="routines.sqlite",
        )
        # How errors name the history and what they advise (SQLite's texts as they were).
        self._sqlite = backend.kind == "sqlite"
        self._name = (
            f"routines.sqlite at {str(path)!r}"
            if self._sqlite
            else f"the routine history in {self._db.path}"
        )
        self._advice = (
            "check free disk space and the file's permissions"
            if self._sqlite
            else "check that the database server is up and reachable"
        )
        self._opened = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # Work and, for call/execute, the future its caller awaits (None: posted).
        self._gathering: list[_Entry] = []
        self._next: list[_Entry] = []  # for the batch after the one being gathered
        self._flush_soon = False
        # While set, nothing is handed over: ``_gathering`` starts with work posted behind
        # the batch whose report this is, and waits for it.
        self._hold: asyncio.Future[None] | None = None
        self._in_flight = 0  # entries handed to the worker and not yet reported back
        self._batches: set[asyncio.Future[None]] = set()  # resolved when reported back
        self._dead = False
        self._death: StoreError | None = None  # why the worker stopped, for later callers

    @property
    def pending(self) -> int:
        """Work (called or posted) not yet committed and reported back to the loop."""
        return len(self._gathering) + len(self._next) + self._in_flight

    async def open(self) -> None:
        """Start the worker thread and create or check the schema.

        Raises:
            StoreError: the file cannot be opened or was written by a newer companyd.
        """
        self._loop = asyncio.get_running_loop()
        self._opened = True
        try:
            await self._db.open()
        except SchemaTooNew as exc:
            self._die(StoreError(str(exc)))
        except store_errors() as exc:
            death = StoreError(
                f"cannot open {str(self.path)!r}: {exc}; check that the state directory "
                "is writable by the daemon's user and the disk is not full"
                if self._sqlite
                else f"cannot open {self._name}: {exc}; check that the database server is "
                "up and reachable and that the company's state.dsn_env (or dsn_credential) "
                "holds its URL"
            )
            death.__cause__ = exc  # a full disk is told apart by its cause
            self._die(death)

    def _die(self, death: StoreError) -> None:
        """The file cannot be used: every caller from now on learns why."""
        self._dead = True
        self._death = death
        raise death

    async def call(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in the worker thread; return its result once committed.

        If the caller is cancelled, ``fn`` still runs (history writes are not abandoned
        half-way); only its result is dropped.
        """
        fut = self._submit(fn, wait=True)
        assert fut is not None
        try:
            result: T = await fut
        except store_errors() as exc:
            # e.g. the connection could not be opened (a full disk): told as the store's
            # error, with the cause kept so a full disk is told apart
            raise StoreError(f"{self._name}: {exc}; {self._advice}") from exc
        return result

    def submit(self, fn: Callable[[Connection], T]) -> asyncio.Future[T]:
        """Queue ``fn(conn)``; the future resolves once it has committed, before its batch
        is reported done — so work posted from the future's callbacks (a caller cancelled
        while it waited) is still written by :meth:`drain` and :meth:`close`. Cancelling
        the future does not stop ``fn``; its errors are as :meth:`execute`'s.
        """
        fut = self._submit(fn, wait=True)
        assert fut is not None
        return fut

    def post(self, fn: Callable[[Connection], Any]) -> None:
        """Queue ``fn(conn)`` without waiting; must be called on the event loop's thread."""
        self._submit(fn)

    async def execute(self, *stmts: Stmt) -> None:
        """Apply ``stmts`` (in the bulk phase of a batch; see the class docstring)."""
        fut = self._submit(stmts, wait=True)
        assert fut is not None
        await fut

    def post_execute(self, *stmts: Stmt) -> None:
        """:meth:`execute` without waiting."""
        self._submit(stmts)

    def post_execute_next(self, *stmts: Stmt) -> None:
        """:meth:`post_execute` into the batch after the one being gathered (see the class
        docstring): for writes that must follow soon but that nobody should wait for.
        """
        self._submit(stmts, later=True)

    def _submit(
        self, fn: _Item, *, later: bool = False, wait: bool = False
    ) -> asyncio.Future[Any] | None:
        # Posted work gets no future of its own (its failure goes to on_error): in a burst of
        # a thousand fires, a future and two callbacks per history write were a third of the
        # event loop's work.
        if self._dead:
            raise self._death or StoreError(f"{self._name} is closed")
        loop = self._loop
        if not self._opened or loop is None:
            raise StoreError(f"{self._name} is not open")
        fut: asyncio.Future[Any] | None = loop.create_future() if wait else None
        (self._next if later else self._gathering).append((fn, fut))
        if not self._flush_soon:
            self._flush_soon = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        """Hand everything gathered this loop turn to the worker as one batch; what was
        posted behind it starts the next one, held until this one is reported back.
        """
        loop = self._loop
        assert loop is not None
        self._flush_soon = False
        if self._hold is not None:
            return  # _deliver flushes when the held-on batch is reported back
        gathered, self._gathering = self._gathering, []
        if not gathered:
            gathered, self._next = self._next, []  # nothing to be behind
        if not gathered:
            return
        reported: asyncio.Future[None] = loop.create_future()
        self._batches.add(reported)
        self._in_flight += len(gathered)
        if self._next:
            self._gathering, self._next = self._next, []
            self._hold = reported
        items = [fn for fn, _ in gathered]
        done: concurrent.futures.Future[list[tuple[bool, Any]]]
        try:
            done = self._db.submit(lambda conn: self._batch(conn, items))
        except DatabaseClosed:  # closed meanwhile: fail the batch, on the loop
            done = concurrent.futures.Future()
            closed = f"{str(self.path)!r}" if self._sqlite else self._name
            done.set_exception(self._death or StoreError(f"{closed} is closed"))

        def back(f: concurrent.futures.Future[list[tuple[bool, Any]]]) -> None:
            # Runs in the worker thread: hop to the loop once for the whole batch.
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(self._deliver, gathered, f, reported)

        done.add_done_callback(back)

    def _deliver(
        self,
        gathered: list[_Entry],
        done: concurrent.futures.Future[list[tuple[bool, Any]]],
        reported: asyncio.Future[None],
    ) -> None:
        exc = done.exception()
        if isinstance(exc, store_errors()):
            # The batch never ran: on PostgreSQL the pool could not lend a connection (the
            # server is down, the network cut). Told as the store's error, cause kept.
            error = StoreError(f"{self._name}: {exc}; {self._advice}")
            error.__cause__ = exc
            exc = error
        results = [(False, exc)] * len(gathered) if exc is not None else done.result()
        try:
            for (_fn, fut), (ok, value) in zip(gathered, results, strict=True):
                if fut is None:
                    if not ok:
                        log.error("routines.sqlite write failed: %r", value)
                        if self._on_error is not None:
                            self._on_error(value)
                elif fut.done():
                    continue
                elif ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
        finally:
            self._in_flight -= len(gathered)
            self._batches.discard(reported)
            reported.set_result(None)
            if self._hold is reported:
                self._hold = None
                # Scheduled after the wakeups of the callers just answered, so what they
                # write next joins the held work in one batch.
                if (self._gathering or self._next) and not self._flush_soon:
                    self._flush_soon = True
                    asyncio.get_running_loop().call_soon(self._flush)

    async def drain(self) -> None:
        """Wait until every called or posted function has run."""
        while self.pending:
            if self._batches:
                await asyncio.wait(set(self._batches))
            else:
                await asyncio.sleep(0)  # what was gathered is handed over on this turn

    async def close(self) -> None:
        """Finish queued work, close the connection and stop the thread."""
        if not self._opened:
            return
        while self._gathering or self._next or self._hold is not None:
            if self._hold is not None:
                await asyncio.shield(self._hold)
            self._flush()
        self._opened = False
        await self._db.close()  # after the batches queued before it
        self._dead = True
        self._death = self._death or StoreError(f"{self._name} is closed")
        await asyncio.sleep(0)  # let the last batch's results reach their futures

    def close_nowait(self) -> None:
        """:meth:`close` without waiting: hand the worker everything not yet handed over
        (in order: the queue is first in, first out, so nothing needs to wait for a held
        batch's report), then the connection's close. The worker commits it and ends by
        itself; results still reach their futures if the loop runs. A no-op once closed.
        """
        if not self._opened:
            return
        while self._gathering or self._next:
            self._hold = None
            self._flush()
        self._hold = None
        self._opened = False
        self._db.close_nowait()
        self._dead = True
        self._death = self._death or StoreError(f"{self._name} is closed")

    # -- worker thread ----------------------------------------------------------------

    def _batch(self, conn: Connection, items: list[_Item]) -> list[tuple[bool, Any]]:
        try:
            return self._run_batch(conn, items)
        except store_errors() as exc:
            error = StoreError(f"{self._name}: {exc}; {self._advice}")
            raise error from exc  # a full disk is told apart by its cause

    @staticmethod
    def _run_batch(conn: Connection, items: list[_Item]) -> list[tuple[bool, Any]]:
        inserts: dict[str, list[tuple[Any, ...]]] = {}
        others: dict[str, list[tuple[Any, ...]]] = {}
        for item in items:
            if isinstance(item, tuple):
                for sql, params in item:
                    group = inserts if sql.startswith("INSERT") else others
                    group.setdefault(sql, []).append(params)
        try:
            with transaction(conn):
                for group in (inserts, others):
                    for sql, rows in group.items():
                        conn.executemany(sql, rows)
                values = [None if isinstance(item, tuple) else item(conn) for item in items]
            return [(True, v) for v in values]
        except Exception:
            pass  # rolled back; a BaseException (a cancelled job) is not retried item by item
        # Something failed: run each item in its own transaction to isolate the failure. Not
        # the plain helper's outcome: an item's own error is that item's result (the batch
        # goes on), while the database's (BEGIN, COMMIT) still fails the whole batch.
        results: list[tuple[bool, Any]] = []
        for item in items:
            try:
                with transaction(conn):
                    try:
                        if isinstance(item, tuple):
                            for sql, params in item:
                                conn.execute(sql, params)
                            value = None
                        else:
                            value = item(conn)
                    except Exception as exc:
                        raise _ItemFailed from exc
            except _ItemFailed as failed:
                assert isinstance(failed.__cause__, Exception)
                results.append((False, failed.__cause__))
            else:
                results.append((True, value))
        return results
