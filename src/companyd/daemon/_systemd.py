"""Talking to systemd: sd_notify, the watchdog, STATUS= updates and an event-loop lag gauge.

The notify protocol is one ``AF_UNIX``/``SOCK_DGRAM`` datagram to ``$NOTIFY_SOCKET`` holding
newline-separated ``KEY=VALUE`` lines (sd_notify(3)). A path starting with ``@`` is in the
abstract namespace (leading NUL byte). No ``$NOTIFY_SOCKET`` means we are not run by systemd
with ``Type=notify``, and every call is a cheap no-op.

We write these few lines instead of depending on the ``sdnotify`` package: it encodes
latin-1 (a ``STATUS=`` containing "€" is silently never sent), swallows every exception with
a bare ``except:``, and has no watchdog or ``MONOTONIC_USEC`` helpers (ops-notes §5.2).

The watchdog is pinged *from the event loop* (:class:`Watchdog`), so a loop blocked by a
synchronous call stops the pings and systemd kills and restarts the daemon
(``WatchdogSec=`` + ``Restart=on-failure``). :class:`LoopLagMonitor` measures how late the
loop runs a periodic callback, for ``companyd status``, metrics and a ``loop_lag`` event.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, MutableMapping

from companyd._aio import race
from companyd._frozen import Frozen
from companyd.admin import LoopLagBlock
from companyd.clock import Clock, SystemClock
from companyd.events import EventBus, LoopLag
from companyd.supervision import ChildContext

__all__ = [
    "LagStats",
    "LoopLagMonitor",
    "Notifier",
    "StatusUpdater",
    "Watchdog",
    "scrub_environment",
]

log = logging.getLogger("companyd.daemon.systemd")

#: Environment variables that tell a process it is the unit's main process. Agent
#: subprocesses must not see them (they could report READY or stop the watchdog).
NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def scrub_environment(env: MutableMapping[str, str]) -> None:
    """Remove the notify/watchdog variables from ``env`` (e.g. ``os.environ`` after
    :meth:`Notifier.from_env`, or a copy passed to a subprocess).
    """
    for name in NOTIFY_VARIABLES:
        env.pop(name, None)


class Notifier:
    """Sends sd_notify messages; every method is a no-op returning False without a socket.

    Sending never blocks and never raises on a delivery failure: the socket is
    non-blocking, and a message that cannot be sent (systemd gone, its queue full) is
    dropped with one warning in the log — the daemon must not die because its supervisor
    is momentarily deaf. (A malformed line passed to :meth:`notify` is a programming error
    and raises ValueError.)

    Args:
        address: the ``$NOTIFY_SOCKET`` value (a path, or ``@name`` for an abstract socket),
            or None for "not under systemd".
        watchdog_usec: the watchdog interval in microseconds, or None when the watchdog is
            off or meant for another process.
    """

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address or None
        self.watchdog_usec = watchdog_usec if watchdog_usec and watchdog_usec > 0 else None
        self._sock: socket.socket | None = None
        self._target: bytes | None = None
        self._warned = False
        if self.address is not None:
            if self.address.startswith("@"):
                self._target = b"\0" + self.address[1:].encode("utf-8")
            else:
                self._target = os.fsencode(self.address)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, unset_environment: bool = False
    ) -> Notifier:
        """A notifier for ``$NOTIFY_SOCKET``, with the watchdog interval from
        ``$WATCHDOG_USEC`` honoured only when ``$WATCHDOG_PID`` is unset or is this process.

        With ``unset_environment`` the variables are removed from ``os.environ`` afterwards,
        so subprocesses (agents' MCP servers) cannot talk to systemd in our name.
        """
        source: Mapping[str, str] = os.environ if env is None else env
        address = source.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        raw = source.get("WATCHDOG_USEC")
        pid = source.get("WATCHDOG_PID")
        if raw:
            try:
                usec = int(raw)
            except ValueError:
                log.warning("ignoring WATCHDOG_USEC=%r: expected an integer (microseconds)", raw)
        if usec is not None and pid:
            try:
                if int(pid) != os.getpid():
                    usec = None  # the watchdog belongs to another process (our parent)
            except ValueError:
                log.warning("ignoring WATCHDOG_PID=%r: expected a process id", pid)
                usec = None
        if unset_environment:
            scrub_environment(os.environ)
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        """Whether a notify socket is configured."""
        return self._target is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds systemd waits for a ``WATCHDOG=1`` before killing us, or None."""
        return self.watchdog_usec / 1e6 if self.watchdog_usec else None

    def notify(self, *lines: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram. True if it was handed to the kernel."""
        if self._target is None:
            return False
        for line in lines:
            if "\n" in line or "=" not in line:
                raise ValueError(
                    f"sd_notify line {line!r} must be one KEY=VALUE without a newline; "
                    "use status() for free text"
                )
        payload = "\n".join(lines).encode("utf-8")
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto(payload, self._target)
        except OSError as exc:
            if not self._warned:
                log.warning(
                    "cannot send %r to systemd at NOTIFY_SOCKET=%r: %s (further failures are "
                    "not logged)",
                    lines[0] if lines else "",
                    self.address,
                    exc,
                )
                self._warned = True
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """``READY=1``: start-up (or a reload) is complete."""
        return self.notify("READY=1", *self._status_line(status))

    def status(self, text: str) -> bool:
        """``STATUS=…``: the one-line summary ``systemctl status`` shows."""
        return self.notify(*self._status_line(text))

    def stopping(self, status: str | None = None) -> bool:
        """``STOPPING=1``: shutdown has begun."""
        return self.notify("STOPPING=1", *self._status_line(status))

    def reloading(self, status: str | None = None) -> bool:
        """``RELOADING=1`` with ``MONOTONIC_USEC``: a reload has begun; send :meth:`ready`
        when it is done. ``MONOTONIC_USEC`` is required by ``Type=notify-reload`` on
        systemd ≥ 253 and ignored by older versions, so it is always sent.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}", *self._status_line(status))

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: we are alive."""
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        """Close the socket (a later message opens a new one)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @staticmethod
    def _status_line(text: str | None) -> tuple[str, ...]:
        if text is None:
            return ()
        # One line: a newline would start a new KEY=VALUE and could smuggle READY=1 in.
        return ("STATUS=" + " ".join(text.splitlines()),)


HealthCheck = Callable[[], bool]


class Watchdog:
    """A supervised child that sends ``WATCHDOG=1`` every half watchdog interval.

    The ping is sent by a coroutine on the event loop, so when the loop is blocked the
    pings stop and systemd restarts the daemon. With ``health`` the ping is sent only while
    ``health()`` returns True (e.g. "the root supervisor is running and not stuck in a
    restart loop"); a failing or raising check is logged once per change.

    Does nothing (but still reports started and waits for stop) when the notifier has no
    watchdog interval and ``interval`` is not given.

    Args:
        notifier: where pings go.
        clock: paces the pings.
        health: optional readiness gate, called before each ping; must be quick.
        interval: override of the ping period in seconds (default: half the watchdog
            interval systemd announced).
    """

    def __init__(
        self,
        notifier: Notifier,
        clock: Clock | None = None,
        *,
        health: HealthCheck | None = None,
        interval: float | None = None,
    ) -> None:
        self.notifier = notifier
        self.clock: Clock = clock or SystemClock()
        self.health = health
        wd = notifier.watchdog_interval
        self.interval = interval if interval is not None else (wd / 2 if wd else None)
        self.pings = 0
        self.skipped = 0
        self._healthy = True

    def _is_healthy(self) -> bool:
        if self.health is None:
            return True
        try:
            ok = bool(self.health())
        except Exception:
            log.exception("watchdog health check raised; withholding the watchdog ping")
            ok = False
        if ok != self._healthy:
            if ok:
                log.info("health check passes again; watchdog pings resume")
            else:
                log.warning(
                    "health check fails; withholding WATCHDOG=1 so systemd restarts the "
                    "daemon if this lasts past WatchdogSec"
                )
            self._healthy = ok
        return ok

    def tick(self) -> bool:
        """One ping attempt (health permitting). True if a ping was sent."""
        if not self._is_healthy():
            self.skipped += 1
            return False
        sent = self.notifier.watchdog()
        if sent:
            self.pings += 1
        return sent

    async def run(self, ctx: ChildContext) -> None:
        """Ping every ``interval`` seconds (health permitting) until asked to stop; with no
        interval, only wait for the stop. Reports the interval as started info.
        """
        ctx.started({"interval": self.interval})
        if self.interval is None:
            await ctx.stopping.wait()
            return
        while not ctx.stopping.is_set():
            self.tick()
            await _sleep_or_stop(self.clock, self.interval, ctx)


class StatusUpdater:
    """A supervised child that keeps ``STATUS=`` current.

    Every ``interval`` seconds it calls ``summary()`` and sends the text when it changed
    (``systemctl status`` shows it; sending an unchanged line would only wake systemd).

    Args:
        notifier: where the status goes.
        summary: builds the one-line status, e.g. "8/8 agents up, 1 run in flight, $1.23 of
            $10.00 today"; must be quick and must not block.
        clock: paces the updates.
        interval: seconds between checks.
    """

    def __init__(
        self,
        notifier: Notifier,
        summary: Callable[[], str],
        clock: Clock | None = None,
        *,
        interval: float = 10.0,
    ) -> None:
        self.notifier = notifier
        self.summary = summary
        self.clock: Clock = clock or SystemClock()
        self.interval = interval
        self.last: str | None = None

    def update(self) -> bool:
        """Send the summary now if it changed. True if something was sent."""
        try:
            text = self.summary()
        except Exception:
            log.exception("status summary failed; STATUS= not updated")
            return False
        if text == self.last:
            return False
        self.last = text
        return self.notifier.status(text)

    async def run(self, ctx: ChildContext) -> None:
        """Send the summary every ``interval`` seconds when it changed, until asked to stop."""
        ctx.started()
        while not ctx.stopping.is_set():
            self.update()
            await _sleep_or_stop(self.clock, self.interval, ctx)


class LagStats(Frozen):
    """Event-loop lag readings in seconds: the latest sample and the largest seen."""

    current: float
    max: float
    samples: int

    def to_dict(self) -> LoopLagBlock:
        """The readings in milliseconds (rounded to µs) and the sample count, JSON-ready."""
        return {
            "current_ms": round(self.current * 1000, 3),
            "max_ms": round(self.max * 1000, 3),
            "samples": self.samples,
        }


class LoopLagMonitor:
    """A supervised child measuring how late the event loop runs a periodic wake-up.

    Each sample sleeps ``interval`` seconds on the clock and records how much later than
    asked it actually resumed; a loop kept busy by a blocking call shows up as lag.
    ``current`` / ``max`` feed ``companyd status`` and the metrics gauge.

    With a ``bus``, a lag above ``warn_after`` publishes one ``loop_lag`` event (WARNING)
    per excursion — again only after the lag fell back below the threshold — so a slow
    loop is told once, not twice a second.

    Args:
        clock: measures and paces the samples.
        bus: where ``loop_lag`` events go (optional).
        interval: seconds between samples.
        warn_after: lag in seconds that counts as an excursion.
        source: the event source (the child's path by default).
    """

    def __init__(
        self,
        clock: Clock | None = None,
        bus: EventBus | None = None,
        *,
        interval: float = 0.5,
        warn_after: float = 1.0,
        source: str | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.bus = bus
        self.interval = interval
        self.warn_after = warn_after
        self.source = source
        self.current = 0.0
        self.max = 0.0
        self.samples = 0
        self._in_excursion = False

    def stats(self) -> LagStats:
        """The current reading: latest lag, largest lag, number of samples."""
        return LagStats(current=self.current, max=self.max, samples=self.samples)

    def record(self, lag: float, source: str = "companyd") -> None:
        """Take one lag sample (seconds; negative values count as 0)."""
        lag = max(0.0, lag)
        self.current = lag
        self.max = max(self.max, lag)
        self.samples += 1
        if lag > self.warn_after and not self._in_excursion:
            self._in_excursion = True
            if self.bus is not None:
                self.bus.publish(
                    LoopLag(
                        source=self.source or source,
                        lag_s=round(lag, 3),
                        threshold_s=self.warn_after,
                    )
                )
        elif lag <= self.warn_after:
            self._in_excursion = False

    async def run(self, ctx: ChildContext) -> None:
        """Take a lag sample every ``interval`` seconds until asked to stop (a sleep cut short by
        the stop is not a sample).
        """
        ctx.started()
        while not ctx.stopping.is_set():
            start = self.clock.monotonic()
            await _sleep_or_stop(self.clock, self.interval, ctx)
            if ctx.stopping.is_set():
                break  # woken by the stop request, not by the clock: not a sample
            self.record(self.clock.monotonic() - start - self.interval, ctx.path)


async def _sleep_or_stop(clock: Clock, seconds: float, ctx: ChildContext) -> None:
    """Sleep ``seconds`` on ``clock``, returning early when the child is asked to stop."""
    await race(clock.sleep(seconds), ctx.stopping.wait())
