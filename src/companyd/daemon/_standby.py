"""A standby: a daemon of a company whose leader is another daemon (docs/ha.md).

With ``state.backend: postgres`` several daemons may run the same company.yaml on one
database; :class:`~companyd.storage._leadership.Leadership` makes exactly one the leader.
Until it leads, a daemon is a *standby*: its config is loaded and validated, nothing of the
company runs (no agent, no routine, no Telegram), and its control socket answers

* ``status`` — ``daemon.role: standby``, who leads and since when, the company's spend as
  the shared ledger has it;
* ``budget`` and ``spend`` — read from the shared ledger; ``jobs`` and ``job_history``
  from the shared routine history; ``runs``, ``run_show``, ``tasks``, ``proposals``,
  ``inbox`` and ``config_view`` by the daemon's own operations over the shared stores;
* anything else — refused with an answer that names the leader (``admin`` error), so a
  script on the wrong host learns where to go instead of hanging.

:func:`stand_by` runs that phase: the standby control socket and ``READY=1`` (the unit is
up, as a standby), until the daemon wins the leadership (True) or is asked to stop (False).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import date
from typing import TYPE_CHECKING, Any

from companyd._aio import race
from companyd.admin import (
    OPERATIONS,
    AdminError,
    AgentCounts,
    BudgetReport,
    CompanyInfo,
    JobHistory,
    Jobs,
    LeaderBlock,
    PagerHealth,
    SpendReport,
    Status,
)
from companyd.clock import Clock, utc_from_ts
from companyd.daemon._control import ControlServer
from companyd.daemon._operator import Operator, enabled_agents, spend_for_status
from companyd.spend import Ledger, LedgerError, read_budget_report
from companyd.supervision import StandaloneContext

if TYPE_CHECKING:  # types only: they import PostgreSQL's driver (issue 31)
    from companyd.storage import LeaderInfo, Leadership

__all__ = ["StandbyAdmin", "leader_block", "stand_by"]

log = logging.getLogger("companyd.daemon.standby")

#: The read operations a standby answers itself, from the shared ledger and routine
#: history (everything else names the leader).
ANSWERED = frozenset({"status", "budget", "spend", "jobs", "job_history"})

#: Reads of the shared run journal, desk and proposals the daemon's own operations answer
#: on a standby too. Not the memory's (its owner runs on the leader only) nor anything that
#: writes or acts.
DELEGATED = frozenset({"runs", "run_show", "tasks", "proposals", "inbox", "config_view"})


def leader_block(info: LeaderInfo | None) -> LeaderBlock | None:
    """The status ``daemon.leader`` block of ``info`` (None: nobody leads right now)."""
    if info is None:
        return None
    return LeaderBlock(
        node=info.node, host=info.host, pid=info.pid, since=info.since, epoch=info.epoch
    )


class StandbyAdmin:
    """The control socket's operations on a standby (see the module docstring).

    Args:
        daemon: the standby daemon (its config, state directory, clock…).
        leadership: the campaign, asked who leads.
    """

    def __init__(self, daemon: Operator, leadership: Leadership) -> None:
        self._d = daemon
        self._leadership = leadership

    async def _leader(self) -> LeaderInfo | None:
        try:
            return await self._leadership.who()
        except Exception as exc:  # the database is unreachable: status still answers
            log.warning("standby: cannot read who leads: %s", exc)
            return None

    def _ledger(self) -> Ledger | None:
        """The shared ledger, read-only (None: nothing written yet). On the caller's
        thread: call it through ``asyncio.to_thread``.
        """
        from companyd.storage import StoreAbsent  # a standby is PostgreSQL's: driver loaded

        try:
            return Ledger(
                self._d.state_dir / "spend.sqlite", readonly=True, backend=self._d.storage
            )
        except StoreAbsent:
            return None

    async def _read(self, fn: Callable[[Ledger | None], Any]) -> Any:
        def job() -> Any:
            ledger = self._ledger()
            try:
                return fn(ledger)
            finally:
                if ledger is not None:
                    ledger.close()

        return await asyncio.to_thread(job)

    async def status(self) -> Status:
        """``status`` as a standby: role, who leads, the shared ledger's spend."""
        d = self._d
        now = d.clock.time()
        leader = await self._leader()
        try:
            report = await self._read(
                lambda led: read_budget_report(d.config, led, now=d.clock.time())
            )
            spend = spend_for_status(report, {})
        except LedgerError as exc:
            spend = spend_for_status({}, {}, unavailable=str(exc))
        return Status(
            now=now,
            daemon=d.daemon_info(now, leader=leader_block(leader), dashboard=False),
            company=CompanyInfo(name=d.config.name, timezone=d.config.timezone),
            agents=AgentCounts(
                total=len(enabled_agents(d.config)), running=0, paused=0, failed=0, busy=0
            ),
            tree={},
            runs_in_flight=[],
            alerts=PagerHealth(
                telegram="off",
                queued=0,
                held=0,
                failed=0,
                reason="standby: the leader sends alerts",
                commands="off",
                commands_since=None,
                commands_error="",
            ),
            spend=spend,
            routines=[],
        )

    async def budget(self) -> BudgetReport:
        """``budget`` from the shared ledger."""
        report = await self._read(
            lambda led: read_budget_report(self._d.config, led, now=self._d.clock.time())
        )
        return BudgetReport(
            timezone=report["timezone"],
            now=report["now"],
            day=report["day"],
            month=report["month"],
            budgets=report["budgets"],
            in_flight=report.get("in_flight", 0),
        )

    async def spend(
        self, by: str = "agent", period: str = "today", per_day: bool = False
    ) -> SpendReport:
        """``spend`` from the shared ledger."""
        from companyd.spend import spend_report  # here: only a report needs it (issue 31)

        budget = await self.budget()
        today = budget.day

        def report(led: Ledger | None) -> Any:
            if led is None:
                return {"by": by, "period": {"label": period}, "rows": [], "total": None}
            return spend_report(led, by, period, date.fromisoformat(today), per_day=per_day)

        try:
            data = await self._read(report)
        except ValueError as exc:
            raise AdminError(str(exc)) from None
        return SpendReport(
            by=data["by"], period=data["period"], rows=data["rows"], total=data["total"]
        )

    async def jobs(self) -> Jobs:
        """``jobs`` from the shared routine history (``daemon: false``: nothing fires
        here; the next fires are the schedule's, as the leader will fire them).
        """
        from companyd.scheduler import read_jobs  # here: only `jobs` needs it (issue 31)

        d = self._d
        now = d.clock.time()
        views, _ = await asyncio.to_thread(
            read_jobs, d.config, d.state_dir / "routines.sqlite", d.storage, now
        )
        return Jobs(
            daemon=False,
            generated=utc_from_ts(now).isoformat(),
            routines=[v.to_dict() for v in views],
        )

    async def job_history(self, routine: str, limit: int = 20) -> JobHistory:
        """``job_history`` from the shared routine history."""
        # here: only a history needs them (issue 31)
        from companyd.scheduler import history_data, read_fires

        d = self._d
        records = await asyncio.to_thread(
            read_fires, d.state_dir / "routines.sqlite", d.storage, routine, limit
        )
        if not records and routine not in d.config.routines:
            raise AdminError(
                f"no routine {routine!r} in company.yaml; routines: "
                f"{', '.join(d.config.routines) or '(none)'}"
            )
        return JobHistory(**history_data(d.config.routines, routine, records))

    def __getattr__(self, op: str) -> Callable[..., Awaitable[Any]]:
        if op not in OPERATIONS:
            raise AttributeError(op)
        if op in DELEGATED:
            # a read of a shared store: the daemon's own operation answers it (its stores
            # open on first use; a standby never writes through them)
            method: Callable[..., Awaitable[Any]] = getattr(self._d, op)
            return method

        async def refused(**_: Any) -> Any:
            leader = await self._leader()
            where = (
                f"{leader.node} (host {leader.host}, pid {leader.pid}, since epoch {leader.epoch})"
                if leader is not None
                else "nobody right now (a takeover is under way)"
            )
            raise AdminError(
                f"this daemon is a standby: {op!r} runs on the leader, which is {where}; "
                "run the command on the leader's host (status, budget, spend, jobs and "
                "jobs history work here)"
            )

        return refused


async def stand_by(
    daemon: Operator,
    leadership: Leadership,
    *,
    stop: asyncio.Event,
    clock: Clock,
    ready: Callable[[str], object],
    control_group: str | None = None,
    shutdown: float = 10.0,
) -> tuple[bool, LeaderInfo | None]:
    """Be a standby until this daemon leads (True) or ``stop`` is set (False); with it, the
    last leader seen while standing by (None: there was none — the company's first start).

    Serves the standby control socket at ``daemon.socket`` meanwhile and tells systemd the
    unit is up (``ready``: its STATUS line). The socket is closed before returning, so the
    leader's own control socket can take the path.
    """
    admin = StandbyAdmin(daemon, leadership)
    previous: LeaderInfo | None = None
    control = ControlServer(
        # Admin by duck typing: the read operations, and __getattr__ refusing the others
        admin,  # type: ignore[arg-type]
        daemon.socket,
        clock=clock,
        group=control_group,
        state_dir=daemon.state_dir,
    )
    ctx = StandaloneContext()
    serving = asyncio.create_task(control.run(ctx), name="standby-control")
    campaign = asyncio.create_task(leadership.campaign(), name="leadership-campaign")
    try:
        async with asyncio.timeout(shutdown):
            await race(ctx.ready.wait(), serving)
        if serving.done():
            serving.result()  # the socket could not be bound: say why
        leader = previous = await admin._leader()
        line = (
            f"standby: {leader.node} leads since epoch {leader.epoch}"
            if leader is not None
            else "standby: campaigning"
        )
        log.info("%s", line)
        ready(line)
        await race(campaign, stop.wait())
    finally:
        ctx.stopping.set()
        try:
            async with asyncio.timeout(shutdown):
                await asyncio.gather(serving, return_exceptions=True)
        finally:
            if not campaign.done():
                campaign.cancel()
                await asyncio.gather(campaign, return_exceptions=True)
    if campaign.cancelled() or not campaign.done():
        return False, previous
    campaign.result()  # a campaign that failed raises here
    return True, previous
