"""The event stream: the one place where things that happened are told.

Supervisors, agents, the spend ledger, the scheduler, the memory owner and the daemon
*publish* :class:`Event` objects to one :class:`EventBus`. Alerts (Telegram), logs, metrics
and ``companyd status`` *subscribe*. Nothing reads another component's internals to find out
what happened — if an alert or a status line needs a fact, that fact is in an event.

Rules:

* ``publish`` is synchronous, cheap and never blocks or raises into the publisher; it must
  be called from the event loop's thread (use ``publish_threadsafe`` from other threads).
* A subscriber that falls behind loses the oldest events of *its own* queue (counted in
  ``dropped``), never the publisher's time and never other subscribers' events.
* ``data`` holds JSON-serialisable values only (str, int, float, bool, None, lists, dicts),
  so every event can be logged, stored and sent as it is.

Event kinds are plain strings; :data:`KINDS` lists the known ones with their default
severity, which company.yaml's ``alerts.routes`` may override per kind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from companyd.clock import Clock, SystemClock

__all__ = ["KINDS", "Event", "EventBus", "Severity", "Subscription"]

log = logging.getLogger(__name__)


class Severity(StrEnum):
    """How urgently a human should hear about an event."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """The severity's order, DEBUG 0 to CRITICAL 3: compare ranks, not names."""
        return _RANK[self]


_RANK = {Severity.DEBUG: 0, Severity.INFO: 1, Severity.WARNING: 2, Severity.CRITICAL: 3}


#: Known event kinds and their default severity. Publishers may use other kinds; they
#: default to INFO. Keep this table in step with docs/events.md.
KINDS: Mapping[str, Severity] = {
    # supervision (companyd.supervision.supervisor)
    "sup_started": Severity.DEBUG,
    "sup_stopped": Severity.DEBUG,
    "child_started": Severity.DEBUG,
    "child_ignored": Severity.INFO,
    "child_start_failed": Severity.WARNING,
    "child_exited": Severity.INFO,
    "child_terminated": Severity.DEBUG,
    "child_kill_failed": Severity.WARNING,
    "restart": Severity.WARNING,
    "backoff": Severity.INFO,
    "max_intensity": Severity.CRITICAL,
    "auto_shutdown": Severity.WARNING,
    # daemon lifecycle (companyd.daemon)
    "daemon_started": Severity.INFO,
    "daemon_stopping": Severity.INFO,
    "daemon_reloaded": Severity.INFO,
    "state_dir_tightened": Severity.WARNING,
    "state_disk_full": Severity.CRITICAL,
    "state_disk_recovered": Severity.INFO,
    "config_rejected": Severity.WARNING,
    "loop_lag": Severity.WARNING,
    # agents (companyd.roles)
    "run_started": Severity.DEBUG,
    "run_finished": Severity.INFO,
    "run_failed": Severity.WARNING,
    "circuit_breaker": Severity.WARNING,
    "task_quarantined": Severity.WARNING,
    "agent_paused": Severity.INFO,
    "agent_resumed": Severity.INFO,
    "model_fallback": Severity.INFO,
    "proposal_created": Severity.INFO,
    "proposal_applied": Severity.INFO,
    # money (companyd.spend)
    "budget_threshold": Severity.WARNING,
    "budget_exhausted": Severity.WARNING,
    "api_spend_limit": Severity.CRITICAL,
    "api_key_refused": Severity.CRITICAL,
    "spend_runaway": Severity.WARNING,
    "unknown_model_price": Severity.WARNING,
    "budget_reset": Severity.INFO,
    "budget_raised": Severity.INFO,
    "spend_unsettled": Severity.WARNING,
    "spend_unanswered": Severity.WARNING,
    # routines (companyd.scheduler)
    "routine_failed": Severity.WARNING,
    "routine_missed": Severity.WARNING,
    "routine_skipped": Severity.INFO,
    # memory (companyd.memory)
    "memory_repaired": Severity.WARNING,
    # the pager itself (companyd.alerts)
    "telegram_commands_failing": Severity.WARNING,
    "telegram_commands_recovered": Severity.INFO,
    # external tool servers (companyd.roles)
    "mcp_server_failed": Severity.WARNING,
    "mcp_server_recovered": Severity.INFO,
}


@dataclass(frozen=True, kw_only=True)
class Event:
    """Something that happened, told once.

    Attributes:
        kind: what happened, e.g. ``"restart"`` (see :data:`KINDS`).
        ts: wall-clock time (epoch seconds) from the publisher's clock.
        source: who tells it: a supervisor path such as ``"companyd/agents/finance"``, or a
            service name such as ``"spend"``.
        severity: default urgency; alert routing may override it per kind.
        data: kind-specific facts (JSON-serialisable), e.g. ``{"child": "cfo",
            "reason": "error:RuntimeError('boom')", "restarts": 2}``.
    """

    kind: str
    ts: float
    source: str
    severity: Severity = Severity.INFO
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The event as a JSON-serialisable dict (severity as its name; ``data`` copied)."""
        return {
            "kind": self.kind,
            "ts": self.ts,
            "source": self.source,
            "severity": str(self.severity),
            "data": dict(self.data),
        }


class Subscription:
    """A bounded queue of events for one subscriber; iterate it with ``async for``."""

    def __init__(self, bus: EventBus, maxsize: int, kinds: frozenset[str] | None) -> None:
        self._bus = bus
        self._queue: collections.deque[Event] = collections.deque(maxlen=maxsize)
        self._kinds = kinds
        self._waiter: asyncio.Future[None] | None = None
        self.dropped = 0
        self.closed = False

    def _offer(self, event: Event) -> None:
        if self.closed or (self._kinds is not None and event.kind not in self._kinds):
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1  # the deque drops the oldest on append
        self._queue.append(event)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def get_nowait(self) -> Event | None:
        """The next queued event, or None."""
        return self._queue.popleft() if self._queue else None

    async def get(self) -> Event:
        """Wait for the next event. Raises ``asyncio.CancelledError`` only if cancelled."""
        while not self._queue:
            if self.closed:
                raise EOFError("subscription closed")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._queue.popleft()

    def close(self) -> None:
        """Stop receiving events (idempotent): a pending :meth:`get` wakes up, and once the queue
        is empty :meth:`get` raises ``EOFError`` and iteration ends.
        """
        self.closed = True
        self._bus._unsubscribe(self)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        with contextlib.suppress(EOFError):
            while True:
                yield await self.get()


class EventBus:
    """Fan-out of events to subscribers, plus a short history for status displays.

    Args:
        clock: used by :meth:`emit` to timestamp events.
        history: how many recent events :meth:`recent` keeps.
    """

    def __init__(self, clock: Clock | None = None, history: int = 1000) -> None:
        self.clock: Clock = clock or SystemClock()
        self._subs: list[Subscription] = []
        self._callbacks: list[Callable[[Event], None]] = []
        self._recent: collections.deque[Event] = collections.deque(maxlen=history)

    def publish(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber. Never raises, never blocks."""
        self._recent.append(event)
        for sub in list(self._subs):
            sub._offer(event)
        for cb in list(self._callbacks):
            try:
                cb(event)
            except Exception:  # a broken listener must not break the publisher
                log.exception("event listener %r failed on %s", cb, event.kind)

    def emit(
        self,
        kind: str,
        source: str,
        severity: Severity | None = None,
        **data: Any,
    ) -> Event:
        """Build an event stamped with the bus clock, publish it, and return it."""
        event = Event(
            kind=kind,
            ts=self.clock.time(),
            source=source,
            severity=severity if severity is not None else KINDS.get(kind, Severity.INFO),
            data=data,
        )
        self.publish(event)
        return event

    def publish_threadsafe(self, event: Event, loop: asyncio.AbstractEventLoop) -> None:
        """Publish from a thread other than the loop's."""
        loop.call_soon_threadsafe(self.publish, event)

    def subscribe(
        self, maxsize: int = 10_000, kinds: frozenset[str] | set[str] | None = None
    ) -> Subscription:
        """A new subscription receiving every later event (optionally only ``kinds``)."""
        sub = Subscription(self, maxsize, frozenset(kinds) if kinds is not None else None)
        self._subs.append(sub)
        return sub

    def add_listener(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``callback(event)`` synchronously on every publish; returns a remover.

        Listeners must be quick and must not block (logging, counters, status caches).
        """
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    def recent(self, kinds: set[str] | None = None, limit: int = 100) -> list[Event]:
        """The latest events, oldest first."""
        items = [e for e in self._recent if kinds is None or e.kind in kinds]
        return items[-limit:]

    def _unsubscribe(self, sub: Subscription) -> None:
        with contextlib.suppress(ValueError):
            self._subs.remove(sub)
