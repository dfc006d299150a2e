"""The agents' mailboxes: queued tasks, the task each agent runs, and who waits for what.

:class:`Mailboxes` holds, per agent, the tasks waiting for it and the one it was handed,
the live state of its run, and — per task — the callers waiting for its outcome (a
routine's fire, an operator's ``ask``, a colleague). It outlives any one agent instance: an
agent that crashes and is restarted finds its mailbox and its waiting callers untouched.

It is memory only. Whoever changes a task's fate here also journals it
(:class:`~companyd.agents._staff.Staff`); pauses and draining are asked through the
``ready`` callable of :meth:`Mailboxes.take`.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Collection, Iterable

from companyd._aio import race
from companyd.agents._run import RunState
from companyd.runs import RunOutcome, RunStatus, Task

__all__ = ["Mailboxes"]


class Mailboxes:
    """Every agent's mailbox and the callers waiting on its tasks.

    Args:
        agents: the agents that get a mailbox now (more come with :meth:`ensure`).
    """

    def __init__(self, agents: Iterable[str]) -> None:
        self._box: dict[str, collections.deque[Task]] = {s: collections.deque() for s in agents}
        self._wakeup: dict[str, asyncio.Event] = {s: asyncio.Event() for s in self._box}
        self._waiters: dict[str, list[asyncio.Future[RunOutcome]]] = {}
        self._running: dict[str, Task] = {}
        self._runs: dict[str, RunState] = {}
        #: task id → why: withdrawn between leaving its mailbox and its run starting
        self._withdraw_on_start: dict[str, str] = {}
        #: Routine tasks the previous process left queued or running (restored from the
        #: journal), and the outcomes of those that ended since: the scheduler asks for them
        #: once (:meth:`resumed`) to close the fire the restart interrupted.
        self._restored: set[str] = set()
        self._restored_outcomes: dict[str, RunOutcome] = {}

    # -- agents ------------------------------------------------------------------------

    def ensure(self, agent: str) -> None:
        """Give ``agent`` a mailbox if it has none (a reload added it)."""
        self._box.setdefault(agent, collections.deque())
        self._wakeup.setdefault(agent, asyncio.Event())

    def __contains__(self, agent: object) -> bool:
        return agent in self._box

    def wake(self, agent: str) -> None:
        """Make ``agent`` look at its mailbox again (it was resumed)."""
        self._wakeup[agent].set()

    def wake_all(self) -> None:
        """Make every agent look at its mailbox again (a stop begins)."""
        for wake in self._wakeup.values():
            wake.set()

    # -- queueing and waiting ----------------------------------------------------------

    def put(self, task: Task) -> None:
        """Queue ``task`` for its agent and wake the agent."""
        self._box.setdefault(task.agent, collections.deque()).append(task)
        self._wakeup.setdefault(task.agent, asyncio.Event()).set()

    def restore(self, agent: str, tasks: Iterable[Task]) -> None:
        """Queue the tasks the journal holds for ``agent`` (those not queued already)."""
        box = self._box[agent]
        queued = {t.id for t in box}
        for task in tasks:
            if task.id not in queued:
                box.append(task)
        if box:
            self._wakeup[agent].set()

    def restored(self, task_ids: set[str]) -> None:
        """Remember the tasks a previous process left open (for :meth:`resumed`)."""
        self._restored = task_ids

    def waiter(self, task_id: str) -> asyncio.Future[RunOutcome]:
        """A future resolved with the outcome of task ``task_id``; await it with
        :meth:`wait`.
        """
        fut: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task_id, []).append(fut)
        return fut

    async def wait(self, task_id: str, fut: asyncio.Future[RunOutcome]) -> RunOutcome:
        """Await ``fut`` (from :meth:`waiter`), then stop waiting whatever happened."""
        try:
            return await fut
        finally:
            self.forget(task_id, fut)

    def forget(self, task_id: str, fut: asyncio.Future[RunOutcome] | None = None) -> None:
        """Stop waiting on task ``task_id`` with ``fut`` (None: every waiter)."""
        if fut is None:
            self._waiters.pop(task_id, None)
            return
        waiting = self._waiters.get(task_id, [])
        if fut in waiting:
            waiting.remove(fut)
        if not waiting:
            self._waiters.pop(task_id, None)

    def resumed(self, task_id: str) -> Awaitable[RunOutcome] | None:
        """The outcome of task ``task_id`` for a scheduler that lost track of it (see
        ``TaskSink.resumed``); None if no mailbox holds it.
        """
        done = self._restored_outcomes.pop(task_id, None)
        if done is not None:
            fut: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()
            fut.set_result(done)
            return fut
        held = (
            task_id in self._restored
            or any(t.id == task_id for t in self._running.values())
            or any(t.id == task_id for box in self._box.values() for t in box)
        )
        if not held:
            return None
        return self.wait(task_id, self.waiter(task_id))

    def size(self, agent: str) -> int:
        """Tasks waiting in ``agent``'s mailbox (not counting the one running)."""
        return len(self._box.get(agent, ()))

    def is_busy(self, agent: str) -> bool:
        """True while ``agent`` holds a task it was handed."""
        return agent in self._running

    async def take(
        self, agent: str, stopping: asyncio.Event, ready: Callable[[], bool]
    ) -> Task | None:
        """The next task for ``agent`` once ``ready()`` (not paused, not draining); None when
        ``stopping`` is set. Call :meth:`wake` when ``ready()`` may have changed.
        """
        box = self._box[agent]
        wake = self._wakeup[agent]
        while not stopping.is_set():
            if box and ready():
                task = box.popleft()
                self._running[agent] = task
                return task
            wake.clear()
            await race(stopping.wait(), wake.wait())
        return None

    def finished(self, outcome: RunOutcome) -> None:
        """A task reached its final outcome: wake everyone waiting for it."""
        self._withdraw_on_start.pop(outcome.task_id, None)
        if self._running.get(outcome.agent) and self._running[outcome.agent].id == outcome.task_id:
            del self._running[outcome.agent]
        if outcome.task_id in self._restored:
            self._restored.discard(outcome.task_id)
            if outcome.task_id not in self._waiters:
                self._restored_outcomes[outcome.task_id] = outcome
        self._resolve(outcome.task_id, outcome)

    def _resolve(self, task_id: str, outcome: RunOutcome) -> None:
        for fut in self._waiters.get(task_id, []):
            if not fut.done():
                fut.set_result(outcome)

    def cancel_waiters(self) -> None:
        """Cancel every caller still waiting (the daemon is closing)."""
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.cancel()

    # -- runs --------------------------------------------------------------------------

    def running(self) -> dict[str, Task]:
        """Agent → the task it is running now."""
        return dict(self._running)

    def run_started(self, agent: str, run: RunState) -> None:
        """An agent began (or resumed) ``run``; a withdrawal that came first applies now."""
        self._runs[agent] = run
        reason = self._withdraw_on_start.pop(run.task.id, None)
        if reason is not None:
            run.withdraw(reason)

    def run_ended(self, agent: str) -> None:
        """``agent``'s run is over."""
        self._runs.pop(agent, None)

    def runs(self) -> dict[str, RunState]:
        """Agent → its run in progress."""
        return dict(self._runs)

    def has_run(self, agent: str) -> bool:
        """True while ``agent`` is in a run."""
        return agent in self._runs

    # -- withdrawals -------------------------------------------------------------------

    def withdraw(self, task_id: str, reason: str, now: float) -> bool:
        """Withdraw task ``task_id`` from wherever it is: a running run is cancelled, one
        handed out but not started is withdrawn as it starts, a queued one leaves its
        mailbox and its waiters get a ``cancelled`` outcome.

        Returns:
            True if the run itself takes care of it (it journals its outcome); False if the
            caller must journal the withdrawal (queued, or held nowhere in memory).
        """
        for run in self._runs.values():
            if run.task.id == task_id:
                run.withdraw(reason)
                return True
        if any(t.id == task_id for t in self._running.values()):
            # handed to its agent, run not started yet: withdraw it as it starts
            self._withdraw_on_start[task_id] = reason
            return True
        for box in self._box.values():
            queued = next((t for t in box if t.id == task_id), None)
            if queued is None:
                continue
            box.remove(queued)
            self._resolve(
                task_id,
                RunOutcome(
                    task_id=task_id,
                    run_id="",
                    agent=queued.agent,
                    status=RunStatus.CANCELLED,
                    started=now,
                    ended=now,
                    reason=f"withdrawn before it started: {reason}",
                ),
            )
            break
        return False

    def drop_agents(self, keep: Collection[str], now: float) -> list[str]:
        """Close the mailboxes of agents not in ``keep`` (a reload removed them, and they are
        stopped): their queued task and the one they held end ``cancelled`` for whoever waits.
        The removed agents.
        """
        removed = [slug for slug in self._box if slug not in keep]
        for slug in removed:
            stopped = self._running.pop(slug, None)  # its run stopped at a checkpoint
            for task in [*self._box.pop(slug), *([stopped] if stopped else [])]:
                self._resolve(
                    task.id,
                    RunOutcome(
                        task_id=task.id,
                        run_id="",
                        agent=slug,
                        status=RunStatus.CANCELLED,
                        started=now,
                        ended=now,
                        reason=f"withdrawn: agent {slug!r} was removed from company.yaml",
                    ),
                )
            self._wakeup.pop(slug, None)
        return removed
