"""Where ``unverified`` shows in the dashboard (issue 27): the run page's verification block
(each condition met or unmet, with its evidence), the routine page's fire and the overview's
routines. The real daemon in process with its scheduler, the real anthropic SDK against the
Messages API stand-in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkit import PerAgent, running_company, write_company
from companyd.clock import ManualClock
from companyd.testing.messages_api import MessagesAPIServer, reply_text

from .pagekit import Site

pytestmark = pytest.mark.anyio

CLAIM = "I saved it in the company memory."
WHY = "the answer says it saved to the company memory, but the run wrote nothing to it"


async def test_an_unverified_run_shows_on_the_run_routine_and_overview_pages(
    tmp_path: Path,
) -> None:
    cfg = write_company(
        tmp_path,
        {"ceo": {}},
        routines={
            "notes": {
                "assignee": "ceo",
                "description": "Write down what the customer said.",
                "trigger": {"cron": "0 3 * * *"},
                "deliver": [],
            }
        },
        dashboard={"enabled": False},  # the test serves the pages itself (no port)
    )
    model = PerAgent(ceo=[reply_text(CLAIM), reply_text(CLAIM)])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "s", srv, oneoff=False) as d:
            fired = await d.run_job("notes")
            site = Site(d, ManualClock(start=d.clock.time()))
            async with site.client:
                await site.login()
                run = (await site.get(f"/runs/{fired.run_id}")).text
                routine = (await site.get("/routines/notes")).text
                runs = (await site.get("/runs?status=unverified")).text
                overview = (await site.get("/")).text
    assert fired.status == "unverified", fired
    assert 'id="h-verification"' in run and "⚠ unverified" in run
    assert "✗ the answer&#39;s claim of writing to the company memory" in run
    assert WHY.replace("'", "&#39;") in run
    assert "Follow-up sent to the agent" in run  # the first verification step
    assert 'badge outcome-unverified">unverified' in routine
    assert fired.run_id in runs
    assert "⚠ unverified" in overview
