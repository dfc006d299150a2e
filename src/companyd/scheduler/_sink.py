"""Where a firing routine sends its task: the boundary to the agent runtime."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from companyd.runs import RunOutcome, Task

__all__ = ["BackupSink", "ResultGate", "TaskSink"]


class TaskSink(Protocol):
    """What the scheduler needs from the agent runtime (the daemon provides it).

    The scheduler never calls a model itself: a routine's run is whatever ``submit`` does.
    Preconditions use only ``inbox_size`` and ``memory_marker``, which must not call a model
    and should be cheap (they run on every fire of an idle heartbeat).
    """

    async def submit(self, task: Task) -> RunOutcome:
        """Put ``task`` in its agent's mailbox and wait until the run ends.

        The returned ``status`` is the fire's outcome; ``reason``, ``cost_usd`` and ``run_id``
        go into the history. Raising means the task could not be handed over at all (recorded
        as ``failed`` with the exception as the reason).
        """
        ...

    def inbox_size(self, agent: str) -> int:
        """How many tasks wait in ``agent``'s mailbox (for ``precondition: inbox_nonempty``)."""
        ...

    async def memory_marker(self) -> str:
        """An opaque value that changes whenever the company memory changes (for
        ``precondition: memory_changed``).
        """
        ...

    def rate_limited_until(self, agent: str) -> float | None:
        """When a quota wall's pause of ``agent`` ends (epoch), or None when no wall pauses
        it: meanwhile its fires are ``skipped: rate limited until HH:MM``, no task
        submitted (docs/scheduler.md).
        """
        ...

    def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """After a restart: if the runtime restored task ``task_id`` from its journal (the
        previous process died with the run queued or in progress), an awaitable of the run's
        outcome; None if it holds no such task. The scheduler asks for each fire the restart
        interrupted, so the fire is closed with what actually happened to its run.
        """
        ...

    async def ended_outcome(self, task_id: str) -> RunOutcome | None:
        """After a restart, for a fire whose task the runtime does not hold (:meth:`resumed`
        is None): how the task's run ended, as the runtime recorded it — a run whose last
        step finished within the stop, after the scheduler had stopped following it — or
        None if no run of it ended (the fire is then closed ``cancelled``).
        """
        ...


class ResultGate(Protocol):
    """The founder's approval of a routine's result (``approval: required``; the daemon
    wires :class:`companyd.agents.ResultApprovals`).
    """

    async def settle(
        self, task: Task, outcome: RunOutcome, asked: Callable[[str], None] | None = None
    ) -> RunOutcome:
        """Wait for the founder's verdict on an ``ok`` result: the outcome the fire is
        recorded with — ``ok`` once approved (after as many "request changes" rounds,
        each a follow-up run of the agent, as the founder asks for), ``failed`` when
        rejected or unanswered, or a follow-up run's own failure. ``asked`` is called
        once, with the desk item's id, as soon as the founder is asked (the first round).
        """
        ...

    async def settle_task(self, task_id: str, outcome: RunOutcome) -> RunOutcome:
        """:meth:`settle` for a fire's run resumed after a restart (only its task id is
        known to the scheduler then).
        """
        ...

    async def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """After a restart: if the fire of task ``task_id`` was waiting for the founder (or
        on a follow-up run the founder asked for), an awaitable of the outcome it settles
        on; None if the founder was never asked about it.
        """
        ...


class BackupSink(Protocol):
    """What a backup routine needs (the daemon provides it: the scheduler takes no backup
    itself, as it runs no agent itself).
    """

    async def scheduled_backup(self, directory: Path, keep: int) -> str:
        """Write one backup into ``directory`` and keep the newest ``keep``; return a short
        summary for the routine history (the file, its size). Raising means the backup
        failed: the fire is recorded ``failed`` with the exception as its reason (and
        alerted as every failed routine is).
        """
        ...
