"""The dashboard's connection limits: :class:`ConnectionGate`.

uvicorn holds a connection that never sends a request for ever, and accepts as many as
come: 1,100 idle connections from another local user used every file descriptor the
daemon had under systemd's default ``LimitNOFILE`` (1,024), and then the control socket,
``companyd status`` and the stores failed with ``EMFILE``. The gate bounds that, as the
control socket bounds its own (daemon/_control.py):

* at most :data:`MAX_CONNECTIONS` connections at once, and :data:`MAX_PER_ADDRESS` from
  one client address. Over a cap, the oldest *idle* connection (of that address, or of
  all) is closed to make room — one that has not sent a whole request head yet, or waits
  between keep-alive requests — so a browser still gets in during a flood; when every
  connection is serving a request or a live stream, the new one is closed at once;
* a connection must send a whole request head within :data:`HEAD_TIMEOUT_S` of being
  accepted (uvicorn's ``timeout_keep_alive`` then closes it when idle between requests);
* the listen backlog, and so what one accept round takes at once, is :data:`BACKLOG`.

Each kind of limit hit is logged at most once per :data:`LOG_INTERVAL` on the daemon's
clock, with how many more since (a flood is one line, not one per connection). The
timeouts are network timeouts on the event loop's clock, as uvicorn's own are.

The gate works through uvicorn's h11 protocol (:meth:`ConnectionGate.protocol`, passed as
``uvicorn.Config(http=…)``): admission in ``connection_made``, release in
``connection_lost``. Behind a proxy every connection comes from the proxy's address; the
total cap is what matters there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from companyd.clock import Clock

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

    _Base = H11Protocol
else:
    # uvicorn is imported by protocol(), when the dashboard's first connection arrives
    # (server.py): the gate itself, its caps and counters, need none of it
    _Base = object

__all__ = [
    "BACKLOG",
    "HEAD_TIMEOUT_S",
    "LOG_INTERVAL",
    "MAX_CONNECTIONS",
    "MAX_PER_ADDRESS",
    "ConnectionGate",
]

log = logging.getLogger("companyd.dashboard.connections")

#: Most connections served at once: far above a few browsers' (about six each, plus a live
#: stream per tab) and far below systemd's default 1,024 descriptors, which the daemon's
#: stores, control socket and agents need too.
MAX_CONNECTIONS = 256
#: Most connections from one client address at once.
MAX_PER_ADDRESS = 64
#: Seconds a new connection has to send a whole request head.
HEAD_TIMEOUT_S = 10.0
#: The listen backlog (and the most connections one accept round takes).
BACKLOG = 64
#: Limit hits of one kind are logged at most this often (seconds).
LOG_INTERVAL = 60.0


class _GatedH11(_Base):
    """uvicorn's h11 protocol, admitted by a :class:`ConnectionGate` (set per subclass;
    :meth:`ConnectionGate.protocol` puts uvicorn's ``H11Protocol`` after it).
    """

    gate: ConnectionGate

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.address = "?"
        self.admitted = False
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Admit the connection (or close it: over a cap with nothing idle to close)."""
        super().connection_made(transport)
        self.address = str(self.client[0]) if self.client else "?"
        if not self.gate.admit(self):
            transport.abort()
            return
        self.admitted = True
        self._head_timer = self.loop.call_later(self.gate.head_timeout, self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        """Release the connection's place."""
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self.admitted:
            self.admitted = False
            self.gate.release(self)
        super().connection_lost(exc)

    @property
    def requested(self) -> bool:
        """A whole request head has arrived (uvicorn made its request cycle)."""
        cycle: RequestResponseCycle | None = self.cycle  # None until the first request
        return cycle is not None

    @property
    def idle(self) -> bool:
        """No request head yet, or waiting between keep-alive requests."""
        return not self.requested or self.cycle.response_complete

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.requested:  # no whole request head in time
            self.gate.note(
                "head",
                "dashboard: closed a connection from %s that sent no request within %g s",
                self.address,
                self.gate.head_timeout,
            )
            self.transport.abort()


class ConnectionGate:
    """Admits dashboard connections under the caps (see the module docstring).

    Args:
        clock: the daemon's clock (for rate-limiting the log).
        max_connections: the total cap.
        max_per_address: the cap per client address.
        head_timeout: seconds a new connection has to send its request head.

    Attributes:
        refused: connections closed at once (over a cap, nothing idle to close).
        evicted: idle connections closed to make room.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        max_connections: int = MAX_CONNECTIONS,
        max_per_address: int = MAX_PER_ADDRESS,
        head_timeout: float = HEAD_TIMEOUT_S,
    ) -> None:
        self.clock = clock
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.head_timeout = head_timeout
        self.refused = 0
        self.evicted = 0
        self._open: dict[_GatedH11, None] = {}  # admitted, oldest first
        self._per_address: dict[str, int] = {}
        self._logged: dict[str, tuple[float, int]] = {}  # kind -> (last logged, suppressed)

    def protocol(self) -> type[H11Protocol]:
        """The protocol class for ``uvicorn.Config(http=…)``, admitted by this gate."""
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return type("GatedH11Protocol", (_GatedH11, H11Protocol), {"gate": self})

    @property
    def open(self) -> int:
        """How many connections are admitted now."""
        return len(self._open)

    def admit(self, conn: _GatedH11) -> bool:
        """Take ``conn`` in, closing the oldest idle one over a cap; False: refuse it."""
        addr = conn.address
        if self._per_address.get(addr, 0) >= self.max_per_address:
            cap: str | None = f"{self.max_per_address} from {addr}"
            victim = next((c for c in self._open if c.address == addr and c.idle), None)
        elif len(self._open) >= self.max_connections:
            cap = f"{self.max_connections} in all"
            victim = next((c for c in self._open if c.idle), None)
        else:
            cap = None
        if cap is not None:
            self.note(
                "cap",
                "dashboard: %s connections at once (a cap); closing the oldest idle ones, "
                "or new ones when none is idle",
                cap,
            )
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            self.release(victim)
            victim.admitted = False
            victim.transport.abort()
        self._open[conn] = None
        self._per_address[addr] = self._per_address.get(addr, 0) + 1
        return True

    def release(self, conn: _GatedH11) -> None:
        """Forget ``conn`` (closed)."""
        if conn in self._open:
            del self._open[conn]
            left = self._per_address.get(conn.address, 1) - 1
            if left > 0:
                self._per_address[conn.address] = left
            else:
                self._per_address.pop(conn.address, None)

    def note(self, kind: str, msg: str, *args: Any) -> None:
        """Log ``msg`` at most once per :data:`LOG_INTERVAL` for ``kind``, counting the rest."""
        now = self.clock.monotonic()
        last, suppressed = self._logged.get(kind, (None, 0))
        if last is not None and now - last < LOG_INTERVAL:
            self._logged[kind] = (last, suppressed + 1)
            return
        self._logged[kind] = (now, 0)
        more = f" ({suppressed} more since)" if suppressed else ""
        log.warning("%s (logged at most once a minute%s)", msg % args, more)
