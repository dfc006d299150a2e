"""The routine scheduler: company.yaml's routines on APScheduler 3, as a supervised child.

A :class:`RoutineScheduler` turns each enabled routine into an APScheduler job (in memory —
company.yaml is the only source of truth and nothing is pickled). When a routine fires it
builds a :class:`~companyd.runs._tasks.Task` and hands it to the agent runtime through a
:class:`~companyd.scheduler._sink.TaskSink`; the run's status becomes the fire's outcome.

Every fire time ends as exactly one history row in ``<state_dir>/routines.sqlite`` — run,
``missed``, ``skipped`` or ``idle`` — and everything but ``ok`` and ``idle`` is also an event
(``routine_failed``, ``routine_missed``, ``routine_skipped``). docs/scheduler.md is the
operator's description; this docstring is the contract:

* **Restart-proof.** Each routine's cursor (the latest fire time dealt with) is committed
  before its task is submitted. On start, fire times after the cursor that passed while the
  daemon was down are missed; ``catch_up: run_once`` runs the latest of them once, at start,
  when it is at most ``grace`` old. A changed trigger (compared by ``repr``, time zone
  included) starts afresh without catch-up. A fire left running by a crash is closed as
  ``cancelled`` and not run again — except a backup routine's: a backup whose latest fire
  produced no backup is taken once at start (:mod:`companyd.scheduler._catchup`,
  :meth:`RoutineScheduler.take_owed_backups`).
* **Concurrency.** ``skip_if_active``: a fire while a run of the same routine is active is
  ``skipped``. ``queue``: it waits for the active run, at most one waiting; a further fire is
  ``skipped``.
* **Preconditions** (``memory_changed``, ``inbox_nonempty``) are checked when the run would
  start; when false the fire is ``idle``: no task, no model call, $0, no event.
* **Misfires.** A fire time reached more than its grace late (blocked loop, suspended host)
  is ``missed`` with the lateness; grace is ``catch_up.grace`` for ``run_once`` routines and
  ``skip_grace`` (60 s) for ``skip`` routines.

This module is the supervised child: APScheduler wiring (jobs, misfire listener), start and
stop, reload, and the views. One fire (its turn, precondition and task) is
:mod:`companyd.scheduler._fire`; its history row and event, :mod:`companyd.scheduler._record`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED

from companyd._aio import race
from companyd._frozen import Frozen
from companyd._fs import DiskAlarm, is_disk_failure
from companyd._sqlite import store_errors
from companyd.admin import AdminError, HistoryData, JobsData
from companyd.clock import Clock, SystemClock, utc_from_ts
from companyd.config import CompanyConfig, RoutineConfig
from companyd.events import EventBus, RoutineResumed
from companyd.runs import RunOutcome
from companyd.scheduler import _guards as guards
from companyd.scheduler import _store as db
from companyd.scheduler._aps import ClockedScheduler, CoalescedMiss, JobDropped
from companyd.scheduler._catchup import BACKUP_CRASHED, Retake, plan_start
from companyd.scheduler._fire import ENDED_AT_STOP, Fires, RoutineBusy, Slot, overlap_reason
from companyd.scheduler._ids import new_id
from companyd.scheduler._outcomes import Outcome
from companyd.scheduler._record import INTERRUPTED, UNRECORDED, Recorder, fail_open_fire
from companyd.scheduler._sink import BackupSink, ResultGate, TaskSink
from companyd.scheduler._store import (
    DB_NAME,
    FireRecord,
    RoutineState,
    RoutineStore,
    StoreError,
)
from companyd.scheduler._triggers import (
    build_trigger,
    format_seconds,
    next_after,
    trigger_identity,
)
from companyd.storage import SQLITE, Backend
from companyd.supervision import ChildContext
from companyd.telemetry import NO_TRACING, Tracer

__all__ = [
    "IDLE_RETENTION",
    "ManualFire",
    "RoutineBusy",
    "RoutineNotFound",
    "RoutineScheduler",
]

log = logging.getLogger("companyd.scheduler.service")

#: ``idle`` rows (a quiet heartbeat: 288 a day) are kept this long, then pruned at start.
IDLE_RETENTION = 35 * 86400.0


def _start_errors() -> tuple[type[BaseException], ...]:
    """What a start that failed opening the history (or reading the desk) raises."""
    return (StoreError, *store_errors())


#: How often a scheduler that could not open its history on a full disk tries again.
DISK_RETRY_SECONDS = 30.0

T = TypeVar("T")


class ManualFire(Frozen):
    """What :meth:`RoutineScheduler.fire_now` came to: the run's ``outcome``, and the desk
    item (``approval_item``) of its result when that waits for the founder's approval
    (the fire goes on until the founder decides), else None (the fire ended).
    """

    outcome: RunOutcome
    approval_item: str | None = None


class RoutineNotFound(AdminError):
    """The operator named a routine that company.yaml does not define (or disables)."""


class RoutineScheduler:
    """Runs company.yaml's routines; a supervised child (``await scheduler.run(ctx)``).

    Args:
        config: the validated company; only ``config.routines`` is read.
        sink: where firing routines send their tasks (the agent runtime).
        state_dir: the daemon's state directory; the history is ``state_dir/routines.sqlite``.
        bus: where ``routine_failed`` / ``routine_missed`` / ``routine_skipped`` are published.
        clock: time source (tests and benchmarks pass a ManualClock).
        max_sleep: longest sleep before the schedule is looked at again (see
            :class:`~companyd.scheduler._aps.ClockedScheduler`); None on a ManualClock run
            makes compressed time cheaper.
        skip_grace: misfire grace of ``catch_up: skip`` routines, in seconds.
        gate: the founder's approval of results (routines with ``approval: required``).
        backups: who takes the backups of backup routines (the daemon).
        backend: where the routine history lives (docs/storage.md): ``routines.sqlite`` in
            ``state_dir`` on ``sqlite``, the company's PostgreSQL schema on ``postgres``.
    """

    def __init__(
        self,
        config: CompanyConfig,
        sink: TaskSink,
        *,
        state_dir: Path,
        bus: EventBus,
        clock: Clock | None = None,
        max_sleep: float | None = 60.0,
        skip_grace: float = 60.0,
        gate: ResultGate | None = None,
        backups: BackupSink | None = None,
        backend: Backend = SQLITE,
        tracer: Tracer = NO_TRACING,
    ) -> None:
        self._config = config
        self._backend = backend
        self._sink = sink
        self.db_path = Path(state_dir) / DB_NAME
        self._bus = bus
        self._clock: Clock = clock or SystemClock()
        #: why the history could not be opened (a full state disk), while it is retried
        self._disk_failure: BaseException | None = None
        self._rec = Recorder(bus=bus, clock=self._clock, on_store_failure=self._store_failed)
        self._gate = gate
        self._fires = Fires(
            sink=sink,
            clock=self._clock,
            recorder=self._rec,
            gate=gate,
            backups=backups,
            tracer=tracer,
        )
        self._max_sleep = max_sleep
        self._skip_grace = skip_grace
        self._slots: dict[str, Slot] = {}
        self._catch_up: dict[str, datetime] = {}
        #: the backups the last start found owed, until take_owed_backups() takes them
        self._owed: list[tuple[Slot, Retake]] = []
        self._aps: ClockedScheduler | None = None
        self._manual: set[asyncio.Task[RunOutcome | None]] = set()
        self._failure: BaseException | None = None
        self._failed = asyncio.Event()
        self._planned_stop: str | None = None
        #: the planned stop (``(at, reason)``) the last start found before it, read from the
        #: clean-stop marker; None: the run before ended otherwise (a crash, a kill -9) or
        #: this is the first start — the daemon's ``daemon_started`` says which
        self.started_after: tuple[float, str] | None = None

    # -- lifecycle --------------------------------------------------------------------

    async def run(self, ctx: ChildContext) -> None:
        """The supervised child: start, signal readiness, run until asked to stop.

        Raises:
            StoreError: routines.sqlite cannot be opened or written (the supervisor restarts
                the scheduler; history must not be lost silently).
        """
        self._rec.source = ctx.path
        ready = False
        while True:
            if not await self._start_or_wait_for_disk(ctx, ready=ready):
                return
            ready = True
            try:
                await race(ctx.stopping.wait(), self._failed.wait())
                failure = self._failure
                if failure is None:
                    return
                error = StoreError(f"routine history cannot be written: {failure}")
                error.__cause__ = failure
                if not is_disk_failure(failure):
                    raise error
                # The state disk refuses writes: stay up without firing (a restart would fail
                # the same way) and start again once the history opens and takes writes.
                log.error("%s; routines stop firing until the state disk takes writes", error)
                DiskAlarm.of(self._bus).failed("routine history", self.db_path, failure)
                self._disk_failure = error
            finally:
                # Not waiting for runs in progress: they are the agents' (journaled; on a
                # daemon stop they are brought to a checkpoint and resume after the restart),
                # and the next start closes each fire with its run's outcome.
                await self.stop(drain=False)
            if not await self._wait_retry(ctx):
                return

    async def _wait_retry(self, ctx: ChildContext) -> bool:
        """Sleep ``DISK_RETRY_SECONDS`` (False: a stop was requested meanwhile)."""
        await race(self._clock.sleep(DISK_RETRY_SECONDS), ctx.stopping.wait())
        return not ctx.stopping.is_set()

    async def _start_or_wait_for_disk(self, ctx: ChildContext, *, ready: bool) -> bool:
        """:meth:`start`, reporting ready; on a full or failing state disk, report ready
        anyway (degraded: no routine fires) and retry every ``DISK_RETRY_SECONDS`` until it
        starts (True) or a stop is requested (False). Other failures raise.
        """
        while True:
            try:
                await self.start()
            except _start_errors() as exc:
                # start() opens the routine history and also reads the founder's desk
                # (results waiting for approval): either file fails the same way on a full
                # disk. Taking only the history's StoreError for the disk's made the
                # desk's raw sqlite3 error a crash: 62 restarts in one chaos-test outage.
                if is_disk_failure(exc):
                    self._disk_failure = exc  # before the await: jobs() says "unavailable"
                await self._close_store()
                if not is_disk_failure(exc):
                    raise
                if not ready:
                    what, path = (
                        ("routine history", self.db_path)
                        if isinstance(exc, StoreError)
                        else ("founder's desk", self.db_path.parent)
                    )
                    log.error("routines do not fire until the state disk takes writes: %s", exc)
                    DiskAlarm.of(self._bus).failed(what, path, exc)
                    ctx.started()
                    ready = True
                if not await self._wait_retry(ctx):
                    return False
                continue
            self._disk_failure = None
            # start() wrote (it closed the fires left open): the history takes writes, so
            # its part of a disk outage is over (the alarm clears when no store fails)
            DiskAlarm.of(self._bus).recovered("routine history")
            DiskAlarm.of(self._bus).recovered("founder's desk")
            if ready:
                log.warning("the routine history opened: routines fire again")
            else:
                ctx.started()
            self.take_owed_backups()
            return True

    @property
    def running(self) -> bool:
        """Whether the APScheduler is running (between a successful :meth:`start` and the stop)."""
        return self._aps is not None

    def planned_stop(self, why: str) -> None:
        """Say that the coming stop is deliberate (SIGTERM, ``systemctl restart``): the
        stop then leaves a clean-stop marker in routines.sqlite, and the next start records
        the fire times that fell meanwhile as ``stopped``, not ``missed``. A stop without
        it (a crash never calls anything) leaves no marker.
        """
        self._planned_stop = why or "planned stop"

    async def start(self) -> None:
        """Open the history, settle what happened while the daemon was down, arm every job.

        Raises:
            StoreError: routines.sqlite cannot be opened or is from a newer companyd.
            RuntimeError: already started.
        """
        if self._rec.store is not None:
            raise RuntimeError("RoutineScheduler.start() called twice; call stop() first")
        self._failure = None
        self._failed.clear()
        self._planned_stop = None
        store = RoutineStore(self.db_path, on_error=self._store_failed, backend=self._backend)
        self._rec.store = store
        try:
            await store.open()
            now = self._clock.time()
            agents = {slug: r.assignee for slug, r in self._config.routines.items()}
            # Fires whose run was handed over when the scheduler (or the daemon) stopped: the
            # runtime resumes the run from its journal, and the fire then ends with the run.
            following: list[tuple[FireRecord, Awaitable[RunOutcome], bool, str | None]] = []
            for rec in await store.call(db.open_fires):
                pending = self._sink.resumed(rec.task_id) if rec.task_id else None
                if pending is not None:
                    following.append((rec, pending, True, None))
                    continue
                if not rec.task_id:
                    continue
                if self._gate is not None:
                    # the run had ended and its result waited for the founder's approval
                    settling = await self._gate.resumed(rec.task_id)
                    if settling is not None:
                        following.append((rec, settling, False, None))
                        continue
                # The run ended within the stop (its last step finished in the stop's grace,
                # after this scheduler had stopped following it): the fire takes that outcome,
                # and its result is delivered, rather than "cancelled … not resumed".
                ended = await self._sink.ended_outcome(rec.task_id)
                if ended is not None:
                    done: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()
                    done.set_result(ended)
                    following.append((rec, done, True, ENDED_AT_STOP))
            keep = frozenset(rec.fire_id for rec, _, _, _ in following)
            # a backup a crash cut short is taken again at this start (see _catchup)
            crashed = {
                slug: BACKUP_CRASHED
                for slug, r in self._config.routines.items()
                if r.backup is not None
            }
            interrupted, unrecorded = await store.call(
                lambda c: (
                    db.close_interrupted(c, now, INTERRUPTED, keep=keep, reasons=crashed),
                    db.close_unrecorded(c, now, UNRECORDED, agents, crashed),
                )
            )
            for rec in interrupted:
                self._rec.emit(rec, Outcome.CANCELLED, crashed.get(rec.routine, INTERRUPTED))
            for rec in unrecorded:
                self._rec.emit(rec, Outcome.CANCELLED, crashed.get(rec.routine, UNRECORDED))
            routines = [r for r in self._config.routines.values() if r.enabled]
            backups = [r.slug for r in routines if r.backup is not None]
            states, stopped, latest = await store.call(
                lambda c: (db.load_states(c), db.clean_stop(c), db.latest_scheduled(c, backups))
            )
            self.started_after = stopped
            # Walking cron fire times over a long outage is CPU work: keep it off the loop.
            plans = await asyncio.to_thread(plan_start, routines, states, now, stopped, latest)
            stale = set(states) - {p.routine.slug for p in plans}

            def write(c: Any) -> None:
                # The marker goes in the same transaction as the rows it decided: a crash
                # before this commit leaves it for the next start, after it nothing.
                db.clear_clean_stop(c)
                db.insert_fires(c, [m for p in plans for m in p.missed])
                for p in plans:
                    db.put_state(c, p.state, forward=True)
                db.delete_states(c, stale)
                db.prune_idle(c, now - IDLE_RETENTION)

            await store.call(write)
            for p in plans:
                self._rec.report_missed_at_start(p)
            self._slots = {
                p.routine.slug: Slot(
                    config=p.routine,
                    trigger=p.trigger,
                    identity=p.identity,
                    marker=p.state.memory_marker,
                )
                for p in plans
            }
            self._catch_up = {p.routine.slug: p.catch_up for p in plans if p.catch_up is not None}
            await self._fires.take_baselines(self._slots.values())
            aps = ClockedScheduler(
                self._clock,
                max_sleep=self._max_sleep,
                timezone="UTC",
                job_defaults={"coalesce": True},
            )
            aps.add_listener(
                self._on_aps_event, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_ERROR
            )
            aps.start()
            self._aps = aps
            for p in plans:
                if p.next_run is not None:
                    self._add_job(self._slots[p.routine.slug], p.next_run)
            for rec, pending, run_resumed, why in following:
                follower = asyncio.ensure_future(
                    self._fires.follow_resumed(
                        rec, pending, self._slots, needs_approval=run_resumed, why=why
                    )
                )
                self._manual.add(follower)
                follower.add_done_callback(self._manual.discard)
            self._owed = [
                (self._slots[p.routine.slug], p.retake) for p in plans if p.retake is not None
            ]
        except BaseException:
            await self.stop(drain=False)
            raise

    async def stop(self, *, drain: bool = True) -> None:
        """Stop firing; let runs in progress end (``drain``), then close the history.

        Without ``drain`` (or if this coroutine is cancelled while draining), a fire whose
        task is already with the agent runtime is left open: the run goes on, or resumes from
        the journal after a restart, and the next :meth:`start` closes the fire with the run's
        outcome (or as ``cancelled`` if the runtime no longer holds the task). Fires still
        waiting for their turn are recorded as ``cancelled``.
        """
        aps, self._aps = self._aps, None
        tasks: set[asyncio.Future[Any]] = set()
        try:
            if aps is not None:
                aps.pause()
            if self._planned_stop is not None and self._rec.store is not None:
                why, self._planned_stop = self._planned_stop, None
                at = self._clock.time()
                try:
                    await self._rec.store.call(lambda c: db.mark_clean_stop(c, at, why))
                except Exception as exc:  # e.g. a full disk: the next start counts misses
                    log.warning(
                        "could not record the planned stop in %s (%s); fire times until the "
                        "next start will be recorded as missed",
                        self.db_path,
                        exc,
                    )
            tasks = set(self._manual)
            if aps is not None:
                tasks |= aps.executor.tasks
            if drain and tasks:
                await asyncio.wait(tasks)
        finally:
            # Cancelled anywhere above (the supervisor's shutdown time ran out), the rest
            # still runs: the history's worker is not a daemon thread, and left waiting for
            # work it would keep the process from exiting after the loop ended.
            tasks |= set(self._manual)
            for t in tasks:
                t.cancel()
            if aps is not None:
                aps.shutdown(wait=False)
            try:
                if tasks:
                    await asyncio.gather(*tasks, return_exceptions=True)
                await asyncio.sleep(0)  # shutdown is dispatched with call_soon_threadsafe
            finally:
                await self._close_store()

    async def _close_store(self) -> None:
        store, self._rec.store = self._rec.store, None
        if store is None:
            return
        try:
            await store.drain()
            await store.close()
        finally:
            # Cancelled while waiting: the worker still writes what it was given, then ends.
            store.close_nowait()

    def _store_failed(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._failed.set()

    def _add_job(self, slot: Slot, next_run: datetime) -> None:
        assert self._aps is not None
        self._aps.add_job(
            self._fire,
            trigger=slot.trigger,
            args=[slot.config.slug],
            id=slot.config.slug,
            name=slot.config.slug,
            next_run_time=next_run,
            **self._job_options(slot.config),
        )

    def _job_options(self, r: RoutineConfig) -> dict[str, Any]:
        # Set explicitly, never left to APScheduler's defaults (misfire grace 1 s).
        grace = r.catch_up.grace if r.catch_up.policy == "run_once" else self._skip_grace
        return {
            "coalesce": True,
            "max_instances": 1 if r.concurrency == "skip_if_active" else 2,
            "misfire_grace_time": max(1, math.ceil(grace)),  # APScheduler wants whole seconds
        }

    # -- reload -----------------------------------------------------------------------

    async def reconfigure(self, config: CompanyConfig) -> dict[str, list[str]]:
        """Apply a new company.yaml's routines without disturbing the others.

        Routines whose trigger is unchanged keep their next fire time, runs in progress and
        history (assignee, description, concurrency and precondition changes take effect at
        the next fire). A changed trigger starts afresh at its next fire time after now. Added
        routines fire from their next fire time; removed or disabled ones stop (a run in
        progress ends normally) and forget their cursor, so re-enabling one later owes no
        catch-up for the time it was off.

        Returns:
            ``{"added": [...], "removed": [...], "changed": [...], "unchanged": [...]}``:
            ``changed`` lists every routine whose resolved config differs in anything
            (those with the same trigger keep their next fire time), ``unchanged`` only
            those identical.

        While the scheduler is not running (between two starts: a crash's backoff, a state
        disk that refuses writes) nothing is armed: ``config`` is kept for its next start,
        which plans from it, and the result compares it with the routines it replaces.
        """
        aps, store = self._aps, self._rec.store
        wanted = {s: r for s, r in config.routines.items() if r.enabled}
        result: dict[str, list[str]] = {"added": [], "removed": [], "changed": [], "unchanged": []}
        if aps is None or store is None:
            # a reload must not fail half-way (agents on the new file, routines on none)
            had = {s: r for s, r in self._config.routines.items() if r.enabled}
            result["removed"] = [s for s in had if s not in wanted]
            for slug, r in wanted.items():
                key = "added" if slug not in had else "unchanged" if had[slug] == r else "changed"
                result[key].append(slug)
            self._config = config
            return result
        now = self._clock.time()
        now_dt = utc_from_ts(now)
        states: list[RoutineState] = []
        removed = [s for s in self._slots if s not in wanted]
        for slug in removed:
            if aps.get_job(slug) is not None:  # None: its schedule had ended
                aps.remove_job(slug)
            del self._slots[slug]
            self._catch_up.pop(slug, None)
            result["removed"].append(slug)
        for slug, r in wanted.items():
            trigger = build_trigger(r)
            ident = trigger_identity(trigger)
            slot = self._slots.get(slug)
            if slot is not None and slot.identity == ident:
                # the whole resolved routine decides what is reported: a change of its
                # approval, deliver, reviewer, … is a change, though its schedule stays
                result["unchanged" if slot.config == r else "changed"].append(slug)
                slot.config = r
                if aps.get_job(slug) is not None:
                    aps.modify_job(slug, **self._job_options(r))
                continue
            nxt = next_after(trigger, now_dt)
            if slot is not None:
                slot.config, slot.trigger, slot.identity = r, trigger, ident
                self._catch_up.pop(slug, None)
                if aps.get_job(slug) is not None:
                    aps.remove_job(slug)
                result["changed"].append(slug)
            else:
                slot = Slot(config=r, trigger=trigger, identity=ident)
                self._slots[slug] = slot
                result["added"].append(slug)
            if nxt is not None:
                self._add_job(slot, nxt)
            states.append(
                RoutineState(
                    routine=slug,
                    trigger=ident,
                    cursor=now,
                    memory_marker=slot.marker,
                    updated=now,
                )
            )
        # Changed routines keep their last fire time; put_state would reset it, so read first.

        def write(c: Any) -> None:
            old = db.load_states(c)
            for st in states:
                prev = old.get(st.routine)
                db.put_state(c, replace(st, last_fire=prev.last_fire if prev else None))
            db.delete_states(c, removed)

        # The jobs are armed from here on: the config is the one in force, whatever the
        # write does. A history that refuses it (a full state disk) fails the scheduler as
        # a failed posted write does — it stops, and its next start plans from `config` —
        # rather than the reload, which would stop half-way with the agents on the new file.
        self._config = config
        try:
            await store.call(write)
        except StoreError as exc:
            log.error("the reloaded routines could not be written to the history: %s", exc)
            self._store_failed(exc)
            return result
        await self._fires.take_baselines(self._slots.values())
        return result

    # -- firing -----------------------------------------------------------------------

    def take_owed_backups(self) -> None:
        """Take the backups :meth:`start` found owed, now, each once (docs/scheduler.md,
        "Backup routines"): the backup routines whose latest fire produced no backup (the
        stop came under it, a crash cut it short, it passed while the daemon was down).
        :meth:`run` calls it once the scheduler has reported ready; a caller of
        :meth:`start` itself calls it when it wants them. Each is a ``catch_up`` fire whose
        reason ends with why, claimed as every catch-up fire is: of two schedulers that
        found the same backup owed, one takes it.
        """
        owed, self._owed = self._owed, []
        if self._aps is None:
            return  # stopped meanwhile: the next start finds them owed again
        for slot, retake in owed:
            self._take_again(slot, retake)

    def _take_again(self, slot: Slot, retake: Retake) -> None:
        """Take backup routine ``slot``'s owed backup now: a ``catch_up`` fire at
        ``retake.at`` whose reason ends with ``retake.why``. A fire beside the jobs, as a
        manual run is: its fire time is not on the schedule (and may be older than the
        misfire grace).
        """

        async def fire() -> RunOutcome | None:
            try:
                return await self._fires.execute(
                    slot,
                    "catch_up",
                    retake.at.timestamp(),
                    check_precondition=False,
                    why=retake.why,
                )
            except StoreError as exc:
                self._store_failed(exc)  # as a scheduled fire's: the child fails loudly
                raise

        task = asyncio.ensure_future(fire())
        self._manual.add(task)
        task.add_done_callback(self._manual.discard)
        task.add_done_callback(_log_retake_failure)

    async def _fire(self, routine: str, *, scheduled: datetime | None = None) -> None:
        """APScheduler's job function: one fire time of ``routine``."""
        slot = self._slots.get(routine)
        if slot is None or scheduled is None:
            log.warning("fire of %r at %s ignored: routine no longer scheduled", routine, scheduled)
            return
        kind = "scheduled"
        if self._catch_up.get(routine) == scheduled:
            del self._catch_up[routine]
            kind = "catch_up"
        try:
            await self._fires.execute(slot, kind, scheduled.timestamp(), check_precondition=True)
        except StoreError as exc:
            self._store_failed(exc)  # history cannot be written: the child must fail loudly
            raise

    async def run_now(self, routine: str) -> RunOutcome:
        """Fire ``routine`` now, outside its schedule, and wait for the run to end.

        The precondition is not checked (the operator asked for a run); the concurrency
        policy is: with ``queue`` the run waits for an active one. The schedule's cursor does
        not move. The run is recorded as a ``manual`` fire, not counted in the success rate.
        If the caller is cancelled, the run goes on and is recorded. A routine with
        ``approval: required`` ends only when the founder decides (see :meth:`fire_now`).

        Raises:
            RoutineNotFound: no enabled routine of that name.
            RoutineBusy: the concurrency policy has no room (a run is active and the policy
                is ``skip_if_active``, or the one queue place is taken).
            AdminError: the scheduler is not running (the state disk, a restart).
        """
        return (await self.fire_now(routine, until_asked=False)).outcome

    async def fire_now(
        self, routine: str, *, until_asked: bool = True, fire_id: str | None = None
    ) -> ManualFire:
        """:meth:`run_now`, but with ``until_asked`` it returns as soon as the run's result
        waits for the founder's approval (``approval: required``) — the fire goes on, and
        ends when the founder decides — rather than when the fire ends. ``fire_id``: the
        fire's id when the caller chose it (to follow its run: :meth:`fire_task`).

        Raises:
            RoutineNotFound, RoutineBusy, AdminError: as :meth:`run_now`.
        """
        if self._aps is None:
            raise self._unavailable()
        slot = self._slots.get(routine)
        if slot is None:
            raise self._not_found(routine)
        fire_id = fire_id or new_id("fire")
        asked: asyncio.Future[ManualFire] = asyncio.get_running_loop().create_future()
        if until_asked:

            def told(outcome: RunOutcome, item_id: str) -> None:
                if not asked.done():
                    asked.set_result(ManualFire(outcome=outcome, approval_item=item_id))

            self._fires.when_asked(fire_id, told)
        task = asyncio.ensure_future(
            self._fires.execute(
                slot, "manual", self._clock.time(), check_precondition=False, fire_id=fire_id
            )
        )
        self._manual.add(task)
        task.add_done_callback(self._manual.discard)
        try:
            # neither is cancelled with the caller: the fire goes on and is recorded
            await asyncio.wait((task, asked), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._fires.forget_asked(fire_id)
        if asked.done():
            return asked.result()
        asked.cancel()
        outcome = task.result()
        assert outcome is not None  # manual runs are never idle
        return ManualFire(outcome=outcome)

    def fire_task(self, fire_id: str) -> str | None:
        """The id of fire ``fire_id``'s task while its run is under way, else None."""
        return self._fires.task_of(fire_id)

    async def fire_webhook(self, routine: str, webhook_id: str, body: str) -> tuple[str, bool]:
        """Fire ``routine`` for a verified webhook request (``webhook-id``, its body as
        text) without waiting for the run: ``(fire id, replay)``.

        The id is remembered in the routine history before anything runs, in the same
        transaction that says whether it was new: a replay (``replay`` True, the first
        fire's id) runs nothing, even after a restart. A new one is fired as kind
        ``webhook``: the routine's concurrency, runaway guards, approval, ``done_when``,
        delivery and history apply as to a scheduled fire; its precondition is not checked
        (the event is the reason to run) and no schedule cursor moves. ``body`` is handed to
        the agent as data (:func:`companyd.scheduler._fire.webhook_prompt`).

        Raises:
            RoutineNotFound: no enabled routine of that name, or it has no webhook trigger.
            AdminError: the scheduler is not running (a standby, a full disk).
        """
        if self._aps is None and self._disk_failure is not None:
            raise AdminError(f"routines are unavailable: {self._disk_failure}")
        store = self._rec.store
        if self._aps is None or store is None:
            # a standby of a highly available company, or a daemon still starting: the
            # sender retries (the dashboard answers 503)
            raise AdminError("routines are not running in this daemon now; try again later")
        slot = self._slots.get(routine)
        if slot is None:
            raise self._not_found(routine)
        if slot.config.webhook is None:
            raise RoutineNotFound(
                f"routine {routine!r} has no webhook trigger; add 'trigger: {{webhook: "
                "{secret_env: NAME}}' to it in company.yaml and reload"
            )
        fire_id = new_id("fire")
        now = self._clock.time()
        first = await store.call(
            lambda c: db.claim_webhook_id(c, routine, webhook_id, fire_id, now)
        )
        if first is not None:
            return first, True
        task = asyncio.ensure_future(
            self._fires.execute(
                slot, "webhook", now, check_precondition=False, event=body, fire_id=fire_id
            )
        )
        self._manual.add(task)
        task.add_done_callback(self._manual.discard)
        task.add_done_callback(_log_webhook_failure)
        return fire_id, False

    def _not_found(self, routine: str) -> RoutineNotFound:
        known = list(self._config.routines)
        r = self._config.routines.get(routine)
        if r is not None and not r.enabled:
            return RoutineNotFound(
                f"routine {routine!r} is disabled in company.yaml; set 'enabled: true' and "
                "reload the daemon's configuration to run it"
            )
        import difflib  # here: only a misspelt name needs it (issue 31: not at the daemon's start)

        close = difflib.get_close_matches(routine, known, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return RoutineNotFound(
            f"no routine {routine!r} in company.yaml; {hint}routines: "
            f"{', '.join(known) or '(none)'}"
        )

    def _on_aps_event(self, event: Any) -> None:
        """APScheduler listener: misfires, max-instances skips and job errors — never silent."""
        slot = self._slots.get(event.job_id)
        agent = slot.config.assignee if slot else "?"
        now = self._clock.time()

        def rec(when: datetime) -> FireRecord:
            return FireRecord(
                fire_id=new_id("fire"),
                routine=event.job_id,
                agent=agent,
                kind="scheduled",
                scheduled=when.timestamp(),
                fired=now,
            )

        if event.code == EVENT_JOB_MISSED:
            when = event.scheduled_run_time
            late = format_seconds(max(0.0, now - when.timestamp()))
            if isinstance(event, CoalescedMiss):
                reason = (
                    f"misfire: the scheduler reached this fire time {late} late (blocked event "
                    "loop, suspended host or a clock step) and folded it into the later one"
                )
            else:
                grace = self._job_options(slot.config)["misfire_grace_time"] if slot else 0
                reason = (
                    f"misfire: the scheduler reached this fire time {late} late, beyond the "
                    f"grace of {format_seconds(grace)} (blocked event loop, suspended host or "
                    "a clock step)"
                )
            self._rec.record_now(rec(when), Outcome.MISSED, reason)
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            for when in event.scheduled_run_times:
                reason = overlap_reason(slot) if slot else "overlap"
                self._rec.record_now(rec(when), Outcome.SKIPPED, reason)
        elif event.code == EVENT_JOB_ERROR:
            exc = event.exception
            log.error(
                "routine %r fire at %s failed inside the scheduler: %r\n%s",
                event.job_id,
                event.scheduled_run_time,
                exc,
                getattr(event, "traceback", "") or "",
            )
            if exc is not None and is_disk_failure(exc):
                reason = f"the state disk refuses writes: {type(exc).__name__}: {exc}"
            else:
                reason = (
                    f"internal error in the scheduler: {type(exc).__name__}: {exc}; this is a "
                    "bug — report it with the daemon log"
                )
            if isinstance(event, JobDropped):
                reason += "; the routine stopped firing until the next reload or restart"
            r = rec(event.scheduled_run_time)
            self._rec.emit(r, Outcome.FAILED, reason)
            self._rec.post(lambda c: fail_open_fire(c, r, reason, now))  # a function: it reads

    # -- views ------------------------------------------------------------------------

    def _unavailable(self) -> AdminError:
        """Why the routines cannot be read or run now (the scheduler is not running): the
        state disk, or a stop between two starts (a crash's backoff) — a plain answer for
        the operator (``status`` shows no routines), never an internal error.
        """
        if self._disk_failure is not None:
            return AdminError(f"routines are unavailable: {self._disk_failure}")
        return AdminError(
            "routines are unavailable: the scheduler is not running (restarting, see "
            "`companyd status`); try again in a minute"
        )

    def next_fire_time(self, routine: str) -> datetime | None:
        """When ``routine`` fires next (None: not scheduled)."""
        if self._aps is None:
            return None
        job = self._aps.get_job(routine)
        return None if job is None else job.next_run_time

    async def jobs(self) -> JobsData:
        """Each routine: schedule, next fire, last outcome, 7-day success rate (JSON-ready;
        the same shape as ``companyd jobs --json``).
        """
        # here, not at the top: only a `jobs` request needs the report (issue 31)
        from companyd.scheduler._report import SUCCESS_WINDOW, job_views

        store = self._rec.store
        if store is None:
            raise self._unavailable()
        now = self._clock.time()
        stats, latest, open_, paused = await self._read(
            store,
            lambda c: (
                db.routine_stats(c, now - SUCCESS_WINDOW),
                db.latest_fires(c),
                db.open_fires(c),
                guards.paused_routines(c),
            ),
        )
        nexts: dict[str, float | None] = {}
        for slug in self._slots:
            nxt = self.next_fire_time(slug)
            nexts[slug] = nxt.timestamp() if nxt else None
        views = job_views(
            self._config,
            stats=stats,
            latest=latest,
            open_fires=open_,
            next_fires=nexts,
            paused=paused,
        )
        return {
            "daemon": True,
            "generated": utc_from_ts(now).isoformat(),
            "routines": [v.to_dict() for v in views],
        }

    async def _read(self, store: RoutineStore, fn: Callable[[Any], T]) -> T:
        """``store.call(fn)`` for the operator's questions: a history that cannot be read
        (the state disk failing while it is opened for a retry, or it is closed meanwhile)
        answers "unavailable" instead of failing ``status`` and ``jobs``.
        """
        try:
            return await store.call(fn)
        except StoreError as exc:
            raise AdminError(f"routines are unavailable: {exc}") from exc

    async def history(self, routine: str, limit: int = 20) -> HistoryData:
        """The latest ``limit`` fires of ``routine``, newest first (JSON-ready).

        Raises:
            RoutineNotFound: neither company.yaml nor the history knows the routine.
        """
        store = self._rec.store
        if store is None:
            raise self._unavailable()
        records: list[db.FireRecord] = await self._read(
            store, lambda c: db.recent_fires(c, routine, limit)
        )
        if not records and routine not in self._config.routines:
            raise self._not_found(routine)
        from companyd.scheduler._report import history_data  # as jobs(): the report's module

        return history_data(self._config.routines, routine, records)

    async def resume_routine(self, routine: str, by: str = "operator") -> bool:
        """Resume ``routine`` after ``pause_after_failures`` paused it: its fires run again,
        and the failures before now no longer count toward the next pause (docs/scheduler.md,
        "Runaway routines"). False if it was not paused. One ``routine_resumed`` event.

        Raises:
            RoutineNotFound: no routine of that name in company.yaml.
        """
        store = self._rec.store
        if store is None:
            raise self._unavailable()
        if routine not in self._config.routines:
            raise self._not_found(routine)
        now = self._clock.time()
        was = await store.call(lambda c: guards.resume_routine(c, routine, now))
        if was:
            self._rec.publish(RoutineResumed(source=self._rec.source, routine=routine, by=by))
        return bool(was)

    async def paused_routines(self) -> dict[str, str]:
        """Routine → why ``pause_after_failures`` paused it (empty when the scheduler is
        stopped).
        """
        store = self._rec.store
        if store is None:
            return {}
        return dict(await self._read(store, guards.paused_routines))

    # -- compressed time --------------------------------------------------------------

    @property
    def next_wakeup(self) -> float | None:
        """Seconds on the clock until the scheduler next looks at its jobs (None: idle)."""
        return None if self._aps is None else self._aps.next_wakeup

    @property
    def in_flight(self) -> set[asyncio.Future[Any]]:
        """The fires in progress now (waiting for their turn or running), manual ones too."""
        busy: set[asyncio.Future[Any]] = {t for t in self._manual if not t.done()}
        if self._aps is not None:
            busy |= self._aps.executor.tasks
        return busy

    async def settle(self, *, runs: bool = True) -> None:
        """Return once nothing is due at the clock's current time: no wakeup pending, every
        history write committed, and (``runs``) no fire in flight.

        For tests and the compressed-time harness on a ManualClock. With ``runs`` it waits for
        runs in flight to end, so the sink must not itself wait on that ManualClock; with
        ``runs=False`` runs blocked in the sink (a test holding them open) are left alone.
        """
        quiet = 0
        while quiet < 3:
            await asyncio.sleep(0)
            if runs:
                busy = self.in_flight
                if busy:
                    quiet = 0
                    await asyncio.wait(busy)
                    continue
            if self._rec.store is not None and self._rec.store.pending:
                quiet = 0
                await self._rec.store.drain()
                continue
            if self._aps is not None and self._aps.busy:
                quiet = 0
                continue
            quiet += 1


def _log_retake_failure(task: asyncio.Future[Any]) -> None:
    """A backup taken again at start that failed outside its own record: logged."""
    if not task.cancelled() and task.exception() is not None:
        log.error("a backup taken again at start failed: %r", task.exception())


def _log_webhook_failure(task: asyncio.Future[Any]) -> None:
    """A webhook fire's own error (its history cannot be written): logged, never lost."""
    if not task.cancelled() and task.exception() is not None:
        log.error("a webhook fire failed: %r", task.exception())
