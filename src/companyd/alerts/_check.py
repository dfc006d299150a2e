"""Is the pager set up right? The bot token and each chat, asked of Telegram (for doctor).

:func:`check_telegram` resolves the settings as the daemon does
(:func:`companyd.alerts._telegram.resolve_settings`), then asks the Bot API ``getMe`` (is
the token valid?) and ``getChat`` for every configured chat id (can the bot reach it? A
chat the operator never opened with the bot is "chat not found"). Nothing is sent to
anyone. Every failure is a sentence with the token redacted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from companyd.alerts._link import telegram_error_text
from companyd.alerts._telegram import protect, quiet_library_loggers, redact, resolve_settings
from companyd.config import AlertsSpec

__all__ = ["TelegramCheck", "check_telegram"]


@dataclass
class TelegramCheck:
    """What Telegram answered.

    Attributes:
        configured: False when company.yaml or the environment sets no Telegram (then
            ``problem`` says why).
        bot: the bot's ``@username`` when the token is valid.
        problem: why the token or the Bot API failed (None when ``getMe`` answered).
        chats: chat id → None when reachable, else why not.
    """

    configured: bool = True
    bot: str | None = None
    problem: str | None = None
    chats: dict[int, str | None] = field(default_factory=dict)


async def check_telegram(
    spec: AlertsSpec, environ: Mapping[str, str] | None = None, *, timeout: float = 20.0
) -> TelegramCheck:
    """``getMe`` and ``getChat`` for each chat id, within ``timeout`` seconds in all."""
    settings = await asyncio.to_thread(resolve_settings, spec, environ)
    if isinstance(settings, str):
        return TelegramCheck(configured=False, problem=settings)
    protect(settings.token)
    quiet_library_loggers()
    # Imported here: python-telegram-bot is slow to import and most commands never need it
    # (the same reason as in alerts.telegram.build_application).
    from telegram import Bot
    from telegram.error import BadRequest, TelegramError

    out = TelegramCheck()
    bot = Bot(
        settings.token,
        base_url=f"{settings.api_url}/bot",
        base_file_url=f"{settings.api_url}/file/bot",
    )
    try:
        async with asyncio.timeout(timeout):
            async with bot:  # initialize() is getMe
                out.bot = f"@{bot.username}" if bot.username else str(bot.id)
                for chat in settings.chat_ids:
                    try:
                        await bot.get_chat(chat)
                        out.chats[chat] = None
                    except BadRequest as exc:  # a NetworkError to the library; not to us
                        out.chats[chat] = f"400 Bad Request: {redact(exc.message)}"
                    except TelegramError as exc:
                        out.chats[chat] = telegram_error_text(exc)
    except TimeoutError:
        out.problem = f"no answer from the Bot API at {settings.api_url!r} within {timeout:g} s"
    except (TelegramError, OSError) as exc:
        out.problem = telegram_error_text(exc)
    except Exception as exc:  # an answer the library cannot read: a failed check, no crash
        out.problem = f"unexpected answer from the Bot API: {type(exc).__name__}: {exc}"
    if out.problem is not None:
        out.problem = redact(out.problem)
    return out
