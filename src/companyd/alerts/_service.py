"""The operator's pager: Telegram alerts from the event stream, and commands from the phone.

:class:`AlertService` is a supervised child (``run(ctx)``, see
:mod:`companyd.supervision._child`). It subscribes to the :class:`~companyd.events.EventBus` and
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
  :mod:`companyd.alerts._telegram`).

The service composes the pager's parts and owns their tasks: :mod:`~companyd.alerts._policy`
(routing, severities, quiet hours), :mod:`~companyd.alerts._coalesce` (the alert book:
events → alerts, coalescing, the digest, the outbox writes), :mod:`~companyd.alerts._sender`
(delivery and backoff), :mod:`~companyd.alerts._link` (the bot, polling for commands) and
:mod:`~companyd.alerts._commands` (commands and buttons). Here: the intake from the event
stream, the modes (silent sink or Telegram), the graceful stop, and status.

``companyd notify-failure UNIT`` (registered here) is the systemd ``OnFailure=`` side: the
daemon cannot report its own SIGKILL, OOM kill or watchdog death.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from companyd._aio import race
from companyd._fs import DiskAlarm
from companyd.admin import Admin, PagerHealth
from companyd.alerts._channels import KIND as CHANNEL_KIND
from companyd.alerts._channels import AppriseTarget, Fanout, channel_url
from companyd.alerts._coalesce import AlertBook
from companyd.alerts._commands import Commands
from companyd.alerts._deliver import DeliveryLog, MemoryPort, Results
from companyd.alerts._desk_messages import DeskDecisions, DeskMessages
from companyd.alerts._digest import next_digest
from companyd.alerts._link import FLUSH_TIMEOUT, Link
from companyd.alerts._notify import notify_failure, unit_facts
from companyd.alerts._outbound import OutboundQueue, Target
from companyd.alerts._outbox import AlertRecord, AlertStore
from companyd.alerts._policy import Policy, quiet_until
from companyd.alerts._sender import EDIT_INTERVAL, Sender
from companyd.alerts._telegram import (
    TelegramSettings,
    protect,
    quiet_library_loggers,
    redact,
    resolve_settings,
)
from companyd.alerts._webhooks import Webhooks
from companyd.clock import Clock, SystemClock
from companyd.config import CompanyConfig
from companyd.events import (
    Event,
    EventBus,
    FounderDecided,
    FounderResultForApproval,
    OperatorAction,
    RoutineResult,
    Subscription,
)
from companyd.storage import SQLITE, Backend
from companyd.supervision import ChildContext

__all__ = [
    "EDIT_INTERVAL",
    "AlertService",
    "notify_failure",
    "quiet_until",
    "unit_facts",
]

log = logging.getLogger("companyd.alerts.service")

#: Most events taken off the bus per outbox transaction.
INTAKE_BATCH = 100
#: Settled alerts older than this are forgotten (their buttons stop working).
RETENTION = 30 * 86400.0


class AlertService:
    """Telegram alerts and commands, as a supervised child.

    Args:
        config: the running company.yaml (``alerts`` section, time zone, agent names).
        state_dir: where ``alerts.sqlite`` (the outbox) lives on SQLite.
        bus: the event stream; the service subscribes at construction, so events published
            before :meth:`run` starts (or while it restarts) are not missed.
        admin: the daemon's operator operations, called by commands and buttons.
        clock: time for coalescing windows, quiet hours, edit throttling and backoff.
        memory: the company memory, for routines that deliver their result there.
        backend: where the outbox lives: ``alerts.sqlite`` in ``state_dir`` (the default)
            or the company's PostgreSQL schema, shared with the other daemons of the company
            (docs/storage.md).
        deliveries: where each result's deliveries are recorded and an undelivered result
            kept (the run journal and the founder's desk; None: the log only).
        desk: the founder's desk, read at each start for the items decided while the
            pager was not running, so their messages lose their buttons (None: not read).
    """

    def __init__(
        self,
        config: CompanyConfig,
        state_dir: Path,
        *,
        bus: EventBus,
        admin: Admin,
        clock: Clock | None = None,
        memory: MemoryPort | None = None,
        backend: Backend = SQLITE,
        deliveries: DeliveryLog | None = None,
        desk: DeskDecisions | None = None,
    ) -> None:
        self._config = config
        #: the Telegram settings the current run of the pager started with (it reads them
        #: only at its start): what a reload's ``restart_required`` is compared with
        self._telegram_running = config.spec.alerts.telegram
        self._backend = backend
        # who claims the sends of a shared outbox: the same for every run of this pager, so
        # a restarted run keeps the claims of the one before
        self._owner = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._state_dir = Path(state_dir)
        self._bus = bus
        self._clock: Clock = clock or SystemClock()
        self._sub: Subscription = bus.subscribe(maxsize=10_000)
        self._book = AlertBook(Policy.of(config), self._clock, DiskAlarm.of(bus))
        self._sender = Sender(self._book, self._clock)
        self._commands = Commands(self._book, admin, self._clock)
        self._results = Results(self._book, self._state_dir, bus=bus, memory=memory, log=deliveries)
        if deliveries is not None:  # the digest says where each of its results went
            self._book.read_deliveries = deliveries.records
        self._sender.on_sent = self._results.sent
        self._sender.on_refused = self._results.refused
        self._desk = DeskMessages(self._book)
        self._desk_read = desk
        # webhooks out (docs/webhooks.md): a reload applies their settings (update_config),
        # unlike Telegram's, which wait for the pager's next start
        self._webhooks = Webhooks(
            config.spec.alerts.webhooks,
            self._clock,
            {slug: r.deliver for slug, r in config.routines.items()},
        )
        # the founder's other channels (docs/alerts.md, "Other channels"): what goes to
        # them, and their durable queue while the outbox is open (one of its own, beside
        # the webhooks': the two have disjoint targets in the same table)
        self._fanout = Fanout(config.spec.alerts.channels, self._book.policy)
        self._queue: OutboundQueue | None = None
        #: the channels' targets of the current run (their health for status)
        self._channels: list[AppriseTarget] = []
        #: set by a reload: a pager without an outbox (no Telegram, no webhook, no channel
        #: at start) opens one if the reload added a webhook or a channel
        self._reconfigured = asyncio.Event()

    # -- public -------------------------------------------------------------------------

    def update_config(self, config: CompanyConfig) -> list[str]:
        """Apply a reloaded company.yaml: routes, severities, quiet hours, coalescing window,
        agent names, and the webhooks and channels (added, removed, changed: sent to as the
        new file says from now on). Telegram settings (token, chats, api_url) apply on the
        next start: returned (``["alerts.telegram"]``) while they differ from the ones the
        pager runs with (a second reload still says so; one that puts them back does not),
        for the reload's ``restart_required``.
        """
        self._config = config
        before = self._book.policy
        self._book.policy = Policy.of(config)
        if (before.digest_at, before.tz) != (self._book.policy.digest_at, self._book.policy.tz):
            self._retime_digest()
        self._fanout.channels = config.spec.alerts.channels
        self._fanout.policy = self._book.policy
        self._webhooks.reconfigure(
            config.spec.alerts.webhooks,
            {slug: r.deliver for slug, r in config.routines.items()},
        )
        if self._queue is not None:
            self._queue.set_targets(self._channel_targets())
        self._reconfigured.set()
        return self.restart_pending()

    def _retime_digest(self) -> None:
        """Results waiting for the digest wait for the new ``alerts.digest_at``: each was
        held until the digest time it was made under, so after a change the earlier ones
        would go out at the old time, apart from their day's digest. Saved with the next
        write of the outbox (at the latest at the stop).
        """
        book = self._book
        due = next_digest(self._clock.time(), book.policy.digest_at, book.policy.tz)
        for rec in book.alerts.values():
            if rec.kind == "digest_item" and rec.status == "open" and rec.held_until is not None:
                rec.held_until = due
                rec.persisted = False

    def restart_pending(self) -> list[str]:
        """``["alerts.telegram"]`` while the running file's Telegram settings differ from
        the ones the pager's current run started with (they apply at its next start), else
        ``[]``: for ``restart_required`` in a reload's answer and in status.
        """
        if self._telegram_running != self._config.spec.alerts.telegram:
            return ["alerts.telegram"]
        return []

    def close(self) -> None:
        """Stop listening to the bus for good (when the service is discarded)."""
        self._sub.close()

    async def prune_threads(self, before: float) -> int:
        """Forget the Telegram thread links (message → run) older than ``before``: the run
        journal's retention calls it with its own cutoff, so a link lives as long as the run
        it points to. 0 while the outbox is not open (no Telegram, or the pager is
        restarting): the next pass does it.
        """
        store = self._book.store
        if store is None:
            return 0
        return await store.prune_threads(before)

    def snapshot(self) -> PagerHealth:
        """For ``companyd status``: ``{"telegram": "ok" | "degraded" | "off", "queued",
        "held", "failed", "reason", "commands", "commands_since", "commands_error"}``.

        ``telegram`` is the sending half. ``degraded``: connecting, or sends failing (alerts
        wait in the outbox); ``queued`` counts alerts not yet fully delivered, held ones
        included; ``failed`` counts deliveries Telegram refused for good.

        ``commands`` is the receiving half (getUpdates): ``"ok"``, ``"failing"`` (since the
        epoch time ``commands_since``, last error ``commands_error``), ``"starting"`` (not
        polling yet) or ``"off"``.

        ``channels`` (only when ``alerts.channels`` has any): each channel's
        :class:`~companyd.admin.ChannelHealth` — ok, failing since when and why, or unset.
        """
        queued = held = failed = 0
        now = self._clock.time()
        for rec in self._book.alerts.values():
            if rec.held_until is not None and rec.held_until > now:
                held += 1
            if not rec.settled:
                queued += 1
            failed += sum(1 for d in rec.deliveries.values() if d.state == "failed")
        if self._sender.state in ("off", "stopped"):
            telegram = "off"
        elif self._sender.sending_ok():
            telegram = "ok"
        else:
            telegram = "degraded"
        link = self._sender.link
        if telegram == "off" or link is None:
            commands, since, error = ("off" if telegram == "off" else "starting"), None, ""
        else:
            commands, since, error = link.commands, link.commands_since, link.commands_error
        health: PagerHealth = {
            "telegram": telegram,
            "queued": queued,
            "held": held,
            "failed": failed,
            "reason": self._sender.reason,
            "commands": commands,
            "commands_since": since,
            "commands_error": error,
        }
        if self._channels:
            health["channels"] = [c.health() for c in self._channels]
        return health

    async def run(self, ctx: ChildContext) -> None:
        """Serve until ``ctx.stopping`` is set: ready as soon as the outbox is open,
        whether or not Telegram answers.
        """
        if self._sub.closed:
            self._sub = self._bus.subscribe(maxsize=10_000)
        self._telegram_running = self._config.spec.alerts.telegram
        settings = await asyncio.to_thread(resolve_settings, self._config.spec.alerts)
        if isinstance(settings, str):
            await self._run_as_sink(ctx, settings)
            return
        self._book.settings = settings
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
        self._sender.state, self._sender.reason = "off", reason
        self._results.off_reason = reason
        log.warning("alerts are not sent to Telegram: %s", reason)
        # webhooks need no Telegram: with any configured, the outbox opens for their queue
        # and so do the other channels (a company whose only channel is Slack or email)
        store: AlertStore | None = None
        senders: list[asyncio.Task[None]] = []
        stop = asyncio.ensure_future(ctx.stopping.wait())
        try:
            ctx_started = False
            while not stop.done():
                if store is None and (
                    self._webhooks.configured or self._config.spec.alerts.channels
                ):
                    # at start, or a reload added the first webhook or channel
                    store = self._open_store()
                    note = await store.open()
                    if note:
                        log.error("%s", note)
                    senders = [
                        await self._start_webhooks(store),
                        self._start_channels(store, self._channel_targets()),
                    ]
                if not ctx_started:
                    ctx.started({"telegram": "off", "reason": reason})
                    ctx_started = True
                self._reconfigured.clear()
                # an event wins a tie with the stop; the senders' tasks end only by a bug
                won = await race(self._sub.get(), stop, self._reconfigured.wait(), *senders)
                if won.index >= 3:
                    won.result()  # its exception ends the service: the supervisor restarts it
                    raise RuntimeError("the webhooks' or the channels' sender ended")
                if won.index == 0:
                    event = won.result()
                    await self._fan_out([event])
                    if isinstance(event, RoutineResult):  # memory and file need no Telegram
                        await self._results.take(event)
                        continue
                    await self._webhooks.take([event])
                    log.debug("alert not sent (no Telegram): %s from %s", event.kind, event.source)
        finally:
            stop.cancel()
            await self._stop_webhooks(senders[0] if senders else None)
            await self._stop_channels(senders[1] if senders else None)
            if store is not None:
                await store.close()

    def _channel_targets(self) -> dict[str, Target]:
        """The channels' queue targets, their URLs read from the environment now (each one
        missing is said once: its messages wait in the outbox for a restart with it). A
        channel the current run already has, unchanged, keeps its target (and its health).
        """
        had = {t.spec: t for t in self._channels}
        targets: dict[str, Target] = {}
        for spec in self._config.spec.alerts.channels:
            url = channel_url(spec)
            kept = had.get(spec)
            if kept is not None and kept.url == url:
                targets[kept.name] = kept
                continue
            if url is None:
                log.warning(
                    "alerts: channel %r: $%s is not set; its messages wait in the outbox "
                    "until companyd is restarted with it (companyd doctor checks it)",
                    spec.name,
                    spec.url_env,
                )
            target = AppriseTarget(spec, url, now=self._clock.time)
            targets[target.name] = target
        self._channels = [t for t in targets.values() if isinstance(t, AppriseTarget)]
        return targets

    def _start_channels(self, store: AlertStore, targets: dict[str, Target]) -> asyncio.Task[None]:
        """The channels' queue over the opened ``store``, delivering in its own task (with
        no channel configured too: a reload may add one).
        """
        # configured: the targets (an unset URL too); a removed channel's rows are forgotten
        self._queue = OutboundQueue(
            store, targets, self._clock, kind=CHANNEL_KIND, section="alerts.channels"
        )
        self._queue.on_done = self._results.channel_done  # a result's record in its run
        return asyncio.create_task(self._queue.run(), name="alerts:channels")

    async def _stop_channels(self, task: asyncio.Task[None] | None) -> None:
        """Let the channel send in flight finish (bounded), then stop; what is left goes
        out after the restart.
        """
        queue, self._queue = self._queue, None
        if queue is None or task is None:
            return
        queue.stop_requested = True
        queue.wake.set()
        await race(task, asyncio.sleep(FLUSH_TIMEOUT))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _fan_out(self, events: Sequence[Event]) -> None:
        """Queue what ``events`` bring the other channels (before any send)."""
        queue = self._queue
        if queue is None:
            return
        now = self._clock.time()
        items = [item for event in events for item in self._fanout.items(event, now)]
        if items:
            await queue.enqueue(items)

    def _open_store(self) -> AlertStore:
        return AlertStore(
            self._state_dir / "alerts.sqlite", backend=self._backend, owner=self._owner
        )

    async def _start_webhooks(self, store: AlertStore) -> asyncio.Task[None]:
        """The webhooks' queue over the opened ``store``, delivering in its own task (with
        no webhook configured too: a reload may add one).
        """
        queue = await self._webhooks.start(store)
        queue.on_done = self._results.webhook_done
        self._results.webhooks = self._webhooks
        await queue.prune(self._clock.time() - RETENTION)
        waiting = sum(1 for r in await queue.rows() if r.state == "pending")
        if waiting:
            log.info("alerts: %d webhook message(s) wait in the outbox", waiting)
        return asyncio.create_task(queue.run(), name="alerts:webhooks")

    async def _stop_webhooks(self, task: asyncio.Task[None] | None) -> None:
        """Let the send in flight finish (bounded), then stop; what is left goes out after
        the restart.
        """
        queue = self._webhooks.queue
        if task is not None and queue is not None:
            queue.stop_requested = True
            queue.wake.set()
            await race(task, asyncio.sleep(FLUSH_TIMEOUT))
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._results.webhooks = None
        await self._webhooks.close()

    async def _run_with_telegram(self, ctx: ChildContext, settings: TelegramSettings) -> None:
        self._sender.state, self._sender.reason = "connecting", ""
        # A restarted run() starts from the outbox, not from what the failed run left.
        self._sender.reset()
        self._book.wake = asyncio.Event()
        store = self._open_store()
        self._book.store = store
        tasks: list[asyncio.Task[None]] = []
        link: Link | None = None
        channels: asyncio.Task[None] | None = None
        try:
            note = await store.open()
            if note:
                log.error("%s", note)
            now = self._clock.time()
            records, next_id = await store.load_active(now)
            self._book.load(records, next_id, now)
            await store.prune(now - RETENTION)
            await self._catch_up_decisions()
            link = Link(
                settings,
                clock=self._clock,
                handlers=self._commands,
                sender=self._sender,
                bus=self._bus,
            )
            self._sender.link = link
            waiting = sum(1 for r in records if not r.settled)
            if waiting:
                log.info("alerts: %d alert(s) from before the restart wait in the outbox", waiting)
            ctx.started({"telegram": "connecting", "outbox": waiting})
            # answers to the founder's replies that a stop or a crash left owed
            self._commands.resume(await store.owed())
            # before the intake starts: its first events may be for webhooks
            hooks = await self._start_webhooks(store)
            channels = self._start_channels(store, self._channel_targets())
            tasks = [
                asyncio.create_task(self._consume(), name="alerts:consume"),
                asyncio.create_task(self._sender.run(), name="alerts:send"),
                asyncio.create_task(link.run(), name="alerts:telegram"),
            ]
            tasks += [hooks, channels]
            await self._until_stopping(ctx, tasks)
            await self._stop_gracefully(tasks)
            await self._stop_webhooks(hooks)
            await self._stop_channels(channels)
        finally:
            await self._stop_channels(channels)
            for t in tasks:
                t.cancel()
            await self._stop_webhooks(None)
            for t in list(self._commands.tasks):
                t.cancel()
            await asyncio.gather(*tasks, *self._commands.tasks, return_exceptions=True)
            if link is not None:
                await link.stop()
            await store.close()
            self._book.store = None
            self._sender.state = "stopped"

    @staticmethod
    async def _until_stopping(ctx: ChildContext, tasks: list[asyncio.Task[None]]) -> None:
        """Wait for the stop request; a task that fails meanwhile is a bug: its exception
        ends the service and the supervisor restarts it.
        """
        stop = asyncio.create_task(ctx.stopping.wait(), name="alerts:stopping")
        running = list(tasks)
        try:
            while True:
                # The tasks first: one that failed wins a tie with the stop request.
                won = await race(*running, stop)
                if won.future is stop:
                    return
                task = running.pop(won.index)
                exc = None if task.cancelled() else task.exception()
                if exc is not None:
                    raise exc from None
        finally:
            stop.cancel()

    async def _stop_gracefully(self, tasks: list[asyncio.Task[None]]) -> None:
        """Put every event already published into the outbox, then try once more (briefly)
        to deliver, coalescing edits included; what is left goes out after the restart.
        """
        consumer, sender = tasks[0], tasks[1]  # the link (tasks[2]) stays up for the flush
        consumer.cancel()
        # The sender is asked to stop after the delivery in flight, not cancelled in it: a
        # message Telegram accepted but whose id was not yet recorded would otherwise be
        # sent again as a new message instead of being edited.
        self._sender.stop_requested = True
        self._book.wake.set()
        # A real-time bound, like the flush below; the sender's outcome is left to gather.
        await race(sender, asyncio.sleep(FLUSH_TIMEOUT))
        sender.cancel()
        await asyncio.gather(consumer, sender, return_exceptions=True)
        # An intake cut short by the cancellation left its alerts unsaved: save them now.
        unsaved = [r for r in self._book.alerts.values() if not r.persisted]
        if unsaved:
            await self._book.save(*unsaved)
            for rec in unsaved:
                rec.persisted = True
        while batch := self._drain(INTAKE_BATCH):
            await self._intake(batch)
        if self._sender.link is None or not self._sender.link.ready:
            return
        self._sender.flushing = True
        self._sender.retry_at = 0.0
        # A real-time bound (not the service clock): it limits how long a stopping daemon
        # waits on the network, whatever the clock says.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_TIMEOUT):
                await self._sender.deliver_pass()

    async def _catch_up_decisions(self) -> None:
        """Edit the messages of the items decided while the pager did not run (a
        ``companyd approve`` with the daemon stopped): they would offer their buttons for
        good. A desk that cannot be read leaves them as they are (logged).
        """
        if self._desk_read is None:
            return
        try:
            caught = await self._desk.catch_up(self._desk_read)
        except Exception:
            log.exception("alerts: could not read the founder's decisions made meanwhile")
            return
        if caught:
            await self._book.save(*caught)
            for rec in caught:
                rec.persisted = True
            log.info("alerts: %d message(s) updated for decisions made meanwhile", len(caught))

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

    async def _take(
        self, event: Event, after_save: list[Callable[[], Awaitable[None]]]
    ) -> list[AlertRecord]:
        """The alerts one event creates or changes (not yet rendered or saved); what is to
        be written once they are saved is appended to ``after_save``.
        """
        match event:
            case RoutineResult():
                # never an alert: delivered as the routine's `deliver:` says, and once an
                # approved result is delivered, the founder is told so in its thread
                made: list[str] = []
                failed: list[str] = []
                recs = await self._results.take(event, made, failed, after_save)
                if event.approved:
                    recs += await self._desk.approved(event, made, failed)
                return recs
            case FounderDecided():  # never an alert: the item's message says it
                return await self._desk.decided(event)
        # a proposal or a task decided elsewhere: its message loses those buttons too
        acted = await self._desk.acted(event) if isinstance(event, OperatorAction) else []
        rec = self._book.ingest(event)
        if rec is None:
            return acted
        if acted:
            return [*acted, rec]
        if isinstance(event, FounderResultForApproval) and event.follows:
            await self._desk.next_round(rec)
        return [rec]

    async def _intake(self, events: Sequence[Event]) -> None:
        """Turn events into alerts in memory, then write every alert they touched in one
        transaction. The sender sees a new alert only once it is in the outbox; a burst
        costs one commit, not one per event.
        """
        touched: dict[int, AlertRecord] = {}
        after_save: list[Callable[[], Awaitable[None]]] = []
        for event in events:
            try:
                notes: list[Callable[[], Awaitable[None]]] = []
                for rec in await self._take(event, notes):
                    touched[rec.id] = rec
                after_save += notes
            except Exception:  # one odd event must not stop the pager
                log.exception(
                    "alerts: could not turn event %r from %r into an alert",
                    event.kind,
                    event.source,
                )
        # webhooks out and the other channels: their messages in one more transaction each
        # (before any send)
        await self._webhooks.take(events)
        await self._fan_out(events)
        if touched:
            for rec in touched.values():
                self._book.rerender(rec)
            await self._book.save(*touched.values())
            for rec in touched.values():
                rec.persisted = True
        # the results' delivery records, now that what they call queued is (and before
        # the sender can record one "delivered")
        for note in after_save:
            await note()
        if touched:
            self._book.wake.set()
