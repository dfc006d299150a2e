"""The operator's commands and buttons from Telegram, answered through :class:`Admin`.

:class:`Commands` handles what the :class:`~companyd.alerts._link.Link` receives: /status
/spend /budget /jobs /pause /resume /ask /inbox /approve /reject /answer /quarantine /retry
/help from the allowed chats (the texts and Admin calls are :mod:`companyd.alerts._ops`), a
reply to an agent's question (the founder's answer), and the buttons on alerts, whose
outcome is added to the alert's message. Anything from another chat is ignored and logged
(once per chat at warning level). /ask runs as its own task (kept in
``tasks``) so other commands are answered meanwhile. Replies never show the bot token.

**Threads.** A reply (Telegram's "Reply") to a delivered result or to an /ask answer is a
follow-up task to the same agent (:meth:`Commands.on_reply`): the outbox's ``threads``
table names the run the message shows, :meth:`Admin.ask` with ``reply_to`` gives the agent
that run's task and result with the reply, and the answer goes through the outbox as a
reply to the founder's message — itself linked, so the conversation can go on. The /ask
answers and the digest's "📄 N" buttons (the result sent whole) are linked the same way.
The answer is owed durably (the outbox's ``follow_ups``, written before the task is asked
for, with the task id the pager chose): a stop or a crash while the agent works leaves it
owed, and the next start waits for the task the run journal resumes (:meth:`Commands.resume`)
and sends its answer once, in the thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any

from companyd.admin import Admin, AdminError, AdminStopping, result_data
from companyd.alerts._coalesce import AlertBook
from companyd.alerts._deliver import result_records
from companyd.alerts._desk_messages import alert_of
from companyd.alerts._link import SEND_TIMEOUT
from companyd.alerts._ops import (
    ADMIN_TIMEOUT,
    act,
    buttons_after,
    command_reply,
    help_text,
    refusal_text,
)
from companyd.alerts._outbox import AlertRecord, FollowUp
from companyd.alerts._render import clip
from companyd.alerts._telegram import redact
from companyd.alerts._values import times_in
from companyd.clock import Clock

if TYPE_CHECKING:
    from telegram import CallbackQuery, Message, Update, User

    from companyd.admin import AskAnswer

# python-telegram-bot is imported where it is used, not here: every `companyd` command loads
# the pager's modules (for `notify-failure`), and the library takes most of a second to import.

__all__ = ["ASK_TIMEOUT", "Commands"]

# One logger for the whole pager, as before the split into modules: operators (and the
# end-to-end test) filter the daemon's log on its name.
log = logging.getLogger("companyd.alerts.service")

#: How long /ask waits for the agent's answer, seconds.
ASK_TIMEOUT = 300.0

#: A founder's-desk id a reply answers, as the message shows it: a question (``q-``) or a
#: routine result (``r-``: the reply is the change asked for), + 10 hex digits.
_QUESTION_ID = re.compile(r"\b[qr]-[0-9a-f]{10}\b")


def _desk_id(text: str) -> str | None:
    """The desk item a message of the bot's asks about: the id at the end of its first
    line, the title companyd writes ("cfo asks you (q-…)", "daily-post by marketing awaits
    your approval (r-…), round 2"). The lines below it are the agent's words (a question,
    a result) and may quote any id: they are never read for one.
    """
    title = text.split("\n", 1)[0]
    found = _QUESTION_ID.findall(title)
    return found[-1] if found else None


#: Seconds within which a second press of the same raise button is taken as a double tap.
RAISE_AGAIN_AFTER = 10.0


class Commands:
    """Answers commands and button presses from the allowed chats.

    Args:
        book: the alerts (buttons act on them; allowed chats and agents come from it).
        admin: the daemon's operator operations.
        clock: time for the "done by … at …" footer.
    """

    def __init__(self, book: AlertBook, admin: Admin, clock: Clock) -> None:
        self._book = book
        self._admin = admin
        self._clock = clock
        self._strangers: set[int] = set()
        #: running /ask tasks (cancelled when the pager stops)
        self.tasks: set[asyncio.Task[None]] = set()
        #: (alert id, button id) → when a raise button was last acted on (a double tap)
        self._raised_at: dict[tuple[int, int], float] = {}

    def _allowed(self, chat_id: int | None) -> bool:
        return self._book.settings is not None and chat_id in self._book.settings.chat_ids

    def _stranger(self, chat_id: int | None, user: User | None, what: str) -> None:
        who = "unknown user"
        if user is not None:
            who = f"user {user.id}" + (f" (@{user.username})" if user.username else "")
        level = logging.WARNING if chat_id not in self._strangers else logging.DEBUG
        if chat_id is not None:
            self._strangers.add(chat_id)
        log.log(
            level,
            "alerts: ignored %s from chat %s (%s): only chats in alerts.telegram.chat_ids may "
            "command companyd",
            what,
            chat_id,
            who,
        )

    async def on_stranger(self, update: Update, context: Any) -> None:
        """Log a message from a chat that is not allowed (at warning level once per chat) and
        ignore it.
        """
        chat = update.effective_chat
        self._stranger(chat.id if chat else None, update.effective_user, "a message")

    async def on_command(self, update: Update, context: Any) -> None:
        """Answer one command from an allowed chat with its reply text; /ask is started as its
        own task (in :attr:`tasks`) and answers when the agent does. A message from another chat is
        logged and ignored.
        """
        msg = update.effective_message
        chat = update.effective_chat
        if msg is None or chat is None or not msg.text:
            return
        if not self._allowed(chat.id):  # the handler filter already checks; belt and braces
            self._stranger(chat.id, update.effective_user, "a command")
            return
        words = msg.text.split()
        name = words[0].lstrip("/").split("@")[0].lower()
        args = words[1:]
        if name == "ask":
            # /ask runs a model for minutes: answer other commands meanwhile. The question
            # keeps its lines (a list, a pasted error): only the agent is split off.
            ask_args = msg.text.split(maxsplit=2)[1:]
            task = asyncio.create_task(self._ask(msg, ask_args), name="alerts:/ask")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            return
        with times_in(self._book.policy.tz):  # a reply's times on the clock of the alerts
            reply = await command_reply(
                self._admin,
                name,
                args,
                self._book.policy.agents,
                by=_who(update.effective_user),
                now=self._clock.time(),
            )
        await self._reply(msg, reply)

    async def _desk_answer(self, msg: Message, desk_id: str) -> None:
        """The founder's answer to an agent's question, or the change asked for a routine
        result awaiting approval (``desk_id``: ``q-…`` or ``r-…``; the next round's result
        comes back as a reply to this message).
        """
        if desk_id.startswith("r-"):
            await self._remember_change(desk_id, msg.chat_id, msg.message_id)
        try:
            async with asyncio.timeout(ADMIN_TIMEOUT):
                done = await self._admin.answer(
                    desk_id, msg.text or "", by=_who(msg.from_user), via="telegram"
                )
        except AdminError as exc:
            await self._reply(msg, refusal_text(exc))
            return
        except TimeoutError:
            await self._reply(msg, f"⚠️ companyd did not answer within {ADMIN_TIMEOUT:.0f} s")
            return
        await self._reply(msg, f"💬 {done.message}")

    async def on_text(self, update: Update, context: Any) -> None:
        """A plain message to the bot (neither a command nor a reply): say what it answers,
        rather than nothing at all.
        """
        msg = update.effective_message
        if msg is None:
            return
        await self._reply(
            msg,
            "I answer commands (/help lists them) and replies to my messages: reply to a "
            "result or an answer to follow it up, to a question to answer it. To ask an "
            "agent something new: /ask AGENT question",
        )

    async def on_unknown(self, update: Update, context: Any) -> None:
        """Answer an unknown command with the list of commands, unless it is addressed to another
        bot.
        """
        msg = update.effective_message
        if msg is None:
            return
        word = (msg.text or "").split()[0] if (msg.text or "").split() else ""
        _, _, addressee = word.partition("@")
        if addressee and addressee.lower() != (msg.get_bot().username or "").lower():
            return  # a command for another bot in a shared group: not ours to answer
        await self._reply(msg, f"unknown command {word!r}.\n{help_text()}")

    async def _ask(self, msg: Message, args: list[str]) -> None:
        if len(args) < 2:
            agents = ", ".join(sorted(self._book.policy.agents)) or "(none)"
            await self._reply(msg, f"usage: /ask AGENT question (agents: {agents})")
            return
        agent, question = args[0], " ".join(args[1:])
        known = self._book.policy.agents
        if known and agent not in known:
            # said before "asking …", not after it
            await self._reply(msg, f"⚠️ unknown agent {agent!r}; agents: {', '.join(sorted(known))}")
            return
        await self._reply(msg, f"🤔 asking {agent}…")
        try:
            result = await self._admin.ask(agent, question, timeout=ASK_TIMEOUT, via="telegram")
        except AdminError as exc:
            await self._reply(msg, refusal_text(exc))
            return
        except Exception as exc:
            log.exception("alerts: /ask %s failed", agent)
            await self._reply(msg, f"⚠️ /ask failed inside companyd ({type(exc).__name__})")
            return
        data = _answer_data(agent, result)
        if isinstance(data, str):
            await self._reply(msg, redact(data))
            return
        # As a follow-up's answer: through the outbox, as a reply to the question — in
        # parts up to three messages, past that one .md document (never cut), and each
        # message remembered as the run's, so a reply to it is a follow-up
        recs = result_records(
            self._book,
            data,
            kind="reply",
            now=self._clock.time(),
            chats=[msg.chat_id],
            reply_to={msg.chat_id: msg.message_id},
        )
        for rec in recs:
            rec.held_until = None  # the founder is there, waiting for it
        await self._book.save(*recs)
        for rec in recs:
            rec.persisted = True
        self._book.wake.set()

    async def on_reply(self, update: Update, context: Any) -> None:
        """A text reply from an allowed chat. To a delivered result or an answer (the
        outbox's ``threads`` know the message; looked up first, whatever its text holds): a
        follow-up to the same agent in its thread. To an agent's question (its message's
        title names the question's id): the founder's answer; to a routine result awaiting
        approval: the change asked for. To another of the bot's messages, say what a reply
        can do; replies to anyone else's messages are left alone.
        """
        msg = update.effective_message
        chat = update.effective_chat
        if msg is None or chat is None or not msg.text or msg.reply_to_message is None:
            return
        if not self._allowed(chat.id):  # the handler filter already checks; belt and braces
            self._stranger(chat.id, update.effective_user, "a reply")
            return
        original = msg.reply_to_message
        store = self._book.store
        found = None
        if store is not None:
            # First: a message the outbox knows it sent as a result or an answer is that
            # run's thread, whatever its text says (an agent's result may quote "q-…").
            found = await store.thread(chat.id, original.message_id)
        if found is None:
            desk = _desk_id(original.text or "")
            if desk is not None:
                await self._desk_answer(msg, desk)
                return
            if original.from_user is None or not original.from_user.is_bot:
                return  # a conversation between people in a group: not ours
            await self._reply(
                msg,
                "↩️ a reply reaches an agent only when it answers a delivered result or an "
                "/ask answer; to start anew, use /ask AGENT question",
            )
            return
        run_id, agent = found
        # The task id is the reply's own: kept before the task is asked for, and the same
        # if Telegram hands the reply over again (a restart before it was confirmed).
        key = hashlib.sha256(f"{chat.id}:{msg.message_id}".encode()).hexdigest()[:12]
        follow = FollowUp(
            task_id=f"task-{key}",
            chat_id=chat.id,
            message_id=msg.message_id,
            agent=agent,
            reply_to=run_id,
            text=msg.text,
            created=self._clock.time(),
        )
        if store is not None:
            try:
                if not await store.owe(follow):
                    return  # being answered already
            except Exception as exc:  # answered all the same, unless companyd restarts first
                log.error("alerts: cannot remember the follow-up to %s: %s", run_id, exc)
        self._spawn(self._follow_up(follow, msg), "alerts:reply")

    def resume(self, owed: list[FollowUp]) -> None:
        """Answer the follow-ups a previous process owed (its task ran on, or resumed from
        the run journal): each answer goes out once, as a reply in its thread.
        """
        for follow in owed:
            log.info(
                "alerts: the answer to the founder's reply in chat %d (task %s) is still owed; "
                "waiting for it",
                follow.chat_id,
                follow.task_id,
            )
            self._spawn(self._follow_up(follow, None), "alerts:reply")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _follow_up(self, follow: FollowUp, msg: Message | None) -> None:
        """Ask ``follow``'s agent (once per task id, however often this runs) and put the
        answer in the outbox as a reply to the founder's message, forgetting the debt in
        the same transaction. Stopped by a stop of the daemon, the debt is kept for the
        next start.
        """
        store = self._book.store
        try:
            result = await self._admin.ask(
                follow.agent,
                follow.text,
                timeout=ASK_TIMEOUT,
                reply_to=follow.reply_to,
                task_id=follow.task_id,
                via="telegram",
            )
        except AdminStopping:
            log.info("alerts: the follow-up %s is answered after the restart", follow.task_id)
            return
        except Exception as exc:
            if not isinstance(exc, AdminError):
                log.exception("alerts: the follow-up to %s failed", follow.reply_to)
                exc = AdminError(f"the follow-up failed inside companyd ({type(exc).__name__})")
            await self._fail(follow, msg, refusal_text(exc))
            return
        data = _answer_data(follow.agent, result)
        if isinstance(data, str):
            await self._fail(follow, msg, data)
            return
        chat_id = follow.chat_id
        recs = result_records(
            self._book,
            data,
            kind="reply",
            now=self._clock.time(),
            chats=[chat_id],
            reply_to={chat_id: follow.message_id},
        )
        for rec in recs:
            rec.held_until = None  # the founder is there, waiting for it
        try:
            if store is None:
                raise RuntimeError("no outbox")
            await store.answered(follow.task_id, *recs)
        except Exception as exc:  # sent from memory; owed again if companyd restarts first
            log.error("alerts: cannot write the answer to %s: %s", follow.task_id, exc)
            await self._book.save(*recs)
        for rec in recs:
            rec.persisted = True
        self._book.wake.set()

    async def _fail(self, follow: FollowUp, msg: Message | None, text: str) -> None:
        """A follow-up that will not be answered: said in its thread, owed no more."""
        if msg is not None:
            await self._reply(msg, text)
        else:
            log.warning("alerts: the follow-up %s was not answered: %s", follow.task_id, text)
        store = self._book.store
        if store is not None:
            try:
                await store.forget(follow.task_id)
            except Exception as exc:
                log.error("alerts: cannot forget the follow-up %s: %s", follow.task_id, exc)

    async def _remember_change(self, item_id: str, chat_id: int, message_id: int) -> None:
        """The founder asked for changes to result ``item_id`` with message ``message_id``:
        kept on the result's alert (before the answer is given, so a restart cannot come
        between), for the next round to reply to.
        """
        rec = await alert_of(self._book, "item_id", item_id)
        if rec is None:
            return
        rec.data["changes_message"] = {str(chat_id): message_id}
        await self._book.save(rec)

    async def _reply(self, msg: Message, text: str) -> Message | None:
        from telegram.error import TelegramError

        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                return await msg.reply_text(clip(redact(text)))
        except (TelegramError, TimeoutError) as exc:
            log.warning("alerts: could not answer a command: %s", redact(str(exc)))
            return None

    async def on_error(self, update: object, context: Any) -> None:
        """Log a handler's failure (redacted: no token in the log); the pager goes on."""
        err = getattr(context, "error", None)
        log.error("alerts: a Telegram handler failed: %s", redact(f"{type(err).__name__}: {err}"))

    async def on_button(self, update: Update, context: Any) -> None:
        """Act on an alert button from an allowed chat through :class:`Admin`: the outcome is
        added to the alert's footer, its buttons updated, the message edited at once, and the press
        answered. A button no longer active, or an action refused, is answered with the reason only.
        """
        query = update.callback_query
        if query is None:
            return
        message = query.message
        chat_id = message.chat.id if message is not None else None
        if not self._allowed(chat_id):
            self._stranger(chat_id, query.from_user, "a button press")
            return
        alert_id, _, button_id = (query.data or "").partition(":")
        rec: AlertRecord | None = None
        if alert_id.isdigit():
            rec = self._book.alerts.get(int(alert_id))
            if rec is None and self._book.store is not None:
                rec = await self._book.store.get(int(alert_id))
        button = None
        if rec is not None and button_id.isdigit():
            button = next((b for b in rec.buttons if b.get("id") == int(button_id)), None)
        if rec is None or button is None:
            await self._answer(query, "this button is no longer active")
            return
        if button.get("action") == "open_result" and message is not None:
            await self._open_result(query, message.chat.id, message.message_id, button)
            return
        who = _who(query.from_user)
        if button.get("action") == "raise":
            # the button stays (raising again is allowed), so a double tap on a slow phone
            # would raise twice: a second press within RAISE_AGAIN_AFTER is taken as the same
            key = (rec.id, int(button_id))
            last = self._raised_at.get(key)
            now = self._clock.monotonic()
            if last is not None and now - last < RAISE_AGAIN_AFTER:
                await self._answer(
                    query,
                    f"raised a moment ago; press again after {RAISE_AGAIN_AFTER:g} s to raise "
                    "once more",
                )
                return
        self._book.pressing.add(rec.id)
        try:
            done, text = await act(self._admin, button, by=who)
            if not done:
                await self._answer(query, text, alert=True)
                return
            if button.get("action") == "raise":
                self._raised_at[(rec.id, int(button_id))] = self._clock.monotonic()
            when = datetime.fromtimestamp(self._clock.time(), self._book.policy.tz)
            rec.footer.append(f"✔ {text} — by {who} at {when:%H:%M}")
            buttons_after(rec, button)
        finally:
            self._book.pressing.discard(rec.id)
        rec.version += 1
        rec.edit_after = 0.0  # show what was done now, not after the coalescing throttle
        self._book.rerender(rec)
        if rec.id not in self._book.alerts:
            self._book.alerts[rec.id] = rec
        await self._book.save(rec)
        self._book.wake.set()
        await self._answer(query, text)

    async def _open_result(
        self, query: CallbackQuery, chat_id: int, message_id: int, button: dict[str, Any]
    ) -> None:
        """A digest's "📄 N": send that result whole, as a reply to the digest."""
        item_id = button.get("arg")
        item = self._book.alerts.get(item_id) if isinstance(item_id, int) else None
        if item is None and isinstance(item_id, int) and self._book.store is not None:
            item = await self._book.store.get(item_id)
        if item is None:
            await self._answer(query, "that result is no longer kept", alert=True)
            return
        recs = result_records(
            self._book,
            item.data,
            kind="result",
            now=self._clock.time(),
            chats=[chat_id],
            reply_to={chat_id: message_id},
        )
        for rec in recs:
            rec.held_until = None  # asked for now
        await self._book.save(*recs)
        for rec in recs:
            rec.persisted = True
        self._book.wake.set()
        await self._answer(query, f"{item.data.get('routine')}: sent below")

    async def _answer(self, query: CallbackQuery, text: str, alert: bool = False) -> None:
        from telegram.error import TelegramError

        try:
            await query.answer(clip(redact(text), 200), show_alert=alert)
        except TelegramError as exc:
            log.warning("alerts: could not answer a button press: %s", redact(str(exc)))


def _answer_data(agent: str, result: AskAnswer) -> dict[str, Any] | str:
    """An answer (``/ask``'s, a follow-up's) as its message's data — read as a routine's
    result reads: the answer, then its cost (simulated on the offline model) and run, with
    the warning of an ``unverified`` run — or, when the run gave no answer, why.
    """
    unverified = result.status == "unverified"
    if result.status != "ok" and not unverified:
        return f"⚠️ {agent} did not answer: {result.status}: {result.reason}"
    data = {**result_data("ask", result), "agent": agent}
    if unverified:  # an answer, but one its run does not back: sent with the warning
        data["unverified"] = result.reason or "unverified"
    return data


def _who(user: User | None) -> str:
    """A Telegram user as the founder's desk keeps them: ``Op (@operator)``."""
    if user is None:
        return "someone"
    return user.full_name + (f" (@{user.username})" if user.username else "")
