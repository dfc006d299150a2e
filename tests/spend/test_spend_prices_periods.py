"""Prices (built-in, overrides, dates, unknown models) and budget periods (time zones)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companyd.llm._model import Usage
from companyd.llm._prices import BUILTIN_PRICES, PriceTable
from companyd.spend._periods import (
    day_key,
    month_key,
    next_day_start,
    next_month_start,
    parse_period,
)

from .spendkit import company_yaml, make_config


def table(tmp_path: Path, pricing: str) -> PriceTable:
    cfg = make_config(tmp_path, company_yaml(extra="pricing:\n" + pricing))
    return PriceTable.from_config(cfg.spec.pricing)


def test_an_override_replaces_the_built_in_price(tmp_path: Path) -> None:
    t = table(
        tmp_path,
        "  claude-sonnet-5-5: {input: 3, output: 15, cache_write_5m: 3.75, "
        "cache_write_1h: 6, cache_read: 0.3}\n",
    )
    p, known = t.lookup("claude-sonnet-5-5")
    assert known and (p.input, p.output, p.cache_read) == (
        Decimal("3"),
        Decimal("15"),
        Decimal("0.3"),
    )
    assert p.source == "company.yaml pricing"
    assert t.cost("claude-sonnet-5-5", Usage(input_tokens=1_000_000)) == Decimal(3)


def test_missing_cache_rates_are_derived_on_the_safe_side(tmp_path: Path) -> None:
    t = table(tmp_path, "  claude-house-1: {input: 0.8, output: 4}\n")
    p, known = t.lookup("claude-house-1")
    assert known
    assert (p.cache_write_5m, p.cache_write_1h, p.cache_read) == (
        Decimal("1.000"),
        Decimal("1.6"),
        Decimal("0.08"),
    )


def test_float_prices_become_exact_decimals(tmp_path: Path) -> None:
    t = table(tmp_path, "  m: {input: 0.1, output: 0.3, cache_read: 0.01}\n")
    p, _ = t.lookup("m")
    assert (p.input, p.output, p.cache_read) == (
        Decimal("0.1"),
        Decimal("0.3"),
        Decimal("0.01"),
    )


def test_a_dated_override_applies_from_its_date(tmp_path: Path) -> None:
    t = table(
        tmp_path,
        "  claude-sonnet-5-5: {input: 3, output: 15, effective_from: 2026-12-01}\n",
    )
    before, _ = t.lookup("claude-sonnet-5-5", date(2026, 11, 30))
    after, _ = t.lookup("claude-sonnet-5-5", date(2026, 12, 1))
    assert before == BUILTIN_PRICES["claude-sonnet-5-5"]
    assert after.input == Decimal(3)
    assert t.lookup("claude-sonnet-5-5")[0].input == Decimal(3)  # newest without a date


def test_an_override_of_haiku_keeps_its_long_context_tier(tmp_path: Path) -> None:
    t = table(tmp_path, "  claude-haiku-5-5: {input: 0.2, output: 1}\n")
    p, _ = t.lookup("claude-haiku-5-5")
    assert p.long is not None and p.long_context_threshold == 100_000
    short = Usage(input_tokens=100_000, output_tokens=1000)
    long = Usage(input_tokens=100_001, output_tokens=1000)
    assert p.cost(short) == Decimal("0.021")
    assert p.cost(long) == Decimal("100001") * Decimal("0.5") / 10**6 + Decimal("0.0025")


def test_a_long_prompt_never_costs_less_than_the_overrides_own_rates(tmp_path: Path) -> None:
    # Haiku's price rises above its built-in long-context tier ($0.50 / $2.50): a long
    # prompt must not be priced at the old, cheaper tier.
    t = table(tmp_path, "  claude-haiku-5-5: {input: 1, output: 5}\n")
    p, _ = t.lookup("claude-haiku-5-5")
    long = Usage(input_tokens=150_000, output_tokens=1000)
    assert p.cost(long) == Decimal("0.15") + Decimal("0.005")
    assert p.worst_case(150_000, 1000) >= p.cost(long)


def test_unknown_models_cost_the_most_expensive_rate_never_zero() -> None:
    t = PriceTable()
    p, known = t.lookup("claude-next-9")
    assert not known
    assert p.output == max(b.output for b in BUILTIN_PRICES.values())
    assert p.input == max(b.input for b in BUILTIN_PRICES.values())
    assert t.cost("claude-next-9", Usage(input_tokens=1, output_tokens=1)) > 0


def test_dated_model_aliases_share_the_price() -> None:
    t = PriceTable()
    assert t.lookup("claude-haiku-4-5-20251001") == t.lookup("claude-haiku-4-5")


def test_the_worst_case_bounds_every_usage_of_its_size() -> None:
    for p in BUILTIN_PRICES.values():
        worst = p.worst_case(1000, 500)
        for u in (
            Usage(input_tokens=1000, output_tokens=500),
            Usage(cache_write_1h_tokens=1000, output_tokens=500),
            Usage(cache_write_5m_tokens=600, cache_read_tokens=400, output_tokens=500),
        ):
            assert p.cost(u) <= worst


# -- periods ------------------------------------------------------------------------------

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/Santiago",  # DST starts at midnight: 00:00 does not exist on that day
    "Asia/Kathmandu",  # +05:45
    "Pacific/Chatham",  # +12:45 / +13:45
    "Australia/Lord_Howe",  # 30-minute DST
    "Pacific/Apia",  # skipped 30 December 2011 entirely
]


@settings(max_examples=150, deadline=None)
@given(
    ts=st.floats(min_value=1_262_304_000, max_value=2_000_000_000),
    zone=st.sampled_from(ZONES),
)
def test_the_next_day_and_month_start_exactly_where_the_local_date_changes(
    ts: float, zone: str
) -> None:
    tz = ZoneInfo(zone)
    nd = next_day_start(ts, tz)
    assert nd > ts
    assert day_key(nd, tz) > day_key(ts, tz)
    assert day_key(nd - 0.001, tz) == day_key(ts, tz)
    nm = next_month_start(ts, tz)
    assert month_key(nm, tz) > month_key(ts, tz)
    assert month_key(nm - 0.001, tz) == month_key(ts, tz)


def test_a_day_that_starts_at_one_in_the_morning() -> None:
    tz = ZoneInfo("America/Santiago")
    noon = datetime(2026, 9, 5, 12, 0, tzinfo=tz).timestamp()
    start = datetime.fromtimestamp(next_day_start(noon, tz), tz)
    assert (start.date().isoformat(), start.hour) == ("2026-09-06", 1)


@pytest.mark.parametrize(
    ("spec", "first", "last"),
    [
        ("today", "2026-11-20", "2026-11-20"),
        ("yesterday", "2026-11-19", "2026-11-19"),
        ("month", "2026-11-01", "2026-11-20"),
        ("2026-02", "2026-02-01", "2026-02-28"),
        ("2026-12", "2026-12-01", "2026-12-31"),
        ("2026-11-03", "2026-11-03", "2026-11-03"),
        ("2026-10-01..2026-10-31", "2026-10-01", "2026-10-31"),
        ("2026-10-15..", "2026-10-15", "2026-11-20"),
        ("..2026-01-02", "2000-01-01", "2026-01-02"),
    ],
)
def test_periods_parse(spec: str, first: str, last: str) -> None:
    a, b, _ = parse_period(spec, date(2026, 11, 20))
    assert (a.isoformat(), b.isoformat()) == (first, last)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("fortnight", "unknown period 'fortnight'; expected today, yesterday, month"),
        ("2026-11-31", "invalid date in period '2026-11-31'"),
        ("2026-11-10..2026-11-01", "ends before it starts"),
        ("..", "unknown period '..'"),
    ],
)
def test_bad_periods_say_what_is_accepted(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_period(spec, date(2026, 11, 20))


# -- runaway detector ---------------------------------------------------------------------


def test_runaway_history_older_than_a_week_is_forgotten() -> None:
    from companyd.spend._ledger import to_pusd
    from companyd.spend._runaway import RunawayDetector

    det = RunawayDetector(600, Decimal(5))
    now = 1_800_000_000.0
    for i in range(3):  # three cheap windows eight days ago
        det.add("cfo", now - 8 * 86400 + i * 600, to_pusd(Decimal("0.01")))
    det.add("cfo", now, to_pusd(Decimal("0.20")))
    # With the old windows as "usual" ($0.02 floor) $0.20 would be a runaway; without
    # them the usual spend is one run ($0.10 per-run limit) and it is not.
    assert det.check("cfo", now, 0.10) is None
    det.add("cfo", now + 1, to_pusd(Decimal("0.31")))
    alert = det.check("cfo", now + 1, 0.10)
    assert alert is not None and alert["basis"] == "default"
