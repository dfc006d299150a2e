"""The operator's pager: Telegram alerts from the event stream, and commands from the phone.

:class:`AlertService` is a supervised child (``run(ctx)``, see
:mod:`companyd.supervision.child`). It subscribes to the :class:`~companyd.events.EventBus` and
turns the events worth a human's attention into Telegram messages — once, with the cause,
and with a button where an action fits — and it answers the operator's commands by calling
the daemon's :class:`~companyd.admin.Admin`.

What it guarantees:

* **Routing.** Each event gets a severity: ``alerts.routes[kind]`` if set (``off`` drops
  it), else the event's own. Alerts below ``alerts.min_severity`` are dropped, except the
  daemon's own lifecycle (started / stopping / reloaded) and improver proposals, which are
  always told (silently when ``info``) because they confirm the pager works and wait for a
  decision. Normal exits of children are never alerts.
* **One message per story.** Events with the same coalescing key (kind group, source and
  subject — e.g. crashes of one child under one supervisor) within ``alerts.coalesce_seconds``
  of the first one edit one message that shows the count, at most once every
  :data:`EDIT_INTERVAL` seconds. A crash loop is one message, not fifty. Telegram does not
  notify on edits, so a story that goes on past the window starts a new message.
* **Quiet hours.** Non-critical alerts created inside ``alerts.quiet_hours`` are held; when
  the window ends one digest tells them all (a single held alert is just sent).
* **Nothing lost, nothing blocks.** Every alert is written to the outbox
  (``<state_dir>/alerts.sqlite``) before it is sent. Sending runs in its own task: a slow or
  dead Telegram never holds up the event stream or the daemon. Failed sends wait, with
  backoff on the injected clock, and go out when Telegram is back — also after a restart.
  What was delivered is remembered (with its message id), so a restart does not resend it.
  Delivery is at-least-once: a crash between Telegram's answer and the write can repeat one.
* **Degrades, never stops.** Without Telegram settings the service is a silent sink that
  says once why; if Telegram is unreachable at start the service is still ready and keeps
  connecting in the background.
* **Commands from allowed chats only**: /status /spend /budget /jobs /pause /resume /ask
  /approve /reject /quarantine /retry /help. Anything from another chat is ignored and
  logged. /ask runs as its own task so other commands are answered meanwhile.
* **The bot token never appears** in logs, alerts or error texts (see
  :mod:`companyd.alerts.telegram`).

``companyd notify-failure UNIT`` (registered here) is the systemd ``OnFailure=`` side: the
daemon cannot report its own SIGKILL, OOM kill or watchdog death.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from companyd.admin import Admin, AdminError
from companyd.alerts.notify import notify_failure, unit_facts
from companyd.alerts.ops import COMMANDS, act, buttons_after, command_reply, help_text
from companyd.alerts.outbox import AlertRecord, AlertStore, Delivery
from companyd.alerts.render import ICONS, Button, clip, compose, split_text
from companyd.alerts.render_kinds import is_abnormal_exit, kind_spec, render
from companyd.alerts.render_status import format_result
from companyd.alerts.telegram import (
    TelegramSettings,
    build_application,
    protect,
    quiet_library_loggers,
    redact,
    resolve_settings,
    retry_after_seconds,
)
from companyd.clock import Clock, SystemClock
from companyd.config import CompanyConfig, QuietHoursSpec
from companyd.events import Event, EventBus, Subscription
from companyd.supervision.child import ChildContext

if TYPE_CHECKING:
    from telegram import CallbackQuery, InlineKeyboardMarkup, Message, Update, User

    from companyd.alerts.telegram import TelegramApp

# python-telegram-bot is imported where it is used, not here: every `companyd` command loads
# this module (for `notify-failure`), and the library takes most of a second to import.

__all__ = [
    "EDIT_INTERVAL",
    "AlertService",
    "notify_failure",
    "quiet_until",
    "register",
    "unit_facts",
]

log = logging.getLogger("companyd.alerts.service")

#: Minimum seconds between two edits of one coalesced message (Telegram rate-limits edits,
#: and the operator reads a counter, not a ticker).
EDIT_INTERVAL = 10.0
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
#: Most events taken off the bus per outbox transaction.
INTAKE_BATCH = 100
ASK_TIMEOUT = 300.0
#: Settled alerts older than this are forgotten (their buttons stop working).
RETENTION = 30 * 86400.0

_RANK = {"debug": 0, "info": 1, "warning": 2, "critical": 3}
#: Told whatever min_severity says (unless routed "off"): they confirm the pager works, and
#: a proposal waits for the operator's decision.
_ALWAYS = frozenset({"daemon_started", "daemon_stopping", "daemon_reloaded", "proposal_created"})


@dataclass(frozen=True)
class _Policy:
    """The parts of company.yaml the service reads while running (replaced on reload)."""

    min_rank: int
    routes: Mapping[str, str]
    coalesce: float
    quiet: QuietHoursSpec | None
    quiet_tz: ZoneInfo
    tz: ZoneInfo
    company: str
    agents: frozenset[str]

    @classmethod
    def of(cls, config: CompanyConfig) -> _Policy:
        spec = config.spec.alerts
        tz = ZoneInfo(config.timezone)
        quiet_tz = tz
        if spec.quiet_hours is not None and spec.quiet_hours.timezone:
            quiet_tz = ZoneInfo(spec.quiet_hours.timezone)
        return cls(
            min_rank=_RANK[spec.min_severity],
            routes=dict(spec.routes),
            coalesce=float(spec.coalesce_seconds),
            quiet=spec.quiet_hours,
            quiet_tz=quiet_tz,
            tz=tz,
            company=config.name,
            agents=frozenset(config.agents),
        )


def quiet_until(now: float, quiet: QuietHoursSpec | None, tz: ZoneInfo) -> float | None:
    """If ``now`` is inside the daily quiet window, the epoch time it ends; else None.

    The window may cross midnight (``23:00``–``07:00``); ``start == end`` means no window.
    """
    if quiet is None:
        return None
    sh, sm = (int(x) for x in quiet.start.split(":"))
    eh, em = (int(x) for x in quiet.end.split(":"))
    start, end = sh * 60 + sm, eh * 60 + em
    if start == end:
        return None
    local = datetime.fromtimestamp(now, tz)
    minute = local.hour * 60 + local.minute
    day = local.date()
    if start < end:
        if not start <= minute < end:
            return None
    elif minute >= start:
        day = day + timedelta(days=1)
    elif minute >= end:
        return None
    return datetime(day.year, day.month, day.day, eh, em, tzinfo=tz).timestamp()


def _event_count(rec: AlertRecord) -> int:
    if kind_spec(rec.kind).group == "crash":
        return max(rec.counts.get("restart", 0), rec.counts.get("child_exited", 0), 1)
    return max(sum(rec.counts.values()), 1)


class AlertService:
    """Telegram alerts and commands, as a supervised child.

    Args:
        config: the running company.yaml (``alerts`` section, time zone, agent names).
        state_dir: where ``alerts.sqlite`` (the outbox) lives.
        bus: the event stream; the service subscribes at construction, so events published
            before :meth:`run` starts (or while it restarts) are not missed.
        admin: the daemon's operator operations, called by commands and buttons.
        clock: time for coalescing windows, quiet hours, edit throttling and backoff.
    """

    def __init__(
        self,
        config: CompanyConfig,
        state_dir: Path,
        *,
        bus: EventBus,
        admin: Admin,
        clock: Clock | None = None,
    ) -> None:
        self._config = config
        self._policy = _Policy.of(config)
        self._state_dir = Path(state_dir)
        self._bus = bus
        self._admin = admin
        self._clock: Clock = clock or SystemClock()
        self._sub: Subscription = bus.subscribe(maxsize=10_000)
        self._store: AlertStore | None = None
        self._settings: TelegramSettings | None = None
        self._link: _Link | None = None
        self._alerts: dict[int, AlertRecord] = {}
        self._open: dict[str, int] = {}
        self._next_id = 1
        self._wake = asyncio.Event()
        self._retry_at = 0.0
        self._backoff = 0.0
        self._outage_logged = False
        self._token_logged = False
        self._flushing = False
        self._sender_stop = False
        self._state = "starting"
        self._reason = ""
        self._strangers: set[int] = set()
        self._store_failing = False
        self._tasks: set[asyncio.Task[None]] = set()

    # -- public -------------------------------------------------------------------------

    def update_config(self, config: CompanyConfig) -> None:
        """Apply a reloaded company.yaml: routes, severities, quiet hours, coalescing window,
        agent names. Telegram settings (token, chats, api_url) apply on the next start."""
        self._config = config
        self._policy = _Policy.of(config)

    def close(self) -> None:
        """Stop listening to the bus for good (when the service is discarded)."""
        self._sub.close()

    def snapshot(self) -> dict[str, Any]:
        """For ``companyd status``: ``{"telegram": "ok" | "degraded" | "off", "queued",
        "held", "failed", "reason", "commands", "commands_since", "commands_error"}``.

        ``telegram`` is the sending half. ``degraded``: connecting, or sends failing (alerts
        wait in the outbox); ``queued`` counts alerts not yet fully delivered, held ones
        included; ``failed`` counts deliveries Telegram refused for good.

        ``commands`` is the receiving half (getUpdates): ``"ok"``, ``"failing"`` (since the
        epoch time ``commands_since``, last error ``commands_error``), ``"starting"`` (not
        polling yet) or ``"off"``."""
        queued = held = failed = 0
        now = self._clock.time()
        for rec in self._alerts.values():
            if rec.held_until is not None and rec.held_until > now:
                held += 1
            if not rec.settled:
                queued += 1
            failed += sum(1 for d in rec.deliveries.values() if d.state == "failed")
        if self._state in ("off", "stopped"):
            telegram = "off"
        elif self._state == "up" and not (self._outage_logged or self._token_logged):
            telegram = "ok"
        else:
            telegram = "degraded"
        link = self._link
        if telegram == "off" or link is None:
            commands, since, error = ("off" if telegram == "off" else "starting"), None, ""
        else:
            commands, since, error = link.commands, link.commands_since, link.commands_error
        return {
            "telegram": telegram,
            "queued": queued,
            "held": held,
            "failed": failed,
            "reason": self._reason,
            "commands": commands,
            "commands_since": since,
            "commands_error": error,
        }

    def _sending_ok(self) -> bool:
        return self._state == "up" and not (self._outage_logged or self._token_logged)

    async def run(self, ctx: ChildContext) -> None:
        """Serve until ``ctx.stopping`` is set: ready as soon as the outbox is open,
        whether or not Telegram answers."""
        if self._sub.closed:
            self._sub = self._bus.subscribe(maxsize=10_000)
        settings = await asyncio.to_thread(resolve_settings, self._config.spec.alerts)
        if isinstance(settings, str):
            await self._run_as_sink(ctx, settings)
            return
        self._settings = settings
        protect(settings.token)
        quiet_library_loggers()
        try:
            await self._run_with_telegram(ctx, settings)
        except Exception as exc:
            # The supervisor records the exit reason (and may alert it): never the token.
            text = redact(f"{type(exc).__name__}: {exc}")
            if text != f"{type(exc).__name__}: {exc}":
                raise RuntimeError(text) from None
            raise

    # -- modes --------------------------------------------------------------------------

    async def _run_as_sink(self, ctx: ChildContext, reason: str) -> None:
        self._state, self._reason = "off", reason
        log.warning("alerts are not sent to Telegram: %s", reason)
        ctx.started({"telegram": "off", "reason": reason})
        stop = asyncio.ensure_future(ctx.stopping.wait())
        try:
            while not stop.done():
                get = asyncio.ensure_future(self._sub.get())
                await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
                if get.done():
                    event = get.result()
                    log.debug("alert not sent (no Telegram): %s from %s", event.kind, event.source)
                else:
                    get.cancel()
        finally:
            stop.cancel()

    async def _run_with_telegram(self, ctx: ChildContext, settings: TelegramSettings) -> None:
        self._state, self._reason = "connecting", ""
        # A restarted run() starts from the outbox, not from what the failed run left.
        self._flushing, self._retry_at, self._backoff = False, 0.0, 0.0
        self._sender_stop = False
        self._outage_logged = self._token_logged = False
        self._wake = asyncio.Event()
        store = AlertStore(self._state_dir / "alerts.sqlite")
        self._store = store
        tasks: list[asyncio.Task[None]] = []
        link: _Link | None = None
        try:
            note = await store.open()
            if note:
                log.error("%s", note)
            now = self._clock.time()
            records, self._next_id = await store.load_active(now)
            self._forget_removed_chats(records, settings.chat_ids)
            self._alerts = {r.id: r for r in records}
            self._open = {r.key: r.id for r in records if r.status == "open" and r.window_end > now}
            await store.prune(now - RETENTION)
            link = _Link(self, settings)
            self._link = link
            waiting = sum(1 for r in records if not r.settled)
            if waiting:
                log.info("alerts: %d alert(s) from before the restart wait in the outbox", waiting)
            ctx.started({"telegram": "connecting", "outbox": waiting})
            tasks = [
                asyncio.create_task(self._consume(), name="alerts:consume"),
                asyncio.create_task(self._sender(), name="alerts:send"),
                asyncio.create_task(link.run(), name="alerts:telegram"),
            ]
            await self._until_stopping(ctx, tasks)
            await self._stop_gracefully(tasks)
        finally:
            for t in tasks:
                t.cancel()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*tasks, *self._tasks, return_exceptions=True)
            if link is not None:
                await link.stop()
            await store.close()
            self._state = "stopped"

    @staticmethod
    def _forget_removed_chats(records: list[AlertRecord], chats: Sequence[int]) -> None:
        """Alerts waiting for a chat the operator has since removed are not sent there."""
        for rec in records:
            for chat_id, d in rec.deliveries.items():
                if chat_id not in chats and d.state == "pending":
                    d.state, d.error = "failed", "chat removed from alerts.telegram"

    @staticmethod
    async def _until_stopping(ctx: ChildContext, tasks: list[asyncio.Task[None]]) -> None:
        """Wait for the stop request; a task that fails meanwhile is a bug: its exception
        ends the service and the supervisor restarts it."""
        stop = asyncio.create_task(ctx.stopping.wait(), name="alerts:stopping")
        pending: set[asyncio.Task[Any]] = {stop, *tasks}
        try:
            while stop in pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    if t is not stop and not t.cancelled() and t.exception() is not None:
                        raise t.exception() from None  # type: ignore[misc]
        finally:
            stop.cancel()

    async def _stop_gracefully(self, tasks: list[asyncio.Task[None]]) -> None:
        """Put every event already published into the outbox, then try once more (briefly)
        to deliver, coalescing edits included; what is left goes out after the restart."""
        consumer, sender = tasks[0], tasks[1]  # the link (tasks[2]) stays up for the flush
        consumer.cancel()
        # The sender is asked to stop after the delivery in flight, not cancelled in it: a
        # message Telegram accepted but whose id was not yet recorded would otherwise be
        # sent again as a new message instead of being edited.
        self._sender_stop = True
        self._wake.set()
        await asyncio.wait({sender}, timeout=FLUSH_TIMEOUT)
        sender.cancel()
        await asyncio.gather(consumer, sender, return_exceptions=True)
        # An intake cut short by the cancellation left its alerts unsaved: save them now.
        unsaved = [r for r in self._alerts.values() if not r.persisted]
        if unsaved:
            await self._save(*unsaved)
            for rec in unsaved:
                rec.persisted = True
        while batch := self._drain(INTAKE_BATCH):
            await self._intake(batch)
        if self._link is None or not self._link.ready:
            return
        self._flushing = True
        self._retry_at = 0.0
        # A real-time bound (not the service clock): it limits how long a stopping daemon
        # waits on the network, whatever the clock says.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_TIMEOUT):
                await self._deliver_pass()

    # -- events → alerts ----------------------------------------------------------------

    async def _consume(self) -> None:
        while True:
            first = await self._sub.get()
            await self._intake([first, *self._drain(INTAKE_BATCH - 1)])

    def _drain(self, limit: int) -> list[Event]:
        out: list[Event] = []
        while len(out) < limit and (event := self._sub.get_nowait()) is not None:
            out.append(event)
        return out

    async def _intake(self, events: Sequence[Event]) -> None:
        """Turn events into alerts in memory, then write every alert they touched in one
        transaction. The sender sees a new alert only once it is in the outbox; a burst
        costs one commit, not one per event."""
        touched: dict[int, AlertRecord] = {}
        for event in events:
            try:
                rec = self._ingest(event)
            except Exception:  # one odd event must not stop the pager
                log.exception(
                    "alerts: could not turn event %r from %r into an alert",
                    event.kind,
                    event.source,
                )
                continue
            if rec is not None:
                touched[rec.id] = rec
        if not touched:
            return
        for rec in touched.values():
            self._rerender(rec)
        await self._save(*touched.values())
        for rec in touched.values():
            rec.persisted = True
        self._wake.set()

    def _severity(self, event: Event) -> str | None:
        """The alert severity for ``event``, or None when it is not an alert."""
        policy = self._policy
        route = policy.routes.get(event.kind)
        if route == "off":
            return None
        if event.kind == "child_exited" and not is_abnormal_exit(event.data.get("reason")):
            return None
        if route:
            severity = route
        else:
            severity = str(event.severity)
            if event.kind == "child_exited":  # an abnormal exit is a crash, whatever the default
                severity = max(severity, "warning", key=_RANK.__getitem__)
        if _RANK.get(severity, 1) < policy.min_rank and event.kind not in _ALWAYS:
            return None
        if severity == "debug":
            return None
        return severity

    def _key(self, event: Event) -> str:
        spec = kind_spec(event.kind)
        subject = "|".join(str(event.data.get(f, "")) for f in spec.subject)
        return f"{spec.group}|{event.source}|{subject}"

    def _ingest(self, event: Event) -> AlertRecord | None:
        """The alert ``event`` creates or joins (not yet rendered or saved), or None."""
        severity = self._severity(event)
        if severity is None or self._settings is None:
            return None
        now = self._clock.time()
        key = self._key(event)
        rec = self._alerts.get(self._open.get(key, -1))
        if rec is not None and (rec.window_end <= now or rec.status != "open"):
            rec = None
        if rec is None:
            held = (
                None
                if severity == "critical"
                else quiet_until(now, self._policy.quiet, self._policy.quiet_tz)
            )
            rec = AlertRecord(
                id=self._next_id,
                key=key,
                kind=event.kind,
                severity=severity,
                source=event.source,
                data=dict(event.data),
                counts={event.kind: 1},
                first_ts=event.ts,
                last_ts=event.ts,
                window_end=now + self._policy.coalesce,
                held_until=held,
                deliveries={c: Delivery() for c in self._settings.chat_ids},
                persisted=False,
            )
            self._next_id += 1
            _, buttons = render(rec.kind, rec.data, rec.source, rec.counts, self._policy.agents)
            self._set_buttons(rec, buttons)
            self._alerts[rec.id] = rec
            self._open[key] = rec.id
        else:
            rec.counts[event.kind] = rec.counts.get(event.kind, 0) + 1
            rec.data = {**rec.data, **event.data}
            rec.last_ts = max(rec.last_ts, event.ts)
            if _RANK[severity] > _RANK.get(rec.severity, 1):
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

    def _rerender(self, rec: AlertRecord) -> None:
        if rec.kind == "digest":
            return
        rendered, _ = render(rec.kind, rec.data, rec.source, rec.counts, self._policy.agents)
        rec.text = redact(
            compose(
                severity=rec.severity,
                rendered=rendered,
                count=_event_count(rec),
                first_ts=rec.first_ts,
                last_ts=rec.last_ts,
                company=self._policy.company,
                tz=self._policy.tz,
                footer=rec.footer,
            )
        )

    # -- quiet hours --------------------------------------------------------------------

    async def _release_held(self, now: float) -> None:
        due = sorted(
            (
                r
                for r in self._alerts.values()
                if r.held_until is not None and r.held_until <= now and r.status == "open"
            ),
            key=lambda r: r.id,
        )
        if not due:
            return
        if len(due) == 1:
            due[0].held_until = None
            await self._save(due[0])
            return
        assert self._settings is not None
        tz = self._policy.tz
        lines = [f"{ICONS['digest']} While quiet hours were on: {len(due)} alerts"]
        for r in due:
            title = r.text.split("\n", 1)[0]
            n = _event_count(r)
            lines.append(
                f"• {title}"
                + (f" (×{n})" if n > 1 else "")
                + f" — {datetime.fromtimestamp(r.first_ts, tz):%H:%M}"
            )
        lines.append(f"{self._policy.company} · {datetime.fromtimestamp(now, tz):%H:%M %Z, %d %b}")
        severity = max((r.severity for r in due), key=lambda s: _RANK.get(s, 1))
        digest = AlertRecord(
            id=self._next_id,
            key=f"digest|{self._next_id}",
            kind="digest",
            severity=severity,
            source="alerts",
            data={"alerts": [r.id for r in due]},
            counts={"digest": 1},
            first_ts=now,
            last_ts=now,
            window_end=now,
            text=clip(redact("\n".join(lines))),
            deliveries={c: Delivery() for c in self._settings.chat_ids},
        )
        self._next_id += 1
        for r in due:
            r.status, r.folded_into, r.held_until = "folded", digest.id, None
            r.window_end = min(r.window_end, now)
            for d in r.deliveries.values():
                if d.state == "pending":
                    d.state = "folded"
        self._alerts[digest.id] = digest
        await self._save(digest, *due)

    # -- delivery -----------------------------------------------------------------------

    async def _save(self, *recs: AlertRecord) -> None:
        """Write to the outbox. If that fails (disk full, file gone), alerting goes on
        without it — delivering from memory beats stopping the pager — and says so."""
        if self._store is None:
            return
        try:
            await self._store.save(*recs)
        except (sqlite3.Error, OSError) as exc:
            if not self._store_failing:
                log.error(
                    "alerts: cannot write the alert outbox %s (%s); alerts are still sent but "
                    "would not survive a restart — check the disk and the state directory",
                    self._store.path,
                    exc,
                )
                self._store_failing = True
            return
        if self._store_failing:
            log.info("alerts: the alert outbox is writable again")
            self._store_failing = False

    async def _sender(self) -> None:
        while not self._sender_stopped():
            self._wake.clear()
            due = await self._deliver_pass()
            if self._sender_stopped():
                return
            await self._wait(due)

    def _sender_stopped(self) -> bool:
        """Whether a graceful stop asked the sender to finish (set across awaits)."""
        return self._sender_stop

    async def _sleep_until(self, deadline: float) -> None:
        # The remaining time is read when the sleep starts, so a clock that moved between
        # planning and sleeping (a ManualClock jump, a busy loop) cannot stretch the wait.
        while (remaining := deadline - self._clock.monotonic()) > 0:
            await self._clock.sleep(remaining)

    async def _wait(self, due: float | None) -> None:
        """Until news (``_wake``) or the monotonic time ``due``."""
        if self._wake.is_set():
            return
        waiters: set[asyncio.Future[Any]] = {asyncio.ensure_future(self._wake.wait())}
        if due is not None:
            waiters.add(asyncio.ensure_future(self._sleep_until(due)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    async def _deliver_pass(self) -> float | None:
        """Send and edit what is due, oldest first. Returns the monotonic time when more is
        due (None: wait for news). Stops at the first transient failure (Telegram is one
        link)."""
        link = self._link
        if link is None or not link.ready:
            return None
        if self._retry_at > self._clock.monotonic():
            return self._retry_at
        now = self._clock.time()
        await self._release_held(now)
        next_due: float | None = None

        def later(t: float) -> None:
            nonlocal next_due
            next_due = t if next_due is None else min(next_due, t)

        for rec in sorted(self._alerts.values(), key=lambda r: r.id):
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
                    if not self._flushing and now < rec.edit_after and shown < rec.version:
                        later(rec.edit_after)
                        continue
                    op = "edit"
                else:
                    continue
                if not await self._attempt(link, rec, chat_id, d, op):
                    return self._retry_at
                now = self._clock.time()
        self._evict(now)
        if next_due is None:
            return None
        # Dues are wall times (windows, quiet hours); the sleep runs on the monotonic clock.
        return self._clock.monotonic() + (next_due - self._clock.time())

    def _evict(self, now: float) -> None:
        for rid in [r.id for r in self._alerts.values() if r.settled and r.window_end <= now]:
            rec = self._alerts.pop(rid)
            if self._open.get(rec.key) == rid:
                del self._open[rec.key]

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
        self, link: _Link, rec: AlertRecord, chat_id: int, d: Delivery, op: str
    ) -> bool:
        """One send or edit. True when done with it (delivered, or refused for good);
        False on a transient failure (backoff set)."""
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
        try:
            # A real-time bound on one HTTP exchange, rate-limiter waits included.
            async with asyncio.timeout(SEND_TIMEOUT):
                if op == "send":
                    msg = await bot.send_message(
                        chat_id,
                        text,
                        reply_markup=markup,
                        disable_notification=rec.severity == "info",
                    )
                    d.message_id, d.state = msg.message_id, "sent"
                else:
                    await bot.edit_message_text(
                        text, chat_id=chat_id, message_id=d.message_id, reply_markup=markup
                    )
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
                self._wake.set()
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
                self._refused(rec, chat_id, d, exc)
        except (Forbidden, ChatMigrated) as exc:
            self._refused(rec, chat_id, d, exc)
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
            await self._save(rec)
        return True

    def _refused(self, rec: AlertRecord, chat_id: int, d: Delivery, exc: Exception) -> None:
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

    def _transient(self, exc: Exception, wait: float | None) -> None:
        from telegram.error import InvalidToken

        if wait is None:
            self._backoff = min(BACKOFF_MAX, max(BACKOFF_MIN, self._backoff * 2))
            wait = self._backoff
        self._retry_at = self._clock.monotonic() + wait
        self._reason = telegram_error_text(exc)
        pending = sum(1 for r in self._alerts.values() if not r.settled)
        if isinstance(exc, InvalidToken):
            if not self._token_logged:
                log.error(
                    "alerts: Telegram rejected the bot token (from %s); %d alert(s) wait in the "
                    "outbox — fix the token and restart companyd",
                    self._settings.token_source if self._settings else "?",
                    pending,
                )
                self._token_logged = True
            return
        if not self._outage_logged:
            log.warning(
                "alerts: cannot reach Telegram (%s); %d alert(s) wait in the outbox and go out "
                "when it is back (next try in %.0f s)",
                redact(f"{type(exc).__name__}: {exc}"),
                pending,
                wait,
            )
            self._outage_logged = True
        else:
            log.debug("alerts: Telegram still unreachable: %s", redact(str(exc)))

    def _recovered(self) -> None:
        if self._outage_logged or self._token_logged:
            log.info("alerts: Telegram reachable again; delivering the outbox")
        self._outage_logged = self._token_logged = False
        self._backoff = 0.0
        self._retry_at = 0.0
        self._state, self._reason = "up", ""

    # -- commands -----------------------------------------------------------------------

    def _allowed(self, chat_id: int | None) -> bool:
        return self._settings is not None and chat_id in self._settings.chat_ids

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

    async def _on_stranger(self, update: Update, context: Any) -> None:
        chat = update.effective_chat
        self._stranger(chat.id if chat else None, update.effective_user, "a message")

    async def _on_command(self, update: Update, context: Any) -> None:
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
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        reply = await command_reply(self._admin, name, args, self._policy.agents)
        await self._reply(msg, reply)

    async def _on_unknown(self, update: Update, context: Any) -> None:
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
            agents = ", ".join(sorted(self._policy.agents)) or "(none)"
            await self._reply(msg, f"usage: /ask AGENT question (agents: {agents})")
            return
        agent, question = args[0], " ".join(args[1:])
        await self._reply(msg, f"🤔 asking {agent}…")
        try:
            result = await self._admin.ask(agent, question, timeout=ASK_TIMEOUT)
        except AdminError as exc:
            await self._reply(msg, f"⚠️ {exc}")
            return
        except Exception as exc:
            log.exception("alerts: /ask %s failed", agent)
            await self._reply(msg, f"⚠️ /ask failed inside companyd ({type(exc).__name__})")
            return
        answer = str(result.get("answer", "")).strip() or "(no answer)"
        meta = {k: v for k, v in result.items() if k != "answer"}
        tail = format_result("", meta, max_lines=6) if meta else ""
        # A model's answer may be longer than one message: send it in parts, not cut.
        text = redact(f"💬 {agent}: {answer}" + (f"\n—\n{tail}" if tail else ""))
        for part in split_text(text):
            await self._reply(msg, part)

    async def _reply(self, msg: Message, text: str) -> None:
        from telegram.error import TelegramError

        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await msg.reply_text(clip(redact(text)))
        except (TelegramError, TimeoutError) as exc:
            log.warning("alerts: could not answer a command: %s", redact(str(exc)))

    async def _on_error(self, update: object, context: Any) -> None:
        err = getattr(context, "error", None)
        log.error("alerts: a Telegram handler failed: %s", redact(f"{type(err).__name__}: {err}"))

    # -- buttons ------------------------------------------------------------------------

    async def _on_button(self, update: Update, context: Any) -> None:
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
            rec = self._alerts.get(int(alert_id))
            if rec is None and self._store is not None:
                rec = await self._store.get(int(alert_id))
        button = None
        if rec is not None and button_id.isdigit():
            button = next((b for b in rec.buttons if b.get("id") == int(button_id)), None)
        if rec is None or button is None:
            await self._answer(query, "this button is no longer active")
            return
        done, text = await act(self._admin, button)
        if not done:
            await self._answer(query, text, alert=True)
            return
        who = query.from_user.full_name if query.from_user else "someone"
        if query.from_user and query.from_user.username:
            who += f" (@{query.from_user.username})"
        when = datetime.fromtimestamp(self._clock.time(), self._policy.tz)
        rec.footer.append(f"✔ {text} — by {who} at {when:%H:%M}")
        buttons_after(rec, button)
        rec.version += 1
        rec.edit_after = 0.0  # show what was done now, not after the coalescing throttle
        self._rerender(rec)
        if rec.id not in self._alerts:
            self._alerts[rec.id] = rec
        await self._save(rec)
        self._wake.set()
        await self._answer(query, text)

    async def _answer(self, query: CallbackQuery, text: str, alert: bool = False) -> None:
        from telegram.error import TelegramError

        try:
            await query.answer(clip(redact(text), 200), show_alert=alert)
        except TelegramError as exc:
            log.warning("alerts: could not answer a button press: %s", redact(str(exc)))


class _Link:
    """The Telegram side: the Application in our loop, its lifecycle and the handlers."""

    def __init__(self, service: AlertService, settings: TelegramSettings) -> None:
        from telegram.ext import CallbackQueryHandler, CommandHandler, MessageHandler, filters

        self._service = service
        self._settings = settings
        self._clock = service._clock
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
        app.add_handler(CallbackQueryHandler(service._on_button))
        for name, _ in COMMANDS:
            app.add_handler(CommandHandler(name, service._on_command, filters=allowed))
        app.add_handler(CommandHandler("start", service._on_command, filters=allowed))
        app.add_handler(MessageHandler(allowed & filters.COMMAND, service._on_unknown))
        app.add_handler(MessageHandler(~allowed, service._on_stranger))
        app.add_error_handler(service._on_error)

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
                self._service._reason = self._mark_failing(exc)
                log.error(
                    "alerts: Telegram rejected the bot token (from %s); alerts wait in the "
                    "outbox — fix the token and restart companyd; retrying every %.0f s",
                    self._settings.token_source,
                    TOKEN_RETRY,
                )
                await self._clock.sleep(TOKEN_RETRY)
            except TelegramError as exc:
                self._service._reason = self._mark_failing(exc)
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
        self._service._state, self._service._reason = "up", ""
        self._service._wake.set()
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
        tests/test_alerts.py pins its behaviour."""
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
                self._service._bus.emit(
                    "telegram_commands_recovered",
                    "alerts",
                    since=self.commands_since,
                    error=self.commands_error,
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
        (a poll fails up to once a second), the rest at debug."""
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
            and self._service._sending_ok()
        ):
            self._commands_alerted = True
            self._service._bus.emit(
                "telegram_commands_failing", "alerts", since=since, error=reason
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


# ---------------------------------------------------------------------------------------
# companyd notify-failure UNIT


def register(sub: Any) -> None:
    """Add ``companyd notify-failure`` to the command line."""
    p = sub.add_parser(
        "notify-failure",
        help="tell the operator on Telegram that a systemd unit failed (for OnFailure=)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Send one Telegram message saying that UNIT died, with systemd's reason when\n"
            "available (MONITOR_* variables, else `systemctl show`). Meant for\n"
            "companyd-alert@.service, started by OnFailure=companyd-alert@%n.service.\n"
            "Exits 0 when sent or when Telegram is unreachable (the reason is printed),\n"
            "1 when company.yaml has no usable Telegram settings."
        ),
    )
    p.add_argument("unit", help="the unit that failed, e.g. companyd.service")
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="company.yaml (default: $COMPANYD_CONFIG, "
        "$CONFIGURATION_DIRECTORY/company.yaml, ./company.yaml)",
    )
    p.set_defaults(func=_notify_failure_cmd)


def _notify_failure_cmd(args: argparse.Namespace) -> int:
    from companyd._fs import read_regular_file
    from companyd.alerts.notify import FallbackCompany, fallback_company
    from companyd.config import default_config_path, load_config
    from companyd.errors import ConfigError

    path = args.config or default_config_path()
    config: CompanyConfig | FallbackCompany
    note = None
    try:
        config = load_config(path)
    except ConfigError as exc:
        # An invalid company.yaml is a reason the daemon died (exit 78 at start): say so,
        # with the alert settings that can still be read, rather than stay silent.
        try:
            # never a plain read: the path may be a FIFO that has no writer
            text = read_regular_file(Path(path), 10 * 1024 * 1024).decode(errors="replace")
        except (OSError, ValueError):
            text = ""
        config = fallback_company(text)
        first = str(exc.issues[0]) if exc.issues else str(exc)
        more = f" (and {len(exc.issues) - 1} more)" if len(exc.issues) > 1 else ""
        note = f"company.yaml is invalid: {first}{more}; fix it, then `systemctl restart companyd`"
        print(f"companyd notify-failure: {note}", file=sys.stderr)
    sent, why = asyncio.run(notify_failure(config, args.unit, note=note))
    if sent:
        print(f"companyd notify-failure: {why}")
        return 0
    print(f"companyd notify-failure: alert about {args.unit} not sent: {why}", file=sys.stderr)
    if isinstance(resolve_settings(config.spec.alerts), str):
        return 1
    return 0
