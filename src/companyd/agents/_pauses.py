"""Which agents are paused, and why: the operator, a spent budget, the API account.

The operator pauses and resumes agents; a budget refusal pauses the agent until the budget
period rolls over (``budget_reset`` event), the operator resumes it or raises the budget;
the API's organisation spend limit and a refused API key pause every agent. Pauses survive
a restart of the daemon: each change is journaled (in the background, a failure logged).
A paused agent takes no new task; its current run ends on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

from companyd.agents._deps import SpendPort
from companyd.clock import Clock
from companyd.events import AgentPaused, AgentResumed, ApiKeyRefused, BudgetReset, Event, EventBus
from companyd.runs import Journal

__all__ = ["Pause", "Pauses"]


@dataclass(frozen=True, slots=True)
class Pause:
    """Why an agent is paused; ``budget`` if a spent budget paused it."""

    reason: str
    budget: bool


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
    ) -> None:
        self._agents = agents
        self._bus = bus
        self._clock = clock
        self._journal = journal
        self._spend = spend
        self._wake = wake
        self._spawn = spawn
        self._paused: dict[str, Pause] = {}

    def __contains__(self, agent: object) -> bool:
        return agent in self._paused

    def get(self, agent: str) -> Pause | None:
        """Why ``agent`` is paused, or None."""
        return self._paused.get(agent)

    def reasons(self) -> dict[str, str]:
        """Agent → why it is paused."""
        return {a: p.reason for a, p in self._paused.items()}

    def restore(self, agent: str, reason: str, budget: bool) -> None:
        """Set a pause without journaling or telling anyone (restored at start-up)."""
        self._paused[agent] = Pause(reason, budget)

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
        if was is None or was.reason != reason:
            self._bus.publish(
                AgentPaused(
                    source=f"agent/{agent}",
                    agent=agent,
                    reason=reason,
                    budget=budget,
                )
            )

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
