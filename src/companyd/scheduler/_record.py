"""The routine history's rows and the events that go with them.

:class:`Recorder` owns the open :class:`~companyd.scheduler._store.RoutineStore` while the
scheduler runs and is the one place that ends a fire: every fire time becomes one history
row, and every outcome but ``ok`` and ``idle`` also one event (``routine_failed``,
``routine_missed``, ``routine_skipped``) with the same fields. A fire that ended ``ok`` and
whose routine has somewhere to deliver its result (``deliver:``) publishes
``routine_result`` with the answer, for the pager to deliver (:meth:`Recorder.result`).
Writes from synchronous paths (an APScheduler listener, a cancellation unwinding) are
posted, not awaited; a write that
cannot be queued is reported through ``on_store_failure`` so the scheduler fails loudly
instead of losing history silently.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from companyd.clock import Clock, utc_from_ts
from companyd.events import (
    Event,
    EventBus,
    RoutineEvent,
    RoutineFailed,
    RoutineMissed,
    RoutineResult,
    RoutineSkipped,
    RoutineUnverified,
    Severity,
)
from companyd.runs import RunOutcome, RunStatus
from companyd.scheduler import _history as history
from companyd.scheduler import _store as db
from companyd.scheduler._catchup import StartPlan
from companyd.scheduler._outcomes import Outcome
from companyd.scheduler._records import UNSCHEDULED
from companyd.scheduler._store import FireRecord, RoutineStore, StoreError

__all__ = ["INTERRUPTED", "UNRECORDED", "Recorder", "fail_open_fire"]

log = logging.getLogger("companyd.scheduler.record")

#: why a fire left running by a stop is closed when its run was not resumed
INTERRUPTED = (
    "interrupted: the daemon stopped before the run ended and the agent runtime did not "
    "resume it; the fire is not run again — see `companyd runs` for what the agent did"
)
#: why a fire dispatched just before a crash, without its history row, is closed
UNRECORDED = (
    "interrupted: the daemon stopped (crash, kill or power loss) just after this fire was "
    "dispatched, before its history row was written; the fire is not run again — see "
    "`companyd runs` for what the agent did"
)


#: The event class of each routine kind an outcome publishes (``Outcome.event_kind``).
_BY_KIND: dict[str, type[RoutineEvent]] = {
    c.KIND: c for c in (RoutineFailed, RoutineMissed, RoutineSkipped, RoutineUnverified)
}
#: From this many ``unverified`` runs of a routine in a row, ``routine_unverified`` is a
#: warning (an alert); before, ``info``.
UNVERIFIED_ALERT_AFTER = 2


class Recorder:
    """Ends fires in the history and on the bus (see module docstring).

    Args:
        bus: where fire events go.
        clock: time source.
        on_store_failure: called when a history write is lost.

    Attributes:
        store: the open history, or None while the scheduler is stopped.
        source: the events' source (the scheduler's path in the supervision tree).
    """

    def __init__(
        self, *, bus: EventBus, clock: Clock, on_store_failure: Callable[[BaseException], None]
    ) -> None:
        self._bus = bus
        self._clock = clock
        self._on_store_failure = on_store_failure
        self.store: RoutineStore | None = None
        self.source = "scheduler"

    def publish(self, event: Event) -> None:
        """Publish a routine event that is not a fire's own (the runaway guards')."""
        self._bus.publish(event)

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
        if outcome is Outcome.UNVERIFIED:
            in_a_row = await store.call(
                functools.partial(history.unverified_in_a_row, routine=rec.routine)
            )
            self._unverified(rec, reason, run_id, in_a_row)
            return
        self.emit(rec, outcome, reason, run_id)

    def _unverified(
        self, rec: FireRecord, reason: str | None, run_id: str | None, in_a_row: int
    ) -> None:
        """Publish ``routine_unverified``: a warning once the routine's runs were unverified
        :data:`UNVERIFIED_ALERT_AFTER` times in a row (one bad answer is shown where the
        result goes; a second in a row is a pattern worth an alert).
        """
        self._bus.publish(
            RoutineUnverified(
                source=self.source,
                severity=(
                    Severity.WARNING if in_a_row >= UNVERIFIED_ALERT_AFTER else Severity.INFO
                ),
                routine=rec.routine,
                agent=rec.agent,
                scheduled=utc_from_ts(rec.scheduled).isoformat(),
                reason=reason,
                run_id=run_id,
                outcome=str(Outcome.UNVERIFIED),
                fire_kind=rec.kind,
                fire_id=rec.fire_id,
                in_a_row=in_a_row,
            )
        )

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
        ``next_batch``: statements go into the batch after the one being gathered.
        """
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
        if rec.kind in UNSCHEDULED:
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
        event = _BY_KIND[kind]
        self._bus.publish(
            event(
                source=self.source,
                routine=rec.routine,
                agent=rec.agent,
                scheduled=utc_from_ts(rec.scheduled).isoformat(),
                reason=reason,
                run_id=run_id,
                outcome=str(outcome),
                fire_kind=rec.kind,
                fire_id=rec.fire_id,
            )
        )

    def result(
        self,
        rec: FireRecord,
        outcome: RunOutcome,
        deliver: tuple[str, ...],
        task: str,
        *,
        approved: bool = False,
    ) -> None:
        """Publish ``routine_result`` for a fire whose run ended ok, when its routine
        delivers its result somewhere (``deliver``: telegram, digest, memory, file) or the
        founder ``approved`` it (the pager confirms that in the thread). The event carries
        the whole answer: the pager puts it in its outbox before anything is sent
        (docs/alerts.md, "Results").
        """
        unverified = outcome.status is RunStatus.UNVERIFIED
        if not (deliver or approved) or not (outcome.ok or unverified) or not outcome.run_id:
            return
        self._bus.publish(
            RoutineResult(
                source=self.source,
                routine=rec.routine,
                agent=outcome.agent or rec.agent,
                run_id=outcome.run_id,
                cost_usd=outcome.cost_usd,
                answer=outcome.answer,
                task=task,
                deliver=list(deliver),
                scheduled=utc_from_ts(rec.scheduled).isoformat(),
                fire_id=rec.fire_id,
                ended=outcome.ended,
                approved=approved or None,
                unverified=(outcome.reason or "unverified") if unverified else None,
                offline=outcome.offline or None,
            )
        )

    def report_missed_at_start(self, plan: StartPlan) -> None:
        """Publish what :func:`~companyd.scheduler._catchup.plan_start` found missed (or
        stopped) while the daemon was down: one event per routine and kind.
        """
        # One event per routine, not per fire time: a heartbeat down for a day must not page
        # the operator 288 times. The history has every fire time.
        r = plan.routine
        stopped = [m for m in plan.missed if m.outcome == Outcome.STOPPED]
        if stopped:
            # Not an alert: the operator chose the downtime (debug: logged, never paged).
            self._bus.publish(
                RoutineSkipped(
                    source=self.source,
                    severity=Severity.DEBUG,
                    routine=r.slug,
                    agent=r.assignee,
                    scheduled=utc_from_ts(stopped[-1].scheduled).isoformat(),
                    reason=stopped[-1].reason,
                    run_id=None,
                    outcome=str(Outcome.STOPPED),
                    fire_kind=stopped[-1].kind,
                    fire_id=stopped[-1].fire_id,
                    count=sum(m.fires for m in stopped),
                    first=utc_from_ts(stopped[0].scheduled).isoformat(),
                )
            )
        missed = [m for m in plan.missed if m.outcome == Outcome.MISSED]
        if not missed:
            return
        latest = missed[-1]
        self._bus.publish(
            RoutineMissed(
                source=self.source,
                routine=r.slug,
                agent=r.assignee,
                scheduled=utc_from_ts(latest.scheduled).isoformat(),
                reason=latest.reason,
                run_id=None,
                outcome=str(Outcome.MISSED),
                fire_kind=latest.kind,
                fire_id=latest.fire_id,
                count=sum(m.fires for m in missed),
                first=utc_from_ts(missed[0].scheduled).isoformat(),
            )
        )


def fail_open_fire(c: Any, rec: FireRecord, reason: str, now: float) -> None:
    """Close the fire row a crashed job left open (or add one if it never got that far)."""
    cur = c.execute(
        "UPDATE fires SET outcome = 'failed', reason = ?, ended = ? WHERE routine = ? AND "
        "scheduled = ? AND outcome IS NULL AND kind NOT IN ('manual', 'webhook')",
        (reason, now, rec.routine, rec.scheduled),
    )
    if cur.rowcount == 0:
        db.insert_fires(c, [replace(rec, outcome=str(Outcome.FAILED), reason=reason, ended=now)])
        db.advance_cursor(c, rec.routine, rec.scheduled, now)
