"""The Bot API stand-in answers the real python-telegram-bot as Telegram does."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, InputFile, ReplyParameters
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter

from companyd.testing.bot_api import BotApiControl, BotApiServer, DownMode

TOKEN = "123456789:AAH-stand-in-test-token-0123456789abc"


def _bot(server: BotApiServer, token: str = TOKEN) -> Bot:
    return Bot(token, base_url=f"{server.url}/bot", base_file_url=f"{server.url}/file/bot")


@pytest.mark.anyio
async def test_send_edit_and_markup_are_recorded() -> None:
    async with asyncio.timeout(10), BotApiServer(token=TOKEN) as server, _bot(server) as bot:
        assert bot.username == "companyd_test_bot"
        assert bot.id == 123456789
        markup = InlineKeyboardMarkup([[InlineKeyboardButton("Pause cfo", callback_data="7:1")]])
        msg = await bot.send_message(111, "cfo crashed", reply_markup=markup)
        assert msg.chat.id == 111
        assert msg.text == "cfo crashed"
        # As in Telegram, editing the text without a markup removes the buttons.
        await bot.edit_message_text("cfo crashed ×2", chat_id=111, message_id=msg.message_id)
        resume = InlineKeyboardMarkup([[InlineKeyboardButton("Resume", callback_data="7:2")]])
        await bot.edit_message_reply_markup(
            chat_id=111, message_id=msg.message_id, reply_markup=resume
        )

        sent = server.find_message(111, msg.message_id)
        assert sent is not None
        assert sent.text == "cfo crashed ×2"
        assert sent.buttons() == [("Resume", "7:2")]
        assert [e["method"] for e in sent.edits] == ["editMessageText", "editMessageReplyMarkup"]
        assert sent.edits[0]["reply_markup"] is None
        assert server.texts(111) == ["cfo crashed ×2"]
        assert [c.method for c in server.calls] == [
            "getMe",
            "sendMessage",
            "editMessageText",
            "editMessageReplyMarkup",
        ]

        with pytest.raises(BadRequest, match="not modified"):
            await bot.edit_message_text(
                "cfo crashed ×2", chat_id=111, message_id=msg.message_id, reply_markup=resume
            )
        with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
            await bot.edit_message_text("x", chat_id=111, message_id=999)


@pytest.mark.anyio
async def test_first_send_records_buttons() -> None:
    async with asyncio.timeout(10), BotApiServer() as server, _bot(server) as bot:
        markup = InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton("A", callback_data="1:1"),
                    InlineKeyboardButton("B", callback_data="1:2"),
                ]
            ]
        )
        msg = await bot.send_message(
            -100200, "two buttons", reply_markup=markup, disable_notification=True
        )
        sent = server.find_message(-100200, msg.message_id)
        assert sent is not None
        assert sent.buttons() == [("A", "1:1"), ("B", "1:2")]
        assert sent.disable_notification is True


@pytest.mark.anyio
async def test_get_updates_long_poll_returns_injected_command_and_honours_offset() -> None:
    async with asyncio.timeout(10), BotApiServer(token=TOKEN) as server, _bot(server) as bot:
        poll = asyncio.create_task(bot.get_updates(offset=0, timeout=5))
        await asyncio.sleep(0.05)
        assert not poll.done()  # it waits for an update
        server.inject_command(111, "/pause cfo")
        updates = await poll
        assert len(updates) == 1
        message = updates[0].message
        assert message is not None
        assert message.text == "/pause cfo"
        assert message.chat.id == 111
        assert message.entities[0].type == "bot_command"
        assert message.entities[0].length == len("/pause")

        # Not confirmed yet: the same update again.
        again = await bot.get_updates(offset=0, timeout=0)
        assert [u.update_id for u in again] == [updates[0].update_id]
        # Confirmed by the offset: gone.
        assert await bot.get_updates(offset=updates[0].update_id + 1, timeout=0) == ()


@pytest.mark.anyio
async def test_a_waiting_long_poll_is_seen_at_once_though_recorded_only_when_it_returns() -> None:
    async with asyncio.timeout(10), BotApiServer(token=TOKEN) as server, _bot(server) as bot:
        assert server.polling == 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        poll = asyncio.create_task(bot.get_updates(offset=0, timeout=8))
        # a test playing the founder writes once the program listens: long before the
        # poll's 8 s are over, and before the poll is in ``calls``
        await server.wait_for(lambda: server.polling > 0, timeout=4)
        assert server.polling == 1 and server.calls_of("getUpdates") == []
        server.inject_command(111, "hello")
        updates = await poll
        assert [u.message.text for u in updates if u.message] == ["hello"]
        assert loop.time() - started < 4
        assert server.polling == 0 and len(server.calls_of("getUpdates")) == 1
        # a poll answered at once (an update waiting) never counts as polling
        assert len(await bot.get_updates(offset=0, timeout=5)) == 1
        assert server.polling == 0


@pytest.mark.anyio
async def test_button_press_arrives_as_callback_query_and_answer_is_recorded() -> None:
    async with asyncio.timeout(10), BotApiServer() as server, _bot(server) as bot:
        markup = InlineKeyboardMarkup([[InlineKeyboardButton("Approve", callback_data="3:1")]])
        msg = await bot.send_message(111, "proposal p-1", reply_markup=markup)
        _, cq_id = server.press_button(111, msg.message_id, "3:1", user_id=42)
        (update,) = await bot.get_updates(timeout=1)
        query = update.callback_query
        assert query is not None
        assert query.id == cq_id
        assert query.data == "3:1"
        assert query.from_user.id == 42
        assert query.message is not None
        assert query.message.chat.id == 111
        assert query.message.message_id == msg.message_id
        await bot.answer_callback_query(query.id, text="approved")
        assert server.callback_answers == [{"callback_query_id": cq_id, "text": "approved"}]
        with pytest.raises(KeyError, match="no message 77"):
            server.press_button(111, 77, "x")


@pytest.mark.anyio
async def test_commands_and_webhook_calls() -> None:
    from telegram import BotCommand

    async with asyncio.timeout(10), BotApiServer() as server, _bot(server) as bot:
        assert await bot.set_my_commands([BotCommand("status", "the status")])
        assert [c.command for c in await bot.get_my_commands()] == ["status"]
        assert server.commands == [{"command": "status", "description": "the status"}]
        assert await bot.delete_webhook()


@pytest.mark.anyio
async def test_wrong_token_is_rejected() -> None:
    async with asyncio.timeout(10), BotApiServer(token=TOKEN) as server:
        bot = _bot(server, "987654:some-other-token-zzzzzzzzzzzzzzzzzz")
        try:
            with pytest.raises(InvalidToken):
                await bot.initialize()
        finally:
            await bot.shutdown()
        assert server.calls[-1].status == 401


@pytest.mark.anyio
async def test_429_with_retry_after_and_other_injected_errors() -> None:
    async with asyncio.timeout(10), BotApiServer() as server, _bot(server) as bot:
        server.fail_next(status=429, retry_after=3)
        with pytest.raises(RetryAfter) as info:
            await bot.send_message(111, "first")
        assert "3" in str(info.value)
        server.fail_next(status=403, description="Forbidden: bot was blocked by the user")
        with pytest.raises(Forbidden, match="blocked"):
            await bot.send_message(111, "second")
        server.fail_next(method="editMessageText", status=500)
        msg = await bot.send_message(111, "third")  # a failure for another method waits
        with pytest.raises(NetworkError):
            await bot.edit_message_text("x", chat_id=111, message_id=msg.message_id)
        assert server.texts() == ["third"]
        assert [c.status for c in server.calls_of("sendMessage")] == [429, 403, 200]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["refuse", "502"])
async def test_outage_and_recovery(mode: DownMode) -> None:
    async with asyncio.timeout(10), BotApiServer() as server, _bot(server) as bot:
        port = server.port
        await bot.send_message(111, "before")
        await server.go_down(mode)
        with pytest.raises(NetworkError):
            await bot.send_message(111, "during")
        await server.go_up()
        assert server.port == port
        await bot.send_message(111, "after")
        assert server.texts() == ["before", "after"]


@pytest.mark.anyio
async def test_outage_ends_a_pending_long_poll() -> None:
    async with asyncio.timeout(10), BotApiServer() as server, _bot(server) as bot:
        poll = asyncio.create_task(bot.get_updates(timeout=30))
        await server.wait_for(lambda: server.in_flight > 0)
        await server.go_down("refuse")
        with pytest.raises(NetworkError):
            await poll


@pytest.mark.anyio
async def test_separate_process_with_control_api() -> None:
    """``python -m companyd.testing.bot_api``: a real subprocess driven over HTTP."""
    env = {**os.environ, "STANDIN_TOKEN": TOKEN}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "companyd.testing.bot_api",
        "--token-env",
        "STANDIN_TOKEN",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        async with asyncio.timeout(20):
            assert proc.stdout is not None
            info = json.loads(await proc.stdout.readline())
            assert info["pid"] == proc.pid
            async with BotApiControl(info["control_url"]) as control:
                bot = Bot(TOKEN, base_url=f"{info['api_url']}/bot")
                async with bot:
                    await bot.send_message(111, "hello from the daemon")
                    update_id = await control.command(111, "/status")
                    (update,) = await bot.get_updates(timeout=2)
                    assert update.update_id == update_id
                    assert update.message is not None
                    assert update.message.text == "/status"

                    messages = await control.messages()
                    assert [(m["chat_id"], m["text"]) for m in messages] == [
                        (111, "hello from the daemon")
                    ]
                    await control.press(111, messages[0]["message_id"], "1:1")
                    (press,) = await bot.get_updates(offset=update.update_id + 1, timeout=2)
                    assert press.callback_query is not None
                    assert press.callback_query.data == "1:1"

                    await control.down("refuse")
                    assert (await control.state())["up"] is False
                    with pytest.raises(NetworkError):
                        await bot.send_message(111, "lost?")
                    await control.up()
                    await control.fail(status=429, retry_after=1)
                    with pytest.raises(RetryAfter):
                        await bot.send_message(111, "limited")
                    await bot.send_message(111, "back")
                    methods = [c["method"] for c in await control.calls()]
                    assert methods.count("sendMessage") == 3
                    assert [m["text"] for m in await control.messages()][-1] == "back"
    finally:
        proc.terminate()
        async with asyncio.timeout(10):
            _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert TOKEN not in err.decode()


@pytest.mark.anyio
async def test_send_document_keeps_the_uploaded_file_and_its_caption() -> None:
    body = "# daily-report\n\nline one\r\nline two — ünïcode\n" + "x" * 20_000 + "\n"
    async with asyncio.timeout(10), BotApiServer(token=TOKEN) as server, _bot(server) as bot:
        first = await bot.send_message(111, "before")
        msg = await bot.send_document(
            111,
            InputFile(body.encode("utf-8"), filename="daily-report-run-1.md"),
            caption="📝 daily-report — cfo\n123",
            reply_parameters=ReplyParameters(message_id=first.message_id),
        )
        assert msg.document is not None and msg.document.file_name == "daily-report-run-1.md"
        assert msg.document.file_size == len(body.encode("utf-8"))
        assert msg.caption == "📝 daily-report — cfo\n123" and msg.text is None
        sent = server.find_message(111, msg.message_id)
        assert sent is not None and sent.document is not None
        assert sent.document.file_name == "daily-report-run-1.md"
        assert sent.document.data.decode("utf-8") == body  # byte for byte
        assert sent.text == "📝 daily-report — cfo\n123"  # the caption, where tests look
        assert sent.reply_to == first.message_id
        call = server.calls_of("sendDocument")[0]
        assert call.params["document"] == {
            "file_name": "daily-report-run-1.md",
            "mime_type": sent.document.mime_type,
            "size": len(body.encode("utf-8")),
        }
        json.dumps([m.to_dict() for m in server.messages])  # the control API can list it

        # a reply to the document carries its caption, as Telegram's does
        _, reply = server.inject_reply(111, msg.message_id, "shorter?")
        updates = await bot.get_updates(timeout=0)
        original = updates[-1].message.reply_to_message  # type: ignore[union-attr]
        assert original is not None and original.caption == "📝 daily-report — cfo\n123"
        assert original.document is not None and reply > msg.message_id

        with pytest.raises(BadRequest, match=r"(?i)caption is too long"):
            await bot.send_document(111, InputFile(b"x", filename="a.md"), caption="c" * 1025)
        with pytest.raises(BadRequest, match=r"(?i)file must be non-empty"):
            await bot.send_document(111, InputFile(b"", filename="a.md"))
