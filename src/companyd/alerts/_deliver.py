"""Results to the founder: a routine's ``routine_result`` → its deliveries.

A routine says where its result goes (``deliver:`` in company.yaml; default ``telegram``
when it names an ``expected_output``, nothing otherwise). :class:`Results` takes each
``routine_result`` event off the pager's intake and

* ``telegram`` — writes the result to the alert outbox, naming the routine, the agent, the
  cost and the run id: as one message per 4,096 characters when it fits in
  :data:`MAX_PARTS` messages, else as one ``.md`` document (the whole result, with a caption
  naming the same and the result's first lines; :func:`document_of`). The sender delivers
  it like any alert (an outage loses none, a restart resends none) and holds it through
  quiet hours; each message sent is linked to its run
  (:meth:`~companyd.alerts._outbox.AlertStore.link`) so that a reply to it is a follow-up;
* ``digest`` — writes it to the outbox as a digest item, held until the next
  ``alerts.digest_at``, when :mod:`companyd.alerts._digest` folds the items into one message;
* ``memory`` — adds the result as an observation on the entity ``routine:<slug>``;
* ``file`` — writes ``<state_dir>/outputs/<routine>/<date>-<run>.md`` atomically;
* ``webhook:NAME`` — queues it for the webhook ``NAME`` (``alerts.webhooks``) as a signed
  ``run.completed`` (or ``run.unverified``) event in the outbound queue
  (:mod:`companyd.alerts._outbound`); :meth:`Results.webhook_done` records its fate.

A delivery that cannot be made publishes ``result_undelivered`` (an alert with the reason);
one made publishes ``result_delivered`` (logged). Nothing is silent: each delivery is also
recorded in the run's record (:class:`DeliveryLog`, the run journal: ``runs show``) — done
(with the Telegram message id, the file, the memory entity), queued (in the outbox, or for
the digest) or not made and why — and a result that could not be delivered (Telegram not
configured or refusing, a file that cannot be written) is kept in the founder's inbox
(a ``kept`` desk item), never nowhere. :func:`result_records` also makes the
messages of a follow-up's answer (``kind`` ``reply``: sent only to the chat it answers, as
a reply to the founder's message).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from companyd._fs import make_dirs, write_atomic
from companyd.admin import ResultDelivery, format_when
from companyd.alerts._coalesce import AlertBook
from companyd.alerts._digest import next_digest
from companyd.alerts._outbound import OutboundRow
from companyd.alerts._outbox import AlertRecord, Delivery
from companyd.alerts._policy import quiet_until
from companyd.alerts._render import MAX_TEXT, split_text
from companyd.alerts._telegram import redact
from companyd.alerts._values import result_cost
from companyd.alerts._webhooks import Webhooks
from companyd.events import EventBus, ResultDelivered, ResultUndelivered, RoutineResult

__all__ = [
    "CAPTION_LIMIT",
    "MAX_PARTS",
    "DeliveryLog",
    "MemoryPort",
    "Results",
    "document_body",
    "document_of",
    "file_path",
    "result_records",
    "result_text",
]

log = logging.getLogger("companyd.alerts.service")

#: A result that needs more than this many messages is sent as one ``.md`` document instead
#: (docs/alerts.md: three messages still read as a conversation; more is a report, and a
#: file is one thing to read, forward or save).
MAX_PARTS = 3
#: Telegram's limit on a document's caption, in characters.
CAPTION_LIMIT = 1024
#: How much of a document's result its caption shows (lines, characters).
PREVIEW_LINES, PREVIEW_CHARS = 8, 600
#: Longest observation written to memory (the memory goes into prompts).
MEMORY_LIMIT = 2000


class MemoryPort(Protocol):
    """The company memory as the pager writes to it (:class:`companyd.memory.MemoryService`)."""

    async def call(
        self, tool: str, arguments: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Run one MCP memory tool."""
        ...


class DeliveryLog(Protocol):
    """Where the pager records what became of each result (the daemon's: the run journal
    and the founder's desk, :class:`companyd.daemon._deliveries.ResultRecords`).
    """

    async def record(self, run_id: str, entry: ResultDelivery) -> None:
        """Add ``entry`` to run ``run_id``'s record (``runs show``)."""
        ...

    async def keep(self, data: Mapping[str, Any], reason: str) -> str | None:
        """Keep an undelivered result in the founder's inbox (once per run); the item's id,
        or None when there is no inbox to keep it in.
        """
        ...

    async def records(self, run_ids: Sequence[str]) -> Mapping[str, Sequence[ResultDelivery]]:
        """The delivery records of ``run_ids`` (oldest first; a run without any: absent)."""
        ...


def delivery(
    to: str,
    outcome: str,
    text: str,
    *,
    at: float,
    where: str | None = None,
    message_id: int | None = None,
    reason: str | None = None,
    kept: str | None = None,
) -> ResultDelivery:
    """One record of a delivery (see :class:`~companyd.admin._blocks.ResultDelivery`)."""
    return {
        "to": to,
        "outcome": outcome,
        "at": at,
        "where": where,
        "message_id": message_id,
        "reason": reason,
        "kept": kept,
        "text": text,
    }


def unverified_line(data: Mapping[str, Any]) -> str:
    """``⚠ unverified: <why>`` for a result whose run ended ``unverified`` (its answer did
    not hold against the run's record, docs/agents.md "Verification"); "" otherwise.
    """
    why = data.get("unverified")
    return f"⚠ unverified: {why}" if why else ""


def _warned(head: str, data: Mapping[str, Any]) -> str:
    """``head``, with the unverified warning on the line under it (seen before the result)."""
    warning = unverified_line(data)
    return f"{head}\n{warning}" if warning else head


def result_text(data: Mapping[str, Any]) -> str:
    """The message for a result (``routine`` set) or a follow-up's answer (``reply_to``);
    an unverified result says so under its heading.
    """
    agent = str(data.get("agent") or "?")
    answer = str(data.get("answer") or "").strip() or "(no answer)"
    head = f"📝 {data['routine']} — {agent}" if data.get("routine") else f"💬 {agent}"
    head = _warned(head, data)
    tail = f"{result_cost(data)} · {data.get('run_id') or '?'} · reply to follow up"
    return redact(f"{head}\n\n{answer}\n\n— {tail}")


def document_body(data: Mapping[str, Any], when: float, tz: ZoneInfo) -> str:
    """The Markdown of a result as a file (``deliver: [file]``, or a result too long for
    messages): a heading with the routine (or the agent's answer) and the time, a line with
    the agent, cost and run id, then the whole result; redacted.
    """
    at = format_when(when, tz)
    title = data.get("routine") or f"{data.get('agent')}'s answer"
    answer = str(data.get("answer") or "").strip()
    warning = unverified_line(data)
    head = (
        f"# {title} — {at}\n\n"
        f"{data.get('agent')} · {result_cost(data)} · {data.get('run_id')}\n\n"
        + (f"**{warning}**\n\n" if warning else "")
    )
    return redact(head + answer + "\n")


def document_of(data: Mapping[str, Any], when: float, tz: ZoneInfo) -> tuple[str, str, str]:
    """A result too long for :data:`MAX_PARTS` messages as ``(file name, Markdown, caption)``:
    the file ``<routine or agent>-<run id>.md`` holds it whole (:func:`document_body`); the
    caption names the routine, the agent, the cost and the run id like a message does, with
    the result's first lines as a preview, within Telegram's :data:`CAPTION_LIMIT`.
    """
    body = document_body(data, when, tz)
    name = f"{data.get('routine') or data.get('agent') or 'result'}-{data.get('run_id')}.md"
    answer = redact(str(data.get("answer") or "").strip())
    preview = "\n".join(answer.splitlines()[:PREVIEW_LINES])[:PREVIEW_CHARS].rstrip()
    agent = str(data.get("agent") or "?")
    head = f"📝 {data['routine']} — {agent}" if data.get("routine") else f"💬 {agent}"
    head = _warned(head, data)
    size = f"{len(answer):,} characters"
    tail = f"— {result_cost(data)} · {data.get('run_id') or '?'} · reply to follow up"
    caption = f"{head}\n📎 the whole result ({size}): {name}\n\n{preview}…\n\n{tail}"
    if len(caption) > CAPTION_LIMIT:  # a long routine name or run id: the preview gives way
        room = max(0, len(preview) - (len(caption) - CAPTION_LIMIT))
        caption = caption.replace(f"{preview}…", f"{preview[:room]}…", 1)[:CAPTION_LIMIT]
    return name, body, caption


def result_records(
    book: AlertBook,
    data: Mapping[str, Any],
    *,
    kind: str,
    now: float,
    chats: Sequence[int],
    reply_to: Mapping[int, int] | None = None,
) -> list[AlertRecord]:
    """The outbox records of one result: one per message (a result up to :data:`MAX_PARTS`
    messages long is split), or one record carrying a ``.md`` document (``data["document"]``:
    ``{"name", "body"}``, its caption the record's text) for a longer one; each held through
    quiet hours; ``reply_to`` (chat → message id) makes them replies.
    """
    text = result_text(data)
    parts = split_text(text, MAX_TEXT, MAX_PARTS + 1)
    document: dict[str, str] | None = None
    if len(parts) > MAX_PARTS:
        when = float(data.get("ended") or now)
        name, markdown, caption = document_of(data, when, book.policy.tz)
        parts, document = [caption], {"name": name, "body": markdown}
    held = quiet_until(now, book.policy.quiet, book.policy.quiet_tz)
    run_id = str(data.get("run_id") or "")
    body: dict[str, Any] = {
        k: data.get(k)
        for k in ("routine", "agent", "run_id", "cost_usd", "task", "offline")
        if k in data
    }
    if document is not None:
        body["document"] = document
    out = []
    for i, part in enumerate(parts, 1):
        rec = AlertRecord(
            id=book.next_id,
            key=f"{kind}|{run_id}|{book.next_id}",
            kind=kind,
            severity="info",
            source="alerts",
            data={
                **body,
                "part": i,
                "parts": len(parts),
                "reply_to": {str(c): m for c, m in (reply_to or {}).items()},
            },
            counts={kind: 1},
            first_ts=now,
            last_ts=now,
            window_end=now,
            held_until=held,
            text=part,
            deliveries={c: Delivery() for c in chats},
            persisted=False,
        )
        book.next_id += 1
        book.alerts[rec.id] = rec
        out.append(rec)
    return out


def file_path(state_dir: Path, routine: str, run_id: str, ended: float, tz: ZoneInfo) -> Path:
    """``<state_dir>/outputs/<routine>/<date>-<run>.md`` (the date in the company's zone)."""
    day = datetime.fromtimestamp(ended, tz).date().isoformat()
    return state_dir / "outputs" / routine / f"{day}-{run_id}.md"


class Results:
    """Turns ``routine_result`` events into deliveries (see module docstring).

    Args:
        book: the pager's alerts (telegram and digest deliveries go into its outbox).
        state_dir: where ``outputs/`` is.
        bus: where ``result_delivered`` / ``result_undelivered`` go.
        memory: the company memory, or None (``memory`` deliveries are then refused).
        log: where each delivery is recorded and an undelivered result kept (None: only
            the events and the daemon's log say it).
    """

    def __init__(
        self,
        book: AlertBook,
        state_dir: Path,
        *,
        bus: EventBus,
        memory: MemoryPort | None,
        log: DeliveryLog | None = None,
    ) -> None:
        self._book = book
        self._state_dir = state_dir
        self._bus = bus
        self._memory = memory
        self._log = log
        #: why nothing goes to Telegram, while the pager runs without it (set by the service)
        self.off_reason = "Telegram is not configured"
        #: the webhooks out, while the pager has an outbox for them (set by the service)
        self.webhooks: Webhooks | None = None

    async def take(
        self,
        event: RoutineResult,
        made: list[str] | None = None,
        failed: list[str] | None = None,
        after_save: list[Callable[[], Awaitable[None]]] | None = None,
    ) -> list[AlertRecord]:
        """Deliver one result: memory and file now; telegram and digest as outbox records
        (returned, not yet saved: the caller writes them with the rest of its batch). The
        deliveries done (or queued) are appended to ``made``, the others to ``failed``;
        each is recorded in the run's record, and a result with a delivery not made is kept
        in the founder's inbox. With ``after_save``, those records are appended there for
        the caller to write once it has saved the returned outbox records (else they are
        written here, before the caller's save): a stop in between must not leave a record
        of a message that was never queued.
        """
        data = event.data
        made = [] if made is None else made
        failed = [] if failed is None else failed
        records: list[AlertRecord] = []
        # The records are written after every delivery is made: a pager stopping meanwhile
        # may cut the records short, never a delivery (they come first, as before records).
        notes: list[Callable[[], Awaitable[None]]] = [] if after_save is None else after_save
        for to in event.deliver:
            try:
                if to in ("telegram", "digest"):
                    queued = self._queue(to, data)
                    records += queued
                    if queued:
                        made.append(to)
                        notes.append(partial(self._queued, data, to, queued))
                    else:
                        failed.append(to)
                        why = f"Telegram is not configured ({self.off_reason})"
                        notes.append(partial(self._undelivered, data, to, why, off=True))
                    continue
                if to.startswith("webhook:"):
                    if await self._webhook(to, data):
                        made.append(to)
                        at = self._hhmm(self._book.clock.time())
                        said = (
                            f"queued for {to} at {at} (in the outbox until the receiver takes it)"
                        )
                        notes.append(partial(self._record, data, to, "queued", said))
                    else:
                        failed.append(to)
                        why = (
                            f"the pager has no webhook {to.partition(':')[2]!r} in "
                            "alerts.webhooks (or no outbox open yet for it)"
                        )
                        notes.append(partial(self._undelivered, data, to, why))
                    continue
                if to == "file":
                    path = await self._file(data)
                    self._told(data, to, str(path))
                    said = f"written to {self._shown(path)}"
                    notes.append(
                        partial(self._record, data, to, "delivered", said, where=str(path))
                    )
                elif to == "memory":
                    entity = await self._remember(data)
                    self._told(data, to, entity)
                    said = f"added to the company memory ({entity})"
                    notes.append(partial(self._record, data, to, "delivered", said, where=entity))
                else:
                    failed.append(to)
                    notes.append(partial(self._undelivered, data, to, f"unknown delivery {to!r}"))
                    continue
                made.append(to)
            except Exception as exc:  # one failed delivery must not stop the others
                failed.append(to)
                why = f"{type(exc).__name__}: {exc}"
                notes.append(partial(self._undelivered, data, to, why))
        if after_save is None:
            for note in notes:
                await note()
        return records

    async def sent(self, rec: AlertRecord, chat_id: int, message_id: int) -> None:
        """The sender delivered ``rec`` to ``chat_id``: record it for a result's first
        message (a result in several messages is one delivery).
        """
        if rec.kind != "result" or int(rec.data.get("part") or 1) != 1:
            return
        at = self._book.clock.time()
        text = f"delivered to telegram at {self._hhmm(at)} (message {message_id})"
        if len(rec.deliveries) > 1:
            text = (
                f"delivered to telegram chat {chat_id} at {self._hhmm(at)} (message {message_id})"
            )
        await self._record(
            rec.data, "telegram", "delivered", text, where=str(chat_id), message_id=message_id
        )

    async def refused(self, rec: AlertRecord, chat_id: int, why: str) -> None:
        """Telegram refused ``rec`` for good in ``chat_id``: for a result (its first
        message), the delivery is recorded as not made and the result kept in the inbox.
        """
        if rec.kind != "result" or int(rec.data.get("part") or 1) != 1:
            return
        await self._undelivered(
            rec.data, "telegram", f"Telegram refused it in chat {chat_id}: {why}"
        )

    async def _webhook(self, to: str, data: Mapping[str, Any]) -> bool:
        """Queue the result for ``webhook:NAME``; False when the pager has no such webhook."""
        hooks = self.webhooks
        if hooks is None:
            return False
        return await hooks.result(to.partition(":")[2], data, self._book.clock.time())

    async def webhook_done(self, row: OutboundRow) -> bool:
        """The outbound queue's final word on a message: for a routine's result
        (``deliver: [webhook:NAME]``), the delivery is recorded in the run's record —
        delivered, or not (refused for good, or given up: logged, alerted and the result
        kept in the inbox; True then, the queue says nothing more).
        """
        if not row.key.startswith("result:"):
            return False
        try:
            data = json.loads(row.body).get("data") or {}
        except ValueError:
            return False
        to = f"webhook:{row.target}"
        if row.state == "sent":
            at = row.sent_at or self._book.clock.time()
            self._told(data, to, row.id)
            text = f"delivered to {to} at {self._hhmm(at)} (webhook-id {row.id})"
            await self._record(data, to, "delivered", text, where=row.id)
            return False
        await self._undelivered(data, to, f"{row.last_error or 'refused'} ({row.id})")
        return True

    def _hhmm(self, at: float) -> str:
        return datetime.fromtimestamp(at, self._book.policy.tz).strftime("%H:%M")

    def _shown(self, path: Path) -> str:
        """``path`` as the founder finds it: relative to the state directory."""
        try:
            return str(path.relative_to(self._state_dir))
        except ValueError:
            return str(path)

    async def _queued(self, data: Mapping[str, Any], to: str, queued: list[AlertRecord]) -> None:
        at = self._book.clock.time()
        held = queued[0].held_until
        if to == "digest":
            due = datetime.fromtimestamp(held or at, self._book.policy.tz)
            text = f"queued for the digest of {due:%Y-%m-%d %H:%M}"
        elif held is not None and held > at:
            text = (
                f"queued for telegram at {self._hhmm(at)}: held through quiet hours until "
                f"{self._hhmm(held)}"
            )
        else:
            text = (
                f"queued for telegram at {self._hhmm(at)} (in the outbox until Telegram takes it)"
            )
        await self._record(data, to, "queued", text)

    async def _undelivered(
        self, data: Mapping[str, Any], to: str, reason: str, *, off: bool = False
    ) -> None:
        """A delivery not made: logged, published, recorded, and the result kept."""
        reason = redact(reason)
        if off:
            log.warning(
                "alerts: the result of routine %r (%s) was not delivered to %s: %s — kept in "
                "the inbox",
                data.get("routine"),
                data.get("run_id"),
                to,
                reason,
            )
            self._publish_undelivered(data, to, reason)
        else:
            self._failed(data, to, reason)
        kept = await self._keep(data, reason)
        where = f"kept in the inbox ({kept})" if kept else "kept only in this record"
        head = reason.split(" (", 1)[0] if off else reason
        await self._record(
            data,
            to,
            "not_delivered",
            f"not delivered to {to}: {head} — {where}",
            reason=reason,
            kept=kept,
        )

    async def _keep(self, data: Mapping[str, Any], reason: str) -> str | None:
        if self._log is None:
            return None
        try:
            return await self._log.keep(data, reason)
        except Exception:  # the record below still says it was not delivered
            log.exception(
                "alerts: could not keep the result of run %s in the inbox", data.get("run_id")
            )
            return None

    async def _record(
        self,
        data: Mapping[str, Any],
        to: str,
        outcome: str,
        text: str,
        *,
        where: str | None = None,
        message_id: int | None = None,
        reason: str | None = None,
        kept: str | None = None,
    ) -> None:
        run_id = data.get("run_id")
        if self._log is None or not run_id:
            return
        entry = delivery(
            to,
            outcome,
            text,
            at=self._book.clock.time(),
            where=where,
            message_id=message_id,
            reason=reason,
            kept=kept,
        )
        try:
            await self._log.record(str(run_id), entry)
        except Exception:  # the delivery itself stands; only its record is missing
            log.exception("alerts: could not record a delivery of run %s: %s", run_id, text)

    def _queue(self, to: str, data: Mapping[str, Any]) -> list[AlertRecord]:
        book = self._book
        if book.settings is None:
            return []  # the caller records why, and keeps the result in the inbox
        now = book.clock.time()
        if to == "telegram":
            return result_records(book, data, kind="result", now=now, chats=book.settings.chat_ids)
        item = AlertRecord(
            id=book.next_id,
            key=f"digest_item|{data.get('run_id')}",
            kind="digest_item",
            severity="info",
            source="alerts",
            data={
                k: data.get(k)
                for k in (
                    "routine",
                    "agent",
                    "run_id",
                    "cost_usd",
                    "answer",
                    "task",
                    "unverified",
                    "offline",
                )
            },
            counts={"digest_item": 1},
            first_ts=now,
            last_ts=now,
            window_end=now,
            held_until=next_digest(now, book.policy.digest_at, book.policy.tz),
            text="",
            deliveries={c: Delivery() for c in book.settings.chat_ids},
            persisted=False,
        )
        book.next_id += 1
        book.alerts[item.id] = item
        return [item]

    async def _file(self, data: Mapping[str, Any]) -> Path:
        tz = self._book.policy.tz
        path = file_path(
            self._state_dir,
            str(data.get("routine")),
            str(data.get("run_id")),
            float(data.get("ended") or self._book.clock.time()),
            tz,
        )
        body = document_body(data, float(data.get("ended") or 0.0), tz).encode("utf-8")

        def write() -> None:
            make_dirs(path.parent)
            write_atomic(path, body)

        await asyncio.to_thread(write)  # fsyncs: never on the event loop
        return path

    async def _remember(self, data: Mapping[str, Any]) -> str:
        if self._memory is None:
            raise RuntimeError("the company memory is not available to the pager")
        entity = f"routine:{data.get('routine')}"
        answer = " ".join(str(data.get("answer") or "").split())
        if len(answer) > MEMORY_LIMIT:
            answer = answer[: MEMORY_LIMIT - 1] + "…"
        ended = float(data.get("ended") or self._book.clock.time())
        day = datetime.fromtimestamp(ended, self._book.policy.tz).date().isoformat()
        await self._memory.call(
            "create_entities",
            {"entities": [{"name": entity, "entityType": "routine", "observations": []}]},
        )
        await self._memory.call(
            "add_observations",
            {
                "observations": [
                    {
                        "entityName": entity,
                        "contents": [
                            f"{day} result ({data.get('run_id')})"
                            + (f" [{unverified_line(data)}]" if data.get("unverified") else "")
                            + f": {answer}"
                        ],
                    }
                ]
            },
        )
        return entity

    def _told(self, data: Mapping[str, Any], to: str, where: str) -> None:
        self._bus.publish(
            ResultDelivered(
                source="alerts",
                routine=str(data.get("routine")),
                run_id=str(data.get("run_id")),
                to=to,
                where=where,
            )
        )

    def _failed(self, data: Mapping[str, Any], to: str, reason: str) -> None:
        reason = redact(reason)
        log.error(
            "alerts: the result of routine %r (%s) was not delivered to %s: %s",
            data.get("routine"),
            data.get("run_id"),
            to,
            reason,
        )
        self._publish_undelivered(data, to, reason)

    def _publish_undelivered(self, data: Mapping[str, Any], to: str, reason: str) -> None:
        self._bus.publish(
            ResultUndelivered(
                source="alerts",
                routine=str(data.get("routine")),
                run_id=str(data.get("run_id")),
                to=to,
                reason=reason,
            )
        )

    async def channel_done(self, row: OutboundRow) -> bool:
        """The outbound queue's final word on a channel's message (docs/alerts.md, "Other
        channels"): for a routine's result (a channel with ``deliver: true``), the delivery
        is recorded in the run's record — ``delivered to channel:NAME at HH:MM``, or not
        delivered (a URL Apprise cannot use, or given up after days: logged, alerted and the
        result kept in the inbox: True then, the queue says nothing more). Alerts are not
        recorded anywhere but the outbox.
        """
        if not row.key.startswith("result:"):
            return False
        try:
            data = json.loads(row.body).get("data") or {}
        except ValueError:
            return False
        if row.state == "sent":
            at = row.sent_at or self._book.clock.time()
            self._told(data, row.target, row.id)
            text = f"delivered to {row.target} at {self._hhmm(at)}"
            await self._record(data, row.target, "delivered", text, where=row.id)
            return False
        await self._undelivered(data, row.target, row.last_error or "refused")
        return True
