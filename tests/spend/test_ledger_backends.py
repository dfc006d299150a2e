"""The spend ledger on both backends: SQLite (spend.sqlite) and PostgreSQL (a company schema
on a throwaway cluster). The same calls give the same rows and the same totals.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from companyd.events import EventBus
from companyd.llm._model import Usage
from companyd.spend import read_budget_report
from companyd.spend._book import SpendBook
from companyd.spend._ledger import CallRow, InflightRow, Ledger
from companyd.storage import Backend

from .spendkit import make_config, running, spend

pytestmark = pytest.mark.anyio


def _call(agent: str, cost: int, *, day: str = "2026-11-26", routine: str | None = None) -> CallRow:
    return CallRow(
        ts=1_795_000_000.0,
        day=day,
        month=day[:7],
        agent=agent,
        routine=routine,
        run_id="r1",
        model="claude-sonnet-4-5",
        usage=Usage(input_tokens=100, output_tokens=20, cache_read_tokens=5),
        cost_pusd=cost,
        request_id="req_1",
    )


def _inflight(rid: str, amount: int) -> InflightRow:
    return InflightRow(
        id=rid,
        agent="cfo",
        run_id=None,
        routine=None,
        model="claude-sonnet-4-5",
        amount_pusd=amount,
        created=1.0,
        pid=1,
        boot="b",
    )


def test_calls_totals_markers_and_raises_are_the_same_on_both_backends(
    tmp_path: Path, state_backend: Backend
) -> None:
    led = Ledger(tmp_path / "spend.sqlite", backend=state_backend)
    try:
        ids = [
            led.record_call(_call("cfo", 3 * 10**12), markers=[("company", "2026-11", "warn")]),
            led.record_call(_call("cfo", 10**12, routine="daily"), inflight_id="gone"),
            # past 2³¹ picodollars and past a day's worth: BIGINT, exact
            led.record_call(_call("ceo", 5 * 10**15, day="2026-11-27")),
        ]
        led.add_markers([("company", "2026-11", "warn"), ("agent:cfo", "2026-11", "cap")], 2.0)
        led.add_raise("company", "2026-11-26", 7, 3.0)
        led.add_raise("company", "2026-11-26", 8, 4.0)
        led.set_meta({"day": "2026-11-26"})
        led.set_meta({"day": "2026-11-27", "month": "2026-11"})
        by_agent = led.totals("agent", ["2026-11"])
        used = led.used("2026-11-26")
        days = [t.key for t in led.days_between("2026-11-01", "2026-11-30")]
        markers = led.markers(["2026-11"])
        raises = led.raises("2026-11-26")
        meta = (led.get_meta("day"), led.get_meta("month"))
        rows = led.calls()
    finally:
        led.close()
    assert ids == [1, 2, 3]
    assert [(t.key, t.calls, t.cost_pusd, t.input_tokens) for t in by_agent] == [
        ("ceo", 1, 5 * 10**15, 100),
        ("cfo", 2, 4 * 10**12, 200),
    ]
    assert used == {"company": 4 * 10**12, "agent:cfo": 4 * 10**12}
    assert days == ["2026-11-26", "2026-11-27"]
    assert markers == {("company", "2026-11", "warn"), ("agent:cfo", "2026-11", "cap")}
    assert raises == {"company": 15}
    assert meta == ("2026-11-27", "2026-11")
    assert [(r["agent"], r["cost_pusd"], r["routine"]) for r in rows] == [
        ("cfo", 3 * 10**12, None),
        ("cfo", 10**12, "daily"),
        ("ceo", 5 * 10**15, None),
    ]


def test_reservations_replace_by_id_and_are_taken_once(
    tmp_path: Path, state_backend: Backend
) -> None:
    led = Ledger(tmp_path / "spend.sqlite", backend=state_backend)
    try:
        led.add_inflight(_inflight("a", 5))
        led.add_inflight(_inflight("a", 9))  # the same reservation, grown
        led.add_inflight(_inflight("b", 1))
        led.delete_inflight("b")
        led.add_inflight(_inflight("c", 2))
        taken = led.take_inflight()
        after = led.inflight()
    finally:
        led.close()
    assert [(r.id, r.amount_pusd) for r in taken] == [("a", 9), ("c", 2)]
    assert after == []


def test_a_ledger_survives_a_reopen(tmp_path: Path, state_backend: Backend) -> None:
    led = Ledger(tmp_path / "spend.sqlite", backend=state_backend)
    led.record_call(_call("cfo", 42))
    led.close()
    again = Ledger(tmp_path / "spend.sqlite", backend=state_backend, readonly=True)
    try:
        assert [t.cost_pusd for t in again.totals("company", ["2026-11"])] == [42]
    finally:
        again.close()


async def test_the_spend_book_settles_calls_into_a_postgres_ledger(
    tmp_path: Path, pg_backend: Backend
) -> None:
    """The book as the daemon runs it (its ledger thread) on PostgreSQL: a settled call is
    in the company's schema, and a second book on the same schema (a daemon restart, or
    the standby that took over) starts from the spend already there.
    """
    cfg = make_config(tmp_path)
    book = SpendBook(cfg, tmp_path / "state", bus=EventBus(), backend=pg_backend)
    async with running(book):
        cost = await spend(book, "cfo", 1000)
        before = await book.spend_report("agent", "today")
    second = SpendBook(cfg, tmp_path / "other-host", bus=EventBus(), backend=pg_backend)
    async with running(second):
        after = await second.spend_report("agent", "today")
        rows = await second.ledger_rows()
    assert not (tmp_path / "state" / "spend.sqlite").exists()  # nothing went to a file
    assert [(r["agent"], r["input_tokens"]) for r in rows] == [("cfo", 1000)]
    assert cost > 0 and after == before


def test_a_reader_counts_a_shared_ledgers_reservations_whatever_host_holds_them(
    tmp_path: Path, state_backend: Backend
) -> None:
    """A reader beside the daemon (a standby, the CLI) cannot tell from a pid whether a
    reservation on a shared PostgreSQL ledger is alive: the leader that holds it runs on
    another host. It counts them all there (the leader drops a dead one's rows when it
    starts); a file ledger has one daemon, on this host, so a dead pid's row is stale.
    """
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)  # a pid no process of this host has now
    row = dataclasses.replace(_inflight("held-by-the-leader", 7 * 10**12), pid=gone.pid)
    led = Ledger(tmp_path / "spend.sqlite", backend=state_backend)
    try:
        led.add_inflight(row)
        cfg = make_config(tmp_path)
        report = read_budget_report(cfg, led, now=1_795_000_000.0)
    finally:
        led.close()
    company = next(b for b in report["budgets"] if b["agent"] is None)
    shared = state_backend.kind != "sqlite"
    assert company["reserved_usd"] == (7.0 if shared else 0.0)
