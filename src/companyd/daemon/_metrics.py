"""Optional Prometheus endpoint, on loopback only, fed from the event stream.

Enabled by ``metrics.listen`` in company.yaml (e.g. ``127.0.0.1:9464``). Every counter is
derived from :class:`~companyd.events.Event` objects on the bus — metrics never reach into
another component — so they agree with alerts, logs and ``companyd status``. The one
exception is the event-loop lag gauge, which reads the
:class:`~companyd.daemon._systemd.LoopLagMonitor` at scrape time (an instantaneous reading
is what a gauge is; publishing it as an event twice a second would flood the history).

Metrics (all prefixed ``companyd_``), with the events they count and their labels:

* ``events_total{kind, severity}`` — every event.
* ``restarts_total{supervisor, child}`` — ``restart`` (supervisor = the event source).
* ``max_intensity_total{supervisor}`` — ``max_intensity``.
* ``runs_total{agent, outcome}`` — ``run_finished`` and ``run_failed``.
* ``spend_usd_total{agent}`` — the ``cost_usd`` of ``run_finished`` / ``run_failed``.
* ``routine_outcomes_total{routine, outcome}`` — every ``routine_*`` kind (outcome = the
  rest of the kind: failed, missed, skipped, …).
* ``memory_operations_total{op}`` — every ``memory_*`` kind.
* ``budget_events_total{kind, scope}`` — ``budget_*``, ``spend_runaway``,
  ``api_spend_limit``.
* ``event_loop_lag_seconds`` / ``event_loop_lag_max_seconds`` — the lag monitor.
* ``build_info{version}`` — always 1.

Label values come from event data: ``agent`` (else the last segment of the source),
``status`` for a run's outcome (default ``ok`` / ``failed``), ``routine``, ``op`` (else the
kind without ``memory_``), ``agent``/``scope`` for budgets (else ``company``). They are
cut to 64 characters; agent, routine and child names are bounded by company.yaml.

The registry is private (no process/platform collectors from the global one, no clashes
with other libraries). The HTTP server is prometheus-client's own, on a daemon thread; a
non-loopback address is refused with a :class:`~companyd.errors.ConfigError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from companyd import __version__
from companyd.config import is_loopback, listen_address
from companyd.daemon._systemd import LagStats
from companyd.errors import CompanydError, ConfigError, ConfigIssue
from companyd.events import (
    ApiSpendLimit,
    BudgetExhausted,
    BudgetRaised,
    BudgetReset,
    BudgetThreshold,
    Event,
    EventBus,
    MaxIntensity,
    MemoryRepaired,
    Other,
    Restart,
    RoutineEvent,
    RoutineResult,
    RunFailed,
    RunFinished,
    SpendRunaway,
)
from companyd.supervision import ChildContext

__all__ = ["Metrics", "MetricsServer", "parse_listen"]

log = logging.getLogger("companyd.daemon.metrics")

_LABEL_MAX = 64


def parse_listen(value: str, *, file: str = "company.yaml") -> tuple[str, int]:
    """``"127.0.0.1:9464"``, ``"[::1]:9464"``, ``"localhost:9464"`` or ``":9464"`` (=
    127.0.0.1) → (host, port). Port 0 picks a free port (tests).

    Raises:
        ConfigError: the value is malformed or the host is not a loopback address (the
            endpoint has no authentication, so it must never face the network).
    """

    def fail(message: str) -> ConfigError:
        return ConfigError(
            [ConfigIssue(file=file, line=0, column=0, path="metrics.listen", message=message)]
        )

    try:
        host, port = listen_address(value)
    except ValueError as exc:
        message = str(exc).replace("an address such as", "a loopback address such as")
        if "is not an IP address" in message:
            message += " (the endpoint has no authentication)"
        raise fail(message) from None
    if not is_loopback(host):
        raise fail(
            f"refusing to serve metrics on {value!r}: {host} is not a loopback address and the "
            "endpoint has no authentication. Use 127.0.0.1:PORT or [::1]:PORT and let "
            "Prometheus scrape through an SSH tunnel or a local agent"
        )
    return host, port


def _label(value: Any) -> str:
    text = "" if value is None else str(value)
    return text[:_LABEL_MAX]


def _last_segment(source: str) -> str:
    return source.rsplit("/", 1)[-1]


class _LagCollector(Collector):
    def __init__(self, lag: Callable[[], LagStats]) -> None:
        self._lag = lag

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            stats = self._lag()
        except Exception:
            log.exception("metrics: reading the event-loop lag failed")
            return
        yield GaugeMetricFamily(
            "companyd_event_loop_lag_seconds",
            "How late the event loop ran the latest periodic wake-up",
            value=stats.current,
        )
        yield GaugeMetricFamily(
            "companyd_event_loop_lag_max_seconds",
            "The largest event-loop lag seen since start",
            value=stats.max,
        )


class Metrics:
    """Counters fed from an :class:`EventBus`, in a private registry.

    Call :meth:`attach` to start counting (or feed events to :meth:`observe` yourself) and
    :meth:`render` for the text exposition format.

    Args:
        lag: returns the current :class:`LagStats` (e.g. ``monitor.stats``), read at
            scrape time; None leaves the lag gauges out.
    """

    def __init__(self, *, lag: Callable[[], LagStats] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "companyd_events", "Events published, by kind", ["kind", "severity"], registry=r
        )
        self.restarts = Counter(
            "companyd_restarts", "Child restarts", ["supervisor", "child"], registry=r
        )
        self.max_intensity = Counter(
            "companyd_max_intensity",
            "Supervisors that gave up (restart intensity exceeded)",
            ["supervisor"],
            registry=r,
        )
        self.runs = Counter(
            "companyd_runs", "Agent runs by outcome", ["agent", "outcome"], registry=r
        )
        self.spend = Counter(
            "companyd_spend_usd", "Settled spend of runs in USD", ["agent"], registry=r
        )
        self.routines = Counter(
            "companyd_routine_outcomes",
            "Routine outcomes (failed, missed, skipped, …)",
            ["routine", "outcome"],
            registry=r,
        )
        self.memory = Counter(
            "companyd_memory_operations", "Knowledge-graph operations", ["op"], registry=r
        )
        self.budget = Counter(
            "companyd_budget_events",
            "Budget thresholds, exhaustion, runaway spend and API spend limits",
            ["kind", "scope"],
            registry=r,
        )
        info = Gauge("companyd_build_info", "companyd version", ["version"], registry=r)
        info.labels(version=__version__).set(1)
        if lag is not None:
            r.register(_LagCollector(lag))
        self._remove: Callable[[], None] | None = None
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def attach(self, bus: EventBus) -> Callable[[], None]:
        """Count every later event on ``bus``; returns the function that stops it."""
        self.detach()
        self._remove = bus.add_listener(self.observe)
        return self.detach

    def detach(self) -> None:
        """Stop counting events (idempotent)."""
        if self._remove is not None:
            self._remove()
            self._remove = None

    def _inc(self, counter: Counter, *labels: str, amount: float = 1.0) -> None:
        # Counter.labels() validates and locks on every call (~8 µs); the children are
        # cached here so a listener on a busy bus stays cheap.
        key = (id(counter), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*labels)
        child.inc(amount)

    def observe(self, event: Event) -> None:
        """Count one event (a bus listener: quick, never raises into the publisher).

        A typed event is matched on its class; an :class:`~companyd.events.Other` (a kind no
        class describes, e.g. a new kind sent with ``bus.emit``, or data that does not fit its
        class) is counted by its kind's name, with its labels read from its fields.
        """
        kind = event.kind
        self._inc(self.events, _label(kind), _label(event.severity))
        match event:
            case Restart(child=child):
                self._inc(self.restarts, _label(event.source), _label(child))
            case MaxIntensity():
                self._inc(self.max_intensity, _label(event.source))
            case RunFinished(agent=agent, status=status, cost_usd=cost):
                self._run(event.source, agent, status or "ok", cost)
            case RunFailed(agent=agent, status=status, cost_usd=cost):
                self._run(event.source, agent, status or "failed", cost)
            case RoutineEvent(routine=routine) | RoutineResult(routine=routine):
                self._routine(event.source, routine, kind)
            case MemoryRepaired():
                self._inc(self.memory, "repaired")
            case (
                BudgetThreshold(agent=agent, scope=scope)
                | BudgetExhausted(agent=agent, scope=scope)
                | BudgetRaised(agent=agent, scope=scope)
            ):
                self._budget(kind, agent or scope)
            case SpendRunaway(agent=agent):
                self._budget(kind, agent)
            case BudgetReset() | ApiSpendLimit():
                self._budget(kind, None)
            case Other(fields=data):
                self._observe_untyped(kind, event.source, data)

    def _observe_untyped(self, kind: str, source: str, data: Mapping[str, Any]) -> None:
        """Count an event without its class by the prefix of its kind (``routine_``,
        ``memory_``, ``budget_``), with the labels the typed events have, where it has them.
        """
        if kind == "restart":
            self._inc(self.restarts, _label(source), _label(data.get("child")))
        elif kind == "max_intensity":
            self._inc(self.max_intensity, _label(source))
        elif kind in ("run_finished", "run_failed"):
            default = "ok" if kind == "run_finished" else "failed"
            self._run(
                source, data.get("agent"), data.get("status") or default, data.get("cost_usd")
            )
        elif kind.startswith("routine_"):
            self._routine(source, data.get("routine"), kind)
        elif kind.startswith("memory_"):
            self._inc(self.memory, _label(data.get("op") or kind[len("memory_") :]))
        elif kind.startswith("budget_") or kind in ("spend_runaway", "api_spend_limit"):
            self._budget(kind, data.get("agent") or data.get("scope"))

    def _run(self, source: str, agent: object, outcome: object, cost: object) -> None:
        """A run ended: ``runs_total`` and, for a positive number, ``spend_usd_total``."""
        who = _label(agent or _last_segment(source))
        self._inc(self.runs, who, _label(outcome))
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0:
            self._inc(self.spend, who, amount=float(cost))

    def _routine(self, source: str, routine: object, kind: str) -> None:
        """A routine's fire ended: the outcome is the kind after ``routine_``."""
        name = _label(routine or _last_segment(source))
        self._inc(self.routines, name, _label(kind[len("routine_") :]))

    def _budget(self, kind: str, scope: object) -> None:
        """A budget event: scoped to the agent (or the named scope), else ``company``."""
        self._inc(self.budget, _label(kind), _label(scope or "company"))

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return bytes(generate_latest(self.registry))


class MetricsServer:
    """A supervised child serving :class:`Metrics` over HTTP on a loopback address.

    Args:
        metrics: what to serve (attached to ``bus`` while running).
        bus: the event stream.
        listen: ``HOST:PORT`` (checked by :func:`parse_listen`).
    """

    def __init__(self, metrics: Metrics, bus: EventBus, listen: str) -> None:
        self.metrics = metrics
        self.bus = bus
        self.host, self.port = parse_listen(listen)
        self._server: Any = None

    async def run(self, ctx: ChildContext) -> None:
        """Serve ``/metrics`` on the configured address, counting the bus's events, until asked
        to stop; reports the port actually bound as started info. The server is shut down and the
        metrics detached on the way out.

        Raises:
            CompanydError: the address cannot be bound (the message names it and what to do).
        """
        self.metrics.attach(self.bus)
        try:
            try:
                # Binding and starting the server thread is blocking work: off the loop.
                server, _thread = await asyncio.to_thread(
                    start_http_server, self.port, self.host, self.metrics.registry
                )
            except OSError as exc:
                raise CompanydError(
                    f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}; "
                    "choose a free port in metrics.listen"
                ) from exc
            self._server = server
            self.port = int(server.server_address[1])
            log.info("metrics on http://%s:%d/metrics", self.host, self.port)
            ctx.started({"host": self.host, "port": self.port})
            await ctx.stopping.wait()
        finally:
            self.metrics.detach()
            if self._server is not None:
                server, self._server = self._server, None
                # shutdown() waits for serve_forever's poll loop (≤ 0.5 s): off the loop.
                await asyncio.to_thread(_stop_server, server)


def _stop_server(server: Any) -> None:
    server.shutdown()
    server.server_close()
