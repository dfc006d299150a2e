"""Which agents are paused, and why: the operator, a spent budget, the API account.

The operator pauses and resumes agents; a budget refusal pauses the agent until the budget
period rolls over (``budget_reset`` event), the operator resumes it or raises the budget;
the API's organisation spend limit and a refused API key pause every agent. A quota wall
(every model of an agent's chain rate limited for longer than
``anthropic.quota_pause_after``, :mod:`companyd.agents._walls`) pauses the agents it holds
back *until a time*: they resume by themselves then (one ``quota_wall`` event when they
stop, one ``quota_wall_lifted`` when they run again). Pauses survive a restart of the
daemon: each change is journaled (in the background, a failure logged), a pause's end with
it. A paused agent takes no new task; its current run ends on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

from companyd.agents._deps import SpendPort
from companyd.clock import Clock, clock_time
from companyd.events import (
    AgentPaused,
    AgentResumed,
    ApiKeyRefused,
    BudgetReset,
    Event,
    EventBus,
    QuotaWall,
    QuotaWallLifted,
)
from companyd.runs import Journal

__all__ = ["Pause", "Pauses"]


@dataclass(frozen=True, slots=True)
class Pause:
    """Why an agent is paused; ``budget`` if a spent budget paused it; ``until`` the epoch
    time it ends by itself (a quota wall), None if it lasts until resumed.
    """

    reason: str
    budget: bool
    until: float | None = None


class Pauses:
    """The pause state of every agent.

    Args:
        agents: the agents of the running configuration, asked at each use.
        bus: where ``agent_paused`` / ``agent_resumed`` / ``api_key_refused`` go.
        clock: time source (journal times).
        journal: where pauses are kept across restarts.
        spend: the spend book (is an agent's budget spent; the API spend limit).
        wake: called with an agent that was resumed (its mailbox may hold tasks).
        spawn: runs a journal write in the background.
        timezone: the company's time zone, asked at each use (``HH:MM`` of a pause's end).
    """

    def __init__(
        self,
        *,
        agents: Callable[[], Collection[str]],
        bus: EventBus,
        clock: Clock,
        journal: Journal,
        spend: SpendPort,
        wake: Callable[[str], None],
        spawn: Callable[[Coroutine[Any, Any, Any]], None],
        timezone: Callable[[], str] = lambda: "UTC",
    ) -> None:
        self._agents = agents
        self._bus = bus
        self._clock = clock
        self._journal = journal
        self._spend = spend
        self._wake = wake
        self._spawn = spawn
        self._timezone = timezone
        self._paused: dict[str, Pause] = {}
        #: end of pause → the timer that resumes its agents then
        self._timers: dict[float, asyncio.Task[None]] = {}

    def __contains__(self, agent: object) -> bool:
        return agent in self._paused

    def get(self, agent: str) -> Pause | None:
        """Why ``agent`` is paused, or None."""
        return self._paused.get(agent)

    def reasons(self) -> dict[str, str]:
        """Agent → why it is paused."""
        return {a: p.reason for a, p in self._paused.items()}

    def ends(self) -> dict[str, float]:
        """Agent → when its pause ends by itself (quota walls only)."""
        return {a: p.until for a, p in self._paused.items() if p.until is not None}

    def restore(self, agent: str, reason: str, budget: bool, until: float | None = None) -> None:
        """Set a pause without journaling or telling anyone (restored at start-up); one
        with an end resumes its agent then (at once if that time has passed).
        """
        self._paused[agent] = Pause(reason, budget, until)
        if until is not None:
            self._arm(until)

    def close(self) -> None:
        """Cancel the timers of pauses with an end (the daemon is closing; the journal keeps
        them for the next start).
        """
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def forget_removed(self) -> None:
        """Drop the pauses of agents no longer configured (after a reload)."""
        agents = self._agents()
        for slug in list(self._paused):
            if slug not in agents:
                del self._paused[slug]

    def pause(self, agent: str, reason: str, *, budget: bool = False) -> None:
        """Stop ``agent`` taking new tasks (its current run ends on its own)."""
        if agent not in self._agents():
            raise KeyError(agent)
        was = self._paused.get(agent)
        self._paused[agent] = Pause(reason, budget)
        self._spawn(self._journal.set_paused(agent, reason, budget, self._clock.time()))
        # an operator's or a budget's pause replaces a wall's: it has no end
        if was is None or was.reason != reason:
            self._bus.publish(
                AgentPaused(
                    source=f"agent/{agent}",
                    agent=agent,
                    reason=reason,
                    budget=budget,
                )
            )

    def pause_until(
        self,
        agents: Collection[str],
        until: float,
        reason: str,
        *,
        models: Collection[str] = (),
        message: str = "",
    ) -> None:
        """A quota wall: pause ``agents`` until epoch ``until`` (``reason`` says why, e.g.
        "rate limit until 14:35: …"), then resume them by themselves. Agents already paused
        for another reason keep that pause; those already paused by a wall get the later
        end. One ``quota_wall`` event when agents are newly held back: every agent paused
        until that minute (the new ones first), the walled ``models`` and what the API said
        (``message``); nothing when none is new.
        """
        newly: list[str] = []
        for slug in agents:
            if slug not in self._agents():
                continue
            was = self._paused.get(slug)
            if was is not None and (was.until is None or was.until >= until):
                continue
            if was is None:
                newly.append(slug)
            self._paused[slug] = Pause(reason, False, until)
            self._spawn(self._journal.set_paused(slug, reason, False, self._clock.time(), until))
            self._bus.publish(
                AgentPaused(source=f"agent/{slug}", agent=slug, reason=reason, budget=False)
            )
        self._arm(until)
        if newly:
            text = clock_time(until, self._timezone())
            # Walls met at the same time by separate runs (agents on different models) are
            # one story: the event names every agent held back until that minute, the
            # newly paused first, and the pager folds it into the same message (its
            # coalescing key is the time).
            also = [
                a
                for a, p in self._paused.items()
                if a not in newly
                and p.until is not None
                and clock_time(p.until, self._timezone()) == text
            ]
            self._bus.publish(
                QuotaWall(
                    source="agents",
                    agents=newly + also,
                    until=until,
                    models=list(models),
                    until_text=text,
                    message=message,
                )
            )

    def _arm(self, until: float) -> None:
        """Make sure a timer resumes the agents whose pause ends at ``until``."""
        if until not in self._timers:
            self._timers[until] = asyncio.ensure_future(self._lift_at(until))

    async def _lift_at(self, until: float) -> None:
        """At ``until``, resume every agent whose pause ends then (or earlier) and say so
        once (``quota_wall_lifted``).
        """
        try:
            left = until - self._clock.time()
            if left > 0:
                await self._clock.sleep(left)
        finally:
            self._timers.pop(until, None)
        now = self._clock.time()
        lifted = [
            a for a, p in list(self._paused.items()) if p.until is not None and p.until <= now
        ]
        resumed = [a for a in lifted if self.resume(a, "the quota wall's time came")]
        if resumed:
            text = clock_time(until, self._timezone())
            self._bus.publish(QuotaWallLifted(source="agents", agents=resumed, until_text=text))

    def resume(self, agent: str, reason: str = "operator") -> bool:
        """Let ``agent`` run again; False if it was not paused."""
        if self._paused.pop(agent, None) is None:
            return False
        self._spawn(self._journal.clear_paused(agent))
        self._wake(agent)
        self._bus.publish(
            AgentResumed(
                source=f"agent/{agent}",
                agent=agent,
                reason=reason,
            )
        )
        return True

    def api_spend_limit(self, message: str) -> None:
        """The organisation's API spend limit was hit: pause every agent and tell once."""
        self._spend.note_api_spend_limit(message)
        for slug in self._agents():
            if slug not in self._paused:
                self.pause(slug, "Anthropic API spend limit reached", budget=False)

    def api_key_refused(self, message: str) -> None:
        """The API refused the key (HTTP 401): no call can succeed until the operator fixes
        it. Pause every agent not yet paused and publish one critical ``api_key_refused``
        event (runs in flight that hit the same 401 add nothing).
        """
        newly = [slug for slug in self._agents() if slug not in self._paused]
        for slug in newly:
            self.pause(slug, "Anthropic API key refused (HTTP 401)")
        if newly:
            self._bus.publish(
                ApiKeyRefused(
                    source="agents",
                    message=message,
                    paused=newly,
                )
            )

    def resume_budget_paused(self, reason: str) -> list[str]:
        """Resume every agent paused for its budget whose budgets now allow spending (a
        period rolled over, or a reloaded company.yaml raised a budget).
        """
        resumed = []
        for agent, p in list(self._paused.items()):
            if p.budget and self._spend.exhausted(agent) is None and self.resume(agent, reason):
                resumed.append(agent)
        return resumed

    def on_event(self, event: Event) -> None:
        """A bus listener: a rolled-over budget period resumes the agents it paused."""
        match event:
            case BudgetReset(period=period):
                self.resume_budget_paused(f"budget period rolled over ({period})")
