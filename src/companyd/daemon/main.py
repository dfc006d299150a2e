"""``companyd run``: the whole company as one supervised process.

The daemon assembles every service into the supervision tree, in this start order (and
stops them in the reverse order):

    memory → spend → alerts → agents (departments → agents) → scheduler → control

then tells systemd it is ready, pings the watchdog from the event loop, answers the
operator (control socket and Telegram, through :class:`Daemon`, the one implementation of
:class:`~companyd.admin.Admin`), reloads company.yaml on SIGHUP and stops gracefully
on SIGTERM/SIGINT. docs/daemon.md lists exit codes, signals and the state directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from companyd import __version__
from companyd._fs import make_dirs, private_dir
from companyd._heap import freeze_startup_heap
from companyd._secrets import redact
from companyd.admin import AdminError
from companyd.clock import Clock, ScaledClock, SystemClock
from companyd.config import CompanyConfig, load_config
from companyd.errors import (
    EX_CONFIG,
    EX_SOFTWARE,
    EX_TEMPFAIL,
    CompanydError,
    ConfigError,
    StateLocked,
)
from companyd.events import EventBus
from companyd.llm.model import ModelBackend, ModelUnavailable
from companyd.roles.tasks import RunOutcome, RunStatus, Task, new_id
from companyd.status_text import status_line
from companyd.supervision.child import StandaloneContext
from companyd.supervision.supervisor import Backoff

__all__ = ["Daemon", "register"]

log = logging.getLogger("companyd.daemon")

#: How long an agent gets to bring its current step to a checkpoint when asked to stop.
AGENT_SHUTDOWN = 20.0


def register(sub: Any) -> None:
    """Add ``companyd run`` to the CLI."""
    from companyd.daemon.logs import add_logging_arguments

    p = sub.add_parser(
        "run",
        help="run the company in the foreground (what systemd starts)",
        description="Start the whole supervision tree — memory, spend ledger, alerts, "
        "agents, scheduler, control socket — and run until SIGTERM/SIGINT. SIGHUP reloads "
        "company.yaml. Logs go to stderr (journald under systemd).",
    )
    p.add_argument(
        "--config", type=Path, default=None, help="company.yaml (default: ./company.yaml)"
    )
    p.add_argument("--state-dir", type=Path, default=None, help="state directory")
    p.add_argument(
        "--offline",
        action="store_true",
        help="use the built-in offline model instead of Claude (no network, no API key)",
    )
    p.add_argument(
        "--control-group",
        default=None,
        help="make the control socket 0660 owned by this group (static User=/Group= only)",
    )
    add_logging_arguments(p)
    p.set_defaults(func=_run_command)


def _run_command(args: argparse.Namespace) -> int:
    from companyd.config import default_config_path
    from companyd.daemon.lock import CompanyLock, StateLock
    from companyd.daemon.logs import setup_logging

    handle = setup_logging(level=args.log_level, fmt=args.log_format)
    # Until the event loop takes SIGHUP over, its default action would end the process —
    # a death systemd counts as clean, so Restart=on-failure would not bring it back.
    # Remember the request instead; the daemon reloads once it is up.
    signal.signal(signal.SIGHUP, _remember_early_sighup)
    try:
        path = args.config or default_config_path()
        try:
            config = load_config(path)
        except ConfigError as exc:
            for issue in exc.issues:
                print(issue, file=sys.stderr)
            print(
                f"companyd: {path} is invalid ({len(exc.issues)} problem(s)); fix it and start "
                "again (exit 78: systemd will not restart-loop on it)",
                file=sys.stderr,
            )
            return EX_CONFIG
        for w in config.warnings:
            log.warning("%s", w)
        if args.control_group is not None:
            from companyd.daemon.control import _resolve_group

            try:  # a typo here cannot be fixed by restarting: say so now, with 78
                _resolve_group(args.control_group)
            except CompanydError as exc:
                print(f"companyd: {exc} (exit 78)", file=sys.stderr)
                return EX_CONFIG
        state_dir = config.state_dir(args.state_dir)
        # Everything the daemon creates holds prompts, answers, memory or spend: private
        # whatever umask it was started with (each store also sets its modes explicitly).
        os.umask(os.umask(0o077) | 0o077)
        try:
            make_dirs(state_dir)
        except OSError as exc:
            print(
                f"companyd: cannot use the state directory {str(state_dir)!r}: "
                f"{exc.strerror or exc}; give a directory the daemon's user can create and "
                "write with --state-dir (or company.yaml's state_dir) (exit 78)",
                file=sys.stderr,
            )
            return EX_CONFIG
        try:
            scaled = ScaledClock.from_env()
        except ValueError as exc:
            print(f"companyd: {exc}", file=sys.stderr)
            return EX_CONFIG
        if scaled is not None:
            log.warning(
                "benchmark mode: time runs %g× faster than real time (COMPANYD_TIME_SCALE); "
                "never use this in production",
                scaled.scale,
            )
        clock: Clock | None = scaled
        if args.offline:
            log.warning(
                "OFFLINE: answers come from the built-in offline model, not Claude (no network, "
                "no cost); runs, logs and status are labelled offline"
            )
        try:
            backend = _backend(
                config, offline=args.offline, redact=handle.redactor.add, clock=clock
            )
        except ModelUnavailable as exc:
            print(f"companyd: {exc}", file=sys.stderr)
            print(
                "companyd: to run without Claude, start it with --offline (the built-in "
                "offline model: no network, no cost)",
                file=sys.stderr,
            )
            return EX_CONFIG
        try:  # one daemon per company.yaml, whatever its state directory
            from companyd.daemon.control import socket_path

            claim = CompanyLock.acquire(config.path, control_socket=socket_path(state_dir))
        except StateLocked as exc:
            print(f"companyd: {exc}", file=sys.stderr)
            return EX_TEMPFAIL
        try:
            lock = StateLock.acquire(state_dir)
        except StateLocked as exc:
            claim.release()
            print(f"companyd: {exc}", file=sys.stderr)
            return EX_TEMPFAIL
        except OSError as exc:
            claim.release()
            print(
                f"companyd: cannot lock the state directory {str(state_dir)!r}: "
                f"{exc.strerror or exc} ({exc.filename}); the daemon's user must be able to "
                "write there — fix its owner or mode, or choose another --state-dir (exit 78)",
                file=sys.stderr,
            )
            return EX_CONFIG
        with claim, lock:
            daemon = Daemon(
                config,
                state_dir,
                backend=backend,
                clock=clock,
                offline=args.offline,
                control_group=args.control_group,
                redact=handle.redactor.add,
            )
            return asyncio.run(daemon.main())
    finally:
        handle.close()


#: Restart delay of the built-in services. Their failures are mostly the environment's (a
#: full or failing state disk, a held lock): restarting at once would fail the same way and
#: trip the root's intensity (2 restarts in 60 s) within milliseconds, ending the daemon.
#: Delays 1 s, 8 s, then 60 s: however long the cause lasts, no 60 s window holds more than
#: two restarts, so the daemon stays up, degraded, and recovers by itself when it clears.
SERVICE_BACKOFF = Backoff(min=1.0, max=60.0, factor=8.0, jitter=0.2, reset_after=60.0)


def _backend(
    config: CompanyConfig, *, offline: bool, redact: Any, clock: Clock | None = None
) -> ModelBackend:
    if offline:
        from companyd.llm.offline import OfflineModel

        return OfflineModel()
    from companyd.llm.claude import ClaudeBackend, resolve_api_key

    redact(resolve_api_key(config.spec.anthropic))
    return ClaudeBackend.from_config(config.spec.anthropic, clock=clock)


class Daemon:
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
        from companyd.alerts.service import AlertService
        from companyd.daemon.control import ControlServer, socket_path
        from companyd.daemon.systemd import LoopLagMonitor, Notifier
        from companyd.memory import MemoryService
        from companyd.roles.improver import Proposals
        from companyd.roles.journal import Journal
        from companyd.roles.staff import Staff
        from companyd.scheduler import RoutineScheduler
        from companyd.spend import BudgetExhausted, SpendBook

        self.config = config
        self.state_dir = state_dir
        #: the state directory's mode if it was open to the group or others (now 0700)
        self.tightened_from = private_dir(state_dir)
        self.oneoff = oneoff
        self.backend = backend
        self.offline = offline
        self.clock: Clock = clock or SystemClock()
        self.bus = EventBus(self.clock)
        self.started_at = self.clock.time()
        self.config_loaded_at = self.started_at
        # The last reload's outcome, for status: when, "applied" | "rejected", and the last
        # rejected one (when, how many errors, the first one, secrets masked).
        self._last_reload_at: float | None = None
        self._last_reload_result: str | None = None
        self._last_rejected: dict[str, Any] | None = None
        self.state = "starting"
        self.notifier = Notifier.from_env(unset_environment=True)
        # Event-loop lag and I/O deadlines (memory calls, control requests) are real time,
        # even when a benchmark compresses the business clock (routines, budget periods,
        # heartbeats, backoff) with COMPANYD_TIME_SCALE.
        real = SystemClock()
        self.lag = LoopLagMonitor(real, self.bus, source="daemon")
        self.memory = MemoryService(config.memory_path(state_dir), bus=self.bus, clock=real)
        self.spend_book = SpendBook(config, state_dir, bus=self.bus, clock=self.clock)
        self.journal = Journal(state_dir / "runs.sqlite")
        self.proposal_store = Proposals(
            state_dir, config, bus=self.bus, clock=self.clock, reload=self._reload_after_apply
        )
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
        )
        self.alerts = AlertService(config, state_dir, bus=self.bus, admin=self, clock=self.clock)
        self.scheduler = RoutineScheduler(
            config, self.staff, state_dir=state_dir, bus=self.bus, clock=self.clock
        )
        self.socket = socket_path(state_dir)
        self.control = ControlServer(
            self, self.socket, clock=real, group=control_group, state_dir=state_dir
        )
        self._metrics_server: Any = None
        self._stop = asyncio.Event()
        # set once the tree is up and READY=1 was sent: a reload waits for it
        self._up = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[Any]] = []
        # the spend block of STATUS= (read from the spend book, which is async)
        self._spend_seen: dict[str, Any] | None = None
        self._spend_refresh: asyncio.Task[None] | None = None
        self.tree: Any = None

    # -- the tree -----------------------------------------------------------------------

    def _build_tree(self) -> Any:
        from companyd.daemon.tree import build_company_tree
        from companyd.supervision.supervisor import ChildSpec

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
            from companyd.daemon.metrics import Metrics, MetricsServer

            metrics = Metrics(lag=self.lag.stats)
            self._metrics_server = MetricsServer(metrics, self.bus, self.config.spec.metrics.listen)
            services.append(ChildSpec(id="metrics", start=self._metrics_server.run, shutdown=5.0))

        def agent_child(agent: Any) -> ChildSpec:
            return ChildSpec(
                id=agent.slug,
                start=self.staff.child(agent.slug),
                restart=agent.restart,
                shutdown=AGENT_SHUTDOWN,
            )

        return build_company_tree(
            self.config, bus=self.bus, clock=self.clock, services=services, agent_child=agent_child
        )

    # -- main ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the whole tree (each service confirmed ready before the next), then tell
        systemd. Raises ``SupervisorStartError`` if a service cannot start."""
        from companyd.daemon.systemd import StatusUpdater, Watchdog

        await self.staff.load()
        self.tree = self._build_tree()
        await self.tree.start()
        self.state = "running"
        with contextlib.suppress(Exception):
            self._spend_seen = await self._spend_status()
        self.notifier.ready(self._status_line())
        self._up.set()
        self.bus.emit(
            "daemon_started",
            "daemon",
            pid=os.getpid(),
            version=__version__,
            agents=len(self.config.agents),
            routines=len(self.config.routines),
            offline=self.offline,
            company=self.config.name,
        )
        self._tasks = [
            asyncio.create_task(self._service(self.lag.run), name="loop-lag"),
            asyncio.create_task(
                self._service(Watchdog(self.notifier, self.clock, health=self._healthy).run),
                name="watchdog",
            ),
            asyncio.create_task(
                self._service(StatusUpdater(self.notifier, self._status_line, self.clock).run),
                name="status",
            ),
        ]

    async def stop(self, reason: str = "signal") -> None:
        """Stop gracefully: the tree stops in reverse start order — the control socket and
        the scheduler first, then each agent brings its current step to a checkpoint, then
        alerts, the ledger and the memory flush."""
        self.state = "stopping"
        self.notifier.stopping("stopping: bringing runs to a checkpoint")
        self.bus.emit("daemon_stopping", "daemon", pid=os.getpid(), reason=reason)
        # fire times while we are down are a planned stop's, not misses (unlike a crash's)
        self.scheduler.planned_stop(f"daemon stopped: {reason}")
        # every agent brings its run to a checkpoint now, in parallel; the tree then stops
        # in reverse start order and finds them idle
        self.staff.drain()
        try:
            if self.tree is not None and self.tree.status != "stopped":
                await self.tree.stop()
        finally:
            await self._close()

    async def _close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t
        self._tasks = []
        self.staff.close()
        with contextlib.suppress(Exception):
            await self.journal.close()
        with contextlib.suppress(Exception):
            await self.proposal_store.close()
        with contextlib.suppress(Exception):
            await self.backend.aclose()

    async def __aenter__(self) -> Daemon:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(reason="closed")

    async def main(self) -> int:
        """Run until SIGTERM/SIGINT (exit 0) or until the root supervisor gives up (1)."""
        from companyd.daemon.logs import log_events
        from companyd.supervision.supervisor import SupervisorGaveUp, SupervisorStartError

        loop = asyncio.get_running_loop()
        remove_logger = log_events(self.bus)
        if self.tightened_from is not None:
            was = f"{self.tightened_from:04o}"
            log.warning(
                "state directory %s had mode %s (open to the group or others); tightened to "
                "0700: it holds prompts, answers, memory and spend",
                self.state_dir,
                was,
            )
            self.bus.emit("state_dir_tightened", "companyd", path=str(self.state_dir), was=was)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._sighup)
        if _EARLY_SIGHUP:  # a SIGHUP that came before the loop listened: reload once up
            _EARLY_SIGHUP.clear()
            self._sighup()
        try:
            try:
                await self.start()
            except SupervisorStartError as exc:
                from companyd.memory.errors import MemoryNotAGraph, MemoryUnsafePath

                cause = exc.reason.exception
                if isinstance(cause, MemoryNotAGraph | MemoryUnsafePath):
                    # The operator must act (memory.path names another file): restarting
                    # cannot help, so exit 78 and systemd does not restart-loop on it.
                    log.critical("the company could not start: %s (exit 78)", cause)
                    await self._close()
                    return EX_CONFIG
                log.critical("the company could not start: %s", exc)
                await self._close()
                return 1
            freeze_startup_heap()
            waiter = asyncio.create_task(self.tree.wait())
            stopper = asyncio.create_task(self._stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                stopper.cancel()
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

    async def _service(self, run: Any) -> None:
        """Run a daemon-level helper (watchdog, status, lag) with a never-set stop event."""
        await run(StandaloneContext("daemon"))

    def _healthy(self) -> bool:
        """The watchdog's gate: the tree runs, or a graceful stop is under way. A stop takes
        the tree out of "running" on purpose while runs reach a checkpoint; withholding
        WATCHDOG=1 then would log a false alarm and could make systemd kill a stop that is
        going well (systemd's TimeoutStopSec bounds the stop itself)."""
        if self.state == "stopping":
            return True
        return self.tree is not None and self.tree.status == "running"

    def _sighup(self) -> None:
        task = asyncio.ensure_future(self.reload())
        task.add_done_callback(_log_task_failure)

    def _status_line(self) -> str:
        """The STATUS= line: agents, runs in flight and spend today. The spend part is the
        latest one read (the spend book answers asynchronously); each call refreshes it for
        the next one, so it lags by at most one StatusUpdater period (10 s)."""
        status = self._status_sync()
        if self._spend_seen is not None:
            status["spend"] = self._spend_seen
        if self._spend_refresh is None or self._spend_refresh.done():
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to refresh
                self._spend_refresh = asyncio.get_running_loop().create_task(self._refresh_spend())
        return status_line(status)

    async def _refresh_spend(self) -> None:
        try:
            self._spend_seen = await self._spend_status()
        except Exception:  # the spend book is stopping or restarting: keep the last one
            log.debug("spend for STATUS= not refreshed", exc_info=True)

    # -- reload -------------------------------------------------------------------------

    async def reload(self) -> dict[str, Any]:
        """Re-read company.yaml; apply the difference or keep the old config.

        A reload asked for during start-up waits until the tree is up (READY=1 is sent
        once, when it is); one asked for while the daemon stops is refused."""
        if not self._up.is_set() and not self._stopping():
            log.info("reload requested during start-up: applied once the company is up")
            await self._up.wait()
        async with self._reload_lock:
            if self._stopping():
                log.info("reload not applied: the daemon is stopping")
                return {
                    "applied": False,
                    "errors": ["the daemon is stopping; company.yaml was not reloaded"],
                    "message": "reload refused: the daemon is stopping",
                }
            return await asyncio.shield(self._reload())

    def _stopping(self) -> bool:
        return self._stop.is_set() or self.state == "stopping"

    async def _reload(self) -> dict[str, Any]:
        self.notifier.reloading("reloading company.yaml")
        self.state = "reloading"
        try:
            try:
                new = await asyncio.to_thread(load_config, self.config.path)
            except ConfigError as exc:
                errors = [str(i) for i in exc.issues]
                now = self.clock.time()
                self._last_reload_at, self._last_reload_result = now, "rejected"
                self._last_rejected = {
                    "at": now,
                    "errors": len(errors),
                    "first_error": _shown_error(errors[0]) if errors else "",
                }
                self.bus.emit(
                    "config_rejected",
                    "daemon",
                    file=str(self.config.path),
                    errors=errors[:10],
                    count=len(errors),
                )
                return {
                    "applied": False,
                    "errors": errors,
                    "message": f"company.yaml rejected ({len(errors)} problem(s)); the "
                    "previous version keeps running",
                }
            old = self.config
            self.staff.reconfigure(new)
            self.spend_book.reconfigure(new)
            # a budget raised in company.yaml lets the agents it paused work again
            resumed = self.staff.resume_budget_paused("budget raised in company.yaml")
            self.proposal_store.reconfigure(new)
            self.alerts.update_config(new)
            diff = await self.tree.apply_config(new)
            self.staff.drop_removed()  # the removed agents are stopped by now
            routines = {} if self.oneoff else await self.scheduler.reconfigure(new)
            self.config = new
            self.config_loaded_at = self.clock.time()
            self._last_reload_at, self._last_reload_result = self.config_loaded_at, "applied"
            unchanged = [a for a in new.agents if a in old.agents and a not in diff.changed_agents]
            result: dict[str, Any] = {
                "applied": True,
                "added": list(diff.added_agents),
                "removed": list(diff.removed_agents),
                "changed": list(diff.changed_agents),
                "unchanged": len(unchanged),
                "departments": {
                    "added": list(diff.added_departments),
                    "removed": list(diff.removed_departments),
                    "changed": list(diff.changed_departments),
                },
                "routines": routines,
                "failures": list(diff.failures),
                "resumed": resumed,
            }
            later = _restart_only_changes(old, new, self.state_dir)
            if later:
                result["restart_required"] = later
                log.warning(
                    "company.yaml reloaded, but %s only take(s) effect when the daemon "
                    "restarts (`systemctl restart companyd`)",
                    ", ".join(later),
                )
            self.bus.emit(
                "daemon_reloaded",
                "daemon",
                started=result["added"],
                stopped=result["removed"],
                restarted=result["changed"],
                unchanged=result["unchanged"],
                routines=routines,
                failures=result["failures"],
            )
            return result
        finally:
            if self._stopping():
                # STOPPING=1 went out meanwhile: READY=1 now would contradict it
                self.state = "stopping"
            else:
                self.state = "running"
                self.notifier.ready(self._status_line())

    async def _reload_after_apply(self) -> None:
        result = await self.reload()
        if not result.get("applied"):
            raise AdminError(
                "the change was written but company.yaml was rejected on reload: "
                + "; ".join(result.get("errors", [])[:3])
            )

    # -- Admin ----------------------------------------------------------------------------

    def _status_sync(self) -> dict[str, Any]:
        now = self.clock.time()
        tree = self.tree.snapshot() if self.tree is not None else {}
        paused = self.staff.paused()
        _mark_paused(tree, paused)
        running = self.staff.in_flight()
        agents_total = len(self.config.agents)
        agent_nodes = _agent_nodes(tree, set(self.config.agents))
        return {
            "now": now,
            "daemon": {
                "pid": os.getpid(),
                "version": __version__,
                "state": self.state,
                "started_at": self.started_at,
                "uptime_s": now - self.started_at,
                "config": str(self.config.path),
                "config_loaded_at": self.config_loaded_at,
                "reload": {
                    "last_at": self._last_reload_at,
                    "last_result": self._last_reload_result,
                    "rejected": dict(self._last_rejected) if self._last_rejected else None,
                },
                "state_dir": str(self.state_dir),
                "socket": str(self.socket),
                "offline": self.offline,
                "loop_lag": self.lag.stats().to_dict(),
            },
            "company": {"name": self.config.name, "timezone": self.config.timezone},
            "agents": {
                "total": agents_total,
                "running": sum(1 for n in agent_nodes if n.get("state") == "running"),
                "paused": len(paused),
                "failed": sum(
                    1 for n in agent_nodes if n.get("state") in ("restarting", "stopped")
                ),
                "busy": len(running),
            },
            "tree": tree,
            "runs_in_flight": [{**r, "elapsed_s": now - r["started_at"]} for r in running],
            "alerts": self.alerts.snapshot(),
        }

    async def status(self) -> dict[str, Any]:
        status = self._status_sync()
        status["spend"] = await self._spend_status()
        status["routines"] = await self._routines_status()
        return status

    async def _spend_status(self) -> dict[str, Any]:
        from companyd.spend.ledger import LedgerError

        try:
            report = await self.spend_book.budget_report()
        except LedgerError as exc:
            # the ledger cannot be opened (a full state disk at start): status still answers
            out = _spend_for_status({}, self.staff.paused())
            out["unavailable"] = str(exc)
            return out
        return _spend_for_status(report, self.staff.paused())

    async def _routines_status(self) -> list[dict[str, Any]]:
        try:
            jobs = await self.scheduler.jobs()
        except AdminError:  # the history cannot be opened (a full state disk): none to show
            return []
        return [_routine_for_status(r) for r in jobs.get("routines", []) if isinstance(r, Mapping)]

    async def spend(self, by: str = "agent", period: str = "today") -> dict[str, Any]:
        try:
            return await self.spend_book.spend_report(by=by, period=period)
        except ValueError as exc:
            raise AdminError(str(exc)) from None

    async def budget(self) -> dict[str, Any]:
        return await self.spend_book.budget_report()

    async def raise_budget(self, agent: str | None, usd: float) -> dict[str, Any]:
        if agent is not None:
            self._check_agent(agent)
        if not usd > 0:
            raise AdminError(f"the raise must be a positive amount of dollars, got {usd!r}")
        await self.spend_book.raise_today(agent, Decimal(str(usd)))
        resumed = []
        for a, reason in self.staff.paused().items():
            mine = reason.startswith("budget") and (agent is None or a == agent)
            if (
                mine
                and self.spend_book.exhausted(a) is None
                and self.staff.resume(a, "budget raised")
            ):
                resumed.append(a)
        who = agent or "the company"
        report = await self.spend_book.budget_report()
        daily = next(
            (
                b["limit_usd"]
                for b in report["budgets"]
                if b["agent"] == agent and b["period"] == "day"
            ),
            None,
        )
        return {
            "agent": agent,
            "raised_usd": usd,
            "daily_limit_usd": daily,
            "resumed": resumed,
            "message": f"raised today's budget of {who} by ${usd:.2f}"
            + (
                f" (today's limit is now ${daily:.2f}; back to company.yaml tomorrow)"
                if daily is not None
                else " (for today; back to company.yaml tomorrow)"
            )
            + (f"; resumed {', '.join(resumed)}" if resumed else ""),
        }

    async def jobs(self) -> dict[str, Any]:
        return await self.scheduler.jobs()

    async def job_history(self, routine: str, limit: int = 20) -> dict[str, Any]:
        from companyd.scheduler import RoutineNotFound

        try:
            return await self.scheduler.history(routine, limit)
        except RoutineNotFound as exc:
            raise AdminError(str(exc)) from None

    async def run_job(self, routine: str) -> dict[str, Any]:
        from companyd.scheduler import RoutineBusy, RoutineNotFound

        try:
            outcome = await self.scheduler.run_now(routine)
        except (RoutineNotFound, RoutineBusy) as exc:
            raise AdminError(str(exc)) from None
        return {"routine": routine, **outcome.to_dict()}

    async def pause(self, agent: str) -> dict[str, Any]:
        self._check_agent(agent)
        self.staff.pause(agent, "operator")
        return {
            "agent": agent,
            "paused": True,
            "message": f"paused {agent}: it finishes its current run, then starts no new ones "
            f"until `companyd resume {agent}`",
        }

    async def resume(self, agent: str) -> dict[str, Any]:
        self._check_agent(agent)
        was = self.staff.resume(agent)
        return {
            "agent": agent,
            "resumed": was,
            "message": f"resumed {agent}" if was else f"{agent} was not paused",
        }

    async def ask(self, agent: str, question: str, timeout: float = 300.0) -> dict[str, Any]:
        self._check_agent(agent)
        if not question.strip():
            raise AdminError("the question is empty; say what you want the agent to do")
        task = Task(
            id=new_id("task"),
            agent=agent,
            prompt=question,
            source="operator",
            created=self.clock.time(),
        )
        try:
            async with asyncio.timeout(timeout):
                outcome = await self._unless_stopping(self.staff.submit(task), task)
        except TimeoutError:
            raise AdminError(
                f"{agent} did not finish within {timeout:g} s; the task {task.id} keeps running "
                "— see `companyd runs`"
            ) from None
        return outcome.to_dict()

    async def _unless_stopping(self, work: Any, task: Task) -> RunOutcome:
        """Await ``work``, or answer at once when the daemon starts to stop: the task is
        journaled and resumes after the restart, and the operator need not wait on it."""
        job = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.staff.draining.wait())
        try:
            await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if job.done():
            result: RunOutcome = job.result()
            return result
        job.cancel()
        raise AdminError(
            f"the daemon is stopping; task {task.id} is journaled and {task.agent} resumes it "
            "after the restart (see `companyd runs`)"
        )

    async def runs(
        self, agent: str | None = None, status: str | None = None, limit: int = 20
    ) -> dict[str, Any]:
        if status is not None and status not in {*(str(s) for s in RunStatus), "running"}:
            raise AdminError(
                f"unknown status {status!r}; choose one of running, "
                + ", ".join(str(s) for s in RunStatus)
            )
        return {"runs": await self.journal.runs(agent=agent, status=status, limit=limit)}

    async def tasks(self, quarantined: bool = False) -> dict[str, Any]:
        states = ["quarantined"] if quarantined else ["queued", "running"]
        return {"tasks": await self.journal.tasks(states)}

    async def retry(self, task_id: str) -> dict[str, Any]:
        try:
            task = await self.staff.retry(task_id)
        except KeyError:
            raise AdminError(f"no task {task_id!r}; see `companyd tasks --quarantined`") from None
        except ValueError as exc:
            raise AdminError(str(exc)) from None
        return {
            "task_id": task.id,
            "agent": task.agent,
            "queued": True,
            "message": f"released {task.id}; {task.agent} will run it again",
        }

    async def proposals(self) -> dict[str, Any]:
        return {"proposals": [p.to_dict() for p in await self.proposal_store.list()]}

    async def approve(self, proposal_id: str) -> dict[str, Any]:
        from companyd.roles.improver import ProposalError

        try:
            p = await self.proposal_store.approve(proposal_id)
        except ProposalError as exc:
            raise AdminError(str(exc)) from None
        return {**p.to_dict(), "message": f"applied {p.id} to {p.file} and reloaded"}

    async def reject(self, proposal_id: str) -> dict[str, Any]:
        from companyd.roles.improver import ProposalError

        try:
            p = await self.proposal_store.reject(proposal_id)
        except ProposalError as exc:
            raise AdminError(str(exc)) from None
        return {**p.to_dict(), "message": f"rejected {p.id}"}

    async def revert(self, proposal_id: str) -> dict[str, Any]:
        from companyd.roles.improver import ProposalError

        try:
            p = await self.proposal_store.revert(proposal_id)
        except ProposalError as exc:
            raise AdminError(str(exc)) from None
        return {**p.to_dict(), "message": f"reverted {p.id} and reloaded"}

    async def debug(
        self, action: str, target: str | None = None, seconds: float = 0.0
    ) -> dict[str, Any]:
        if os.environ.get("COMPANYD_DEBUG") != "1":
            raise AdminError(
                "debug operations are disabled; start the daemon with COMPANYD_DEBUG=1 in its "
                "environment to allow fault injection (never in production)"
            )
        if action == "crash":
            if target is None:
                raise AdminError("debug crash needs a target agent")
            self._check_agent(target)
            crashed = await self.staff.crash(target)
            return {"action": action, "target": target, "crashed": crashed}
        if action == "block":
            if not 0 < seconds <= 600:
                raise AdminError(f"debug block needs 0 < seconds <= 600, got {seconds!r}")
            # deliberately blocks the event loop, as a careless synchronous call would
            time.sleep(seconds)  # noqa: ASYNC251
            return {"action": action, "seconds": seconds}
        raise AdminError(f"unknown debug action {action!r}; choose crash or block")

    def _check_agent(self, agent: str) -> None:
        if agent not in self.config.agents:
            import difflib

            close = difflib.get_close_matches(agent, list(self.config.agents), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise AdminError(
                f"unknown agent {agent!r}; {hint}agents: {', '.join(self.config.agents)}"
            )


def _mark_paused(node: dict[str, Any], paused: Mapping[str, str]) -> None:
    if node.get("kind") == "worker" and node.get("id") in paused and node.get("state") == "running":
        node["state"] = "paused"
        reason = paused[node["id"]]
        node["pause_reason"] = "budget" if reason.startswith("budget") else "operator"
    for child in node.get("children", ()):
        _mark_paused(child, paused)


def _agent_nodes(node: dict[str, Any], agents: set[str]) -> list[dict[str, Any]]:
    out = [node] if node.get("kind") == "worker" and node.get("id") in agents else []
    for child in node.get("children", ()):
        out += _agent_nodes(child, agents)
    return out


def _epoch(value: Any) -> float | None:
    """Epoch seconds from an ISO 8601 string (or a number); None if neither."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        from datetime import datetime

        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _spend_for_status(report: Mapping[str, Any], paused: Mapping[str, str]) -> dict[str, Any]:
    """The status ``spend`` block (docs/daemon.md) from the spend book's budget report."""
    rows = [r for r in report.get("budgets", []) if isinstance(r, Mapping)]
    out: dict[str, Any] = {"currency": "USD"}
    for name, period in (("today", "day"), ("month", "month")):
        row = next(
            (r for r in rows if r.get("scope") == "company" and r.get("period") == period), None
        )
        out[name] = {
            "used_usd": (row or {}).get("used_usd", 0.0),
            "reserved_usd": (row or {}).get("reserved_usd", 0.0),
            "limit_usd": (row or {}).get("limit_usd"),
            "resets_at": _epoch((row or {}).get("resets_at")),
        }
    agents: dict[str, dict[str, Any]] = {}
    for r in rows:
        agent = r.get("agent")
        if not agent:
            continue
        entry = agents.setdefault(
            agent, {"agent": agent, "today_usd": 0.0, "month_usd": 0.0, "paused": agent in paused}
        )
        if r.get("period") == "day":
            entry["today_usd"] = r.get("used_usd", 0.0)
            entry["daily_limit_usd"] = r.get("limit_usd")
        elif r.get("period") == "month":
            entry["month_usd"] = r.get("used_usd", 0.0)
            entry["monthly_limit_usd"] = r.get("limit_usd")
    out["agents"] = list(agents.values())
    return out


def _routine_for_status(r: Mapping[str, Any]) -> dict[str, Any]:
    """One status ``routines`` row (docs/daemon.md) from the scheduler's jobs view."""
    raw = r.get("last")
    last: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    return {
        "routine": r.get("routine"),
        "agent": r.get("agent"),
        "schedule": r.get("schedule"),
        "next_fire": _epoch(r.get("next_fire")),
        "last_fire": _epoch(last.get("scheduled") or last.get("started")),
        "last_outcome": last.get("outcome"),
        "enabled": r.get("enabled", True),
    }


def _shown_error(text: str) -> str:
    """A config error as status shows it: through the one redactor (known secrets and
    values that look like one), on one line."""
    return " ".join(redact(text).split())[:500]  # one line: status prints it in a line


def _restart_only_changes(old: CompanyConfig, new: CompanyConfig, state_dir: Path) -> list[str]:
    """The settings read once at start that differ between ``old`` and ``new``: a reload
    cannot apply them (the state directory, the memory file, the model client, metrics)."""
    changed = []
    # (when --state-dir chose the directory, company.yaml's state_dir does not matter)
    if old.state_dir() == state_dir and new.state_dir() != state_dir:
        changed.append("state_dir")
    if old.memory_path(state_dir) != new.memory_path(state_dir):
        changed.append("memory.path")
    if old.spec.anthropic != new.spec.anthropic:
        changed.append("anthropic")
    if old.spec.metrics != new.spec.metrics:
        changed.append("metrics")
    return changed


#: Set by a SIGHUP that arrives before the daemon's event loop handles the signal.
_EARLY_SIGHUP: list[bool] = []


def _remember_early_sighup(signum: int, frame: Any) -> None:
    _EARLY_SIGHUP[:] = [True]


def _log_task_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("reload failed: %r", task.exception())
