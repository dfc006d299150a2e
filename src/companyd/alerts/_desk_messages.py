"""The founder's desk in the Telegram thread: what its messages become once decided.

An item on the founder's desk (a tool call to approve, a question, a routine's result
awaiting approval) is one alert message with buttons. The decision may come from anywhere —
its button, a reply, ``/approve``, ``companyd approve`` on the command line, the deadline —
and the desk says so with ``founder_decided``. Here the pager keeps the thread true:

* :meth:`DeskMessages.decided` — the item's message (and its reminder) loses its decision
  buttons and says who decided, via what and when (a button press did that itself on the
  message pressed: nothing more there). A stale
  Approve under a result approved on the command line would invite a press that can only
  be refused;
* :meth:`DeskMessages.next_round` — a result's round 2… (after "Request changes") is a reply
  to the founder's message asking for the change (or, asked on the command line, to the
  round sent back);
* :meth:`DeskMessages.approved` — once an approved result's deliveries are made, one short
  confirmation in the thread, as a reply to the result's message: "✅ daily-post approved —
  delivered to memory, file".

:func:`alert_of` finds the message of an item (in the book, else in the outbox).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from companyd.alerts._coalesce import AlertBook
from companyd.alerts._outbox import AlertRecord, Delivery
from companyd.desk import on_desk
from companyd.events import FounderDecided, OperatorAction, RoutineResult

__all__ = ["DECISION_ACTIONS", "DeskDecisions", "DeskMessages", "alert_of"]

#: The buttons that decide an item: gone once it is decided.
DECISION_ACTIONS = frozenset({"approve", "reject", "changes"})
#: The alert kinds of an item's messages with its buttons: the one that asks, and its
#: reminder (each found apart: the newest of the item's alerts is the reminder's).
ITEM_KINDS = (
    "founder_approval_requested",
    "founder_question",
    "founder_result_for_approval",
    "founder_reminder",
)

_SAID = {
    "approved": "approved",
    "rejected": "rejected",
    "answered": "answered",
    "changes_requested": "sent back with changes",
    "expired": "expired: no answer in time",
    "withdrawn": "withdrawn: the run that asked no longer waits for it",
}


async def alert_of(
    book: AlertBook, field: str, value: str, kind: str | None = None
) -> AlertRecord | None:
    """The newest alert whose data has ``field`` = ``value`` (of ``kind``, if given), taken
    into the book so that an edit of it is the book's; None if neither book nor outbox has
    one.
    """
    found = [
        r
        for r in book.alerts.values()
        if r.data.get(field) == value and (kind is None or r.kind == kind) and r.kind != "digest"
    ]
    if found:
        return max(found, key=lambda r: r.id)
    rec = await book.store.find(field, value, kind) if book.store is not None else None
    if rec is not None:
        rec = book.alerts.setdefault(rec.id, rec)
    return rec


#: An operator action → the alert it decides (its data field naming the target, its
#: kind) and the buttons the decision makes moot.
_ACTED_ON: dict[str, tuple[str, str, frozenset[str]]] = {
    "approve": ("proposal_id", "proposal_created", frozenset({"approve", "reject"})),
    "reject": ("proposal_id", "proposal_created", frozenset({"approve", "reject"})),
    "retry": ("task_id", "task_quarantined", frozenset({"retry"})),
}


def _still_open(rec: AlertRecord) -> bool:
    """Whether an item's message still reads as waiting: it offers decision buttons, or
    (a question, answered by a reply) it has not said its decision yet.
    """
    if any(b.get("action") in DECISION_ACTIONS for b in rec.buttons):
        return True
    return rec.kind == "founder_question" and not rec.data.get("decided")


def _said(book: AlertBook, rec: AlertRecord, line: str) -> None:
    """Add ``line`` under ``rec`` and show it now, not after the coalescing throttle."""
    rec.footer.append(line)
    rec.version += 1
    rec.edit_after = 0.0
    book.rerender(rec)


class DeskDecisions(Protocol):
    """The founder's desk as the pager reads it at start (the daemon's:
    :class:`companyd.daemon._deliveries.ResultRecords`).
    """

    async def decided(self, item_ids: Sequence[str]) -> list[FounderDecided]:
        """The items among ``item_ids`` no longer pending, each as the ``founder_decided``
        event its decision published (stamped with the time of the decision).
        """
        ...

    async def proposals_decided(self, proposal_ids: Sequence[str]) -> list[OperatorAction]:
        """The proposals among ``proposal_ids`` no longer pending, each as the operator's
        action that decided it (stamped with the time of the decision).
        """
        ...


class DeskMessages:
    """Keeps the desk's messages true to the founder's decisions (see module docstring).

    Args:
        book: the pager's alerts (the messages to edit, the notes to send).
    """

    def __init__(self, book: AlertBook) -> None:
        self._book = book

    async def decided(self, event: FounderDecided) -> list[AlertRecord]:
        """The item's messages after ``event`` — the one that asked and its reminder, which
        carries the same buttons: each loses its decision buttons and gets a line saying
        who decided, via what, when (rendered, not saved). Empty when there is nothing to
        change (no such message, or its button was the decision and the other has none).
        """
        when = datetime.fromtimestamp(event.ts, self._book.policy.tz)
        said = _SAID.get(event.state, event.state)
        if event.state not in ("expired", "withdrawn"):
            said += f" by {event.by or 'the founder'}" + (f" via {event.via}" if event.via else "")
        out: list[AlertRecord] = []
        for kind in ITEM_KINDS:
            rec = await alert_of(self._book, "item_id", event.item_id, kind)
            if rec is None or not _still_open(rec):
                continue
            if rec.id in self._book.pressing:
                continue  # its button decided: the press words the line (one, not two)
            rec.buttons = [b for b in rec.buttons if b.get("action") not in DECISION_ACTIONS]
            rec.data["decided"] = event.state
            _said(self._book, rec, f"✔ {said} at {when:%H:%M}")
            out.append(rec)
        return out

    async def acted(self, event: OperatorAction) -> list[AlertRecord]:
        """The message of a proposal or a quarantined task the founder decided elsewhere (the
        CLI, the dashboard, a typed ``/approve``): it loses the buttons of that decision and
        gets the action's line (rendered, not saved). Desk items are :meth:`decided`'s.
        """
        found = _ACTED_ON.get(event.action)
        if not event.ok or found is None or on_desk(event.target):  # founder_decided's
            return []
        field, kind, actions = found
        rec = await alert_of(self._book, field, event.target, kind)
        if rec is None or rec.id in self._book.pressing:
            return []
        offered = [b for b in rec.buttons if b.get("action") in actions]
        if not offered:
            return []
        rec.buttons = [b for b in rec.buttons if b.get("action") not in actions]
        when = datetime.fromtimestamp(event.ts, self._book.policy.tz)
        _said(self._book, rec, f"✔ {event.message} — via {event.via} at {when:%H:%M}")
        return [rec]

    async def catch_up(self, desk: DeskDecisions) -> list[AlertRecord]:
        """The items' messages that still offer decision buttons for an item decided while
        the pager was not running (``companyd approve`` with the daemon stopped, or an
        event lost to a kill): each edited as :meth:`decided` would have (rendered, not
        saved). Reads the outbox and the desk once: for the start.
        """
        store = self._book.store
        if store is None:
            return []
        offered: list[str] = []
        # and proposals decided meanwhile (`companyd reject prop-…` with the daemon stopped)
        proposals: list[str] = []
        for rec in await store.of_kinds([*ITEM_KINDS, "proposal_created"]):  # one read
            if rec.kind == "proposal_created":
                pid = rec.data.get("proposal_id")
                offers = any(b.get("action") in ("approve", "reject") for b in rec.buttons)
                if offers and isinstance(pid, str) and pid not in proposals:
                    proposals.append(pid)
                continue
            item = rec.data.get("item_id")
            if _still_open(rec) and isinstance(item, str) and item not in offered:
                offered.append(item)
        out: dict[int, AlertRecord] = {}
        for event in await desk.decided(offered) if offered else []:
            for rec in await self.decided(event):
                out[rec.id] = rec
        for action in await desk.proposals_decided(proposals) if proposals else []:
            for rec in await self.acted(action):
                out[rec.id] = rec
        return list(out.values())

    async def next_round(self, rec: AlertRecord) -> None:
        """Make ``rec`` (a result's round 2…, naming the round it ``follows``) a reply to
        the founder's message asking for the change, in each chat (else to the round sent
        back).
        """
        follows = rec.data.get("follows")
        if not isinstance(follows, str):
            return
        before = await alert_of(self._book, "item_id", follows)
        if before is None:
            return
        asked = before.data.get("changes_message") or {}
        reply_to: dict[str, int] = {}
        for chat_id, d in before.deliveries.items():
            message = asked.get(str(chat_id)) or d.message_id
            if isinstance(message, int):
                reply_to[str(chat_id)] = message
        rec.data["reply_to"] = reply_to

    async def approved(
        self, event: RoutineResult, made: Sequence[str], failed: Sequence[str]
    ) -> list[AlertRecord]:
        """The confirmation of an approved result whose deliveries ``made`` (and ``failed``)
        are done: one message per chat, a reply to the result's message (not saved).
        """
        book = self._book
        if book.settings is None:
            return []
        text = f"✅ {event.routine} approved"
        text += f" — delivered to {', '.join(made)}" if made else " — nothing more to deliver"
        if failed:
            text += f"; not delivered to {', '.join(failed)} (see the alert)"
        shown = await alert_of(book, "run_id", event.run_id, "founder_result_for_approval")
        reply_to = {}
        if shown is not None:
            reply_to = {str(c): d.message_id for c, d in shown.deliveries.items() if d.message_id}
        now = book.clock.time()
        rec = AlertRecord(
            id=book.next_id,
            key=f"approved|{event.run_id}",
            kind="desk_note",
            severity="info",
            source="alerts",
            data={"routine": event.routine, "run_id": event.run_id, "reply_to": reply_to},
            counts={"desk_note": 1},
            first_ts=now,
            last_ts=now,
            window_end=now,
            text=text,
            deliveries={c: Delivery() for c in book.settings.chat_ids},
            persisted=False,
        )
        book.next_id += 1
        book.alerts[rec.id] = rec
        return [rec]
