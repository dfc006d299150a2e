"""What the operator reads for the budget events the real SpendBook publishes (issue 9:
"budget exhausted and agent paused", "the API's spend limit reached").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from alertkit import alert_text
from companyd.alerts._render_kinds import kind_spec
from companyd.alerts._values import run_cost
from companyd.clock import ManualClock
from companyd.events import Event, EventBus
from companyd.spend import BudgetExhausted, SpendBook

from .spendkit import events, make_config, reserve, running, spend

pytestmark = pytest.mark.anyio

AGENTS = {"ceo", "cfo", "coo"}


def text_of(event: Event) -> str:
    return alert_text(event, agents=AGENTS, company="Acme")


async def test_budget_exhausted_says_who_is_paused_and_when_it_resets(
    tmp_path: Path, bus: EventBus
) -> None:
    # 2026-11-20 12:00 UTC
    config = make_config(tmp_path, agents={"ceo": None, "cfo": "{daily_usd: 0.3}", "coo": None})
    book = SpendBook(config, tmp_path / "state", bus=bus, clock=ManualClock(start=1_795_176_000))
    async with running(book):
        await spend(book, "cfo", 250_000)
        with pytest.raises(BudgetExhausted):
            await reserve(book, "cfo", 100_000)
        await spend(book, "ceo", 700_000)
        with pytest.raises(BudgetExhausted):
            await reserve(book, "coo", 100_000)  # the company's $1 a day
        book.note_api_spend_limit("You have reached your specified API usage limits")
        await book.flush()
    agent_ev, company_ev = events(bus, "budget_exhausted")
    text = text_of(agent_ev)
    assert "cfo reached its daily budget" in text
    assert "paused: cfo" in text  # the runtime pauses the agent whose call was refused
    assert "resets: 2026-11-21 00:00 UTC" in text
    assert "▶ Resume cfo" in text
    # why, with little spent: the call's worst case did not fit what was left
    assert "the next call of cfo could cost up to $" in text
    assert f"more than the {run_cost(agent_ev.data['remaining_usd'])} left" in text
    text = text_of(company_ev)
    assert "the company reached its daily budget" in text
    assert "paused: coo" in text
    assert "▶ Resume coo" in text
    [limit] = events(bus, "api_spend_limit")
    text = text_of(limit)
    assert "API says: You have reached your specified API usage limits" in text
    assert "every agent is paused" in text


async def test_calls_with_no_answer_read_as_one_running_total(
    tmp_path: Path, bus: EventBus
) -> None:
    # issue 15: "N calls timed out; up to $X may have been billed", the latest event
    # carrying today's count and total, all under one coalescing key (one message)
    config = make_config(tmp_path, agents={"ceo": None, "cfo": None, "coo": None})
    book = SpendBook(config, tmp_path / "state", bus=bus, clock=ManualClock(start=1_795_176_000))
    async with running(book):
        for agent in ("cfo", "coo", "cfo"):
            res = await reserve(book, agent, 20_000, out=5_000)  # worst case $0.025
            await book.forfeit(res, reason="ModelTimeout: no answer from the Anthropic API")
        await book.flush()
    unanswered = events(bus, "spend_unanswered")
    assert len({kind_spec(e.kind).subject for e in unanswered}) == 1
    text = text_of(unanswered[-1])
    assert text.splitlines()[0] == "🟠 3 calls timed out; up to $0.0750 may have been billed"
    assert "counted against the budgets at their worst case" in text
