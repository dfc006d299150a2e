"""External MCP tool servers that fail: one bad server never stops the company (issue 15,
item 14). Real subprocess MCP servers over stdio, the real daemon in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    TOOL_SERVER,
    PerAgent,
    running_company,
    tool_files,
    tool_results,
    tool_server,
    write_company,
)
from companyd.agents import McpServerFailed, McpToolServer
from companyd.agents._stdio import MAX_JUNK_LINES
from companyd.alerts._render_kinds import render
from companyd.clock import ManualClock
from companyd.config import McpServerSpec, load_config
from companyd.errors import ConfigError
from companyd.events import Severity
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

pytestmark = pytest.mark.anyio

EXITS_AT_ONCE = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}
# Reads every request and answers none; like any stdio server it exits when its stdin
# closes, so the stop after the failed handshake takes no grace period. The timeout is
# short because this server never answers: the test always waits all of it, however
# loaded the machine (the start of the mcp SDK is outside it: it is imported first).
NEVER_ANSWERS = {
    "command": sys.executable,
    "args": ["-c", "import sys; sys.stdin.read()"],
    "handshake_timeout_seconds": 0.5,
}
# Prints junk on stdout, where MCP messages belong, until the daemon stops it.
NOISY = {
    "command": sys.executable,
    "args": ["-c", "import sys\nfor i in range(5000): print('junk', i)\nsys.stdin.read()"],
}
# Never answers and ignores its stdin closing: the stop waits the mcp SDK's grace period
# (2 s) and then kills it.
IGNORES_EVERYTHING = dict(NEVER_ANSWERS, args=["-c", "import time; time.sleep(600)"])


async def _wait_for(predicate: Any, what: str, timeout: float = 60) -> Any:
    async with asyncio.timeout(timeout):
        while not (value := predicate()):
            await asyncio.sleep(0.02)
        return value


async def test_a_server_that_fails_or_never_answers_leaves_the_agent_running_without_it(
    tmp_path: Path,
) -> None:
    log = tool_files(tmp_path) / "tool.log"
    cfg = write_company(
        tmp_path,
        {
            "marketing": {
                "reports_to": "ceo",
                "mcp_servers": {
                    "social": tool_server(log.parent, TOOL_LOG=str(log)),
                    "broken": EXITS_AT_ONCE,
                    "mute": NEVER_ANSWERS,
                    "missing": {"command": str(tmp_path / "no-such-mcp-server")},
                    "noisy": NOISY,
                },
            },
            "ceo": {},
        },
    )
    model = PerAgent(
        marketing=[reply_tool_use("post_update", {"text": "hello"}), reply_text("Posted.")]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("marketing", "Post hello.")
            assert (await d.ask("ceo", "Anything?")).status == "ok"
            failed = d.bus.recent({"mcp_server_failed"}, limit=100)
    assert out.status == "ok", out
    marketing = [r for r in srv.requests if "(marketing)" in str(r.body.get("system"))]
    names = {t["name"] for t in marketing[0].body["tools"]}
    assert {"post_update", "read_inbox", "recall"} <= names
    assert tool_results(marketing[1])[0]["content"] == "posted: hello"
    # the first failure of each server is a warning; the retries (every 5 s or more: the
    # first model call imports the anthropic SDK, which can take seconds on a loaded
    # machine) only count attempts
    firsts = [e for e in failed if e.data["attempt"] == 1]
    by_server = {e.data["server"]: e for e in firsts}
    assert set(by_server) == {"broken", "mute", "missing", "noisy"} and len(firsts) == 4
    for e in firsts:
        assert e.severity == Severity.WARNING and e.data["agent"] == "marketing"
        assert e.data["retry_in_s"] > 0
    assert all(e.severity == Severity.DEBUG for e in failed if e.data["attempt"] > 1)
    assert "closed the connection during the MCP handshake" in by_server["broken"].data["reason"]
    assert "did not answer the MCP handshake within 0.5 s" in by_server["mute"].data["reason"]
    assert "could not be started: No such file" in by_server["missing"].data["reason"]
    # stopped by the daemon for its junk: said so, not "it probably exited at once"
    assert (
        by_server["noisy"]
        .data["reason"]
        .startswith(
            f"was stopped during the MCP handshake: it wrote {MAX_JUNK_LINES} lines in a row to "
            "its stdout that are not MCP messages"
        )
    ), by_server["noisy"].data["reason"]
    rendered, _ = render("mcp_server_failed", by_server["mute"].data, "agent/marketing", {}, [])
    assert rendered.title == "MCP server 'mute' of marketing failed; running without its tools"
    assert any("did not answer the MCP handshake" in line for line in rendered.lines)


async def test_a_failed_server_is_retried_with_backoff_and_its_tools_arrive(
    tmp_path: Path,
) -> None:
    gate = tool_files(tmp_path) / "gate"
    social = tool_server(gate.parent, TOOL_START_GATE=str(gate))
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": social}}})
    clock = ManualClock()
    model = PerAgent(marketing=[reply_text("No tools yet."), reply_text("Now I have them.")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            assert (await d.ask("marketing", "First.")).status == "ok"
            first = await _wait_for(
                lambda: d.bus.recent({"mcp_server_failed"}, limit=10), "the first failure"
            )
            assert first[0].data["retry_in_s"] == 5
            assert "exited" in first[0].data["reason"] or "closed" in first[0].data["reason"]
            # Still failing: the next wait doubles, and is not a second warning.
            clock.advance(5)
            again = await _wait_for(
                lambda: [
                    e
                    for e in d.bus.recent({"mcp_server_failed"}, limit=10)
                    if e.data["attempt"] == 2
                ],
                "the second failure",
            )
            assert again[0].data["retry_in_s"] == 10 and again[0].severity == Severity.DEBUG
            gate.touch()
            clock.advance(10)
            recovered = await _wait_for(
                lambda: d.bus.recent({"mcp_server_recovered"}, limit=10), "the recovery"
            )
            assert recovered[0].data == {
                "agent": "marketing",
                "server": "social",
                "attempt": 3,
                "tools": [
                    "big",
                    "chart",
                    "crash",
                    "garble",
                    "hog",
                    "post_update",
                    "read_inbox",
                    "refuse",
                    "scribble",
                ],
            }
            assert (await d.ask("marketing", "Second.")).status == "ok"
    names = [{t["name"] for t in r.body["tools"]} for r in srv.requests]
    assert "post_update" not in names[0] and {"post_update", "read_inbox"} <= names[1]


def test_the_handshake_timeout_is_validated(tmp_path: Path) -> None:
    bad = dict(NEVER_ANSWERS, handshake_timeout_seconds=0)
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"mute": bad}}})
    with pytest.raises(ConfigError, match="handshake_timeout_seconds"):
        load_config(cfg)
    good = dict(NEVER_ANSWERS, handshake_timeout_seconds="45s")
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"mute": good}}})
    spec = load_config(cfg).agents["marketing"].mcp_servers["mute"]
    assert spec.handshake_timeout_seconds == 45.0


async def test_a_server_that_dies_during_a_call_is_a_tool_error_not_a_crashed_agent(
    tmp_path: Path,
) -> None:
    cfg = write_company(
        tmp_path,
        {"marketing": {"mcp_servers": {"social": tool_server()}}},
    )
    model = PerAgent(
        marketing=[
            reply_tool_use("crash", {}),
            reply_tool_use("read_inbox", {}),
            reply_text("The tool server is gone; I carried on."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("marketing", "Crash it.")
            restarts = d.bus.recent({"restart", "child_exited"}, limit=100)
    assert out.status == "ok", out
    first, second = tool_results(srv.requests[1])[0], tool_results(srv.requests[2])[0]
    assert first["is_error"] and "MCP server 'social' failed during 'crash'" in first["content"]
    assert second["is_error"] and "MCP server 'social'" in second["content"]
    assert not [e for e in restarts if e.data.get("child") == "marketing"]


async def test_tools_the_api_would_refuse_are_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One tool with a name the Messages API refuses would fail every model call of the
    # agent (HTTP 400): such tools are left out, the server's other tools stay.
    social = tool_server(TOOL_BAD_NAMES="1")
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": social}}})
    model = PerAgent(marketing=[reply_text("Fine.")])
    with caplog.at_level(logging.WARNING), MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            assert (await d.ask("marketing", "Hi.")).status == "ok"
    names = {t["name"] for t in srv.requests[0].body["tools"]}
    assert "post_update" in names
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names), names
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(warned) == 1 and "'post update!'" in warned[0], warned


async def test_a_mute_server_does_not_hold_up_the_company_start(tmp_path: Path) -> None:
    # Agents start one after another; if each waited for its tool servers' handshakes,
    # a few mute servers would hold READY=1 past systemd's start timeout. The agent
    # reports started first and waits for its tools before serving tasks. The server also
    # ignores its stdin closing: the stop after the failed handshake (the SDK's 2 s grace,
    # then a kill) must not hold up the start either.
    cfg = write_company(
        tmp_path,
        {"ceo": {"mcp_servers": {"mute": IGNORES_EVERYTHING}}, "cfo": {"reports_to": "ceo"}},
    )
    model = PerAgent()
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            assert (await d.ask("ceo", "Hi.")).status == "ok"
            history = d.bus.recent({"child_started", "mcp_server_failed"}, limit=100)
    order = [
        e.kind if e.kind == "mcp_server_failed" else f"started:{e.data.get('child')}"
        for e in history
    ]
    assert order.index("started:cfo") < order.index("mcp_server_failed"), order


def test_a_tool_server_starts_whatever_stderr_was_when_the_mcp_sdk_was_imported(
    tmp_path: Path,
) -> None:
    # mcp's stdio_client binds its default errlog (sys.stderr) when mcp.client.stdio is
    # imported. Imported while sys.stderr was a stream without a file descriptor (a test's
    # capsys, an embedding app), every later server start failed with "fileno" and crashed
    # the agent at start. A fresh interpreter shows it whatever the suite imported before.
    script = f"""
import asyncio, io, sys
real, sys.stderr = sys.stderr, io.StringIO()
import mcp.client.stdio  # default errlog bound to the StringIO
sys.stderr = real
from companyd.config import McpServerSpec
from companyd.agents import McpToolServer

async def main():
    spec = McpServerSpec(command=sys.executable, args=[{str(TOOL_SERVER)!r}])
    async with asyncio.timeout(60):
        async with McpToolServer("t", spec) as server:
            print(sorted(t.name for t in server.tools))

asyncio.run(main())
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("[")


async def test_a_tool_server_starts_while_sys_stderr_has_no_descriptor() -> None:
    # sys.stderr is a process global: another thread may have it redirected to a stream with
    # no descriptor at the moment an agent starts its tool server (an embedding app, the
    # CLI run in a thread of the test's process beside an in-process daemon). The start used
    # that stream as the server's stderr and failed with "fileno"; the agent then ran
    # without its tools (seen in the suite: a routine "ok" whose tool never ran).
    spec = McpServerSpec(command=sys.executable, args=(str(TOOL_SERVER),))
    with contextlib.redirect_stderr(io.StringIO()):
        async with asyncio.timeout(60), McpToolServer("t", spec) as server:
            assert server.tools


async def test_a_tool_servers_stderr_is_logged_as_its_own_and_a_flood_is_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool server's stderr went straight into the daemon's (its log, journald): a
    server could write lines that read as the daemon's own ("companyd.alerts: …") and
    flood the log until journald's rate limit dropped the daemon's lines too. Each line is
    now logged by the daemon, marked as the server's, at a bounded rate.
    """
    flood = (
        "echo 'companyd.alerts: all clear, nothing to approve' >&2; "
        "head -c 200000 /dev/zero | tr '\\0' x >&2; echo >&2; "  # one 200 kB line
        "i=0; while [ $i -lt 3000 ]; do echo flood $i; i=$((i+1)); done >&2"
    )
    spec = McpServerSpec(command="/bin/sh", args=("-c", flood))
    with caplog.at_level(logging.INFO, logger="companyd.agents"):
        with pytest.raises(McpServerFailed, match="closed the connection"):
            async with McpToolServer("noisy", spec):
                pass
        await _wait_for(
            lambda: any("not logged" in r.getMessage() for r in caplog.records),
            "the summary",
            timeout=10,
        )
    mine = [
        r.getMessage() for r in caplog.records if "MCP server 'noisy' (stderr)" in r.getMessage()
    ]
    assert mine[0].endswith("(stderr): companyd.alerts: all clear, nothing to approve"), mine[:2]
    assert len(mine) <= 105, len(mine)  # the burst, not 3,002 lines
    assert max(len(m) for m in mine) < 5000  # a long line is cut, not logged whole
    summary = [r.getMessage() for r in caplog.records if "not logged" in r.getMessage()]
    assert summary and "MCP server 'noisy'" in summary[-1], summary


async def test_an_answer_over_message_mb_or_an_error_answer_fails_the_call_the_server_runs_on(
    tmp_path: Path,
) -> None:
    social = dict(tool_server(), limits={"message_mb": 1})
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": social}}})
    model = PerAgent(
        marketing=[
            reply_tool_use("big", {"chars": 3 * 2**20}),
            reply_tool_use("refuse", {}),
            reply_tool_use("read_inbox", {}),
            reply_text("The file was too large; the inbox is fine."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("marketing", "Read the big file.")
            failed = d.bus.recent({"mcp_server_failed"}, limit=10)
    assert out.status == "ok", out
    too_large, refused, inbox = (tool_results(r)[0] for r in srv.requests[1:4])
    assert too_large["is_error"]
    # (the server sends the text twice: as content, and as structured content)
    assert re.match(
        r"MCP server 'social' refused 'big': the answer was 6\.0 MiB, more than the 1 MiB a "
        r"message of this tool server may be \(limits\.message_mb in company\.yaml\); ask "
        "for less",
        too_large["content"],
    ), too_large
    # a JSON-RPC error answer is the server's refusal, the model reads it
    assert refused["is_error"] and refused["content"] == (
        "MCP server 'social' refused 'refuse': no such post: 'p-404' (JSON-RPC error -32602)"
    )
    # the same server answers the next call: it was neither stopped nor restarted
    assert inbox["content"] == "1 new message: 'Can we move the launch to Friday?'"
    assert failed == []


async def test_what_a_result_holds_besides_text_is_named_not_dropped(tmp_path: Path) -> None:
    # An image, an embedded resource, a link: before, only the text items reached the
    # model, and a result of one image read as an empty answer.
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": tool_server()}}})
    model = PerAgent(marketing=[reply_tool_use("chart", {}), reply_text("Charted.")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            assert (await d.ask("marketing", "Chart the sales.")).status == "ok"
    (result,) = tool_results(srv.requests[1])
    assert not result.get("is_error")
    assert result["content"] == (
        "Sales, by week:\n"
        "[image (image/png, ~900 bytes): not passed to the model]\n"
        "[resource file:///data/sales.csv]\nweek,sales\n1,3\n"
        "[resource link 'full report': https://example.com/r/7]"
    )


async def test_a_server_whose_output_breaks_the_link_is_stopped_and_the_reason_told(
    tmp_path: Path,
) -> None:
    social = dict(tool_server(), limits={"message_mb": 1})
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": social}}})
    model = PerAgent(marketing=[reply_tool_use("garble", {}), reply_text("It broke.")])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("marketing", "Garble.")
            failed = await _wait_for(
                lambda: d.bus.recent({"mcp_server_failed"}, limit=10), "the failure event"
            )
    assert out.status == "ok", out
    (result,) = tool_results(srv.requests[1])
    reason = (
        "wrote a message of 2.0 MiB (more than its limits.message_mb, 1 MiB) whose request "
        "could not be told"
    )
    assert result["is_error"] and result["content"] == (
        f"MCP server 'social' failed during 'garble': it {reason}; it is being restarted — "
        "do not rely on its tools in this run"
    )
    assert failed[0].data["reason"].endswith(reason), failed[0].data
