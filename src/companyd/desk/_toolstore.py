"""The durable record of the agents' external tools: how often each was called today
(``tools.rate_limit``), and the approved catalogue of each MCP server (changed-tool
quarantine). docs/tools.md.

:class:`ToolStore` is the ``tools`` store (``tools.sqlite`` in the state directory, or the
``tools`` tables of the company's PostgreSQL schema), written through the same machinery as
every store (:mod:`companyd.storage`). :class:`RateLimits` applies ``tools.rate_limit`` on
top of it: a call past the day's limit is refused with the reason, counted even across a
restart, and alerted once per agent, tool and day.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from companyd._frozen import Frozen
from companyd._sqlite import transaction
from companyd.clock import Clock
from companyd.events import EventBus, ToolRateLimited
from companyd.storage import SQLITE, Backend, Connection, open_database

if TYPE_CHECKING:  # types only: they import PostgreSQL's driver (issue 31)
    from companyd.storage import StoreDatabase

__all__ = ["STEPS", "TOOL_STORE_STEPS", "Catalogue", "RateLimits", "ToolStore", "fingerprint"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    agent TEXT NOT NULL,
    tool TEXT NOT NULL,
    day TEXT NOT NULL,                  -- YYYY-MM-DD in the company's timezone
    calls INTEGER NOT NULL DEFAULT 0,   -- calls let through that day
    refused INTEGER NOT NULL DEFAULT 0, -- calls refused past the limit
    PRIMARY KEY (agent, tool, day)
);
CREATE TABLE IF NOT EXISTS catalogue (
    agent TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    fingerprint TEXT NOT NULL,          -- of the approved definition ('' : none approved)
    definition TEXT NOT NULL,           -- JSON: the approved definition
    pending TEXT NOT NULL DEFAULT '',   -- fingerprint of a new/changed definition held back
    pending_definition TEXT NOT NULL DEFAULT '',
    held_since DOUBLE PRECISION NOT NULL DEFAULT 0,  -- when the pending one was first seen
    PRIMARY KEY (agent, server, tool)
);

"""

#: The store's schema on both backends, one entry per version.
STEPS: tuple[str, ...] = (_SCHEMA,)
#: The store file → how many schema steps this code knows (companyd.ops._upgrade reads it).
TOOL_STORE_STEPS: dict[str, int] = {"tools.sqlite": len(STEPS)}


def fingerprint(definition: Mapping[str, Any]) -> str:
    """A stable digest of a tool's definition (name, description, input schema,
    annotations): any change to what the model or the risk policy reads changes it.
    """
    text = json.dumps(dict(definition), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Catalogue(Frozen):
    """What a server offers now against what the founder approved.

    Attributes:
        offered: tool names that may be offered (approved, unchanged).
        held: tool names held back (new, or changed since approval) → what changed.
        newly_held: the held tools the founder has not been told about yet.
    """

    offered: frozenset[str]
    held: Mapping[str, str]
    newly_held: Mapping[str, str]


class ToolStore:
    """The ``tools`` store of one state directory.

    Args:
        path: the SQLite file (created on first use; unused on PostgreSQL).
        backend: where the rows live.
    """

    def __init__(self, path: Path, *, backend: Backend = SQLITE) -> None:
        self.path = path
        self._db: StoreDatabase = open_database(
            backend,
            path=path,
            store="tools",
            migrations=STEPS,
            what="tool store",
            thread_name="tools",
        )

    async def close(self) -> None:
        """Close the database and stop its thread."""
        await self._db.close()

    async def take(self, agent: str, tool: str, day: str, limit: int) -> tuple[bool, int, bool]:
        """Count one call of ``tool`` by ``agent`` on ``day`` if fewer than ``limit`` were
        let through: ``(allowed, calls let through today, first refusal of the day)``.
        """

        def go(db: Connection) -> tuple[bool, int, bool]:
            with transaction(db, immediate=False):
                db.execute(
                    "INSERT INTO calls (agent, tool, day) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    (agent, tool, day),
                )
                calls, refused = db.execute(
                    "SELECT calls, refused FROM calls WHERE agent = ? AND tool = ? AND day = ?",
                    (agent, tool, day),
                ).fetchone()
                if calls >= limit:
                    db.execute(
                        "UPDATE calls SET refused = refused + 1 WHERE agent = ? AND tool = ? "
                        "AND day = ?",
                        (agent, tool, day),
                    )
                    return False, int(calls), int(refused) == 0
                db.execute(
                    "UPDATE calls SET calls = calls + 1 WHERE agent = ? AND tool = ? AND day = ?",
                    (agent, tool, day),
                )
                return True, int(calls) + 1, False

        return await self._db.run(go)

    async def used(self, day: str) -> dict[tuple[str, str], int]:
        """Calls let through on ``day``, by (agent, tool)."""

        def go(db: Connection) -> dict[tuple[str, str], int]:
            rows = db.execute("SELECT agent, tool, calls FROM calls WHERE day = ?", (day,))
            return {(str(a), str(t)): int(c) for a, t, c in rows.fetchall()}

        return await self._db.run(go)

    async def check_catalogue(
        self,
        agent: str,
        server: str,
        listed: Mapping[str, Mapping[str, Any]],
        now: float = 0.0,
    ) -> Catalogue:
        """Compare ``listed`` (tool name → definition, this start's ``tools/list``) with the
        approved catalogue of ``server`` of ``agent``. The first catalogue of a server is
        approved as it is; later, a new tool or a changed definition is held back until
        :meth:`approve`; a tool the server no longer lists is forgotten. ``now``: when (a
        held tool's ``held_since``).
        """

        def go(db: Connection) -> Catalogue:
            # the write lock at BEGIN (IMMEDIATE): the catalogue read decides what is held
            # and must stay true until the writes — an approval by the CLI meanwhile (no
            # daemon answers yet while its agents start) would make a plain BEGIN's first
            # write fail at once with "database is locked" (its snapshot stale)
            with transaction(db):
                rows = db.execute(
                    "SELECT tool, fingerprint, definition, pending FROM catalogue "
                    "WHERE agent = ? AND server = ?",
                    (agent, server),
                ).fetchall()
                known = {str(r[0]): (str(r[1]), str(r[2]), str(r[3])) for r in rows}
                first = not known
                offered: set[str] = set()
                held: dict[str, str] = {}
                newly: dict[str, str] = {}
                for name, definition in listed.items():
                    fp = fingerprint(definition)
                    text = json.dumps(dict(definition), sort_keys=True, default=str)
                    if first:
                        db.execute(
                            "INSERT INTO catalogue (agent, server, tool, fingerprint, definition) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (agent, server, name, fp, text),
                        )
                        offered.add(name)
                        continue
                    old = known.get(name)
                    if old is not None and old[0] == fp:
                        offered.add(name)
                        if old[2]:  # a change that was reverted: nothing waits any more
                            db.execute(
                                "UPDATE catalogue SET pending = '', pending_definition = '' "
                                "WHERE agent = ? AND server = ? AND tool = ?",
                                (agent, server, name),
                            )
                        continue
                    what = "new tool" if old is None or not old[0] else _changes(old[1], definition)
                    held[name] = what
                    if old is None:
                        db.execute(
                            "INSERT INTO catalogue (agent, server, tool, fingerprint, definition, "
                            "pending, pending_definition, held_since) "
                            "VALUES (?, ?, ?, '', '', ?, ?, ?)",
                            (agent, server, name, fp, text, now),
                        )
                        newly[name] = what
                    elif old[2] != fp:
                        db.execute(
                            "UPDATE catalogue SET pending = ?, pending_definition = ?, "
                            "held_since = ? WHERE agent = ? AND server = ? AND tool = ?",
                            (fp, text, now, agent, server, name),
                        )
                        newly[name] = what
                for name in set(known) - set(listed):
                    db.execute(
                        "DELETE FROM catalogue WHERE agent = ? AND server = ? AND tool = ?",
                        (agent, server, name),
                    )
                return Catalogue(offered=frozenset(offered), held=held, newly_held=newly)

        return await self._db.run(go)

    async def approve(self, server: str, agent: str | None = None) -> list[tuple[str, str]]:
        """Approve every held tool of ``server`` (of ``agent``, or of every agent that has
        a server by that name): ``[(agent, tool)]`` approved.
        """

        def go(db: Connection) -> list[tuple[str, str]]:
            with transaction(db):  # what is held, read then approved: as check_catalogue
                sql = "SELECT agent, tool FROM catalogue WHERE server = ? AND pending != ''"
                args: tuple[str, ...] = (server,)
                if agent is not None:
                    sql += " AND agent = ?"
                    args = (server, agent)
                rows = [(str(a), str(t)) for a, t in db.execute(sql, args).fetchall()]
                for a, t in rows:
                    db.execute(
                        "UPDATE catalogue SET fingerprint = pending, definition = "
                        "pending_definition, pending = '', pending_definition = '' "
                        "WHERE agent = ? AND server = ? AND tool = ?",
                        (a, server, t),
                    )
                return rows

        return await self._db.run(go)

    async def held(self) -> list[dict[str, Any]]:
        """Tools held back, ``{agent, server, tools, since}`` per server of an agent."""

        def go(db: Connection) -> list[dict[str, Any]]:
            out: dict[tuple[str, str], dict[str, Any]] = {}
            rows = db.execute(
                "SELECT agent, server, tool, held_since FROM catalogue WHERE pending != '' "
                "ORDER BY agent, server, tool"
            ).fetchall()
            for a, s, t, since in rows:
                entry = out.setdefault(
                    (str(a), str(s)),
                    {"agent": str(a), "server": str(s), "tools": [], "since": float(since)},
                )
                entry["tools"].append(str(t))
                entry["since"] = min(entry["since"], float(since))
            return list(out.values())

        return await self._db.run(go)


def _changes(old_text: str, new: Mapping[str, Any]) -> str:
    """Which parts of a tool's definition changed, in words."""
    try:
        old = json.loads(old_text)
    except ValueError:
        old = {}
    parts = [k for k in ("description", "input_schema", "annotations") if old.get(k) != new.get(k)]
    return "changed " + (", ".join(parts) or "definition")


class RateLimits:
    """``tools.rate_limit`` of the agents: a call past its tool's daily limit is refused.

    Args:
        store: where the day's counts live (durable: a restart does not reset them).
        bus: where ``tool_rate_limited`` goes (once per agent, tool and day).
        clock: time source (which day it is).
        timezone: the company's timezone (the day's bounds), asked at each call.
    """

    def __init__(
        self, store: ToolStore, *, bus: EventBus, clock: Clock, timezone: Callable[[], str]
    ) -> None:
        self.store = store
        self._bus = bus
        self._clock = clock
        self._timezone = timezone

    def today(self) -> str:
        """The day it is in the company's timezone, ``YYYY-MM-DD``."""
        zone = ZoneInfo(self._timezone())
        return dt.datetime.fromtimestamp(self._clock.time(), zone).date().isoformat()

    async def over(self, agent: str, tool: str, limit: int) -> bool:
        """Whether ``agent`` already made ``limit`` calls of ``tool`` today (nothing
        counted).
        """
        used = await self.store.used(self.today())
        return used.get((agent, tool), 0) >= limit

    async def take(self, agent: str, tool: str, limit: int) -> str | None:
        """None if this call of ``tool`` may run (it is counted); else why not, for the
        model (and, the first time today, a ``tool_rate_limited`` alert).
        """
        day = self.today()
        allowed, calls, first = await self.store.take(agent, tool, day, limit)
        if allowed:
            return None
        if first:
            self._bus.publish(
                ToolRateLimited(
                    source=f"agent/{agent}", agent=agent, tool=tool, limit=limit, day=day
                )
            )
        return (
            f"refused: {tool!r} may be called {limit} time(s) a day (tools.rate_limit in "
            f"company.yaml) and was called {calls} time(s) today ({day}, "
            f"{self._timezone()}); do not call it again today — tell the founder if it is "
            "needed, who can raise the limit"
        )
