"""The founder's desk: what waits for the founder, durable, and the runs that wait on it.

An agent's run stops at the founder in two ways (docs/desk.md):

* an **approval** — a tool named in ``tools.require_approval`` is about to be called: the
  founder sees the tool, its arguments and the agent's reason, and approves or rejects it;
* a **question** — the agent called ``ask_founder(question)``: the founder answers it (a
  Telegram reply to the question, ``/answer``, or ``companyd answer``).

Each is an *item*: created once per asking call (its ``key`` is the run and the tool call,
so a run resumed after a crash or a ``kill -9`` finds the same item instead of asking
again), decided once (the first decision wins; a second one is refused with what the
first was), and expired lazily when its deadline passes unanswered (``expired``, which the
gate reads as a rejection). :meth:`Desk.wait` is how a run waits: it returns when the item
is decided or its deadline passes, on the injected clock; when three quarters of the item's
time (``approval_timeout``) have passed it reminds the founder once (``founder_reminder``,
kept in the item's ``reminded`` mark, so a restart does not remind again).

Storage: ``desk.sqlite`` in the state directory (a :class:`companyd._sqlite.Database`: one
worker thread, ``PRAGMA user_version`` migrations, WAL with ``synchronous=NORMAL`` — a
decision survives a kill -9 of the daemon once :meth:`Desk.decide` returns), or the
``desk`` tables of the company's PostgreSQL schema (``state: backend: postgres``,
docs/storage.md). The desk is the one owner of the store and of the in-memory waiters in
its process; the agents, the operator's commands and the Telegram buttons all go through
it.

Several deciders: a decision is taken once. Deciding reads the item and writes the
decision in one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock on the file; the
desk's advisory lock on PostgreSQL), so when two deciders — two daemons on one database,
the dashboard and Telegram, the CLI beside a daemon — decide the same item at once,
exactly one decision is kept and the other is refused with what the first was. On
PostgreSQL a waiting run also re-reads its item every :data:`PG_POLL_SECONDS`, so a
decision written by another daemon (or by the CLI on another host) wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd._frozen import Frozen
from companyd._sqlite import Migration, transaction
from companyd.clock import Clock, within
from companyd.errors import CompanydError
from companyd.events import (
    UNSTAMPED,
    EventBus,
    FounderApprovalRequested,
    FounderDecided,
    FounderQuestion,
    FounderReminder,
    FounderResultForApproval,
)
from companyd.storage import (
    SQLITE,
    Backend,
    Connection,
    Dialects,
    open_database,
    sqlite_migrations,
    store_present,
)

if TYPE_CHECKING:
    from companyd.admin import ResultDecision  # a TypedDict: the type only
    from companyd.storage import StoreDatabase  # imports PostgreSQL's driver (issue 31)

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "MIGRATIONS",
    "PG_POLL_SECONDS",
    "REMIND_AT",
    "STEPS",
    "STORE_STEPS",
    "Desk",
    "DeskError",
    "DeskFull",
    "DeskItem",
    "ItemKind",
    "ItemState",
    "decisions_of",
]

#: How long an approval waits for the founder when company.yaml does not say (24 h).
DEFAULT_APPROVAL_TIMEOUT = 86_400.0

#: On PostgreSQL, how often (seconds on the desk's clock) a waiting run re-reads its item:
#: another daemon's decision sets no event in this process.
PG_POLL_SECONDS = 2.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,       -- the asking call: '<run_id>/<tool_use_id>'
    kind TEXT NOT NULL,             -- approval | question | result
    agent TEXT NOT NULL,
    run_id TEXT,
    routine TEXT,
    payload TEXT NOT NULL,          -- JSON: tool, input, reason | question
    state TEXT NOT NULL,            -- pending | approved | rejected | answered |
                                    -- changes_requested | expired
    created REAL NOT NULL,
    deadline REAL NOT NULL,
    decided REAL,
    text TEXT NOT NULL DEFAULT '',  -- the rejection's reason or the answer
    decided_by TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS items_by_state ON items(state, created);
"""

# The same table on PostgreSQL: times DOUBLE PRECISION (PostgreSQL's REAL is 4 bytes), and
# a ``rowid`` identity standing for SQLite's implicit one, so that one statement text orders
# ties of ``created`` by insertion on both backends (``ORDER BY created, rowid``).
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    agent TEXT NOT NULL,
    run_id TEXT,
    routine TEXT,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    deadline DOUBLE PRECISION NOT NULL,
    decided DOUBLE PRECISION,
    text TEXT NOT NULL DEFAULT '',
    decided_by TEXT NOT NULL DEFAULT '',
    rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE
);
CREATE INDEX IF NOT EXISTS items_by_state ON items(state, created);
"""

#: Version 2: through what the founder decided (``via``: telegram or cli), and the items of
#: a run found by it (``runs show``).
_VIA = """
ALTER TABLE items ADD COLUMN via TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS items_by_run ON items(run_id);
"""

#: Version 3: when the founder was reminded of a pending item (``reminded``; NULL: not yet),
#: so the one reminder is sent once, across restarts and daemons.
_REMINDED = """
ALTER TABLE items ADD COLUMN reminded DOUBLE PRECISION;
"""

#: Version 4: when the founder was told of an item (``announced``; NULL: a question queued
#: behind another question of its agent, not sent yet — docs/desk.md, "A burst of
#: questions"). Every item stored before this version was announced when it was created.
_ANNOUNCED = """
ALTER TABLE items ADD COLUMN announced DOUBLE PRECISION;
UPDATE items SET announced = created;
"""

#: The desk's schema on both backends, one entry per version (companyd.storage).
STEPS: tuple[Dialects | str, ...] = (
    Dialects(sqlite=_SCHEMA, postgres=_PG_SCHEMA),
    _VIA,
    _REMINDED,
    _ANNOUNCED,
)

#: The share of an item's time (``approval_timeout``) after which the founder is reminded
#: of it once, if it still waits.
REMIND_AT = 0.75


#: This store's file in the state directory → the schema steps this code knows (what
#: ``companyd run`` checks before any store opens: companyd.ops._upgrade, docs/upgrade.md).
STORE_STEPS: dict[str, int] = {"desk.sqlite": len(STEPS)}

#: The SQLite text of :data:`STEPS`, one entry per ``PRAGMA user_version`` (companyd._sqlite).
MIGRATIONS: tuple[Migration, ...] = sqlite_migrations(STEPS)

_COLUMNS = (
    "id, key, kind, agent, run_id, routine, payload, state, created, deadline, decided, text, "
    "decided_by, via, announced"
)


class DeskError(CompanydError):
    """An item cannot be decided as asked (unknown id, already decided, wrong kind)."""


class DeskFull(DeskError):
    """An agent already has ``limit`` items of a kind waiting for the founder (``open``:
    their ids, oldest first): :meth:`Desk.request` with ``open_limit`` refused a new one.
    """

    def __init__(self, agent: str, kind: str, open_ids: list[str], limit: int) -> None:
        self.agent, self.kind, self.open_ids, self.limit = agent, kind, open_ids, limit
        super().__init__(
            f"{agent} already has {len(open_ids)} {kind}(s) waiting for the founder "
            f"({', '.join(open_ids)}); at most {limit} may wait at once"
        )


class ItemKind(StrEnum):
    """What an item asks of the founder."""

    APPROVAL = "approval"
    QUESTION = "question"
    #: a routine's result under ``approval: required``
    RESULT = "result"
    #: a routine's result whose delivery target was unavailable (Telegram not configured,
    #: or refusing): kept here for the founder to read; approving it marks it read
    KEPT = "kept"


class ItemState(StrEnum):
    """Where an item stands: pending until the founder decides or its deadline passes."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    ANSWERED = "answered"
    #: a result the founder sent back with changes (``text``)
    CHANGES = "changes_requested"
    EXPIRED = "expired"
    #: closed unanswered because the run that asked ended without it (its task was
    #: withdrawn: the colleague who asked stopped waiting); ``text`` says why
    WITHDRAWN = "withdrawn"


class DeskItem(Frozen):
    """One thing waiting for (or decided by) the founder."""

    id: str
    key: str
    kind: ItemKind
    agent: str
    run_id: str | None
    routine: str | None
    payload: Mapping[str, Any]
    state: ItemState
    created: float
    deadline: float
    decided: float | None
    #: a rejection's reason, or the founder's answer
    text: str
    #: who decided (a Telegram user's name, the CLI user's login, ``the deadline``)
    decided_by: str
    #: through what: ``telegram``, ``cli`` (empty: expired, or decided before it was kept)
    via: str = ""
    #: when the founder was told of it; None: a question queued behind another question
    #: of its agent, not sent yet (docs/desk.md)
    announced: float | None = None

    @property
    def pending(self) -> bool:
        """Whether the item still waits for the founder."""
        return self.state is ItemState.PENDING

    def decided_event(self, ts: float | None = None) -> FounderDecided:
        """The ``founder_decided`` event of this (decided) item; ``ts``: when it was
        decided (unset: the bus stamps it when published).
        """
        return FounderDecided(
            source=f"agent/{self.agent}",
            item_id=self.id,
            item_kind=str(self.kind),
            agent=self.agent,
            run_id=self.run_id,
            state=str(self.state),
            by=self.decided_by,
            via=self.via,
            routine=self.routine,
            ts=UNSTAMPED if ts is None else ts,
        )

    def to_dict(self) -> dict[str, Any]:
        """The item as JSON (its payload's fields inline), for the operator's front ends."""
        return {
            "id": self.id,
            "kind": str(self.kind),
            "agent": self.agent,
            "run_id": self.run_id,
            "routine": self.routine,
            **dict(self.payload),
            "state": str(self.state),
            "created": self.created,
            "deadline": self.deadline,
            "decided": self.decided,
            "text": self.text,
            "decided_by": self.decided_by,
            "via": self.via,
        }

    @classmethod
    def _of(cls, row: tuple[Any, ...]) -> DeskItem:
        return cls(
            id=row[0],
            key=row[1],
            kind=ItemKind(row[2]),
            agent=row[3],
            run_id=row[4],
            routine=row[5],
            payload=json.loads(row[6]),
            state=ItemState(row[7]),
            created=float(row[8]),
            deadline=float(row[9]),
            decided=None if row[10] is None else float(row[10]),
            text=row[11],
            decided_by=row[12],
            via=row[13],
            announced=None if row[14] is None else float(row[14]),
        )


def _item_id(kind: ItemKind, key: str) -> str:
    """A short id for the founder to type, stable for one key (``ap-…``, ``q-…``)."""
    prefix = {
        ItemKind.APPROVAL: "ap",
        ItemKind.QUESTION: "q",
        ItemKind.RESULT: "r",
        ItemKind.KEPT: "k",
    }[kind]
    return f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


class Desk:
    """The founder's desk of one state directory (one instance per daemon).

    Args:
        path: the SQLite file (created on first use; unused on PostgreSQL).
        bus: where ``founder_approval_requested``, ``founder_question`` and
            ``founder_decided`` go.
        clock: time source (deadlines, waits).
        backend: where the items live: ``path`` (the default) or the ``desk`` tables of
            the company's PostgreSQL schema.
        announces: whether ``bus`` reaches the founder (a daemon's pager). A desk whose
            bus goes nowhere (the CLI deciding with no daemon running) never takes a queued
            question's turn to be sent: the daemon's waiting run does, when it next looks.
    """

    def __init__(
        self,
        path: Path,
        *,
        bus: EventBus,
        clock: Clock,
        backend: Backend = SQLITE,
        announces: bool = True,
    ) -> None:
        self.path = path
        self._bus = bus
        self._announces = announces
        self._clock = clock
        self._backend = backend
        self._db = self._database(readonly=False)
        #: how often a waiting run re-reads its item (None: only this process decides)
        self._poll = None if backend.kind == "sqlite" else PG_POLL_SECONDS
        #: item id → set when the item is decided (waiters in this process)
        self._decided: dict[str, asyncio.Event] = {}

    @property
    def backend(self) -> Backend:
        """Where the items live."""
        return self._backend

    def _database(self, *, readonly: bool) -> StoreDatabase:
        return open_database(
            self._backend,
            path=self.path,
            store="desk",
            migrations=STEPS,
            what="founder's desk",
            readonly=readonly,
            thread_name="desk",
        )

    async def present(self) -> bool:
        """Whether anything has written this desk yet: its file exists (SQLite) or its
        tables do (PostgreSQL). A reader asks first, so that reading never creates the
        store (the CLI without a daemon).
        """
        return await store_present(self._backend, self.path, lambda: self._database(readonly=True))

    async def close(self) -> None:
        """Close the database and stop its thread."""
        await self._db.close()

    # -- asking ---------------------------------------------------------------------------

    async def request(
        self,
        *,
        key: str,
        kind: ItemKind,
        agent: str,
        run_id: str | None,
        routine: str | None,
        payload: Mapping[str, Any],
        timeout: float,
        open_limit: int | None = None,
    ) -> DeskItem:
        """The item for ``key``: created (and announced) the first time, found again after
        a restart. ``timeout``: seconds from now until an unanswered item expires.

        Raises:
            DeskFull: ``open_limit`` is set and ``agent`` already has that many items of
                ``kind`` pending (not past their deadline) — checked and inserted in one
                transaction, so a burst of concurrent asks cannot slip past it. An item
                already on the desk under ``key`` (a resumed run asking again) is found,
                never refused.
        """
        now = self._clock.time()
        item_id = _item_id(kind, key)
        data = json.dumps(dict(payload), ensure_ascii=False, default=str)

        def add(db: Connection) -> tuple[bool, tuple[Any, ...] | None, list[str]]:
            # the write lock at BEGIN (IMMEDIATE): the open items counted and the question
            # on screen stay true until the insert — another process's desk (the CLI, a
            # second daemon) adding meanwhile would make a plain BEGIN's insert fail at once
            # with "database is locked" (its snapshot stale), not wait its turn
            with transaction(db):
                if open_limit is not None:
                    known = db.execute("SELECT 1 FROM items WHERE key = ?", (key,)).fetchone()
                    waiting = [
                        r[0]
                        for r in db.execute(
                            "SELECT id FROM items WHERE agent = ? AND kind = ? AND state = "
                            "'pending' AND deadline > ? ORDER BY created, rowid",
                            (agent, str(kind), now),
                        ).fetchall()
                    ]
                    if known is None and len(waiting) >= open_limit:
                        return False, None, waiting
                # a question waits behind its agent's question the founder has on screen
                # (coalescing a burst: docs/desk.md); anything else is announced at once
                queued = kind is ItemKind.QUESTION and _shown_question(db, agent, now) is not None
                created = db.execute(
                    "INSERT INTO items (id, key, kind, agent, run_id, routine, payload, state, "
                    "created, deadline, announced) VALUES (?,?,?,?,?,?,?, 'pending', ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (
                        item_id,
                        key,
                        str(kind),
                        agent,
                        run_id,
                        routine,
                        data,
                        now,
                        now + timeout,
                        None if queued else now,
                    ),
                ).rowcount
                row = db.execute(f"SELECT {_COLUMNS} FROM items WHERE key = ?", (key,)).fetchone()
                return created > 0 and not queued, row, []

        announce, row, waiting = await self._db.run(add)
        if row is None:
            assert open_limit is not None  # only a limit leaves no row
            raise DeskFull(agent, str(kind), waiting, open_limit)
        item = DeskItem._of(row)
        if announce:
            self._announce(item)
        return item

    async def _next_question(self, agent: str) -> None:
        """Announce ``agent``'s oldest queued question if none of its questions is on the
        founder's screen any more (the one shown was answered or expired). Marked and
        picked in one ``BEGIN IMMEDIATE`` transaction, so two callers (a decision and a
        resumed run's :meth:`wait`) announce it once.
        """
        if not self._announces:
            return
        now = self._clock.time()

        def promote(db: Connection) -> tuple[Any, ...] | None:
            with transaction(db):
                if _shown_question(db, agent, now) is not None:
                    return None
                row: tuple[Any, ...] | None = db.execute(
                    f"SELECT {_COLUMNS} FROM items WHERE agent = ? AND kind = 'question' AND "
                    "state = 'pending' AND announced IS NULL AND deadline > ? "
                    "ORDER BY created, rowid LIMIT 1",
                    (agent, now),
                ).fetchone()
                if row is not None:
                    db.execute("UPDATE items SET announced = ? WHERE id = ?", (now, row[0]))
                return row

        row = await self._db.run(promote)
        if row is not None:
            self._announce(DeskItem._of(row))

    def _announce(self, item: DeskItem) -> None:
        """Tell the founder (through the alerts) that ``item`` waits for them."""
        source = f"agent/{item.agent}"
        p = item.payload
        common: dict[str, Any] = {
            "source": source,
            "item_id": item.id,
            "agent": item.agent,
            "run_id": item.run_id,
            "routine": item.routine,
            "deadline": item.deadline,
        }
        if item.kind is ItemKind.KEPT:
            return  # kept because the way to the founder failed: there is nothing to send
        if item.kind is ItemKind.RESULT:
            self._bus.publish(
                FounderResultForApproval(
                    answer=_clip(str(p.get("answer") or ""), 3000),
                    task=_clip(str(p.get("task") or ""), 300),
                    cost_usd=float(p.get("cost_usd") or 0.0),
                    round=int(p.get("round") or 1),
                    follows=p.get("follows") or None,
                    unverified=p.get("unverified") or None,
                    offline=p.get("offline") is True or None,
                    **common,
                )
            )
        elif item.kind is ItemKind.APPROVAL:
            self._bus.publish(
                FounderApprovalRequested(
                    tool=str(p.get("tool")),
                    input=_clip(json.dumps(p.get("input"), ensure_ascii=False), 1500),
                    reason=_clip(str(p.get("reason") or ""), 800),
                    **common,
                )
            )
        else:
            self._bus.publish(
                FounderQuestion(question=_clip(str(p.get("question") or ""), 1500), **common)
            )

    async def wait(self, item: DeskItem) -> DeskItem:
        """Wait until ``item`` is decided or its deadline passes (then it is ``expired``);
        the item as it ended. Cancellation propagates (the run is stopping: the item stays
        pending and a resumed run waits for it again).
        """
        event = self._decided.setdefault(item.id, asyncio.Event())
        remind = item.created + REMIND_AT * (item.deadline - item.created)
        reminded = False
        while True:
            current = await self.get(item.id)
            if current is None or not current.pending:
                return current or item
            if current.kind is ItemKind.QUESTION and current.announced is None:
                # a queued question: its turn may have come where nothing announced it
                # (answered on the CLI with no daemon, a restart, another daemon on
                # PostgreSQL) — the queue is derived from the store
                await self._next_question(current.agent)
            now = self._clock.time()
            left = current.deadline - now
            if left <= 0:
                return await self._expire(current)
            if not reminded and now >= remind:
                reminded = True
                # a queued question was never sent: no reminder of it (a second message of
                # the burst); its own message, when its turn comes, is the notice
                if current.announced is not None:
                    await self._remind(current)
            step = left if self._poll is None else min(left, self._poll)
            if not reminded:
                step = min(step, max(remind - now, 0.0))
            with contextlib.suppress(TimeoutError):
                await within(self._clock, step, event.wait())
            event.clear()

    async def _remind(self, item: DeskItem) -> None:
        """Remind the founder of pending ``item`` (three quarters of its time passed): one
        ``founder_reminder`` event, the first time only — the ``reminded`` mark is set in
        the same statement that checks it, so a restart (a resumed run waits again) or a
        second daemon does not remind twice.
        """
        now = self._clock.time()
        first = await self._db.run(
            lambda db: (
                db.execute(
                    "UPDATE items SET reminded = ? WHERE id = ? AND state = 'pending' "
                    "AND reminded IS NULL",
                    (now, item.id),
                ).rowcount
            )
        )
        if first:
            self._bus.publish(
                FounderReminder(
                    source=f"agent/{item.agent}",
                    item_id=item.id,
                    item_kind=str(item.kind),
                    agent=item.agent,
                    run_id=item.run_id,
                    routine=item.routine,
                    created=item.created,
                    deadline=item.deadline,
                    summary=_clip(_summary(item), 300),
                )
            )

    async def _expire(self, item: DeskItem) -> DeskItem:
        done, _ = await self._set(item.id, ItemState.EXPIRED, "", "the deadline")
        return done

    async def withdraw_run(self, run_id: str, reason: str) -> list[DeskItem]:
        """Close the approvals and questions run ``run_id`` left pending as ``withdrawn``
        with ``reason``: the run ended without them (its task was withdrawn), so an answer
        would do nothing. Each is a ``founder_decided`` event (its message loses its
        buttons and says so); the items closed. A result awaiting approval is the
        routine's, not the run's, and stays.
        """
        closed = []
        for item in await self.of_run(run_id):
            if item.pending and item.kind in (ItemKind.APPROVAL, ItemKind.QUESTION):
                done, changed = await self._set(
                    item.id, ItemState.WITHDRAWN, reason, "companyd", via="companyd"
                )
                if changed:
                    closed.append(done)
        return closed

    # -- deciding -------------------------------------------------------------------------

    async def decide(
        self, item_id: str, state: ItemState, text: str = "", by: str = "", via: str = ""
    ) -> DeskItem:
        """Decide a pending item: ``approved`` / ``rejected`` (an approval or a result,
        ``text`` the reason), ``answered`` (a question, ``text`` the answer) or
        ``changes_requested`` (a result, ``text`` the change; an answer to a result is one).
        ``by`` and ``via`` (``telegram``, ``cli``) are kept with the decision. The first
        decision wins, in this process or any other on the same store (see the module
        docstring): a later one is refused.

        Raises:
            DeskError: no such item, the wrong decision for its kind, or already decided.
        """
        item = await self.get(item_id)
        if item is None:
            pending = ", ".join(i.id for i in await self.pending()) or "(none)"
            raise DeskError(f"nothing on the founder's desk has id {item_id!r}; pending: {pending}")
        if item.pending and item.deadline <= self._clock.time():
            item = await self._expire(item)
        if not item.pending:
            raise _already(item)
        if item.kind is ItemKind.QUESTION and state is not ItemState.ANSWERED:
            raise DeskError(
                f"{item.id} is a question from {item.agent}: answer it (`companyd answer "
                f'{item.id} "…"`, or reply to it on Telegram) rather than {state} it'
            )
        if item.kind is ItemKind.APPROVAL and state not in (ItemState.APPROVED, ItemState.REJECTED):
            raise DeskError(
                f"{item.id} asks to approve a call of {item.payload.get('tool')!r}: approve "
                "or reject it"
            )
        if item.kind is ItemKind.KEPT and state is not ItemState.APPROVED:
            raise DeskError(
                f"{item.id} is a result of {item.routine} kept for you because it could not "
                f"be delivered: approve it (`companyd approve {item.id}`) to mark it read"
            )
        if item.kind is ItemKind.RESULT:
            if state is ItemState.ANSWERED:
                state = ItemState.CHANGES  # an answer to a result is the change asked for
            if state not in (ItemState.APPROVED, ItemState.REJECTED, ItemState.CHANGES):
                raise DeskError(f"{item.id} is a result: approve it, reject it or ask for changes")
        if state in (ItemState.ANSWERED, ItemState.CHANGES) and not text.strip():
            raise DeskError(f"an answer to {item.id} needs some text; nothing changed")
        done, changed = await self._set(item_id, state, text.strip(), by, via=via)
        if not changed or done.state is not state:
            # decided meanwhile: another button, another daemon, the deadline
            raise _already(done)
        return done

    async def _set(
        self, item_id: str, state: ItemState, text: str, by: str, *, via: str = ""
    ) -> tuple[DeskItem, bool]:
        """Move pending item ``item_id`` to ``state`` — or to ``expired`` when its deadline
        has passed meanwhile — in one ``BEGIN IMMEDIATE`` transaction; the item as stored
        after it, and whether this call changed it (False: it was no longer pending).
        """
        now = self._clock.time()

        def upd(db: Connection) -> tuple[bool, tuple[Any, ...] | None]:
            with transaction(db):
                row = db.execute(
                    f"SELECT {_COLUMNS} FROM items WHERE id = ?", (item_id,)
                ).fetchone()
                if row is None or row[7] != ItemState.PENDING:
                    return False, row
                values = (str(state), text, by, via)
                if state is not ItemState.EXPIRED and float(row[9]) <= now:
                    values = (str(ItemState.EXPIRED), "", "the deadline", "")
                changed = db.execute(
                    "UPDATE items SET state = ?, text = ?, decided_by = ?, decided = ?, via = ? "
                    "WHERE id = ? AND state = 'pending'",
                    (values[0], values[1], values[2], now, values[3], item_id),
                ).rowcount
                row = db.execute(
                    f"SELECT {_COLUMNS} FROM items WHERE id = ?", (item_id,)
                ).fetchone()
                return changed > 0, row

        changed, row = await self._db.run(upd)
        if row is None:
            raise DeskError(f"nothing on the founder's desk has id {item_id!r}")
        item = DeskItem._of(row)
        if changed:
            self._bus.publish(item.decided_event())
            event = self._decided.pop(item_id, None)
            if event is not None:
                event.set()
            if item.kind is ItemKind.QUESTION:
                await self._next_question(item.agent)  # the agent's next question's turn
        return item, changed

    # -- reading --------------------------------------------------------------------------

    async def get(self, item_id: str) -> DeskItem | None:
        """The item ``item_id`` as stored, or None."""
        row = await self._db.run(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM items WHERE id = ?", (item_id,)
            ).fetchone()
        )
        return None if row is None else DeskItem._of(row)

    async def latest(self, key_prefix: str) -> DeskItem | None:
        """The newest item whose key starts with ``key_prefix``, or None."""
        like = key_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        row = await self._db.run(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM items WHERE key LIKE ? ESCAPE '\\' "
                "ORDER BY created DESC, rowid DESC LIMIT 1",
                (like + "%",),
            ).fetchone()
        )
        return None if row is None else DeskItem._of(row)

    async def pending(self) -> list[DeskItem]:
        """Items still waiting for the founder, oldest first (those past their deadline are
        expired first, so the list never offers what can no longer be decided).
        """
        now = self._clock.time()
        rows = await self._db.run(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM items WHERE state = 'pending' ORDER BY created, rowid"
            ).fetchall()
        )
        out = []
        for row in rows:
            item = DeskItem._of(row)
            if item.deadline <= now:
                await self._expire(item)
                continue
            out.append(item)
        return out

    async def of_run(self, run_id: str) -> list[DeskItem]:
        """The items asked by run ``run_id`` (its approvals, questions and, for a routine's
        run, its result awaiting approval), oldest first.
        """
        rows = await self._db.run(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM items WHERE run_id = ? ORDER BY created, rowid",
                (run_id,),
            ).fetchall()
        )
        return [DeskItem._of(r) for r in rows]

    async def recent(self, limit: int = 20) -> list[DeskItem]:
        """The latest items, decided or not, newest first."""
        rows = await self._db.run(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM items ORDER BY created DESC, rowid DESC LIMIT ?", (limit,)
            ).fetchall()
        )
        return [DeskItem._of(r) for r in rows]


def _shown_question(db: Connection, agent: str, now: float) -> str | None:
    """The id of ``agent``'s question the founder has been sent and not yet answered (not
    past its deadline), if any: while there is one, the agent's next questions queue.
    """
    row = db.execute(
        "SELECT id FROM items WHERE agent = ? AND kind = 'question' AND state = 'pending' "
        "AND announced IS NOT NULL AND deadline > ? LIMIT 1",
        (agent, now),
    ).fetchone()
    return None if row is None else str(row[0])


def _already(item: DeskItem) -> DeskError:
    """The refusal of a decision on ``item``, which is no longer pending."""
    if item.state is ItemState.WITHDRAWN:
        return DeskError(
            f"{item.kind} {item.id} was withdrawn ({item.text or 'its run ended'}): its run "
            "no longer waits for an answer; nothing changed"
        )
    return DeskError(
        f"{item.kind} {item.id} was already {item.state}"
        + (f" by {item.decided_by}" if item.decided_by else "")
        + "; nothing changed"
    )


def _summary(item: DeskItem) -> str:
    """What ``item`` asks, in one line (a reminder's)."""
    p = item.payload
    if item.kind is ItemKind.APPROVAL:
        return f"{item.agent} wants to call {p.get('tool')}"
    if item.kind is ItemKind.RESULT:
        return f"the result of {item.routine} by {item.agent} awaits your approval"
    return f"{item.agent} asks: {p.get('question')}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decisions_of(items: list[DeskItem]) -> list[ResultDecision]:
    """The founder's decisions on a run (``runs show``), from the run's items
    (:meth:`Desk.of_run`): one per result item of the run (a routine with ``approval:
    required``) and one per question it asked (``ask_founder``: who answered, through
    what, and the answer as ``text``), pending ones included.
    """
    return [
        {
            "item_id": i.id,
            "round": int(i.payload.get("round") or 1),
            "decision": str(i.state),
            "by": i.decided_by or None,
            "via": i.via or None,
            "asked": i.created,
            "decided": i.decided,
            "text": i.text,
        }
        for i in items
        if i.kind in (ItemKind.RESULT, ItemKind.QUESTION)
    ]
