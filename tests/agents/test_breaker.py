"""The per-run circuit breaker on its own: each limit trips at its value with a reason that
names the limit and the value, no limit trips when unset, and loop detection counts only
identical calls (the same tool with the same input, in any key order).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from companyd.agents import Breaker, BreakerTripped
from companyd.config import LimitsSpec


def tripped(breaker: Breaker, now: float) -> BreakerTripped | None:
    try:
        breaker.check(now)
    except BreakerTripped as exc:
        return exc
    return None


def test_no_limit_set_never_trips_whatever_the_run_did() -> None:
    b = Breaker(LimitsSpec(), started=100.0)
    for _ in range(1000):
        b.add_step(tokens=1_000_000, cost=Decimal("50"))
    assert tripped(b, now=100.0 + 86400 * 365) is None


def test_max_steps_trips_at_the_limit_not_before() -> None:
    b = Breaker(LimitsSpec(max_steps=3), started=0.0)
    b.add_step(10, Decimal(0))
    b.add_step(10, Decimal(0))
    assert tripped(b, now=1.0) is None
    b.add_step(10, Decimal(0))
    exc = tripped(b, now=1.0)
    assert exc is not None and exc.limit == "max_steps"
    assert str(exc) == "max_steps 3 reached (3 model calls)"


def test_max_cost_compares_exact_money() -> None:
    b = Breaker(LimitsSpec(max_cost_usd=0.3), started=0.0)
    b.add_step(1, Decimal("0.1"))
    b.add_step(1, Decimal("0.1"))
    assert tripped(b, now=0.0) is None  # 0.2 < 0.3 (a float sum would say 0.30000000000000004)
    b.add_step(1, Decimal("0.1"))
    exc = tripped(b, now=0.0)
    assert exc is not None and exc.limit == "max_cost_usd"
    assert str(exc) == "max_cost_usd $0.30 reached (spent $0.3000)"


def test_max_tokens_counts_every_step() -> None:
    b = Breaker(LimitsSpec(max_tokens=1000), started=0.0)
    b.add_step(600, Decimal(0))
    assert tripped(b, now=0.0) is None
    b.add_step(400, Decimal(0))
    exc = tripped(b, now=0.0)
    assert exc is not None and exc.limit == "max_tokens"
    assert str(exc) == "max_tokens 1000 reached (1000 tokens)"


def test_max_seconds_is_measured_from_the_runs_start() -> None:
    b = Breaker(LimitsSpec(max_seconds=60), started=1000.0)
    assert tripped(b, now=1059.9) is None
    exc = tripped(b, now=1060.0)
    assert exc is not None and exc.limit == "max_seconds"
    assert str(exc) == "max_seconds 60 reached (ran 60.0 s)"


def test_the_first_limit_reached_in_order_is_the_one_named() -> None:
    b = Breaker(LimitsSpec(max_steps=1, max_tokens=1, max_seconds=1), started=0.0)
    b.add_step(5, Decimal(0))
    exc = tripped(b, now=10.0)
    assert exc is not None and exc.limit == "max_steps"


def test_a_loop_is_the_same_tool_with_the_same_input_threshold_times() -> None:
    b = Breaker(LimitsSpec(loop_threshold=3), started=0.0)
    b.note_tool_call("search_nodes", {"query": "runway", "limit": 5})
    b.note_tool_call("search_nodes", {"limit": 5, "query": "runway"})  # same input, reordered
    b.note_tool_call("search_nodes", {"query": "burn", "limit": 5})  # another input
    b.note_tool_call("read_graph", {"query": "runway", "limit": 5})  # another tool
    with pytest.raises(BreakerTripped) as info:
        b.note_tool_call("search_nodes", {"query": "runway", "limit": 5})
    assert info.value.limit == "loop"
    assert (
        str(info.value) == "loop detected: tool 'search_nodes' called 3 times with the same input"
    )


def test_loop_detection_keys_inputs_json_cannot_encode_by_their_text() -> None:
    b = Breaker(LimitsSpec(loop_threshold=2), started=0.0)
    b.note_tool_call("t", {"when": Decimal("1.5")})
    with pytest.raises(BreakerTripped):
        b.note_tool_call("t", {"when": Decimal("1.5")})


def test_max_cost_says_amounts_as_the_spend_cli_does() -> None:
    # a limit of $0.004 read "$0.00 reached"; dollars print as `companyd spend` prints them
    # (companyd.admin.format_usd): never a non-zero amount as zero, thousands separated
    b = Breaker(LimitsSpec(max_cost_usd=0.004), started=0.0)
    b.add_step(1, Decimal("0.00412"))
    exc = tripped(b, now=0.0)
    assert exc is not None and str(exc) == "max_cost_usd $0.004 reached (spent $0.0041)"
    b = Breaker(LimitsSpec(max_cost_usd=1500), started=0.0)
    b.add_step(1, Decimal("1500.5"))
    exc = tripped(b, now=0.0)
    assert exc is not None and str(exc) == "max_cost_usd $1,500.00 reached (spent $1,500.5000)"
