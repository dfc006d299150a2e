"""The runaway detector's running figures decide exactly what summing the whole trailing
window and the week's buckets on every settled call decided (the definition before
src/companyd/spend/_runaway.py kept running figures), on random call sequences: several
agents, bursts, quiet days, the wall clock set back, history loaded out of order, a new
window length.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from companyd.spend._ledger import to_pusd
from companyd.spend._runaway import RunawayDetector

from .runaway_reference import SumEveryCall


def _compared(alert: dict[str, Any] | None) -> dict[str, Any] | None:
    keys = ("agent", "window_spend_usd", "rate_usd_per_min", "usual_usd_per_min", "basis")
    return None if alert is None else {k: alert[k] for k in keys}


WINDOW = 600.0
START = 1_800_000_000.0

# one step: (agent, seconds since the previous step, cost in cents, what is checked after it)
steps = st.tuples(
    st.sampled_from(["ceo", "cfo", "dev"]),
    st.one_of(
        st.integers(0, 120),  # a busy agent: calls seconds to minutes apart
        st.integers(0, 3_600),  # a few windows later
        st.integers(-900, 0),  # the wall clock set back (NTP), or history out of order
        st.sampled_from([86_400, 3 * 86_400, 8 * 86_400]),  # quiet days, a quiet week
    ),
    st.one_of(st.integers(0, 30), st.integers(100, 5_000)),
    # "now": as SpendBook.settle does; "later": that too, then every agent at a later time
    # with nothing added since; "none": as SpendBook.open loads history (no check)
    st.sampled_from(["now", "now", "later", "none"]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(steps, min_size=1, max_size=250),
    st.sampled_from([Decimal(2), Decimal(5), Decimal("1.5")]),
    st.sampled_from([None, 0.10, 2.0]),
    st.one_of(st.none(), st.integers(0, 249)),
)
def test_running_figures_decide_what_summing_every_call_decided(
    sequence: list[tuple[str, int, int, str]],
    factor: Decimal,
    per_run: float | None,
    reconfigure_at: int | None,
) -> None:
    ours = RunawayDetector(WINDOW, factor)
    theirs = SumEveryCall(WINDOW, factor)
    ts = START
    for i, (agent, step, cents, checks) in enumerate(sequence):
        if i == reconfigure_at:  # a new window length restarts both
            ours.reconfigure(300, factor)
            theirs.reconfigure(300, factor)
        ts += step + 0.25
        pusd = to_pusd(Decimal(cents) / 100)
        ours.add(agent, ts, pusd)
        theirs.add(agent, ts, pusd)
        if checks == "none":
            continue
        assert _compared(ours.check(agent, ts, per_run)) == theirs.check(agent, ts, per_run)
        if checks == "later":
            later = ts + step % 700
            for other in ("ceo", "cfo", "dev"):
                expected = theirs.check(other, later, per_run)
                assert _compared(ours.check(other, later, per_run)) == expected


def test_a_long_burst_is_reported_with_the_same_figures() -> None:
    # 3 windows of history at $0.10, then 2,000 calls of $0.01 in one window: the first
    # call over 5 x $0.10 alerts, once, with the same figures either way
    ours = RunawayDetector(WINDOW, Decimal(5))
    theirs = SumEveryCall(WINDOW, Decimal(5))
    for det in (ours, theirs):
        for i in range(3):
            det.add("dev", START - 86_400 + i * WINDOW, to_pusd(Decimal("0.10")))
    alerts: list[tuple[int, Any, Any]] = []
    for i in range(2_000):
        ts = START + i * 0.25
        for det in (ours, theirs):
            det.add("dev", ts, to_pusd(Decimal("0.01")))
        a, b = _compared(ours.check("dev", ts, None)), theirs.check("dev", ts, None)
        assert a == b
        if a is not None:
            alerts.append((i, a, b))
    assert [i for i, _, _ in alerts] == [50]  # $0.51 > 5 x $0.10
    assert alerts[0][1]["basis"] == "history"


def test_history_settled_late_counts_in_the_same_window() -> None:
    # the usual spend summed at START, then three past windows of $0.10 arrive without a
    # check (the clock set back, history loaded late): a burst still in START's window is
    # measured against them, not against the one-run default of the first sum
    ours = RunawayDetector(WINDOW, Decimal(5))
    theirs = SumEveryCall(WINDOW, Decimal(5))
    for det in (ours, theirs):
        det.add("dev", START, to_pusd(Decimal("0.01")))
        assert det.check("dev", START, None) is None
        for back in (5, 4, 3):
            det.add("dev", START - back * WINDOW, to_pusd(Decimal("0.10")))
        det.add("dev", START + 1, to_pusd(Decimal("0.60")))
    expected = theirs.check("dev", START + 1, None)
    assert expected is not None and expected["basis"] == "history"
    assert _compared(ours.check("dev", START + 1, None)) == expected


def test_the_message_says_sums_as_the_spend_cli_does() -> None:
    # $300 windows, then $6,000 in one: it said "spent $6000.00" (`:.2f`, no thousands
    # separator, unlike every other amount the founder reads: companyd.admin.format_usd)
    det = RunawayDetector(WINDOW, Decimal(5))
    for i in range(3):
        det.add("dev", START - 86_400 + i * WINDOW, to_pusd(Decimal("300")))
    det.add("dev", START, to_pusd(Decimal("6000")))
    alert = det.check("dev", START, None)
    assert alert is not None
    assert alert["message"].startswith(
        "agent 'dev' spent $6,000.00 in the last 10 min ($600.0000/min), more than 5× its "
        "usual $30.0000/min"
    )
