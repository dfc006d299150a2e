"""Reloading company.yaml in a running daemon (SIGHUP, ``companyd reload``, an approved
proposal): re-read the file, keep the running version if the new one is invalid, else hand
the new one to every service and apply the difference to the supervision tree.

:class:`Reloader` is a part of :class:`~companyd.daemon._main.Daemon` (a mixin: the services
it reconfigures are the daemon's); :class:`ReloadRecord` is the outcome ``status`` shows.
One reload runs at a time; one asked for during start-up waits until the company is up, one
asked for while the daemon stops is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from companyd._secrets import redact
from companyd.admin import (
    AdminError,
    DepartmentChanges,
    ReloadApplied,
    ReloadBlock,
    ReloadRejected,
    ReloadRejectedBlock,
)
from companyd.agents import Staff
from companyd.alerts import AlertService
from companyd.clock import Clock
from companyd.config import CompanyConfig, company_schema, load_config
from companyd.daemon._actions import recorded
from companyd.daemon._systemd import Notifier
from companyd.desk import Proposals
from companyd.errors import ConfigError
from companyd.events import ConfigRejected, DaemonReloaded, EventBus
from companyd.scheduler import RoutineScheduler
from companyd.spend import SpendBook
from companyd.telemetry import telemetry_endpoint

__all__ = [
    "ReloadRecord",
    "Reloader",
    "in_force",
    "restart_only_changes",
    "shown_error",
    "waiting_for_restart",
]

log = logging.getLogger("companyd.daemon")  # the daemon's own log lines, whichever module


@dataclass
class ReloadRecord:
    """The last reload's outcome, for status: when, ``"applied"`` | ``"rejected"``, and the
    last rejected one (when, how many errors, the first one, secrets masked).
    """

    last_at: float | None = None
    last_result: str | None = None
    last_rejected: ReloadRejectedBlock | None = None
    #: every error of the last rejected reload, as :func:`shown_error` shows them
    last_errors: list[str] = field(default_factory=list)

    def applied(self, at: float) -> None:
        """Record an applied reload."""
        self.last_at, self.last_result = at, "applied"

    def rejected(self, at: float, errors: list[str]) -> None:
        """Record a rejected reload and its errors."""
        self.last_at, self.last_result = at, "rejected"
        self.last_rejected = {
            "at": at,
            "errors": len(errors),
            "first_error": shown_error(errors[0]) if errors else "",
        }
        self.last_errors = [shown_error(e) for e in errors]

    def to_dict(self) -> ReloadBlock:
        """The ``daemon.reload`` block of status (docs/daemon.md)."""
        return {
            "last_at": self.last_at,
            "last_result": self.last_result,
            "rejected": self.last_rejected.copy() if self.last_rejected else None,
        }


class Reloader:
    """The daemon's reload (the ``reload`` operation of :class:`~companyd.admin.Admin`).

    The attributes below are the daemon's; :class:`~companyd.daemon._main.Daemon` sets them.
    """

    config: CompanyConfig
    started_config: CompanyConfig
    state_dir: Path
    oneoff: bool
    clock: Clock
    bus: EventBus
    notifier: Notifier
    state: str
    config_loaded_at: float
    reloads: ReloadRecord
    staff: Staff
    spend_book: SpendBook
    proposal_store: Proposals
    alerts: AlertService
    scheduler: RoutineScheduler
    tree: Any
    _up: asyncio.Event
    _stop: asyncio.Event
    _reload_lock: asyncio.Lock

    def _status_line(self) -> str:
        """The STATUS= line sent with READY=1 after a reload (the daemon's)."""
        raise NotImplementedError

    async def reload(self, via: str = "cli") -> ReloadApplied | ReloadRejected:
        """Re-read company.yaml; apply the difference or keep the old config.

        A reload asked for during start-up waits until the tree is up (READY=1 is sent
        once, when it is); one asked for while the daemon stops is refused. Reloads run one
        at a time, in the order asked; one whose caller is cancelled once the company is up
        still runs (and is recorded), and the next waits for it. An operator's reload is an
        ``operator_action`` ``via`` where it was asked (``cli``, ``telegram``; empty: the
        daemon's own, on SIGHUP or after an applied proposal — not recorded).
        """
        if not self._up.is_set() and not self._stopping():
            log.info("reload requested during start-up: applied once the company is up")
            await self._up.wait()
        # The lock and the record are taken inside the shield: a caller that gives up (the
        # control socket's deadline, a closed connection) leaves its reload applying, holding
        # the lock — the next one waits for it rather than running beside it (two at once
        # answered from a half-applied company and sent READY=1 in the middle of the
        # second) — and recorded as the operator's action once it is done.
        return await asyncio.shield(
            recorded(self.bus, "reload", "company.yaml", via, self._reload_in_turn())
        )

    async def _reload_in_turn(self) -> ReloadApplied | ReloadRejected:
        async with self._reload_lock:
            if self._stopping():
                log.info("reload not applied: the daemon is stopping")
                return ReloadRejected(
                    applied=False,
                    errors=["the daemon is stopping; company.yaml was not reloaded"],
                    message="reload refused: the daemon is stopping",
                )
            return await self._reload()

    def _stopping(self) -> bool:
        return self._stop.is_set() or self.state == "stopping"

    async def _reload(self) -> ReloadApplied | ReloadRejected:
        self.notifier.reloading("reloading company.yaml")
        self.state = "reloading"
        try:
            try:
                new = await asyncio.to_thread(load_config, self.config.path)
            except ConfigError as exc:
                errors = [str(i) for i in exc.issues]
                self.reloads.rejected(self.clock.time(), errors)
                self.bus.publish(
                    ConfigRejected(
                        source="daemon",
                        file=str(self.config.path),
                        errors=errors[:10],
                        count=len(errors),
                    )
                )
                return ReloadRejected(
                    applied=False,
                    errors=errors,
                    message=f"company.yaml rejected ({len(errors)} problem(s)); the "
                    "previous version keeps running",
                )
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
            for w in new.warnings:
                # as `companyd run` logs them at start: the file loads, and the journal says
                # what in it will not work as the founder may think
                log.warning("%s", w)
            self.reloads.applied(self.config_loaded_at)
            # restarted: also the agents of a department restarted for its new settings;
            # unchanged: the agents that run on untouched (a disabled one is not in the tree:
            # disabling one stops it, so it is never also "unchanged")
            restarted = diff.restarted_agents
            unchanged = [
                s
                for s, a in new.agents.items()
                if a.enabled and s in old.agents and old.agents[s].enabled and s not in restarted
            ]
            # against what runs, not the last file loaded: a change an earlier reload could
            # not apply still waits for the restart, and one undone no longer does
            later = waiting_for_restart(self.started_config, new, self.state_dir, self.alerts)
            result = ReloadApplied(
                applied=True,
                added=list(diff.added_agents),
                removed=list(diff.removed_agents),
                changed=list(restarted),
                unchanged=len(unchanged),
                departments=DepartmentChanges(
                    added=list(diff.added_departments),
                    removed=list(diff.removed_departments),
                    changed=list(diff.changed_departments),
                ),
                routines=routines,
                failures=list(diff.failures),
                resumed=list(resumed),
                restart_required=later or None,
                warnings=[str(w) for w in new.warnings] or None,
                settings=applied_settings(old, new, later) or None,
            )
            for failure in diff.failures:
                # the reload's answer, its alert and this line say it; status's tree shows
                # the agent absent
                log.warning("company.yaml reloaded, but not applied: %s", failure)
            if later:
                log.warning(
                    "company.yaml reloaded, but %s only take(s) effect when the daemon "
                    "restarts (`systemctl restart companyd`)",
                    ", ".join(later),
                )
            self.bus.publish(
                DaemonReloaded(
                    source="daemon",
                    started=list(result.added),
                    stopped=list(result.removed),
                    restarted=list(result.changed),
                    unchanged=result.unchanged,
                    routines=routines,
                    failures=list(result.failures),
                    restart_required=later or None,
                    warnings=result.warnings,
                )
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
        result = await self.reload(via="")
        if isinstance(result, ReloadRejected):
            raise AdminError(
                "the change was written but company.yaml was rejected on reload: "
                + "; ".join(result.errors[:3])
            )


def shown_error(text: str) -> str:
    """A config error as status shows it: through the one redactor (known secrets and
    values that look like one), on one line.
    """
    return " ".join(redact(text).split())[:500]  # one line: status prints it in a line


def waiting_for_restart(
    started: CompanyConfig, running: CompanyConfig, state_dir: Path, alerts: AlertService
) -> list[str]:
    """What the running file (``running``: the last one loaded) changed that only a
    restart applies: the daemon's settings read at start against the file it started with,
    and the pager's Telegram settings against its current run's. The reload's answer and
    status (``restart_required``) and the dashboard's Config page all say this.
    """
    return restart_only_changes(started, running, state_dir) + alerts.restart_pending()


def in_force(started: CompanyConfig, current: CompanyConfig) -> CompanyConfig:
    """What runs: ``current`` (the last file a reload applied) with the settings read once at
    start taken from ``started`` (the file the daemon started with) — the ones
    :func:`restart_only_changes` lists: ``state_dir``, ``state`` (the backend, and the
    PostgreSQL schema it opened: named explicitly, so a rename since does not move it),
    ``memory``, the model client's ``anthropic`` settings (``quota_pause_after`` is the
    reload's), ``metrics``, ``dashboard`` and ``telemetry``. ``text`` stays the current
    file's. What describes or copies the running company (a backup) reads this, not either
    file alone.
    """
    if started is current:
        return current
    st = started.spec.state
    if st.backend == "postgres" and st.schema_ is None:
        # the schema the stores opened was named after the company: a rename waits
        st = st.model_copy(update={"schema_": company_schema(started)})
    live = {"quota_pause_after": current.spec.anthropic.quota_pause_after}
    spec = current.spec.model_copy(
        update={
            "state_dir": started.spec.state_dir,
            "state": st,
            "memory": started.spec.memory,
            "anthropic": started.spec.anthropic.model_copy(update=live),
            "metrics": started.spec.metrics,
            "dashboard": started.spec.dashboard,
            "telemetry": started.spec.telemetry,
        }
    )
    return dataclasses.replace(current, spec=spec)


#: company.yaml's sections whose changes the reload's answer lists apart (agents, routines
#: and departments by name) or that only a restart applies (restart_only_changes).
_REPORTED_APART = frozenset(
    {"schema_", "agents", "routines", "departments", "state_dir", "state", "memory"}
    | {"anthropic", "metrics", "dashboard", "telemetry"}
)


def applied_settings(old: CompanyConfig, new: CompanyConfig, later: list[str]) -> list[str]:
    """The settings outside agents, routines and departments that ``new`` changed and the
    reload applied now — ``company.budget``, ``company.name``, ``alerts``, ``defaults``,
    ``retention``… (a reload of only those read "no agent changed"), less those in ``later``
    (they wait for the restart).
    """
    changed: list[str] = []
    for name in type(new.spec).model_fields:
        if name in _REPORTED_APART:
            continue
        before, after = getattr(old.spec, name), getattr(new.spec, name)
        if before == after:
            continue
        if name == "company":
            changed += [
                f"company.{f}"
                for f in type(after).model_fields
                if getattr(before, f) != getattr(after, f)
            ]
        else:
            changed.append(name)
    if old.spec.anthropic.quota_pause_after != new.spec.anthropic.quota_pause_after:
        changed.append("anthropic.quota_pause_after")
    return [c for c in changed if c not in later]


def restart_only_changes(old: CompanyConfig, new: CompanyConfig, state_dir: Path) -> list[str]:
    """The settings read once at start that differ between ``old`` and ``new``: a reload
    cannot apply them (the state directory, where the stores live, the memory file, the
    model client, metrics, the dashboard's address, telemetry, and the company's name where
    telemetry or PostgreSQL's default schema took it). The daemon passes the file
    it started with as ``old`` (what runs until the restart), never the last one a reload
    loaded.
    """
    changed = []
    # (when --state-dir chose the directory, company.yaml's state_dir does not matter)
    if old.state_dir() == state_dir and new.state_dir() != state_dir:
        changed.append("state_dir")
    # the stores' backend is chosen at start; PostgreSQL's settings mean nothing on SQLite
    old_st, new_st = old.spec.state, new.spec.state
    if old_st != new_st and "postgres" in (old_st.backend, new_st.backend):
        changed.append("state")
    if old.memory_path(state_dir) != new.memory_path(state_dir):
        changed.append("memory.path")
    # the model client is made at start; quota_pause_after is the agents' (their quota
    # walls), which a reload applies
    live = {"quota_pause_after": 0.0}
    if old.spec.anthropic.model_copy(update=live) != new.spec.anthropic.model_copy(update=live):
        changed.append("anthropic")
    if old.spec.metrics != new.spec.metrics:
        changed.append("metrics")
    if old.spec.dashboard != new.spec.dashboard:
        changed.append("dashboard")
    if old.spec.telemetry != new.spec.telemetry:
        changed.append("telemetry")
    # the company's name lives on until the restart where it was read at start: the
    # tracer's resource (``companyd.company``; telemetry on from the file or the
    # environment) and the PostgreSQL schema named after it (no ``state.schema``) — a
    # restart opens the new name's schema
    if old.name != new.name and (
        telemetry_endpoint(old.spec.telemetry.otlp_endpoint) is not None
        or (old_st.backend == "postgres" and company_schema(old) != company_schema(new))
    ):
        changed.append("company.name")
    return changed
