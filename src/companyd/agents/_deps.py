"""What an agent needs from the rest of the company, stated as ports.

An :class:`~companyd.agents._agent.Agent` is built from an :class:`AgentDeps`: the services it
calls (event bus, clock, run journal, spend book, model backend) and a :class:`StaffPort` —
the few things it asks of the group it belongs to (the next task of its mailbox, pauses,
reviews, its prompt and tools). :class:`~companyd.agents._staff.Staff` implements the port in
the daemon; a test can build one Agent from real services and a small port of its own,
without a daemon. The agent never imports the staff module, so the two form no cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from companyd.agents._run import RunState
from companyd.agents._tools import MemoryPort, ToolBox
from companyd.clock import Clock
from companyd.config import AgentConfig
from companyd.desk import Desk, RateLimits
from companyd.events import EventBus
from companyd.llm import ModelBackend
from companyd.runs import Journal, RunOutcome, Task
from companyd.telemetry import NO_TRACING, Tracer

__all__ = ["AgentDeps", "InjectedCrash", "MarkerPort", "SpendPort", "StaffPort"]


class SpendPort(Protocol):
    """What agents need from the spend book (companyd.spend.SpendBook)."""

    async def reserve(
        self,
        *,
        agent: str,
        run_id: str,
        routine: str | None,
        model: str,
        input_tokens: int,
        max_output_tokens: int,
    ) -> Any:
        """Set aside the worst case of one call (``input_tokens`` plus ``max_output_tokens`` at
        ``model``'s prices) and return the reservation to settle, release or forfeit. Raises
        ``BudgetExhausted`` when it does not fit the company's or ``agent``'s remaining budget.
        """

    async def settle(
        self, reservation: Any, *, model: str, usage: Any, request_id: str | None = None
    ) -> Any:
        """Record the call's real ``usage`` against ``reservation``, release the rest of it, and
        return the exact cost in USD.
        """

    async def release(self, reservation: Any) -> None:
        """Give back a reservation whose call failed before anything was billed (idempotent)."""

    async def forfeit(self, reservation: Any, *, reason: str) -> Any:
        """Count an unanswered call's reservation as spent at its worst case (it may have been
        billed) and return the amount counted; ``reason`` goes into its ``spend_unanswered``
        event.
        """

    async def run_cost(self, run_id: str) -> Decimal:
        """What the ledger holds under ``run_id``: its answered calls and the unanswered
        ones kept as spent (a resumed run's cost starts from it).
        """

    def exhausted(self, agent: str) -> str | None:
        """Why ``agent`` cannot spend now (its own or the company's budget is used up), or None."""

    def note_api_spend_limit(self, message: str) -> None:
        """Report that the provider's organisation spend limit was hit (``message`` is the
        provider's); the caller pauses the agents.
        """


class MarkerPort(MemoryPort, Protocol):
    """The memory owner as the agents see it: tool calls and a change marker."""

    async def change_marker(self) -> str:
        """An opaque string that changes whenever the company memory changes."""


class InjectedCrash(RuntimeError):
    """A crash injected on purpose (``companyd`` debug op; tests and chaos benchmark)."""


class StaffPort(Protocol):
    """What an agent asks of the group it belongs to (implemented by ``Staff``)."""

    #: Set when the daemon begins a graceful stop: runs stop at their next checkpoint.
    draining: asyncio.Event

    @property
    def timezone(self) -> str:
        """The company's time zone (task messages are dated in it)."""
        ...

    def system_prompt(self, agent: AgentConfig) -> str:
        """The stable, cacheable system prompt of ``agent``."""
        ...

    async def toolbox_for(self, agent: AgentConfig, stack: contextlib.AsyncExitStack) -> ToolBox:
        """Every tool ``agent`` may use; servers it needs are started on ``stack``."""
        ...

    async def next_task(self, agent: str, stopping: asyncio.Event) -> Task | None:
        """The next task of ``agent``'s mailbox once it may run one; None on ``stopping``."""
        ...

    def run_started(self, agent: str, run: RunState) -> None:
        """``agent`` began (or resumed) ``run``."""
        ...

    def run_ended(self, agent: str) -> None:
        """``agent``'s run is over (whatever its outcome)."""
        ...

    def finished(self, outcome: RunOutcome) -> None:
        """A task reached its final outcome."""
        ...

    def requeue(self, task: Task) -> None:
        """Queue ``task`` again (a reviewer rejected the previous attempt)."""
        ...

    async def review(
        self, task: Task, answer: str, worker: str, run_id: str | None = None
    ) -> str | None:
        """Have ``task.reviewer`` check ``answer`` (of ``worker``'s run ``run_id``): None if
        approved, else why not.
        """
        ...

    def pause(self, agent: str, reason: str, *, budget: bool = False) -> None:
        """Stop ``agent`` taking new tasks."""
        ...

    def api_spend_limit(self, message: str) -> None:
        """The organisation's API spend limit was hit."""
        ...

    def api_key_refused(self, message: str) -> None:
        """The API refused the key."""
        ...

    def quota_wall(self, model: str) -> float | None:
        """When ``model``'s quota wall ends, or None when it may be called now."""
        ...

    def meet_quota_wall(self, model: str, retry_after: float | None) -> float | None:
        """A call of ``model`` was rate limited for ``retry_after`` s: its wall's end, if it
        is one (longer than ``anthropic.quota_pause_after``), else None.
        """
        ...

    def quota_walled(self, agent: str, message: str) -> str | None:
        """Every model of ``agent``'s chain is walled: pause it until the first ends; the
        reason its run ends with (None: a wall ended meanwhile, nothing paused).
        """
        ...

    def take_injected_crash(self, agent: str) -> None:
        """Raise :class:`InjectedCrash` if a crash of ``agent`` was requested."""
        ...


@dataclass(frozen=True, slots=True)
class AgentDeps:
    """Everything an agent uses, passed in explicitly.

    Attributes:
        staff: its group (mailbox, pauses, reviews, prompt and tools).
        bus: where events go.
        clock: time source (heartbeat, breaker, journal times).
        journal: the run journal.
        spend: the spend book (reservations and budgets).
        backend: the model backend (Claude or the offline stand-in).
        budget_exhausted_error: the exception type ``spend.reserve`` raises on refusal.
        state_dir: the daemon's state directory (named in disk alerts).
        desk: the founder's desk (approvals of ``require_approval`` tools); None: such
            calls are refused.
        rate_limits: ``tools.rate_limit`` (durable day counts); None: not applied.
        tracer: where the run's spans go (docs/telemetry.md); by default nowhere.
        offline: ``backend`` is the offline stand-in: every run is labelled offline from its
            start, also one that ends before its first answer (a response says it too).
    """

    staff: StaffPort
    bus: EventBus
    clock: Clock
    journal: Journal
    spend: SpendPort
    backend: ModelBackend
    budget_exhausted_error: type[Exception]
    state_dir: Path
    desk: Desk | None = None
    rate_limits: RateLimits | None = None
    tracer: Tracer = NO_TRACING
    offline: bool = False
