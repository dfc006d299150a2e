"""Helpers for the spend tests: company.yaml builder, a child context, a running book.

A plain module with a unique name (not conftest.py) so ``from spendkit import …`` can never
pick up another directory's conftest.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from companyd.config import CompanyConfig, load_config
from companyd.events import Event, EventBus
from companyd.llm._model import Usage
from companyd.spend import SpendBook
from companyd.spend._book import Reservation

#: A model priced at exactly $1 per million tokens of every kind but cache reads, so a
#: call's cost is its token count in micro-dollars.
UNIT_PRICING = """
pricing:
  unit-model: {input: 1, output: 1, cache_write_5m: 1, cache_write_1h: 1, cache_read: 0.1}
"""


def company_yaml(
    *,
    tz: str = "UTC",
    company: str = "{daily_usd: 1.0, monthly_usd: 20}",
    agents: dict[str, str | None] | None = None,
    extra: str = UNIT_PRICING,
) -> str:
    """A valid company.yaml: ``ceo`` is the root, every other agent reports to it.

    ``agents`` maps slug → a YAML flow mapping for its ``budget`` (or None for none).
    """
    agents = agents if agents is not None else {"ceo": None, "cfo": None}
    lines = [
        "schema: companyd/v1",
        "company:",
        "  name: Test Co",
        f"  timezone: {tz}",
        f"  budget: {company}",
        "defaults:",
        "  model: claude-sonnet-5-5",
        "agents:",
    ]
    for i, (slug, budget) in enumerate(agents.items()):
        lines += [f"  {slug}:", f"    title: {slug.upper()}", f"    instructions: Be {slug}."]
        if i:
            lines.append("    reports_to: " + next(iter(agents)))
        if budget:
            lines.append(f"    budget: {budget}")
    return "\n".join(lines) + "\n" + extra


def make_config(tmp_path: Path, text: str | None = None, **kw: Any) -> CompanyConfig:
    path = tmp_path / "company.yaml"
    path.write_text(text if text is not None else company_yaml(**kw))
    return load_config(path)


class Ctx:
    """A minimal :class:`companyd.supervision._child.ChildContext` for running a child alone."""

    id = "spend"
    path = "companyd/spend"

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self.info: Any = None

    def started(self, info: Any = None) -> None:
        self.info = info
        self.ready.set()


@contextlib.asynccontextmanager
async def running(book: SpendBook) -> AsyncIterator[Ctx]:
    """Run ``book`` as a supervised child would; stop it on exit."""
    ctx = Ctx()
    task = asyncio.create_task(book.run(ctx))
    ready = asyncio.create_task(ctx.ready.wait())
    async with asyncio.timeout(10):
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()  # raises the start-up error
        raise AssertionError("SpendBook.run returned before signalling readiness")
    try:
        yield ctx
    finally:
        ctx.stopping.set()
        async with asyncio.timeout(10):
            await task


def micro(n: int | str) -> Decimal:
    """``n`` micro-dollars."""
    return Decimal(n) / Decimal(1_000_000)


async def spend(
    book: SpendBook,
    agent: str,
    tokens: int,
    *,
    model: str = "unit-model",
    run_id: str = "run-1",
    routine: str | None = None,
) -> Decimal:
    """Reserve and settle one unit-model call of ``tokens`` input tokens (= ``tokens`` µ$)."""
    res = await book.reserve(
        agent=agent,
        run_id=run_id,
        routine=routine,
        model=model,
        input_tokens=tokens,
        max_output_tokens=0,
    )
    return await book.settle(res, model=model, usage=Usage(input_tokens=tokens))


async def reserve(book: SpendBook, agent: str, tokens: int, out: int = 0) -> Reservation:
    return await book.reserve(
        agent=agent,
        run_id="run-1",
        routine=None,
        model="unit-model",
        input_tokens=tokens,
        max_output_tokens=out,
    )


def events(bus: EventBus, kind: str) -> list[Event]:
    return bus.recent({kind}, limit=1000)
