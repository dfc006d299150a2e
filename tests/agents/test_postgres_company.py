"""A company whose stores live on PostgreSQL (``state: backend: postgres``): the real
daemon in-process, its model calls on the loopback Messages API, its ledger in the
company's schema on the throwaway cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentkit import PerAgent, running_company, write_company
from companyd.cli import main
from companyd.spend._ledger import Ledger
from companyd.storage import Backend
from companyd.testing.messages_api import MessagesAPIServer, reply_text

pytestmark = pytest.mark.anyio


async def test_a_postgres_company_keeps_its_spend_in_its_schema(
    tmp_path: Path,
    pg_backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert pg_backend.dsn is not None
    monkeypatch.setenv("COMPANYD_DATABASE_URL", pg_backend.dsn)
    cfg = write_company(
        tmp_path, {"ceo": {}}, state={"backend": "postgres", "schema": pg_backend.schema}
    )
    model = PerAgent(ceo=[reply_text("Noted."), reply_text("Still noted.")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, oneoff=False) as d:
            first = await d.ask("ceo", "Note this.")
            status = await d.status()
        # a restart (or the standby that took over) starts from the spend already there
        async with running_company(cfg, tmp_path / "state", srv) as d:
            second = await d.ask("ceo", "And this.")
            budget = await d.budget()
    assert (first.answer, second.answer) == ("Noted.", "Still noted.")
    assert status.daemon.storage == f"postgres schema {pg_backend.schema!r}"
    # every store is in the schema: no SQLite file in the state directory
    assert sorted(p.name for p in (tmp_path / "state").glob("*.sqlite*")) == []
    ledger = Ledger(tmp_path / "spend.sqlite", readonly=True, backend=pg_backend)
    try:
        rows = ledger.calls()
    finally:
        ledger.close()
    assert [r["agent"] for r in rows] == ["ceo", "ceo"] and srv.served == 2
    today = next(b for b in budget.budgets if b["scope"] == "company" and b["period"] == "day")
    # the offline CLI reads the same schema (no daemon running)
    assert main(["spend", "--config", str(cfg), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"]["calls"] == 2
    assert today.get("used_usd") == pytest.approx(report["total"]["cost_usd"]) != 0
