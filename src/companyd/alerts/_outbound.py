"""The outbound queue: events for targets other than Telegram, durable, at-least-once.

Telegram's deliveries live in the alert records (``deliveries`` keyed by chat id, edited as
stories coalesce). A webhook or an Apprise channel is simpler and different: each event is
sent once to each target, whole, and never edited. This module is that queue: one row per
(event, target) in the alert outbox's store (the ``outbound`` table: ``alerts.sqlite`` or
the company's PostgreSQL schema, step 4 of :data:`companyd.alerts._outbox.STEPS`), and the
task that delivers the rows.

**The target interface** (what a new kind of target implements; docs/webhooks.md):

* :class:`Target`: ``name`` (unique across targets; config's name), ``kind`` (``webhook``,
  ``apprise``, …) and ``async send(message: OutboundMessage) -> None``. ``send`` returns when
  the receiver took the message; it raises :class:`TransientSendError` for what may work
  later (a 5xx, 408, 429, a refused or timed-out connection; ``retry_after`` when the
  receiver said how long to wait) and :class:`PermanentSendError` for what will not (a 4xx,
  a URL the target cannot use). Any other exception counts as transient and is logged with
  its traceback once (a bug in a target must not lose its messages). ``send`` must not
  block the event loop; the queue bounds each call with :data:`SEND_TIMEOUT` (real time).
* :class:`OutboundMessage`: ``id`` (the stable id of this row: the ``webhook-id``, the
  same on every retry), ``target``, ``type`` (``run.completed`` …), ``timestamp`` (when the
  event happened, epoch), ``data`` (JSON values), ``body`` (the JSON text
  ``{"type", "timestamp", "data"}`` a JSON target sends as it is) and ``attempt`` (1 on the
  first try).

**Guarantees.** A message is written to the store (:meth:`OutboundQueue.enqueue`) before
any send is tried; what was sent is recorded (``sent``) the moment the target returns, so a
restart neither loses nor resends one — at-least-once: a crash between the receiver's
answer and that write repeats it, with the same id, which the receiver de-duplicates on. A
transient failure is retried with backoff on the injected clock (:func:`backoff`: doubling
from :data:`BACKOFF_MIN` to :data:`BACKOFF_MAX`, or the receiver's ``retry_after`` within
that cap) for up to :data:`GIVE_UP_AFTER` seconds after the event, then recorded
``failed``; a permanent failure is recorded ``failed`` at once. Each is said once in the
log, per target: the first failure of an outage (a warning), its end (info), a refusal (an
error); :attr:`OutboundQueue.on_done` tells the caller each final outcome (the run's
delivery record). Messages of one target go out in the order they were queued; a target
that fails holds its own messages back, not the others'.

**Shared store (PostgreSQL).** A message about to be sent is claimed in its row (``owner``,
``claimed``) under the store's lock, as the Telegram sends are (:meth:`AlertStore.claim`): of
two daemons, one sends it; a claim not settled within the store's ``claim_lease`` (the
holder died mid-send) is taken over. On SQLite the file is one daemon's and the lease is 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol

from companyd._aio import news_or_deadline
from companyd._frozen import Frozen
from companyd._secrets import redact
from companyd._sqlite import transaction
from companyd.clock import Clock
from companyd.storage import Connection

if TYPE_CHECKING:
    from companyd.alerts._outbox import AlertStore

__all__ = [
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "GIVE_UP_AFTER",
    "OUTBOUND_PG",
    "OUTBOUND_SQLITE",
    "SEND_TIMEOUT",
    "OutboundMessage",
    "OutboundQueue",
    "OutboundRow",
    "PermanentSendError",
    "Queued",
    "SendError",
    "Target",
    "TransientSendError",
    "backoff",
    "message_body",
    "new_message_id",
]

log = logging.getLogger("companyd.alerts.service")

#: First wait after a transient failure, in seconds; doubles on each further failure.
BACKOFF_MIN = 5.0
#: Longest wait between two attempts of one message (also caps a receiver's Retry-After).
BACKOFF_MAX = 300.0
#: A message still failing this long after its event is given up (recorded ``failed``):
#: three days covers a weekend outage of the receiver (Standard Webhooks senders retry for
#: days too); after that the event is history, not news.
GIVE_UP_AFTER = 3 * 86400.0
#: A real-time bound on one ``send`` (the receiver's answer included).
SEND_TIMEOUT = 30.0
#: Messages read from the store per pass.
BATCH = 100

# The table, as the outbox's migration step 4 creates it (companyd.alerts._outbox.STEPS).
# ``id`` is the message's webhook-id; ``(target, key)`` is unique so that one event is
# queued once per target even when it is handed over twice (a result re-taken after a
# restart). ``seq`` orders the rows as they were queued (ids are random). ``state``:
# pending | sent | failed. ``owner``/``claimed``: the claim of a send in a shared store.
OUTBOUND_SQLITE = """
CREATE TABLE IF NOT EXISTS outbound (
    id          TEXT PRIMARY KEY,
    seq         BIGINT NOT NULL,
    target      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    key         TEXT NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created     REAL NOT NULL,
    state       TEXT NOT NULL DEFAULT 'pending',
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     REAL NOT NULL,
    sent_at     REAL,
    last_error  TEXT,
    owner       TEXT,
    claimed     REAL,
    UNIQUE (target, key)
);
CREATE INDEX IF NOT EXISTS outbound_due ON outbound (state, next_at);
CREATE INDEX IF NOT EXISTS outbound_seq ON outbound (seq);
"""
OUTBOUND_PG = OUTBOUND_SQLITE.replace(" REAL", " DOUBLE PRECISION")

_COLS = "id, target, kind, key, type, body, created, state, attempts, next_at, sent_at, last_error"


class SendError(Exception):
    """A target could not deliver a message (see :class:`TransientSendError` and
    :class:`PermanentSendError`); the text says why, without secrets.
    """


class TransientSendError(SendError):
    """Try again later (receiver down, 5xx, 408, 429, timeout). ``retry_after``: seconds the
    receiver asked to wait, if it said (capped at :data:`BACKOFF_MAX`).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentSendError(SendError):
    """Never try this message again (a 4xx other than 408/429, a target that cannot work)."""


class OutboundMessage(Frozen):
    """One message for one target, as :meth:`Target.send` gets it (see module docstring)."""

    id: str
    target: str
    type: str
    timestamp: float
    data: Mapping[str, Any]
    body: str
    attempt: int


class Target(Protocol):
    """A destination of the outbound queue (see module docstring for the contract)."""

    @property
    def name(self) -> str:
        """Unique among the targets: the name in company.yaml (``webhook:NAME``)."""
        ...

    @property
    def kind(self) -> str:
        """What sort of target, e.g. ``webhook`` or ``apprise``."""
        ...

    async def send(self, message: OutboundMessage) -> None:
        """Deliver ``message``; raise :class:`TransientSendError` or
        :class:`PermanentSendError` if it was not delivered.
        """
        ...


class Queued(Frozen):
    """A message to queue for one target: ``key`` identifies the event (one row per
    ``(target, key)``), ``type`` / ``timestamp`` / ``data`` its content.

    ``not_before``: held until then (quiet hours): not sent before, and — never tried yet —
    it does not hold back the target's later messages. ``fold``: when a row of the same
    ``(target, key)`` still waits, this item's ``data["items"]`` are added to that row's
    (one message collecting what a quiet window held) instead of being left out.
    """

    target: str
    kind: str
    key: str
    type: str
    timestamp: float
    data: Mapping[str, Any]
    not_before: float | None = None
    fold: bool = False


@dataclass
class OutboundRow:
    """A row of the ``outbound`` table."""

    id: str
    target: str
    kind: str
    key: str
    type: str
    body: str
    created: float
    state: Literal["pending", "sent", "failed"]
    attempts: int
    next_at: float
    sent_at: float | None
    last_error: str | None

    @classmethod
    def of(cls, row: Sequence[Any]) -> OutboundRow:
        """The row as ``SELECT {_COLS}`` returns it."""
        return cls(
            id=str(row[0]),
            target=str(row[1]),
            kind=str(row[2]),
            key=str(row[3]),
            type=str(row[4]),
            body=str(row[5]),
            created=float(row[6]),
            state=row[7],
            attempts=int(row[8]),
            next_at=float(row[9]),
            sent_at=None if row[10] is None else float(row[10]),
            last_error=row[11],
        )

    def message(self) -> OutboundMessage:
        """What the target's ``send`` gets for this row's next attempt."""
        parsed = json.loads(self.body)
        ts = datetime.fromisoformat(str(parsed.get("timestamp"))).timestamp()
        return OutboundMessage(
            id=self.id,
            target=self.target,
            type=self.type,
            timestamp=ts,
            data=parsed.get("data") or {},
            body=self.body,
            attempt=self.attempts + 1,
        )


def new_message_id() -> str:
    """A fresh message id (``msg_`` + 32 hex digits): unique, and the same on every retry
    because it is stored with the row.
    """
    return f"msg_{uuid.uuid4().hex}"


def message_body(type_: str, timestamp: float, data: Mapping[str, Any]) -> str:
    """The JSON text ``{"type", "timestamp", "data"}`` (``timestamp`` in ISO 8601, UTC)."""
    when = datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")
    return json.dumps(
        {"type": type_, "timestamp": when, "data": dict(data)},
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )


def backoff(attempts: int, retry_after: float | None = None) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: the receiver's
    ``retry_after`` if given, else :data:`BACKOFF_MIN` doubled per failure; at most
    :data:`BACKOFF_MAX` either way.
    """
    if retry_after is not None and retry_after > 0:
        return min(BACKOFF_MAX, retry_after)
    return min(BACKOFF_MAX, BACKOFF_MIN * 2.0 ** max(0, attempts - 1))


# -- the store's side (run on the alert store's worker thread) -------------------------------


def _enqueue_sync(conn: Connection, rows: list[tuple[Any, ...]]) -> list[str]:
    added: list[str] = []
    with transaction(conn):  # the seq below is the next one across daemons too
        seq = int(conn.execute("SELECT coalesce(max(seq), 0) FROM outbound").fetchone()[0])
        for *row, fold in rows:
            if fold and _folded(conn, row):
                continue
            seq += 1
            got = conn.execute(
                "INSERT INTO outbound (id, seq, target, kind, key, type, body, created, state, "
                "attempts, next_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?) "
                "ON CONFLICT(target, key) DO NOTHING RETURNING id",
                (row[0], seq, *row[1:]),
            ).fetchone()
            if got is not None:
                added.append(str(got[0]))
    return added


def _folded(conn: Connection, row: Sequence[Any]) -> bool:
    """Add the ``data["items"]`` of ``row`` (an insert's values) to the waiting row of the
    same target and key, if there is one (True then).
    """
    got = conn.execute(
        "SELECT id, body FROM outbound WHERE target = ? AND key = ? AND state = 'pending'",
        (row[1], row[3]),
    ).fetchone()
    if got is None:
        return False
    waiting, new = json.loads(got[1]), json.loads(row[5])
    data = waiting.setdefault("data", {})
    data["items"] = [*data.get("items", []), *new.get("data", {}).get("items", [])]
    body = json.dumps(waiting, ensure_ascii=False, separators=(",", ":"), default=str)
    conn.execute("UPDATE outbound SET body = ? WHERE id = ?", (body, got[0]))
    return True


def _due_sync(
    conn: Connection,
    now: float,
    owner: str,
    lease: float,
    targets: Sequence[str],
    limit: int,
) -> tuple[list[OutboundRow], float | None]:
    """Claim for ``owner`` the due pending rows of each of ``targets``, in queue order: a
    target's rows up to its first one not yet due (or claimed by another owner), which
    holds the rest back — except a row never tried and held until a time (quiet hours),
    which is passed over. Also the earliest time a held row is due (None: none).
    """
    taken: list[OutboundRow] = []
    nxt: float | None = None
    with transaction(conn):
        for target in targets:
            rows = conn.execute(
                f"SELECT {_COLS}, owner, claimed FROM outbound WHERE state = 'pending' "
                "AND target = ? ORDER BY seq LIMIT ?",
                (target, limit),
            ).fetchall()
            for r in rows:
                row = OutboundRow.of(r)
                held = r[-2] is not None and r[-2] != owner and float(r[-1]) + lease > now
                if row.next_at > now and not held and row.attempts == 0:
                    # held through quiet hours, never tried: the later messages go on
                    nxt = row.next_at if nxt is None else min(nxt, row.next_at)
                    continue
                if row.next_at > now or held:
                    due = float(r[-1]) + lease if held else row.next_at
                    nxt = due if nxt is None else min(nxt, due)
                    break
                taken.append(row)
        if taken:
            conn.executemany(
                "UPDATE outbound SET owner = ?, claimed = ? WHERE id = ?",
                [(owner, now, row.id) for row in taken],
            )
    return taken, nxt


def _record_sync(conn: Connection, *, row: OutboundRow) -> None:
    conn.execute(
        "UPDATE outbound SET state = ?, attempts = ?, next_at = ?, sent_at = ?, "
        "last_error = ?, owner = NULL, claimed = NULL WHERE id = ?",
        (row.state, row.attempts, row.next_at, row.sent_at, row.last_error, row.id),
    )


def _all_sync(conn: Connection, target: str | None) -> list[OutboundRow]:
    if target is None:
        rows = conn.execute(f"SELECT {_COLS} FROM outbound ORDER BY seq").fetchall()
    else:
        rows = conn.execute(
            f"SELECT {_COLS} FROM outbound WHERE target = ? ORDER BY seq", (target,)
        ).fetchall()
    return [OutboundRow.of(r) for r in rows]


def _forget_sync(
    conn: Connection, kind: str, keep: frozenset[str], why: str
) -> tuple[list[str], list[OutboundRow]]:
    """Forget the pending rows of ``kind`` whose target is not in ``keep``: an alert's is
    deleted, a result's is marked failed (``why``) so that its run's record can say so.
    Returns the target of each row forgotten and the failed rows.
    """
    with transaction(conn):
        rows = conn.execute(
            f"SELECT {_COLS} FROM outbound WHERE kind = ? AND state = 'pending' ORDER BY seq",
            (kind,),
        ).fetchall()
        forgotten: list[str] = []
        failed: list[OutboundRow] = []
        for row in map(OutboundRow.of, rows):
            if row.target in keep:
                continue
            forgotten.append(row.target)
            if row.key.startswith("result:"):
                row.state, row.last_error = "failed", why
                _record_sync(conn, row=row)
                failed.append(row)
            else:
                conn.execute("DELETE FROM outbound WHERE id = ?", (row.id,))
    return forgotten, failed


def _prune_sync(conn: Connection, before: float) -> int:
    return int(
        conn.execute(
            "DELETE FROM outbound WHERE state <> 'pending' AND created < ?", (before,)
        ).rowcount
    )


# -- the loop's side -------------------------------------------------------------------------


class OutboundQueue:
    """Delivers the ``outbound`` rows of ``store`` to ``targets`` (see module docstring).

    Args:
        store: the opened alert outbox (its database and its claim owner and lease).
        targets: by name (replaced by :meth:`set_targets` on a reload). A row for a name
            not here waits in the store (its target is not usable now): it goes out once
            it is.
        clock: backoff and give-up times.
        kind: the kind of target this queue owns (``webhook``, ``apprise``), with
            ``configured``: then the pending rows of that kind whose target is not among
            ``configured`` (removed from company.yaml) are forgotten when the queue starts
            and after each :meth:`set_targets` — an alert's deleted, a result's failed
            (told to :attr:`on_done`: its run's record says why). None: rows are never
            forgotten.
        configured: the names of that kind's targets company.yaml has, usable or not
            (default: ``targets``).
        section: where company.yaml lists them (``alerts.channels``), for the reason given.
    """

    def __init__(
        self,
        store: AlertStore,
        targets: Mapping[str, Target],
        clock: Clock,
        *,
        kind: str | None = None,
        configured: Iterable[str] | None = None,
        section: str = "company.yaml",
    ) -> None:
        self._store = store
        self._targets = dict(targets)
        self._clock = clock
        self._kind = kind
        self._section = section
        self._configured = frozenset(self._targets if configured is None else configured)
        #: the removed targets' rows are to be forgotten before the next pass
        self._forget_due = kind is not None
        self.wake = asyncio.Event()
        #: told each message's final outcome (``row.state``: ``sent`` or ``failed``, with
        #: ``last_error``); True when it told the founder of a failure itself (a result's
        #: delivery record and alert), so that the queue's own log line is left out
        self.on_done: Callable[[OutboundRow], Awaitable[bool]] | None = None
        #: targets in a logged outage (said once; the end of it is said too)
        self._down: set[str] = set()
        #: a graceful stop asked the queue to finish after the send in flight
        self.stop_requested = False

    @property
    def targets(self) -> Mapping[str, Target]:
        """The targets by name."""
        return self._targets

    def set_targets(
        self, targets: Mapping[str, Target], configured: Iterable[str] | None = None
    ) -> None:
        """Deliver to ``targets`` from now on (a reload changed them; ``configured`` as for
        the constructor): a send in flight finishes with the target it started with; the
        rows of a target no longer configured are forgotten before the next pass.
        """
        self._targets = dict(targets)
        self._configured = frozenset(self._targets if configured is None else configured)
        self._down &= set(self._targets)
        self._forget_due = self._kind is not None
        self.wake.set()

    async def forget_removed(self) -> int:
        """Forget the pending rows of targets removed from company.yaml (see the class
        docstring); returns how many rows were forgotten.
        """
        self._forget_due = False
        kind, keep = self._kind, self._configured
        if kind is None:
            return 0
        why = f"no longer in {self._section} in company.yaml (removed before it was sent)"
        forgotten, failed = await self._store.run(
            partial(_forget_sync, kind=kind, keep=keep, why=why)
        )
        if forgotten:
            # messages that will reach no one: worth a line at the level a founder reads
            log.warning(
                "alerts: %d message(s) for %s forgotten: no longer in %s",
                len(forgotten),
                ", ".join(sorted(set(forgotten))),
                self._section,
            )
        for row in failed:
            if self.on_done is not None:
                try:
                    await self.on_done(row)
                except Exception:  # the row stands failed; only its record is missing
                    log.exception("alerts: could not record the outcome of %s", row.id)
        return len(forgotten)

    async def enqueue(self, items: Sequence[Queued]) -> list[str]:
        """Write ``items`` as pending rows in one transaction (before any send), each with a
        new id; an item whose ``(target, key)`` is already queued is left out. Returns the
        ids of the rows added, in order, and wakes the sender.
        """
        now = self._clock.time()
        rows = [
            (
                new_message_id(),
                q.target,
                q.kind,
                q.key,
                q.type,
                message_body(q.type, q.timestamp, _redacted(q.data)),
                now,
                now if q.not_before is None else max(now, q.not_before),
                q.fold,
            )
            for q in items
        ]
        if not rows:
            return []
        added: list[str] = await self._store.run(lambda conn: _enqueue_sync(conn, rows))
        self.wake.set()
        return added

    async def rows(self, target: str | None = None) -> list[OutboundRow]:
        """Every row (of ``target``), oldest first: for status and tests."""
        return await self._store.run(lambda conn: _all_sync(conn, target))

    async def prune(self, before: float) -> int:
        """Forget sent and failed rows created before ``before``; returns how many."""
        return await self._store.run(lambda conn: _prune_sync(conn, before))

    async def run(self) -> None:
        """Deliver until :attr:`stop_requested`: a pass, then wait for news (:attr:`wake`)
        or the time the next row is due.
        """
        while not self._stopped():
            self.wake.clear()
            if self._forget_due:
                await self.forget_removed()
            due = await self.deliver_pass()
            if self._stopped():
                return
            # until news or the wall time the next row is due, slept on the clock
            await news_or_deadline(self.wake, due, self._clock.time, self._clock.sleep)

    def _stopped(self) -> bool:
        """Whether a graceful stop asked the queue to finish (set across awaits)."""
        return self.stop_requested

    async def deliver_pass(self) -> float | None:
        """Send every due row, oldest first; returns the wall time the next is due (None:
        none pending). A target that fails holds its later rows to the next pass.
        """
        now = self._clock.time()
        store, names = self._store, sorted(self._targets)
        rows, later = await store.run(
            lambda conn: _due_sync(conn, now, store.owner, store.claim_lease, names, BATCH)
        )
        held: set[str] = set()
        nxt = later

        def sooner(t: float) -> None:
            nonlocal nxt
            nxt = t if nxt is None else min(nxt, t)

        for row in rows:
            # the target as it is now: a reload may have changed or removed it meanwhile
            target = self._targets.get(row.target)
            if target is None or row.target in held or self._stopped():
                # its target failed earlier in this pass, or the pager stops, or a reload
                # removed it: unclaimed, it waits its turn
                await self._store.run(partial(_record_sync, row=row))
                continue
            await self._attempt(target, row)
            if row.state == "pending":
                held.add(row.target)
                sooner(row.next_at)
        if len(rows) >= BATCH:
            return self._clock.time()  # more may wait behind this batch
        return nxt

    async def _attempt(self, target: Target, row: OutboundRow) -> None:
        message = row.message()
        row.attempts += 1
        now = self._clock.time()
        said = ""  # why the message is failed for good, to say once
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await target.send(message)
        except PermanentSendError as exc:
            row.state, row.last_error = "failed", redact(str(exc))
            said = (
                f"{target.kind} {target.name} refused {row.type} {row.id} for good "
                f"({row.last_error}); it is not sent again — fix the receiver or its entry "
                "in company.yaml"
            )
        except Exception as exc:
            retry_after = exc.retry_after if isinstance(exc, TransientSendError) else None
            if not isinstance(exc, (TransientSendError, TimeoutError, OSError)):
                log.exception("alerts: unexpected error sending %s to %s", row.id, target.name)
            text = redact(str(exc) or type(exc).__name__)
            row.last_error = text
            if now - row.created >= GIVE_UP_AFTER:
                row.state = "failed"
                row.last_error = (
                    f"gave up after {row.attempts} attempts over "
                    f"{(now - row.created) / 3600:.0f} hours (last: {text})"
                )
                said = f"{target.kind} {target.name}: {row.type} {row.id}: {row.last_error}"
            else:
                row.next_at = now + backoff(row.attempts, retry_after)
                if row.target not in self._down:
                    self._down.add(row.target)
                    log.warning(
                        "alerts: cannot deliver to %s %s (%s); its messages wait in the outbox "
                        "and go out when it answers (next try in %.0f s)",
                        target.kind,
                        target.name,
                        text,
                        row.next_at - now,
                    )
        else:
            row.state, row.sent_at, row.last_error = "sent", self._clock.time(), None
            if row.target in self._down:
                self._down.discard(row.target)
                log.info(
                    "alerts: %s %s answers again; delivering its messages", target.kind, row.target
                )
        await self._store.run(partial(_record_sync, row=row))
        if row.state == "pending":
            return
        told = False
        if self.on_done is not None:
            try:
                told = await self.on_done(row)
            except Exception:  # the send stands; only its record is missing
                log.exception("alerts: could not record the outcome of %s", row.id)
        if said and not told:
            log.error("alerts: %s", said)


def _redacted(data: Mapping[str, Any]) -> Any:
    """``data`` with every string passed through the redactor (a result may quote a key)."""

    def clean(v: Any) -> Any:
        if isinstance(v, str):
            return redact(v)
        if isinstance(v, Mapping):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return clean(data)
