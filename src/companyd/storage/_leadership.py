"""Which of a company's daemons leads: a PostgreSQL advisory lock, a lease, an epoch.

Several daemons of one company share one schema; exactly one is leader, the others are
standbys ready to take over. The contract (docs/ha.md, "Leadership"):

* **The lock.** Leading means holding the session-level advisory lock
  ``lock_key(schema, "leader")`` on a connection of its own (autocommit, async). A leader
  whose process dies in any way (``kill -9``, OOM) loses it when the kernel closes its
  socket; a vanished host or link is noticed by TCP keepalives set on both ends (libpq
  ``keepalives*`` and ``tcp_user_timeout``; the server's ``tcp_keepalives_*``), all scaled
  to the lease.
* **The epoch.** ``companyd_leader`` holds one row: the ``epoch`` (the fencing token), who
  leads (node, pid, host, the lock session's ``backend_pid``), its ``lease``, ``since`` and
  ``renewed`` (the server's clock, so every host judges the row by one clock). Winning the
  lock bumps the epoch in one transaction. :attr:`Leadership.fence` carries it, and every
  write transaction of a store built with that fence checks it (:mod:`.fence`).
* **The lease.** The leader renews ``renewed`` every ``lease / 3`` s on its lock session.
  A standby that finds the lock held but the row not renewed for longer than its lease
  (the leader's link is dead but the server has not reaped its session yet) terminates
  that session (``pg_terminate_backend`` of the recorded ``backend_pid``, only if it is
  the one holding the lock) and takes over: takeover after a lost link takes at most
  lease + poll. A leader that cannot renew within its lease (measured on the injected
  clock from when its last successful renewal was sent) deposes itself: its fence refuses
  writes at once and :meth:`Leadership.hold` raises :class:`LostLeadership`.
* **Stuck writers.** The new epoch waits for write transactions still checking the old
  one (their ``FOR SHARE`` row lock). One that has sat idle in its transaction for longer
  than the lease (its daemon's link is dead) is terminated by the new leader, so a
  takeover is not held up by it; any other is waited for (``lock_timeout`` = the lease,
  then retried).

Every query on the lock session has a deadline (the lease, on the injected clock); one
that misses it closes the connection, because a query that does not answer is a dead
link. The server checks every second whether the client of a running query is still
there (``client_connection_check_interval``, PostgreSQL 14+), so a dropped session's
query — a takeover's bump waiting for a row lock — does not run on holding the lock.

Ownership: the :class:`Leadership` owns its connection and its :class:`Fence`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from companyd._aio import race
from companyd.clock import Clock
from companyd.errors import CompanydError
from companyd.storage._fence import Fence
from companyd.storage._postgres import PgDatabase, lock_key

__all__ = ["LeaderInfo", "LeaderUnknown", "Leadership", "LostLeadership"]

log = logging.getLogger("companyd.storage.leadership")

T = TypeVar("T")

#: The advisory lock's name (with the schema, :func:`lock_key`).
LOCK_NAME = "leader"

#: The leadership table's migrations (its own row of ``companyd_migrations``).
STEPS = (
    "CREATE TABLE companyd_leader ("
    " id BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),"
    " epoch BIGINT NOT NULL,"
    " node TEXT NOT NULL,"
    " pid INTEGER NOT NULL,"
    " host TEXT NOT NULL,"
    " backend_pid INTEGER NOT NULL,"
    " lease DOUBLE PRECISION NOT NULL,"
    " since DOUBLE PRECISION NOT NULL,"
    " renewed DOUBLE PRECISION NOT NULL)",
)

_NOW = "extract(epoch FROM clock_timestamp())"

#: The lock's row of pg_locks: a bigint key is (classid, objid) = (high, low) 32 bits.
_HOLDER = (
    "l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND l.classid::bigint = %(hi)s AND l.objid::bigint = %(lo)s"
)

_BUMP = f"""
INSERT INTO companyd_leader AS r
    (id, epoch, node, pid, host, backend_pid, lease, since, renewed)
VALUES (TRUE, 1, %(node)s, %(pid)s, %(host)s, pg_backend_pid(), %(lease)s, {_NOW}, {_NOW})
ON CONFLICT (id) DO UPDATE SET
    epoch = r.epoch + 1, node = excluded.node, pid = excluded.pid, host = excluded.host,
    backend_pid = excluded.backend_pid, lease = excluded.lease, since = excluded.since,
    renewed = excluded.renewed
RETURNING epoch
"""

# Writers of the old epoch idle in their transaction for longer than the lease (their
# daemon's link is dead): they hold the row the bump needs; end their sessions.
_STUCK_WRITERS = """
SELECT a.pid, pg_terminate_backend(a.pid)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.relation = 'companyd_leader'::regclass AND l.mode = 'RowShareLock'
  AND a.pid <> pg_backend_pid() AND a.state LIKE 'idle in transaction%%'
  AND clock_timestamp() - a.state_change > make_interval(secs => %(lease)s)
"""

_STALE_LEADER = f"""
SELECT r.node, r.backend_pid, {_NOW} - r.renewed, pg_terminate_backend(l.pid, 1000)
FROM companyd_leader r JOIN pg_locks l ON l.pid = r.backend_pid
WHERE {_HOLDER} AND {_NOW} - r.renewed > r.lease
"""

_WHO = f"""
SELECT r.epoch, r.node, r.pid, r.host, r.since, {_NOW} - r.renewed, r.lease
FROM companyd_leader r JOIN pg_locks l ON l.pid = r.backend_pid
WHERE {_HOLDER}
"""


class LostLeadership(CompanydError):
    """This daemon was leader and is not any more: its lock connection broke, it could not
    renew within its lease, or another daemon's epoch took over. Its fence refuses writes
    from now on; the daemon must stop what only a leader does and campaign again.
    """


class LeaderUnknown(CompanydError):
    """The database could not be asked who leads (it is unreachable or refused)."""


class _LinkDown(Exception):
    """A query on the lock session failed or (``timed_out``) missed its deadline."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads a company now, as a standby's ``status`` shows it.

    Attributes:
        epoch: the leader's epoch (the fencing token; one more at every takeover).
        node: the leader's node name.
        pid: the leader's process id on its host.
        host: the leader's host name.
        since: when it took over (epoch seconds, the database server's clock).
        renewed_age: seconds since it last renewed its lease (the server's clock).
        lease: its lease in seconds (a ``renewed_age`` beyond it: the leader is being
            replaced).
    """

    epoch: int
    node: str
    pid: int
    host: str
    since: float
    renewed_age: float
    lease: float


class Leadership:
    """One daemon's part in electing its company's leader (module docstring).

    Args:
        dsn: the libpq connection string (a secret: never logged).
        schema: the company's schema (the table lives there; the lock key names it).
        node: this daemon's name in ``status`` and ``companyd_leader`` (e.g. the host).
        clock: the clock of the lease arithmetic and of every wait.
        lease: seconds a leader may go without renewing before it is replaced (> 0).
        poll: seconds between a standby's attempts to take over (> 0).

    Use: ``epoch = await campaign()`` (returns once leader), then ``await hold()`` while
    leading (raises :class:`LostLeadership` when leadership is lost), ``await resign()``
    on a graceful stop, ``await close()`` at the end. Build the stores with
    ``Backend(..., fence=leadership.fence)`` so a deposed leader cannot write.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        node: str,
        clock: Clock,
        lease: float = 5.0,
        poll: float = 1.0,
    ) -> None:
        if not lease > 0:
            raise ValueError(f"lease must be a number of seconds > 0, got {lease!r}")
        if not poll > 0:
            raise ValueError(f"poll must be a number of seconds > 0, got {poll!r}")
        self.schema = schema
        self.node = node
        self.clock = clock
        self.lease = float(lease)
        self.poll = float(poll)
        #: The epoch this daemon's writes carry (owned here; read by the stores).
        self.fence = Fence()
        self._dsn = dsn
        key = lock_key(schema, LOCK_NAME)
        self._key = key
        self._hilo = {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF}
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._locked = False  # this session holds the lock
        self._table = False
        self._epoch: int | None = None
        self._renewed_at = 0.0  # clock.monotonic() when the last good renewal was sent
        self._released = asyncio.Event()
        self._stray: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._connecting = asyncio.Lock()  # who() may run while campaign() does

    # -- state --------------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        """The epoch this daemon leads as, or None (standby, deposed or resigned)."""
        return self._epoch

    @property
    def leading(self) -> bool:
        """Whether this daemon leads: it won an epoch, has not lost or resigned it, and its
        last renewal was sent less than a lease ago (on the injected clock). False means:
        stop doing what only the leader does.
        """
        return (
            self._epoch is not None
            and not self.fence.deposed
            and self.clock.monotonic() - self._renewed_at < self.lease
        )

    # -- campaigning --------------------------------------------------------------------

    async def campaign(self) -> int:
        """Wait until this daemon leads, then return its epoch (at once if it already
        leads). Tries every ``poll`` s for ever, through database outages (each failure is
        logged); cancel it to stop. On return the fence carries the new epoch.
        """
        if self._epoch is not None and not self.fence.deposed:
            return self._epoch
        self._released = asyncio.Event()
        last = ""
        try:
            while True:
                try:
                    epoch = await self._attempt()
                except (psycopg.Error, _LinkDown, OSError) as exc:
                    if str(exc) != last:
                        log.warning("leadership of %r: %s; trying again", self.schema, exc)
                        last = str(exc)
                    epoch = None
                if epoch is not None:
                    return epoch
                await self.clock.sleep(self.poll)
        except asyncio.CancelledError:
            if self._locked and self._epoch is None:  # the lock without an epoch: let go
                await self._drop()
            raise

    async def _attempt(self) -> int | None:
        """One try: take the lock (replacing a stale leader), then bump the epoch."""
        await self._ensure_table()
        if not self._locked:
            self._locked = await self._query(self._try_lock)
            if not self._locked and await self._query(self._depose_stale):
                self._locked = await self._query(self._try_lock)
        if not self._locked:
            return None
        sent = self.clock.monotonic()
        epoch = await self._query(self._bump, 2 * self.lease)
        self._epoch = epoch
        self._renewed_at = sent
        self.fence.epoch = epoch
        self.fence.deposed = False
        log.info("leadership of %r: %s leads as epoch %d", self.schema, self.node, epoch)
        return epoch

    async def _ensure_table(self) -> None:
        if self._table:
            return
        db = PgDatabase(
            self._dsn,
            schema=self.schema,
            store="leadership",
            migrations=STEPS,
            what="the leadership table",
            timeout=max(self.lease, 5.0),
            thread_name="companyd-leadership",
        )
        try:
            await db.open()
        finally:
            await db.close()
        self._table = True

    async def _try_lock(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,))
        row = await cur.fetchone()
        return bool(row and row[0])

    async def _depose_stale(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        cur = await conn.execute(_STALE_LEADER, self._hilo)
        rows = await cur.fetchall()
        for node, backend_pid, age, _ in rows:
            log.warning(
                "leadership of %r: leader %r (database session %d) last renewed %.1f s ago, "
                "past its lease: ending its session to take over",
                self.schema,
                node,
                backend_pid,
                age,
            )
        return bool(rows)

    async def _bump(self, conn: psycopg.AsyncConnection[Any]) -> int:
        async with conn.transaction():
            await conn.execute(
                "SELECT set_config('lock_timeout', %s, true)", (f"{int(self.lease * 1000)}ms",)
            )
            cur = await conn.execute(_STUCK_WRITERS, {"lease": self.lease})
            for pid, _ in await cur.fetchall():
                log.warning(
                    "leadership of %r: ended database session %d, a write of the old epoch "
                    "idle in its transaction for longer than the lease",
                    self.schema,
                    pid,
                )
            cur = await conn.execute(
                _BUMP,
                {
                    "node": self.node,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "lease": self.lease,
                },
            )
            row = await cur.fetchone()
        assert row is not None  # INSERT … RETURNING always returns the row
        return int(row[0])

    # -- leading ------------------------------------------------------------------------

    async def hold(self) -> None:
        """While leading: renew the lease every ``lease / 3`` s. Returns when
        :meth:`resign` or :meth:`close` is called.

        Raises:
            LostLeadership: not leader, or leadership was lost (the lock connection broke,
                no renewal succeeded within the lease, or the row names another epoch).
                The fence is deposed before this is raised.
            asyncio.CancelledError: cancelled — which gives leadership up as
                :meth:`resign` does (the lock is released at once).
        """
        epoch = self._epoch
        if epoch is None or self.fence.deposed:
            raise LostLeadership(f"{self.node!r} does not lead {self.schema!r}: campaign first")
        try:
            while not self._released.is_set():
                wait = self._renewed_at + self.lease / 3 - self.clock.monotonic()
                if wait > 0:
                    await race(self._released.wait(), self.clock.sleep(wait))
                    continue
                sent = self.clock.monotonic()
                left = self._renewed_at + self.lease - sent
                if left <= 0:
                    await self._lose(epoch, f"no renewal succeeded within {self.lease:g} s")
                try:
                    renewed = await self._query(self._renew, left)
                except _LinkDown as exc:
                    if self._released.is_set():
                        break
                    if exc.timed_out:  # it waited for the rest of the lease
                        await self._lose(epoch, f"no renewal succeeded within {self.lease:g} s")
                    if self._conn is None:  # the lock went with the connection
                        await self._lose(epoch, f"its lock connection broke ({exc})")
                    log.warning("leadership of %r: renewal failed: %s", self.schema, exc)
                    await self.clock.sleep(min(self.lease / 10, left))
                    continue
                if not renewed:
                    await self._lose(epoch, "the leadership row names another epoch")
                self._renewed_at = sent
        except asyncio.CancelledError:
            await self._give_up()
            raise

    async def _renew(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        cur = await conn.execute(
            f"UPDATE companyd_leader SET renewed = {_NOW} "
            "WHERE epoch = %s AND backend_pid = pg_backend_pid()",
            (self._epoch,),
        )
        return cur.rowcount == 1

    async def _lose(self, epoch: int, why: str) -> None:
        await self._give_up()
        raise LostLeadership(
            f"{self.node!r} lost leadership of {self.schema!r} (epoch {epoch}): {why}; its "
            "writes are refused from now on: stop leading and campaign again"
        )

    async def _give_up(self) -> None:
        """Depose the fence, drop the epoch and the lock connection (so the lock goes)."""
        self.fence.deposed = True
        self._epoch = None
        await self._drop()

    async def resign(self) -> None:
        """Give leadership up now (a graceful stop): the fence is deposed, the lock
        session closed, so a standby takes over at its next poll. A :meth:`hold` running
        returns. Call it after the stores have written their last rows. Harmless when not
        leading.
        """
        self._released.set()
        if self._epoch is not None:
            log.info("leadership of %r: %s resigns", self.schema, self.node)
        await self._give_up()

    # -- asking -------------------------------------------------------------------------

    async def who(self) -> LeaderInfo | None:
        """Who leads now, or None (nobody holds the lock, or a new leader is still
        taking over).

        Raises:
            LeaderUnknown: the database did not answer within the lease, or refused.
        """
        try:
            await self._ensure_table()
            return await self._query(self._who)
        except (psycopg.Error, _LinkDown, OSError) as exc:
            raise LeaderUnknown(
                f"cannot tell who leads {self.schema!r}: {exc}; check that the database "
                "is reachable (companyd doctor)"
            ) from exc

    async def _who(self, conn: psycopg.AsyncConnection[Any]) -> LeaderInfo | None:
        cur = await conn.execute(_WHO, self._hilo)
        row = await cur.fetchone()
        if row is None:
            return None
        epoch, node, pid, host, since, age, lease = row
        return LeaderInfo(
            epoch=int(epoch),
            node=str(node),
            pid=int(pid),
            host=str(host),
            since=float(since),
            renewed_age=float(age),
            lease=float(lease),
        )

    # -- the lock session -----------------------------------------------------------------

    async def _query(
        self,
        fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]],
        seconds: float | None = None,
    ) -> T:
        """``fn(conn)`` on the lock session, within ``seconds`` (default: the lease) of
        the injected clock. A failure raises _LinkDown, dropping the connection (and the
        lock) if it broke or did not answer in time.
        """
        conn = await self._connection()
        task = asyncio.ensure_future(fn(conn))
        try:
            won = await race(task, self.clock.sleep(self.lease if seconds is None else seconds))
        except asyncio.CancelledError:
            await self._drop(task)
            raise
        if won.index == 1:
            await self._drop(task)
            raise _LinkDown(
                f"the database did not answer within {seconds or self.lease:g} s", timed_out=True
            )
        try:
            return task.result()
        except psycopg.Error as exc:
            if conn.closed or conn.broken:
                await self._drop()
            raise _LinkDown(str(exc).strip() or type(exc).__name__) from exc

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        async with self._connecting:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            return await self._connect()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        await self._drop()
        if self._closed:
            raise RuntimeError(f"the leadership of {self.schema!r} by {self.node!r} is closed")
        interval = max(1, int(self.lease // 5))
        count = 3
        idle = max(1, int(self.lease) - interval * count)
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._dsn,
                autocommit=True,
                application_name=f"companyd leader {self.node}"[:63],
                connect_timeout=max(2, int(self.lease)),
                keepalives=1,
                keepalives_idle=idle,
                keepalives_interval=interval,
                keepalives_count=count,
                tcp_user_timeout=int(self.lease * 1000),
            )
        except psycopg.Error as exc:
            raise _LinkDown(str(exc).strip() or type(exc).__name__) from exc
        try:
            # The server's side of the keepalives, so it reaps the session of a vanished
            # host (and frees the lock) within about a lease; ignored on a Unix socket.
            await conn.execute(
                "SELECT set_config('search_path', %s, false),"
                " set_config('tcp_keepalives_idle', %s, false),"
                " set_config('tcp_keepalives_interval', %s, false),"
                " set_config('tcp_keepalives_count', %s, false),"
                " set_config('tcp_user_timeout', %s, false)",
                (
                    sql.Identifier(self.schema).as_string(conn),
                    str(idle),
                    str(interval),
                    str(count),
                    str(int(self.lease * 1000)),
                ),
            )
            if conn.info.server_version >= 140000:
                # A query of a dropped session (a takeover's bump waiting on a row lock)
                # would otherwise run on, lock held, until it ends: the server checks
                # for a vanished client this often while it runs (PostgreSQL 14+).
                await conn.execute(
                    "SELECT set_config('client_connection_check_interval', %s, false)",
                    (str(max(100, min(1000, int(self.lease * 200)))),),
                )
        except psycopg.Error as exc:
            await conn.close()
            raise _LinkDown(str(exc).strip() or type(exc).__name__) from exc
        self._conn = conn
        return conn

    async def _drop(self, pending: asyncio.Future[Any] | None = None) -> None:
        """Close the lock session (releasing the lock if the server still has it); a
        query still ``pending`` on it fails within psycopg's wait interval and is awaited
        (or cancelled after a second) so its socket is gone before a new one is opened.
        """
        conn, self._conn = self._conn, None
        self._locked = False
        if conn is not None:
            await conn.close()
        if pending is not None and not pending.done():
            # real time, not the injected clock: this waits on a socket being torn down
            await asyncio.wait({pending}, timeout=1.0)
            if not pending.done():
                pending.cancel()
                self._stray.add(pending)
        if pending is not None and pending.done() and not pending.cancelled():
            pending.exception()  # retrieved: a dropped query's error is expected

    async def close(self) -> None:
        """Resign (if leading) and close the lock session; the object is done (calling
        :meth:`campaign` or :meth:`who` after it is a RuntimeError).
        """
        self._closed = True
        await self.resign()
        stray, self._stray = self._stray, set()
        if stray:
            await asyncio.wait(stray, timeout=1.0)
