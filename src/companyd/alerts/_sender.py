"""The sender: delivers the alert book to Telegram, in its own task, with backoff.

:class:`Sender` sends and edits what is due, oldest first: new alerts, and new versions of
coalesced ones at most once every :data:`EDIT_INTERVAL` seconds (Telegram rate-limits edits,
and does not notify on them). A slow or dead Telegram never holds up the event stream: a
transient failure stops the pass and the next one waits, with backoff on the injected clock
(doubling from ``BACKOFF_MIN`` to ``BACKOFF_MAX``; Telegram's own ``retry_after``; a refused
token every ``TOKEN_RETRY``). A chat that refuses for good is marked failed and logged with
what to do. Every attempt is written to the outbox, with the message id, so a restart
neither loses nor resends an alert (at-least-once: a crash between Telegram's answer and the
write can repeat one). In an outbox shared by several daemons (PostgreSQL) a first send is
claimed before it is made, so that of two daemons only one sends it.

The sender also keeps the sending half's state for status: ``state`` (starting / off /
connecting / up / stopped), ``reason``, and whether an outage or a refused token is going on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from companyd._aio import news_or_deadline
from companyd.alerts._coalesce import AlertBook
from companyd.alerts._link import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    SEND_TIMEOUT,
    TOKEN_RETRY,
    Link,
    telegram_error_text,
)
from companyd.alerts._outbox import RESULT_KINDS, AlertRecord, Delivery
from companyd.alerts._telegram import redact, retry_after_seconds
from companyd.clock import Clock

if TYPE_CHECKING:
    from telegram import InlineKeyboardMarkup

# python-telegram-bot is imported where it is used, not here: every `companyd` command loads
# the pager's modules (for `notify-failure`), and the library takes most of a second to import.

__all__ = ["EDIT_INTERVAL", "Sender"]

# One logger for the whole pager, as before the split into modules: operators (and the
# end-to-end test) filter the daemon's log on its name.
log = logging.getLogger("companyd.alerts.service")

#: Minimum seconds between two edits of one coalesced message (Telegram rate-limits edits,
#: and the operator reads a counter, not a ticker).
EDIT_INTERVAL = 10.0


class Sender:
    """Delivers the alerts of ``book`` over the running :class:`~companyd.alerts._link.Link`.

    Args:
        book: the alerts to deliver (its ``wake`` event says there is news).
        clock: time for edit throttling and backoff.
    """

    def __init__(self, book: AlertBook, clock: Clock) -> None:
        self._book = book
        self._clock = clock
        #: the running pager's link to Telegram (None before the first run)
        self.link: Link | None = None
        self.state = "starting"
        self.reason = ""
        self.retry_at = 0.0
        self._backoff = 0.0
        self.outage_logged = False
        self.token_logged = False
        #: a stopping pager's last pass: edits are not throttled
        self.flushing = False
        #: a graceful stop asked the sender to finish after the delivery in flight
        self.stop_requested = False
        #: told of each message sent (record, chat, message id) and of each send refused
        #: for good (record, chat, why): the results' records (alerts.deliver.Results)
        self.on_sent: Callable[[AlertRecord, int, int], Awaitable[None]] | None = None
        self.on_refused: Callable[[AlertRecord, int, str], Awaitable[None]] | None = None

    def reset(self) -> None:
        """Start a run afresh: a restarted run starts from the outbox, not from what the
        failed run left.
        """
        self.flushing, self.retry_at, self._backoff = False, 0.0, 0.0
        self.stop_requested = False
        self.outage_logged = self.token_logged = False

    def sending_ok(self) -> bool:
        """Whether alerts currently go out (connected, no outage, token accepted)."""
        return self.state == "up" and not (self.outage_logged or self.token_logged)

    def connected(self) -> None:
        """Telegram answered the link: deliver what waits."""
        self.state, self.reason = "up", ""
        self._book.wake.set()

    async def run(self) -> None:
        """Deliver until a graceful stop is asked: a pass over what is due, then wait for news
        (the book's ``wake``) or the time more is due. A stop takes effect after the delivery in
        flight.
        """
        while not self._stopped():
            self._book.wake.clear()
            due = await self.deliver_pass()
            if self._stopped():
                return
            # until news (the book's wake) or the monotonic time more is due
            await news_or_deadline(self._book.wake, due, self._clock.monotonic, self._clock.sleep)

    def _stopped(self) -> bool:
        """Whether a graceful stop asked the sender to finish (set across awaits)."""
        return self.stop_requested

    async def deliver_pass(self) -> float | None:
        """Send and edit what is due, oldest first. Returns the monotonic time when more is
        due (None: wait for news). Stops at the first transient failure (Telegram is one
        link).
        """
        link = self.link
        if link is None or not link.ready:
            return None
        if self.retry_at > self._clock.monotonic():
            return self.retry_at
        now = self._clock.time()
        await self._book.release_held(now)
        next_due: float | None = None

        def later(t: float) -> None:
            nonlocal next_due
            next_due = t if next_due is None else min(next_due, t)

        for rec in sorted(self._book.alerts.values(), key=lambda r: r.id):
            if not rec.persisted:
                continue  # the intake wakes us once it is in the outbox
            if rec.held_until is not None and rec.held_until > now:
                later(rec.held_until)
                continue
            for chat_id, d in list(rec.deliveries.items()):
                if d.state == "pending":
                    op = "send"
                elif d.state == "sent" and d.sent_version < rec.version:
                    # The throttle spaces versions, not chats: once one chat shows the
                    # latest version, the others catch up at once.
                    shown = max(x.sent_version for x in rec.deliveries.values())
                    if not self.flushing and now < rec.edit_after and shown < rec.version:
                        later(rec.edit_after)
                        continue
                    op = "edit"
                else:
                    continue
                if op == "send" and not await self._claimed(rec, chat_id, now, later):
                    continue
                if not await self._attempt(link, rec, chat_id, d, op):
                    return self.retry_at
                now = self._clock.time()
        self._book.evict(now)
        if next_due is None:
            return None
        # Dues are wall times (windows, quiet hours); the sleep runs on the monotonic clock.
        return self._clock.monotonic() + (next_due - self._clock.time())

    async def _claimed(
        self, rec: AlertRecord, chat_id: int, now: float, later: Callable[[float], None]
    ) -> bool:
        """Whether this pager may send ``rec`` to ``chat_id`` now: its claim in a shared
        outbox (:meth:`~companyd.alerts._outbox.AlertStore.claim`). Another daemon sending it:
        not before its claim runs out (``later``); another daemon sent it: its delivery, as
        recorded, replaces the one in memory.
        """
        store = self._book.store
        if store is None:
            return True
        claim = await store.claim(rec.id, chat_id, now)
        if claim.verdict == "mine":
            return True
        if claim.verdict == "done" and claim.stored is not None:
            rec.deliveries[chat_id] = claim.stored
            log.info(
                "alerts: alert %d was delivered to chat %d by %s", rec.id, chat_id, claim.holder
            )
        else:
            later(claim.until)
        return False

    def _markup(self, rec: AlertRecord) -> InlineKeyboardMarkup | None:
        from telegram import InlineKeyboardButton, InlineKeyboardMarkup

        if not rec.buttons:
            return None
        buttons = [
            InlineKeyboardButton(str(b["label"]), callback_data=f"{rec.id}:{b['id']}")
            for b in rec.buttons
        ]
        return InlineKeyboardMarkup([buttons[i : i + 2] for i in range(0, len(buttons), 2)])

    async def _attempt(
        self, link: Link, rec: AlertRecord, chat_id: int, d: Delivery, op: str
    ) -> bool:
        """One send or edit. True when done with it (delivered, or refused for good);
        False on a transient failure (backoff set).
        """
        from telegram import InputFile, ReplyParameters
        from telegram.error import (
            BadRequest,
            ChatMigrated,
            Forbidden,
            InvalidToken,
            RetryAfter,
            TelegramError,
        )

        version, text, markup = rec.version, rec.text, self._markup(rec)
        bot = link.app.bot
        d.attempts += 1
        answers = (rec.data.get("reply_to") or {}).get(str(chat_id))
        reply = (
            ReplyParameters(message_id=int(answers), allow_sending_without_reply=True)
            if isinstance(answers, int)
            else None
        )
        try:
            # A real-time bound on one HTTP exchange, rate-limiter waits included.
            async with asyncio.timeout(SEND_TIMEOUT):
                # a result is what the founder waits for: it rings
                quiet = rec.severity == "info" and rec.kind not in RESULT_KINDS
                document = rec.data.get("document")
                if op == "edit":
                    await bot.edit_message_text(
                        text, chat_id=chat_id, message_id=d.message_id, reply_markup=markup
                    )
                else:
                    if isinstance(document, dict):
                        # a result too long for messages: one .md file, the record's text
                        # its caption (alerts/_deliver.py)
                        upload = InputFile(
                            str(document["body"]).encode("utf-8"), filename=str(document["name"])
                        )
                        msg = await bot.send_document(
                            chat_id,
                            upload,
                            caption=text,
                            reply_markup=markup,
                            disable_notification=quiet,
                            reply_parameters=reply,
                        )
                    else:
                        msg = await bot.send_message(
                            chat_id,
                            text,
                            reply_markup=markup,
                            disable_notification=quiet,
                            reply_parameters=reply,
                        )
                    d.message_id, d.state = msg.message_id, "sent"
                    await self._link(rec, chat_id, msg.message_id)
                    if self.on_sent is not None:
                        await self.on_sent(rec, chat_id, msg.message_id)
            d.sent_version, d.error = version, None
            rec.edit_after = self._clock.time() + EDIT_INTERVAL
            self._recovered()
        except BadRequest as exc:
            desc = str(exc).lower()
            if "not modified" in desc:
                d.sent_version = version
            elif op == "edit" and "message to edit not found" in desc:
                # The operator deleted the message, and the story went on since (more
                # crashes, an action taken): tell it in a new message.
                d.state, d.message_id, d.error = "pending", None, None
                self._book.wake.set()
                log.info(
                    "alerts: alert %d was deleted in chat %d; sending its update as a new message",
                    rec.id,
                    chat_id,
                )
            elif op == "edit":
                # The message cannot be edited (e.g. too old): do not resend a copy, the
                # operator saw it.
                d.sent_version, d.error = version, redact(str(exc))
                log.info(
                    "alerts: could not edit alert %d in chat %d: %s",
                    rec.id,
                    chat_id,
                    redact(str(exc)),
                )
            else:
                await self._refused(rec, chat_id, d, exc)
        except (Forbidden, ChatMigrated) as exc:
            await self._refused(rec, chat_id, d, exc)
        except RetryAfter as exc:
            self._transient(exc, retry_after_seconds(exc))
            return False
        except InvalidToken as exc:
            self._transient(exc, TOKEN_RETRY)
            return False
        except (TelegramError, TimeoutError, OSError) as exc:
            self._transient(exc, None)
            return False
        except Exception as exc:  # a bug in our sending code: log it, do not spin on it
            log.exception("alerts: unexpected error delivering alert %d", rec.id)
            self._transient(exc, None)
            return False
        finally:
            await self._book.save(rec)
        return True

    async def _link(self, rec: AlertRecord, chat_id: int, message_id: int) -> None:
        """A result or an answer sent: remember its run, so a reply to it is a follow-up."""
        run_id, agent = rec.data.get("run_id"), rec.data.get("agent")
        store = self._book.store
        if rec.kind not in ("result", "reply") or not run_id or not agent or store is None:
            return
        try:
            await store.link(chat_id, [message_id], str(run_id), str(agent), self._clock.time())
        except Exception as exc:  # the message is out; only a reply to it will not thread
            log.error(
                "alerts: cannot remember that message %d shows run %s (%s); a reply to it will "
                "not reach the agent — check the state directory",
                message_id,
                run_id,
                exc,
            )

    async def _refused(self, rec: AlertRecord, chat_id: int, d: Delivery, exc: Exception) -> None:
        from telegram.error import ChatMigrated

        d.state, d.error = "failed", redact(f"{type(exc).__name__}: {exc}")
        hint = "unblock the bot in that chat or fix alerts.telegram.chat_ids"
        if isinstance(exc, ChatMigrated):
            hint = f"the group became supergroup {exc.new_chat_id}; put that id in chat_ids"
        log.error(
            "alerts: Telegram refused alert %d for chat %d (%s); %s",
            rec.id,
            chat_id,
            d.error,
            hint,
        )
        if self.on_refused is not None:
            await self.on_refused(rec, chat_id, f"{d.error}; {hint}")

    def _transient(self, exc: Exception, wait: float | None) -> None:
        from telegram.error import InvalidToken

        if wait is None:
            self._backoff = min(BACKOFF_MAX, max(BACKOFF_MIN, self._backoff * 2))
            wait = self._backoff
        self.retry_at = self._clock.monotonic() + wait
        self.reason = telegram_error_text(exc)
        pending = sum(1 for r in self._book.alerts.values() if not r.settled)
        if isinstance(exc, InvalidToken):
            if not self.token_logged:
                log.error(
                    "alerts: Telegram rejected the bot token (from %s); %d alert(s) wait in the "
                    "outbox — fix the token and restart companyd",
                    self._book.settings.token_source if self._book.settings else "?",
                    pending,
                )
                self.token_logged = True
            return
        if not self.outage_logged:
            log.warning(
                "alerts: cannot reach Telegram (%s); %d alert(s) wait in the outbox and go out "
                "when it is back (next try in %.0f s)",
                redact(f"{type(exc).__name__}: {exc}"),
                pending,
                wait,
            )
            self.outage_logged = True
        else:
            log.debug("alerts: Telegram still unreachable: %s", redact(str(exc)))

    def _recovered(self) -> None:
        if self.outage_logged or self.token_logged:
            log.info("alerts: Telegram reachable again; delivering the outbox")
        self.outage_logged = self.token_logged = False
        self._backoff = 0.0
        self.retry_at = 0.0
        self.state, self.reason = "up", ""
