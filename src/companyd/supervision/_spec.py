"""What a supervisor is given and what it answers: OTP's child specs and supervisor flags.

:class:`ChildSpec` (id, start, restart type, shutdown, type, significant, backoff) and
:class:`SupervisorFlags` (strategy, intensity, auto_shutdown) are frozen and validated on
construction: an invalid value raises :class:`~companyd.supervision._errors.InvalidSpec`
naming the valid ones, so a supervisor never runs with a spec OTP would refuse.
:class:`Backoff` is the opt-in restart delay (D8, beyond OTP). :class:`Started`,
:class:`ChildInfo` and :class:`ChildCounts` are the results of the admin and read-only calls.
The defaults are OTP's, except the intensity (Elixir's 3 restarts in 5 s; D6).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, get_args

from companyd._frozen import Frozen
from companyd.supervision._child import ChildFn, _Ignore
from companyd.supervision._errors import InvalidSpec

__all__ = [
    "BRUTAL_KILL",
    "DEFAULT_KILL_GRACE",
    "DEFAULT_WORKER_SHUTDOWN",
    "INFINITY",
    "AutoShutdown",
    "Backoff",
    "ChildCounts",
    "ChildInfo",
    "ChildSpec",
    "ChildState",
    "ChildType",
    "InitResult",
    "Restart",
    "ShutdownSpec",
    "Started",
    "Strategy",
    "SupervisorFlags",
    "check_specs",
]

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


class Backoff(Frozen):
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


class ChildSpec(Frozen):
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


class SupervisorFlags(Frozen):
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


class Started(Frozen):
    """Result of ``start_child`` / ``restart_child`` / ``start_instance``.

    ``info`` is what the child passed to ``ctx.started(info)`` (a sub-supervisor passes
    itself). ``running`` is False when the child answered :data:`IGNORE`.
    """

    id: str
    info: Any = None
    running: bool = True


class ChildInfo(Frozen):
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
        """The row as a JSON-serialisable dict, keyed by the attribute names."""
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


class ChildCounts(Frozen):
    """OTP's ``count_children``: specs, active (running), supervisors, workers.

    ``supervisors`` / ``workers`` count specs whether running or not; for
    simple_one_for_one, ``specs`` is 1 and they count instances.
    """

    specs: int
    active: int
    supervisors: int
    workers: int


def check_specs(name: str, flags: SupervisorFlags, specs: Iterable[ChildSpec]) -> None:
    """Refuse specs that cannot run together under ``flags`` (InvalidSpec names why)."""
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
