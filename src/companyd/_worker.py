"""One store's worker thread: all its database work, in submission order, off the loop.

:class:`StoreWorker` is what :class:`companyd._sqlite.Database` (a SQLite file) and
:class:`companyd.storage._postgres.PgDatabase` (a store's tables on PostgreSQL) share: an
executor with ``max_workers=1`` whose thread runs every job of the store, lending each the
connection (``fn(conn)``), and a lifecycle that closes the connection after the work
queued before the close. The synchronous path (``worker=False``) has no thread: the
connection belongs to the thread that first uses it (the CLI).

A subclass says how a job gets its connection (:meth:`StoreWorker._job`), how the
connection is dropped (:meth:`StoreWorker._drop`) and how errors name it
(:meth:`StoreWorker._name`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["DatabaseClosed", "StoreWorker"]

T = TypeVar("T")
C = TypeVar("C")


def _wrap(future: Future[T]) -> asyncio.Future[T]:
    """``asyncio.wrap_future``, imported at the first call: only the daemon's event loop
    awaits a store (the CLI's synchronous path does not import asyncio, issue 31).
    """
    import asyncio

    return asyncio.wrap_future(future)


class DatabaseClosed(RuntimeError):
    """Work was submitted to a database after its ``close``."""


class StoreWorker(Generic[C]):
    """The worker thread and lifecycle of one store's database (see the module docstring).

    Args:
        what: how errors name the store ("spend ledger").
        thread_name: the worker thread's name prefix.
        worker: False for the synchronous path (no thread).
    """

    def __init__(self, *, what: str, thread_name: str, worker: bool) -> None:
        self.what = what
        self._worker: int | None = None  # the worker thread's ident, once it has started
        if worker:
            # imported here: the CLI's synchronous path (worker=False) reads a store without
            # a thread, and without concurrent.futures' and asyncio's imports (issue 31)
            from concurrent.futures import ThreadPoolExecutor
        self._executor_ = (
            ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=thread_name, initializer=self._started
            )
            if worker
            else None
        )
        self._closed = False

    # -- what a subclass provides -------------------------------------------------------

    def _job(self, fn: Callable[[C], T]) -> T:
        """Run ``fn`` with the connection (opening it first if needed), on the worker."""
        raise NotImplementedError

    def _drop(self) -> None:
        """Close the connection (on the worker); the next job opens it anew."""
        raise NotImplementedError

    def _name(self) -> str:
        """The store's place, for messages (a path, a schema)."""
        raise NotImplementedError

    # -- where work runs ----------------------------------------------------------------

    def _started(self) -> None:
        self._worker = threading.get_ident()

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The worker itself, for an owner that schedules plain jobs on it (the spend book:
        ``loop.run_in_executor(db.executor, job)``; the store's calls then run at once).
        """
        if self._executor_ is None:
            raise RuntimeError(
                f"{self.what} {self._name()!r} has no worker thread (worker=False): use "
                "run_sync from the thread that opened it"
            )
        return self._executor_

    @property
    def on_worker(self) -> bool:
        """Whether the calling thread is this database's worker."""
        return self._worker == threading.get_ident()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _claim_thread(self) -> None:
        """On the synchronous path, the first caller's thread becomes the worker."""
        if self._executor_ is None and self._worker is None:
            self._worker = threading.get_ident()

    def submit(self, fn: Callable[[C], T]) -> Future[T]:
        """Queue ``fn(conn)`` on the worker (opening the connection first if needed).

        Raises:
            DatabaseClosed: after :meth:`close`.
        """
        if self._closed:
            raise DatabaseClosed(f"{self.what} {self._name()!r} is closed")
        executor = self.executor  # RuntimeError on the synchronous path
        try:
            return executor.submit(self._job, fn)
        except RuntimeError as exc:  # shut down meanwhile (or at interpreter exit)
            raise DatabaseClosed(f"{self.what} {self._name()!r} is closed: {exc}") from exc

    async def run(self, fn: Callable[[C], T]) -> T:
        """``fn(conn)`` on the worker; its result, or its exception. As with
        ``loop.run_in_executor``, cancelling the caller cancels work not yet started; work
        already running finishes (its result is dropped).
        """
        return await _wrap(self.submit(fn))

    async def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the worker *without* opening the connection first: for a store that
        opens it itself, e.g. to set a damaged file aside and start a new one.
        """
        if self._closed:
            raise DatabaseClosed(f"{self.what} {self._name()!r} is closed")
        return await _wrap(self.executor.submit(fn))

    def run_sync(self, fn: Callable[[C], T]) -> T:
        """``fn(conn)`` on the worker, waiting for it: from a thread with no event loop (the
        CLI), or on the worker itself (then it runs at once, inside the current job).
        """
        self._claim_thread()
        if self.on_worker:
            return self._job(fn)
        return self.submit(fn).result()

    # -- lifecycle ------------------------------------------------------------------------

    def close_sync(self) -> None:
        """Close the connection and stop the worker once the work queued before has run
        (idempotent). On the worker itself the thread stops after the current job.
        """
        if self._closed:
            return
        if self.on_worker or self._executor_ is None:
            self._drop()
            self._closed = True
            if self._executor_ is not None:
                self._executor_.shutdown(wait=False)
            return
        try:
            self._executor_.submit(self._drop).result()
        except RuntimeError:
            pass  # the executor is already shut down (interpreter exit)
        finally:
            self._closed = True
            self._executor_.shutdown(wait=True)

    async def close(self) -> None:
        """:meth:`close_sync` from the event loop (the queued work runs first)."""
        if self._closed:
            return
        if self._executor_ is None:
            self.close_sync()
            return
        try:
            await _wrap(self._executor_.submit(self._drop))
        except RuntimeError:
            pass  # the executor is already shut down (interpreter exit)
        finally:
            self._closed = True
            # The worker is idle now (the close was the last job): this join is immediate.
            self._executor_.shutdown(wait=True)

    def close_nowait(self) -> None:
        """:meth:`close` without waiting (a caller that is being cancelled): the connection
        is closed after the work queued before it, then the worker ends by itself.
        """
        if self._closed:
            return
        self._closed = True
        if self._executor_ is None:
            self._drop()
            return
        with contextlib.suppress(RuntimeError):  # already shut down (interpreter exit)
            self._executor_.submit(self._drop)
        self._executor_.shutdown(wait=False)
