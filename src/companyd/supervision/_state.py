"""The state one supervisor task owns, shared by the modules that implement the supervisor.

:class:`SupervisorState` is what :class:`~companyd.supervision._supervisor.Supervisor` keeps —
its flags, its child records in start order, its intensity window, its command queue — and
the few operations its parts call on one another: start-up (``_startup``), the restart logic
(``_restart``), the shutdown protocol (``_shutdown``), the dynamic children (``_dynamic``)
and the read-only views (``_views``) are mixins that subclass it, and ``Supervisor``
composes them. Only the supervisor task changes any of it;
read-only calls read it synchronously (D7).

Also here: :class:`Child` (one child record), :class:`ChildCtx` (the context a child gets),
the messages of the command queue, and how a child's run ends (:func:`child_main`,
:func:`exit_reason`).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeVar

from companyd.clock import Clock
from companyd.events import Event, EventBus
from companyd.supervision._child import ChildFn, ExitReason, Shutdown
from companyd.supervision._errors import ChildNotFound, SupervisorGaveUp
from companyd.supervision._spec import ChildSpec, ChildState, InitResult, SupervisorFlags

T = TypeVar("T")

NORMAL = ExitReason("normal")
SHUTDOWN = ExitReason("shutdown")
KILLED = ExitReason("killed")

# How a child start ended (Supervisor._start).
OK = "ok"
IGNORED = "ignored"
FAILED = "failed"
ABORTED = "aborted"

#: Why a supervisor's serve loop ended.
Outcome = Literal["shutdown", "auto_shutdown", "gave_up"]
#: Lifecycle of a supervisor's current (or last) run.
Status = Literal["stopped", "starting", "running", "stopping"]


class ChildCtx:
    """The :class:`~companyd.supervision._child.ChildContext` a child of a supervisor gets."""

    __slots__ = ("_ready", "_supervisor", "id", "path", "stopping")

    def __init__(
        self,
        child_id: str,
        path: str,
        supervisor: SupervisorState,
        ready: asyncio.Future[tuple[str, Any]],
    ) -> None:
        self.id = child_id
        self.path = path
        self.stopping = asyncio.Event()
        self._supervisor = supervisor
        self._ready = ready

    def started(self, info: Any = None) -> None:
        ready = self._ready
        if not ready.done():
            ready.set_result(("ready", info))


class Child:
    """A child record: the spec and its current run. Owned by the supervisor task."""

    __slots__ = (
        "attempt",
        "cancel_requested",
        "ctx",
        "id",
        "info",
        "last_exit",
        "restarts",
        "spec",
        "started_at",
        "started_mono",
        "state",
        "task",
        "timer",
        "token",
    )

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.id = spec.id
        self.task: asyncio.Task[ExitReason] | None = None
        self.ctx: ChildCtx | None = None
        self.state: ChildState = "not_running"
        self.restarts = 0
        self.started_at: float | None = None
        self.started_mono = 0.0
        self.info: Any = None
        self.last_exit: ExitReason | None = None
        self.attempt = 0  # backoff: consecutive restarts
        self.token = 0  # invalidates a pending retry when bumped
        self.timer: asyncio.Task[None] | None = None  # pending backoff delay
        self.cancel_requested = False


# -- the command queue: one message at a time, in order ---------------------------------


class Exit:
    """A running child's task ended (sent by its done callback)."""

    __slots__ = ("child", "task")

    def __init__(self, child: Child, task: asyncio.Task[ExitReason]) -> None:
        self.child = child
        self.task = task


class TryAgain:
    """Make the next restart attempt of ``child`` (stale unless ``token`` is current)."""

    __slots__ = ("child", "token")

    def __init__(self, child: Child, token: int) -> None:
        self.child = child
        self.token = token


class Call:
    """An admin call: run ``op`` in the supervisor task and answer through ``fut``."""

    __slots__ = ("fut", "op")

    def __init__(self, op: Callable[[], Awaitable[Any]], fut: asyncio.Future[Any]) -> None:
        self.op = op
        self.fut = fut


class Stop:
    """Stop the supervisor."""

    __slots__ = ()


Msg = Exit | TryAgain | Call | Stop


# -- how a child's run ends ---------------------------------------------------------------


async def child_main(start: ChildFn, ctx: ChildCtx) -> ExitReason:
    """Run a child's body and classify how it ended (cancellation is classified outside)."""
    try:
        await start(ctx)
    except Shutdown as exc:
        return ExitReason("shutdown", info=exc.info, exception=exc)
    except Exception as exc:
        return ExitReason("error", exception=exc)
    # Returning after the stop request is the cooperative answer to it: reason shutdown.
    return SHUTDOWN if ctx.stopping.is_set() else NORMAL


def exit_reason(task: asyncio.Task[ExitReason]) -> ExitReason:
    """The exit reason of a child's finished task."""
    if task.cancelled():
        # A cancelled task is a killed process: cancelled by its supervisor once the
        # shutdown time ran out (OTP's exit(Child, kill) after the timeout), or by code
        # other than its supervisor (OTP: exit(Pid, kill) from another process). Either
        # way the reason is ``killed``, an abnormal exit: restarted unless temporary.
        return KILLED
    exc = task.exception()
    if exc is not None:  # a BaseException escaped child_main
        return ExitReason("error", exception=exc)
    return task.result()


def retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a finished task's exception as retrieved (its outcome is handled elsewhere)."""
    if not task.cancelled():
        task.exception()


class SupervisorState(Protocol):
    """One supervisor's state, and the operations its parts call on one another.

    The restart, shutdown and dynamic-children mixins subclass this; ``Supervisor``
    implements it. A method here is implemented by exactly one of them (named below). The
    optional fields default to None here so that a mixin assigning one keeps its declared type.
    """

    name: str
    _path: str
    _status: Status
    #: Wall-clock time the current run started serving, or None.
    _started_at: float | None = None
    #: OTP's init/1: run on every (re)start.
    _init_fn: Callable[[], InitResult]
    _bus: EventBus
    _clock: Clock
    _random: Callable[[], float]
    _kill_grace: float
    _flags: SupervisorFlags
    #: The child records in start order (a dict keeps insertion order).
    _children: dict[str, Child]
    #: Each child's restart count when this supervisor last (re)started, by id: its init's
    #: children go on counting from there, so status's ``restarts`` is since the daemon
    #: started, not reset when a parent restarts this supervisor (companyd's count; OTP's
    #: restart decisions and intensity are untouched).
    _carried: dict[str, int]
    #: The template of a simple_one_for_one supervisor, else None.
    _template: ChildSpec | None = None
    #: simple_one_for_one: numbers for instance ids, and the last one issued.
    _seq: itertools.count[int]
    _issued: int
    #: Monotonic times of the restarts in the intensity window, oldest first.
    _restarts: collections.deque[float]
    _queue: asyncio.Queue[Msg]
    _stop_requested: bool
    #: The readiness future of the child being started (a stop request resolves it).
    _pending_start: asyncio.Future[tuple[str, Any]] | None = None
    #: The child being started, if any (a cancelled supervisor must kill it too).
    _starting: Child | None = None
    _outcome: Outcome | None = None
    _gave_up: SupervisorGaveUp | None = None

    # supervisor.py
    def _publish(self, event: Event) -> None:
        """Publish ``event`` (its source: this supervisor's path)."""
        ...

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` in the supervisor task, between messages, and return its answer."""
        ...

    # _startup.py
    async def _start(self, child: Child, *, phase: str) -> tuple[str, Any]:
        """Run ``child`` until ready: ``(OK, info)``, ``(IGNORED, None)``,
        ``(FAILED, ExitReason)`` or ``(ABORTED, None)``.
        """
        ...

    # _shutdown.py
    async def _stop_task(self, child: Child) -> tuple[ExitReason, str]:
        """Stop ``child``'s running task by its shutdown spec: (reason, how it ended)."""
        ...

    async def _terminate(self, child: Child, *, cause: str) -> ExitReason | None:
        """Stop ``child`` by its shutdown spec if it runs; leave it not running."""
        ...

    async def _wait_task(
        self, task: asyncio.Task[ExitReason], seconds: float | None, *, recancel: bool = False
    ) -> bool:
        """Wait until ``task`` ends or ``seconds`` pass on the clock; True if it ended."""
        ...

    def _abandon(self, child: Child, task: asyncio.Task[ExitReason]) -> None:
        """Give up on a task that ignored its cancellation (D2)."""
        ...

    async def _terminate_all(self, *, cause: str) -> None:
        """Stop every child (reverse start order; simple_one_for_one: all at once)."""
        ...

    # _restart.py
    def _cancel_retry(self, child: Child) -> None:
        """Drop ``child``'s pending restart attempt, if any."""
        ...

    async def _handle_exit(self, child: Child, reason: ExitReason) -> None:
        """A running child ended: report it, then restart or forget it."""
        ...

    # _dynamic.py
    def _not_found(self, id: str) -> ChildNotFound:
        """The error for an id this supervisor does not have."""
        ...
