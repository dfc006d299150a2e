"""Stopping children: OTP's shutdown protocol on asyncio (D2).

One child stops in up to four steps: the stop request (``ctx.stopping``), a wait of its
``shutdown`` seconds on the injected clock (``infinity``: for ever), cancellation with
``kill_grace`` to unwind (cancelled once more halfway), then abandonment — reason
``killed``, event ``child_kill_failed`` — if it ignores even that. ``brutal_kill`` starts at
the cancellation. So the supervisor never waits longer than ``shutdown + kill_grace`` for one
child. A supervisor stops its children in reverse start order, one at a time
(simple_one_for_one: all at once); a supervisor that is itself cancelled cancels every child
and leaves without waiting. Every stop is reported as ``child_terminated`` with the step that
ended it (``graceful``, ``cancelled``, ``brutal_kill``, ``abandoned``, ``exited``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from companyd._aio import race
from companyd.events import ChildKillFailed, ChildTerminated
from companyd.supervision._child import ExitReason
from companyd.supervision._spec import BRUTAL_KILL, INFINITY
from companyd.supervision._state import KILLED, Child, SupervisorState, exit_reason

# The supervisor's logger: its records keep the name they had before the split.
log = logging.getLogger("companyd.supervision.supervisor")

# Tasks the supervisor gave up on (D2). asyncio keeps only weak references to tasks, so an
# abandoned task that is blocked on something only it references could be collected
# mid-flight ("Task was destroyed but it is pending"); keep it alive until it ends.
ABANDONED: set[asyncio.Task[Any]] = set()


class ShutdownMixin(SupervisorState):
    """How a :class:`~companyd.supervision._supervisor.Supervisor` stops its children."""

    async def _stop_task(self, child: Child) -> tuple[ExitReason, str]:
        """Stop ``child``'s task by its shutdown spec (D2). Returns (reason, how)."""
        task = child.task
        assert task is not None and child.ctx is not None
        child.task = None
        spec = child.spec
        child.ctx.stopping.set()
        if task.done():
            return exit_reason(task), "exited"
        if spec.shutdown == BRUTAL_KILL:
            child.cancel_requested = True
            task.cancel()
            if await self._wait_task(task, self._kill_grace, recancel=True):
                return KILLED, "brutal_kill"
            self._abandon(child, task)
            return KILLED, "abandoned"
        # Most children end within a tick of the stop request; skip the timer for them.
        await asyncio.sleep(0)
        limit = None if spec.shutdown == INFINITY else cast(float, spec.shutdown)
        if await self._wait_task(task, limit):
            return exit_reason(task), "graceful"
        child.cancel_requested = True
        task.cancel()
        if await self._wait_task(task, self._kill_grace, recancel=True):
            # Killed, whatever the child did with the cancellation (caught it and returned,
            # raised something else): OTP's kill after the timeout cannot be answered.
            return KILLED, "cancelled"
        self._abandon(child, task)
        return KILLED, "abandoned"

    async def _wait_task(
        self, task: asyncio.Task[ExitReason], seconds: float | None, *, recancel: bool = False
    ) -> bool:
        """Wait until ``task`` ends or ``seconds`` pass on the clock; True if it ended.

        With ``recancel``, cancel it again halfway (a child that caught the first
        cancellation and is stuck in its cleanup gets a second one).
        """
        if task.done():
            return True
        if seconds is None:
            await asyncio.wait({task})
            return True
        # The timers are tasks of this call, not contenders the race owns: they are
        # cancelled on the way out without waiting for them, as the child task is not.
        loop = asyncio.get_running_loop()
        timer = loop.create_task(self._clock.sleep(seconds))
        half = loop.create_task(self._clock.sleep(seconds / 2)) if recancel else None
        try:
            if half is not None:
                won = await race(task, timer, half)
                if won.index != 2:  # the task ended (preferred when both did) or time ran out
                    return won.index == 0
                task.cancel()
            won = await race(task, timer)
            return won.index == 0
        finally:
            timer.cancel()
            if half is not None:
                half.cancel()

    def _abandon(self, child: Child, task: asyncio.Task[ExitReason]) -> None:
        ABANDONED.add(task)
        task.add_done_callback(ABANDONED.discard)
        log.warning(
            "%s/%s ignored cancellation for %s s; abandoned (reason killed)",
            self._path,
            child.id,
            self._kill_grace,
        )
        self._publish(
            ChildKillFailed(
                source=self._path,
                child=child.id,
                shutdown=child.spec.shutdown,
                kill_grace=self._kill_grace,
                message=(
                    "the child ignored its stop request and cancellation; it was abandoned and "
                    "may still be running in the process — fix its cancellation handling"
                ),
            )
        )

    async def _terminate(self, child: Child, *, cause: str) -> ExitReason | None:
        """Stop ``child`` if running, emit child_terminated, leave it not running."""
        if child.task is None:
            return None
        reason, how = await self._stop_task(child)
        child.state = "not_running"
        child.started_at = None
        child.last_exit = reason
        self._publish(
            ChildTerminated(
                source=self._path, child=child.id, cause=cause, stop=how, **reason.data()
            )
        )
        return reason

    async def _terminate_all(self, *, cause: str) -> None:
        """Stop every child: in reverse start order (static) or all at once (dynamic)."""
        for child in self._children.values():
            self._cancel_retry(child)
        if self._flags.strategy == "simple_one_for_one":
            running = [c for c in self._children.values() if c.task is not None]
            if running:
                await asyncio.gather(*(self._terminate(c, cause=cause) for c in running))
        else:
            for child in reversed(list(self._children.values())):
                await self._terminate(child, cause=cause)

    def _kill_all_now(self) -> None:
        children = list(self._children.values())
        if self._starting is not None and self._starting not in children:
            children.append(self._starting)
        for child in children:
            self._cancel_retry(child)
            task = child.task
            if task is None:
                continue
            child.task = None
            child.state = "not_running"
            if child.ctx is not None:
                child.ctx.stopping.set()
            child.cancel_requested = True
            task.cancel()
            if not task.done():
                ABANDONED.add(task)
                task.add_done_callback(ABANDONED.discard)
            self._publish(
                ChildTerminated(
                    source=self._path,
                    child=child.id,
                    cause="supervisor_cancelled",
                    stop="cancelled",
                    reason="killed",
                )
            )
