"""What an agent's external tools may do without the founder (issue 29): risk read from
the tools' MCP annotations, daily rate limits counted durably, and changed tools held back
until the founder approves them. Real subprocess MCP servers (sandboxed), the real daemon
in-process with its desk and stores.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentkit import PerAgent, running_company, tool_results, tool_server, write_company
from companyd.admin._results import ToolsApproved
from companyd.alerts._ops import act
from companyd.alerts._render_kinds import render
from companyd.config import load_config
from companyd.desk import ItemState
from companyd.testing.inprocess import InProcessDaemon
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

pytestmark = pytest.mark.anyio


async def _wait_for(predicate: Any, timeout: float = 60) -> Any:
    async with asyncio.timeout(timeout):
        while not (value := predicate()):
            await asyncio.sleep(0.02)
        return value


def _social(**extra: Any) -> dict[str, Any]:
    spec = tool_server()
    del spec["risk"]  # the default: risk from_annotations
    spec.update(extra)
    return spec


async def test_a_read_only_tool_runs_and_an_unannotated_one_waits_for_the_founder(
    tmp_path: Path,
) -> None:
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": _social()}}})
    model = PerAgent(
        marketing=[
            reply_tool_use("read_inbox", {}),
            reply_tool_use("post_update", {"text": "hello"}),
            reply_text("Posted after approval."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, oneoff=False) as d:
            asking = asyncio.ensure_future(d.ask("marketing", "Read, then post."))
            requested = await _wait_for(
                lambda: d.bus.recent({"founder_approval_requested"}, limit=10)
            )
            assert [e.data["tool"] for e in requested] == ["post_update"]  # not read_inbox
            await d.desk.decide(requested[0].data["item_id"], ItemState.APPROVED, by="founder")
            out = await asyncio.wait_for(asking, 60)
    assert out.status == "ok", out
    assert "move the launch to Friday" in tool_results(srv.requests[1])[0]["content"]
    assert tool_results(srv.requests[2])[0]["content"] == "posted: hello"


async def test_allow_without_approval_and_require_approval_override_the_annotations(
    tmp_path: Path,
) -> None:
    cfg = write_company(
        tmp_path,
        {
            "marketing": {
                "mcp_servers": {"social": _social()},
                "tools": {
                    "allow_without_approval": ["post_update"],
                    "require_approval": ["read_inbox"],
                },
            }
        },
    )
    model = PerAgent(
        marketing=[
            reply_tool_use("post_update", {"text": "hi"}),
            reply_tool_use("read_inbox", {}),
            reply_text("Done."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, oneoff=False) as d:
            asking = asyncio.ensure_future(d.ask("marketing", "Post, then read."))
            requested = await _wait_for(
                lambda: d.bus.recent({"founder_approval_requested"}, limit=10)
            )
            assert [e.data["tool"] for e in requested] == ["read_inbox"]
            await d.desk.decide(requested[0].data["item_id"], ItemState.APPROVED, by="founder")
            assert (await asyncio.wait_for(asking, 60)).status == "ok"
    assert tool_results(srv.requests[1])[0]["content"] == "posted: hi"  # never asked


async def test_a_rate_limit_refuses_past_n_with_the_reason_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    social = tool_server()  # trusted: no approvals in the way
    cfg = write_company(
        tmp_path,
        {
            "marketing": {
                "mcp_servers": {"social": social},
                "tools": {"rate_limit": {"post_update": "2/day"}},
            }
        },
    )
    model = PerAgent(
        marketing=[
            reply_tool_use("post_update", {"text": "one"}),
            reply_tool_use("post_update", {"text": "two"}),
            reply_tool_use("post_update", {"text": "three"}),
            reply_text("The limit stopped me."),
        ]
    )
    state = tmp_path / "state"
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, state, srv) as d:
            assert (await d.ask("marketing", "Post three times.")).status == "ok"
            first_day = d.bus.recent({"tool_rate_limited"}, limit=10)
        results = [tool_results(r)[0] for r in srv.requests[1:4]]
        model.add(
            "marketing", reply_tool_use("post_update", {"text": "four"}), reply_text("Refused.")
        )
        async with running_company(cfg, state, srv) as d:  # a restart: the count stays
            assert (await d.ask("marketing", "Post again.")).status == "ok"
            second = d.bus.recent({"tool_rate_limited"}, limit=10)
        after_restart = tool_results(srv.requests[-1])[0]
    assert [r["content"] for r in results[:2]] == ["posted: one", "posted: two"]
    refused = results[2]
    assert refused["is_error"], refused
    assert "may be called 2 time(s) a day (tools.rate_limit" in refused["content"]
    assert "called 2 time(s) today" in refused["content"]
    assert after_restart["is_error"] and "called 2 time(s) today" in after_restart["content"]
    assert [(e.data["tool"], e.data["limit"]) for e in first_day] == [("post_update", 2)]
    assert second == []  # alerted once that day: the restart does not alert again


async def test_a_changed_tool_is_held_back_until_the_founder_approves_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    model = PerAgent()
    with MessagesAPIServer(responder=model) as srv:
        cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": tool_server()}}})
        async with running_company(cfg, state, srv) as d:
            assert (await d.ask("marketing", "Hi.")).status == "ok"  # the catalogue approved
            assert d.bus.recent({"tools_quarantined"}, limit=10) == []
        updated = tool_server(TOOL_VARIANT="2")  # the server after an "update"
        cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": updated}}})
        async with running_company(cfg, state, srv) as d:
            assert (await d.ask("marketing", "Hi again.")).status == "ok"
            told = d.bus.recent({"tools_quarantined"}, limit=10)
            approved = await d.staff.provisions.release("social")
            assert (await d.ask("marketing", "And now?")).status == "ok"
        async with running_company(cfg, state, srv) as d:  # approved stays approved
            assert (await d.ask("marketing", "Later.")).status == "ok"
            told_again = d.bus.recent({"tools_quarantined"}, limit=10)
    names = [{t["name"] for t in r.body["tools"]} for r in srv.requests]
    assert {"post_update", "read_inbox", "crash", "hog"} <= names[0]
    assert "read_inbox" in names[1] and "crash" in names[1]  # unchanged: still offered
    assert "post_update" not in names[1] and "delete_post" not in names[1]  # held back
    assert {"post_update", "delete_post"} <= names[2] and {"post_update", "delete_post"} <= names[3]
    assert [e.data["tools"] for e in told] == [
        {"delete_post": "new tool", "post_update": "changed description"}
    ]
    assert sorted(approved) == [("marketing", "delete_post"), ("marketing", "post_update")]
    assert told_again == []


async def _tools_json(daemon: InProcessDaemon, want: Any) -> list[dict[str, Any]]:
    """``companyd tools --json``'s rows once ``want(rows)`` holds (the agents start their
    servers after READY).
    """
    async with asyncio.timeout(90):
        while True:
            out = await daemon.cli("tools", "--json")
            assert out.rc == 0, out.err
            rows: list[dict[str, Any]] = json.loads(out.out)["tools"]
            if want(rows):
                return rows
            await asyncio.sleep(0.3)


async def test_companyd_tools_lists_every_tool_and_approve_releases_the_held_ones(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    social = _social()
    cfg = write_company(
        tmp_path,
        {
            "marketing": {
                "mcp_servers": {"social": social},
                "tools": {"rate_limit": {"post_update": "5/day"}},
            }
        },
    )
    # the daemon in this process (companyd run's composition root, offline model), the
    # commands by the CLI's entry point: nothing here is about a process
    async with InProcessDaemon(cfg, state) as first:
        await _tools_json(first, lambda rows: any(r["tool"] == "post_update" for r in rows))
    social["env"] = {"TOOL_VARIANT": "2"}  # the server after an update
    cfg = write_company(
        tmp_path,
        {
            "marketing": {
                "mcp_servers": {"social": social},
                "tools": {"rate_limit": {"post_update": "5/day"}},
            }
        },
    )
    async with InProcessDaemon(cfg, state) as second:
        rows = await _tools_json(second, lambda rows: any(r["tool"] == "delete_post" for r in rows))
        inbox = await second.cli("inbox", "--json")
        approve = await second.cli("approve", "tools:marketing:social")  # the inbox's action
        after = await _tools_json(second, lambda rows: not any(r["quarantined"] for r in rows))
        text = await second.cli("tools")
        again = await second.cli("tools", "approve", "social")
        emptied = await second.cli("inbox", "--json")
    by_tool = {r["tool"]: r for r in rows}
    assert by_tool["delete_post"]["quarantined"] and by_tool["post_update"]["quarantined"]
    assert by_tool["delete_post"]["risk"] == "destructive"
    assert not by_tool["read_inbox"]["quarantined"]
    assert (
        by_tool["read_inbox"]["risk"] == "read-only" and by_tool["read_inbox"]["policy"] == "free"
    )
    assert by_tool["read_inbox"]["origin"] == "mcp server social"
    assert by_tool["recall"]["origin"] == "memory" and by_tool["recall"]["risk"] == "built-in"
    items = [i for i in json.loads(inbox.out)["items"] if i["kind"] == "tools"]
    assert [(i["id"], i["actions"]) for i in items] == [("tools:marketing:social", ["approve"])]
    assert "delete_post, post_update" in items[0]["summary"]
    assert approve.rc == 0, approve.err
    assert "approved delete_post, post_update of social for marketing" in approve.out
    assert again.rc == 0 and "nothing of MCP server 'social' was held back" in again.out
    assert not [i for i in json.loads(emptied.out)["items"] if i["kind"] == "tools"]
    released = {r["tool"]: r for r in after}
    assert released["post_update"]["policy"] == "approval (risk)"
    assert released["post_update"]["rate_limit"] == 5 and released["post_update"]["used_today"] == 0
    assert released["delete_post"]["policy"] == "approval (risk)"
    assert "QUARANTINED" not in text.out and "0/5" in text.out


async def test_the_quarantine_alert_carries_an_approve_button_that_releases_the_tools() -> None:
    data = {
        "agent": "marketing",
        "server": "social",
        "tools": {"delete_post": "new tool", "post_update": "changed description"},
    }
    rendered, buttons = render("tools_quarantined", data, "agent/marketing", {}, ["marketing"])
    assert "offers new or changed tools; they are held back" in rendered.title
    assert "delete_post: new tool" in rendered.lines
    assert "approve them: companyd tools approve social" in rendered.lines
    assert [(b.action, b.arg) for b in buttons] == [("approve_tools", "marketing/social")]

    calls: list[tuple[str, str | None]] = []

    class Approving:
        async def tools_approve(
            self, server: str, agent: str | None = None, via: str = "cli"
        ) -> ToolsApproved:
            calls.append((server, agent))
            return ToolsApproved(server=server, approved=[{"agent": agent, "tool": "delete_post"}])

    admin = Approving()
    done, told = await act(admin, {"action": "approve_tools", "arg": "marketing/social"})  # type: ignore[arg-type]
    assert done and told == "approved delete_post of social for marketing; offered now"
    assert calls == [("social", "marketing")]


async def test_a_result_longer_than_max_result_chars_reaches_the_model_cut_with_its_size(
    tmp_path: Path,
) -> None:
    cfg = write_company(
        tmp_path,
        {
            "marketing": {
                "mcp_servers": {"social": tool_server()},
                "tools": {"max_result_chars": 1000},
                "reports_to": "ceo",
            },
            "ceo": {},
        },
    )
    model = PerAgent(
        marketing=[
            reply_tool_use("big", {"chars": 250_000}),
            reply_tool_use("big", {"chars": 1000}),
            reply_text("Read both."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            assert (await d.ask("marketing", "Read the big file.")).status == "ok"
    agents = load_config(cfg).agents
    limits = {a: agents[a].max_result_chars for a in ("marketing", "ceo")}
    cut, whole = tool_results(srv.requests[1])[0], tool_results(srv.requests[2])[0]
    digits = ("0123456789" * 100)[:1000]
    assert cut["content"] == digits + " … [cut: 250,000 chars in all]"
    assert not cut.get("is_error")
    assert whole["content"] == digits  # exactly at the limit: whole
    # the agent's own value, else defaults.tools.max_result_chars (100,000)
    assert limits == {"marketing": 1000, "ceo": 100_000}
