"""One fire of a routine: its turn, its precondition, its task, and its history row.

:class:`Fires` runs each fire the :class:`~companyd.scheduler.service.RoutineScheduler`
hands it (a fire time from APScheduler, a catch-up fire or an operator's ``run_now``) and
records how it ended:

* **Concurrency.** A :class:`Slot` counts the fires holding or waiting for its routine's
  lock: with ``skip_if_active`` one at a time, with ``queue`` one running and one waiting; a
  fire beyond that is ``skipped`` (a manual run is refused with :class:`RoutineBusy`).
* **Restart-proof order.** A scheduled fire's cursor is committed before anything else; its
  history row follows in the next batch (see :meth:`Fires.execute`).
* **Preconditions** (``memory_changed``, ``inbox_nonempty``) are checked when the run would
  start; when false the fire is ``idle``: no task, no model call, $0, no event.
* **Recording.** Every fire ends as one history row and, unless ``ok`` or ``idle``, one event
  (``routine_failed``, ``routine_missed``, ``routine_skipped``). A fire cancelled while it
  waits for its turn is recorded as ``cancelled`` even as the cancellation unwinds; a fire
  whose task is already with the agents stays open for the next start to close.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from companyd.admin import AdminError
from companyd.clock import Clock, utc_from_ts
from companyd.config import RoutineConfig
from companyd.events import EventBus
from companyd.roles.tasks import RunOutcome, RunStatus, Task
from companyd.scheduler import store as db
from companyd.scheduler._ids import new_id
from companyd.scheduler.outcomes import Outcome, from_run_status
from companyd.scheduler.sink import TaskSink
from companyd.scheduler.store import FireRecord, RoutineStore, StoreError

__all__ = [
    "INTERRUPTED",
    "UNRECORDED",
    "Fires",
    "RoutineBusy",
    "Slot",
    "fail_open_fire",
    "overlap_reason",
]

log = logging.getLogger(__name__)

INTERRUPTED = (
    "interrupted: the daemon stopped before the run ended and the agent runtime did not "
    "resume it; the fire is not run again — see `companyd runs` for what the agent did"
)
#: appended to the reason of a fire whose run resumed after a stop
RESUMED = "the run was interrupted by a stop of the daemon and resumed from its journal"
UNRECORDED = (
    "interrupted: the daemon stopped (crash, kill or power loss) just after this fire was "
    "dispatched, before its history row was written; the fire is not run again — see "
    "`companyd runs` for what the agent did"
)
#: why a fire waiting for its turn when the scheduler stopped did not run
STOPPED_BEFORE = (
    "interrupted: the scheduler stopped while this fire waited for its turn; it did not run "
    "and is not run again"
)


class RoutineBusy(AdminError):
    """``run_now`` refused: the routine's concurrency policy has no room for another run."""


@dataclass
class Slot:
    """A routine as the scheduler runs it."""

    config: RoutineConfig
    trigger: Any
    identity: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: int = 0  # fires holding or waiting for the lock
    marker: str | None = None

    @property
    def limit(self) -> int:
        """How many fires may hold or wait for the lock at once."""
        return 1 if self.config.concurrency == "skip_if_active" else 2


def overlap_reason(slot: Slot) -> str:
    """Why a fire of ``slot``'s routine is skipped: its concurrency policy has no room."""
    if slot.config.concurrency == "skip_if_active":
        return "overlap: the previous run was still active (concurrency: skip_if_active)"
    return "queue full: one run active and one already waiting (concurrency: queue)"


class Fires:
    """Runs and records fires (see module docstring).

    Args:
        sink: where tasks go (the agent runtime).
        bus: where fire events go.
        clock: time source.
        on_store_failure: called when a history write is lost (the scheduler then fails).

    Attributes:
        store: the open history, or None while the scheduler is stopped.
        source: the events' source (the scheduler's path in the supervision tree).
    """

    def __init__(
        self,
        *,
        sink: TaskSink,
        bus: EventBus,
        clock: Clock,
        on_store_failure: Callable[[BaseException], None],
    ) -> None:
        self._sink = sink
        self._bus = bus
        self._clock = clock
        self._on_store_failure = on_store_failure
        self.store: RoutineStore | None = None
        self.source = "scheduler"

    async def take_baselines(self, slots: Iterable[Slot]) -> None:
        """Record the memory marker a ``memory_changed`` routine compares against, if none."""
        for slot in slots:
            if slot.config.precondition != "memory_changed" or slot.marker is not None:
                continue
            try:
                marker = await self._sink.memory_marker()
            except Exception as exc:  # the first fire will take the baseline instead
                log.warning("memory marker unavailable for %r: %r", slot.config.slug, exc)
                continue
            await self.save_marker(slot, marker)

    async def save_marker(self, slot: Slot, marker: str) -> None:
        slot.marker = marker
        now = self._clock.time()
        slug = slot.config.slug
        if self.store is not None:
            await self.store.call(lambda c: db.set_marker(c, slug, marker, now))

    async def execute(
        self, slot: Slot, kind: str, scheduled: float, *, check_precondition: bool
    ) -> RunOutcome | None:
        """Run one fire of ``slot``'s routine (``kind``: ``scheduled``, ``catch_up`` or
        ``manual``) and record it; the run's outcome, or None when it did not run.

        Raises:
            RoutineBusy: a manual run found no room.
            StoreError: the history cannot be written.
        """
        r = slot.config
        store = self.store
        assert store is not None
        now = self._clock.time()
        rec = FireRecord(
            fire_id=new_id("fire"),
            routine=r.slug,
            agent=r.assignee,
            kind=kind,
            scheduled=scheduled,
            fired=now,
        )
        if slot.pending >= slot.limit:
            if kind == "manual":
                raise RoutineBusy(
                    f"routine {r.slug!r} is running now and its concurrency is "
                    f"{r.concurrency!r}; wait for the run to end (`companyd jobs history "
                    f"{r.slug}`) and try again"
                )
            self.record_now(rec, Outcome.SKIPPED, overlap_reason(slot))
            return None
        slot.pending += 1
        try:
            try:
                if kind == "manual":
                    await store.execute(db.insert_fire_stmt(rec))  # manual: no cursor
                else:
                    # Only the cursor is waited for: once it is committed, no restart runs
                    # this fire time again. The row follows in the next batch (a burst of a
                    # thousand fires then waits for a thousand small UPDATEs, not also for
                    # a thousand INSERTs into an indexed table); if the process dies between
                    # the two, the next start finds the cursor ahead of the history and
                    # records the fire as cancelled (db.close_unrecorded).
                    store.post_execute_next(db.insert_fire_stmt(rec))
                    await store.execute(db.advance_cursor_stmt(r.slug, scheduled, now))
                await slot.lock.acquire()
            except asyncio.CancelledError:
                self.record_cancelled(rec, STOPPED_BEFORE)
                raise
            try:
                return await self._run_locked(slot, rec, check_precondition)
            finally:
                slot.lock.release()
        finally:
            slot.pending -= 1

    async def _run_locked(
        self, slot: Slot, rec: FireRecord, check_precondition: bool
    ) -> RunOutcome | None:
        r = slot.config
        started = self._clock.time()
        if check_precondition and r.precondition != "always":
            try:
                go, why = await self._precondition(slot)
            except asyncio.CancelledError:
                self.record_cancelled(rec, STOPPED_BEFORE)
                raise
            except Exception as exc:
                await self.finish(
                    rec,
                    Outcome.FAILED,
                    f"precondition {r.precondition} could not be checked: "
                    f"{type(exc).__name__}: {exc}; no task was submitted",
                )
                return None
            if not go:
                await self.finish(rec, Outcome.IDLE, why)
                return None
        task = Task(
            id=new_id("task"),
            agent=r.assignee,
            prompt=r.description,
            source=f"routine:{r.slug}",
            created=started,
            routine=r.slug,
            expected_output=r.expected_output,
            reviewer=r.reviewer,
        )
        store = self.store
        assert store is not None
        store.post_execute(db.start_fire_stmt(rec.fire_id, started, task.id))
        try:
            outcome = await self._sink.submit(task)
        except asyncio.CancelledError:
            # The run is the runtime's now and is not stopped with us: the row stays open
            # for the next start to follow (see stop()).
            raise
        except Exception as exc:
            outcome = RunOutcome(
                task_id=task.id,
                run_id="",
                agent=r.assignee,
                status=RunStatus.FAILED,
                started=started,
                ended=self._clock.time(),
                reason=(
                    f"the task could not be handed to agent {r.assignee!r}: "
                    f"{type(exc).__name__}: {exc}"
                ),
            )
        result = from_run_status(outcome.status)
        reason = outcome.reason
        if result is not Outcome.OK and not reason:
            reason = f"the run ended {result} and the agent runtime gave no reason"
        await self.finish(
            rec, result, reason, cost_usd=outcome.cost_usd, run_id=outcome.run_id or None
        )
        if r.precondition == "memory_changed":
            # Taken after the run, so the run's own memory writes do not wake it again.
            try:
                await self.save_marker(slot, await self._sink.memory_marker())
            except Exception as exc:
                log.warning("memory marker unavailable after %r ran: %r", r.slug, exc)
        return outcome

    async def follow_resumed(
        self, rec: FireRecord, pending: Awaitable[RunOutcome], slots: Mapping[str, Slot]
    ) -> None:
        """Close a fire left open by a stop once its resumed run ends. Cancelled (the
        scheduler stops again first), the row stays open for the next start."""
        slot = slots.get(rec.routine)
        if slot is not None:
            slot.pending += 1  # the run is active: the overlap policy counts it
        try:
            outcome = await pending
        finally:
            if slot is not None:
                slot.pending -= 1
        result = from_run_status(outcome.status)
        reason = outcome.reason
        if result is not Outcome.OK and not reason:
            reason = f"the run ended {result} and the agent runtime gave no reason"
        await self.finish(
            rec,
            result,
            f"{reason} ({RESUMED})" if reason else RESUMED,
            cost_usd=outcome.cost_usd,
            run_id=outcome.run_id or None,
        )

    async def _precondition(self, slot: Slot) -> tuple[bool, str | None]:
        r = slot.config
        if r.precondition == "inbox_nonempty":
            n = self._sink.inbox_size(r.assignee)
            if n > 0:
                return True, None
            return False, f"no changes: the inbox of {r.assignee!r} is empty; no task submitted"
        marker = await self._sink.memory_marker()
        if slot.marker is None:
            await self.save_marker(slot, marker)
            return False, "no changes: first look, memory baseline recorded; no task submitted"
        if marker == slot.marker:
            return False, "no changes in company memory since the last run; no task submitted"
        return True, None

    async def finish(
        self,
        rec: FireRecord,
        outcome: Outcome,
        reason: str | None,
        *,
        cost_usd: float = 0.0,
        run_id: str | None = None,
    ) -> None:
        """Close a fire that ran (or failed or idled) and publish its event."""
        ended = self._clock.time()
        store = self.store
        assert store is not None
        await store.execute(
            db.finish_fire_stmt(
                rec.fire_id,
                outcome=str(outcome),
                reason=reason,
                ended=ended,
                cost_usd=cost_usd,
                run_id=run_id,
            )
        )
        self.emit(rec, outcome, reason, run_id)

    def record_cancelled(self, rec: FireRecord, reason: str) -> None:
        """Record a fire cancelled before its task was handed over."""
        # Called while being cancelled: post (do not await) so the row is written anyway. The
        # insert of the row was submitted earlier, possibly for the batch after the one being
        # gathered: posting into that one too keeps this UPDATE after it (inserts go first).
        ended = self._clock.time()
        self.emit(rec, Outcome.CANCELLED, reason)
        self.post(
            db.finish_fire_stmt(
                rec.fire_id, outcome=str(Outcome.CANCELLED), reason=reason, ended=ended
            ),
            next_batch=True,
        )

    def post(self, *work: db.Stmt | Callable[[Any], None], next_batch: bool = False) -> None:
        """Queue history writes from a synchronous path (a listener, a cancellation);
        ``next_batch``: statements go into the batch after the one being gathered."""
        try:
            if self.store is None:
                raise StoreError("routine history is closed")
            stmts = tuple(w for w in work if isinstance(w, tuple))
            if stmts and next_batch:
                self.store.post_execute_next(*stmts)
            elif stmts:
                self.store.post_execute(*stmts)
            for w in work:
                if not isinstance(w, tuple):
                    self.store.post(w)
        except StoreError as exc:
            log.error("routine history write lost: %s", exc)
            self._on_store_failure(exc)

    def record_now(self, rec: FireRecord, outcome: Outcome, reason: str) -> None:
        """Record a fire that ends as soon as it happens (missed, skipped) and move the cursor."""
        now = self._clock.time()
        done = replace(rec, outcome=str(outcome), reason=reason, ended=now)
        self.emit(done, outcome, reason)
        if rec.kind == "manual":
            self.post(db.insert_fire_stmt(done))
        else:
            self.post(
                db.insert_fire_stmt(done), db.advance_cursor_stmt(rec.routine, rec.scheduled, now)
            )

    def emit(
        self, rec: FireRecord, outcome: Outcome, reason: str | None, run_id: str | None = None
    ) -> None:
        """Publish the event for a fire that ended ``outcome`` (none for ok and idle)."""
        kind = outcome.event_kind
        if kind is None:
            return
        self._bus.emit(
            kind,
            self.source,
            routine=rec.routine,
            agent=rec.agent,
            scheduled=utc_from_ts(rec.scheduled).isoformat(),
            reason=reason,
            run_id=run_id,
            outcome=str(outcome),
            fire_kind=rec.kind,
            fire_id=rec.fire_id,
        )


def fail_open_fire(c: Any, rec: FireRecord, reason: str, now: float) -> None:
    """Close the fire row a crashed job left open (or add one if it never got that far)."""
    cur = c.execute(
        "UPDATE fires SET outcome = 'failed', reason = ?, ended = ? WHERE routine = ? AND "
        "scheduled = ? AND outcome IS NULL AND kind != 'manual'",
        (reason, now, rec.routine, rec.scheduled),
    )
    if cur.rowcount == 0:
        db.insert_fires(c, [replace(rec, outcome=str(Outcome.FAILED), reason=reason, ended=now)])
        db.advance_cursor(c, rec.routine, rec.scheduled, now)
