"""Erlang/OTP supervision on asyncio.

A :class:`Supervisor` runs *children* — async callables following the contract in
:mod:`companyd.supervision._child` — as asyncio tasks it owns, and restarts them by OTP's rules
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

This module is the supervisor process itself: its life as a root or as a child, and the
command queue it serves. The rest is composed in, each a mixin over the state in
:mod:`~companyd.supervision._state`: start-up (:mod:`~companyd.supervision._startup`), restart
logic (:mod:`~companyd.supervision._restart`), the shutdown protocol
(:mod:`~companyd.supervision._shutdown`), the admin calls on dynamic children
(:mod:`~companyd.supervision._dynamic`) and the read-only views
(:mod:`~companyd.supervision._views`).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import random as _random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Self, TypeVar

from companyd._aio import race
from companyd.clock import Clock, SystemClock
from companyd.events import Event, EventBus, SupStarted, SupStopped
from companyd.supervision._child import IGNORE, ChildContext, ChildFn, ExitReason, Shutdown
from companyd.supervision._dynamic import DynamicMixin
from companyd.supervision._errors import (
    InvalidSpec,
    SupervisorError,
    SupervisorGaveUp,
    SupervisorNotRunning,
    SupervisorStartError,
)
from companyd.supervision._restart import RestartMixin
from companyd.supervision._shutdown import ShutdownMixin
from companyd.supervision._spec import (
    DEFAULT_KILL_GRACE,
    INFINITY,
    AutoShutdown,
    ChildSpec,
    InitResult,
    Restart,
    ShutdownSpec,
    Strategy,
    SupervisorFlags,
    check_specs,
)
from companyd.supervision._startup import StartupMixin
from companyd.supervision._state import (
    SHUTDOWN,
    Call,
    Child,
    ChildCtx,
    Exit,
    Msg,
    Outcome,
    Status,
    Stop,
    SupervisorState,
    TryAgain,
    retrieve,
)
from companyd.supervision._text import clip
from companyd.supervision._views import ViewsMixin

__all__ = ["Supervisor"]

log = logging.getLogger("companyd.supervision.supervisor")

T = TypeVar("T")


class Supervisor(ViewsMixin, DynamicMixin, RestartMixin, StartupMixin, ShutdownMixin):
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
            check_specs(name, flags, specs)
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
        self._status: Status = "stopped"
        self._flags = SupervisorFlags()
        self._children: dict[str, Child] = {}
        self._carried: dict[str, int] = {}
        self._template: ChildSpec | None = None
        self._seq = itertools.count(1)
        self._issued = 0
        self._restarts: collections.deque[float] = collections.deque()
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()
        self._stop_requested = False
        self._pending_start: asyncio.Future[tuple[str, Any]] | None = None
        self._starting: Child | None = None
        self._outcome: Outcome | None = None
        self._gave_up: SupervisorGaveUp | None = None
        self._main: asyncio.Task[ExitReason] | None = None
        self._started_at: float | None = None

    # -- properties ---------------------------------------------------------------------

    @property
    def path(self) -> str:
        """Path in the tree, e.g. ``companyd/agents/finance`` (set when it runs)."""
        return self._path

    @property
    def status(self) -> Status:
        """Lifecycle of the current (or last) run."""
        return self._status

    @property
    def flags(self) -> SupervisorFlags:
        """The flags of the current (or last) run."""
        return self._flags

    @property
    def bus(self) -> EventBus:
        """The bus this supervisor publishes its events on (its parent's, unless one was given)."""
        return self._bus

    @property
    def clock(self) -> Clock:
        """The clock of restart intensity, backoff and shutdown grace (its parent's, unless one was
        given).
        """
        return self._clock

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
        main.add_done_callback(retrieve)
        self._main = main
        await race(ready, main)  # both are ours: neither is cancelled by the race
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
            parent = ctx._supervisor if isinstance(ctx, ChildCtx) else None
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

    # -- the supervisor task -------------------------------------------------------------

    def _reset(self, path: str, parent: SupervisorState | None) -> None:
        self._path = path
        if parent is not None:
            self._bus = self._bus_arg if self._bus_arg is not None else parent._bus
            self._clock = self._clock_arg if self._clock_arg is not None else parent._clock
            self._random = self._random_arg if self._random_arg is not None else parent._random
        if self._template is None:  # simple_one_for_one instances get new ids: nothing to carry
            self._carried = {c.id: c.restarts for c in self._children.values()}
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
        self, path: str, on_ready: Callable[[Any], None], parent: SupervisorState | None
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
                self._publish(
                    SupStarted(
                        source=self._path,
                        strategy=self._flags.strategy,
                        max_restarts=self._flags.max_restarts,
                        max_seconds=self._flags.max_seconds,
                        auto_shutdown=self._flags.auto_shutdown,
                        children=[c.id for c in self._children.values()],
                    )
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
            return SHUTDOWN
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
            stopped_reason = f"error:{clip(repr(exc))}"
            log.exception("supervisor %s crashed", self._path)
            self._kill_all_now()
            raise
        finally:
            self._status = "stopped"
            self._started_at = None
            self._cancel_timers()
            self._fail_pending_calls()
            self._publish(SupStopped(source=self._path, reason=stopped_reason))

    async def _serve(self) -> None:
        queue = self._queue
        while self._outcome is None:
            if self._stop_requested:
                self._outcome = "shutdown"
                break
            msg = await queue.get()
            if isinstance(msg, Exit):
                await self._on_exit(msg.child, msg.task)
            elif isinstance(msg, TryAgain):
                await self._on_try_again(msg.child, msg.token)
            elif isinstance(msg, Call):
                await self._on_call(msg)
            else:  # Stop
                self._outcome = "shutdown"

    def _request_stop(self) -> None:
        if self._stop_requested:
            return
        self._stop_requested = True
        self._queue.put_nowait(Stop())
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
        self._queue.put_nowait(Call(op, fut))
        return await fut

    async def _on_call(self, msg: Call) -> None:
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
            if isinstance(msg, Call) and not msg.fut.done():
                msg.fut.set_exception(
                    SupervisorNotRunning(
                        f"supervisor {self._path!r} stopped before it could answer; check "
                        "its events (sup_stopped) for why"
                    )
                )

    # -- helpers -------------------------------------------------------------------------

    def _publish(self, event: Event) -> None:
        self._bus.publish(event)

    def __repr__(self) -> str:
        return f"<Supervisor {self._path!r} {self._status}>"
