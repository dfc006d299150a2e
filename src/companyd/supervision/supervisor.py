"""Erlang/OTP supervision on asyncio.

A :class:`Supervisor` runs *children* — async callables following the contract in
:mod:`companyd.supervision.child` — as asyncio tasks it owns, and restarts them by OTP's rules
(docs/supervision.md is the long form; ../shared/reference/otp-supervisor.md §1 is the spec):

* Each child has a restart type: ``permanent`` (always restarted), ``transient`` (restarted
  only after an abnormal exit) or ``temporary`` (never restarted; its spec is dropped).
* A strategy decides *what* restarts: ``one_for_one`` (the child), ``one_for_all`` (every
  child), ``rest_for_one`` (the child and those started after it), ``simple_one_for_one``
  (many instances of one template, each restarted on its own).
* If more than ``max_restarts`` restarts happen within ``max_seconds`` (a sliding window on
  the injected :class:`~companyd.clock.Clock`), the supervisor gives up: it stops its
  remaining children in reverse start order and exits with reason ``shutdown``; its parent
  then applies its own rules. The root giving up makes :meth:`Supervisor.wait` raise
  :class:`SupervisorGaveUp`, so the daemon exits non-zero and systemd restarts it.

Everything that happens is published on the :class:`~companyd.events.EventBus` (``child_*``,
``restart``, ``backoff``, ``max_intensity``, ``auto_shutdown``, ``sup_*``); nothing else may
reach into a supervisor's internals. Restarts, child exits and admin calls are serialised
through one command queue per supervisor; read-only calls (:meth:`Supervisor.which_children`,
:meth:`Supervisor.count_children`) answer at any time.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import itertools
import logging
import math
import random as _random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Self, TypeVar, cast, get_args

from companyd.clock import Clock, SystemClock
from companyd.errors import CompanydError
from companyd.events import EventBus, Severity
from companyd.supervision.child import ChildContext, ChildFn, Shutdown

__all__ = [
    "BRUTAL_KILL",
    "IGNORE",
    "INFINITY",
    "AlreadyPresent",
    "AlreadyStarted",
    "AutoShutdown",
    "Backoff",
    "ChildCounts",
    "ChildInfo",
    "ChildNotFound",
    "ChildRestarting",
    "ChildRunning",
    "ChildSpec",
    "ChildState",
    "ChildType",
    "ExitReason",
    "InvalidSpec",
    "NotSupported",
    "Restart",
    "ShutdownSpec",
    "StartFailed",
    "Started",
    "Strategy",
    "Supervisor",
    "SupervisorError",
    "SupervisorFlags",
    "SupervisorGaveUp",
    "SupervisorNotRunning",
    "SupervisorStartError",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one"]
Restart = Literal["permanent", "transient", "temporary"]
ChildType = Literal["worker", "supervisor"]
AutoShutdown = Literal["never", "any_significant", "all_significant"]
ChildState = Literal["running", "restarting", "not_running"]
#: Seconds (>= 0), ``"brutal_kill"`` or ``"infinity"``.
ShutdownSpec = float | Literal["brutal_kill", "infinity"]

BRUTAL_KILL: Final = "brutal_kill"
INFINITY: Final = "infinity"

_STRATEGIES: tuple[str, ...] = get_args(Strategy)
_RESTARTS: tuple[str, ...] = get_args(Restart)
_TYPES: tuple[str, ...] = get_args(ChildType)
_AUTO_SHUTDOWN: tuple[str, ...] = get_args(AutoShutdown)

#: Default ``shutdown`` of a worker child, in seconds (OTP: 5000 ms).
DEFAULT_WORKER_SHUTDOWN: Final = 5.0
#: Default seconds a child gets to die after it was cancelled before it is abandoned (D2).
DEFAULT_KILL_GRACE: Final = 0.5


class _Ignore:
    """The type of :data:`IGNORE`."""

    _instance: _Ignore | None = None

    def __new__(cls) -> _Ignore:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "IGNORE"

    def __reduce__(self) -> str:
        return "IGNORE"


#: OTP's ``ignore``: a child calls ``ctx.started(IGNORE)`` and returns to say "do not run me
#: now". The spec is kept with the child not running (a temporary spec is dropped), nothing
#: is counted and nothing is retried.
IGNORE: Final = _Ignore()


# ---------------------------------------------------------------------------------------
# Errors


class SupervisorError(CompanydError):
    """A supervisor refused a request. ``code`` is OTP's error atom (``not_found``, …)."""

    code = "error"


class InvalidSpec(SupervisorError, ValueError):
    """A child spec or supervisor flag is invalid; the message names the valid values."""

    code = "invalid_spec"


class SupervisorNotRunning(SupervisorError):
    """The supervisor is not running (never started, stopping or stopped)."""

    code = "noproc"


class ChildNotFound(SupervisorError):
    """No child with that id."""

    code = "not_found"


class ChildRunning(SupervisorError):
    """The operation needs the child stopped (``restart_child``, ``delete_child``)."""

    code = "running"


class ChildRestarting(SupervisorError):
    """The child is in its restart loop; terminate it first."""

    code = "restarting"


class AlreadyPresent(SupervisorError):
    """``start_child`` with an id that exists but is not running."""

    code = "already_present"


class AlreadyStarted(SupervisorError):
    """``start_child`` with an id that is running."""

    code = "already_started"


class NotSupported(SupervisorError):
    """The call does not apply to this supervisor's strategy (OTP ``simple_one_for_one``)."""

    code = "simple_one_for_one"


class StartFailed(SupervisorError):
    """A child failed to start (from ``start_child``, ``restart_child``, ``start_instance``).

    Attributes:
        child: the child id.
        reason: why it failed.
    """

    code = "start_failed"

    def __init__(self, message: str, *, child: str, reason: ExitReason) -> None:
        super().__init__(message)
        self.child = child
        self.reason = reason


class SupervisorStartError(SupervisorError):
    """A supervisor failed to start: its init failed or one of its children failed to start.

    OTP: ``{error, {shutdown, {failed_to_start_child, Id, Reason}}}``. The children already
    started were stopped in reverse order; no restart was attempted.

    Attributes:
        path: the supervisor's path.
        child: the id of the child that failed, or None when init itself failed.
        reason: why.
    """

    code = "failed_to_start_child"

    def __init__(self, message: str, *, path: str, child: str | None, reason: ExitReason) -> None:
        super().__init__(message)
        self.path = path
        self.child = child
        self.reason = reason


class SupervisorGaveUp(Shutdown, SupervisorError):
    """A supervisor reached its maximum restart intensity and stopped.

    It is a :class:`~companyd.supervision.child.Shutdown` (exit reason
    ``{shutdown, reached_max_restart_intensity}``, normal class, as in OTP), so the parent
    applies the sub-supervisor's restart type. The root raises it from :meth:`Supervisor.wait`;
    ``exit_code`` is what the daemon exits with so that systemd restarts it.
    """

    code = "reached_max_restart_intensity"
    #: docs/daemon.md: 1 = the root supervisor gave up (systemd restarts the daemon).
    exit_code = 1

    def __init__(
        self,
        *,
        path: str,
        child: str,
        restarts: int,
        max_restarts: int,
        max_seconds: float,
        last_exit: str,
    ) -> None:
        Shutdown.__init__(self, "reached_max_restart_intensity")
        self.path = path
        self.child = child
        self.restarts = restarts
        self.max_restarts = max_restarts
        self.max_seconds = max_seconds
        self.last_exit = last_exit

    def __str__(self) -> str:
        return (
            f"supervisor {self.path!r} gave up: {self.restarts} restarts within "
            f"{_secs(self.max_seconds)} exceed max_restarts={self.max_restarts} "
            f"(last: child {self.child!r} exited {self.last_exit}); its children were stopped"
        )


# ---------------------------------------------------------------------------------------
# Value types


@dataclass(frozen=True, slots=True)
class ExitReason:
    """Why a child ended, in OTP's vocabulary.

    ``normal``: the child returned. ``shutdown``: it returned after its supervisor's stop
    request, or it raised :class:`Shutdown` (``info`` then holds the info). ``error``: any
    other exception (kept in ``exception``). ``killed``: its task was cancelled — by
    ``brutal_kill``, by :meth:`Supervisor.kill_child`, after its shutdown time ran out, or by
    code other than its supervisor — or it was abandoned after the kill grace.
    """

    kind: Literal["normal", "shutdown", "error", "killed"]
    info: Any = None
    exception: BaseException | None = None

    @property
    def is_normal(self) -> bool:
        """True for the normal class (``normal``, ``shutdown``, ``{shutdown, info}``)."""
        return self.kind in ("normal", "shutdown")

    def __str__(self) -> str:
        if self.kind == "shutdown" and self.info is not None:
            info = self.info if isinstance(self.info, str) else repr(self.info)
            return f"shutdown:{_clip(info)}"
        if self.kind == "error":
            return f"error:{_clip(repr(self.exception))}"
        return self.kind

    def data(self) -> dict[str, Any]:
        """JSON-serialisable event fields: ``reason`` and, for errors, the exception."""
        out: dict[str, Any] = {"reason": str(self)}
        if self.kind == "error" and self.exception is not None:
            out["exception"] = type(self.exception).__name__
            out["message"] = _clip(str(self.exception))
        return out


_NORMAL = ExitReason("normal")
_SHUTDOWN = ExitReason("shutdown")
_KILLED = ExitReason("killed")


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Opt-in delay before restarting a child (an extension beyond OTP; D8).

    The n-th consecutive restart (n = 0, 1, …) waits
    ``min(max, min * factor**n * (1 + U[0,1) * jitter))`` seconds — Akka's formula with the
    cap applied after the jitter, so the delay never exceeds ``max``. The count returns to 0
    once the child has run ``reset_after`` seconds. Each attempt still counts against the
    supervisor's intensity when it is made, so ``max_seconds`` must cover the backoff horizon
    or intensity never trips (docs/supervision.md).
    """

    min: float = 1.0
    max: float = 60.0
    factor: float = 2.0
    jitter: float = 0.2
    reset_after: float = 60.0

    def __post_init__(self) -> None:
        for name in ("min", "max", "factor", "jitter", "reset_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidSpec(f"backoff {name} must be a number of seconds, got {value!r}")
            if not math.isfinite(value):
                raise InvalidSpec(f"backoff {name} must be finite, got {value!r}")
        if self.min < 0:
            raise InvalidSpec(f"backoff min must be >= 0 seconds, got {self.min!r}")
        if self.max < self.min:
            raise InvalidSpec(
                f"backoff max ({self.max!r}) must be >= min ({self.min!r}); raise max or lower min"
            )
        if self.factor < 1:
            raise InvalidSpec(f"backoff factor must be >= 1, got {self.factor!r}")
        if not 0 <= self.jitter <= 1:
            raise InvalidSpec(f"backoff jitter must be between 0 and 1, got {self.jitter!r}")
        if self.reset_after <= 0:
            raise InvalidSpec(f"backoff reset_after must be > 0 seconds, got {self.reset_after!r}")

    def delay(self, attempt: int, u: float) -> float:
        """Seconds to wait before restart number ``attempt`` (0-based); ``u`` in [0, 1)."""
        try:
            base = self.min * math.pow(self.factor, attempt)
        except OverflowError:
            base = math.inf
        return min(self.max, base * (1.0 + u * self.jitter))

    @classmethod
    def from_spec(cls, spec: Any) -> Backoff:
        """From a :class:`companyd.config.BackoffSpec` (or anything with the same fields)."""
        return cls(
            min=spec.min,
            max=spec.max,
            factor=spec.factor,
            jitter=spec.jitter,
            reset_after=spec.reset_after,
        )


@dataclass(frozen=True, kw_only=True)
class ChildSpec:
    """How to run one child (OTP's child spec).

    Attributes:
        id: unique within its supervisor; a slug without ``/`` (it becomes a path segment).
        start: the child's body, ``async def run(ctx: ChildContext) -> None``.
        restart: ``permanent`` | ``transient`` | ``temporary``.
        shutdown: seconds to wait after the stop request before cancelling, or
            ``"brutal_kill"`` (cancel at once) or ``"infinity"`` (wait forever; the
            recommendation for supervisors). Default: 5 s for a worker, ``"infinity"`` for a
            supervisor — filled in at construction.
        type: ``worker`` | ``supervisor``.
        significant: its own exit may shut the supervisor down (``auto_shutdown``); only for
            transient or temporary children.
        backoff: opt-in restart delay (:class:`Backoff`); None restarts at once, as OTP.
    """

    id: str
    start: ChildFn
    restart: Restart = "permanent"
    shutdown: ShutdownSpec | None = None
    type: ChildType = "worker"
    significant: bool = False
    backoff: Backoff | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or "/" in self.id:
            raise InvalidSpec(
                f"child id must be a non-empty string without '/', got {self.id!r}; use a "
                "slug such as 'cfo'"
            )
        if not callable(self.start):
            raise InvalidSpec(
                f"child {self.id!r}: start must be an async callable taking a ChildContext, "
                f"got {self.start!r}"
            )
        if self.restart not in _RESTARTS:
            raise InvalidSpec(
                f"child {self.id!r}: invalid restart type {self.restart!r}; expected one of "
                f"{', '.join(_RESTARTS)}"
            )
        if self.type not in _TYPES:
            raise InvalidSpec(
                f"child {self.id!r}: invalid child type {self.type!r}; expected one of "
                f"{', '.join(_TYPES)}"
            )
        if self.shutdown is None:
            default: ShutdownSpec = (
                INFINITY if self.type == "supervisor" else DEFAULT_WORKER_SHUTDOWN
            )
            object.__setattr__(self, "shutdown", default)
        elif self.shutdown not in (BRUTAL_KILL, INFINITY) and (
            isinstance(self.shutdown, bool)
            or not isinstance(self.shutdown, int | float)
            or not math.isfinite(self.shutdown)
            or self.shutdown < 0
        ):
            raise InvalidSpec(
                f"child {self.id!r}: invalid shutdown {self.shutdown!r}; expected seconds "
                "(>= 0), 'brutal_kill' or 'infinity'"
            )
        if not isinstance(self.significant, bool):
            raise InvalidSpec(
                f"child {self.id!r}: significant must be true or false, got {self.significant!r}"
            )
        if self.significant and self.restart == "permanent":
            raise InvalidSpec(
                f"child {self.id!r}: a significant child cannot be permanent (it would never "
                "end by itself); make it transient or temporary, or not significant"
            )
        if self.backoff is not None and not isinstance(self.backoff, Backoff):
            raise InvalidSpec(
                f"child {self.id!r}: backoff must be a Backoff or None, got {self.backoff!r}"
            )


@dataclass(frozen=True, kw_only=True)
class SupervisorFlags:
    """OTP's supervisor flags. Defaults: one_for_one, 3 restarts within 5 s (Elixir's; D6)."""

    strategy: Strategy = "one_for_one"
    max_restarts: int = 3
    max_seconds: float = 5.0
    auto_shutdown: AutoShutdown = "never"

    def __post_init__(self) -> None:
        if self.strategy not in _STRATEGIES:
            raise InvalidSpec(
                f"invalid strategy {self.strategy!r}; expected one of {', '.join(_STRATEGIES)}"
            )
        if (
            isinstance(self.max_restarts, bool)
            or not isinstance(self.max_restarts, int)
            or self.max_restarts < 0
        ):
            raise InvalidSpec(
                f"invalid max_restarts {self.max_restarts!r}; expected a whole number >= 0"
            )
        if (
            isinstance(self.max_seconds, bool)
            or not isinstance(self.max_seconds, int | float)
            or not math.isfinite(self.max_seconds)
            or self.max_seconds <= 0
        ):
            raise InvalidSpec(f"invalid max_seconds {self.max_seconds!r}; expected seconds > 0")
        if self.auto_shutdown not in _AUTO_SHUTDOWN:
            raise InvalidSpec(
                f"invalid auto_shutdown {self.auto_shutdown!r}; expected one of "
                f"{', '.join(_AUTO_SHUTDOWN)}"
            )
        if self.strategy == "simple_one_for_one" and self.auto_shutdown != "never":
            raise InvalidSpec(
                f"auto_shutdown {self.auto_shutdown!r} is not allowed with simple_one_for_one "
                "(as in OTP); use 'never'"
            )


#: What an ``init`` callable returns: the flags and the static children, in start order —
#: or :data:`IGNORE` (OTP's ``init/1`` returning ``ignore``): the supervisor does not run.
InitResult = tuple[SupervisorFlags, Sequence[ChildSpec]] | _Ignore


@dataclass(frozen=True, slots=True)
class Started:
    """Result of ``start_child`` / ``restart_child`` / ``start_instance``.

    ``info`` is what the child passed to ``ctx.started(info)`` (a sub-supervisor passes
    itself). ``running`` is False when the child answered :data:`IGNORE`.
    """

    id: str
    info: Any = None
    running: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildInfo:
    """One row of :meth:`Supervisor.which_children`.

    Attributes:
        id: child id (an instance id for simple_one_for_one).
        path: full path in the tree.
        state: ``running`` | ``restarting`` (in its restart loop or backoff delay) |
            ``not_running``.
        type: ``worker`` | ``supervisor``.
        restart: its restart type.
        significant: whether it is significant.
        restarts: restarts the supervisor made of it since the supervisor (re)started.
        started_at: wall-clock time (epoch seconds) of its current run, or None.
        last_exit: the reason of its last exit (e.g. ``"error:RuntimeError('boom')"``).
    """

    id: str
    path: str
    state: ChildState
    type: ChildType
    restart: Restart
    significant: bool
    restarts: int
    started_at: float | None
    last_exit: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "state": self.state,
            "type": self.type,
            "restart": self.restart,
            "significant": self.significant,
            "restarts": self.restarts,
            "started_at": self.started_at,
            "last_exit": self.last_exit,
        }


@dataclass(frozen=True, slots=True)
class ChildCounts:
    """OTP's ``count_children``: specs, active (running), supervisors, workers.

    ``supervisors`` / ``workers`` count specs whether running or not; for
    simple_one_for_one, ``specs`` is 1 and they count instances.
    """

    specs: int
    active: int
    supervisors: int
    workers: int


# ---------------------------------------------------------------------------------------
# Internals


class _Ctx:
    """The :class:`ChildContext` a child of a companyd supervisor gets."""

    __slots__ = ("_ready", "_supervisor", "id", "path", "stopping")

    def __init__(
        self,
        child_id: str,
        path: str,
        supervisor: Supervisor,
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


class _Child:
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
        self.ctx: _Ctx | None = None
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


class _Exit:
    __slots__ = ("child", "task")

    def __init__(self, child: _Child, task: asyncio.Task[ExitReason]) -> None:
        self.child = child
        self.task = task


class _TryAgain:
    __slots__ = ("child", "token")

    def __init__(self, child: _Child, token: int) -> None:
        self.child = child
        self.token = token


class _Call:
    __slots__ = ("fut", "op")

    def __init__(self, op: Callable[[], Awaitable[Any]], fut: asyncio.Future[Any]) -> None:
        self.op = op
        self.fut = fut


class _Stop:
    __slots__ = ()


_Msg = _Exit | _TryAgain | _Call | _Stop

# Start results
_OK = "ok"
_IGNORED = "ignored"
_FAILED = "failed"
_ABORTED = "aborted"

# Tasks the supervisor gave up on (D2). asyncio keeps only weak references to tasks, so an
# abandoned task that is blocked on something only it references could be collected
# mid-flight ("Task was destroyed but it is pending"); keep it alive until it ends.
_ABANDONED: set[asyncio.Task[Any]] = set()


async def _child_main(start: ChildFn, ctx: _Ctx) -> ExitReason:
    """Run a child's body and classify how it ended (cancellation is classified outside)."""
    try:
        await start(ctx)
    except Shutdown as exc:
        return ExitReason("shutdown", info=exc.info, exception=exc)
    except Exception as exc:
        return ExitReason("error", exception=exc)
    # Returning after the stop request is the cooperative answer to it: reason shutdown.
    return _SHUTDOWN if ctx.stopping.is_set() else _NORMAL


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _secs(seconds: float) -> str:
    return f"{seconds:g} s"


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class Supervisor:
    """An OTP supervisor on asyncio.

    Use it as the root of a tree (``await sup.start()`` … ``await sup.wait()`` /
    ``await sup.stop()``, or ``async with sup:``) or as a child of another supervisor
    (:meth:`child_spec` / :meth:`as_child`). The same object can be started again after it
    stopped; every (re)start re-runs its init, so children added with :meth:`start_child`
    are not restored (as in OTP).

    Args:
        name: the supervisor's id; the root's path is its name, a nested supervisor's path
            is its parent's path plus its child id.
        children: the static children in start order (ignored when ``init`` is given).
        strategy, max_restarts, max_seconds, auto_shutdown: OTP's supervisor flags.
        init: called on every (re)start instead of the two above; returns
            ``(SupervisorFlags, children)`` — OTP's ``init/1``. An exception fails the start.
        bus: where events go; default: the parent's bus, else a private one.
        clock: time for intensity windows, shutdown timers and backoff; default: the
            parent's clock, else the system clock.
        kill_grace: seconds a cancelled child gets to end before it is abandoned (D2).
        random: returns floats in [0, 1) for backoff jitter; pass ``random.Random(seed).random``
            for reproducible delays; default: the parent's, else :func:`random.random`.

    Raises:
        InvalidSpec: on invalid flags or children (the message names the valid values).
    """

    def __init__(
        self,
        name: str,
        children: Sequence[ChildSpec] = (),
        *,
        strategy: Strategy = "one_for_one",
        max_restarts: int = 3,
        max_seconds: float = 5.0,
        auto_shutdown: AutoShutdown = "never",
        init: Callable[[], InitResult] | None = None,
        bus: EventBus | None = None,
        clock: Clock | None = None,
        kill_grace: float = DEFAULT_KILL_GRACE,
        random: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidSpec(f"supervisor name must be a non-empty string, got {name!r}")
        if isinstance(kill_grace, bool) or not (
            isinstance(kill_grace, int | float) and math.isfinite(kill_grace) and kill_grace >= 0
        ):
            raise InvalidSpec(f"kill_grace must be seconds >= 0, got {kill_grace!r}")
        self._init_fn: Callable[[], InitResult]
        if init is not None:
            if children:
                raise InvalidSpec(f"supervisor {name!r}: give either children or init, not both")
            self._init_fn = init
        else:
            flags = SupervisorFlags(
                strategy=strategy,
                max_restarts=max_restarts,
                max_seconds=max_seconds,
                auto_shutdown=auto_shutdown,
            )
            specs = tuple(children)
            _check_specs(name, flags, specs)
            self._init_fn = lambda: (flags, specs)
        self.name = name
        self._path = name
        self._bus_arg = bus
        self._clock_arg = clock
        self._random_arg = random
        self._bus: EventBus = bus if bus is not None else EventBus(clock)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._random: Callable[[], float] = random if random is not None else _random.random
        self._kill_grace = float(kill_grace)
        self._status: Literal["stopped", "starting", "running", "stopping"] = "stopped"
        self._flags = SupervisorFlags()
        self._children: dict[str, _Child] = {}
        self._template: ChildSpec | None = None
        self._seq = itertools.count(1)
        self._issued = 0
        self._restarts: collections.deque[float] = collections.deque()
        self._queue: asyncio.Queue[_Msg] = asyncio.Queue()
        self._stop_requested = False
        self._pending_start: asyncio.Future[tuple[str, Any]] | None = None
        self._starting: _Child | None = None
        self._outcome: Literal["shutdown", "auto_shutdown", "gave_up"] | None = None
        self._gave_up: SupervisorGaveUp | None = None
        self._main: asyncio.Task[ExitReason] | None = None
        self._started_at: float | None = None

    # -- properties ---------------------------------------------------------------------

    @property
    def path(self) -> str:
        """Path in the tree, e.g. ``companyd/agents/finance`` (set when it runs)."""
        return self._path

    @property
    def status(self) -> Literal["stopped", "starting", "running", "stopping"]:
        """Lifecycle of the current (or last) run."""
        return self._status

    @property
    def flags(self) -> SupervisorFlags:
        """The flags of the current (or last) run."""
        return self._flags

    @property
    def bus(self) -> EventBus:
        return self._bus

    @property
    def clock(self) -> Clock:
        return self._clock

    def restarts_in_window(self) -> int:
        """Restarts counted in the current intensity window (read-only, any time)."""
        threshold = self._clock.monotonic() - self._flags.max_seconds
        return sum(1 for t in self._restarts if t >= threshold)

    # -- running as the root -------------------------------------------------------------

    async def start(self) -> None:
        """Start as a root: run init and start every child in order, each confirmed ready.

        Raises:
            SupervisorStartError: init failed or a child failed to start (children already
                started were stopped in reverse order).
            SupervisorError: it is already running.
        """
        if self._status != "stopped" or (self._main is not None and not self._main.done()):
            raise SupervisorError(
                f"supervisor {self.name!r} is already {self._status}; stop it first"
            )
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()

        def on_ready(info: Any) -> None:
            if not ready.done():
                ready.set_result(info)

        main = loop.create_task(
            self._run(self.name, on_ready, None), name=f"supervisor:{self.name}"
        )
        main.add_done_callback(_retrieve)
        self._main = main
        waiting: set[asyncio.Future[Any]] = {ready, main}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            if ready.result() is IGNORE:
                raise SupervisorNotRunning(
                    f"supervisor {self.name!r} did not start: its init answered IGNORE"
                )
            return
        ready.cancel()
        if main.cancelled():
            raise SupervisorNotRunning(f"supervisor {self.name!r} was cancelled while starting")
        exc = main.exception()
        if exc is not None:
            raise exc
        raise SupervisorNotRunning(
            f"supervisor {self.name!r} was stopped while starting; start it again"
        )

    async def wait(self) -> ExitReason:
        """Wait until the root stops and say why.

        Returns:
            ``shutdown`` after :meth:`stop`, ``shutdown:auto_shutdown`` after an automatic
            shutdown.

        Raises:
            SupervisorGaveUp: it reached its maximum restart intensity — exit non-zero.
            SupervisorStartError: it failed to start.
            SupervisorNotRunning: it was never started as a root.
        """
        main = self._main
        if main is None:
            raise SupervisorNotRunning(
                f"supervisor {self.name!r} was never started as a root; call start() first"
            )
        return await asyncio.shield(main)

    async def stop(self) -> None:
        """Stop a root: its children in reverse start order, each by its shutdown spec.

        Returns once everything stopped; idempotent. How it ended is :meth:`wait`'s answer.
        """
        main = self._main
        if main is None:
            if self._status != "stopped":
                raise SupervisorError(
                    f"supervisor {self._path!r} runs as a child of another supervisor; stop "
                    "it with the parent's terminate_child"
                )
            return
        self._request_stop()
        await asyncio.wait({main})

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- running as a child --------------------------------------------------------------

    def as_child(self) -> ChildFn:
        """This supervisor as a child body: ``ChildSpec(start=sup.as_child(), type="supervisor")``.

        The child calls ``ctx.started(self)`` once all its children started, exits
        ``shutdown`` when its parent stops it, raises :class:`SupervisorGaveUp` (exit reason
        ``{shutdown, reached_max_restart_intensity}``) when it gives up, raises
        ``Shutdown("auto_shutdown")`` on an automatic shutdown, and raises
        :class:`SupervisorStartError` (a failed start for the parent) when its init fails.
        """

        async def run(ctx: ChildContext) -> None:
            parent = ctx._supervisor if isinstance(ctx, _Ctx) else None
            watcher = asyncio.get_running_loop().create_task(self._watch_stop(ctx.stopping))
            try:
                reason = await self._run(ctx.path, ctx.started, parent)
            finally:
                watcher.cancel()
            if reason.info == "auto_shutdown":
                raise Shutdown("auto_shutdown")

        return run

    def child_spec(
        self,
        id: str | None = None,
        *,
        restart: Restart = "permanent",
        significant: bool = False,
        shutdown: ShutdownSpec = INFINITY,
    ) -> ChildSpec:
        """A ``type="supervisor"`` spec running this supervisor (id defaults to its name)."""
        return ChildSpec(
            id=id or self.name,
            start=self.as_child(),
            restart=restart,
            shutdown=shutdown,
            type="supervisor",
            significant=significant,
        )

    async def _watch_stop(self, stopping: asyncio.Event) -> None:
        await stopping.wait()
        self._request_stop()

    # -- admin API (serialised through the command queue) --------------------------------

    async def start_child(self, spec: ChildSpec) -> Started:
        """Add a child after the existing ones (last in start order) and start it.

        Not counted in intensity. A sub-supervisor restarted by its parent re-runs init and
        does not restore children added this way (OTP).

        Raises:
            AlreadyStarted: the id is running. AlreadyPresent: the id exists, not running.
            StartFailed: it failed to start (nothing is kept). InvalidSpec: bad spec.
            NotSupported: simple_one_for_one (use :meth:`start_instance`).
        """
        if not isinstance(spec, ChildSpec):
            raise InvalidSpec(f"start_child expects a ChildSpec, got {spec!r}")
        return await self._call(functools.partial(self._do_start_child, spec))

    async def start_instance(self, start: ChildFn | None = None) -> Started:
        """simple_one_for_one: start one more instance of the template.

        ``start`` (default: the template's) is the instance's body — bind per-instance
        arguments with :func:`functools.partial` (OTP's extra args). The instance gets a
        fresh id ``<template id>-<n>``, never reused, which :meth:`terminate_child` takes.

        Raises:
            StartFailed: it failed to start (nothing is kept). NotSupported: not a
            simple_one_for_one supervisor.
        """
        return await self._call(functools.partial(self._do_start_instance, start))

    async def terminate_child(self, id: str) -> None:
        """Stop a child by its shutdown spec and keep its spec (a temporary one is dropped).

        Idempotent: a child not running is fine; a child in its restart loop leaves the loop.
        Not counted, never restarted, never triggers an automatic shutdown.

        Raises:
            ChildNotFound: no such id. NotSupported: the template id of a
            simple_one_for_one supervisor (terminate an instance by its id).
        """
        await self._call(functools.partial(self._do_terminate_child, id))

    async def kill_child(self, id: str) -> None:
        """Kill a running child at once: OTP's ``exit(Pid, kill)``.

        The child's task is cancelled with no stop request and no shutdown time (it gets
        ``kill_grace`` to unwind, then it is abandoned, as for ``brutal_kill``). It exits
        with reason ``killed`` — an abnormal exit — and the normal rules apply: a permanent
        or transient child is restarted and the restart is counted in intensity, a
        temporary one is dropped; ``one_for_all`` / ``rest_for_one`` restart their group.
        A child that is not running (stopped, or in its restart loop) is left as it is, as
        OTP's kill of a dead pid does nothing.

        Raises:
            ChildNotFound: no such id. NotSupported: the template id of a
            simple_one_for_one supervisor (kill an instance by its id).
        """
        await self._call(functools.partial(self._do_kill_child, id))

    async def restart_child(self, id: str) -> Started:
        """Start a stopped child again (not counted; a failure starts no restart loop).

        Raises:
            ChildNotFound, ChildRunning, ChildRestarting, StartFailed, NotSupported.
        """
        return await self._call(functools.partial(self._do_restart_child, id))

    async def delete_child(self, id: str) -> None:
        """Forget a stopped child's spec.

        Raises:
            ChildNotFound, ChildRunning, ChildRestarting, NotSupported.
        """
        await self._call(functools.partial(self._do_delete_child, id))

    # -- read-only API (answers at any time; D7) -----------------------------------------

    def which_children(self) -> list[ChildInfo]:
        """Every child in **start order** (OTP lists newest first; D5)."""
        return [self._info(c) for c in self._children.values()]

    def which_child(self, id: str) -> ChildInfo:
        """One child. Raises :class:`ChildNotFound`."""
        child = self._children.get(id)
        if child is None:
            raise self._not_found(id)
        return self._info(child)

    def count_children(self) -> ChildCounts:
        """OTP's counts; a child in its restart loop is counted but not active."""
        active = sup = work = 0
        for c in self._children.values():
            if c.state == "running":
                active += 1
            if c.spec.type == "supervisor":
                sup += 1
            else:
                work += 1
        if self._flags.strategy == "simple_one_for_one":
            return ChildCounts(specs=1, active=active, supervisors=sup, workers=work)
        return ChildCounts(specs=len(self._children), active=active, supervisors=sup, workers=work)

    def snapshot(self) -> dict[str, Any]:
        """The subtree as JSON-serialisable status nodes (the ``tree`` of ``companyd status``).

        Every node has ``id``, ``path``, ``kind`` (``supervisor`` | ``worker``), ``state``
        (``starting`` | ``running`` | ``restarting`` | ``stopping`` | ``stopped`` |
        ``failed``), ``restarts`` (by its supervisor since that one (re)started),
        ``started_at`` / ``uptime_s`` (None when not running), ``last_exit`` and
        ``children`` (start order); supervisors add ``strategy``, ``max_restarts``,
        ``max_seconds``, ``auto_shutdown`` and ``restarts_in_window``. A child that is not
        running is ``failed`` when its last exit was abnormal or a give-up, else ``stopped``.
        """
        now = self._clock.time()
        node: dict[str, Any] = {
            "id": self._path.rsplit("/", 1)[-1],
            "path": self._path,
            "kind": "supervisor",
            "state": self._status,
            "restarts": 0,
            "started_at": self._started_at,
            "uptime_s": None if self._started_at is None else now - self._started_at,
            "last_exit": None,
        }
        node.update(self._supervisor_fields())
        node["children"] = [self._child_node(c, now) for c in self._children.values()]
        return node

    def _supervisor_fields(self) -> dict[str, Any]:
        return {
            "strategy": self._flags.strategy,
            "max_restarts": self._flags.max_restarts,
            "max_seconds": self._flags.max_seconds,
            "auto_shutdown": self._flags.auto_shutdown,
            "restarts_in_window": self.restarts_in_window(),
        }

    def _child_node(self, c: _Child, now: float) -> dict[str, Any]:
        state: str = c.state
        last = c.last_exit
        if state == "not_running" and last is not None:
            failed = not last.is_normal or isinstance(last.exception, SupervisorGaveUp)
            state = "failed" if failed else "stopped"
        elif state == "not_running":
            state = "stopped"
        node: dict[str, Any] = {
            "id": c.id,
            "path": f"{self._path}/{c.id}",
            "kind": c.spec.type,
            "state": state,
            "restarts": c.restarts,
            "started_at": c.started_at,
            "uptime_s": None if c.started_at is None else now - c.started_at,
            "last_exit": str(last) if last is not None else None,
            "restart": c.spec.restart,
            "significant": c.spec.significant,
        }
        sub = c.info
        if isinstance(sub, Supervisor) and c.state == "running":
            node.update(sub._supervisor_fields())
            node["children"] = [sub._child_node(g, now) for g in sub._children.values()]
        else:
            node["children"] = []
        return node

    # -- the supervisor task -------------------------------------------------------------

    def _reset(self, path: str, parent: Supervisor | None) -> None:
        self._path = path
        if parent is not None:
            self._bus = self._bus_arg if self._bus_arg is not None else parent._bus
            self._clock = self._clock_arg if self._clock_arg is not None else parent._clock
            self._random = self._random_arg if self._random_arg is not None else parent._random
        self._children = {}
        self._template = None
        self._seq = itertools.count(1)
        self._issued = 0
        self._restarts = collections.deque()
        self._queue = asyncio.Queue()
        self._stop_requested = False
        self._pending_start = None
        self._starting = None
        self._outcome = None
        self._gave_up = None
        self._started_at = None

    async def _run(
        self, path: str, on_ready: Callable[[Any], None], parent: Supervisor | None
    ) -> ExitReason:
        """One life of the supervisor: init, serve, terminate. Returns or raises its exit.

        ``on_ready`` gets ``self`` once every child started (or :data:`IGNORE`).
        """
        if self._status != "stopped":
            raise SupervisorError(
                f"supervisor {self.name!r} is already {self._status} at {self._path!r}; a "
                "supervisor object runs in one place at a time"
            )
        self._reset(path, parent)
        self._status = "starting"
        stopped_reason = "shutdown"
        try:
            try:
                ignored = await self._init_children()
            except SupervisorStartError as exc:
                stopped_reason = f"failed_to_start:{exc.child or 'init'}"
                raise
            if ignored:
                stopped_reason = "ignore"
                on_ready(IGNORE)
                return ExitReason("normal", info="ignore")
            if self._outcome is None and not self._stop_requested:
                self._status = "running"
                self._started_at = self._clock.time()
                self._emit(
                    "sup_started",
                    strategy=self._flags.strategy,
                    max_restarts=self._flags.max_restarts,
                    max_seconds=self._flags.max_seconds,
                    auto_shutdown=self._flags.auto_shutdown,
                    children=[c.id for c in self._children.values()],
                )
                on_ready(self)
                await self._serve()
            self._status = "stopping"
            self._cancel_timers()
            await self._terminate_all(cause="shutdown")
            if self._outcome == "gave_up":
                stopped_reason = "shutdown:reached_max_restart_intensity"
                assert self._gave_up is not None
                raise self._gave_up
            if self._outcome == "auto_shutdown":
                stopped_reason = "shutdown:auto_shutdown"
                return ExitReason("shutdown", info="auto_shutdown")
            return _SHUTDOWN
        except asyncio.CancelledError:
            # Cancelled by whoever owns this task (a parent past its shutdown time): no
            # more waiting. Cancel every child and leave; they finish on their own.
            stopped_reason = "killed"
            self._kill_all_now()
            raise
        except (SupervisorGaveUp, SupervisorStartError):
            raise
        except Exception as exc:
            # A bug in the supervisor itself: never leave children running unsupervised.
            stopped_reason = f"error:{_clip(repr(exc))}"
            log.exception("supervisor %s crashed", self._path)
            self._kill_all_now()
            raise
        finally:
            self._status = "stopped"
            self._started_at = None
            self._cancel_timers()
            self._fail_pending_calls()
            self._emit("sup_stopped", reason=stopped_reason)

    async def _serve(self) -> None:
        queue = self._queue
        while self._outcome is None:
            if self._stop_requested:
                self._outcome = "shutdown"
                break
            msg = await queue.get()
            if isinstance(msg, _Exit):
                await self._on_exit(msg.child, msg.task)
            elif isinstance(msg, _TryAgain):
                await self._on_try_again(msg.child, msg.token)
            elif isinstance(msg, _Call):
                await self._on_call(msg)
            else:  # _Stop
                self._outcome = "shutdown"

    def _request_stop(self) -> None:
        if self._stop_requested:
            return
        self._stop_requested = True
        self._queue.put_nowait(_Stop())
        pending = self._pending_start
        if pending is not None and not pending.done():
            pending.set_result(("stop", None))

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        if self._status not in ("starting", "running") or self._stop_requested:
            raise SupervisorNotRunning(
                f"supervisor {self._path!r} is {self._status}, not running; it cannot take "
                "admin calls now"
            )
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Call(op, fut))
        return await fut

    async def _on_call(self, msg: _Call) -> None:
        try:
            result = await msg.op()
        except asyncio.CancelledError:
            if not msg.fut.done():
                msg.fut.set_exception(
                    SupervisorNotRunning(
                        f"supervisor {self._path!r} was cancelled before it could answer"
                    )
                )
            raise
        except Exception as exc:
            if not msg.fut.done():
                msg.fut.set_exception(exc)
        else:
            if not msg.fut.done():
                msg.fut.set_result(result)

    def _fail_pending_calls(self) -> None:
        while True:
            try:
                msg = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if isinstance(msg, _Call) and not msg.fut.done():
                msg.fut.set_exception(
                    SupervisorNotRunning(
                        f"supervisor {self._path!r} stopped before it could answer; check "
                        "its events (sup_stopped) for why"
                    )
                )

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
            _check_specs(self.name, flags, specs)
        except Exception as exc:
            reason = ExitReason("error", exception=exc)
            self._emit("child_start_failed", child=None, phase="init", **reason.data())
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
            self._children[spec.id] = _Child(spec)
        for child in list(self._children.values()):
            if self._stop_requested:
                return False
            result, payload = await self._start(child, phase="init")
            if result == _FAILED:
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
            if result == _IGNORED and child.spec.restart == "temporary":
                del self._children[child.id]
            elif result == _ABORTED:
                return False
        return False

    # -- starting a child ----------------------------------------------------------------

    async def _start(self, child: _Child, *, phase: str) -> tuple[str, Any]:
        """Run ``child`` and wait until it is ready, fails, or the supervisor is asked to stop.

        Returns ``(_OK, info)``, ``(_IGNORED, None)``, ``(_FAILED, ExitReason)`` or
        ``(_ABORTED, None)``. Emits child_started / child_ignored / child_start_failed.
        """
        if self._stop_requested:
            return _ABORTED, None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[tuple[str, Any]] = loop.create_future()
        ctx = _Ctx(child.id, f"{self._path}/{child.id}", self, ready)
        child.ctx = ctx
        child.cancel_requested = False
        task = loop.create_task(_child_main(child.spec.start, ctx), name=ctx.path)
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
            self._emit("child_ignored", child=child.id, phase=phase)
            return _IGNORED, None
        if kind == "ready":
            child.state = "running"
            child.info = info
            child.started_at = self._clock.time()
            child.started_mono = self._clock.monotonic()
            self._emit(
                "child_started",
                child=child.id,
                type=child.spec.type,
                phase=phase,
                restarts=child.restarts,
            )
            return _OK, info
        if kind == "exited":
            child.task = None
            reason = self._reason_of(child, task)
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
            self._emit("child_start_failed", child=child.id, phase=phase, **reason.data())
            return _FAILED, reason
        # kind == "stop": the supervisor was asked to stop while this child was starting.
        await self._terminate(child, cause="shutdown")
        return _ABORTED, None

    def _on_task_done(
        self,
        child: _Child,
        ready: asyncio.Future[tuple[str, Any]],
        task: asyncio.Task[ExitReason],
    ) -> None:
        _retrieve(task)
        if not ready.done():
            ready.set_result(("exited", None))
        elif child.task is task:
            self._queue.put_nowait(_Exit(child, task))

    def _reason_of(self, child: _Child, task: asyncio.Task[ExitReason]) -> ExitReason:
        if task.cancelled():
            # A cancelled task is a killed process: cancelled by its supervisor once the
            # shutdown time ran out (OTP's exit(Child, kill) after the timeout), or by code
            # other than its supervisor (OTP: exit(Pid, kill) from another process). Either
            # way the reason is ``killed``, an abnormal exit: restarted unless temporary.
            return _KILLED
        exc = task.exception()
        if exc is not None:  # a BaseException escaped _child_main
            return ExitReason("error", exception=exc)
        return task.result()

    # -- stopping a child ----------------------------------------------------------------

    async def _stop_task(self, child: _Child) -> tuple[ExitReason, str]:
        """Stop ``child``'s task by its shutdown spec (D2). Returns (reason, how)."""
        task = child.task
        assert task is not None and child.ctx is not None
        child.task = None
        spec = child.spec
        child.ctx.stopping.set()
        if task.done():
            return self._reason_of(child, task), "exited"
        if spec.shutdown == BRUTAL_KILL:
            child.cancel_requested = True
            task.cancel()
            if await self._wait_task(task, self._kill_grace, recancel=True):
                return _KILLED, "brutal_kill"
            self._abandon(child, task)
            return _KILLED, "abandoned"
        # Most children end within a tick of the stop request; skip the timer for them.
        await asyncio.sleep(0)
        limit = None if spec.shutdown == INFINITY else cast(float, spec.shutdown)
        if await self._wait_task(task, limit):
            return self._reason_of(child, task), "graceful"
        child.cancel_requested = True
        task.cancel()
        if await self._wait_task(task, self._kill_grace, recancel=True):
            # Killed, whatever the child did with the cancellation (caught it and returned,
            # raised something else): OTP's kill after the timeout cannot be answered.
            return _KILLED, "cancelled"
        self._abandon(child, task)
        return _KILLED, "abandoned"

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
        loop = asyncio.get_running_loop()
        timer = loop.create_task(self._clock.sleep(seconds))
        half = loop.create_task(self._clock.sleep(seconds / 2)) if recancel else None
        waiting: set[asyncio.Future[Any]] = {task, timer}
        if half is not None:
            waiting.add(half)
        try:
            while True:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if task in done or task.done():
                    return True
                if timer in done:
                    return False
                if half is not None and half in done:
                    task.cancel()
                    waiting.discard(half)
        finally:
            timer.cancel()
            if half is not None:
                half.cancel()

    def _abandon(self, child: _Child, task: asyncio.Task[ExitReason]) -> None:
        _ABANDONED.add(task)
        task.add_done_callback(_ABANDONED.discard)
        log.warning(
            "%s/%s ignored cancellation for %s s; abandoned (reason killed)",
            self._path,
            child.id,
            self._kill_grace,
        )
        self._emit(
            "child_kill_failed",
            child=child.id,
            shutdown=child.spec.shutdown,
            kill_grace=self._kill_grace,
            message=(
                "the child ignored its stop request and cancellation; it was abandoned and "
                "may still be running in the process — fix its cancellation handling"
            ),
        )

    async def _terminate(self, child: _Child, *, cause: str) -> ExitReason | None:
        """Stop ``child`` if running, emit child_terminated, leave it not running."""
        if child.task is None:
            return None
        reason, how = await self._stop_task(child)
        child.state = "not_running"
        child.started_at = None
        child.last_exit = reason
        self._emit("child_terminated", child=child.id, cause=cause, stop=how, **reason.data())
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
                _ABANDONED.add(task)
                task.add_done_callback(_ABANDONED.discard)
            self._emit(
                "child_terminated",
                child=child.id,
                cause="supervisor_cancelled",
                stop="cancelled",
                reason="killed",
            )

    # -- exits and restarts --------------------------------------------------------------

    async def _on_exit(self, child: _Child, task: asyncio.Task[ExitReason]) -> None:
        if self._children.get(child.id) is not child or child.task is not task:
            return  # stale: the supervisor already stopped or replaced this run
        child.task = None
        await self._handle_exit(child, self._reason_of(child, task))

    async def _handle_exit(self, child: _Child, reason: ExitReason) -> None:
        """A running child ended with ``reason``: report it, then restart or forget it by
        its restart type (the child's task is already detached)."""
        child.started_at = None
        child.last_exit = reason
        restart_type = child.spec.restart
        restart = restart_type == "permanent" or (
            restart_type == "transient" and not reason.is_normal
        )
        data = reason.data()
        severity = None
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
        self._emit(
            "child_exited",
            severity=severity,
            child=child.id,
            restart_type=restart_type,
            action="restart" if restart else "none",
            **data,
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

    async def _on_try_again(self, child: _Child, token: int) -> None:
        if (
            self._children.get(child.id) is not child
            or child.state != "restarting"
            or child.token != token
        ):
            return  # terminated, deleted or superseded since the retry was scheduled
        child.timer = None
        await self._attempt(child)

    def _backoff_delay(self, child: _Child) -> float | None:
        backoff = child.spec.backoff
        if backoff is None:
            return None
        delay = backoff.delay(child.attempt, self._random())
        child.attempt += 1
        return delay

    def _schedule_retry(self, child: _Child, delay: float | None) -> None:
        """Queue another restart attempt of ``child``, after ``delay`` seconds if given."""
        child.token += 1
        token = child.token
        if delay is None:
            self._queue.put_nowait(_TryAgain(child, token))
            return
        self._emit("backoff", child=child.id, delay=round(delay, 6), attempt=child.attempt)
        child.timer = asyncio.get_running_loop().create_task(
            self._delayed_retry(child, token, delay)
        )

    async def _delayed_retry(self, child: _Child, token: int, delay: float) -> None:
        await self._clock.sleep(delay)
        self._queue.put_nowait(_TryAgain(child, token))

    def _cancel_retry(self, child: _Child) -> None:
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

    async def _attempt(self, child: _Child) -> None:
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
        self._emit(
            "restart",
            child=child.id,
            strategy=strategy,
            restarts=len(self._restarts),
            max_restarts=self._flags.max_restarts,
            max_seconds=self._flags.max_seconds,
            group=[c.id for c in group],
        )
        if len(group) > 1:
            await self._terminate_group(child, group)
            group = [c for c in group if self._children.get(c.id) is c]
        for member in group:
            member.restarts += 1
            result, _ = await self._start(member, phase="restart")
            if result == _OK:
                continue
            if result == _ABORTED:
                return
            if result == _IGNORED:
                if strategy == "simple_one_for_one" or member.spec.restart == "temporary":
                    del self._children[member.id]
                continue
            # _FAILED: the restart loop (§1.6). Members after it stay unstarted. Only the
            # member that failed is restarting (OTP restart_multiple_children): a crashed
            # child not reached yet is simply not running, or terminate_child(member)
            # would leave it "restarting" with no retry pending.
            if member is not child and child.state == "restarting":
                child.state = "not_running"
            member.state = "restarting"
            self._schedule_retry(member, self._backoff_delay(member))
            return

    async def _terminate_group(self, offender: _Child, group: list[_Child] | None = None) -> None:
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

    def _give_up(self, child: _Child) -> None:
        restarts = len(self._restarts)
        last = str(child.last_exit) if child.last_exit is not None else "unknown"
        child.state = "not_running"
        self._emit(
            "max_intensity",
            child=child.id,
            restarts=restarts,
            max_restarts=self._flags.max_restarts,
            max_seconds=self._flags.max_seconds,
            reason=last,
            message=(
                f"{restarts} restarts within {_secs(self._flags.max_seconds)} exceed "
                f"max_restarts={self._flags.max_restarts}; stopping every child and escalating"
            ),
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

    def _maybe_auto_shutdown(self, child: _Child) -> None:
        mode = self._flags.auto_shutdown
        if mode == "never" or not child.spec.significant:
            return
        if mode == "all_significant" and any(
            c.spec.significant and c.state != "not_running" for c in self._children.values()
        ):
            return
        self._emit("auto_shutdown", child=child.id, mode=mode)
        self._outcome = "auto_shutdown"

    # -- admin operations, run inside the supervisor task --------------------------------

    def _not_found(self, id: str) -> ChildNotFound:
        known = ", ".join(self._children) or "(none)"
        return ChildNotFound(
            f"supervisor {self._path!r} has no child {id!r}; its children: {_clip(known)}"
        )

    def _no_dynamic(self, what: str) -> NotSupported:
        return NotSupported(
            f"{what} does not apply to the simple_one_for_one supervisor {self._path!r}; use "
            "start_instance() and terminate_child(instance_id)"
        )

    async def _do_start_child(self, spec: ChildSpec) -> Started:
        if self._flags.strategy == "simple_one_for_one":
            raise self._no_dynamic("start_child(spec)")
        _check_specs(self.name, self._flags, (spec,))
        existing = self._children.get(spec.id)
        if existing is not None:
            if existing.state == "running":
                raise AlreadyStarted(f"child {spec.id!r} is already running under {self._path!r}")
            raise AlreadyPresent(
                f"child {spec.id!r} already exists under {self._path!r} (not running); use "
                "restart_child, or delete_child first"
            )
        child = _Child(spec)
        result, payload = await self._start(child, phase="start_child")
        return self._added(child, result, payload)

    async def _do_start_instance(self, start: ChildFn | None) -> Started:
        template = self._template
        if template is None:
            raise NotSupported(
                f"start_instance is for simple_one_for_one supervisors; {self._path!r} is "
                f"{self._flags.strategy} — use start_child(spec)"
            )
        n = next(self._seq)
        self._issued = n
        spec = dataclasses.replace(
            template, id=f"{template.id}-{n}", start=start if start is not None else template.start
        )
        child = _Child(spec)
        result, payload = await self._start(child, phase="start_instance")
        return self._added(child, result, payload)

    def _added(self, child: _Child, result: str, payload: Any) -> Started:
        if result == _OK:
            self._children[child.id] = child
            return Started(child.id, payload)
        if result == _IGNORED:
            if child.spec.restart != "temporary" and self._template is None:
                self._children[child.id] = child
            return Started(child.id, None, running=False)
        if result == _FAILED:
            reason = cast(ExitReason, payload)
            raise StartFailed(
                f"child {child.id!r} failed to start under {self._path!r}: {reason}",
                child=child.id,
                reason=reason,
            )
        raise SupervisorNotRunning(
            f"supervisor {self._path!r} was asked to stop while {child.id!r} was starting"
        )

    async def _do_terminate_child(self, id: str) -> None:
        self._refuse_template_id(id, "terminate_child")
        child = self._children.get(id)
        if child is None:
            if self._template is not None and self._ended_instance(id):
                return  # an instance that already ended: OTP answers ok for a dead pid
            raise self._not_found(id)
        if child.state == "restarting":
            self._cancel_retry(child)  # leaves the restart loop (§1.6)
        await self._terminate(child, cause="terminate_child")
        child.state = "not_running"
        if child.spec.restart == "temporary" or self._template is not None:
            del self._children[id]

    async def _do_kill_child(self, id: str) -> None:
        self._refuse_template_id(id, "kill_child")
        child = self._children.get(id)
        if child is None:
            if self._template is not None and self._ended_instance(id):
                return  # an instance that already ended: killing a dead pid does nothing
            raise self._not_found(id)
        task = child.task
        if task is None or task.done():
            return  # not running, or its own exit is already queued and will be handled
        child.task = None  # its done callback's exit is stale now: the kill is handled here
        child.cancel_requested = True
        task.cancel()
        if not await self._wait_task(task, self._kill_grace, recancel=True):
            self._abandon(child, task)
        await self._handle_exit(child, _KILLED)

    def _refuse_template_id(self, id: str, what: str) -> None:
        if self._template is not None and id == self._template.id:
            raise NotSupported(
                f"{what}({id!r}): {id!r} is the template of the simple_one_for_one "
                f"supervisor {self._path!r}, not a child; give an instance id such as "
                f"{f'{id}-1'!r} (see which_children())"
            )

    def _ended_instance(self, id: str) -> bool:
        assert self._template is not None
        prefix = f"{self._template.id}-"
        number = id[len(prefix) :]
        return id.startswith(prefix) and number.isdigit() and 0 < int(number) <= self._issued

    async def _do_restart_child(self, id: str) -> Started:
        if self._template is not None:
            raise self._no_dynamic("restart_child")
        child = self._children.get(id)
        if child is None:
            raise self._not_found(id)
        if child.state == "running":
            raise ChildRunning(f"child {id!r} under {self._path!r} is running; nothing to restart")
        if child.state == "restarting":
            raise ChildRestarting(
                f"child {id!r} under {self._path!r} is in its restart loop; terminate_child "
                "it first"
            )
        result, payload = await self._start(child, phase="restart_child")
        if result == _OK:
            return Started(id, payload)
        if result == _IGNORED:
            return Started(id, None, running=False)
        if result == _FAILED:
            reason = cast(ExitReason, payload)
            raise StartFailed(
                f"child {id!r} failed to restart under {self._path!r}: {reason}",
                child=id,
                reason=reason,
            )
        raise SupervisorNotRunning(
            f"supervisor {self._path!r} was asked to stop while {id!r} was starting"
        )

    async def _do_delete_child(self, id: str) -> None:
        if self._template is not None:
            raise self._no_dynamic("delete_child")
        child = self._children.get(id)
        if child is None:
            raise self._not_found(id)
        if child.state == "running":
            raise ChildRunning(
                f"child {id!r} under {self._path!r} is running; terminate_child it first"
            )
        if child.state == "restarting":
            raise ChildRestarting(
                f"child {id!r} under {self._path!r} is in its restart loop; terminate_child "
                "it first"
            )
        del self._children[id]

    # -- helpers -------------------------------------------------------------------------

    def _info(self, c: _Child) -> ChildInfo:
        return ChildInfo(
            id=c.id,
            path=f"{self._path}/{c.id}",
            state=c.state,
            type=c.spec.type,
            restart=c.spec.restart,
            significant=c.spec.significant,
            restarts=c.restarts,
            started_at=c.started_at,
            last_exit=str(c.last_exit) if c.last_exit is not None else None,
        )

    def _emit(self, kind: str, severity: Severity | None = None, **data: Any) -> None:
        self._bus.emit(kind, self._path, severity, **data)

    def __repr__(self) -> str:
        return f"<Supervisor {self._path!r} {self._status}>"


def _check_specs(name: str, flags: SupervisorFlags, specs: Iterable[ChildSpec]) -> None:
    specs = tuple(specs)
    for spec in specs:
        if not isinstance(spec, ChildSpec):
            raise InvalidSpec(f"supervisor {name!r}: expected ChildSpec objects, got {spec!r}")
    if flags.strategy == "simple_one_for_one" and len(specs) != 1:
        raise InvalidSpec(
            f"supervisor {name!r}: simple_one_for_one needs exactly one template spec, got "
            f"{len(specs)}"
        )
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise InvalidSpec(f"supervisor {name!r}: duplicate child id {spec.id!r}")
        seen.add(spec.id)
        if spec.significant and flags.auto_shutdown == "never":
            raise InvalidSpec(
                f"supervisor {name!r}: child {spec.id!r} is significant but auto_shutdown is "
                "'never'; set auto_shutdown to any_significant or all_significant, or make the "
                "child not significant"
            )
