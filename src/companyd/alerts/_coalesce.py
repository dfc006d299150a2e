"""The alert book: the alerts in memory, written through to the outbox, and how events join them.

:class:`AlertBook` owns the active alerts (:class:`~companyd.alerts._outbox.AlertRecord`) of
one running pager. It turns a routed event into an alert or folds it into the open one with
the same coalescing key (kind group, source, subject) within ``alerts.coalesce_seconds`` —
one message per story, showing the count; holds non-critical alerts created in quiet hours
and, when the window ends, folds them into one digest; and renders each alert's text.
:meth:`AlertBook.save` writes alerts to the outbox and degrades (logs once, goes on from
memory) when it cannot; a full or failing state disk is reported to the daemon's
:class:`~companyd._fs.DiskAlarm` as "alert outbox" (the one "state disk full" alert, sent
from memory) and cleared by the outbox's next write that succeeds. ``wake`` tells the sender
that there is something to deliver.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from companyd._fs import DiskAlarm, is_disk_failure
from companyd._sqlite import store_errors
from companyd.alerts import _digest as results_digest
from companyd.alerts._outbox import RESULT_KINDS, AlertRecord, AlertStore, Delivery
from companyd.alerts._policy import RANK, Policy, quiet_until, severity_of
from companyd.alerts._render import ICONS, Button, clip, compose, digest_line
from companyd.alerts._render_kinds import joining_data, render, story_count, story_key
from companyd.alerts._telegram import TelegramSettings, redact
from companyd.clock import Clock
from companyd.events import Event

if TYPE_CHECKING:  # a typed dict of the operator contract, for annotations only
    from companyd.admin import ResultDelivery

__all__ = ["AlertBook", "event_count"]

# One logger for the whole pager, as before the split into modules: operators (and the
# end-to-end test) filter the daemon's log on its name.
log = logging.getLogger("companyd.alerts.service")


def event_count(rec: AlertRecord) -> int:
    """How many events an alert tells (a crash story counts restarts, not exits)."""
    return story_count(rec.kind, rec.counts)


class AlertBook:
    """The active alerts of one pager, in memory and in the outbox.

    Args:
        policy: routing, coalescing window, quiet hours (replace ``policy`` on reload).
        clock: time for coalescing windows and quiet hours.
    """

    def __init__(self, policy: Policy, clock: Clock, alarm: DiskAlarm | None = None) -> None:
        self.policy = policy
        self.clock = clock
        # the daemon's disk alarm: an outbox write the state disk refuses reports "alert
        # outbox" failing (one "state disk full" alert, sent from memory), the next write
        # that succeeds reports it recovered
        self._alarm = alarm
        #: Telegram settings of the running pager; None: not sending (no alerts are made).
        self.settings: TelegramSettings | None = None
        self.store: AlertStore | None = None
        self.alerts: dict[int, AlertRecord] = {}
        #: coalescing key → the id of the alert still open for it
        self.open: dict[str, int] = {}
        self.next_id = 1
        #: set when something may be due for delivery
        self.wake = asyncio.Event()
        #: alerts whose button press is being acted on: the press words the decision's line
        #: itself, so the desk's ``founder_decided`` (which may arrive first) leaves them
        self.pressing: set[int] = set()
        self._store_failing = False
        # records a failed outbox write left out (a full disk), by id: the next save that
        # succeeds writes them too, in their state then — else a delivery recorded only in
        # memory would be sent again after a restart
        self._unsaved: dict[int, AlertRecord] = {}
        #: reads the delivery records of runs (the run journal's, through the daemon's
        #: DeliveryLog), for the digest to say where each result went; None: not said
        self.read_deliveries: (
            Callable[[Sequence[str]], Awaitable[Mapping[str, Sequence[ResultDelivery]]]] | None
        ) = None

    def load(self, records: list[AlertRecord], next_id: int, now: float) -> None:
        """Start from the outbox's active alerts (at the start of a run)."""
        assert self.settings is not None
        self.next_id = next_id
        self.forget_removed_chats(records, self.settings.chat_ids)
        self.alerts = {r.id: r for r in records}
        self.open = {r.key: r.id for r in records if r.status == "open" and r.window_end > now}

    @staticmethod
    def forget_removed_chats(records: list[AlertRecord], chats: Sequence[int]) -> None:
        """Alerts waiting for a chat the operator has since removed are not sent there."""
        for rec in records:
            for chat_id, d in rec.deliveries.items():
                if chat_id not in chats and d.state == "pending":
                    d.state, d.error = "failed", "chat removed from alerts.telegram"

    def _key(self, event: Event) -> str:
        return story_key(event.kind, event.source, event.data)

    def ingest(self, event: Event) -> AlertRecord | None:
        """The alert ``event`` creates or joins (not yet rendered or saved), or None."""
        severity = severity_of(self.policy, event)
        if severity is None or self.settings is None:
            return None
        now = self.clock.time()
        key = self._key(event)
        rec = self.alerts.get(self.open.get(key, -1))
        if rec is not None and (rec.window_end <= now or rec.status != "open"):
            rec = None
        if rec is None:
            held = (
                None
                if severity == "critical"
                else quiet_until(now, self.policy.quiet, self.policy.quiet_tz)
            )
            rec = AlertRecord(
                id=self.next_id,
                key=key,
                kind=event.kind,
                severity=severity,
                source=event.source,
                data=dict(event.data),
                counts={event.kind: 1},
                first_ts=event.ts,
                last_ts=event.ts,
                window_end=now + self.policy.coalesce,
                held_until=held,
                deliveries={c: Delivery() for c in self.settings.chat_ids},
                persisted=False,
            )
            self.next_id += 1
            _, buttons = render(rec.kind, rec.data, rec.source, rec.counts, self.policy.agents)
            self._set_buttons(rec, buttons)
            self.alerts[rec.id] = rec
            self.open[key] = rec.id
        else:
            rec.counts[event.kind] = rec.counts.get(event.kind, 0) + 1
            rec.data = {**rec.data, **joining_data(rec.kind, event.kind, event.data)}
            rec.last_ts = max(rec.last_ts, event.ts)
            if RANK[severity] > RANK.get(rec.severity, 1):
                rec.severity = severity
            if severity == "critical":
                rec.held_until = None
            rec.version += 1
        return rec

    def _set_buttons(self, rec: AlertRecord, buttons: Sequence[Button]) -> None:
        rec.buttons = []
        for b in buttons:
            rec.buttons.append({"id": rec.next_button, **b.to_dict()})
            rec.next_button += 1

    def rerender(self, rec: AlertRecord) -> None:
        """Rebuild ``rec.text`` from its merged data, counts and footer (redacted); a digest
        and a result keep their text. The caller saves it and wakes the sender.
        """
        if rec.kind == "digest" or rec.kind in RESULT_KINDS:
            return
        rendered, _ = render(
            rec.kind, rec.data, rec.source, rec.counts, self.policy.agents, self.policy.tz
        )
        rec.text = redact(
            compose(
                severity=rec.severity,
                rendered=rendered,
                count=event_count(rec),
                first_ts=rec.first_ts,
                last_ts=rec.last_ts,
                company=self.policy.company,
                tz=self.policy.tz,
                footer=rec.footer,
            )
        )

    async def _deliveries_of(
        self, items: Sequence[AlertRecord]
    ) -> Mapping[str, Sequence[ResultDelivery]]:
        """The delivery records of the digest items' runs ({} when they cannot be read:
        the digest goes out without them rather than not at all).
        """
        if self.read_deliveries is None:
            return {}
        runs = [str(r.data.get("run_id")) for r in items if r.data.get("run_id")]
        try:
            return await self.read_deliveries(runs)
        except Exception:
            log.exception("alerts: the digest cannot read where its results went")
            return {}

    async def release_held(self, now: float) -> None:
        """Release what was held and is due at ``now``: digest items (at ``alerts.digest_at``)
        are folded into one results digest; results are released one by one (each is read
        whole); other alerts held through quiet hours are folded into one digest alert (a
        single one is simply sent); everything changed is saved.
        """
        held = sorted(
            (
                r
                for r in self.alerts.values()
                if r.held_until is not None and r.held_until <= now and r.status == "open"
            ),
            key=lambda r: r.id,
        )
        if not held:
            return
        items = [r for r in held if r.kind == "digest_item"]
        if items:
            # every result still waiting for a digest goes in this one: one held until
            # another digest time (made before alerts.digest_at changed) is not left apart
            ids = {r.id for r in items}
            items += sorted(
                (
                    r
                    for r in self.alerts.values()
                    if r.kind == "digest_item" and r.status == "open" and r.id not in ids
                ),
                key=lambda r: r.id,
            )
        results = [r for r in held if r.kind in RESULT_KINDS and r.kind != "digest_item"]
        due = [r for r in held if r.kind not in RESULT_KINDS]
        if items:
            assert self.settings is not None
            digest = results_digest.fold(
                items,
                digest_id=self.next_id,
                now=now,
                tz=self.policy.tz,
                chats=self.settings.chat_ids,
                deliveries=await self._deliveries_of(items),
            )
            self.next_id += 1
            digest.held_until = quiet_until(now, self.policy.quiet, self.policy.quiet_tz)
            self.alerts[digest.id] = digest
            await self.save(digest, *items)
        for r in results:
            r.held_until = None
        if results:
            await self.save(*results)
        if not due:
            return
        if len(due) == 1:
            due[0].held_until = None
            await self.save(due[0])
            return
        assert self.settings is not None
        tz = self.policy.tz
        lines = [f"{ICONS['digest']} While quiet hours were on: {len(due)} alerts"]
        for r in due:
            title = r.text.split("\n", 1)[0]
            at = f"{datetime.fromtimestamp(r.first_ts, tz):%H:%M}"
            lines.append(digest_line(title, event_count(r), at))
        lines.append(f"{self.policy.company} · {datetime.fromtimestamp(now, tz):%H:%M %Z, %d %b}")
        severity = max((r.severity for r in due), key=lambda s: RANK.get(s, 1))
        digest = AlertRecord(
            id=self.next_id,
            key=f"digest|{self.next_id}",
            kind="digest",
            severity=severity,
            source="alerts",
            data={"alerts": [r.id for r in due]},
            counts={"digest": 1},
            first_ts=now,
            last_ts=now,
            window_end=now,
            text=clip(redact("\n".join(lines))),
            deliveries={c: Delivery() for c in self.settings.chat_ids},
        )
        self.next_id += 1
        for r in due:
            r.status, r.folded_into, r.held_until = "folded", digest.id, None
            r.window_end = min(r.window_end, now)
            for d in r.deliveries.values():
                if d.state == "pending":
                    d.state = "folded"
        self.alerts[digest.id] = digest
        await self.save(digest, *due)

    async def save(self, *recs: AlertRecord) -> None:
        """Write to the outbox. If that fails (disk full, file gone), alerting goes on
        without it — delivering from memory beats stopping the pager — and says so; the
        records left out are written with the next save that succeeds.
        """
        if self.store is None:
            return
        batch = {**self._unsaved, **{r.id: r for r in recs}}
        self._unsaved = {}
        try:
            await self.store.save(*batch.values())
        except store_errors() as exc:
            for rid, rec in batch.items():  # a save meanwhile may have left some out too
                self._unsaved.setdefault(rid, rec)
            if not self._store_failing:
                log.error(
                    "alerts: cannot write the alert outbox %s (%s); alerts are still sent but "
                    "would not survive a restart — check the disk and the state directory",
                    self.store.where,
                    exc,
                )
                self._store_failing = True
            if self._alarm is not None and is_disk_failure(exc):
                self._alarm.failed("alert outbox", self.store.where, exc)
            return
        if self._store_failing:
            log.info("alerts: the alert outbox is writable again")
            self._store_failing = False
        if self._alarm is not None:
            self._alarm.recovered("alert outbox")

    def evict(self, now: float) -> None:
        """Forget the settled alerts whose coalescing window ended by ``now`` (they stay in the
        outbox): a new event with their key starts a new alert.
        """
        for rid in [r.id for r in self.alerts.values() if r.settled and r.window_end <= now]:
            rec = self.alerts.pop(rid)
            if self.open.get(rec.key) == rid:
                del self.open[rec.key]
