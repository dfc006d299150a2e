"""Prometheus metrics fed from the event stream, served on loopback only."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from companyd.clock import ManualClock
from companyd.daemon._metrics import Metrics, MetricsServer, parse_listen
from companyd.daemon._systemd import LagStats, LoopLagMonitor
from companyd.errors import ConfigError
from companyd.events import (
    BudgetRaised,
    EventBus,
    MaxIntensity,
    MemoryRepaired,
    Restart,
    RoutineMissed,
    RunFailed,
    RunFinished,
    SpendRunaway,
)
from companyd.testing.daemon import running


def samples(text: str | bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str | bytes, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("localhost:0", ("127.0.0.1", 0)),
        (":9464", ("127.0.0.1", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        ("127.0.0.2:80", ("127.0.0.2", 80)),
    ],
)
def test_loopback_addresses_are_accepted(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        ("0.0.0.0:9464", "refusing to serve metrics on '0.0.0.0:9464': 0.0.0.0 is not a loopback"),
        ("192.168.1.5:9464", "is not a loopback address and the endpoint has no authentication"),
        ("[::]:9464", "is not a loopback"),
        ("metrics.example.com:9464", "host 'metrics.example.com' is not an IP address"),
        ("127.0.0.1", "expected HOST:PORT such as '127.0.0.1:9464'"),
        ("127.0.0.1:http", "expected a port number 0-65535"),
        ("127.0.0.1:70000", "expected a port number 0-65535"),
        ("[::1]9464", "expected [IPV6]:PORT"),
    ],
)
def test_anything_else_is_a_config_error_naming_the_field(listen: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_listen(listen, file="/etc/companyd/company.yaml")
    (issue,) = info.value.issues
    assert issue.path == "metrics.listen" and issue.file == "/etc/companyd/company.yaml"
    assert message in issue.message


def test_counters_follow_the_events() -> None:
    bus = EventBus(ManualClock())
    m = Metrics()
    m.attach(bus)
    bus.emit("restart", "companyd/agents/finance", child="cfo", restarts=1)
    bus.emit("restart", "companyd/agents/finance", child="cfo", restarts=2)
    bus.emit("max_intensity", "companyd/agents/finance")
    bus.emit("run_finished", "companyd/agents/cfo", agent="cfo", status="ok", cost_usd=0.25)
    bus.emit("run_finished", "companyd/agents/cfo", agent="cfo", status="ok", cost_usd=0.5)
    bus.emit("run_failed", "companyd/agents/ceo", status="circuit_breaker", cost_usd=1.0)
    bus.emit("run_failed", "companyd/agents/ceo", cost_usd="n/a")  # bad data: counted, no spend
    bus.emit("routine_missed", "scheduler", routine="weekly")
    bus.emit("routine_failed", "scheduler", routine="weekly")
    bus.emit("routine_succeeded", "scheduler", routine="weekly")  # a kind not yet in KINDS
    bus.emit("memory_repaired", "memory", lines=2)
    bus.emit("memory_write", "memory", op="add_observations")
    bus.emit("budget_threshold", "spend", agent="cfo", level=0.8)
    bus.emit("api_spend_limit", "spend")
    m.detach()
    bus.emit("restart", "companyd/agents/finance", child="cfo")  # after detach: not counted
    text = m.render()
    assert (
        value(text, "companyd_restarts_total", supervisor="companyd/agents/finance", child="cfo")
        == 2
    )
    assert value(text, "companyd_max_intensity_total", supervisor="companyd/agents/finance") == 1
    assert value(text, "companyd_runs_total", agent="cfo", outcome="ok") == 2
    assert value(text, "companyd_runs_total", agent="ceo", outcome="circuit_breaker") == 1
    assert value(text, "companyd_runs_total", agent="ceo", outcome="failed") == 1
    assert value(text, "companyd_spend_usd_total", agent="cfo") == pytest.approx(0.75)
    assert value(text, "companyd_spend_usd_total", agent="ceo") == pytest.approx(1.0)
    for outcome in ("missed", "failed", "succeeded"):
        assert (
            value(text, "companyd_routine_outcomes_total", routine="weekly", outcome=outcome) == 1
        )
    assert value(text, "companyd_memory_operations_total", op="repaired") == 1
    assert value(text, "companyd_memory_operations_total", op="add_observations") == 1
    assert value(text, "companyd_budget_events_total", kind="budget_threshold", scope="cfo") == 1
    assert value(text, "companyd_budget_events_total", kind="api_spend_limit", scope="company") == 1
    assert value(text, "companyd_events_total", kind="restart", severity="warning") == 2
    assert value(text, "companyd_events_total", kind="routine_succeeded", severity="info") == 1
    assert value(text, "companyd_build_info", version="0.1.0") == 1


def test_typed_events_are_counted_by_their_class() -> None:
    """The events publishers construct (not ``bus.emit``'s partial data): matched on their
    class, with the labels their fields give.
    """
    bus = EventBus(ManualClock())
    m = Metrics()
    m.attach(bus)
    agents, when = "companyd/agents", "2026-11-25T10:00:00Z"
    bus.publish(
        Restart(
            source=agents,
            child="cfo",
            strategy="one_for_one",
            group=[],
            restarts=1,
            max_restarts=3,
            max_seconds=5.0,
        )
    )
    bus.publish(
        MaxIntensity(
            source=agents,
            child="cfo",
            reason="x",
            message="x",
            restarts=4,
            max_restarts=3,
            max_seconds=5.0,
        )
    )
    bus.publish(
        RunFinished(
            source="companyd/agents/cfo",
            agent="cfo",
            status="ok",
            cost_usd=0.25,
            task_id="t1",
            run_id="r1",
            routine=None,
            steps=1,
            models=["m"],
            offline=False,
        )
    )
    bus.publish(
        RunFailed(
            source="companyd/agents/ceo",
            agent="",
            status="",
            reason=None,
            cost_usd=0.0,
            task_id="t2",
            run_id="r2",
            routine=None,
            steps=1,
            models=["m"],
            offline=False,
        )
    )
    bus.publish(
        RoutineMissed(
            source="scheduler",
            routine="weekly",
            agent="cfo",
            scheduled=when,
            reason=None,
            run_id=None,
            outcome="missed",
            fire_kind="cron",
            fire_id="f",
        )
    )
    bus.publish(
        MemoryRepaired(
            source="memory",
            path="m.jsonl",
            summary="torn last line",
            quarantined_lines=0,
            dropped_lines=0,
            torn_tail=True,
            merged_entities=0,
            duplicate_relations=0,
            observations_fixed=0,
            journal_torn=False,
            foreign_rewrite=False,
            corrupt_file=None,
        )
    )
    bus.publish(
        BudgetRaised(
            source="spend", scope="company", agent=None, day="d", usd=1.0, raised_today_usd=1.0
        )
    )
    bus.publish(
        SpendRunaway(
            source="spend",
            agent="cfo",
            window_seconds=60.0,
            window_spend_usd=1.0,
            rate_usd_per_min=1.0,
            usual_usd_per_min=0.1,
            factor=10.0,
            basis="b",
            message="m",
        )
    )
    text = m.render()
    assert value(text, "companyd_restarts_total", supervisor=agents, child="cfo") == 1
    assert value(text, "companyd_max_intensity_total", supervisor=agents) == 1
    assert value(text, "companyd_runs_total", agent="cfo", outcome="ok") == 1
    assert value(text, "companyd_spend_usd_total", agent="cfo") == pytest.approx(0.25)
    # an empty agent and status: the source's last segment, and the kind's default outcome
    assert value(text, "companyd_runs_total", agent="ceo", outcome="failed") == 1
    assert value(text, "companyd_spend_usd_total", agent="ceo") is None
    assert value(text, "companyd_routine_outcomes_total", routine="weekly", outcome="missed") == 1
    assert value(text, "companyd_memory_operations_total", op="repaired") == 1
    assert value(text, "companyd_budget_events_total", kind="budget_raised", scope="company") == 1
    assert value(text, "companyd_budget_events_total", kind="spend_runaway", scope="cfo") == 1
    assert value(text, "companyd_events_total", kind="memory_repaired", severity="warning") == 1


def test_each_metrics_object_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()  # the global registry would refuse the second
    bus = EventBus()
    a.attach(bus)
    bus.emit("restart", "x", child="y")
    assert value(a.render(), "companyd_restarts_total", supervisor="x", child="y") == 1
    assert value(b.render(), "companyd_restarts_total", supervisor="x", child="y") is None
    assert b"python_gc" not in a.render()  # no process collectors from the global registry


@pytest.mark.anyio
async def test_lag_gauges_read_the_monitor_at_scrape_time() -> None:
    clock = ManualClock()
    mon = LoopLagMonitor(clock, interval=0.5)
    m = Metrics(lag=mon.stats)
    assert value(m.render(), "companyd_event_loop_lag_seconds") == 0
    mon.record(0.25)
    mon.record(0.05)
    text = m.render()
    assert value(text, "companyd_event_loop_lag_seconds") == pytest.approx(0.05)
    assert value(text, "companyd_event_loop_lag_max_seconds") == pytest.approx(0.25)

    def broken() -> LagStats:
        raise RuntimeError("monitor gone")

    assert value(Metrics(lag=broken).render(), "companyd_build_info", version="0.1.0") == 1


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        data: bytes = r.read()
        return data


@pytest.mark.anyio
async def test_the_endpoint_serves_on_loopback_and_goes_away_on_stop() -> None:
    bus = EventBus()
    server = MetricsServer(Metrics(), bus, "127.0.0.1:0")
    async with running(server.run) as ctx:
        port = ctx.info["port"]
        assert port == server.port and port > 0
        bus.emit("run_finished", "companyd/agents/cfo", agent="cfo", cost_usd=0.1)
        text = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        assert value(text, "companyd_runs_total", agent="cfo", outcome="ok") == 1
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    bus.emit("run_finished", "companyd/agents/cfo", agent="cfo")  # detached: no error, no count
    assert value(server.metrics.render(), "companyd_runs_total", agent="cfo", outcome="ok") == 1


@pytest.mark.anyio
async def test_a_busy_port_is_a_clear_error() -> None:
    bus = EventBus()
    first = MetricsServer(Metrics(), bus, "127.0.0.1:0")
    async with running(first.run):
        second = MetricsServer(Metrics(), bus, f"127.0.0.1:{first.port}")
        with pytest.raises(
            Exception, match=r"cannot serve metrics on 127\.0\.0\.1:\d+: .*free port"
        ):
            async with running(second.run):
                pass


def test_a_non_loopback_server_cannot_even_be_built() -> None:
    with pytest.raises(ConfigError, match="not a loopback"):
        MetricsServer(Metrics(), EventBus(), "0.0.0.0:9464")
