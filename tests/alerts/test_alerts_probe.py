"""The pager at its edges: odd command arguments, groups, stale buttons, long texts,
Telegram's refusals, quiet hours in the company's zone, restarts — against the Bot API
stand-in with the real python-telegram-bot (helpers from test_alerts).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from companyd.admin._results import AskAnswer, Resumed
from companyd.alerts._service import EDIT_INTERVAL
from companyd.config import CompanyConfig, load_config

from .test_alerts import (
    CHAT,
    SECRET_HALF,
    TOKEN,
    Harness,
    RecordingAdmin,
    _command,
    _utc,
    answer,
    harness,
    make_config,
    sends,
)

GROUP = -1001234567890


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)


def _group_command(h: Harness, chat: int, text: str, chat_type: str = "supergroup") -> None:
    h.server.inject_update(
        {
            "message": {
                "message_id": 9000 + len(h.server.calls),
                "date": 1,
                "chat": {"id": chat, "type": chat_type, "title": "ops"},
                "from": {"id": CHAT, "is_bot": False, "first_name": "Op"},
                "text": text,
                "entities": [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}],
            }
        }
    )


def _config_in_zone(tmp_path: Path, api_url: str, timezone: str, **alerts: Any) -> CompanyConfig:
    make_config(tmp_path, api_url, **alerts)
    path = tmp_path / "company.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["company"]["timezone"] = timezone
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return load_config(path)


# ---------------------------------------------------------------------------------------
# Commands


@pytest.mark.anyio
async def test_missing_or_extra_arguments_get_a_usage_reply(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h, h.service():
        assert "usage: /pause AGENT (agents: ceo, cfo)" in await _command(h, "/pause cfo ceo")
        assert "usage: /resume AGENT" in await _command(h, "/resume")
        # /approve and /reject take any desk id since the founder's desk (a tool call, a
        # routine result or a proposal), so the usage names an ID, not a PROPOSAL_ID.
        assert "usage: /approve ID" in await _command(h, "/approve")
        assert "usage: /reject ID [REASON]" in await _command(h, "/reject")
        assert "usage: /retry TASK_ID" in await _command(h, "/retry")
        assert "usage: /ask AGENT question" in await _command(h, "/ask")
        assert "usage: /pause AGENT" in await _command(h, "/pause@companyd_test_bot")
        # The suffix and the command are matched without regard to case; extra words on a
        # command without arguments are ignored.
        assert "📊" in await _command(h, "/STATUS@Companyd_Test_Bot extra words")
        assert h.admin.calls == [("status",)]


@pytest.mark.anyio
async def test_commands_in_an_allowed_group_and_from_a_group_that_is_not(
    tmp_path: Path, token_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path) as h:
        cfg = make_config(
            tmp_path, h.server.url, telegram={"chat_ids": [CHAT, GROUP], "api_url": h.server.url}
        )
        async with h.service(cfg):
            _group_command(h, GROUP, "/status@companyd_test_bot")
            await h.until(lambda: len(h.bot_messages(GROUP)) == 1)
            assert "📊" in h.bot_messages(GROUP)[0].text
            # The operator (an allowed private chat) in a group nobody allowed: the chat
            # decides, not the person.
            _group_command(h, -100999, "/pause cfo", chat_type="group")
            await _command(h, "/help")
            assert ("pause", "cfo") not in h.admin.calls
            assert "ignored a message from chat -100999" in caplog.text


@pytest.mark.anyio
async def test_ask_keeps_the_lines_of_the_question(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h, h.service():
        h.server.inject_command(CHAT, "/ask cfo check these:\n- runway\n- burn")
        await h.until(lambda: any("runway is 14 months" in m.text for m in h.bot_messages()))
        assert ("ask", "cfo", "check these:\n- runway\n- burn") in h.admin.calls


class LongAnswerAdmin(RecordingAdmin):
    """Answers every ask with ``text`` ($0.50)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    async def ask(
        self,
        agent: str,
        question: str,
        timeout: float = 300.0,
        reply_to: str | None = None,
        task_id: str | None = None,
        via: str = "cli",
    ) -> AskAnswer:
        self.calls.append(("ask", agent, question))
        return answer(agent, self.text, cost_usd=0.5)


@pytest.mark.anyio
async def test_a_long_answer_to_ask_is_split_not_cut(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h:
        h.admin = LongAnswerAdmin(
            "\n".join(f"line {i}: " + "x" * 60 for i in range(150)) + "\nTHE END"
        )
        async with h.service():
            h.server.inject_command(CHAT, "/ask cfo the long story please")
            await h.until(lambda: any("— $0.5000 · run-1" in m.text for m in h.bot_messages()))
            parts = [m.text for m in h.bot_messages()[1:]]  # after "asking cfo…"
            assert len(parts) == 3
            assert all(len(p) <= 4096 for p in parts)
            joined = "\n".join(parts)
            assert "line 0: " in parts[0] and "THE END" in parts[-1]
            # Cut at line ends: every line arrives whole.
            for i in range(150):
                assert f"line {i}: " + "x" * 60 + "\n" in joined + "\n"
            # each part is a reply to the question (a reply to any of them is a follow-up)
            assert all(m.reply_to is not None for m in h.bot_messages()[1:])


@pytest.mark.anyio
async def test_an_answer_to_ask_past_three_messages_is_one_document_never_cut(
    tmp_path: Path, token_env: None
) -> None:
    # it went out as four messages, the last one clipped: lines 313-599, THE END and the
    # footer never arrived
    async with harness(tmp_path) as h:
        essay = "\n".join(f"line {i:04d} of the essay" + "." * 30 for i in range(600))
        h.admin = LongAnswerAdmin(essay + "\nTHE END")
        async with h.service():
            h.server.inject_command(CHAT, "/ask cfo a very long essay")
            await h.until(lambda: any(m.document is not None for m in h.bot_messages()))
            (doc,) = [m for m in h.bot_messages() if m.document is not None]
    assert doc.document is not None
    whole = doc.document.data.decode("utf-8")
    assert "line 0000 of the essay" in whole and "line 0599 of the essay" in whole
    assert "THE END" in whole and doc.reply_to is not None


@pytest.mark.anyio
async def test_special_characters_arrive_verbatim(tmp_path: Path, token_env: None) -> None:
    weird = "<b>bold</b> *star* _under_ [link](http://x) `tick` & ~tilde~ #1 |p| {c} >q"
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("routine_failed", "scheduler", routine="r_<1>*", reason=weird)
        await h.until(lambda: len(h.bot_messages()) == 1)
        assert weird in h.bot_messages()[0].text
        assert "r_<1>*" in h.bot_messages()[0].text
        assert all("parse_mode" not in c.params for c in h.server.calls_of("sendMessage"))


# ---------------------------------------------------------------------------------------
# Buttons


class NotPausedAdmin(RecordingAdmin):
    """The daemon's answer when the agent runs already (daemon/_main.py)."""

    async def resume(self, agent: str, via: str = "cli") -> Resumed:
        self.calls.append(("resume", agent))
        return Resumed(agent=agent, resumed=False, message=f"{agent} was not paused")


@pytest.mark.anyio
async def test_resume_after_the_agent_was_already_resumed_says_so(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h:
        h.admin = NotPausedAdmin()
        async with h.service():
            h.bus.emit("agent_paused", "roles", agent="cfo", reason="budget")
            await h.until(lambda: len(h.bot_messages()) == 1)
            msg = h.bot_messages()[0]
            resume = msg.buttons()[0][1]
            h.server.press_button(CHAT, msg.message_id, resume)
            await h.until(lambda: "cfo was not paused" in msg.text)
            assert "resumed cfo" not in msg.text
            assert h.server.callback_answers[0]["text"].startswith("cfo was not paused")
            # The button now offers what fits a running agent; the old one is stale.
            assert [label for label, _ in msg.buttons()] == ["⏸ Pause cfo"]
            h.server.press_button(CHAT, msg.message_id, resume)
            await h.until(lambda: len(h.server.callback_answers) == 2)
            assert h.server.callback_answers[1]["text"] == "this button is no longer active"
            assert h.admin.calls == [("resume", "cfo")]
            reply = await _command(h, "/resume cfo")
            assert reply.startswith("▶ cfo was not paused")


# ---------------------------------------------------------------------------------------
# Telegram's answers


@pytest.mark.anyio
async def test_a_deleted_coalesced_message_is_followed_by_a_new_one(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("restart", "companyd/agents", child="cfo", reason="error:A", restarts=1)
        await h.until(lambda: len(h.bot_messages()) == 1)
        h.server.messages.clear()  # the operator deleted it; Telegram forgets it
        h.bus.emit("restart", "companyd/agents", child="cfo", reason="error:B", restarts=2)
        await h.until(lambda: len(h.bot_messages()) == 1, step=EDIT_INTERVAL)
        new = h.bot_messages()[0]
        assert "cfo is crash-looping: 2 crashes" in new.text
        # The story goes on in the new message: edited, not sent again.
        h.bus.emit("restart", "companyd/agents", child="cfo", reason="error:C", restarts=3)
        await h.until(lambda: "3 crashes" in new.text, step=EDIT_INTERVAL)
        assert len(h.bot_messages()) == 1
        assert sends(h.server) == 2


@pytest.mark.anyio
async def test_edit_not_modified_and_blocked_on_edit(
    tmp_path: Path, token_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path) as h, h.service() as (svc, _):
        h.bus.emit("routine_failed", "scheduler", routine="r", reason="x")
        await h.until(lambda: len(h.bot_messages()) == 1)
        h.server.fail_next(
            status=400, description="Bad Request: message is not modified", method="editMessageText"
        )
        h.bus.emit("routine_failed", "scheduler", routine="r", reason="y")
        await h.until(lambda: len(h.server.calls_of("editMessageText")) == 1, step=EDIT_INTERVAL)
        # The stand-in records the call before the service has read its answer: wait for
        # the service to be done with it (nothing queued) before judging the outcome.
        await h.until(lambda: svc.snapshot()["queued"] == 0)
        assert svc.snapshot()["failed"] == 0
        h.server.fail_next(
            status=403,
            description="Forbidden: bot was blocked by the user",
            method="editMessageText",
        )
        h.bus.emit("routine_failed", "scheduler", routine="r", reason="z")
        await h.until(lambda: svc.snapshot()["failed"] == 1, step=EDIT_INTERVAL)
        assert "unblock the bot" in caplog.text
        # Neither stops the next alert.
        h.bus.emit("routine_failed", "scheduler", routine="other", reason="z")
        await h.until(lambda: len(h.bot_messages()) == 2, step=1.0)
        await h.until(lambda: svc.snapshot()["queued"] == 0)
        assert sends(h.server) == 2


@pytest.mark.anyio
async def test_429_beyond_the_rate_limiters_retries_waits_and_sends_once(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h, h.service() as (svc, _):
        h.server.fail_next(3, status=429, retry_after=1, method="sendMessage")
        h.bus.emit("task_quarantined", "roles", task_id="t-1", reason="x")
        await h.until(lambda: len(h.bot_messages()) == 1, step=0.5, timeout=20)
        assert [c.status for c in h.server.calls_of("sendMessage")] == [429, 429, 429, 200]
        await h.until(lambda: svc.snapshot()["telegram"] == "ok")


@pytest.mark.anyio
async def test_a_token_in_an_httpx_error_never_reaches_the_log(
    tmp_path: Path,
    token_env: None,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    async with harness(tmp_path) as h:
        cfg = make_config(tmp_path, "http://127.0.0.1:9")  # nothing listens: connect fails
        async with h.service(cfg, connected=False):
            h.bus.emit("api_spend_limit", "roles", message="limit")
            for _ in range(5):
                h.clock.advance(2)
                await asyncio.sleep(0.05)
            url = f"http://127.0.0.1:9/bot{TOKEN}/sendMessage"
            try:
                raise httpx.ConnectError(f"All connection attempts failed for {url}")
            except httpx.ConnectError as exc:
                logging.getLogger("some.library").warning("send failed: %r", exc, exc_info=True)
                logging.getLogger("some.library").error(exc)
    out, err = capfd.readouterr()
    assert "cannot reach Telegram" in caplog.text or "unreachable" in caplog.text
    assert "/bot<telegram-bot-token>/sendMessage" in caplog.text
    assert SECRET_HALF not in caplog.text + out + err
    for record in caplog.records:
        assert SECRET_HALF not in record.getMessage()


# ---------------------------------------------------------------------------------------
# Quiet hours and restarts


@pytest.mark.anyio
async def test_quiet_hours_over_midnight_in_the_company_zone(
    tmp_path: Path, token_env: None
) -> None:
    # 22:00-06:00 in New York is 03:00-11:00 UTC in January.
    async with harness(tmp_path, start=_utc("2027-01-15T02:30:00")) as h:
        cfg = _config_in_zone(
            tmp_path,
            h.server.url,
            "America/New_York",
            quiet_hours={"start": "22:00", "end": "06:00"},
        )
        async with h.service(cfg) as (svc, _):
            h.bus.emit("routine_failed", "scheduler", routine="a", reason="x")  # 21:30 local
            await h.until(lambda: len(h.bot_messages()) == 1)
            h.clock.advance(3600)  # 22:30 local
            h.bus.emit("routine_failed", "scheduler", routine="b", reason="x")
            h.bus.emit("api_spend_limit", "roles", message="limit")  # critical: at once
            await h.until(lambda: len(h.bot_messages()) == 2)
            assert "spend limit" in h.bot_messages()[1].text
            assert svc.snapshot()["held"] == 1
            h.clock.advance(_utc("2027-01-15T10:59:00") - h.clock.time())  # 05:59 local
            await asyncio.sleep(0.1)
            assert len(h.bot_messages()) == 2
            h.clock.advance(61)
            await h.until(lambda: len(h.bot_messages()) == 3)
            assert "routine b failed" in h.bot_messages()[2].text


@pytest.mark.anyio
async def test_held_alerts_survive_a_restart_and_go_out_once(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path, start=_utc("2027-01-15T23:30:00")) as h:
        cfg = make_config(tmp_path, h.server.url, quiet_hours={"start": "23:00", "end": "07:00"})
        async with h.service(cfg) as (svc, _):
            h.bus.emit("routine_failed", "scheduler", routine="a", reason="x")
            h.bus.emit("routine_failed", "scheduler", routine="b", reason="x")
            await h.until(lambda: svc.snapshot()["held"] == 2)
        async with h.service(cfg) as (svc, _):
            assert svc.snapshot()["held"] == 2
            h.clock.advance(_utc("2027-01-16T07:00:00") - h.clock.time())
            await h.until(lambda: len(h.bot_messages()) == 1)
        async with h.service(cfg):
            h.clock.advance(60)
            await asyncio.sleep(0.2)
        assert len(h.bot_messages()) == 1
        assert "2 alerts" in h.bot_messages()[0].text


@pytest.mark.anyio
async def test_plain_text_gets_a_hint_and_an_unknown_agent_is_said_first(
    tmp_path: Path, token_env: None
) -> None:
    # "hello again" got no answer at all; "/ask nobody hi" said "asking nobody…" first
    async with harness(tmp_path) as h, h.service():
        h.server.inject_command(CHAT, "hello again")
        await h.until(lambda: len(h.bot_messages()) == 1)
        assert h.bot_messages()[0].text.startswith("I answer commands (/help lists them)")
        h.server.inject_command(CHAT, "/ask nobody hi")
        await h.until(lambda: len(h.bot_messages()) == 2)
        assert h.bot_messages()[1].text == "⚠️ unknown agent 'nobody'; agents: ceo, cfo"
        assert not any(c[0] == "ask" for c in h.admin.calls)
