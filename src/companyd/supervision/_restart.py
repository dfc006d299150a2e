"""Restarting children: restart types, strategies, intensity, the restart loop, backoff.

A child that ends by itself is reported (``child_exited``) and then, by its restart type
(permanent: always; transient: after an abnormal exit; temporary: never), restarted by the
supervisor's strategy: itself (``one_for_one``, ``simple_one_for_one``), every child
(``one_for_all``) or itself and those started after it (``rest_for_one``) — the others
stopped in reverse start order first, then all started in start order. Each restart decision
is counted in one sliding window on the injected clock; one more than ``max_restarts`` within
``max_seconds`` and the supervisor gives up (``max_intensity``, :class:`SupervisorGaveUp`). A
restart that fails to start becomes the restart loop (§1.6): one queued, counted attempt at a
time, with the child's backoff delay in between (D8). A significant child that is not
restarted may shut the supervisor down (``auto_shutdown``).
"""

from __future__ import annotations

import asyncio

from companyd.events import AutoShutdown, Backoff, ChildExited, MaxIntensity, Restart, Severity
from companyd.supervision._child import ExitReason
from companyd.supervision._errors import SupervisorGaveUp
from companyd.supervision._state import (
    ABORTED,
    IGNORED,
    OK,
    Child,
    SupervisorState,
    TryAgain,
    exit_reason,
)
from companyd.supervision._text import secs


class RestartMixin(SupervisorState):
    """How a :class:`~companyd.supervision._supervisor.Supervisor` restarts its children."""

    async def _on_exit(self, child: Child, task: asyncio.Task[ExitReason]) -> None:
        if self._children.get(child.id) is not child or child.task is not task:
            return  # stale: the supervisor already stopped or replaced this run
        child.task = None
        await self._handle_exit(child, exit_reason(task))

    async def _handle_exit(self, child: Child, reason: ExitReason) -> None:
        """A running child ended with ``reason``: report it, then restart or forget it by
        its restart type (the child's task is already detached).
        """
        child.started_at = None
        child.last_exit = reason
        restart_type = child.spec.restart
        restart = restart_type == "permanent" or (
            restart_type == "transient" and not reason.is_normal
        )
        data = reason.data()
        severity = ChildExited.severity
        if isinstance(reason.exception, SupervisorGaveUp):
            data["gave_up"] = True
            if not restart:
                # D3: OTP leaves a transient/temporary sub-supervisor that gave up silently
                # down. companyd keeps the rule but says so loudly.
                severity = Severity.WARNING
                data["message"] = (
                    f"sub-supervisor {child.id!r} gave up and, being {restart_type}, is not "
                    "restarted (OTP rule): its subtree stays down until restarted by hand"
                )
        self._publish(
            ChildExited(
                source=self._path,
                severity=severity,
                child=child.id,
                restart_type=restart_type,
                action="restart" if restart else "none",
                **data,
            )
        )
        if restart:
            backoff = child.spec.backoff
            if (
                backoff is not None
                and self._clock.monotonic() - child.started_mono >= backoff.reset_after
            ):
                child.attempt = 0
            child.state = "restarting"
            delay = self._backoff_delay(child)
            if delay is None:
                await self._attempt(child)
            else:
                if self._flags.strategy in ("one_for_all", "rest_for_one"):
                    # The group goes down with the child now; it comes back after the delay.
                    await self._terminate_group(child)
                self._schedule_retry(child, delay)
            return
        if restart_type == "temporary" or self._flags.strategy == "simple_one_for_one":
            del self._children[child.id]
        else:
            child.state = "not_running"
        self._maybe_auto_shutdown(child)

    async def _on_try_again(self, child: Child, token: int) -> None:
        if (
            self._children.get(child.id) is not child
            or child.state != "restarting"
            or child.token != token
        ):
            return  # terminated, deleted or superseded since the retry was scheduled
        child.timer = None
        await self._attempt(child)

    def _backoff_delay(self, child: Child) -> float | None:
        backoff = child.spec.backoff
        if backoff is None:
            return None
        delay = backoff.delay(child.attempt, self._random())
        child.attempt += 1
        return delay

    def _schedule_retry(self, child: Child, delay: float | None) -> None:
        """Queue another restart attempt of ``child``, after ``delay`` seconds if given."""
        child.token += 1
        token = child.token
        if delay is None:
            self._queue.put_nowait(TryAgain(child, token))
            return
        self._publish(
            Backoff(source=self._path, child=child.id, delay=round(delay, 6), attempt=child.attempt)
        )
        child.timer = asyncio.get_running_loop().create_task(
            self._delayed_retry(child, token, delay)
        )

    async def _delayed_retry(self, child: Child, token: int, delay: float) -> None:
        await self._clock.sleep(delay)
        self._queue.put_nowait(TryAgain(child, token))

    def _cancel_retry(self, child: Child) -> None:
        child.token += 1
        if child.timer is not None:
            child.timer.cancel()
            child.timer = None

    def _cancel_timers(self) -> None:
        for child in self._children.values():
            if child.timer is not None:
                child.timer.cancel()
                child.timer = None

    def _add_restart(self) -> bool:
        """Count one restart (§1.5): False when it exceeds the intensity."""
        now = self._clock.monotonic()
        threshold = now - self._flags.max_seconds
        window = self._restarts
        while window and window[0] < threshold:  # a restart exactly max_seconds old counts
            window.popleft()
        window.append(now)
        return len(window) <= self._flags.max_restarts

    async def _attempt(self, child: Child) -> None:
        """One counted restart of ``child`` by the strategy (§1.4–1.6)."""
        if not self._add_restart():
            self._give_up(child)
            return
        strategy = self._flags.strategy
        if strategy in ("one_for_one", "simple_one_for_one"):
            group = [child]
        elif strategy == "one_for_all":
            group = list(self._children.values())
        else:
            ids = list(self._children)
            group = [self._children[i] for i in ids[ids.index(child.id) :]]
        self._publish(
            Restart(
                source=self._path,
                child=child.id,
                strategy=strategy,
                restarts=len(self._restarts),
                max_restarts=self._flags.max_restarts,
                max_seconds=self._flags.max_seconds,
                group=[c.id for c in group],
            )
        )
        if len(group) > 1:
            await self._terminate_group(child, group)
            group = [c for c in group if self._children.get(c.id) is c]
        for member in group:
            member.restarts += 1
            result, _ = await self._start(member, phase="restart")
            if result == OK:
                continue
            if result == ABORTED:
                return
            if result == IGNORED:
                if strategy == "simple_one_for_one" or member.spec.restart == "temporary":
                    del self._children[member.id]
                continue
            # FAILED: the restart loop (§1.6). Members after it stay unstarted. Only the
            # member that failed is restarting (OTP restart_multiple_children): a crashed
            # child not reached yet is simply not running, or terminate_child(member)
            # would leave it "restarting" with no retry pending.
            if member is not child and child.state == "restarting":
                child.state = "not_running"
            member.state = "restarting"
            self._schedule_retry(member, self._backoff_delay(member))
            return

    async def _terminate_group(self, offender: Child, group: list[Child] | None = None) -> None:
        """Stop the running members of ``offender``'s group in reverse start order.

        Temporary members are removed (not restarted); the others are left not running so
        the group restart starts them — including ones stopped before (OTP).
        """
        if group is None:
            if self._flags.strategy == "one_for_all":
                group = list(self._children.values())
            else:
                ids = list(self._children)
                group = [self._children[i] for i in ids[ids.index(offender.id) :]]
        for member in reversed(group):
            if member is offender:
                continue
            if member.state == "restarting":
                self._cancel_retry(member)
                member.state = "not_running"
            await self._terminate(member, cause="group_restart")
            if member.spec.restart == "temporary":
                self._children.pop(member.id, None)

    def _give_up(self, child: Child) -> None:
        restarts = len(self._restarts)
        last = str(child.last_exit) if child.last_exit is not None else "unknown"
        child.state = "not_running"
        self._publish(
            MaxIntensity(
                source=self._path,
                child=child.id,
                restarts=restarts,
                max_restarts=self._flags.max_restarts,
                max_seconds=self._flags.max_seconds,
                reason=last,
                message=(
                    f"{restarts} restarts within {secs(self._flags.max_seconds)} exceed "
                    f"max_restarts={self._flags.max_restarts}; stopping every child and escalating"
                ),
            )
        )
        self._gave_up = SupervisorGaveUp(
            path=self._path,
            child=child.id,
            restarts=restarts,
            max_restarts=self._flags.max_restarts,
            max_seconds=self._flags.max_seconds,
            last_exit=last,
        )
        self._outcome = "gave_up"

    def _maybe_auto_shutdown(self, child: Child) -> None:
        mode = self._flags.auto_shutdown
        if mode == "never" or not child.spec.significant:
            return
        if mode == "all_significant" and any(
            c.spec.significant and c.state != "not_running" for c in self._children.values()
        ):
            return
        self._publish(AutoShutdown(source=self._path, child=child.id, mode=mode))
        self._outcome = "auto_shutdown"
