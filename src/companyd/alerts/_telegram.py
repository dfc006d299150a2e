"""python-telegram-bot at the edge: settings, the secret filter, the Application (private).

Part of :mod:`companyd.alerts._service`, and the only place besides it that imports ``telegram``.

The bot token is a secret that leaks easily: it is part of every Bot API URL (httpx logs each
request URL at INFO), and python-telegram-bot puts it into ``InvalidToken`` messages. So the
token is registered with :func:`protect` before the first request; the one redactor of
:mod:`companyd._secrets` then replaces it in every log record, whichever logger (or library)
produced it, and :func:`redact` cleans any text we show or store ourselves.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from companyd._fs import NotRegularFile, credential_path, read_credential
from companyd._secrets import protect, redact
from companyd.config import AlertsSpec

if TYPE_CHECKING:  # imported where used: the library is slow to import and the CLI is not
    from telegram.error import RetryAfter
    from telegram.ext import Application

__all__ = [
    "DEFAULT_API_URL",
    "TelegramSettings",
    "build_application",
    "protect",
    "quiet_library_loggers",
    "redact",
    "resolve_settings",
    "retry_after_seconds",
]

DEFAULT_API_URL = "https://api.telegram.org"

# ---------------------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class TelegramSettings:
    """Where alerts go: the bot token, the operator's chat ids and the Bot API root."""

    token: str = ""
    chat_ids: tuple[int, ...] = ()
    api_url: str = DEFAULT_API_URL
    token_source: str = ""

    def __repr__(self) -> str:  # the token must not show in reprs either
        return (
            f"TelegramSettings(token=<{self.token_source}>, chat_ids={self.chat_ids!r}, "
            f"api_url={self.api_url!r})"
        )


def resolve_settings(
    spec: AlertsSpec, environ: Mapping[str, str] | None = None
) -> TelegramSettings | str:
    """The Telegram settings from company.yaml's ``alerts.telegram`` and the environment, or
    the reason (a sentence for the operator) why alerts cannot go to Telegram.

    The token comes from the environment variable ``bot_token_env``, else from the systemd
    credential file ``$CREDENTIALS_DIRECTORY/<bot_token_credential>``. Chat ids are
    ``chat_ids`` plus the comma-separated ``$<chat_ids_env>``. Reads one small file.
    """
    env = os.environ if environ is None else environ
    tg = spec.telegram
    if tg is None:
        return "company.yaml has no 'alerts.telegram' section"
    token, source = "", ""
    if tg.bot_token_env and env.get(tg.bot_token_env, "").strip():
        token, source = env[tg.bot_token_env].strip(), f"${tg.bot_token_env}"
    elif tg.bot_token_credential and (path := credential_path(tg.bot_token_credential, env)):
        try:
            token = read_credential(path)
            source = f"credential {tg.bot_token_credential!r}"
        except NotRegularFile as exc:
            return (
                f"no Telegram bot token: {str(path)!r} is not a regular file ({exc.kind}); "
                "point LoadCredential= at the file that holds the token"
            )
        except (OSError, ValueError):
            token = ""
    if not token:
        where = []
        if tg.bot_token_env:
            where.append(f"${tg.bot_token_env} is unset")
        if tg.bot_token_credential:
            cred = credential_path(tg.bot_token_credential, env)
            if cred is not None:
                where.append(f"{str(cred)!r} is not readable")
            else:
                where.append(
                    f"no systemd credential {tg.bot_token_credential!r} ($CREDENTIALS_DIRECTORY "
                    "is unset)"
                )
        return (
            "no Telegram bot token: " + " and ".join(where) + "; set the variable or add "
            "LoadCredential= to the unit"
        )
    chats: list[int] = list(tg.chat_ids)
    if tg.chat_ids_env:
        raw = env.get(tg.chat_ids_env, "")
        for part in raw.replace(";", ",").split(","):
            part = part.strip()
            if not part:
                continue
            try:
                chats.append(int(part))
            except ValueError:
                return (
                    f"${tg.chat_ids_env} holds {part!r}, which is not a chat id; expected "
                    "comma-separated integers such as 123456789,-1001234567890"
                )
    chats = list(dict.fromkeys(chats))
    if not chats:
        hint = f" (${tg.chat_ids_env} is empty)" if tg.chat_ids_env else ""
        return (
            f"no chat to send to{hint}: set 'alerts.telegram.chat_ids' or "
            "'alerts.telegram.chat_ids_env' to the operator's chat id"
        )
    api = (tg.api_url or DEFAULT_API_URL).rstrip("/")
    return TelegramSettings(
        token=token, chat_ids=tuple(chats), api_url=api, token_source=source or "token"
    )


# ---------------------------------------------------------------------------------------
# The Application

TelegramApp: TypeAlias = "Application[Any, Any, Any, Any, Any, Any]"


def build_application(settings: TelegramSettings, *, poll_timeout: float) -> TelegramApp:
    """A python-telegram-bot Application for our own event loop (never ``run_polling``).

    AIORateLimiter retries a 429 twice (its default is not at all); no JobQueue (companyd
    has one scheduler, and it is not this one); no Updater (its polling stops for good on a
    401/404, so companyd runs its own getUpdates loop); timeouts are short so a dead network shows
    up as an error the outbox handles, not as a hang.
    """
    from telegram.ext import AIORateLimiter, ApplicationBuilder

    protect(settings.token)
    builder = (
        ApplicationBuilder()
        .token(settings.token)
        .base_url(f"{settings.api_url}/bot")
        .base_file_url(f"{settings.api_url}/file/bot")
        .rate_limiter(AIORateLimiter(max_retries=2))
        .job_queue(None)
        .updater(None)  # companyd polls getUpdates itself (alerts.link.Link._poll)
        .connect_timeout(10.0)
        .read_timeout(15.0)
        .write_timeout(15.0)
        .pool_timeout(10.0)
        .get_updates_read_timeout(poll_timeout + 10.0)
    )
    app: TelegramApp = builder.build()
    return app


def retry_after_seconds(exc: RetryAfter) -> float:
    """The wait Telegram asked for, in seconds (PTB 22 warns when the attribute is read as an
    int; the value is the same).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value: Any = exc.retry_after
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def quiet_library_loggers() -> None:
    """``httpx`` logs every request (a long poll every few seconds) at INFO, URL and token
    included: keep it to warnings unless the operator configured that logger.
    """
    lg = logging.getLogger("httpx")
    if lg.level == logging.NOTSET:
        lg.setLevel(logging.WARNING)
