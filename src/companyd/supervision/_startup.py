"""Starting up: init, and starting children one at a time, each confirmed ready (§1.2).

``init`` runs on every (re)start and answers the flags and the static children (or
``IGNORE``); the children then start in list order, each one's ``ctx.started()`` awaited
before the next starts. A child that fails to start at init stops those already started in
reverse order and fails the supervisor's start (:class:`SupervisorStartError`) — no restart,
intensity not involved. Starting one child is the same step everywhere (init, restart,
``start_child``, ``restart_child``, ``start_instance``): it ends ready, ignored (``IGNORE``),
failed (it raised or returned before ``ctx.started()``) or aborted (the supervisor was asked
to stop meanwhile: D7), and each is an event.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any, cast

from companyd.events import ChildIgnored, ChildStarted, ChildStartFailed
from companyd.supervision._child import IGNORE, ExitReason
from companyd.supervision._errors import InvalidSpec, SupervisorStartError
from companyd.supervision._spec import ChildSpec, SupervisorFlags, check_specs
from companyd.supervision._state import (
    ABORTED,
    FAILED,
    IGNORED,
    OK,
    Child,
    ChildCtx,
    Exit,
    SupervisorState,
    child_main,
    exit_reason,
    retrieve,
)


class StartupMixin(SupervisorState):
    """How a :class:`~companyd.supervision._supervisor.Supervisor` starts its children."""

    # -- init ----------------------------------------------------------------------------

    async def _init_children(self) -> bool:
        """Run init and start the static children. True if init answered IGNORE."""
        try:
            answer = self._init_fn()
            if answer is IGNORE:
                return True
            flags, specs = cast(tuple[SupervisorFlags, Sequence[ChildSpec]], answer)
            if not isinstance(flags, SupervisorFlags):
                raise InvalidSpec(
                    f"init of supervisor {self.name!r} must return (SupervisorFlags, "
                    f"children), got flags {flags!r}"
                )
            specs = tuple(specs)
            check_specs(self.name, flags, specs)
        except Exception as exc:
            reason = ExitReason("error", exception=exc)
            self._publish(
                ChildStartFailed(source=self._path, child=None, phase="init", **reason.data())
            )
            raise SupervisorStartError(
                f"supervisor {self._path!r} failed to initialise: {exc}",
                path=self._path,
                child=None,
                reason=reason,
            ) from exc
        self._flags = flags
        if flags.strategy == "simple_one_for_one":
            self._template = specs[0]
            return False
        for spec in specs:
            child = self._children[spec.id] = Child(spec)
            child.restarts = self._carried.get(spec.id, 0)
        for child in list(self._children.values()):
            if self._stop_requested:
                return False
            result, payload = await self._start(child, phase="init")
            if result == FAILED:
                reason = cast(ExitReason, payload)
                self._children.pop(child.id, None)
                await self._terminate_all(cause="init_failed")
                raise SupervisorStartError(
                    f"supervisor {self._path!r} failed to start: child {child.id!r} failed "
                    f"to start ({reason}); children started before it were stopped",
                    path=self._path,
                    child=child.id,
                    reason=reason,
                ) from reason.exception
            if result == IGNORED and child.spec.restart == "temporary":
                del self._children[child.id]
            elif result == ABORTED:
                return False
        return False

    # -- starting a child ----------------------------------------------------------------

    async def _start(self, child: Child, *, phase: str) -> tuple[str, Any]:
        """Run ``child`` and wait until it is ready, fails, or the supervisor is asked to stop.

        Returns ``(OK, info)``, ``(IGNORED, None)``, ``(FAILED, ExitReason)`` or
        ``(ABORTED, None)``. Emits child_started / child_ignored / child_start_failed.
        """
        if self._stop_requested:
            return ABORTED, None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[tuple[str, Any]] = loop.create_future()
        ctx = ChildCtx(child.id, f"{self._path}/{child.id}", self, ready)
        child.ctx = ctx
        child.cancel_requested = False
        task = loop.create_task(child_main(child.spec.start, ctx), name=ctx.path)
        child.task = task
        task.add_done_callback(functools.partial(self._on_task_done, child, ready))
        self._pending_start = ready
        self._starting = child
        # Not in a finally: if the supervisor is cancelled here, _kill_all_now must still
        # see the child being started.
        kind, info = await ready
        self._pending_start = None
        self._starting = None
        if kind == "ready" and info is IGNORE:
            await self._stop_task(child)
            child.state = "not_running"
            self._publish(ChildIgnored(source=self._path, child=child.id, phase=phase))
            return IGNORED, None
        if kind == "ready":
            child.state = "running"
            child.info = info
            child.started_at = self._clock.time()
            child.started_mono = self._clock.monotonic()
            self._publish(
                ChildStarted(
                    source=self._path,
                    child=child.id,
                    type=child.spec.type,
                    phase=phase,
                    restarts=child.restarts,
                )
            )
            return OK, info
        if kind == "exited":
            child.task = None
            reason = exit_reason(task)
            if reason.kind == "normal" or (reason.kind == "shutdown" and reason.info is None):
                # OTP: any start result but {ok, Pid} is an error; returning before
                # ctx.started() is that here.
                reason = ExitReason(
                    "error",
                    exception=RuntimeError(
                        f"child {child.id!r} ended ({reason}) before calling ctx.started()"
                    ),
                )
            child.state = "not_running"
            child.last_exit = reason
            self._publish(
                ChildStartFailed(source=self._path, child=child.id, phase=phase, **reason.data())
            )
            return FAILED, reason
        # kind == "stop": the supervisor was asked to stop while this child was starting.
        await self._terminate(child, cause="shutdown")
        return ABORTED, None

    def _on_task_done(
        self,
        child: Child,
        ready: asyncio.Future[tuple[str, Any]],
        task: asyncio.Task[ExitReason],
    ) -> None:
        retrieve(task)
        if not ready.done():
            ready.set_result(("exited", None))
        elif child.task is task:
            self._queue.put_nowait(Exit(child, task))
