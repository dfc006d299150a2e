"""The contract between a supervisor and the children it runs.

Every long-lived part of companyd (the memory owner, the spend ledger, the alerter, each
agent, the scheduler, the control socket) is a supervised child. A child is an async
callable taking a :class:`ChildContext`::

    async def run(ctx: ChildContext) -> None:
        resource = await open_things()      # setup
        ctx.started()                       # ready: the supervisor starts the next sibling
        try:
            while not ctx.stopping.is_set():
                await do_one_step()          # a stop request is honoured between steps
        finally:
            await resource.close()           # runs on return, on error and on cancellation

Exit reasons follow OTP (docs/supervision.md):

* returning → ``normal`` (after the stop request: ``shutdown``);
* raising :class:`Shutdown` (optionally with info) → ``shutdown`` / ``{shutdown, info}``;
* any other exception → ``error`` (the exception is kept);
* cancellation → ``killed``, OTP's brutal kill: by the supervisor once the ``shutdown``
  seconds ran out, by ``brutal_kill`` or ``Supervisor.kill_child``, or by code other than
  the supervisor; ``killed`` is abnormal, so a permanent or transient child is restarted;
* not finishing within ``shutdown`` seconds plus the kill grace → ``killed`` (abandoned).

:class:`ExitReason` is that classification as a value. A child that should not run now
calls ``ctx.started(IGNORE)`` and returns (OTP's ``ignore``, :data:`IGNORE`).

Stopping is a two-step protocol: the supervisor sets ``ctx.stopping`` (finish the current
step and return), waits the child's ``shutdown`` seconds, then cancels it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from companyd.supervision._text import clip

__all__ = ["IGNORE", "ChildContext", "ChildFn", "ExitReason", "Shutdown", "StandaloneContext"]


class ChildContext(Protocol):
    """What a running child can see of its supervisor."""

    @property
    def id(self) -> str:
        """The child's id within its supervisor."""
        ...

    @property
    def path(self) -> str:
        """Full path in the tree, e.g. ``companyd/agents/finance/cfo``."""
        ...

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the supervisor asks the child to stop."""
        ...

    def started(self, info: Any = None) -> None:
        """Signal readiness (once). ``info`` is passed back to whoever started the child."""
        ...


ChildFn = Callable[[ChildContext], Awaitable[None]]


class Shutdown(Exception):  # named after OTP's exit reason, not an error
    """Raise to exit with reason ``shutdown`` (or ``{shutdown, info}``): a normal-class exit.

    A transient child raising it is not restarted.
    """

    def __init__(self, info: Any = None) -> None:
        super().__init__(info)
        self.info = info


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


@dataclass(frozen=True, slots=True)
class ExitReason:
    """Why a child ended, in OTP's vocabulary.

    ``normal``: the child returned. ``shutdown``: it returned after its supervisor's stop
    request, or it raised :class:`Shutdown` (``info`` then holds the info). ``error``: any
    other exception (kept in ``exception``). ``killed``: its task was cancelled — by
    ``brutal_kill``, by ``Supervisor.kill_child``, after its shutdown time ran out, or by
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
            return f"shutdown:{clip(info)}"
        if self.kind == "error":
            return f"error:{clip(repr(self.exception))}"
        return self.kind

    def data(self) -> dict[str, Any]:
        """JSON-serialisable event fields: ``reason`` and, for errors, the exception."""
        out: dict[str, Any] = {"reason": str(self)}
        if self.kind == "error" and self.exception is not None:
            out["exception"] = type(self.exception).__name__
            out["message"] = clip(str(self.exception))
        return out


class StandaloneContext:
    """A :class:`ChildContext` for running one child without a supervisor: the daemon's own
    helpers outside the tree, ``companyd serve-mcp``, tests, benchmarks, the simulator.

    ``ready`` is set by ``started()``, whose argument is kept in ``info``; set ``stopping``
    to ask the child to stop. ``id`` defaults to the last segment of ``path``.
    """

    def __init__(self, path: str = "companyd/child", *, id: str | None = None) -> None:
        self._path = path
        self._id = id if id is not None else path.rsplit("/", 1)[-1]
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self.info: Any = None

    @property
    def id(self) -> str:
        """The child id (``id=``, else the last segment of :attr:`path`)."""
        return self._id

    @property
    def path(self) -> str:
        """The child's path as given."""
        return self._path

    @property
    def stopping(self) -> asyncio.Event:
        """The event a caller sets to ask the child to stop."""
        return self._stopping

    def started(self, info: Any = None) -> None:
        """Record ``info`` in :attr:`info` and set :attr:`ready`, as a supervisor's context would
        confirm the start.
        """
        self.info = info
        self.ready.set()
