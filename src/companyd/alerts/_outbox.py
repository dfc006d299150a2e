"""The alert outbox: one row per alert, one worker thread (private).

Part of :mod:`companyd.alerts._service`. :class:`AlertService` owns the in-memory state; this store
is its journal, written through before anything is sent, so that

* an alert accepted while Telegram is down survives a restart and goes out later;
* an alert already delivered is not sent again after a restart (its Telegram message id is
  stored the moment Telegram answers), and a coalesced alert keeps editing the same message;
* a button pressed on an old message still finds what it stands for;
* a founder's reply being answered is answered once, across restarts (``follow_ups``: the
  reply and the task answering it, until the answer is in the outbox);
* a reply to a result or an answer finds the run it continues (``threads``: chat and
  message id → run id and agent, one row per message sent, kept as long as the runs:
  :meth:`AlertStore.prune_threads`, called with the run journal's ``retention.runs_days``).

Where the rows live (docs/storage.md): ``<state dir>/alerts.sqlite`` by default, or the
``alerts`` tables of the company's PostgreSQL schema, shared by every daemon of the company.
The work runs on the store's own worker thread (a :class:`companyd._sqlite.Database` or
:class:`companyd.storage.PgDatabase`; database work never runs on the event loop); the
schema versions are one list for both (:data:`STEPS`).
Rows are snapshots taken on the loop thread (:meth:`AlertRecord.to_row`), so the loop can keep
mutating a record while its previous state is being written.

SQLite: WAL with ``synchronous=NORMAL``: a power cut may lose the last few commits (an alert
may then be sent twice, never silently lost before it was attempted: records are written
before any send). Delivery is at-least-once by design; see docs/alerts.md. The file is one
daemon's (``daemon.lock``); an unreadable file is set aside, and an unusable state directory
leaves the outbox in memory.

PostgreSQL: several daemons share the outbox, so a first send is *claimed* before it is made
(:meth:`AlertStore.claim`, under the store's lock: ``BEGIN IMMEDIATE``): of two daemons that
try to send one alert to one chat, one sends and the other learns it was sent. A claim whose
holder did not record the send within :data:`CLAIM_LEASE` seconds (it died mid-send) may be
taken over: at-least-once, as on SQLite. An outbox the database cannot give at start is an
error (:class:`OutboxUnavailable`), not an in-memory outbox: the pager is restarted by its
supervisor and tries again.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from companyd._frozen import Frozen
from companyd._sqlite import Migration, SchemaTooNew, store_errors, transaction
from companyd.alerts._outbound import OUTBOUND_PG, OUTBOUND_SQLITE
from companyd.errors import CompanydError
from companyd.storage import (
    SQLITE,
    Backend,
    Connection,
    Dialects,
    open_database,
    sqlite_migrations,
)

if TYPE_CHECKING:  # types only: they import PostgreSQL's driver (issue 31)
    from companyd.storage import StoreDatabase

__all__ = [
    "CLAIM_LEASE",
    "CLAIM_RETRY",
    "MIGRATIONS",
    "RESULT_KINDS",
    "STEPS",
    "STORE_STEPS",
    "AlertRecord",
    "AlertStore",
    "Claim",
    "Delivery",
    "FollowUp",
    "OutboxUnavailable",
]

#: Records that carry a routine's result or an agent's answer (docs/alerts.md, "Results"),
#: or the confirmation of an approved result (``desk_note``): sent whole, as written, and
#: never folded into the quiet-hours digest; ``digest_item`` waits for the results digest
#: instead of being sent.
RESULT_KINDS = frozenset({"result", "reply", "results_digest", "digest_item", "desk_note"})

log = logging.getLogger("companyd.alerts.service")

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL,
    window_end  REAL NOT NULL,
    settled     INTEGER NOT NULL,
    created     REAL NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_active ON alerts (settled, window_end);
"""
_THREADS = """
CREATE TABLE IF NOT EXISTS threads (
    chat_id     INTEGER NOT NULL,
    message_id  INTEGER NOT NULL,
    run_id      TEXT NOT NULL,
    agent       TEXT NOT NULL,
    created     REAL NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);
"""
_FOLLOW_UPS = """
CREATE TABLE IF NOT EXISTS follow_ups (
    task_id     TEXT PRIMARY KEY,
    chat_id     INTEGER NOT NULL,
    message_id  INTEGER NOT NULL,
    agent       TEXT NOT NULL,
    reply_to    TEXT NOT NULL,
    text        TEXT NOT NULL,
    created     REAL NOT NULL
);
"""

# The same tables on PostgreSQL: Telegram chat ids pass 2³¹ (supergroups are -100…), so
# chat and message ids are BIGINT; times DOUBLE PRECISION (PostgreSQL's REAL is 4 bytes).
# Alert ids are chosen by the pager (the next after the highest), not by the database.
# ``claims`` exists only here: a shared outbox's first sends (AlertStore.claim); a SQLite
# outbox is one daemon's (daemon.lock) and its file stays as it was.
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    id          BIGINT PRIMARY KEY,
    key         TEXT NOT NULL,
    window_end  DOUBLE PRECISION NOT NULL,
    settled     INTEGER NOT NULL,
    created     DOUBLE PRECISION NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_active ON alerts (settled, window_end);
CREATE TABLE IF NOT EXISTS claims (
    alert_id    BIGINT NOT NULL,
    chat_id     BIGINT NOT NULL,
    owner       TEXT NOT NULL,
    claimed     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (alert_id, chat_id)
);
"""
_PG_THREADS = """
CREATE TABLE IF NOT EXISTS threads (
    chat_id     BIGINT NOT NULL,
    message_id  BIGINT NOT NULL,
    run_id      TEXT NOT NULL,
    agent       TEXT NOT NULL,
    created     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);
"""
_PG_FOLLOW_UPS = """
CREATE TABLE IF NOT EXISTS follow_ups (
    task_id     TEXT PRIMARY KEY,
    chat_id     BIGINT NOT NULL,
    message_id  BIGINT NOT NULL,
    agent       TEXT NOT NULL,
    reply_to    TEXT NOT NULL,
    text        TEXT NOT NULL,
    created     DOUBLE PRECISION NOT NULL
);
"""
#: The outbox's schema on both backends, one entry per version (companyd.storage):
#: 1 the alerts (and, on PostgreSQL, the delivery claims), 2 the threads (a message sent →
#: the run whose result or answer it shows), 3 the follow-ups whose answer is still owed (a
#: founder's reply → the task answering it), 4 the outbound queue (one row per event and
#: webhook or channel: companyd.alerts._outbound).
STEPS: tuple[Dialects, ...] = (
    Dialects(sqlite=_SCHEMA, postgres=_PG_SCHEMA),
    Dialects(sqlite=_THREADS, postgres=_PG_THREADS),
    Dialects(sqlite=_FOLLOW_UPS, postgres=_PG_FOLLOW_UPS),
    Dialects(sqlite=OUTBOUND_SQLITE, postgres=OUTBOUND_PG),
)
#: The SQLite text of :data:`STEPS` (``PRAGMA user_version``; see companyd._sqlite).
MIGRATIONS: tuple[Migration, ...] = sqlite_migrations(STEPS)


#: This store's file in the state directory → the schema steps this code knows (what
#: ``companyd run`` checks before any store opens: companyd.ops._upgrade, docs/upgrade.md).
STORE_STEPS: dict[str, int] = {"alerts.sqlite": len(STEPS)}

#: Seconds a claim on a shared outbox keeps the other daemons from sending its alert: more
#: than one send may take (``link.SEND_TIMEOUT``, 60 s) plus recording it. A holder that
#: died mid-send is taken over after this (the alert may then be sent twice).
CLAIM_LEASE = 90.0
#: Seconds before a claim the database could not take is tried again (PostgreSQL).
CLAIM_RETRY = 5.0

_ROW = "SELECT id, key, window_end, settled, created, body FROM alerts"
_UPSERT = (
    "INSERT INTO alerts (id, key, window_end, settled, created, body) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET key=excluded.key, "
    "window_end=excluded.window_end, settled=excluded.settled, body=excluded.body"
)


class OutboxUnavailable(CompanydError):
    """The shared (PostgreSQL) outbox cannot be opened: the pager cannot start."""


class Claim(Frozen):
    """The answer to :meth:`AlertStore.claim`.

    ``verdict``: ``mine`` (send it), ``taken`` (another daemon is sending it: try again at
    ``until``) or ``done`` (another daemon sent it, or Telegram refused it: ``stored`` is its
    delivery as recorded — adopt it instead of sending).
    """

    verdict: Literal["mine", "taken", "done"]
    holder: str | None = None
    until: float = 0.0
    stored: Delivery | None = None


class FollowUp(Frozen):
    """A founder's Telegram reply being answered: the task (its id chosen before it was
    submitted) whose answer goes back as a reply to message ``message_id`` in ``chat_id``.
    """

    task_id: str
    chat_id: int
    message_id: int
    agent: str
    #: the run the reply follows up
    reply_to: str
    text: str
    created: float


@dataclass
class Delivery:
    """One alert's fate in one chat.

    ``state``: ``pending`` (not yet sent), ``sent`` (``message_id`` holds it;
    ``sent_version`` is the alert version last shown), ``failed`` (Telegram refused it for
    good, e.g. the bot was blocked) or ``folded`` (held in quiet hours and told in a digest).
    """

    message_id: int | None = None
    sent_version: int = 0
    state: str = "pending"
    attempts: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The delivery as a JSON-serialisable dict; :meth:`from_dict` reads it back."""
        return {
            "message_id": self.message_id,
            "sent_version": self.sent_version,
            "state": self.state,
            "attempts": self.attempts,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Delivery:
        """The delivery :meth:`to_dict` wrote; a missing key takes its default."""
        return cls(
            message_id=d.get("message_id"),
            sent_version=int(d.get("sent_version", 0)),
            state=str(d.get("state", "pending")),
            attempts=int(d.get("attempts", 0)),
            error=d.get("error"),
        )


@dataclass
class AlertRecord:
    """An alert: one message per chat, edited as coalesced events arrive.

    Attributes:
        id: stable identity (also in button callback data).
        key: coalescing key (group | source | subject).
        kind: the first event's kind; ``digest`` for a quiet-hours digest.
        severity: ``critical`` | ``warning`` | ``info`` (the highest merged so far).
        source: the first event's source.
        data: the merged ``data`` of every event so far (later values win).
        counts: events merged, per kind.
        first_ts, last_ts: event times (epoch) of the first and latest event.
        window_end: wall time after which a new event starts a new alert.
        held_until: quiet hours: not sent before this wall time (None = not held).
        status: ``open`` or ``folded`` (told in digest ``folded_into``).
        text: the rendered message.
        buttons: ``[{"id", "label", "action", "arg", "usd"}]``.
        footer: lines telling what the operator did (who pressed which button).
        version: bumped on every change of text or buttons; deliveries edit up to it.
        edit_after: wall time before which coalescing edits wait (throttle).
        next_button: next button id (ids are never reused within an alert).
        deliveries: chat id → :class:`Delivery`.
        persisted: False until the first write of a new alert has committed (not stored).
    """

    id: int
    key: str
    kind: str
    severity: str
    source: str
    data: dict[str, Any]
    counts: dict[str, int]
    first_ts: float
    last_ts: float
    window_end: float
    held_until: float | None = None
    status: str = "open"
    folded_into: int | None = None
    text: str = ""
    buttons: list[dict[str, Any]] = field(default_factory=list)
    footer: list[str] = field(default_factory=list)
    version: int = 1
    edit_after: float = 0.0
    next_button: int = 1
    deliveries: dict[int, Delivery] = field(default_factory=dict)
    #: In memory only: False until the record's first write to the outbox has committed.
    persisted: bool = field(default=True, compare=False, repr=False)

    @property
    def settled(self) -> bool:
        """Nothing left to send or edit in any chat."""
        return all(
            d.state in ("failed", "folded")
            or (d.state == "sent" and d.sent_version >= self.version)
            for d in self.deliveries.values()
        )

    def to_row(self) -> tuple[int, str, float, int, float, str]:
        """The outbox row ``(id, key, window_end, settled, created, body)``, ``body`` the JSON of
        everything else; :meth:`from_row` reads it back.
        """
        body = {
            "kind": self.kind,
            "severity": self.severity,
            "source": self.source,
            "data": self.data,
            "counts": self.counts,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "held_until": self.held_until,
            "status": self.status,
            "folded_into": self.folded_into,
            "text": self.text,
            "buttons": self.buttons,
            "footer": self.footer,
            "version": self.version,
            "edit_after": self.edit_after,
            "next_button": self.next_button,
            "deliveries": {str(c): d.to_dict() for c, d in self.deliveries.items()},
        }
        return (
            self.id,
            self.key,
            self.window_end,
            int(self.settled),
            self.first_ts,
            json.dumps(body, ensure_ascii=False, default=str),
        )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> AlertRecord:
        """The record :meth:`to_row` wrote (as ``SELECT id, key, window_end, settled, created,
        body`` returns it).
        """
        rid, key, window_end, _settled, _created, body_text = row
        b = json.loads(body_text)
        return cls(
            id=int(rid),
            key=str(key),
            kind=str(b["kind"]),
            severity=str(b["severity"]),
            source=str(b["source"]),
            data=dict(b.get("data") or {}),
            counts={str(k): int(v) for k, v in (b.get("counts") or {}).items()},
            first_ts=float(b["first_ts"]),
            last_ts=float(b["last_ts"]),
            window_end=float(window_end),
            held_until=b.get("held_until"),
            status=str(b.get("status", "open")),
            folded_into=b.get("folded_into"),
            text=str(b.get("text", "")),
            buttons=list(b.get("buttons") or []),
            footer=list(b.get("footer") or []),
            version=int(b.get("version", 1)),
            edit_after=float(b.get("edit_after", 0.0)),
            next_button=int(b.get("next_button", 1)),
            deliveries={
                int(c): Delivery.from_dict(d) for c, d in (b.get("deliveries") or {}).items()
            },
        )


class AlertStore:
    """The outbox and the memory of what was delivered: ``alerts.sqlite``, or the ``alerts``
    tables of the company's PostgreSQL schema.

    All methods are coroutines that run their database work in the store's own thread.

    Args:
        path: the database file; None keeps everything in memory (used when the state
            directory is unusable, so that alerting degrades instead of stopping). Not used
            on PostgreSQL.
        backend: where the rows live (docs/storage.md).
        owner: who claims sends (:meth:`claim`): the same for every run of one daemon's
            pager; default a new random name.
        claim_lease: seconds another owner's claim holds (:data:`CLAIM_LEASE`); default
            :data:`CLAIM_LEASE` where several daemons share the outbox (PostgreSQL), 0 for a
            SQLite file, which is one daemon's: a claim found there is a previous process's.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        backend: Backend = SQLITE,
        owner: str | None = None,
        claim_lease: float | None = None,
    ) -> None:
        self.path = path
        self.backend = backend
        self.owner = owner or uuid.uuid4().hex
        self.shared = backend.kind == "postgres"
        self.claim_lease = (
            (CLAIM_LEASE if self.shared else 0.0) if claim_lease is None else claim_lease
        )
        self._db: StoreDatabase = open_database(
            backend,
            path=path,
            store="alerts",
            migrations=STEPS,
            what="alerts.sqlite" if not self.shared else "the alert outbox",
            thread_name="alerts-db",
        )
        #: how logs and alarms name the outbox: the file, or the schema
        self.where = str(path) if not self.shared else str(self._db.path)
        self._claims_failing = False

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._db.run(lambda conn: fn(conn, *args))

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` on the store's worker thread (for the outbound queue,
        :mod:`companyd.alerts._outbound`, whose table lives in this store).
        """
        return await self._db.run(fn)

    # -- thread side --------------------------------------------------------------------

    def _connect(self) -> None:
        self._db.open_sync()
        self._db.run_sync(lambda conn: conn.execute("SELECT count(*) FROM alerts").fetchone())

    def _open_sync(self) -> str | None:
        """Open the file; set aside a corrupt one; fall back to memory. Returns a note for
        the operator when the outbox is not the file it should be. On PostgreSQL: open, or
        raise :class:`OutboxUnavailable`.
        """
        if self.shared:
            self._open_shared()
            return None
        if self.path is None:
            self._db.open_sync()  # in memory
            return None
        try:
            self._connect()
            return None
        except sqlite3.DatabaseError as exc:  # unreadable, or from a newer companyd
            self._db.reset()
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            try:
                os.replace(self.path, aside)
                for suffix in ("-wal", "-shm"):  # they belong to the old file, never the new
                    side = self.path.with_name(self.path.name + suffix)
                    if side.exists():
                        os.replace(side, aside.with_name(aside.name + suffix))
                self._connect()
            except (OSError, sqlite3.Error):
                self._db.open_sync(memory=True)
                return (
                    f"the alert outbox {str(self.path)!r} is unreadable ({exc}) and could not be "
                    "replaced; alerts are kept in memory only until companyd restarts — check "
                    "the state directory"
                )
            return (
                f"the alert outbox {str(self.path)!r} was unreadable ({exc}); it was moved to "
                f"{str(aside)!r} and a new one started (unsent alerts in it are not sent)"
            )
        except OSError as exc:
            self._db.open_sync(memory=True)
            return (
                f"cannot open the alert outbox {str(self.path)!r} ({exc}); alerts are kept in "
                "memory only until companyd restarts — check the state directory's permissions"
            )

    def _open_shared(self) -> None:
        """The PostgreSQL outbox, or :class:`OutboxUnavailable`: there is no file to set
        aside, and an outbox in memory would be this daemon's alone (two daemons could send
        one alert each).
        """
        try:
            self._connect()
        except SchemaTooNew as exc:
            raise OutboxUnavailable(f"{exc}; the pager does not start") from exc
        except store_errors() as exc:
            self._db.reset()
            raise OutboxUnavailable(
                f"cannot open the alert outbox in {self.where} ({type(exc).__name__}: "
                f"{str(exc).strip()}); alerts wait until the database answers and the pager "
                "restarts — check the PostgreSQL server and state.dsn_env"
            ) from exc

    @staticmethod
    def _load_sync(conn: Connection, now: float) -> tuple[list[AlertRecord], int]:
        rows = conn.execute(
            f"{_ROW} WHERE settled = 0 OR window_end > ? ORDER BY id", (now,)
        ).fetchall()
        top = conn.execute("SELECT coalesce(max(id), 0) FROM alerts").fetchone()[0]
        records = []
        for row in rows:
            try:
                records.append(AlertRecord.from_row(row))
            except (ValueError, KeyError, TypeError) as exc:
                # One damaged row must not keep the pager from starting.
                log.warning("alerts: skipping unreadable outbox row %r: %s", row[0], exc)
        return records, int(top) + 1

    @staticmethod
    def _save_sync(conn: Connection, rows: list[tuple[int, str, float, int, float, str]]) -> None:
        with transaction(conn, immediate=False):  # BEGIN: writes only, nothing read to hold
            conn.executemany(_UPSERT, rows)

    @staticmethod
    def _get_sync(conn: Connection, alert_id: int) -> AlertRecord | None:
        row = conn.execute(f"{_ROW} WHERE id = ?", (alert_id,)).fetchone()
        return AlertRecord.from_row(row) if row else None

    @staticmethod
    def _link_sync(conn: Connection, rows: list[tuple[int, int, str, str, float]]) -> None:
        conn.executemany(
            "INSERT INTO threads (chat_id, message_id, run_id, agent, created) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(chat_id, message_id) DO UPDATE SET "
            "run_id=excluded.run_id, agent=excluded.agent, created=excluded.created",
            rows,
        )

    @staticmethod
    def _thread_sync(conn: Connection, chat_id: int, message_id: int) -> tuple[str, str] | None:
        row = conn.execute(
            "SELECT run_id, agent FROM threads WHERE chat_id = ? AND message_id = ?",
            (chat_id, message_id),
        ).fetchone()
        return (str(row[0]), str(row[1])) if row else None

    @staticmethod
    def _answered_sync(
        conn: Connection, task_id: str, rows: list[tuple[int, str, float, int, float, str]]
    ) -> None:
        with transaction(conn, immediate=False):  # BEGIN: writes only, nothing read to hold
            conn.executemany(_UPSERT, rows)
            conn.execute("DELETE FROM follow_ups WHERE task_id = ?", (task_id,))

    def _find_sync(
        self, conn: Connection, field: str, value: str, kind: str | None
    ) -> AlertRecord | None:
        if self.shared:
            # the same test as SQLite's json_extract: data[field] is the JSON string value
            where = "CAST(body AS jsonb) -> 'data' -> CAST(? AS TEXT) = to_jsonb(CAST(? AS TEXT))"
            args: tuple[Any, ...] = (field, value)
            if kind is not None:
                where += " AND CAST(body AS jsonb) ->> 'kind' = CAST(? AS TEXT)"
                args += (kind,)
        else:
            where = "json_extract(body, ?) = ? AND (? IS NULL OR json_extract(body, '$.kind') = ?)"
            args = (f"$.data.{field}", value, kind, kind)
        row = conn.execute(f"{_ROW} WHERE {where} ORDER BY id DESC LIMIT 1", args).fetchone()
        return AlertRecord.from_row(row) if row else None

    def _of_kinds_sync(self, conn: Connection, kinds: Sequence[str]) -> list[AlertRecord]:
        marks = ", ".join("CAST(? AS TEXT)" if self.shared else "?" for _ in kinds)
        kind = "CAST(body AS jsonb) ->> 'kind'" if self.shared else "json_extract(body, '$.kind')"
        rows = conn.execute(f"{_ROW} WHERE {kind} IN ({marks}) ORDER BY id", tuple(kinds))
        return [AlertRecord.from_row(row) for row in rows]

    def _claim_sync(self, conn: Connection, alert_id: int, chat_id: int, now: float) -> Claim:
        with transaction(conn):
            held = conn.execute(
                "SELECT owner, claimed FROM claims WHERE alert_id = ? AND chat_id = ?",
                (alert_id, chat_id),
            ).fetchone()
            if held is not None and held[0] != self.owner:
                holder, until = str(held[0]), float(held[1]) + self.claim_lease
                row = conn.execute("SELECT body FROM alerts WHERE id = ?", (alert_id,)).fetchone()
                stored = _delivery_in(row[0], chat_id) if row else None
                if stored is not None and stored.state != "pending":
                    return Claim(verdict="done", holder=holder, stored=stored)
                if until > now:
                    return Claim(verdict="taken", holder=holder, until=until)
            conn.execute(
                "INSERT INTO claims (alert_id, chat_id, owner, claimed) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(alert_id, chat_id) DO UPDATE SET owner=excluded.owner, "
                "claimed=excluded.claimed",
                (alert_id, chat_id, self.owner, now),
            )
        return Claim(verdict="mine", holder=self.owner, until=now + self.claim_lease)

    def _prune_sync(self, conn: Connection, before: float) -> int:
        cur = conn.execute("DELETE FROM alerts WHERE settled = 1 AND created < ?", (before,))
        if self.shared:
            conn.execute("DELETE FROM claims WHERE alert_id NOT IN (SELECT id FROM alerts)")
        return cur.rowcount

    @staticmethod
    def _prune_threads_sync(conn: Connection, before: float) -> int:
        return conn.execute("DELETE FROM threads WHERE created < ?", (before,)).rowcount

    # -- loop side ----------------------------------------------------------------------

    async def open(self) -> str | None:
        """Open (creating it if needed). Returns a warning for the operator if the file had
        to be set aside or memory is used instead, else None.

        Raises:
            OutboxUnavailable: PostgreSQL: the database or the schema cannot be used.
        """
        note: str | None = await self._db.call(self._open_sync)
        return note

    async def load_active(self, now: float) -> tuple[list[AlertRecord], int]:
        """Alerts with something left to deliver or an open coalescing window, and the next
        free id.
        """
        return await self._run(self._load_sync, now)

    async def save(self, *records: AlertRecord) -> None:
        """Write these records (snapshotted now) in one transaction."""
        rows = [r.to_row() for r in records]
        await self._run(self._save_sync, rows)

    async def get(self, alert_id: int) -> AlertRecord | None:
        """The stored alert ``alert_id``, or None if the outbox has none (never stored, or
        pruned).
        """
        return await self._run(self._get_sync, alert_id)

    async def claim(self, alert_id: int, chat_id: int, now: float) -> Claim:
        """Claim the first send of alert ``alert_id`` to ``chat_id`` for :attr:`owner`, in one
        ``BEGIN IMMEDIATE`` transaction (the store's lock across every daemon on PostgreSQL):
        of several daemons that try at once, one gets ``mine``; the others get ``taken``
        until the claim is older than the lease, or ``done`` once the holder recorded the
        delivery (``stored``). The holder claiming again renews it.

        A SQLite outbox is one daemon's: every claim is ``mine`` and nothing is written (its
        file stays as it was). A claim PostgreSQL cannot take is ``taken`` for
        :data:`CLAIM_RETRY` seconds: another daemon may hold it.
        """
        if not self.shared:
            return Claim(verdict="mine", holder=self.owner)
        try:
            got = await self._run(self._claim_sync, alert_id, chat_id, now)
        except store_errors() as exc:
            if not self._claims_failing:
                log.warning(
                    "alerts: cannot claim alert %d for chat %d in %s (%s); it waits until the "
                    "database answers",
                    alert_id,
                    chat_id,
                    self.where,
                    exc,
                )
                self._claims_failing = True
            return Claim(verdict="taken", until=now + CLAIM_RETRY)
        self._claims_failing = False
        return got

    async def link(
        self, chat_id: int, message_ids: list[int], run_id: str, agent: str, now: float
    ) -> None:
        """Remember that these messages in ``chat_id`` show run ``run_id`` of ``agent``."""
        rows = [(chat_id, m, run_id, agent, now) for m in message_ids]
        await self._run(self._link_sync, rows)

    async def thread(self, chat_id: int, message_id: int) -> tuple[str, str] | None:
        """``(run_id, agent)`` of the run message ``message_id`` in ``chat_id`` shows."""
        return await self._run(self._thread_sync, chat_id, message_id)

    async def prune(self, before: float) -> int:
        """Forget settled alerts created before ``before`` (and their claims); returns how
        many alerts.
        """
        return await self._run(self._prune_sync, before)

    async def owe(self, follow_up: FollowUp) -> bool:
        """Remember that ``follow_up``'s answer is owed (before its task is submitted);
        False when it already was (the same reply handed over twice).
        """
        f = follow_up
        added: int = await self._db.run(
            lambda db: (
                db.execute(
                    "INSERT INTO follow_ups (task_id, chat_id, message_id, agent, reply_to, "
                    "text, created) VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(task_id) DO NOTHING",
                    (f.task_id, f.chat_id, f.message_id, f.agent, f.reply_to, f.text, f.created),
                ).rowcount
            )
        )
        return added > 0

    async def owed(self) -> list[FollowUp]:
        """The follow-ups whose answer is still owed, oldest first."""
        rows = await self._db.run(
            lambda db: db.execute(
                "SELECT task_id, chat_id, message_id, agent, reply_to, text, created "
                "FROM follow_ups ORDER BY created"
            ).fetchall()
        )
        return [
            FollowUp(
                task_id=r[0],
                chat_id=int(r[1]),
                message_id=int(r[2]),
                agent=r[3],
                reply_to=r[4],
                text=r[5],
                created=float(r[6]),
            )
            for r in rows
        ]

    async def forget(self, task_id: str) -> None:
        """The follow-up ``task_id`` is owed no more (it was refused, or failed)."""
        await self._db.run(
            lambda db: db.execute("DELETE FROM follow_ups WHERE task_id = ?", (task_id,))
        )

    async def answered(self, task_id: str, *records: AlertRecord) -> None:
        """Write the answer's ``records`` and forget the follow-up ``task_id`` in one
        transaction: the answer is owed until it is in the outbox, and never twice.
        """
        rows = [r.to_row() for r in records]
        await self._run(self._answered_sync, task_id, rows)

    async def find(self, field: str, value: str, kind: str | None = None) -> AlertRecord | None:
        """The newest alert (of ``kind``, if given) whose data has ``field`` = ``value``
        (e.g. the message of a founder's-desk item), or None. Reads the whole table: for
        the rare lookups of the founder's decisions, not for each event.
        """
        return await self._run(self._find_sync, field, value, kind)

    async def of_kinds(self, kinds: Sequence[str]) -> list[AlertRecord]:
        """Every alert kept (settled or not) of one of ``kinds``, oldest first. Reads the
        whole table: once at start, not for each event.
        """
        return await self._run(self._of_kinds_sync, kinds) if kinds else []

    async def prune_threads(self, before: float) -> int:
        """Forget which run a message showed, for messages sent before ``before``; returns
        how many links were deleted (a reply to such a message then gets the hint).
        """
        return await self._run(self._prune_threads_sync, before)

    async def close(self) -> None:
        """Close the database and stop its thread."""
        await self._db.close()


def _delivery_in(body: str, chat_id: int) -> Delivery | None:
    """The delivery to ``chat_id`` in a stored row's ``body`` (None: none, or unreadable)."""
    try:
        d = json.loads(body).get("deliveries", {}).get(str(chat_id))
        return Delivery.from_dict(d) if isinstance(d, dict) else None
    except (ValueError, TypeError, AttributeError):
        return None
