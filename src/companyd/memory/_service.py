"""The memory owner inside the daemon: one supervised child that owns the graph file.

Every part of companyd that reads or writes company memory goes through one
:class:`MemoryService`. Its :meth:`~MemoryService.run` is the supervised child: it loads and
repairs the file, signals readiness, then serves calls in batches on one worker thread (one
lock, one fsync per batch: calls that arrive while a batch is being written go together in
the next one), folds the journal into the MCP file after a second of quiet and
when it stops. Calls queue while the owner is down and are served after the restart, or fail
once their deadline passes.

The owner crashes on purpose (:class:`MemoryInconsistent`) when its state and the disk may
disagree, e.g. a failed fsync; the supervisor restarts it and the restart reloads from disk.

A write the state disk refuses (full, over quota, an I/O error: :func:`is_disk_failure`) is
not a crash: a restart would fail the same way. The owner reloads from disk in place, raises
the daemon's shared :class:`DiskAlarm` ("state disk full") and serves *degraded*: reads as
usual, writes refused at once with :class:`MemoryUnavailable` ("memory not saved: the state
disk is full … retry later"), so nothing is acknowledged that is not durable. Every
``disk_retry_seconds`` it probes the disk (a small file written, fsynced and removed); once
the probe passes it reopens for writing, clears the alarm and takes writes again
(docs/memory.md, "A full disk").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from companyd._fs import (
    PRIVATE_FILE,
    DiskAlarm,
    is_disk_failure,
    make_dirs,
    tmp_name,
    write_all,
)
from companyd.clock import Clock, SystemClock
from companyd.events import EventBus, MemoryRepaired
from companyd.memory._changes import ChangeLog
from companyd.memory._codec import LoadReport
from companyd.memory._errors import MemoryInconsistent, MemoryLocked, MemoryUnavailable
from companyd.memory._graph import KnowledgeGraph
from companyd.memory._neighbourhood import neighbourhood
from companyd.memory._shared import MIGRATIONS as SHARED_MIGRATIONS
from companyd.memory._shared import SharedGraphStore
from companyd.memory._store import GraphStore, Operation, Outcome
from companyd.memory._tools import READ_ONLY_TOOLS, validate_arguments
from companyd.storage import SQLITE, Backend, open_database
from companyd.supervision import ChildContext

__all__ = ["DISK_PROBE_BYTES", "DISK_RETRY_SECONDS", "MemoryService"]

log = logging.getLogger("companyd.memory.service")

T = TypeVar("T")

#: How often a degraded owner (the state disk refused a write) probes the disk.
DISK_RETRY_SECONDS = 1.0
#: The probe's size: more than a typical batch of journal records, so a disk that takes the
#: probe takes the next writes too (if not, the owner is degraded again, nothing is lost).
DISK_PROBE_BYTES = 64 * 1024
#: The alarm's name for the memory's writes.
_WHAT = "memory journal"


class _OwnerThread:
    """One thread running blocking jobs in submission order.

    Leaner than ``run_in_executor``: one condition variable and one
    ``call_soon_threadsafe`` per job (measured ~35 µs per round trip against ~105 µs for a
    one-worker ``ThreadPoolExecutor`` on the 2-core VM, docs/benchmarks.md).
    """

    def __init__(self, name: str) -> None:
        self._jobs: collections.deque[
            tuple[Callable[[], Any], asyncio.AbstractEventLoop | None, asyncio.Future[Any] | None]
            | None
        ] = collections.deque()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._cv:
            self._jobs.append((fn, loop, fut))
            self._cv.notify()
        return fut

    def post(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the thread; ``fn`` reports back by itself."""
        with self._cv:
            self._jobs.append((fn, None, None))
            self._cv.notify()

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread."""
        with self._cv:
            self._jobs.append(None)
            self._cv.notify()

    def _main(self) -> None:
        while True:
            with self._cv:
                while not self._jobs:
                    self._cv.wait()
                job = self._jobs.popleft()
            if job is None:
                return
            fn, loop, fut = job
            if loop is None or fut is None:
                try:
                    fn()
                except BaseException:  # posted jobs report their own errors
                    log.exception("memory owner job failed")
                continue
            try:
                result = fn()
            except BaseException as exc:
                outcome: tuple[bool, Any] = (False, exc)
            else:
                outcome = (True, result)
            # RuntimeError: the loop is closed, nobody is waiting any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, fut, outcome)


def _settle(fut: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if fut.done():
        return
    ok, value = outcome
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


@dataclass(eq=False)
class _Request:
    op: Callable[[GraphStore], Operation]
    future: asyncio.Future[Any]
    deadline: float
    limit: float
    taken: bool = False


class MemoryService:
    """The in-daemon owner of one graph file (see the module docstring).

    Args:
        path: the graph file (``company.yaml``'s ``memory_path``); its directory is created.
        bus: where ``memory_repaired`` is published.
        clock: for the idle timer and call deadlines.
        max_lag_seconds: fold the journal into the MCP file at least this often while writes
            keep coming (so readers of the MCP file — the official server, a backup — are
            never more than this far behind, even on a busy day).
        idle_compact_seconds: fold the journal into the MCP file after this long without
            writes (the file is complete whenever the owner has been idle this long).
        call_timeout: default deadline of :meth:`call` and the other requests; deadlines are
            checked every ``min(1 s, call_timeout / 4)``.
        lock_timeout: seconds to wait for ``<file>.lock`` held by another process.
        disk_retry_seconds: while the state disk refuses writes, probe it this often.
        source: the event source name.
        backend: ``postgres``: the change log lives in the company's schema and ``path`` is
            its local MCP-format copy (:mod:`companyd.memory._shared`).
    """

    def __init__(
        self,
        path: Path,
        *,
        bus: EventBus,
        clock: Clock | None = None,
        idle_compact_seconds: float = 1.0,
        max_lag_seconds: float = 10.0,
        call_timeout: float = 30.0,
        lock_timeout: float = 10.0,
        disk_retry_seconds: float = DISK_RETRY_SECONDS,
        source: str = "memory",
        backend: Backend = SQLITE,
    ) -> None:
        self.path = Path(path).absolute()
        self._backend = backend
        self._bus = bus
        self._clock: Clock = clock or SystemClock()
        self._idle = idle_compact_seconds
        self._max_lag = max_lag_seconds
        self._dirty_since: float | None = None
        self._call_timeout = call_timeout
        self._tick = min(1.0, call_timeout / 4)
        self._lock_timeout = lock_timeout
        self._disk_retry = disk_retry_seconds
        self._source = source
        # requests not yet taken by a batch, in arrival order
        self._pending: collections.deque[_Request] = collections.deque()
        # requests not yet answered (for the deadline reaper)
        self._waiting: set[_Request] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._last_submit = 0.0
        # the owner (set while run() serves)
        self._worker: _OwnerThread | None = None
        self._store: GraphStore | None = None
        self._serving = False
        self._busy = False  # a batch or a compaction is on the owner thread
        self._generation = 0
        self._crash: BaseException | None = None
        # the state disk: a batch it refused (the store must be reloaded before the next
        # one), why the owner is degraded (writes refused), and a passed probe to act on
        self._disk_refused: BaseException | None = None
        self._disk_error: BaseException | None = None
        self._disk_back = False
        self._probe: asyncio.Task[None] | None = None
        self._last_activity = 0.0
        self._compact_not_before = float("-inf")  # after a failed compaction: when to retry
        self._timer: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self._wake: asyncio.Future[None] | None = None
        #: what the last load found (None until the owner has started once)
        self.last_report: LoadReport | None = None
        #: the latest durable writes made through :meth:`call` (since this object's start)
        self.changes = ChangeLog()
        #: when :attr:`changes` began (epoch seconds)
        self.changes_since = self._clock.time()

    # -- the interface the daemon and agents call ---------------------------------------------

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
        by: str | None = None,
    ) -> dict[str, Any]:
        """Run one of the nine MCP memory tools and return its ``structuredContent``.

        ``arguments`` and the result are exactly the MCP tool's input and
        ``structuredContent``. Returns only once the change is durable (fsynced); a write
        is then in :attr:`changes`, made ``by`` (the agent that called it, or None).

        Raises:
            MemoryToolError: invalid arguments or a refused call, with the official
                server's text; nothing was changed.
            MemoryUnavailable: no answer within ``timeout`` (default ``call_timeout``), or
                the write failed; the message says whether it was applied.
        """
        args = validate_arguments(tool, arguments)
        result: dict[str, Any] = await self._submit(lambda store: (tool, args), timeout)
        if tool not in READ_ONLY_TOOLS:
            self.changes.record(self._clock.time(), tool, args, by)
        return result

    async def recall(self, entity: str, depth: int = 1) -> dict[str, Any]:
        """The neighbourhood of ``entity`` to ``depth`` hops, for a prompt: ``{entity,
        depth, found, entities, others, relations, truncated, text}`` (see
        :func:`companyd.memory._neighbourhood.neighbourhood`).
        """
        return await self.query(lambda g: neighbourhood(g, entity, depth).to_dict())

    async def change_marker(self) -> str:
        """An opaque string that changes whenever the graph changes and stays equal across
        restarts when it did not.
        """
        marker: str = await self._submit(lambda store: store.marker_of, None)
        return marker

    async def query(self, fn: Callable[[KnowledgeGraph], T], *, timeout: float | None = None) -> T:
        """Run ``fn(graph)`` on the owner thread, in order with writes, and return its result.

        ``fn`` must not mutate the graph nor keep references to it (return copies).
        """
        result: T = await self._submit(lambda store: fn, timeout)
        return result

    # -- the supervised child ----------------------------------------------------------------

    async def run(self, ctx: ChildContext) -> None:
        """Supervised child: load+repair, ``ctx.started()``, serve, compact when idle;
        serve what is queued, compact and return once ``ctx.stopping`` is set (or compact
        and re-raise when cancelled). Raises :class:`MemoryInconsistent` (a crash on
        purpose) when a write failed other than on the disk; the restart reloads from disk.
        A write the disk refused degrades it instead (module docstring).
        """
        loop = asyncio.get_running_loop()
        worker = _OwnerThread(f"memory-owner:{self.path.name}")
        store = self._new_store(readonly=False)
        self._generation += 1
        self._crash = None
        self._disk_clear()
        self._dirty_since = None
        self._stopping = ctx.stopping
        watch: asyncio.Task[None] | None = None
        opened = False
        try:
            await worker.submit(lambda: make_dirs(self.path.parent))
            try:
                report = await worker.submit(store.open)
            except Exception as exc:
                if not is_disk_failure(exc):
                    raise
                # Started on a full disk with something to repair: serve degraded.
                await worker.submit(store.close)
                store = await self._degrade(worker, exc)
                assert store.report is not None
                report = store.report
            opened = True
            self.last_report = report
            self._worker, self._store = worker, store
            self._serving = True
            self._last_activity = self._clock.monotonic()
            watch = loop.create_task(self._poke_when(ctx.stopping))
            ctx.started(
                {"path": str(self.path), "entities": report.entities, "relations": report.relations}
            )
            self._kick()  # calls that queued while the owner was down
            while True:
                if self._crash is not None:
                    raise self._crash
                if self._disk_refused is not None:
                    store = await self._reload_degraded(worker, store, self._disk_refused)
                    continue
                if self._disk_back and not self._busy:
                    store = await self._recover(worker, store)
                    continue
                degraded = self._disk_error is not None
                idle = not self._busy and not self._pending
                if ctx.stopping.is_set() and idle:
                    break
                now = self._clock.monotonic()
                if store.journal_records and self._dirty_since is None:
                    self._dirty_since = now
                if (
                    idle
                    and not degraded
                    and store.journal_records
                    and now >= self._compact_not_before
                ):
                    quiet = now - self._last_activity
                    lagging = self._dirty_since is not None and (
                        now - self._dirty_since >= self._max_lag
                    )
                    if quiet >= self._idle or lagging or store.should_compact():
                        await self._compact(worker, store)
                        self._dirty_since = None
                        continue
                if (
                    not degraded
                    and store.journal_records
                    and (self._timer is None or self._timer.done())
                ):
                    due = self._last_activity + self._idle
                    if self._dirty_since is not None:
                        due = min(due, self._dirty_since + self._max_lag)
                    due = max(due, self._compact_not_before)
                    self._timer = loop.create_task(self._poke_at(due))
                self._wake = loop.create_future()
                await self._wake
        finally:
            self._serving = False
            self._worker = self._store = None
            self._wake = None
            for task in (watch, self._timer, self._probe):
                if task is not None:
                    task.cancel()
            self._timer = self._probe = None
            # Fold the journal into the MCP file and close, even when cancelled: the thread
            # finishes its queue (a batch in flight settles its own callers) whatever happens
            # to this task. Requests still queued wait, until their deadline, for a restart.
            healthy = opened and self._crash is None and self._disk_error is None
            final = worker.submit(lambda: _finish(store, compact=healthy))
            worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(final)

    # -- internals ---------------------------------------------------------------------------

    async def _submit(self, make: Callable[[GraphStore], Operation], timeout: float | None) -> Any:
        loop = asyncio.get_running_loop()
        limit = self._call_timeout if timeout is None else timeout
        now = self._clock.monotonic()
        req = _Request(make, loop.create_future(), now + limit, limit)
        self._pending.append(req)
        self._waiting.add(req)
        self._last_submit = now
        if self._reaper is None or self._reaper.done():
            self._reaper = loop.create_task(self._reap())
        self._kick()
        try:
            return await req.future
        finally:
            self._waiting.discard(req)
            if not req.taken:
                with contextlib.suppress(ValueError):
                    self._pending.remove(req)

    def _kick(self) -> None:
        """Send every pending request to the owner thread as one batch, unless the owner is
        down or busy (then the batch in flight kicks again when it is done).
        """
        worker, store = self._worker, self._store
        if (
            self._busy
            or not self._serving
            or self._disk_refused is not None
            or worker is None
            or store is None
        ):
            return
        batch: list[_Request] = []
        ops: list[Operation] = []
        while self._pending:
            req = self._pending.popleft()
            if req.future.done():  # expired or cancelled while queued
                continue
            req.taken = True
            op = req.op(store)
            if self._disk_error is not None and _writes(op):
                _settle(req.future, (False, self._not_saved(self._disk_error)))
                continue
            batch.append(req)
            ops.append(op)
        if not batch:
            return
        self._busy = True
        self._last_activity = self._clock.monotonic()
        loop = asyncio.get_running_loop()
        generation = self._generation

        def job() -> None:  # on the owner thread; settles the callers from there
            try:
                outcomes = store.execute(ops)
            except BaseException as exc:
                loop.call_soon_threadsafe(self._batch_done, generation, batch, None, exc)
            else:
                loop.call_soon_threadsafe(self._batch_done, generation, batch, outcomes, None)

        worker.post(job)

    def _batch_done(
        self,
        generation: int,
        batch: list[_Request],
        outcomes: list[Outcome] | None,
        error: BaseException | None,
    ) -> None:
        self._busy = False
        if outcomes is not None:
            for req, outcome in zip(batch, outcomes, strict=True):
                _settle(req.future, outcome)
        elif is_disk_failure(error):
            # The state disk refused the journal write (cut off again by the store): not a
            # crash, a restart would fail the same way. Reload in place and serve degraded.
            assert error is not None
            for req in batch:
                _settle(req.future, (False, self._not_saved(error)))
            if generation == self._generation:
                self._disk_refused = error
        else:
            if isinstance(error, MemoryInconsistent):
                failed = MemoryUnavailable(f"{error}; the call was not saved — retry it")
            else:
                failed = MemoryUnavailable(
                    f"memory file {str(self.path)!r}: {error}; the call was not applied"
                )
            for req in batch:
                _settle(req.future, (False, failed))
            # A lock held too long by another process fails these calls only; anything else
            # means this owner can no longer trust its state: crash, the restart reloads.
            if generation == self._generation and not isinstance(error, MemoryLocked):
                self._crash = (
                    error
                    if isinstance(error, MemoryInconsistent)
                    else MemoryInconsistent(f"memory owner failed: {error!r}")
                )
        self._kick()
        store = self._store
        if (
            self._crash is not None
            or self._disk_refused is not None
            or (self._stopping is not None and self._stopping.is_set())
            or self._timer is None
            or self._timer.done()  # no idle timer armed for this write yet
            or (store is not None and store.should_compact())
        ):
            self._poke()

    # -- a full or failing state disk ---------------------------------------------------------

    def _disk_clear(self) -> None:
        """A new incarnation starts with no disk failure known."""
        self._disk_refused = self._disk_error = None
        self._disk_back = False

    def _not_saved(self, error: BaseException) -> MemoryUnavailable:
        cause = _disk_cause(error)
        return MemoryUnavailable(
            f"memory not saved: the state disk is full or failing (memory file "
            f"{str(self.path)!r}: {cause}); the call was not applied and nothing was changed "
            "— retry later, once the disk has room again"
        )

    async def _reload_degraded(
        self, worker: _OwnerThread, store: GraphStore, error: BaseException
    ) -> GraphStore:
        """The disk refused a journal write: drop the store (its graph may hold the refused
        change) and serve degraded from what is on disk.
        """
        self._busy = True
        try:
            await worker.submit(store.close)
            return await self._degrade(worker, error)
        finally:
            self._busy = False
            self._disk_refused = None
            self._kick()

    async def _degrade(self, worker: _OwnerThread, error: BaseException) -> GraphStore:
        """Raise the alarm, start probing, and open a store from what is on disk: for
        writing if that needs no write, else read-only. Returns the store (also serving).
        """
        if self._disk_error is None:
            log.error(
                "memory file %s: the state disk refuses writes (%s); memory writes are "
                "refused, reads served, until it takes writes again",
                self.path,
                _disk_cause(error),
            )
        self._disk_error = error
        self._disk_back = False
        DiskAlarm.of(self._bus).failed(_WHAT, str(self.path) + ".journal", _disk_cause(error))
        store = await self._open_store(worker)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_disk(worker))
        return store

    async def _open_store(self, worker: _OwnerThread) -> GraphStore:
        """A freshly loaded store; read-only when the load's repair cannot be written.
        Installed as the serving store.
        """
        store = self._new_store(readonly=False)
        try:
            await worker.submit(store.open)
        except Exception as exc:
            await worker.submit(store.close)
            if not is_disk_failure(exc):
                raise
            store = self._new_store(readonly=True)
            await worker.submit(store.open)
        if self._worker is not None:  # serving (not the start, which installs it)
            self._store = store
        return store

    def _new_store(self, *, readonly: bool) -> GraphStore:
        loop = asyncio.get_running_loop()
        store: GraphStore
        if self._backend.kind == "postgres":
            database = open_database(
                self._backend,
                path=None,
                store="memory",
                migrations=SHARED_MIGRATIONS,
                what="memory log",
                readonly=readonly,
                worker=False,  # the owner thread does the work
            )
            from companyd.storage import PgDatabase  # PostgreSQL: its driver is loaded

            assert isinstance(database, PgDatabase)
            store = SharedGraphStore(
                self.path, database, lock_timeout=self._lock_timeout, readonly=readonly
            )
        else:
            store = GraphStore(self.path, lock_timeout=self._lock_timeout, readonly=readonly)

        def on_repair(report: LoadReport) -> None:  # on the owner thread
            loop.call_soon_threadsafe(self._repaired, report)

        store.on_repair = on_repair
        return store

    async def _probe_disk(self, worker: _OwnerThread) -> None:
        """Every ``disk_retry_seconds`` while degraded: does the disk take a write again?"""
        while self._disk_error is not None and not self._disk_back:
            await self._clock.sleep(self._disk_retry)
            try:
                await worker.submit(lambda: _probe_write(self.path))
            except OSError as exc:
                if not is_disk_failure(exc):
                    log.warning("probing the state disk failed: %s", exc)
                continue
            self._disk_back = True
            self._poke()

    async def _recover(self, worker: _OwnerThread, store: GraphStore) -> GraphStore:
        """The probe passed: reopen for writing (reloading from disk) and take writes."""
        self._busy = True
        self._disk_back = False
        try:
            await worker.submit(store.close)
            fresh = await self._open_store(worker)
            if fresh.readonly:  # the repair still cannot be written: keep probing
                self._probe = asyncio.get_running_loop().create_task(self._probe_disk(worker))
                return fresh
            self._disk_error = None
            log.warning("memory file %s: the state disk takes writes again", self.path)
            DiskAlarm.of(self._bus).recovered(_WHAT)
            return fresh
        finally:
            self._busy = False
            self._kick()

    async def _compact(self, worker: _OwnerThread, store: GraphStore) -> None:
        self._busy = True
        try:
            await worker.submit(store.compact)
        except (MemoryLocked, OSError) as exc:
            # Nothing is lost: a compaction changes nothing on disk before its rename, and the
            # journal keeps every write. Retry after the next quiet period rather than crash
            # (and crash-loop) while another process holds the lock or the disk is full.
            log.warning("compacting %s failed (%s); retrying later", self.path, exc)
            self._compact_not_before = self._clock.monotonic() + self._idle
        finally:
            self._busy = False
        self._kick()

    async def _reap(self) -> None:
        """Fail requests whose deadline passed; ends after a while without requests."""
        while True:
            await self._clock.sleep(self._tick)
            now = self._clock.monotonic()
            for req in list(self._waiting):
                if req.deadline <= now and not req.future.done():
                    self._expire(req)
            if not self._waiting and now - self._last_submit > 10 * self._tick:
                return

    def _expire(self, req: _Request) -> None:
        if req.taken:
            req.future.set_exception(
                MemoryUnavailable(
                    f"memory file {str(self.path)!r}: no answer within {req.limit:g}s while "
                    "saving; the call may or may not have been applied — read before retrying"
                )
            )
        else:
            state = "busy" if self._serving else "not running (restarting?)"
            req.future.set_exception(
                MemoryUnavailable(
                    f"memory file {str(self.path)!r}: the memory owner is {state} and did not "
                    f"take the call within {req.limit:g}s; the call was not applied — retry later"
                )
            )

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _poke_when(self, event: asyncio.Event) -> None:
        await event.wait()
        self._poke()

    async def _poke_at(self, deadline: float) -> None:
        await self._clock.sleep(max(0.0, deadline - self._clock.monotonic()))
        self._poke()

    def _repaired(self, report: LoadReport) -> None:
        corrupt = str(self.path) + ".corrupt"
        self._bus.publish(
            MemoryRepaired(
                source=self._source,
                path=str(self.path),
                summary=report.summary(),
                quarantined_lines=len(report.quarantined),
                dropped_lines=report.dropped_lines,
                torn_tail=report.torn_tail,
                merged_entities=report.merged_entities,
                duplicate_relations=report.duplicate_relations,
                observations_fixed=report.observations_fixed,
                journal_torn=report.journal_torn,
                foreign_rewrite=report.foreign_rewrite,
                corrupt_file=corrupt if report.quarantined else None,
            )
        )


def _writes(op: Operation) -> bool:
    """Whether ``op`` is a tool call that may change the graph."""
    return isinstance(op, tuple) and op[0] not in READ_ONLY_TOOLS


def _disk_cause(error: BaseException) -> BaseException:
    """The OSError (or SQLite error) under ``error`` that says what the disk did."""
    seen: set[int] = set()
    exc: BaseException | None = error
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return error


def _probe_write(path: Path) -> None:
    """Write, fsync and remove a small file next to ``path`` (a store temporary, so a crash
    in between leaves nothing the next load does not remove). Raises what the disk says.
    """
    probe = tmp_name(path)
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
        try:
            write_all(fd, b"\0" * DISK_PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)


def _finish(store: GraphStore, *, compact: bool) -> None:
    try:
        if compact and store.broken is None:
            store.compact()
    except Exception as exc:
        if isinstance(exc, OSError) and is_disk_failure(exc):  # the disk: no traceback
            log.error(
                "final compaction of %s failed (%s); the journal keeps every write",
                store.path,
                exc,
            )
        else:
            log.exception(
                "final compaction of %s failed; the journal keeps every write", store.path
            )
    finally:
        store.close()
