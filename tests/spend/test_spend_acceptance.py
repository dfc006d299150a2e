"""Issue 6 acceptance: the real anthropic SDK (through ClaudeBackend) against the stand-in.

* 8 agents sharing a $1.00 company budget, each spending as much as it can: the settled
  total stays ≤ $1.00 and every agent stops with BudgetExhausted.
* 1,000 calls with varied usage (cache writes 5m/1h, cache reads, long context, a price
  override, an unknown model): the ledger equals the usage the stand-in reported, priced
  by the table, exactly.
* A real subprocess SIGKILLed between reservation and settlement leaves no phantom
  reservation after restart.

(Thresholds once per period and day/month rollover in the company's time zone are in
test_spend_book.py.)
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.llm._claude import ClaudeBackend, estimate_input_tokens
from companyd.llm._model import ModelRequest, Usage
from companyd.llm._prices import Price
from companyd.spend import BudgetExhausted, SpendBook
from companyd.spend._ledger import PUSD, Ledger
from companyd.testing.messages_api import (
    MessagesAPIServer,
    RecordedRequest,
    Reply,
    stall,
    usage_of,
)

from .spendkit import company_yaml, events, make_config, running

MTOK = Decimal(1_000_000)


def expected_cost(price: Price, u: Usage) -> Decimal:
    """The cost of ``u`` computed here, independently of Price.cost."""
    p = price
    prompt = u.input_tokens + u.cache_write_5m_tokens + u.cache_write_1h_tokens
    prompt += u.cache_read_tokens
    if p.long is not None and p.long_context_threshold and prompt > p.long_context_threshold:
        p = p.long
    return (
        Decimal(u.input_tokens) * p.input / MTOK
        + Decimal(u.cache_write_5m_tokens) * p.cache_write_5m / MTOK
        + Decimal(u.cache_write_1h_tokens) * p.cache_write_1h / MTOK
        + Decimal(u.cache_read_tokens) * p.cache_read / MTOK
        + Decimal(u.output_tokens) * p.output / MTOK
    )


class BillingResponder:
    """Answers like a busy model billing close to the worst case: usually every prompt byte
    as a one-hour cache write (the dearest input rate) and the full ``max_tokens`` of
    output, sometimes less. A token is never shorter than a byte of the prompt's text, so
    the usage never exceeds what companyd reserved — unless reservations race.
    """

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, req: RecordedRequest) -> Reply:
        body = req.body
        texts = [b["text"] for b in body.get("system") or []]
        texts += [m["content"] for m in body["messages"]]
        prompt = sum(len(t.encode()) for t in texts)
        if self.rng.random() < 0.6:
            usage = Usage(output_tokens=body["max_tokens"], cache_write_1h_tokens=prompt)
        else:
            read = self.rng.randint(0, prompt // 2)
            write5 = self.rng.randint(0, (prompt - read) // 2)
            usage = Usage(
                input_tokens=prompt - read - write5,
                output_tokens=self.rng.randint(1, body["max_tokens"]),
                cache_write_5m_tokens=write5,
                cache_read_tokens=read,
            )
        return Reply(
            content=({"type": "text", "text": "Noted."},),
            usage=usage,
            latency=self.rng.uniform(0, 0.01),
        )


@pytest.mark.anyio
async def test_eight_agents_on_one_dollar_never_overshoot(tmp_path: Path) -> None:
    agents = {"ceo": None, **{f"agent{i}": None for i in range(1, 8)}}
    cfg = make_config(tmp_path, company="{daily_usd: 1.00, monthly_usd: 30}", agents=agents)
    bus = EventBus()
    book = SpendBook(cfg, tmp_path / "state", bus=bus, clock=ManualClock())
    system = "You are one of eight agents of a small company. " * 200  # ~10 KB prefix
    outcomes: dict[str, BudgetExhausted] = {}
    calls: dict[str, int] = dict.fromkeys(agents, 0)

    with MessagesAPIServer(responder=BillingResponder(seed=6)) as srv:
        llm = ClaudeBackend(api_key="test-key", base_url=srv.base_url, max_retries=0)

        async def work(agent: str) -> None:
            while True:
                req = ModelRequest(
                    model="claude-sonnet-5-5",
                    system=system,
                    messages=[{"role": "user", "content": f"{agent}: task {calls[agent]}"}],
                    max_tokens=2000,
                )
                try:
                    res = await book.reserve(
                        agent=agent,
                        run_id=f"run-{agent}",
                        routine=None,
                        model=req.model,
                        input_tokens=estimate_input_tokens(req),
                        max_output_tokens=req.max_tokens,
                    )
                except BudgetExhausted as exc:
                    outcomes[agent] = exc
                    return
                try:
                    resp = await llm.create(req)
                except BaseException:
                    await book.release(res)
                    raise
                await book.settle(
                    res, model=resp.model, usage=resp.usage, request_id=resp.request_id
                )
                calls[agent] += 1

        try:
            async with running(book), asyncio.timeout(60):
                await asyncio.gather(*(work(a) for a in agents))
                rows = await book.ledger_rows()
                await book.flush()
        finally:
            await llm.aclose()
        served = srv.responses

    total = sum((Decimal(r["cost_pusd"]) for r in rows), Decimal(0)) / PUSD
    assert total <= Decimal("1.00")
    # The budget was really used, not refused early: what is left is less than one
    # call's worst case (about $0.12 here).
    worst = book.prices.lookup("claude-sonnet-5-5")[0].worst_case(12_000, 2000)
    assert Decimal("1.00") - total < worst
    # Everyone stopped on the company's daily budget, after working.
    assert set(outcomes) == set(agents)
    assert {(e.scope, e.period) for e in outcomes.values()} == {("company", "day")}
    assert all(n >= 1 for n in calls.values())
    # The money the stand-in billed is the money the ledger holds.
    price = book.prices.lookup("claude-sonnet-5-5")[0]
    assert len(served) == len(rows) == sum(calls.values())
    assert sum(expected_cost(price, usage_of(m)) for m in served) == total
    assert len(events(bus, "budget_exhausted")) == 1


PRICING = """
pricing:
  claude-house-1:
    {input: 0.3, output: 1.5, cache_write_5m: 0.375, cache_write_1h: 0.6, cache_read: 0.03}
"""


@pytest.mark.anyio
async def test_a_thousand_calls_are_recorded_to_the_cent(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, company_yaml(company="unlimited", extra=PRICING))
    bus = EventBus()
    book = SpendBook(cfg, tmp_path / "state", bus=bus, clock=ManualClock())
    rng = random.Random(1000)
    models = [
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-opus-5-5",
        "claude-fable-5-1",
        "claude-haiku-4-5-20251001",
        "claude-house-1",
        "claude-unknown-7",
    ]

    def usage() -> Usage:
        big = rng.random() < 0.05  # haiku 5.5 long-context pricing above 100k prompt tokens
        return Usage(
            input_tokens=rng.randint(0, 150_000 if big else 5000),
            output_tokens=rng.randint(1, 4000),
            cache_write_5m_tokens=rng.choice([0, 0, rng.randint(1, 20_000)]),
            cache_write_1h_tokens=rng.choice([0, 0, 0, rng.randint(1, 20_000)]),
            cache_read_tokens=rng.choice([0, rng.randint(1, 80_000)]),
        )

    plan = [(models[i % len(models)], usage(), rng.random() < 0.2) for i in range(1000)]
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(
            *(
                Reply(
                    content=({"type": "text", "text": "ok"},),
                    usage=u,
                    # Some answers lack the 5m/1h breakdown; then every cache write
                    # is a 5-minute one (the documented fallback).
                    usage_breakdown=not (flat and u.cache_write_1h_tokens == 0),
                )
                for _, u, flat in plan
            )
        )
        llm = ClaudeBackend(api_key="k", base_url=srv.base_url, max_retries=0)
        try:
            async with running(book), asyncio.timeout(120):
                sem = asyncio.Semaphore(8)

                async def one(i: int, model: str) -> None:
                    async with sem:
                        req = ModelRequest(
                            model=model,
                            system="",
                            messages=[{"role": "user", "content": f"call {i}"}],
                            max_tokens=4000,
                        )
                        res = await book.reserve(
                            agent="ceo",
                            run_id=f"run-{i}",
                            routine=None,
                            model=model,
                            input_tokens=estimate_input_tokens(req),
                            max_output_tokens=4000,
                        )
                        resp = await llm.create(req)
                        await book.settle(
                            res, model=resp.model, usage=resp.usage, request_id=resp.request_id
                        )

                await asyncio.gather(*(one(i, m) for i, (m, _, _) in enumerate(plan)))
                rows = await book.ledger_rows()
                report = await book.spend_report("model", "today")
        finally:
            await llm.aclose()
        responses = srv.responses

    assert len(rows) == len(responses) == 1000
    by_id = {m["id"]: m for m in responses}
    # Match each ledger row to the response it recorded, by the request id the stand-in
    # sent (req_standin_N <-> msg_standin_N).
    total = Decimal(0)
    for row in rows:
        msg = by_id[row["request_id"].replace("req_", "msg_")]
        u = usage_of(msg)
        assert (
            row["input_tokens"],
            row["cache_write_5m_tokens"],
            row["cache_write_1h_tokens"],
            row["cache_read_tokens"],
            row["output_tokens"],
        ) == (
            u.input_tokens,
            u.cache_write_5m_tokens,
            u.cache_write_1h_tokens,
            u.cache_read_tokens,
            u.output_tokens,
        )
        price, known = book.prices.lookup(msg["model"])
        assert known is (msg["model"] != "claude-unknown-7")
        cost = expected_cost(price, u)
        assert Decimal(row["cost_pusd"]) / PUSD == cost  # exact, per call
        total += cost
    ledger_total = sum(Decimal(r["cost_pusd"]) for r in rows) / PUSD
    assert ledger_total == total
    assert round(ledger_total, 2) == round(total, 2)
    assert Decimal(report["total"]["cost_usd_exact"]) == total
    assert report["total"]["calls"] == 1000
    assert {r["key"] for r in report["rows"]} == {
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-opus-5-5",
        "claude-fable-5-1",
        "claude-haiku-4-5-20251001",
        "claude-house-1",
        "claude-unknown-7",
    }
    assert any(
        u.input_tokens + u.cache_write_tokens + u.cache_read_tokens > 100_000
        for m, u, _ in plan
        if m == "claude-haiku-5-5"
    )
    assert len(events(bus, "unknown_model_price")) == 1


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from companyd.config import load_config
    from companyd.events import EventBus
    from companyd.llm._claude import ClaudeBackend, estimate_input_tokens
    from companyd.llm._model import ModelRequest
    from companyd.spend import SpendBook

    async def main() -> None:
        cfg = load_config(sys.argv[1])
        book = SpendBook(cfg, Path(sys.argv[2]), bus=EventBus())
        await book.open()
        llm = ClaudeBackend.from_config(cfg.spec.anthropic)
        req = ModelRequest(model="claude-sonnet-5-5", system="sys",
                           messages=[{"role": "user", "content": "hello"}], max_tokens=4000)
        res = await book.reserve(agent="ceo", run_id="run-kill", routine=None,
                                 model=req.model, input_tokens=estimate_input_tokens(req),
                                 max_output_tokens=req.max_tokens)
        print("RESERVED", res.amount_usd, flush=True)
        resp = await llm.create(req)          # the stand-in holds this call: we die here
        await book.settle(res, model=resp.model, usage=resp.usage)
        print("SETTLED", flush=True)

    asyncio.run(main())
    """
)


@pytest.mark.anyio
async def test_kill_9_between_reserve_and_settle_leaves_no_phantom_reservation(
    tmp_path: Path,
) -> None:
    cfg = make_config(tmp_path, company="{daily_usd: 0.10}")
    state = tmp_path / "state"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(stall(None))  # hold the call until the process is gone
        env = {
            **os.environ,
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": srv.base_url,
        }
        with subprocess.Popen(
            [sys.executable, str(script), str(cfg.path), str(state)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as proc:
            assert proc.stdout is not None
            try:
                async with asyncio.timeout(30):
                    line = await asyncio.to_thread(proc.stdout.readline)
                    assert line.startswith("RESERVED"), proc.stderr.read() if proc.stderr else ""
                    await asyncio.to_thread(srv.wait_for_requests, 1, 20.0)
                # Between reservation and settlement, with the call in flight:
                led = Ledger(state / "spend.sqlite", readonly=True)
                try:
                    (row,) = led.inflight(alive_only=True)
                    assert row.agent == "ceo" and row.pid == proc.pid
                finally:
                    led.close()
                proc.send_signal(signal.SIGKILL)
            finally:
                if proc.poll() is None:
                    proc.kill()
                rc = await asyncio.to_thread(proc.wait, 10)
        assert rc == -signal.SIGKILL
        assert srv.served == 0

    # The dead process's row is still on disk, but nothing counts it as reserved ...
    led = Ledger(state / "spend.sqlite", readonly=True)
    try:
        assert len(led.inflight()) == 1
        assert led.inflight(alive_only=True) == []
    finally:
        led.close()
    # ... and the restarted daemon drops it, says so, and has the whole budget.
    bus = EventBus()
    book = SpendBook(cfg, state, bus=bus)
    async with running(book), asyncio.timeout(10):
        report = await book.budget_report()
        company = report["budgets"][0]
        assert (company["reserved_usd"], company["used_usd"]) == (0.0, 0.0)
        assert company["remaining_usd"] == 0.1
        # $0.07 of the $0.10: it would not fit beside the dead call's $0.04 reservation.
        res = await book.reserve(
            agent="ceo",
            run_id="run-2",
            routine=None,
            model="claude-sonnet-5-5",
            input_tokens=10_000,
            max_output_tokens=3_000,
        )
        assert res.amount_usd == Decimal("0.07")
        await book.release(res)
    (ev,) = events(bus, "spend_unsettled")
    assert ev.data["calls"] == 1 and ev.data["runs"] == ["run-kill"]
    led = Ledger(state / "spend.sqlite", readonly=True)
    try:
        assert led.inflight() == []
    finally:
        led.close()
