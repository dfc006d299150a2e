"""The Telegram link: the bot Application in our loop, polling for commands, its health.

:class:`Link` connects to the Bot API (retrying in the background, so the pager is ready
whether or not Telegram answers), announces the commands, and long-polls ``getUpdates`` with
its own loop: every failure — a refused token, a wrong URL, a broken network, a 409 from
another poller — is retried with backoff, an update it cannot read is skipped, and the
receiving half's state (``commands``: starting / ok / failing) is kept for status. Commands
failing for :data:`COMMANDS_ALERT_AFTER` while sending works raise one alert. The updates go
to the :class:`Handlers` (the operator's commands); the sending half is told through
:class:`SendSide` when Telegram is reached and why it is not.

:func:`telegram_error_text` words a failed Bot API call for status and logs, never with the
token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

from companyd.alerts._ops import COMMANDS
from companyd.alerts._telegram import (
    TelegramSettings,
    build_application,
    redact,
    retry_after_seconds,
)
from companyd.clock import Clock
from companyd.events import EventBus, TelegramCommandsFailing, TelegramCommandsRecovered

if TYPE_CHECKING:
    from telegram import Update

    from companyd.alerts._telegram import TelegramApp

# python-telegram-bot is imported where it is used, not here: every `companyd` command loads
# the pager's modules (for `notify-failure`), and the library takes most of a second to import.

__all__ = [
    "ALLOWED_UPDATES",
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "COMMANDS_ALERT_AFTER",
    "FLUSH_TIMEOUT",
    "POLL_BACKOFF_MAX",
    "POLL_TIMEOUT",
    "SEND_TIMEOUT",
    "TOKEN_RETRY",
    "Handlers",
    "Link",
    "SendSide",
    "telegram_error_text",
]

# One logger for the whole pager, as before the split into modules: operators (and the
# end-to-end test) filter the daemon's log on its name.
log = logging.getLogger("companyd.alerts.service")

#: Backoff between delivery attempts while Telegram is unreachable (doubling, capped).
BACKOFF_MIN = 1.0
BACKOFF_MAX = 30.0
#: Retry interval after Telegram rejected the token (a human must fix it; do not hammer).
TOKEN_RETRY = 300.0
#: Long-poll timeout for getUpdates, seconds.
POLL_TIMEOUT = 10.0
#: Backoff between getUpdates attempts while polling fails (doubling from BACKOFF_MIN).
POLL_BACKOFF_MAX = 60.0
#: Commands failing this long (service clock) while sending works raise one alert: a
#: passing blip of the network is not worth a message.
COMMANDS_ALERT_AFTER = 60.0
#: The updates companyd acts on.
ALLOWED_UPDATES = ("message", "callback_query")
#: Bound on one send or edit, rate-limiter waits included (real seconds).
SEND_TIMEOUT = 60.0
#: Bound on the final delivery attempt when the service stops (real seconds).
FLUSH_TIMEOUT = 3.0


class SendSide(Protocol):
    """The sending half, as the link sees it (:class:`companyd.alerts._sender.Sender`)."""

    #: why sending does not work (shown by status); the link sets it while connecting
    reason: str

    def connected(self) -> None:
        """Telegram answered: sending may start."""

    def sending_ok(self) -> bool:
        """Whether alerts currently go out."""


class Handlers(Protocol):
    """Who answers the updates (:class:`companyd.alerts._commands.Commands`)."""

    async def on_command(self, update: Update, context: Any) -> None:
        """A command from an allowed chat."""

    async def on_unknown(self, update: Update, context: Any) -> None:
        """An unknown command from an allowed chat."""

    async def on_stranger(self, update: Update, context: Any) -> None:
        """Anything from a chat that is not allowed."""

    async def on_reply(self, update: Update, context: Any) -> None:
        """A text reply (not a command) from an allowed chat to one of the bot's messages."""

    async def on_text(self, update: Update, context: Any) -> None:
        """Plain text (no command, no reply) in an allowed private chat."""

    async def on_button(self, update: Update, context: Any) -> None:
        """A button press."""

    async def on_error(self, update: object, context: Any) -> None:
        """A handler failed."""


class Link:
    """The Telegram side: the Application in our loop, its lifecycle and the handlers.

    Args:
        settings: token, chats and API URL.
        clock: time for backoff and for how long commands have been failing.
        handlers: what answers commands, button presses and strangers.
        sender: the sending half, told when Telegram is reached and why it is not.
        bus: where "commands failing / recovered" events go.
    """

    def __init__(
        self,
        settings: TelegramSettings,
        *,
        clock: Clock,
        handlers: Handlers,
        sender: SendSide,
        bus: EventBus,
    ) -> None:
        from telegram.ext import CallbackQueryHandler, CommandHandler, MessageHandler, filters

        self._sender = sender
        self._bus = bus
        self._settings = settings
        self._clock = clock
        self.app: TelegramApp = build_application(settings, poll_timeout=POLL_TIMEOUT)
        self.ready = False
        self._poll_logged_at: float | None = None
        #: The receiving half, for status: "starting" | "ok" | "failing".
        self.commands = "starting"
        self.commands_since: float | None = None
        self.commands_error = ""
        self._commands_alerted = False
        self._offset: int | None = None
        allowed = filters.Chat(chat_id=list(settings.chat_ids))
        app = self.app
        app.add_handler(CallbackQueryHandler(handlers.on_button))
        for name, _ in COMMANDS:
            app.add_handler(CommandHandler(name, handlers.on_command, filters=allowed))
        app.add_handler(CommandHandler("start", handlers.on_command, filters=allowed))
        app.add_handler(MessageHandler(allowed & filters.COMMAND, handlers.on_unknown))
        app.add_handler(
            MessageHandler(
                allowed & filters.REPLY & filters.TEXT & ~filters.COMMAND, handlers.on_reply
            )
        )
        # plain text in the founder's private chat (not in a group: people talk there)
        app.add_handler(
            MessageHandler(
                allowed
                & filters.ChatType.PRIVATE
                & filters.TEXT
                & ~filters.COMMAND
                & ~filters.REPLY,
                handlers.on_text,
            )
        )
        app.add_handler(MessageHandler(~allowed, handlers.on_stranger))
        app.add_error_handler(handlers.on_error)

    async def run(self) -> None:
        """Connect (retrying in the background), announce the commands, poll for updates."""
        from telegram import BotCommand
        from telegram.error import InvalidToken, TelegramError

        delay = BACKOFF_MIN
        told = False
        while True:
            try:
                await self.app.initialize()
                break
            except InvalidToken as exc:
                # Neither half works: say why in status, for sending and for commands.
                self._sender.reason = self._mark_failing(exc)
                log.error(
                    "alerts: Telegram rejected the bot token (from %s); alerts wait in the "
                    "outbox — fix the token and restart companyd; retrying every %.0f s",
                    self._settings.token_source,
                    TOKEN_RETRY,
                )
                await self._clock.sleep(TOKEN_RETRY)
            except TelegramError as exc:
                self._sender.reason = self._mark_failing(exc)
                if not told:
                    log.warning(
                        "alerts: Telegram is unreachable at %s (%s); alerts wait in the outbox, "
                        "retrying in the background",
                        self._settings.api_url,
                        redact(str(exc)),
                    )
                    told = True
                await self._clock.sleep(delay)
                delay = min(BACKOFF_MAX, delay * 2)
        self.ready = True
        self._sender.connected()
        log.info("alerts: connected to Telegram as @%s", self.app.bot.username)
        try:
            await self.app.bot.set_my_commands([BotCommand(n, d) for n, d in COMMANDS])
        except TelegramError as exc:
            log.warning("alerts: could not set the bot's command list: %s", redact(str(exc)))
        await self.app.start()
        try:
            await self.app.bot.delete_webhook()  # getUpdates answers 409 while one is set
        except TelegramError as exc:
            log.debug("alerts: could not delete a webhook: %s", redact(str(exc)))
        await self._poll()

    async def _poll(self) -> None:
        """Long-poll getUpdates for as long as the service runs.

        Our own loop rather than python-telegram-bot's ``Updater``: that one stops for good
        on the first 401/404 (``InvalidToken``), and commands would then be lost silently
        until a restart. Here every failure — a refused token, a wrong URL, a broken
        network, a 409 from another poller — is retried with backoff (doubling, at most
        :data:`POLL_BACKOFF_MAX`), and the receiving half's state is kept for status.
        """
        from telegram.error import RetryAfter, TelegramError

        delay = 0.0
        while True:
            # A short poll while the state is unknown or failing, so status learns at once
            # whether commands get through; long polls once they do.
            wait_s = POLL_TIMEOUT if self.commands == "ok" else 0.0
            try:
                # A real-time bound above the long poll's own, for a hung connection.
                async with asyncio.timeout(POLL_TIMEOUT + 30.0):
                    raw = await self._get_updates(wait_s)
            except RetryAfter as exc:
                wait = max(retry_after_seconds(exc), BACKOFF_MIN)
                self._poll_failed(exc)
            except (TelegramError, TimeoutError, OSError) as exc:
                delay = min(POLL_BACKOFF_MAX, max(BACKOFF_MIN, delay * 2))
                wait = delay
                self._poll_failed(exc)
            except Exception as exc:  # e.g. an answer we cannot parse: never stop polling
                delay = min(POLL_BACKOFF_MAX, max(BACKOFF_MIN, delay * 2))
                wait = delay
                self._poll_failed(exc, unexpected=True)
            else:
                delay = 0.0
                self._poll_ok()
                for item in raw:
                    update = self._decode(item)
                    if update is not None:
                        await self.app.update_queue.put(update)
                    if isinstance(item, dict) and isinstance(item.get("update_id"), int):
                        # confirms it to Telegram with the next poll, readable or not
                        self._offset = max(self._offset or 0, item["update_id"] + 1)
                continue
            await self._clock.sleep(wait)

    async def _get_updates(self, wait_s: float) -> list[Any]:
        """One getUpdates, undecoded: ``Bot.get_updates`` decodes the whole batch at once,
        so one update it cannot read failed every poll on the same offset, for good. The
        raw list lets :meth:`_decode` skip that one. ``_post`` is python-telegram-bot's own
        request path (same timeouts, connection pool and error mapping as get_updates);
        tests/alerts/test_alerts.py pins its behaviour.
        """
        bot = self.app.bot
        result = await bot._post(
            "getUpdates",
            {
                "timeout": wait_s,
                "offset": self._offset,
                "allowed_updates": list(ALLOWED_UPDATES),
            },
            read_timeout=POLL_TIMEOUT + 10.0 + wait_s,
        )
        if not isinstance(result, list):  # not Telegram's answer: a failure, not "no news"
            raise TypeError(f"getUpdates answered {type(result).__name__}, expected a list")
        return result

    def _decode(self, item: Any) -> Update | None:
        from telegram import Update

        try:
            if not isinstance(item, dict):
                raise TypeError(f"expected an object, got {type(item).__name__}")
            return Update.de_json(item, self.app.bot)
        except Exception as exc:
            uid = item.get("update_id") if isinstance(item, dict) else None
            log.warning(
                "alerts: skipped Telegram update %s: companyd could not read it (%s: %s)",
                uid,
                type(exc).__name__,
                redact(str(exc))[:200],
            )
            return None

    def _poll_ok(self) -> None:
        if self.commands == "failing":
            log.info("alerts: Telegram commands reach companyd again")
            if self._commands_alerted:
                self._bus.publish(
                    TelegramCommandsRecovered(
                        source="alerts",
                        since=self.commands_since,
                        error=self.commands_error,
                    )
                )
        self.commands, self.commands_since, self.commands_error = "ok", None, ""
        self._commands_alerted = False
        self._poll_logged_at = None

    def _mark_failing(self, exc: BaseException) -> str:
        """Commands are failing (from now, unless already): the reason, for status."""
        reason = telegram_error_text(exc)
        if self.commands != "failing":
            self.commands, self.commands_since = "failing", self._clock.time()
        self.commands_error = reason
        return reason

    def _poll_failed(self, exc: BaseException, *, unexpected: bool = False) -> None:
        """Record a failed poll; logged once per outage and then every 10 minutes at most
        (a poll fails up to once a second), the rest at debug.
        """
        from telegram.error import Conflict

        reason = self._mark_failing(exc)
        now = self._clock.time()
        mono = self._clock.monotonic()
        if self._poll_logged_at is None or mono - self._poll_logged_at > 600:
            self._poll_logged_at = mono
            if isinstance(exc, Conflict):
                log.error(
                    "alerts: another program is polling this bot (409 Conflict); commands "
                    "may go to it — only one companyd may use a bot token"
                )
            elif unexpected:
                log.error(
                    "alerts: unexpected error polling Telegram for commands (%s); retrying "
                    "with backoff",
                    reason,
                    exc_info=exc,
                )
            else:
                log.warning(
                    "alerts: polling Telegram for commands failed (%s); retrying with backoff",
                    reason,
                )
        else:
            log.debug("alerts: polling failed again: %s", reason)
        since = self.commands_since
        if (
            not self._commands_alerted
            and since is not None
            and now - since >= COMMANDS_ALERT_AFTER
            and self._sender.sending_ok()
        ):
            self._commands_alerted = True
            self._bus.publish(
                TelegramCommandsFailing(
                    source="alerts",
                    since=since,
                    error=reason,
                )
            )

    async def stop(self) -> None:
        """Confirm the updates handled → stop → shutdown; safe at any stage of startup."""
        app = self.app
        if self._offset is not None and self.commands == "ok":
            # Confirm what was handled, so a restart does not run those commands again.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(FLUSH_TIMEOUT):
                    await self._get_updates(0.0)
        with contextlib.suppress(Exception):
            if app.running:
                await app.stop()
        with contextlib.suppress(Exception):
            await app.shutdown()
        with contextlib.suppress(Exception):
            await app.bot.shutdown()  # releases the HTTP clients if initialize never finished


def telegram_error_text(exc: BaseException) -> str:
    """A short, redacted reason for a failed Bot API call, e.g. ``401 Unauthorized``.

    python-telegram-bot folds 401 and 404 into ``InvalidToken`` with Telegram's description
    as the message; the status code is put back when the description is the standard one.
    ``initialize()`` (getMe) words its own ``InvalidToken`` and quotes the token (redacted).
    """
    from telegram.error import Conflict, InvalidToken, NetworkError, RetryAfter, TimedOut

    text = redact(str(exc)).strip()
    if isinstance(exc, InvalidToken):
        for code in (HTTPStatus.UNAUTHORIZED, HTTPStatus.NOT_FOUND):
            if text.lower().startswith(code.phrase.lower()):
                return f"{code.value} {text}"
        if "rejected by the server" in text:
            return "bot token rejected by Telegram"
        return f"token or URL refused: {text}"
    if isinstance(exc, Conflict):
        return f"409 {text}" if text.lower().startswith("conflict") else f"409 Conflict: {text}"
    if isinstance(exc, RetryAfter):
        return f"429 flood control: retry after {retry_after_seconds(exc):.0f} s"
    if isinstance(exc, TimedOut | TimeoutError):
        return "network error: timed out"
    if isinstance(exc, NetworkError | OSError):
        return f"network error: {text or type(exc).__name__}"
    return f"{type(exc).__name__}: {text}"
