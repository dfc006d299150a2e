"""The operator's side of the daemon: the one implementation of :class:`~companyd.admin.Admin`
that the control socket, Telegram commands and ``companyd ask`` without a daemon call —
status, spend and budgets, routines, pause and resume, ask, runs and tasks, proposals, and
the fault injection of ``companyd debug``.

:class:`Operator` is a part of :class:`~companyd.daemon._main.Daemon` (a mixin: it asks the
daemon's services and owns no state of its own); the ``reload`` operation is
:class:`~companyd.daemon._reload.Reloader`'s. Refusals are :class:`~companyd.admin.AdminError`
with a message for the operator; results are the dataclasses of :mod:`companyd.admin._results`
(their JSON is what docs/daemon.md describes).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from companyd import __version__
from companyd._aio import race
from companyd.admin import (
    AdminError,
    AdminStopping,
    AgentCounts,
    AskAnswer,
    BudgetRaised,
    BudgetReport,
    CompanyInfo,
    DaemonInfo,
    DashboardLogin,
    DebugBlocked,
    DebugCrashed,
    DeskDecision,
    Inbox,
    JobHistory,
    JobResumed,
    JobRun,
    Jobs,
    LeaderBlock,
    Paused,
    ProposalDecision,
    Proposals,
    Resumed,
    ResumedAll,
    RoutineLine,
    Runs,
    RunTranscript,
    SpendLine,
    SpendPeriodLine,
    SpendReport,
    SpendStatus,
    Status,
    TaskRetried,
    Tasks,
    WebhookFired,
    one_usd,
)
from companyd.agents import Staff
from companyd.alerts import AlertService
from companyd.clock import Clock, clock_time
from companyd.config import CompanyConfig
from companyd.daemon._actions import recorded
from companyd.daemon._dashboard import WebDashboard
from companyd.daemon._reload import ReloadRecord, waiting_for_restart
from companyd.daemon._systemd import LoopLagMonitor
from companyd.daemon._toolsops import approve_tools_item
from companyd.desk import (
    TOOLS_ITEM,
    Desk,
    ItemState,
    ProposalError,
    decide,
    decisions_of,
    gather_inbox,
    not_an_inbox_id,
    on_desk,
)
from companyd.desk import Proposals as ProposalStore
from companyd.events import Event, EventBus, Subscription
from companyd.runs import Journal, RunOutcome, RunStatus, Task, follow_up_prompt, new_id
from companyd.scheduler import RoutineBusy, RoutineNotFound, RoutineScheduler
from companyd.spend import LedgerError, SpendBook, SpendError
from companyd.storage import Backend

__all__ = ["NO_SPEND", "Operator", "spend_for_status"]


_T = TypeVar("_T")


class Operator:
    """The Admin operations over the daemon's services.

    The attributes below are the daemon's; :class:`~companyd.daemon._main.Daemon` sets them.
    """

    config: CompanyConfig
    started_config: CompanyConfig
    state_dir: Path
    clock: Clock
    state: str
    started_at: float
    config_loaded_at: float
    reloads: ReloadRecord
    socket: Path
    offline: bool
    storage: Backend
    role: str | None
    leader: LeaderBlock | None
    lag: LoopLagMonitor
    tree: Any
    staff: Staff
    alerts: AlertService
    spend_book: SpendBook
    scheduler: RoutineScheduler
    journal: Journal
    proposal_store: ProposalStore
    desk: Desk
    web: WebDashboard
    bus: EventBus

    def daemon_info(
        self, now: float, *, leader: LeaderBlock | None = None, dashboard: bool = True
    ) -> DaemonInfo:
        """The status ``daemon`` block as of ``now`` (``leader``: who leads, when this
        daemon is a standby and knows; ``dashboard``: False while it serves none).
        """
        return DaemonInfo(
            pid=os.getpid(),
            version=__version__,
            state=self.state,
            started_at=self.started_at,
            uptime_s=now - self.started_at,
            config=str(self.config.path),
            config_loaded_at=self.config_loaded_at,
            config_sha256=self.config.text_sha256(),
            reload=self.reloads.to_dict(),
            state_dir=str(self.state_dir),
            socket=str(self.socket),
            offline=self.offline,
            loop_lag=self.lag.stats().to_dict(),
            dashboard=self.web.url if dashboard else None,
            storage=self.storage.describe(),
            role=self.role,
            leader=leader or self.leader,
            restart_required=(
                waiting_for_restart(self.started_config, self.config, self.state_dir, self.alerts)
                or None
            ),
        )

    def _status_sync(self) -> partial[Status]:
        """Status as of now, but for its spend and routines (read next, with an await)."""
        now = self.clock.time()
        tree = self.tree.snapshot() if self.tree is not None else {}
        paused = self.staff.paused()
        _mark_paused(tree, paused)
        ends = self.staff.pauses.ends()
        _mark_paused_until(tree, {a: clock_time(t, self.config.timezone) for a, t in ends.items()})
        _mark_not_serving(tree, self._not_serving())
        running = self.staff.in_flight()
        # the agents that should run: a disabled one is not in the tree, nor down
        enabled = enabled_agents(self.config)
        _mark_dropped(tree, self.config, enabled)
        agent_nodes = _agent_nodes(tree, enabled)
        # down: restarting, stopped or failed in the tree — or not in it at all once it is
        # up (a department being restarted shows no children; a temporary agent that
        # crashed, dropped by OTP's rule, is put back in the tree above, failed)
        absent = len(enabled - {n.get("id") for n in agent_nodes}) if tree else 0
        down = ("restarting", "stopped", "failed")
        return partial(
            Status,
            now=now,
            daemon=self.daemon_info(now),
            company=CompanyInfo(name=self.config.name, timezone=self.config.timezone),
            agents=AgentCounts(
                total=len(enabled),
                running=sum(1 for n in agent_nodes if n.get("state") == "running"),
                paused=len(paused),
                failed=sum(1 for n in agent_nodes if n.get("state") in down) + absent,
                busy=len(running),
            ),
            tree=tree,
            runs_in_flight=[{**r, "elapsed_s": now - r["started_at"]} for r in running],
            alerts=self.alerts.snapshot(),
        )

    def _not_serving(self) -> dict[str, str]:
        """The service children that run but serve nothing, each with why: the dashboard
        whose address cannot be bound (it retries, reporting itself started meanwhile).
        """
        server = self.web.server
        problem = server.problem if server is not None else None
        return {"dashboard": problem} if problem else {}

    async def status(self) -> Status:
        """:meth:`Admin.status`: the tree with paused agents marked, runs in flight, spend and
        routines. Always answers: an unreadable ledger or routine history shows as unavailable, not
        as an error.
        """
        status = self._status_sync()
        spend = await self._spend_status()
        return status(spend=spend, routines=await self._routines_status())

    async def _spend_status(self) -> SpendStatus:
        try:
            report = await self.spend_book.budget_report()
            simulated = await self.spend_book.simulated()
        except LedgerError as exc:
            # the ledger cannot be opened (a full state disk at start): status still answers
            return spend_for_status({}, self.staff.paused(), unavailable=str(exc))
        return spend_for_status(report, self.staff.paused(), simulated=simulated)

    async def _routines_status(self) -> list[RoutineLine]:
        try:
            jobs = await self.scheduler.jobs()
        except AdminError:  # the history cannot be opened (a full state disk): none to show
            return []
        return [_routine_for_status(r) for r in jobs.get("routines", []) if isinstance(r, Mapping)]

    async def spend(
        self, by: str = "agent", period: str = "today", per_day: bool = False
    ) -> SpendReport:
        """:meth:`Admin.spend`, from the spend book.

        Raises:
            AdminError: an unknown grouping or period (the message lists the valid ones).
        """
        try:
            report = await self.spend_book.spend_report(by=by, period=period, per_day=per_day)
        except (ValueError, SpendError) as exc:  # SpendError: a refusal, as AdminError says
            raise AdminError(str(exc)) from None
        return SpendReport(
            by=report["by"], period=report["period"], rows=report["rows"], total=report["total"]
        )

    async def budget(self) -> BudgetReport:
        """:meth:`Admin.budget`: the spend book's budget report."""
        report = await self.spend_book.budget_report()
        return BudgetReport(
            timezone=report["timezone"],
            now=report["now"],
            day=report["day"],
            month=report["month"],
            budgets=report["budgets"],
            in_flight=report["in_flight"],
        )

    async def raise_budget(self, agent: str | None, usd: float, via: str = "cli") -> BudgetRaised:
        """:meth:`Admin.raise_budget`; the agents paused by a spent budget that the raise covers
        are resumed, and the result names them and today's new limit.

        Raises:
            AdminError: an unknown agent, or an amount that is not positive.
        """
        return await self._recorded(
            "raise_budget", agent or "company", via, self._raise_budget(agent, usd)
        )

    async def _raise_budget(self, agent: str | None, usd: float) -> BudgetRaised:
        if agent is not None:
            self._check_agent(agent)
        if not usd > 0:
            raise AdminError(f"the raise must be a positive amount of dollars, got {usd!r}")
        try:
            await self.spend_book.raise_today(agent, Decimal(str(usd)))
        except SpendError as exc:  # refused (the day's cap, no budget to raise): said as is
            raise AdminError(str(exc)) from None
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
        # each amount exact to a millionth (docs/spend.md): "$0.1234567" stored as $0.123457
        # read "$0.12", and a limit of $5.010001 "$5.01"
        return BudgetRaised(
            agent=agent,
            raised_usd=usd,
            daily_limit_usd=daily,
            resumed=list(resumed),
            message=f"raised today's budget of {who} by {one_usd(round(usd, 6))}"
            + (
                f" (today's limit is now {one_usd(daily)}; back to company.yaml tomorrow)"
                if daily is not None
                else " (for today; back to company.yaml tomorrow)"
            )
            + (f"; resumed {', '.join(resumed)}" if resumed else ""),
        )

    async def jobs(self) -> Jobs:
        """:meth:`Admin.jobs`, from the scheduler."""
        view = await self.scheduler.jobs()
        return Jobs(daemon=view["daemon"], generated=view["generated"], routines=view["routines"])

    async def job_history(self, routine: str, limit: int = 20) -> JobHistory:
        """:meth:`Admin.job_history`.

        Raises:
            AdminError: no routine of that name.
        """
        try:
            history = await self.scheduler.history(routine, limit)
        except RoutineNotFound as exc:
            raise AdminError(str(exc)) from None
        return JobHistory(**history)

    async def run_job(self, routine: str, via: str = "cli") -> JobRun:
        """:meth:`Admin.run_job`: fire ``routine`` now and wait for the run's outcome — or
        until the founder is asked: for a routine with ``approval: required``, its result
        (``state`` ``awaiting_approval``); mid-run, a tool call to approve or a question
        (``waiting_for_founder``) — with the item and where to decide. The fire goes on.

        Raises:
            AdminError: no routine of that name, or its concurrency policy has no room for another
                run.
            AdminStopping: the daemon began to stop before the fire ended (or before it
                was fired): answered at once with what becomes of the fire's run, rather
                than holding the stop for a caller that only waits.
        """
        return await self._recorded("run_job", routine, via, self._run_job(routine, via))

    async def _run_job(self, routine: str, via: str) -> JobRun:
        if self.staff.draining.is_set():
            raise AdminStopping(
                f"the daemon is stopping; routine {routine} was not fired — "
                + _fire_again(routine, via),
                done=False,
            )
        # the run may stop to ask the founder (a tool call to approve, a question): that
        # is answered at once too — a human's answer may take hours, the command 60 s
        asking = self.bus.subscribe(kinds={"founder_approval_requested", "founder_question"})
        # the fire's own id: another fire of the routine (its schedule, a second `jobs run`)
        # may ask the founder meanwhile, and this caller must hear of its own run only
        fire_id = new_id("fire")
        fire = asyncio.ensure_future(self.scheduler.fire_now(routine, fire_id=fire_id))
        ours = partial(self.scheduler.fire_task, fire_id)
        asked = asyncio.ensure_future(_asked_in(asking, routine, self.journal, ours))
        # a stop ends the wait, not the fire: its run stops at a checkpoint and resumes
        stopping = asyncio.ensure_future(self.staff.draining.wait())
        try:
            await asyncio.wait((fire, asked, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            asking.close()
            founder = asked.result() if asked.done() else None
            asked.cancel()
            stopping.cancel()
        if not fire.done():
            # the fire goes on (it is the scheduler's, shielded from its callers)
            fire.cancel()
            if founder is not None:
                return self._waiting_for_founder(routine, *founder)
            raise AdminStopping(await self._fire_at_stop(routine, ours(), via))
        try:
            done = fire.result()
        except (RoutineNotFound, RoutineBusy) as exc:
            raise AdminError(str(exc)) from None
        item = done.approval_item
        if item is None:
            ended = done.outcome
            said = f"ran routine {routine}: {ended.status}" + (
                f" ({ended.run_id})" if ended.run_id else ""
            )
            if ended.status != RunStatus.OK and ended.reason:
                said += f": {ended.reason}"  # why, where the message is all that is shown
            return JobRun(routine=routine, **ended.to_dict(), message=said)
        return JobRun(
            routine=routine,
            **done.outcome.to_dict(),
            state="awaiting_approval",
            approval_item=item,
            message=(
                f"started routine {routine}: its run ended and the result waits for your "
                f"approval as {item}; approve, reject or ask for changes in "
                + self._where_to_decide(item, f"/approve {item}", f"approve {item}")
            ),
        )

    async def _fire_at_stop(self, routine: str, task_id: str | None, via: str) -> str:
        """What :meth:`run_job` tells its caller when the daemon stops before the fire ended
        (``task_id``: the fire's task, None if it made none yet) — docs/scheduler.md, "A run
        in progress when the scheduler stops".
        """
        said = "the daemon is stopping: "
        if task_id is None:
            return said + (
                f"routine {routine}'s fire had not started its run and is recorded cancelled "
                f"(see `companyd jobs history {routine}`); " + _fire_again(routine, via)
            )
        run_id = await self.journal.open_run(task_id)
        if run_id is None:
            return said + (
                f"routine {routine}'s task {task_id} waits in its agent's queue and runs when "
                "the daemon starts again (see `companyd runs`)"
            )
        return said + (
            f"run {run_id} of routine {routine} stops at a checkpoint (its step in flight "
            f"finishes first) and resumes when the daemon starts again; see `companyd runs "
            f"show {run_id}`"
        )

    def _waiting_for_founder(self, routine: str, event: Event, chain: Asking) -> JobRun:
        """:meth:`run_job`'s answer when the fire's run stopped to ask the founder — or a
        colleague's run it asked did (``chain``: the asking runs, see :func:`_asked_in`):
        ``run_id`` and ``agent`` are the routine's run's, the message names the colleague.
        """
        d = event.data
        item, run_id = str(d.get("item_id") or ""), str(d.get("run_id") or "")
        agent, whose = str(d.get("agent") or ""), ""
        if chain:
            # the routine's run waits on the colleague's: it is the one the founder knows
            down = [a for _, a, _ in reversed(chain[:-1])]
            whose = " asked " + ", who asked ".join(down) + f", whose run {run_id}"
            run_id, agent = chain[-1][0], chain[-1][1]
        if event.kind == "founder_question":
            what = f"waits for your answer to a question ({item})"
            how = self._where_to_decide(item, f"/answer {item} TEXT", f"answer {item} TEXT")
            verb = "answer it in "
        else:
            what = f"waits for your approval of a {d.get('tool')} call ({item})"
            how = self._where_to_decide(item, f"/approve {item}", f"approve {item}")
            verb = "approve or reject it in "
        now = self.clock.time()
        return JobRun(
            routine=routine,
            task_id="",
            run_id=run_id,
            agent=agent,
            status="running",
            reason=None,
            answer="",
            cost_usd=0.0,
            steps=0,
            tokens=0,
            models=[],
            started=now,
            ended=0.0,
            offline=self.offline,
            state="waiting_for_founder",
            approval_item=item,
            message=(
                f"started routine {routine}: its run {run_id}{whose} {what}; {verb}{how}. The run "
                f"goes on after that; `companyd runs last {routine}` shows its result"
            ),
        )

    def _where_to_decide(self, item: str, phone: str, cli: str) -> str:
        """Where the founder decides on ``item``: the dashboard, Telegram when configured
        (``phone``: the command there) and the CLI (``companyd <cli>``).
        """
        where = ["the dashboard's inbox"]
        if self.config.spec.alerts.telegram is not None:
            where.append(f"Telegram ({phone})")
        where.append(f"`companyd {cli}` (or `companyd inbox`)")
        return ", ".join(where[:-1]) + f" or {where[-1]}"

    async def fire_webhook(self, routine: str, webhook_id: str, body: str) -> WebhookFired:
        """:meth:`Admin.fire_webhook`.

        Raises:
            AdminError: no routine of that name, or it has no webhook trigger.
        """
        try:
            fire_id, replay = await self.scheduler.fire_webhook(routine, webhook_id, body)
        except RoutineNotFound as exc:
            raise AdminError(str(exc)) from None
        return WebhookFired(
            routine=routine,
            fire_id=fire_id,
            replay=replay,
            message=(
                f"webhook {webhook_id} was already accepted as fire {fire_id}: nothing runs again"
                if replay
                else f"webhook {webhook_id} fired routine {routine} ({fire_id})"
            ),
        )

    async def resume_all(self, via: str = "cli") -> ResumedAll:
        """:meth:`Admin.resume_all`: resume every paused agent, whatever paused it (the
        one command after topping up the Anthropic account: docs/spend.md).
        """
        return await self._recorded("resume_all", "all", via, self._resume_all())

    async def _resume_all(self) -> ResumedAll:
        resumed = [a for a in list(self.staff.paused()) if self.staff.resume(a)]
        return ResumedAll(
            resumed=resumed,
            message=(f"resumed {', '.join(resumed)}" if resumed else "no agent was paused"),
        )

    async def resume_job(self, routine: str, via: str = "cli") -> JobResumed:
        """:meth:`Admin.resume_job`; ``resumed`` is False when the routine was not paused.

        Raises:
            AdminError: no routine of that name.
        """
        return await self._recorded("resume_job", routine, via, self._resume_job(routine))

    async def _resume_job(self, routine: str) -> JobResumed:
        try:
            was = await self.scheduler.resume_routine(routine)
        except RoutineNotFound as exc:
            raise AdminError(str(exc)) from None
        return JobResumed(
            routine=routine,
            resumed=was,
            message=(
                f"resumed routine {routine}: its next fire runs"
                if was
                else f"routine {routine} was not paused"
            ),
        )

    async def dashboard_login(self) -> DashboardLogin:
        """:meth:`Admin.dashboard_login` (see :meth:`WebDashboard.login`)."""
        return self.web.login()

    async def pause(self, agent: str, via: str = "cli") -> Paused:
        """:meth:`Admin.pause`: an operator pause, held until :meth:`resume`.

        Raises:
            AdminError: an unknown agent (the message suggests the closest name).
        """
        return await self._recorded("pause", agent, via, self._pause(agent))

    async def _pause(self, agent: str) -> Paused:
        self._check_agent(agent)
        if self.staff.paused().get(agent) == "operator":
            # as resume says "was not paused": nothing changed, and said so
            return Paused(
                agent=agent,
                paused=True,
                message=f"{agent} is already paused; `companyd resume {agent}` resumes it",
            )
        self.staff.pause(agent, "operator")
        return Paused(
            agent=agent,
            paused=True,
            message=f"paused {agent}: it finishes its current run, then starts no new ones "
            f"until `companyd resume {agent}`",
        )

    async def resume(self, agent: str, via: str = "cli") -> Resumed:
        """:meth:`Admin.resume`; ``resumed`` is False when the agent was not paused.

        Raises:
            AdminError: an unknown agent.
        """
        return await self._recorded("resume", agent, via, self._resume(agent))

    async def _resume(self, agent: str) -> Resumed:
        self._check_agent(agent)
        was = self.staff.resume(agent)
        return Resumed(
            agent=agent,
            resumed=was,
            message=f"resumed {agent}" if was else f"{agent} was not paused",
        )

    async def ask(
        self,
        agent: str,
        question: str,
        timeout: float = 300.0,
        reply_to: str | None = None,
        task_id: str | None = None,
        via: str = "cli",
    ) -> AskAnswer:
        """:meth:`Admin.ask`: queue a task from the operator and wait for its run's outcome;
        with ``reply_to``, a follow-up in that run's thread; with ``task_id``, once per id.
        Recorded as an ``operator_action`` ``via`` where it was asked, once it ends.

        Raises:
            AdminError: an unknown agent, an empty question, an unknown run or another
                agent's run to follow up, a malformed ``task_id`` or another agent's, no
                outcome within ``timeout`` seconds (the task keeps running).
            AdminStopping: the daemon began to stop (the task is journaled and resumes
                after the restart; asked while it stops, no task is made).
        """
        work = self._ask(agent, question, timeout, reply_to, task_id)
        return await self._recorded("ask", agent, via, work)

    async def _ask(
        self,
        agent: str,
        question: str,
        timeout: float,
        reply_to: str | None,
        task_id: str | None,
    ) -> AskAnswer:
        self._check_agent(agent)
        if not question.strip():
            raise AdminError("the question is empty; say what you want the agent to do")
        if task_id is not None:
            known = await self._known_task(agent, task_id, timeout)
            if known is not None:
                return AskAnswer(**known.to_dict())
        prompt = question
        if reply_to is not None:
            prompt = await self._follow_up(agent, question, reply_to)
        if self.staff.draining.is_set():
            # a task submitted now might be cut before it is journaled: none is made
            raise AdminStopping(
                f"the daemon is stopping; nothing was asked of {agent} — ask again once the "
                "daemon has started",
                done=False,
            )
        task = Task(
            id=task_id or new_id("task"),
            agent=agent,
            prompt=prompt,
            source="operator",
            created=self.clock.time(),
            reply_to=reply_to,
        )
        try:
            async with asyncio.timeout(timeout):
                outcome = await self._unless_stopping(self.staff.submit(task), task)
        except TimeoutError:
            raise AdminError(
                f"{agent} did not finish within {timeout:g} s; the task {task.id} keeps running "
                "— see `companyd runs`"
            ) from None
        return AskAnswer(**outcome.to_dict())

    async def _known_task(self, agent: str, task_id: str, timeout: float) -> RunOutcome | None:
        """The outcome of task ``task_id`` if the journal already holds it (waited for while
        its run goes on, e.g. resumed after a restart); None for a task never submitted.
        """
        if _TASK_ID.fullmatch(task_id) is None:
            raise AdminError(
                f"task_id {task_id!r} is not a task id ('task-' and 12 hex digits); leave it "
                "out to start a new task"
            )
        known = await self.journal.get_task(task_id)
        if known is None:
            return None
        task, state = known[0], known[1]
        if task.agent != agent:
            raise AdminError(f"task {task_id!r} is {task.agent}'s, not {agent}'s")
        held = self.staff.resumed(task_id)
        if held is not None:
            try:
                async with asyncio.timeout(timeout):
                    return await self._unless_stopping(held, task)
            except TimeoutError:
                raise AdminError(
                    f"{agent} did not finish within {timeout:g} s; the task {task_id} keeps "
                    "running — see `companyd runs`"
                ) from None
        ended = await self.journal.last_outcome(task_id)
        if ended is None:
            raise AdminError(f"task {task_id!r} is {state} with no run that ended")
        return ended

    async def _follow_up(self, agent: str, reply: str, run_id: str) -> str:
        """The prompt of a reply in run ``run_id``'s thread (it must be ``agent``'s)."""
        turn = await self.journal.turn(run_id)
        if turn is None:
            raise AdminError(
                f"no run {run_id!r} in the run journal; see `companyd runs` for run ids"
            )
        task, status, answer = turn
        if task.agent != agent:
            raise AdminError(
                f"run {run_id!r} is {task.agent}'s, not {agent}'s; follow it up with "
                f"`companyd ask {task.agent} --reply-to {run_id} …`"
            )
        if status == "running":
            raise AdminError(f"run {run_id!r} is still running; reply once it has ended")
        return follow_up_prompt(run_id, task.prompt, answer, reply)

    async def _unless_stopping(self, work: Any, task: Task) -> RunOutcome:
        """Await ``work``, or answer at once when the daemon starts to stop: the task is
        journaled and resumes after the restart, and the operator need not wait on it.
        """
        job = asyncio.ensure_future(work)  # not the race's: ask's timeout leaves it running
        await race(job, self.staff.draining.wait())
        if job.done():
            result: RunOutcome = job.result()
            return result
        job.cancel()
        raise AdminStopping(
            f"the daemon is stopping; task {task.id} is journaled and {task.agent} resumes it "
            "after the restart (see `companyd runs`)"
        )

    async def runs(
        self,
        agent: str | None = None,
        status: str | None = None,
        limit: int = 20,
        routine: str | None = None,
        since: float | None = None,
        finished: bool = False,
        deliveries: bool = False,
    ) -> Runs:
        """:meth:`Admin.runs`, from the run journal.

        Raises:
            AdminError: an unknown ``status`` (the message lists the valid ones), a
                ``limit`` under 1, or an ``agent`` or ``routine`` that is neither in the
                running company.yaml nor in the journal (a misspelt name, not "no runs").
        """
        if status is not None and status not in {*(str(s) for s in RunStatus), "running"}:
            raise AdminError(
                f"unknown status {status!r}; choose one of running, "
                + ", ".join(str(s) for s in RunStatus)
            )
        if limit < 1:
            raise AdminError(f"limit must be at least 1, got {limit!r}")
        runs = await self.journal.runs(
            agent=agent, status=status, limit=limit, routine=routine, since=since, finished=finished
        )
        if not runs:
            await self._check_named_runs(agent, routine)
        if deliveries:
            records = await self.journal.deliveries([r["run_id"] for r in runs])
            for r in runs:
                r["deliveries"] = records.get(r["run_id"], [])
        return Runs(runs=runs)

    async def run_show(self, run_id: str) -> RunTranscript:
        """:meth:`Admin.run_show`, from the run journal.

        Raises:
            AdminError: no such run (never made, or deleted after ``retention.runs_days``).
        """
        shown = await self.journal.transcript(run_id)
        if shown is None:
            days = self.config.spec.retention.runs_days
            raise AdminError(
                f"no run {run_id!r} in the journal; see `companyd runs` for run ids (runs are "
                f"kept {days} days: retention.runs_days)"
            )
        return RunTranscript(**shown, decisions=decisions_of(await self.desk.of_run(run_id)))

    async def tasks(self, quarantined: bool = False) -> Tasks:
        """:meth:`Admin.tasks`: queued and running tasks, or only the quarantined ones."""
        states = ["quarantined"] if quarantined else ["queued", "running"]
        return Tasks(tasks=await self.journal.tasks(states))

    async def retry(self, task_id: str, via: str = "cli") -> TaskRetried:
        """:meth:`Admin.retry`.

        Raises:
            AdminError: no such task, or it is not quarantined.
        """
        return await self._recorded("retry", task_id, via, self._retry(task_id))

    async def _retry(self, task_id: str) -> TaskRetried:
        try:
            task = await self.staff.retry(task_id)
        except KeyError:
            raise AdminError(f"no task {task_id!r}; see `companyd tasks --quarantined`") from None
        except ValueError as exc:
            raise AdminError(str(exc)) from None
        return TaskRetried(
            task_id=task.id,
            agent=task.agent,
            queued=True,
            message=f"released {task.id}; {task.agent} will run it again",
        )

    async def proposals(self) -> Proposals:
        """:meth:`Admin.proposals`: the latest proposals, newest first, decided ones included."""
        return Proposals(proposals=[p.to_dict() for p in await self.proposal_store.list()])

    async def approve(
        self, item_id: str, by: str = "", via: str = "cli"
    ) -> ProposalDecision | DeskDecision:
        """:meth:`Admin.approve`: runs to the end once begun, even if the caller goes away
        (the control socket's deadline, the phone's wait) — a proposal is applied and the
        company reloaded, a desk item (``ap-``, ``r-``) is decided — and is recorded as the
        operator's action once done.

        Raises:
            AdminError: no such proposal or item, it is not pending, or the file changed
                since the proposal was made.
        """

        async def approve() -> ProposalDecision | DeskDecision:
            if on_desk(item_id):
                return await decide(
                    self.desk, item_id, ItemState.APPROVED, "", by=by or "founder", via=via
                )
            if item_id.startswith(TOOLS_ITEM):
                return await approve_tools_item(self.staff, self.config, item_id, by or "founder")
            if (why := not_an_inbox_id(item_id)) is not None:
                raise AdminError(why)
            try:
                p = await self.proposal_store.approve(item_id, by=by or "founder", via=via)
            except ProposalError as exc:
                raise AdminError(str(exc)) from None
            return ProposalDecision(
                **p.to_dict(), message=f"applied {p.id} to {p.file} and reloaded"
            )

        # shielded with its record, as a reload is: the control socket then answers that it
        # goes on (GOES_ON_AFTER_DEADLINE) — true, and the action is on record once done
        return await asyncio.shield(self._recorded("approve", item_id, via, approve()))

    async def reject(
        self, item_id: str, reason: str = "", by: str = "", via: str = "cli"
    ) -> ProposalDecision | DeskDecision:
        """:meth:`Admin.reject`: a proposal is discarded; a desk item is rejected with
        ``reason``. Runs to the end once begun and is recorded once done (like
        :meth:`approve`).

        Raises:
            AdminError: no such proposal or item, or it is not pending.
        """

        async def reject() -> ProposalDecision | DeskDecision:
            if on_desk(item_id):
                return await decide(
                    self.desk, item_id, ItemState.REJECTED, reason, by=by or "founder", via=via
                )
            if (why := not_an_inbox_id(item_id)) is not None:
                raise AdminError(why)
            try:
                p = await self.proposal_store.reject(item_id, reason, by=by or "founder", via=via)
            except ProposalError as exc:
                raise AdminError(str(exc)) from None
            said = f"rejected {p.id}" + (f" by {p.decided_by}" if p.decided_by else "")
            return ProposalDecision(**p.to_dict(), message=said + (f": {p.note}" if p.note else ""))

        # shielded with its record, as approve is: a desk write in its thread is never
        # left to finish without its event while the socket answers "cancelled"
        return await asyncio.shield(self._recorded("reject", item_id, via, reject()))

    async def answer(self, item_id: str, text: str, by: str = "", via: str = "cli") -> DeskDecision:
        """:meth:`Admin.answer`: runs to the end once begun and is recorded once done (like
        :meth:`approve`).

        Raises:
            AdminError: no such item, it is not pending, or it is not a question or result.
        """
        answered = decide(self.desk, item_id, ItemState.ANSWERED, text, by=by or "founder", via=via)
        return await asyncio.shield(self._recorded("answer", item_id, via, answered))

    async def _recorded(self, action: str, target: str, via: str, work: Awaitable[_T]) -> _T:
        """``work``'s result, recorded as an ``operator_action`` event (done or refused) for
        the CLI and Telegram as the dashboard records its own (``dashboard.actions``), so the
        event stream says who decided what, where, whichever front end it came through.
        A decision's empty ``via`` is the CLI's (the default of older clients).
        """
        return await recorded(self.bus, action, target, via or "cli", work)

    async def inbox(self) -> Inbox:
        """:meth:`Admin.inbox`."""
        return await gather_inbox(
            self.desk, self.proposal_store, self.journal, self.staff.provisions.tool_store
        )

    async def revert(self, proposal_id: str, via: str = "cli") -> ProposalDecision:
        """:meth:`Admin.revert`: runs to the end once begun, even if the caller goes away,
        and is recorded as the operator's action once done (like :meth:`approve`).

        Raises:
            AdminError: no such proposal, or it is not applied, or the file was edited since it was
                applied.
        """
        return await asyncio.shield(
            self._recorded("revert", proposal_id, via, self._revert(proposal_id, via))
        )

    async def _revert(self, proposal_id: str, via: str) -> ProposalDecision:
        try:
            p = await self.proposal_store.revert(proposal_id, by="founder", via=via)
        except ProposalError as exc:
            raise AdminError(str(exc)) from None
        return ProposalDecision(**p.to_dict(), message=f"reverted {p.id} and reloaded")

    async def debug(
        self, action: str, target: str | None = None, seconds: float = 0.0
    ) -> DebugCrashed | DebugBlocked:
        """:meth:`Admin.debug`.

        Raises:
            AdminError: ``COMPANYD_DEBUG=1`` is not in the daemon's environment, an unknown action
                or agent, a ``crash`` without a target, or a ``block`` outside 0 < seconds <= 600.
        """
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
            return DebugCrashed(action=action, target=target, crashed=crashed)
        if action == "block":
            if not 0 < seconds <= 600:
                raise AdminError(f"debug block needs 0 < seconds <= 600, got {seconds!r}")
            # deliberately blocks the event loop, as a careless synchronous call would
            time.sleep(seconds)  # noqa: ASYNC251
            return DebugBlocked(action=action, seconds=seconds)
        raise AdminError(f"unknown debug action {action!r}; choose crash or block")

    def _check_agent(self, agent: str) -> None:
        if agent not in self.config.agents:
            raise AdminError(_unknown("agent", agent, self.config.agents))

    async def _check_named_runs(self, agent: str | None, routine: str | None) -> None:
        """An ``agent`` or ``routine`` filter that matched no run names one of the running
        company, or one with runs in the journal (since removed from company.yaml).
        """
        for kind, name, known in (
            ("agent", agent, self.config.agents),
            ("routine", routine, self.config.routines),
        ):
            if name is None or name in known:
                continue
            by_agent = kind == "agent"
            past = await self.journal.runs(
                agent=name if by_agent else None,
                routine=None if by_agent else name,
                status=None,
                limit=1,
            )
            if not past:
                raise AdminError(
                    _unknown(kind, name, known, "not in the running company.yaml and no runs")
                )


def _unknown(kind: str, name: str, known: Iterable[str], why: str = "") -> str:
    """``unknown agent 'cfoo' (why); did you mean 'cfo'? agents: ceo, cfo, …``."""
    import difflib  # here: only a misspelt name needs it (issue 31)

    names = list(known)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    said = f" ({why})" if why else ""
    return f"unknown {kind} {name!r}{said}; {hint}{kind}s: {', '.join(names) or '(none)'}"


#: The runs between the one that asks the founder and a routine's run, as
#: :meth:`Journal.asking_chain` gives them: ``(run id, agent, routine)``, the routine's last.
Asking = list[tuple[str, str, str | None]]


def _fire_again(routine: str, via: str) -> str:
    """How the founder fires ``routine`` again once the daemon is back, in the words of the
    front end the refused ``jobs run`` came from (``via``): the button on the phone, the
    dashboard's Run now, the command. One wording for the three, so each says the same
    thing: nothing was started, and how to start it after the restart.
    """
    if via == "telegram":
        return "tap 🔁 Run again now once the daemon has started"
    if via == "dashboard":
        return "press Run now again once the daemon has started"
    return f"run `companyd jobs run {routine}` again once the daemon has started"


async def _asked_in(
    asking: Subscription, routine: str, journal: Journal, task: Callable[[], str | None]
) -> tuple[Event, Asking]:
    """The first event of ``asking`` about one fire of ``routine`` (``task``: the id of
    its task, None until it is made): the founder asked by the fire's run (an empty chain),
    or by the run of a colleague its run asked — a consultation, delegation or review,
    whose run has no routine of its own: its ``asked_by`` chain in the journal leads back to
    the fire's run (the chain: the run that asks the founder first, the fire's run last).
    A run is told by its task, never by its routine: another fire of the routine running
    at the same time asks about its own run.
    """
    while True:
        event = await asking.get()
        d = event.data
        run_id = d.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            continue
        chain: Asking = []
        if d.get("routine") != routine:
            if d.get("routine") is not None:
                continue
            chain = await journal.asking_chain(run_id)
            if len(chain) < 2 or chain[-1][2] != routine:
                continue
        root = chain[-1][0] if chain else run_id
        fired = task()
        if fired is not None and await journal.task_of_run(root) == fired:
            return event, chain


def pause_label(reason: str) -> str:
    """The short word status shows for a pause (``paused (budget)``) from its reason as the
    staff keeps it: the operator's own, a budget's refusal, the Anthropic organisation's
    spend limit, a refused API key, a full state disk — never "operator" for a pause no
    operator made.
    """
    if reason == "operator":
        return "operator"
    if reason.startswith("budget"):
        return "budget"
    if "spend limit" in reason:
        return "API spend limit"
    if "key refused" in reason:
        return "API key refused"
    if reason.startswith("state disk full"):
        return "disk full"
    return reason.split(":", 1)[0][:40]


def _mark_paused(node: dict[str, Any], paused: Mapping[str, str]) -> None:
    if node.get("kind") == "worker" and node.get("id") in paused and node.get("state") == "running":
        node["state"] = "paused"
        node["pause_reason"] = pause_label(paused[node["id"]])
    for child in node.get("children", ()):
        _mark_paused(child, paused)


def _mark_not_serving(node: dict[str, Any], problems: Mapping[str, str]) -> None:
    """A running service child that serves nothing is shown so: ``state`` ``not serving``,
    ``serving`` false and the ``reason`` (a record must not say "running" of a dashboard
    whose port was taken).
    """
    if (
        node.get("kind") == "worker"
        and node.get("id") in problems
        and node.get("state") == "running"
    ):
        node["state"] = "not serving"
        node["serving"] = False
        node["reason"] = problems[node["id"]]
    for child in node.get("children", ()):
        _mark_not_serving(child, problems)


def _mark_paused_until(node: dict[str, Any], until: Mapping[str, str]) -> None:
    """A quota wall's pause (agents/_walls.py): shown "paused until HH:MM (rate limit)"."""
    if node.get("state") == "paused" and node.get("id") in until:
        node["pause_reason"] = "rate limit"
        node["paused_until"] = until[node["id"]]
    for child in node.get("children", ()):
        _mark_paused_until(child, until)


def enabled_agents(config: CompanyConfig) -> set[str]:
    """The agents ``status`` counts (``agents.total``), on a leader and a standby alike: the
    enabled ones — a disabled agent is not started, so neither up nor down.
    """
    return {s for s, a in config.agents.items() if a.enabled}


def _mark_dropped(tree: dict[str, Any], config: CompanyConfig, enabled: set[str]) -> None:
    """Put back in ``tree`` the temporary agents their supervisor dropped when they exited
    (OTP's rule for ``restart: temporary``): under their department, ``failed``, with why —
    a record must not leave out an agent that is down. An agent whose department is not
    running (being restarted) is left out: it comes back with its department.
    """
    present = {n.get("id") for n in _agent_nodes(tree, enabled)}
    for slug in sorted(enabled - present):
        agent = config.agents.get(slug)
        if agent is None or agent.restart != "temporary":
            continue
        parent = _supervisor_node(tree, agent.department or "agents")
        if parent is None or parent.get("state") != "running":
            continue
        parent.setdefault("children", []).append(
            {
                "id": slug,
                "path": f"{parent.get('path')}/{slug}",
                "kind": "worker",
                "state": "failed",
                "restarts": 0,
                "started_at": None,
                "uptime_s": None,
                "last_exit": None,
                "restart": "temporary",
                "significant": False,
                "children": [],
                "reason": "exited, and restart: temporary is never restarted by its "
                "supervisor; restarting companyd starts it again",
            }
        )


def _supervisor_node(node: dict[str, Any], slug: str) -> dict[str, Any] | None:
    if node.get("kind") == "supervisor" and node.get("id") == slug:
        return node
    for child in node.get("children", ()):
        if (found := _supervisor_node(child, slug)) is not None:
            return found
    return None


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
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def spend_for_status(
    report: Mapping[str, Any],
    paused: Mapping[str, str],
    unavailable: str | None = None,
    simulated: tuple[float, float] = (0.0, 0.0),
) -> SpendStatus:
    """The status ``spend`` block (docs/daemon.md) from the spend book's budget report;
    ``simulated``: the offline model's part of today's and this month's spend.
    """
    rows = [r for r in report.get("budgets", []) if isinstance(r, Mapping)]
    periods: dict[str, SpendPeriodLine] = {}
    company = [r for r in rows if r.get("scope") == "company"]
    for name, period in (("today", "day"), ("month", "month")):
        row: Mapping[str, Any] = next((r for r in company if r.get("period") == period), {})
        # an unlimited company, or one without a budget for this period, has no row for it:
        # every company row says what it used today and this month
        spent = next(
            (r[f"used_{name}_usd"] for r in company if r.get(f"used_{name}_usd") is not None),
            0.0,
        )
        periods[name] = SpendPeriodLine(
            used_usd=row.get("used_usd", spent),
            reserved_usd=row.get("reserved_usd", 0.0),
            limit_usd=row.get("limit_usd"),
            resets_at=_epoch(row.get("resets_at")),
            simulated_usd=simulated[0] if name == "today" else simulated[1],
        )
    agents: dict[str, dict[str, Any]] = {}
    for r in rows:
        agent = r.get("agent")
        if not agent:
            continue
        entry = agents.setdefault(
            agent, {"agent": agent, "today_usd": 0.0, "month_usd": 0.0, "paused": agent in paused}
        )
        # what it used today and this month, whichever budgets it has (or none)
        entry["today_usd"] = r.get("used_today_usd", entry["today_usd"])
        entry["month_usd"] = r.get("used_month_usd", entry["month_usd"])
        if r.get("period") == "day":
            entry["today_usd"] = r.get("used_usd", entry["today_usd"])
            entry["daily_limit_usd"] = r.get("limit_usd")
        elif r.get("period") == "month":
            entry["month_usd"] = r.get("used_usd", entry["month_usd"])
            entry["monthly_limit_usd"] = r.get("limit_usd")
    return SpendStatus(
        currency="USD",
        today=periods["today"],
        month=periods["month"],
        agents=[SpendLine(**entry) for entry in agents.values()],
        unavailable=unavailable,
    )


def _routine_for_status(r: Mapping[str, Any]) -> RoutineLine:
    """One status ``routines`` row (docs/daemon.md) from the scheduler's jobs view."""
    raw = r.get("last")
    last: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    return RoutineLine(
        routine=r.get("routine"),
        agent=r.get("agent"),
        schedule=r.get("schedule"),
        next_fire=_epoch(r.get("next_fire")),
        last_fire=_epoch(last.get("scheduled") or last.get("started")),
        last_outcome=last.get("outcome"),
        enabled=r.get("enabled", True),
    )


#: A task id as :func:`~companyd.runs._tasks.new_id` makes it (``ask``'s ``task_id``).
_TASK_ID = re.compile(r"task-[0-9a-f]{12}")


#: A status ``spend`` block with nothing read from the ledger (zero spend, no limits).
NO_SPEND = spend_for_status({}, {})
