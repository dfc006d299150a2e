"""Routines started by webhooks: ``POST /hooks/<routine>`` on the dashboard (docs/triggers.md).

A real daemon in process (real stores, the real anthropic SDK against the Messages API
stand-in) and its dashboard application; requests are signed with the ``standardwebhooks``
package, as a sender (Stripe, GitHub through a relay, …) signs them. No session cookie and no
CSRF token: the signature is the authentication.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.dashboard._hooks import MAX_WEBHOOK_ID
from companyd.llm._claude import ClaudeBackend
from companyd.testing.messages_api import MessagesAPIServer

from .pagekit import Site

pytestmark = pytest.mark.anyio

KEY_VAR = "HOOK_CO_API_KEY"
SECRET_VAR = "HOOK_CO_PAYMENTS_SECRET"
SECRET = "whsec_" + base64.b64encode(b"payments-signing-key-32-bytes!!!").decode()
#: Something only the webhook's body carries: it must reach the model's request.
MARKER = "pi_3MtwBwLkdIwHu7ix28a3tqPa"

COMPANY = f"""\
schema: companyd/v1
company:
  name: Hook Co
  timezone: UTC
  budget: {{daily_usd: 10, monthly_usd: 100}}
anthropic:
  api_key_env: {KEY_VAR}
agents:
  ceo: {{title: CEO, instructions: You are the ceo.}}
  accountant:
    title: Accountant
    instructions: You keep the books.
    reports_to: ceo
routines:
  book-payment:
    assignee: accountant
    description: Book the payment this event reports in the ledger.
    trigger:
      webhook: {{secret_env: {SECRET_VAR}, max_body: 4096, rate_limit: 8}}
  weekly-review:
    assignee: accountant
    description: Review the week.
    trigger: {{cron: "0 9 * * mon"}}
"""

EVENT = {
    "type": "payment_intent.succeeded",
    "data": {"object": {"id": MARKER, "amount": 4200, "currency": "eur"}},
}


def signed(
    body: bytes, webhook_id: str = "msg_1", at: datetime | None = None, secret: str = SECRET
) -> dict[str, str]:
    """The Standard Webhooks headers a sender with ``secret`` puts on ``body``."""
    at = at or datetime.now(UTC)
    signature = Webhook(secret).sign(webhook_id, at, body.decode())
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


@asynccontextmanager
async def hook_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: MessagesAPIServer
) -> AsyncIterator[Site]:
    """A started daemon for :data:`COMPANY` (its state in ``tmp_path/s``) and its dashboard,
    *not* logged in.
    """
    monkeypatch.setenv(KEY_VAR, "k")
    monkeypatch.setenv(SECRET_VAR, SECRET)
    path = tmp_path / "company.yaml"
    path.write_text(COMPANY, encoding="utf-8")
    cfg = load_config(path)
    env = {KEY_VAR: "k", "ANTHROPIC_BASE_URL": server.base_url}
    claude = ClaudeBackend.from_config(cfg.spec.anthropic, environ=env)
    async with Daemon(cfg, tmp_path / "s", backend=claude) as d:
        site = Site(d, ManualClock(start=d.clock.time()))
        async with site.client:
            yield site


async def fires(site: Site, routine: str = "book-payment") -> list[Any]:
    return list((await site.daemon.job_history(routine)).fires)


async def ended(site: Site, n: int = 1) -> list[Any]:
    """The routine's fires once ``n`` of them have an outcome (deadline 30 s)."""
    async with asyncio.timeout(30):
        while True:
            rows = await fires(site)
            if len([r for r in rows if r["outcome"] is not None]) >= n:
                return rows
            await asyncio.sleep(0.05)


async def post(site: Site, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return await site.client.post("/hooks/book-payment", content=body, headers=headers)


async def test_a_signed_webhook_runs_the_routine_once_with_its_body_as_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps(EVENT).encode()
    with MessagesAPIServer() as server:
        async with hook_site(tmp_path, monkeypatch, server) as site:
            r = await post(site, body, signed(body, "msg_2x9"))
            assert r.status_code == 202, r.text
            fire_id = r.json()["fire_id"]
            rows = await ended(site)
            assert [(f["fire_id"], f["kind"], f["outcome"]) for f in rows] == [
                (fire_id, "webhook", "ok")
            ]
            # the body reached the agent, as data in its task
            sent = [json.dumps(q.body) for q in server.requests]
            assert sent and any(MARKER in s for s in sent)
            assert any("started by a webhook" in s for s in sent)
            calls = len(server.requests)
            # the run's transcript shows the task with the event
            shown = await site.daemon.run_show(rows[0]["run_id"])
            assert MARKER in json.dumps(shown.__dict__, default=str)

            # the sender retries the same delivery: nothing runs again
            again = await post(site, body, signed(body, "msg_2x9"))
            assert again.status_code == 200, again.text
            assert again.json() == {"routine": "book-payment", "fire_id": fire_id, "replay": True}
            await asyncio.sleep(0.3)
            assert len(await fires(site)) == 1
            assert len(server.requests) == calls

        # ...not even after a restart of the daemon (the id is in the routine history)
        async with hook_site(tmp_path, monkeypatch, server) as site:
            late = await post(site, body, signed(body, "msg_2x9"))
            assert late.status_code == 200, late.text
            assert late.json()["replay"] is True
            assert len(await fires(site)) == 1
            # a new delivery id is a new event
            other = await post(site, body, signed(body, "msg_3"))
            assert other.status_code == 202, other.text
            assert len(await ended(site, 2)) == 2
            # the routine is listed with its trigger and no clock fire; its pages render
            jobs = {j["routine"]: j for j in (await site.daemon.jobs()).routines}
            assert jobs["book-payment"]["schedule"] == "webhook"
            assert jobs["book-payment"]["next_fire"] is None
            await site.login()
            page = await site.get("/routines/book-payment")
            assert "webhook" in page.text
            await site.get("/routines")


async def test_bad_stale_oversized_and_flooding_requests_run_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps(EVENT).encode()
    with MessagesAPIServer() as server:
        async with hook_site(tmp_path, monkeypatch, server) as site:
            wrong_key = "whsec_" + base64.b64encode(b"x" * 32).decode()
            r = await post(site, body, signed(body, "m1", secret=wrong_key))
            assert r.status_code == 401, r.text
            tampered = body.replace(b"4200", b"9999")
            r = await post(site, tampered, signed(body, "m2"))
            assert r.status_code == 401, r.text
            old = datetime.now(UTC) - timedelta(minutes=10)
            r = await post(site, body, signed(body, "m3", at=old))
            assert r.status_code == 401, r.text
            assert "too old" in r.text
            r = await post(site, body, {"content-type": "application/json"})  # unsigned
            assert r.status_code == 401, r.text
            big = json.dumps({"pad": "x" * 5000}).encode()
            r = await post(site, big, signed(big, "m4"))
            assert r.status_code == 413, r.text
            not_json = b"amount=4200"
            r = await post(site, not_json, signed(not_json, "m5"))
            assert r.status_code == 400, r.text
            # signed, but an id no sender makes (it would be stored for replays)
            r = await post(site, body, signed(body, "m" * (MAX_WEBHOOK_ID + 1)))
            assert r.status_code == 400 and "webhook-id is longer" in r.text, r.text
            r = await site.client.post(
                "/hooks/weekly-review", content=body, headers=signed(body, "m6")
            )
            assert r.status_code == 404, r.text  # a routine without a webhook trigger
            # rate_limit 8 a minute: the 7 above count (not the 404: another routine), bad
            # ones too; the 9th request in the minute is refused before it is even read
            r = await post(site, body, signed(body, "m8", secret=wrong_key))
            assert r.status_code == 401, r.text
            r = await post(site, body, signed(body, "m9"))
            assert r.status_code == 429, r.text
            assert int(r.headers["retry-after"]) >= 1
            await asyncio.sleep(0.3)
            assert await fires(site) == []
            assert server.requests == []
