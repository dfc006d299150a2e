"""The composition root: :class:`Daemon` is the whole company as one supervised process.

The daemon assembles every service into the supervision tree, in this start order (and
stops them in the reverse order):

    memory → spend → alerts → agents (departments → agents) → scheduler → control

then tells systemd it is ready, pings the watchdog from the event loop, answers the
operator (control socket and Telegram; the :class:`~companyd.admin.Admin` operations are
:mod:`companyd.daemon._operator`'s), reloads company.yaml on SIGHUP
(:mod:`companyd.daemon._reload`) and stops gracefully on SIGTERM/SIGINT. ``companyd run``
(:mod:`companyd.cli._run`) starts it; docs/daemon.md lists exit codes, signals and the
state directory.

The wiring — every runtime seam is connected in :meth:`Daemon.__init__` (and the two
methods the table names), nowhere else; each is marked ``# seam:`` there:

=====================  ==================================  =====================================
seam                   provided by                          handed to
=====================  ==================================  =====================================
EventBus (publish)     ``Daemon.bus``                       every service's ``bus=``
storage ``Backend``    :func:`state_backend` (+ the         every store's ``backend=``
                       leadership's fence)
TaskSink               :class:`companyd.agents.Staff`       :class:`RoutineScheduler` (``sink``)
ResultGate             :class:`companyd.agents.             :class:`RoutineScheduler` (``gate=``)
                       ResultApprovals` over the desk
BackupSink             ``Daemon`` (:mod:`.backups` mixin)   :class:`RoutineScheduler`
                                                            (``backups=``)
Admin                  ``Daemon`` (:mod:`.operator` mixin)  alerts (``admin=``), the control
                                                            socket, the web dashboard
agent ports            journal, memory, spend book, model   :class:`Staff` → each agent's
                       backend, desk, proposals             ``AgentDeps``
Tracer                 :func:`telemetry_tracer` (no-op      :class:`Staff` (``tracer=``),
                       unless telemetry is on)              :class:`RoutineScheduler`
reload callback        ``Daemon._reload_after_apply``       :class:`companyd.desk.Proposals`
bus subscriptions      alerts (at construction), the        — ; the event log
                       dashboard's live streams (per        (:func:`log_events`) in
                       request), metrics                    :meth:`Daemon.main`, metrics in
                                                            :meth:`Daemon._build_tree`
supervision tree       services + ``Staff.child``           :meth:`Daemon._build_tree`
=====================  ==================================  =====================================
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd import __version__
from companyd._aio import cancel_and_wait, race
from companyd._fs import DiskAlarm, private_dir
from companyd._heap import freeze_startup_heap, resume_collection
from companyd._sqlite import SchemaTooNew
from companyd.admin import LeaderBlock, RunInFlight, SpendStatus, result_data, status_line
from companyd.agents import ResultApprovals, Staff
from companyd.alerts import AlertService
from companyd.clock import Clock, SystemClock
from companyd.config import CompanyConfig, state_backend
from companyd.daemon._backups import Backups
from companyd.daemon._control import ControlServer
from companyd.daemon._dashboard import WebDashboard
from companyd.daemon._deliveries import ResultRecords
from companyd.daemon._launch import take_early_sighup
from companyd.daemon._logs import log_events
from companyd.daemon._operator import NO_SPEND, Operator
from companyd.daemon._protocol import socket_path
from companyd.daemon._reload import Reloader, ReloadRecord
from companyd.daemon._standby import stand_by
from companyd.daemon._systemd import LoopLagMonitor, Notifier, StatusUpdater, Watchdog
from companyd.daemon._toolsops import ToolsOps
from companyd.daemon._tree import build_company_tree
from companyd.daemon._views import Views
from companyd.desk import DEFAULT_APPROVAL_TIMEOUT, Desk, Proposals, ToolStore
from companyd.errors import EX_CONFIG, EX_SOFTWARE, CompanydError
from companyd.events import (
    DaemonStarted,
    DaemonStopping,
    EventBus,
    LeadershipTaken,
    StateDirTightened,
)
from companyd.llm import ModelBackend
from companyd.memory import MemoryNotAGraph, MemoryService, MemoryUnsafePath
from companyd.runs import Journal, RunRetention, Task
from companyd.scheduler import RoutineScheduler
from companyd.spend import BudgetExhausted, SpendBook
from companyd.supervision import (
    Backoff,
    ChildSpec,
    StandaloneContext,
    SupervisorGaveUp,
    SupervisorStartError,
)
from companyd.telemetry import NO_TRACING, Tracer, telemetry_endpoint

if TYPE_CHECKING:  # types only: they import PostgreSQL's driver (issue 31)
    from companyd.storage import LeaderInfo, Leadership

__all__ = [
    "AGENT_SHUTDOWN",
    "SERVICE_BACKOFF",
    "Daemon",
]

log = logging.getLogger("companyd.daemon")

#: How long an agent gets to bring its current step to a checkpoint when asked to stop.
AGENT_SHUTDOWN = 20.0


#: Restart delay of the built-in services. Their failures are mostly the environment's (a
#: full or failing state disk, a held lock): restarting at once would fail the same way and
#: trip the root's intensity (2 restarts in 60 s) within milliseconds, ending the daemon.
#: Delays 1 s, 8 s, then 60 s: however long the cause lasts, no 60 s window holds more than
#: two restarts, so the daemon stays up, degraded, and recovers by itself when it clears.
SERVICE_BACKOFF = Backoff(min=1.0, max=60.0, factor=8.0, jitter=0.2, reset_after=60.0)


class Daemon(Operator, Views, Reloader, Backups, ToolsOps):
    """The running company: builds the tree, serves the operator, reloads, stops.

    Args:
        config: the validated company.yaml.
        state_dir: the state directory (locked by the caller).
        backend: the model backend (Claude or offline).
        offline: whether ``backend`` is the offline model (shown in status).
        clock: time source.
        control_group: group for a 0660 control socket.
        redact: registers a secret with the log redactor.
        oneoff: run only memory, spend and the agents — for ``companyd ask`` without a
            daemon: no routines fire, no alerts go out, no control socket opens.
    """

    def __init__(
        self,
        config: CompanyConfig,
        state_dir: Path,
        *,
        backend: ModelBackend,
        offline: bool = False,
        clock: Clock | None = None,
        control_group: str | None = None,
        redact: Any = None,
        oneoff: bool = False,
    ) -> None:
        self.config = config
        #: the file the daemon started with: what its settings read only at start (memory
        #: path, model client, metrics, dashboard, telemetry) run with until the restart
        self.started_config = config
        self.state_dir = state_dir
        #: the state directory's mode if it was open to the group or others (now 0700)
        self.tightened_from = private_dir(state_dir)
        self.oneoff = oneoff
        self.backend = backend
        self.offline = offline
        self.clock = clock or SystemClock()
        self.bus = EventBus(self.clock)  # seam: EventBus, handed to every service below
        self.started_at = self.clock.time()
        self.config_loaded_at = self.started_at
        self.reloads = ReloadRecord()  # the last reload's outcome, for status
        self.state = "starting"
        self.notifier = Notifier.from_env(unset_environment=True)
        # Event-loop lag, I/O deadlines (memory calls, control requests) and what systemd
        # reads (WATCHDOG=1 against WatchdogSec, STATUS= for `systemctl status`) are real
        # time, even when a benchmark compresses the business clock (routines, budget
        # periods, heartbeats, backoff) with COMPANYD_TIME_SCALE or a test holds it still.
        real = self._real = SystemClock()
        self.lag = LoopLagMonitor(real, self.bus, source="daemon")
        #: where the stores that support it live (state: in company.yaml; docs/storage.md)
        self.storage = state_backend(config)  # seam: storage Backend, every store's backend=
        #: with several daemons on one database: which one runs the company (docs/ha.md).
        #: Its fence goes with every store's connection, so once another daemon has taken
        #: over, this one's writes are refused by the database itself.
        self.leadership: Leadership | None = None
        self.role: str | None = None
        self.leader: LeaderBlock | None = None
        self._holding: asyncio.Task[None] | None = None  # the lease, renewed while leading
        if self.storage.kind == "postgres" and not oneoff:
            assert self.storage.dsn is not None  # a postgres backend has one
            from companyd.storage import Leadership  # PostgreSQL's driver: only here

            self.leadership = Leadership(
                self.storage.dsn, self.storage.schema, node=node_name(), clock=real
            )
            self.storage = dataclasses.replace(self.storage, fence=self.leadership.fence)
            self.role = "standby"
        self.memory = MemoryService(
            config.memory_path(state_dir), bus=self.bus, clock=real, backend=self.storage
        )
        self.spend_book = SpendBook(
            config, state_dir, bus=self.bus, clock=self.clock, backend=self.storage
        )
        self.journal = Journal(
            state_dir / "runs.sqlite", alarm=DiskAlarm.of(self.bus), backend=self.storage
        )
        self.proposal_store = Proposals(
            state_dir,
            config,
            bus=self.bus,
            clock=self.clock,
            reload=self._reload_after_apply,  # seam: reload callback (an approved proposal)
            backend=self.storage,
        )
        self.desk = Desk(
            state_dir / "desk.sqlite", bus=self.bus, clock=self.clock, backend=self.storage
        )
        self.tool_store = ToolStore(state_dir / "tools.sqlite", backend=self.storage)
        # seam: Tracer — spans of fires, runs, model and tool calls (docs/telemetry.md)
        self.tracer = telemetry_tracer(config)
        # seam: agent ports — what each agent's AgentDeps is built from
        self.staff = Staff(
            config,
            bus=self.bus,
            clock=self.clock,
            journal=self.journal,
            memory=self.memory,
            spend=self.spend_book,
            backend=backend,
            budget_exhausted_error=BudgetExhausted,
            state_dir=state_dir,
            proposals=self.proposal_store,
            # one-off `companyd ask`: no socket, no Telegram, nobody to decide
            desk=None if oneoff else self.desk,
            tool_store=self.tool_store,
            tracer=self.tracer,
            offline=offline,
        )
        records = ResultRecords(
            self.journal,
            None if oneoff else self.desk,
            self.clock,
            lambda: float(self.config.spec.retention.runs_days),
            proposals=None if oneoff else self.proposal_store,
        )
        self.alerts = AlertService(
            config,
            state_dir,
            bus=self.bus,
            admin=self,  # seam: Admin (the operator mixin), for Telegram commands
            clock=self.clock,
            memory=self.memory,
            backend=self.storage,
            deliveries=records,
            desk=records,
        )
        self._backup_lock = asyncio.Lock()
        self.scheduler = RoutineScheduler(
            config,
            self.staff,  # seam: TaskSink — a routine's task goes to the agents
            state_dir=state_dir,
            backend=self.storage,
            bus=self.bus,
            clock=self.clock,
            gate=ResultApprovals(  # seam: ResultGate — results held for the founder
                self.desk,
                self.staff.submit,
                held=self.staff.resumed,
                task_of=self._journaled_task,
                timeout=self._approval_timeout,
            ),
            backups=self,  # seam: BackupSink (the backups mixin) for backup routines
            tracer=self.tracer,
        )
        self.socket = socket_path(state_dir)
        self._control_group = control_group
        self._real_clock = real
        # seam: Admin over the control socket (CLI) and the web dashboard
        self.control = ControlServer(
            self,
            self.socket,
            clock=real,
            group=control_group,
            state_dir=state_dir,
            memory_path=config.memory_path(state_dir),
        )
        self._metrics_server: Any = None
        self.web = WebDashboard(self, lambda: self.config, self.bus, self.clock)
        self._stop = asyncio.Event()
        # set once the tree is up and READY=1 was sent: a reload waits for it
        self._up = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[Any]] = []
        # the spend block of STATUS= (read from the spend book, which is async)
        self._spend_seen: SpendStatus | None = None
        self._spend_refresh: asyncio.Task[None] | None = None
        self.tree = None

    async def _journaled_task(self, task_id: str) -> Task | None:
        """Task ``task_id`` as the run journal holds it, or None."""
        got = await self.journal.get_task(task_id)
        return got[0] if got is not None else None

    def _approval_timeout(self, agent: str) -> float:
        """How long ``agent``'s results wait for the founder (the running configuration)."""
        cfg = self.config.agents.get(agent)
        return cfg.approval_timeout if cfg is not None else DEFAULT_APPROVAL_TIMEOUT

    # -- the tree -----------------------------------------------------------------------

    def _build_tree(self) -> Any:
        services = [
            ChildSpec(id="memory", start=self.memory.run, shutdown=30.0, backoff=SERVICE_BACKOFF),
            ChildSpec(
                id="spend", start=self.spend_book.run, shutdown=10.0, backoff=SERVICE_BACKOFF
            ),
        ]
        if not self.oneoff:
            services += [
                ChildSpec(
                    id="alerts", start=self.alerts.run, shutdown=10.0, backoff=SERVICE_BACKOFF
                ),
                ChildSpec(
                    id="scheduler",
                    start=self.scheduler.run,
                    shutdown=AGENT_SHUTDOWN + 5,
                    backoff=SERVICE_BACKOFF,
                ),
                ChildSpec(id="control", start=self.control.run, shutdown=10.0),
            ]
        if self.config.spec.metrics.listen and not self.oneoff:
            # Imported here for start-up time: prometheus_client is only needed when
            # metrics are on, and `companyd --help` loads this module.
            from companyd.daemon._metrics import Metrics, MetricsServer

            # seam: bus subscription, the metrics listener
            metrics = Metrics(lag=self.lag.stats)
            self._metrics_server = MetricsServer(metrics, self.bus, self.config.spec.metrics.listen)
            services.append(ChildSpec(id="metrics", start=self._metrics_server.run, shutdown=5.0))
        web = self.web.child(self.oneoff, SERVICE_BACKOFF)
        if web is not None:  # before the control socket, which opens once all else is up
            services.insert([s.id for s in services].index("control"), web)

        def agent_child(agent: Any) -> ChildSpec:
            return ChildSpec(
                id=agent.slug,
                start=self.staff.child(agent.slug),
                restart=agent.restart,
                shutdown=AGENT_SHUTDOWN,
            )

        # seam: the supervision tree — services, then departments of Staff.child agents
        return build_company_tree(
            self.config, bus=self.bus, clock=self.clock, services=services, agent_child=agent_child
        )

    # -- main ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the whole tree (each service confirmed ready before the next), then tell
        systemd. Raises ``SupervisorStartError`` if a service cannot start.
        """
        await self.staff.load()
        self.tree = self._build_tree()
        await self.tree.start()
        self.state = "running"
        try:
            await self.staff.close_stale_founder_items()
        except Exception as exc:  # the items stay pending (they expire at their deadline)
            # (a full state disk at start among them: no traceback, the disk alarm says why)
            log.error("could not close the desk items of runs that ended: %r", exc)
        with contextlib.suppress(Exception):
            self._spend_seen = await self._spend_status()
        self.notifier.ready(self._status_line())
        self._up.set()
        self.bus.publish(
            DaemonStarted(
                source="daemon",
                pid=os.getpid(),
                version=__version__,
                agents=len(self.config.agents),
                routines=len(self.config.routines),
                offline=self.offline,
                company=self.config.name,
                # a planned restart is not a restart loop (the alert tells them apart)
                planned_stop=after[1] if (after := self.scheduler.started_after) else None,
                warnings=[str(w) for w in self.config.warnings] or None,
            )
        )
        self._tasks = [
            asyncio.create_task(self._service(self.lag.run), name="loop-lag"),
            asyncio.create_task(
                self._service(Watchdog(self.notifier, self._real, health=self._healthy).run),
                name="watchdog",
            ),
            asyncio.create_task(
                self._service(StatusUpdater(self.notifier, self._status_line, self._real).run),
                name="status",
            ),
            asyncio.create_task(
                self._service(
                    RunRetention(
                        self.journal,
                        self.clock,
                        lambda: self.config.spec.retention.runs_days,
                        # a reply to a message older than its run has no thread to go on
                        also={"Telegram thread link(s)": self.alerts.prune_threads},
                    ).run
                ),
                name="run-retention",
            ),
        ]

    async def stop(self, reason: str = "signal") -> None:
        """Stop gracefully: the tree stops in reverse start order — the control socket and
        the scheduler first, then each agent brings its current step to a checkpoint, then
        alerts, the ledger and the memory flush. The control socket stays bound meanwhile,
        answering ``stopping``, until the stores are closed.
        """
        self.state = "stopping"
        # what the stop waits for, where the operator looks (`systemctl status`, the journal):
        # the control socket answers only `stopping` from here on
        said = stop_status(self.staff.in_flight())
        self.notifier.stopping(said)
        log.info("%s", said)
        self.bus.publish(
            DaemonStopping(
                source="daemon",
                pid=os.getpid(),
                reason=reason,
            )
        )
        # fire times while we are down are a planned stop's, not misses (unlike a crash's)
        self.scheduler.planned_stop(f"daemon stopped: {reason}")
        # every agent brings its run to a checkpoint now, in parallel; the tree then stops
        # in reverse start order and finds them idle
        self.staff.drain()
        # the control socket, stopped first, answers `stopping` until the stores close
        # (docs/daemon.md, "During a stop"): not "no daemon is running" during the drain
        self.control.hold_through_stop()
        try:
            if self.tree is not None and self.tree.status != "stopped":
                await self.tree.stop()
        finally:
            await self._close()

    async def _close(self) -> None:
        tasks, self._tasks = self._tasks, []
        # Cancelled and awaited; a cancellation of the stop itself propagates.
        await cancel_and_wait(*tasks)
        for t in tasks:
            if not t.cancelled() and t.exception() is not None:
                # the helper had died before the stop; the stop goes on without it
                log.warning("daemon helper %r had failed: %r", t.get_name(), t.exception())
        self.staff.close()
        with contextlib.suppress(Exception):
            await self.journal.close()
        with contextlib.suppress(Exception):
            await self.proposal_store.close()
        with contextlib.suppress(Exception):
            await self.desk.close()
        with contextlib.suppress(Exception):
            await self.tool_store.close()
        with contextlib.suppress(Exception):
            await self.backend.aclose()
        if self.tracer.enabled:
            # the last spans, within the exporter's own deadline (OTEL_EXPORTER_OTLP_TIMEOUT),
            # on a thread: the SDK's flush blocks
            await asyncio.to_thread(self.tracer.shutdown)
        await self.control.close()
        if self.leadership is not None:
            # after every store's last write: a standby takes over at once, not a lease later
            with contextlib.suppress(Exception):
                await self.leadership.resign()
            if self._holding is not None:
                # resign() ends hold() (at most a renewal's deadline later); a hold that had
                # failed has said so already
                try:
                    async with asyncio.timeout(self.leadership.lease + 1):
                        await asyncio.gather(self._holding, return_exceptions=True)
                except TimeoutError:
                    await cancel_and_wait(self._holding)
            await self.leadership.close()
        self.notifier.close()  # its last word, STOPPING=1, was said when the stop began

    async def __aenter__(self) -> Daemon:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(reason="closed")

    async def main(self) -> int:
        """Run until SIGTERM/SIGINT (exit 0) or until the root supervisor gives up (1)."""
        loop = asyncio.get_running_loop()
        remove_logger = log_events(self.bus)  # seam: bus subscription, the event log
        if self.tightened_from is not None:
            was = f"{self.tightened_from:04o}"
            log.warning(
                "state directory %s had mode %s (open to the group or others); tightened to "
                "0700: it holds prompts, answers, memory and spend",
                self.state_dir,
                was,
            )
            self.bus.publish(
                StateDirTightened(
                    source="companyd",
                    path=str(self.state_dir),
                    was=was,
                )
            )
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._sighup)
        if take_early_sighup():  # a SIGHUP that came before the loop listened: reload once up
            self._sighup()
        try:
            previous: LeaderInfo | None = None
            if self.leadership is not None:
                # a standby may wait for weeks: the GC paused for the start-up is on again
                resume_collection()
                self.state = "standby"
                led, previous = await stand_by(
                    self,
                    self.leadership,
                    stop=self._stop,
                    clock=self._real_clock,
                    ready=self.notifier.ready,
                    control_group=self._control_group,
                )
                if not led:
                    await self.leadership.close()
                    return 0  # stopped while a standby: nothing of the company ran here
                self.state = "starting"
                self.role = "leader"
                self.leader = LeaderBlock(
                    node=self.leadership.node,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    since=self._real_clock.time(),
                    epoch=self.leadership.fence.epoch or 0,
                )
            try:
                await self.start()
            except SupervisorStartError as exc:
                cause = exc.reason.exception
                if isinstance(cause, MemoryNotAGraph | MemoryUnsafePath) or _written_by_newer(
                    cause
                ):
                    # The operator must act (memory.path names another file): restarting
                    # cannot help, so exit 78 and systemd does not restart-loop on it.
                    log.critical("the company could not start: %s (exit 78)", cause)
                    await self._close()
                    return EX_CONFIG
                log.critical("the company could not start: %s", exc)
                await self._close()
                return 1
            freeze_startup_heap()
            self._announce_takeover(previous)
            waiter = asyncio.create_task(self.tree.wait())
            # Held until _close() resigns, after the stores' last writes: cancelling it
            # earlier would give the lead up (and fence those writes off) mid-stop.
            holding = self._holding = (
                asyncio.create_task(self.leadership.hold(), name="leadership")
                if self.leadership is not None
                else None
            )
            await race(waiter, self._stop.wait(), *([holding] if holding else []))
            if holding is not None and holding.done():
                # Deposed (another daemon leads now; our writes are fenced off): stop at
                # once and exit 1, so systemd restarts this daemon as a standby.
                waiter.cancel()
                why = holding.exception() if not holding.cancelled() else None
                log.critical("lost the leadership of the company (%s); stopping", why)
                await self.stop(reason=f"lost leadership: {why}")
                return 1
            if waiter.done():
                await self._close()
                try:
                    waiter.result()
                except SupervisorGaveUp as exc:
                    log.critical(
                        "the root supervisor gave up (%s); exiting so systemd restarts the daemon",
                        exc,
                    )
                    self.notifier.stopping("root supervisor gave up")
                    return 1
                log.error("the supervision tree stopped by itself; exiting")
                return 1
            waiter.cancel()
            await self.stop()
            return 0
        except CompanydError as exc:
            log.critical("companyd stopped: %s", exc)
            return 1
        except Exception:
            log.critical("internal error in the daemon", exc_info=True)
            return EX_SOFTWARE
        finally:
            remove_logger()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            # a late SIGHUP must not turn a clean exit into a death by signal
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            self.notifier.close()

    def _announce_takeover(self, previous: LeaderInfo | None) -> None:
        """Alert once that this daemon took the company over from another node's daemon (a
        restart of the same node is announced by ``daemon_started`` alone).
        """
        if self.leadership is None or previous is None:
            return
        if previous.node == self.leadership.node:
            return
        self.bus.publish(
            LeadershipTaken(
                source="daemon",
                node=self.leadership.node,
                host=socket.gethostname(),
                epoch=self.leadership.fence.epoch or 0,
                previous=f"{previous.node} ({previous.host}, pid {previous.pid})",
            )
        )

    async def _service(self, run: Any) -> None:
        """Run a daemon-level helper (watchdog, status, lag) with a never-set stop event."""
        await run(StandaloneContext("daemon"))

    def _healthy(self) -> bool:
        """The watchdog's gate: the tree runs, or a graceful stop is under way. A stop takes
        the tree out of "running" on purpose while runs reach a checkpoint; withholding
        WATCHDOG=1 then would log a false alarm and could make systemd kill a stop that is
        going well (systemd's TimeoutStopSec bounds the stop itself).
        """
        if self.state == "stopping":
            return True
        return self.tree is not None and self.tree.status == "running"

    def _sighup(self) -> None:
        task = asyncio.ensure_future(self.reload(via=""))
        task.add_done_callback(_log_task_failure)

    def _status_line(self) -> str:
        """The STATUS= line: agents, runs in flight and spend today. The spend part is the
        latest one read (the spend book answers asynchronously); each call refreshes it for
        the next one, so it lags by at most one StatusUpdater period (10 s).
        """
        # status_line renders status's JSON form, as for `companyd status`
        spend = self._spend_seen or NO_SPEND
        status = result_data("status", self._status_sync()(spend=spend, routines=[]))
        if self._spend_seen is None:
            del status["spend"]  # none read yet: no spend part rather than $0.00
        if self._spend_refresh is None or self._spend_refresh.done():
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to refresh
                self._spend_refresh = asyncio.get_running_loop().create_task(self._refresh_spend())
        return status_line(status)

    async def _refresh_spend(self) -> None:
        try:
            self._spend_seen = await self._spend_status()
        except Exception:  # the spend book is stopping or restarting: keep the last one
            log.debug("spend for STATUS= not refreshed", exc_info=True)


def stop_status(runs: list[RunInFlight], shown: int = 3) -> str:
    """The ``STATUS=`` line of a stop: the runs it brings to a checkpoint (agent and run id,
    the first ``shown`` of them), or that none is in flight.
    """
    if not runs:
        return "stopping: no run in flight"
    named = ", ".join(f"{r['agent']} ({r['run_id']})" for r in runs[:shown])
    more = f" and {len(runs) - shown} more" if len(runs) > shown else ""
    noun = "run" if len(runs) == 1 else "runs"
    return f"stopping: bringing {len(runs)} {noun} to a checkpoint: {named}{more}"


def _written_by_newer(exc: BaseException | None) -> bool:
    """A store refused its file as written by a newer companyd (SchemaTooNew somewhere in
    the chain): restarting cannot help — the operator upgrades or restores (docs/upgrade.md).
    """
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, SchemaTooNew):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def node_name() -> str:
    """This daemon's name among the company's daemons (docs/ha.md): ``$COMPANYD_NODE``, else
    the host name — one daemon per host is the usual topology.
    """
    return os.environ.get("COMPANYD_NODE", "").strip() or socket.gethostname()


def _log_task_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("reload failed: %r", task.exception())


def telemetry_tracer(config: CompanyConfig) -> Tracer:
    """The company's tracer: OpenTelemetry when ``telemetry.otlp_endpoint`` is set or
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is in the environment (docs/telemetry.md), else the
    no-op one. The SDK is imported only in the first case: a daemon without telemetry
    never loads it (tests/daemon/test_startup_imports.py).
    """
    spec = config.spec.telemetry
    if telemetry_endpoint(spec.otlp_endpoint) is None:
        return NO_TRACING
    from companyd.telemetry import otel_tracer  # imported here: only when telemetry is on

    return otel_tracer(
        spec.otlp_endpoint,
        capture_content=spec.capture_content,
        company=config.spec.company.name,
    )
