"""One run's live state, and the ways a run ends early or is told to stop.

A run is one attempt of an agent at one task. Its :class:`RunState` is the conversation so
far, the breaker's counters and the totals (cost, usage, models) — rebuilt from the journal
when a restarted agent resumes it, and read by ``companyd status`` while it runs
(``Staff.in_flight``). Nothing here does I/O.

How a run ends other than by the model ending its turn:

* :class:`RunEnded` — with a status other than ok (a budget refusal, every model failing);
* :class:`Stopping` — the agent or the daemon is stopping: the run stays journaled as
  running and is resumed at the next start (:class:`StopSignal` says when that began);
* a withdrawal — nobody waits for the outcome any more (:meth:`RunState.withdraw`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from companyd._aio import race
from companyd.agents._breaker import Breaker
from companyd.llm import Message, ToolResultBlock, ToolUseBlock, Usage
from companyd.runs import RunStatus, Task
from companyd.telemetry import NO_SPAN, Span

__all__ = [
    "PendingTool",
    "RunEnded",
    "RunState",
    "StopSignal",
    "Stopping",
    "cancel_and_reap",
    "stopped_from_outside",
    "turn_ended",
]

log = logging.getLogger(__name__)


class RunEnded(Exception):
    """Ends a run early with a status other than ok."""

    def __init__(self, status: RunStatus, reason: str | None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Stopping(Exception):
    """The supervisor asked the agent to stop; the run stays journaled to resume later."""


@dataclass
class PendingTool:
    """A tool call of the last journaled model response, as a crash left it."""

    tool_use: ToolUseBlock
    result: ToolResultBlock | None
    started: bool


@dataclass
class RunState:
    """The live state of one run (one attempt at one task)."""

    task: Task
    run_id: str
    attempt: int
    started_wall: float
    messages: list[Message]
    breaker: Breaker
    seq: int = 0
    cost: Decimal = Decimal(0)
    usage: Usage = field(default_factory=Usage)
    models: list[str] = field(default_factory=list)
    offline: bool = False
    answer: str = ""
    pending: list[PendingTool] = field(default_factory=list)
    #: stop_reason of the last journaled model response (rebuilt on resume)
    last_stop: str = ""
    #: follow-ups sent because the answer did not hold (``on_unmet: retry``; rebuilt on
    #: resume from the journaled ``verification`` steps)
    verify_retries: int = 0
    #: why the last answer did not hold, while its follow-up waits for the model's next
    #: step (a limit that stops the run there says it)
    unverified: str | None = None
    #: whether the answer was checked and held (a ``verification`` step that was met)
    verified: bool = False
    #: why the task was withdrawn (its asker stopped waiting), once it is
    withdrawn: str | None = None
    withdrawn_signal: asyncio.Event = field(default_factory=asyncio.Event)
    #: the run's ``invoke_agent`` span: the parent of its model and tool calls' spans
    span: Span = NO_SPAN

    def withdraw(self, reason: str) -> None:
        """Nobody waits for this run's outcome any more: its agent cancels it now."""
        if self.withdrawn is None:
            self.withdrawn = reason
        self.withdrawn_signal.set()

    def lose(self, cost: Decimal) -> None:
        """Add money a step spent without an answer (unanswered attempts kept as spent at
        their worst case) to the run's cost, as its limit sees it.
        """
        self.breaker.add_cost(cost)
        self.cost += cost

    def account(self, model: str, usage: Usage, cost: Decimal, offline: bool) -> None:
        """Add one model call (made now, or replayed from the journal) to the totals."""
        self.breaker.add_step(usage.total_tokens, cost)
        self.cost += cost
        self.usage = self.usage + usage
        self.models.append(model)
        self.offline = self.offline or offline


class StopSignal:
    """Whether a stop of this agent (its supervisor's ``stopping``) or of the whole daemon
    (``draining``) has begun.
    """

    def __init__(self, draining: asyncio.Event, stopping: asyncio.Event | None = None) -> None:
        self._draining = draining
        self._stopping = stopping

    def requested(self) -> bool:
        """True once a stop has begun."""
        stopping = self._stopping
        return self._draining.is_set() or (stopping is not None and stopping.is_set())

    def draining(self) -> bool:
        """True once a stop of the whole daemon has begun (not only of this agent)."""
        return self._draining.is_set()

    async def wait(self) -> None:
        """Return once a stop of this agent or of the daemon has begun."""
        if self._stopping is None:
            await self._draining.wait()
        else:
            await race(self._draining.wait(), self._stopping.wait())


def turn_ended(stop_reason: str) -> tuple[RunStatus, str | None]:
    """The outcome of a run whose model ended its turn with ``stop_reason``."""
    if stop_reason == "refusal":
        return RunStatus.FAILED, "the model refused the task"
    if stop_reason == "max_tokens":
        return RunStatus.OK, "answer truncated at max_output_tokens"
    return RunStatus.OK, None


def stopped_from_outside(exc: BaseException) -> bool:
    """True if ``exc`` is a cancellation aimed at the current task (its supervisor stopping
    it), as opposed to a CancelledError its run raised on its own.
    """
    current = asyncio.current_task()
    return (
        isinstance(exc, asyncio.CancelledError) and current is not None and current.cancelling() > 0
    )


async def cancel_and_reap(work: asyncio.Future[Any], agent: str) -> None:
    """Cancel ``work`` and wait until it has ended, whatever it ends with. Only the work's
    own cancellation is absorbed: a cancellation aimed at the calling task (a supervisor
    stopping the agent) still propagates, so the caller can never swallow a stop.
    """
    work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:  # it failed while being cut short: the caller's outcome stands
        log.debug("agent %s: the cancelled step raised", agent, exc_info=True)
