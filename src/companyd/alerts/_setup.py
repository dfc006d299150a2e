"""``companyd telegram setup``: from a bot token to a chat that receives the company's news.

:func:`telegram_setup` does what a founder would otherwise piece together from three web
pages, against the Bot API company.yaml points at (``alerts.telegram.api_url``; Telegram's
own by default):

1. **the token**: resolved as the daemon does (:func:`companyd.alerts._telegram.
   resolve_settings`: ``$TELEGRAM_BOT_TOKEN`` or the systemd credential), checked with
   ``getMe``, which names the bot;
2. **the chat**: the founder sends any message to the bot; ``getUpdates`` (long polls, all
   within ``wait`` seconds) reads the newest message and its chat id; the updates read are
   then confirmed, so the daemon does not take that "hello" for a command;
3. **where the company reads it**: the line ``<chat_ids_env>=<id>`` (``TELEGRAM_CHAT_ID``
   unless company.yaml names another variable) is written into the service's environment
   file (``env_file``: other lines kept, written atomically, 0600), or only returned for
   the caller to print;
4. **a test message** to that chat.

Each failure is a :class:`SetupFailed` whose message says what to do; the token never
appears in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from companyd._fs import write_atomic
from companyd.alerts._link import telegram_error_text
from companyd.alerts._telegram import protect, quiet_library_loggers, redact, resolve_settings
from companyd.config import AlertsSpec, TelegramSpec
from companyd.errors import CompanydError

__all__ = [
    "DEFAULT_CHAT_ENV",
    "SetupFailed",
    "SetupResult",
    "default_env_file",
    "set_env_line",
    "telegram_setup",
]

#: The variable the chat id goes in when company.yaml names none.
DEFAULT_CHAT_ENV = "TELEGRAM_CHAT_ID"


class SetupFailed(CompanydError):
    """The setup stopped; the message says why and what to do (exit 1)."""


@dataclass(frozen=True)
class SetupResult:
    """What the setup found and did.

    Attributes:
        bot: the bot's ``@username``.
        chat_id: the chat the founder wrote from.
        sender: who wrote (first name or ``@username``), and what.
        env_name: the variable that holds the chat id.
        env_line: ``NAME=<chat id>``.
        env_file: the file the line was written to (None: the caller prints it).
        config_names_env: company.yaml already reads the chat ids from ``env_name``.
        test_message_id: the id of the test message sent.
    """

    bot: str
    chat_id: int
    sender: str
    env_name: str
    env_line: str
    env_file: Path | None
    config_names_env: bool
    test_message_id: int


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")


def set_env_line(path: Path, name: str, value: str) -> None:
    """Set ``name=value`` in the environment file ``path`` (systemd's ``EnvironmentFile=``
    format): replace the line that sets ``name``, or append one; every other line is kept.
    Written atomically, 0600 (the file usually holds secrets too).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    out: list[str] = []
    done = False
    for line in lines:
        m = _ENV_LINE.match(line)
        if m and m.group(1) == name:
            if not done:
                out.append(f"{name}={value}")
                done = True
            continue
        out.append(line)
    if not done:
        out.append(f"{name}={value}")
    write_atomic(path, ("\n".join(out) + "\n").encode("utf-8"))


async def telegram_setup(
    spec: AlertsSpec,
    *,
    company: str,
    environ: Mapping[str, str] | None = None,
    env_file: Path | None = None,
    wait: float = 120.0,
    say: Callable[[str], None] = print,
) -> SetupResult:
    """Run the four steps (module docstring), telling the founder what to do through ``say``.

    Args:
        spec: company.yaml's ``alerts`` (without ``telegram:`` the defaults are used:
            ``$TELEGRAM_BOT_TOKEN`` or the credential ``telegram_bot_token``).
        company: the company's name, for the test message.
        environ: the environment to read the token from (default: this process's).
        env_file: the service's environment file to write the chat id into; None to only
            return the line.
        wait: seconds to wait for the founder's message.
        say: where the instructions go.

    Raises:
        SetupFailed: no token, a refused token, no message within ``wait``, another program
            reading the bot's updates, or the test message not delivered.
    """
    tg = spec.telegram or TelegramSpec()
    # only the token and the API root matter here: the chat is what the setup finds
    probe = tg.model_copy(update={"chat_ids": (0,), "chat_ids_env": None})
    settings = await asyncio.to_thread(
        resolve_settings, spec.model_copy(update={"telegram": probe}), environ
    )
    if isinstance(settings, str):
        raise SetupFailed(
            f"{settings}. Create a bot first: in Telegram, talk to @BotFather, send /newbot "
            "and follow it; it answers with a token like 123456:AA…. Then give it to this "
            "command as the service will have it: `export TELEGRAM_BOT_TOKEN=…` (or the "
            "credential file /etc/companyd/telegram_bot_token, docs/deploy.md) and run it again"
        )
    protect(settings.token)
    quiet_library_loggers()
    # Imported here, as in alerts.check: python-telegram-bot is slow to import.
    from telegram import Bot
    from telegram.error import Conflict, TelegramError

    bot = Bot(
        settings.token,
        base_url=f"{settings.api_url}/bot",
        base_file_url=f"{settings.api_url}/file/bot",
    )
    env_name = tg.chat_ids_env or DEFAULT_CHAT_ENV
    # the finally below also closes the connection a refused token's getMe left open
    try:
        try:
            async with asyncio.timeout(30):
                await bot.initialize()  # getMe
        except TimeoutError:
            raise SetupFailed(
                f"no answer from the Bot API at {settings.api_url!r} within 30 s; check the "
                "network (and alerts.telegram.api_url)"
            ) from None
        except (TelegramError, OSError) as exc:
            raise SetupFailed(
                redact(
                    f"the bot token from {settings.token_source} was not accepted: "
                    f"{telegram_error_text(exc)}; copy it again from @BotFather (/token)"
                )
            ) from None
        name = f"@{bot.username}" if bot.username else str(bot.id)
        say(f"the token works: the bot is {name} ({bot.first_name})")
        say(
            f"now open Telegram, find {name} and send it any message (e.g. 'hello'); "
            f"waiting up to {wait:g} s …"
        )
        chat_id, sender, last = await _first_message(bot, wait, Conflict, TelegramError)
        say(f"received {sender} — chat id {chat_id}")
        # confirm what was read, so the daemon does not take it for a command (a failure is
        # harmless: the daemon would only see one more "hello")
        with contextlib.suppress(TelegramError):
            await bot.get_updates(offset=last + 1, timeout=0)
        line = f"{env_name}={chat_id}"
        if env_file is not None:
            try:
                await asyncio.to_thread(set_env_line, env_file, env_name, str(chat_id))
            except OSError as exc:
                raise SetupFailed(
                    f"cannot write {str(env_file)!r}: {exc.strerror or exc}; run as root "
                    f"(sudo) or add the line {line} to it yourself"
                ) from None
        try:
            sent = await bot.send_message(
                chat_id,
                f"companyd is connected: {company}'s results, approvals and alerts will "
                "come to this chat.",
            )
        except TelegramError as exc:
            raise SetupFailed(
                redact(
                    f"the test message to chat {chat_id} was not delivered: "
                    f"{telegram_error_text(exc)}"
                )
            ) from None
        return SetupResult(
            bot=name,
            chat_id=chat_id,
            sender=sender,
            env_name=env_name,
            env_line=line,
            env_file=env_file,
            config_names_env=tg.chat_ids_env is not None or chat_id in tg.chat_ids,
            test_message_id=sent.message_id,
        )
    finally:
        with contextlib.suppress(Exception):  # closing the pool must not hide the outcome
            await bot.shutdown()


async def _first_message(
    bot: object, wait: float, conflict: type[Exception], error: type[Exception]
) -> tuple[int, str, int]:
    """The newest message's (chat id, "who: 'text'", update id) within ``wait`` seconds."""
    from telegram import Bot

    assert isinstance(bot, Bot)
    deadline = time.monotonic() + wait
    offset: int | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SetupFailed(
                f"no message reached the bot within {wait:g} s; send it a message in "
                "Telegram (open the bot's chat and press Start, or write 'hello'), then run "
                "this again (--wait gives more time)"
            )
        poll = max(0, min(10, int(remaining)))
        try:
            async with asyncio.timeout(poll + 15):
                updates = await bot.get_updates(offset=offset, timeout=poll)
        except TimeoutError:
            continue
        except conflict:
            raise SetupFailed(
                "another program is reading this bot's messages (a running companyd?); "
                "stop it while you run setup (`sudo systemctl stop companyd`), then start it "
                "again"
            ) from None
        except error as exc:
            raise SetupFailed(
                redact(f"cannot read the bot's messages: {telegram_error_text(exc)}")
            ) from None
        found = [u for u in updates if u.effective_message is not None and u.effective_chat]
        if updates:
            offset = updates[-1].update_id + 1
        if found:
            u = found[-1]
            msg, chat = u.effective_message, u.effective_chat
            assert msg is not None and chat is not None
            user = u.effective_user
            who = (
                f"@{user.username}"
                if user is not None and user.username
                else (user.first_name if user is not None else chat.type)
            )
            text = (msg.text or "")[:40]
            return int(chat.id), f"a message from {who}: {text!r}", int(updates[-1].update_id)


def default_env_file(config_path: Path) -> Path:
    """The service's environment file next to company.yaml (``/etc/companyd/companyd.env``
    for the shipped unit, which reads it with ``EnvironmentFile=-``).
    """
    return Path(os.path.dirname(os.path.abspath(config_path))) / "companyd.env"
