"""Event kinds of the supervision tree (:mod:`companyd.supervision`).

Source: the supervisor's path, e.g. ``companyd/agents/finance``. ``child`` is the child id in
that supervisor. An exit's ``reason`` is OTP's (``normal``, ``shutdown``,
``shutdown:<info>``, ``error:<repr>``, ``killed``); for errors, ``exception`` (the class
name) and ``message`` come with it.
"""

from __future__ import annotations

from companyd.events._base import Event, Severity, optional

__all__ = [
    "AutoShutdown",
    "Backoff",
    "ChildExited",
    "ChildIgnored",
    "ChildKillFailed",
    "ChildStartFailed",
    "ChildStarted",
    "ChildTerminated",
    "MaxIntensity",
    "Restart",
    "SupStarted",
    "SupStopped",
]


class SupStarted(Event):
    """A supervisor started its children and serves."""

    KIND = "sup_started"
    severity: Severity = Severity.DEBUG
    strategy: str
    max_restarts: int
    max_seconds: float
    auto_shutdown: str
    children: list[str]


class SupStopped(Event):
    """A supervisor stopped (``reason``: ``shutdown``, ``failed_to_start:<child>``, …)."""

    KIND = "sup_stopped"
    severity: Severity = Severity.DEBUG
    reason: str


class ChildStarted(Event):
    """A child started (``phase``: ``start``, ``restart``, …)."""

    KIND = "child_started"
    severity: Severity = Severity.DEBUG
    child: str
    type: str
    phase: str
    restarts: int


class ChildIgnored(Event):
    """A child's start answered IGNORE: kept, not running."""

    KIND = "child_ignored"
    child: str
    phase: str


class ChildStartFailed(Event):
    """A child (None: the supervisor's own init) failed to start."""

    KIND = "child_start_failed"
    severity: Severity = Severity.WARNING
    child: str | None
    phase: str
    reason: str
    exception: str | None = optional()
    message: str | None = optional()


class ChildExited(Event):
    """A running child ended; ``action`` says whether it is restarted."""

    KIND = "child_exited"
    child: str
    restart_type: str
    action: str
    reason: str
    exception: str | None = optional()
    message: str | None = optional()
    gave_up: bool | None = optional()


class ChildTerminated(Event):
    """The supervisor stopped a child (``cause``: why, ``stop``: how)."""

    KIND = "child_terminated"
    severity: Severity = Severity.DEBUG
    child: str
    cause: str
    stop: str
    reason: str
    exception: str | None = optional()
    message: str | None = optional()


class ChildKillFailed(Event):
    """A child ignored its stop request and cancellation and was abandoned."""

    KIND = "child_kill_failed"
    severity: Severity = Severity.WARNING
    child: str
    shutdown: float | str | None
    kill_grace: float
    message: str


class Restart(Event):
    """A child is restarted, with ``group`` (the children restarted together)."""

    KIND = "restart"
    severity: Severity = Severity.WARNING
    child: str
    strategy: str
    restarts: int
    max_restarts: int
    max_seconds: float
    group: list[str]


class Backoff(Event):
    """A restart waits ``delay`` seconds (the child's backoff)."""

    KIND = "backoff"
    child: str
    delay: float
    attempt: int


class MaxIntensity(Event):
    """A supervisor gave up: more restarts than ``max_restarts`` in ``max_seconds``."""

    KIND = "max_intensity"
    severity: Severity = Severity.CRITICAL
    child: str
    restarts: int
    max_restarts: int
    max_seconds: float
    reason: str
    message: str


class AutoShutdown(Event):
    """A significant child ended and the supervisor shuts down (``mode``)."""

    KIND = "auto_shutdown"
    severity: Severity = Severity.WARNING
    child: str
    mode: str
