"""The browsing Admin operations (daemon/_views.py) and ``spend(per_day=True)``, against a real
daemon in process (offline model, real memory owner, ledger and files): what the
dashboard's Memory, Config and Spend pages read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd.admin import AdminError
from companyd.admin._wire import load_result, result_data
from companyd.config import SECTIONS, load_config
from companyd.daemon._main import Daemon
from companyd.llm._offline import OfflineModel
from companyd.testing.daemon import short_dir

SECRET = "northwind-secret-value-42"

COMPANY = f"""\
schema: companyd/v1
company:
  name: View Co
  timezone: UTC
  context: "Our staging password is {SECRET}; never repeat it."
  budget: {{daily_usd: 10}}
anthropic:
  api_key_env: VIEW_CO_API_KEY
agents:
  ceo: {{title: CEO, instructions: You are the ceo.}}
  cfo: {{title: CFO, instructions: You are the cfo., reports_to: ceo}}
routines:
  close:
    assignee: cfo
    description: Close the month.
    expected_output: The closing note.
    approval: required
    trigger: {{cron: "0 8 1 * *"}}
"""


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("VIEW_CO_API_KEY", SECRET)
    with short_dir() as d:
        (d / "company.yaml").write_text(COMPANY, encoding="utf-8")
        yield d


def daemon(work: Path) -> Daemon:
    cfg = load_config(work / "company.yaml")  # registers the secret, as `companyd run` does
    return Daemon(cfg, work / "s", backend=OfflineModel(), offline=True)


@pytest.mark.anyio
async def test_memory_is_searched_opened_and_its_changes_listed(work: Path) -> None:
    async with daemon(work) as d:
        await d.memory.call(
            "create_entities",
            {
                "entities": [
                    {"name": "Acme", "entityType": "customer", "observations": ["pays monthly"]},
                    {"name": "Bob", "entityType": "person", "observations": [f"knows {SECRET}"]},
                ]
            },
            by="cfo",
        )
        await d.memory.call(
            "create_relations", {"relations": [{"from": "Bob", "to": "Acme", "relationType": "at"}]}
        )
        found = await d.memory_search("acme")
        assert [e["name"] for e in found.entities] == ["Acme"] and found.total == 1
        bob = await d.memory_entity("Bob")
        assert bob.entity_type == "person" and bob.observations == ["knows ***"]  # redacted
        assert [n["name"] for n in bob.neighbours] == ["Acme"]
        assert bob.relations == [{"from": "Bob", "to": "Acme", "relationType": "at"}]
        data = json.loads(json.dumps(result_data("memory_entity", bob)))
        assert load_result("memory_entity", data) == bob
        changes = await d.memory_changes()
        assert [(c["tool"], c["by"], c["entities"]) for c in changes.changes] == [
            ("create_relations", None, ["Bob", "Acme"]),
            ("create_entities", "cfo", ["Acme", "Bob"]),
        ]
        assert SECRET not in json.dumps(result_data("memory_changes", changes))
        with pytest.raises(AdminError, match=r"no entity 'Nobody' in company memory; search"):
            await d.memory_entity("Nobody")
        with pytest.raises(AdminError, match=r"depth must be 1, 2 or 3 hops, got 7"):
            await d.memory_entity("Bob", depth=7)
        with pytest.raises(AdminError, match=r"limit must be from 1 to 500, got 0"):
            await d.memory_search("", limit=0)


@pytest.mark.anyio
async def test_the_config_view_is_resolved_redacted_and_shows_the_last_reload(
    work: Path,
) -> None:
    async with daemon(work) as d:
        view = await d.config_view()
        assert view.path == str(work / "company.yaml")
        assert view.document["schema"] == "companyd/v1"
        assert view.document["company"]["name"] == "View Co"
        context = view.document["company"]["context"]
        assert context == "Our staging password is ***; never repeat it."
        assert view.document["defaults"]["limits"]["max_steps"] == 20  # defaults filled in
        # every section, every effective default — the routine's deliver as it runs, not
        # the null the file leaves it at (issue 28)
        assert list(view.document) == list(SECTIONS)
        close = view.document["routines"]["close"]
        assert close["deliver"] == ["telegram"] and close["approval"] == "required"
        assert view.document["retention"]["runs_days"] == 90
        assert view.document["state"]["backend"] == "sqlite"
        assert view.document["dashboard"]["enabled"] is True
        ref = next(r for r in view.secrets if r["path"] == "anthropic.api_key_env")
        assert ref == {
            "path": "anthropic.api_key_env",
            "kind": "env",
            "name": "VIEW_CO_API_KEY",
            "is_set": True,
        }
        assert SECRET not in json.dumps(result_data("config_view", view))
        assert view.changed_on_disk is False and view.file_mtime is not None
        assert view.reload["last_result"] is None and view.reload_errors == []

        broken = COMPANY.replace("daily_usd: 10", "daily_usd: ten").replace(
            "title: CFO", "title: CFO, budget: {monthly_usd: lots}"
        )
        (work / "company.yaml").write_text(broken, encoding="utf-8")
        rejected = await d.reload()
        assert rejected.applied is False
        after = await d.config_view()
        assert after.changed_on_disk is True
        assert after.document["company"]["budget"]["daily_usd"] == 10.0  # still the running one
        assert after.reload["last_result"] == "rejected"
        last_rejected = after.reload["rejected"]
        assert last_rejected is not None
        assert len(after.reload_errors) == 2 == last_rejected["errors"]
        assert "company.budget.daily_usd" in after.reload_errors[0]
        assert "agents.cfo.budget.monthly_usd" in after.reload_errors[1]


@pytest.mark.anyio
async def test_spend_per_day_through_admin(work: Path) -> None:
    async with daemon(work) as d:
        answer = await d.ask("cfo", "What did we spend?")
        assert answer.status == "ok"
        await d.spend_book.flush()
        report = await d.spend("agent", "month", per_day=True)
        today = (await d.budget()).day
        assert [(r["day"], r["key"]) for r in report.rows] == [(today, "cfo")]
        assert report.rows[0]["calls"] >= 1
        with pytest.raises(AdminError, match="cannot group spend by 'colour'"):
            await d.spend("colour", per_day=True)


@pytest.mark.anyio
async def test_offline_spend_is_labelled_simulated_in_status_spend_and_the_dashboard(
    work: Path,
) -> None:
    """Issue 28: the offline model's spend (priced as Claude's, no money spent) is labelled
    simulated wherever it is shown: status (and --json), `spend` (and --json), the
    dashboard's overview and spend page.
    """
    from companyd.admin import render_status
    from companyd.spend._reports import format_spend_report

    async with daemon(work) as d:
        answer = await d.ask("cfo", "What did we spend?")
        assert answer.status == "ok"
        await d.spend_book.flush()
        status = await d.status()
        today = status.spend.today
        assert today.used_usd > 0 and today.simulated_usd == pytest.approx(today.used_usd)
        assert result_data("status", status)["spend"]["month"]["simulated_usd"] > 0
        text = render_status(result_data("status", status))
        spend_lines = text.split("Spend")[1].splitlines()
        assert any(ln.startswith("  today") and ln.endswith("  simulated") for ln in spend_lines)
        report = await d.spend("agent", "today")
        (row,) = report.rows
        assert row["simulated_usd"] == pytest.approx(row["cost_usd"])
        assert report.total["simulated_usd"] == pytest.approx(report.total["cost_usd"])
        shown = format_spend_report(result_data("spend", report))
        assert shown.splitlines()[0:3][0].startswith("spend by agent")
        assert shown.splitlines()[1].split()[-1] == "simulated"
        assert "no money was spent" in shown
