"""The event bus: the one place where things that happened are told.

Supervisors, agents, the spend ledger, the scheduler, the memory owner and the daemon
*publish* :class:`Event` objects to one :class:`EventBus`. Alerts (Telegram), logs, metrics
and ``companyd status`` *subscribe*. Nothing reads another component's internals to find out
what happened — if an alert or a status line needs a fact, that fact is in an event.

Rules:

* ``publish`` is synchronous, cheap and never blocks or raises into the publisher; it must
  be called from the event loop's thread (use ``publish_threadsafe`` from other threads).
* A subscriber that falls behind loses the oldest events of *its own* queue (counted in
  ``dropped``), never the publisher's time and never other subscribers' events.
* An event published without a time is stamped with the bus clock's time, in place, once
  (before any subscriber sees it; events are immutable after that); ``publish`` returns it.

Events are typed (one frozen dataclass per kind, :mod:`companyd.events._base`); publishers
construct them: ``bus.publish(ChildExited(source=path, child="cfo", ...))``.
:meth:`EventBus.emit` builds one from a kind name and keyword data instead, for code below
the events layer (``companyd._fs.DiskAlarm``) that cannot import the classes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from companyd.clock import Clock, SystemClock
from companyd.events._base import Event, Severity
from companyd.events._catalog import event_from

__all__ = ["EventBus", "Subscription"]

E = TypeVar("E", bound=Event)

log = logging.getLogger("companyd.events.bus")


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
        """Stop receiving: the bus forgets this subscription."""
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
        clock: stamps the events published without a time.
        history: how many recent events :meth:`recent` keeps.
    """

    def __init__(self, clock: Clock | None = None, history: int = 1000) -> None:
        self.clock: Clock = clock or SystemClock()
        self._subs: list[Subscription] = []
        self._callbacks: list[Callable[[Event], None]] = []
        self._recent: collections.deque[Event] = collections.deque(maxlen=history)

    def publish(self, event: E) -> E:
        """Deliver ``event`` to every subscriber (stamped with the bus clock's time if it
        has none) and return it. Never raises, never blocks.
        """
        if not event.stamped:
            # The one write to a frozen event, before anyone but its publisher holds it:
            # ``dataclasses.replace`` would cost more than the rest of a publish.
            object.__setattr__(event, "ts", self.clock.time())
        self._recent.append(event)
        for sub in list(self._subs):
            sub._offer(event)
        for cb in list(self._callbacks):
            try:
                cb(event)
            except Exception:  # a broken listener must not break the publisher
                log.exception("event listener %r failed on %s", cb, event.kind)
        return event

    def emit(
        self,
        kind: str,
        source: str,
        severity: Severity | None = None,
        **data: Any,
    ) -> Event:
        """Build the event of ``kind`` from ``data`` (:func:`~companyd.events._catalog.event_from`),
        publish it and return it. Code that can import the event classes publishes them.
        """
        return self.publish(event_from(kind, source=source, severity=severity, data=data))

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
