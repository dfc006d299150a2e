"""The run journal: every task, run and completed step, durable before the next step.

This is what makes "checkpoint and resume" true. An agent journals each completed model
response and each tool result *before* it takes the next step, so after an agent crash or a
``kill -9`` of the whole daemon the unfinished run is rebuilt from the journal and continues
from its last completed step:

* a model call whose response was journaled is never made (or paid for) again;
* a tool call journaled as started but without a result is re-run only if the tool is
  declared idempotent; otherwise the run continues with a tool result saying the outcome is
  unknown (no second tweet).

It also keeps what the operator asks about: tasks waiting or quarantined (with the errors
that got them quarantined), and runs with their outcome, cost and models, their thread
(``reply_to``: the run a follow-up answers) and who asked (``asked_by``: the run of the
colleague that consulted, delegated or asked for a review) — read back as a whole
transcript by :mod:`companyd.runs._transcript`. A finished run's steps are bounded in size
(:func:`~companyd.runs._transcript.bound_run`), and runs are deleted after the retention
period (:meth:`Journal.prune`, called daily by :mod:`companyd.runs._retention`).

Storage (:mod:`companyd.storage`): by default ``runs.sqlite`` in the state directory, WAL,
``synchronous=NORMAL`` — a commit survives a crash of the process (kill -9) because it is in
the OS page cache when the call returns; a power cut may lose the last few commits
(docs/agents.md). With ``state.backend: postgres`` the same tables are in the company's
schema (store ``runs``), committed on the server when a call returns, so a standby that
takes over reads every completed step of the runs the dead leader left unfinished and
resumes them without paying for a journaled call again (docs/storage.md). One worker thread
owns the connection, so the event loop never waits on the database. Schema versions:
:data:`~companyd.runs._schema.STEPS`, one list for both backends (a SQLite file from
before versions existed is at 0 and has migration 1's tables already, which it creates only
if missing).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from companyd._fs import DiskAlarm, is_disk_failure
from companyd._sqlite import store_errors, transaction
from companyd.runs._records import (
    ApprovalStep,
    JournaledRun,
    LlmStep,
    ReviewStep,
    Step,
    StepPayload,
    TaskState,
    ToolStartStep,
)
from companyd.runs._schema import MIGRATIONS, STEPS
from companyd.runs._tasks import RunOutcome, RunStatus, Task
from companyd.storage import SQLITE, Backend, Connection, connection_lost, open_database

if TYPE_CHECKING:  # typed dicts of the operator contract: pydantic, which reading needs not
    from companyd.admin import JournaledTask, ResultDelivery, RunRow, TaskRow

__all__ = [
    "MIGRATIONS",
    "ApprovalStep",
    "Journal",
    "JournaledRun",
    "LlmStep",
    "ReviewStep",
    "Step",
    "StepPayload",
    "TaskState",
    "ToolStartStep",
]

T = TypeVar("T")


log = logging.getLogger(__name__)

# Whether the journal's tables exist (PostgreSQL; its store row may be absent, version 0).
_PG_EXISTS = "SELECT to_regclass('runs') IS NOT NULL"
# PostgreSQL's SQLSTATE for a missing table: a schema where no store was ever opened.
_UNDEFINED_TABLE = "42P01"

_INSERT_STEP = "INSERT INTO steps (run_id, seq, kind, key, payload, ts) VALUES (?,?,?,?,?,?)"


def _asker_runs(db: Connection, task_id: str) -> bool:
    """Whether the run that asked for task ``task_id`` (its ``asked_by``) is unfinished."""
    row = db.execute("SELECT payload FROM tasks WHERE id = ?", (task_id,)).fetchone()
    asker = json.loads(row[0]).get("asked_by") if row else None
    if not asker:
        return False
    return (
        db.execute("SELECT 1 FROM runs WHERE id = ? AND state = 'running'", (asker,)).fetchone()
        is not None
    )


def _bound_run(db: Connection, run_id: str) -> None:
    """:func:`companyd.runs._transcript.bound_run`, imported when a run first ends: a start
    that withdraws tasks but ends no run does not load the transcript code (issue 31).
    """
    from companyd.runs._transcript import bound_run

    bound_run(db, run_id)


class Journal:
    """The run journal of one state directory (one instance per daemon).

    Args:
        path: the SQLite file (created if missing) on ``sqlite``; unused on ``postgres``.
        alarm: the daemon's disk alarm: a write the state disk refuses reports ``failed``
            ("run journal"), the next write that succeeds with no paid step still held
            reports ``recovered``. None (the CLI): nothing is reported.
        backend: where the journal lives: ``path`` (the default) or the ``runs`` tables of
            the company's PostgreSQL schema, shared by every daemon of the company.
        readonly: a reader (the CLI on PostgreSQL): no migration, no schema created.
        worker: False for a reader in a thread with no event loop (the CLI): no worker
            thread; only the synchronous calls (``run_sync``).
    """

    def __init__(
        self,
        path: Path,
        *,
        alarm: DiskAlarm | None = None,
        backend: Backend = SQLITE,
        readonly: bool = False,
        worker: bool = True,
    ) -> None:
        self.path = path
        self.backend = backend
        self._db = open_database(
            backend,
            path=path,
            store="runs",
            migrations=STEPS,
            what="run journal",
            readonly=readonly,
            thread_name="journal",
            worker=worker,
        )
        # The daemon's disk alarm (None: a CLI reader): the journal reports its own disk
        # failures ("run journal") and its recovery, when a write succeeds with nothing held.
        self._alarm = alarm
        # Paid steps the state disk refused (journal thread only): written, in order, before
        # the next journal work once it takes writes again, and at close.
        self._held: list[Callable[[Connection], Any]] = []

    # -- plumbing -------------------------------------------------------------------------

    async def _run(self, fn: Callable[[Connection], T]) -> T:
        wrote = False

        def call(db: Connection) -> T:
            nonlocal wrote
            # SQLite counts changes; a PostgreSQL journal never reports a disk failure
            # (is_disk_failure knows only the disk's and SQLite's), so needs no recovery
            before = getattr(db, "total_changes", 0)
            result = self._call(fn, db)
            wrote = getattr(db, "total_changes", 0) != before and not self._held
            return result

        try:
            result = await self._db.run(call)
        except Exception as exc:
            self._disk_failed(exc)
            raise
        if wrote and self._alarm is not None:
            self._alarm.recovered("run journal")
        return result

    def _disk_failed(self, exc: BaseException) -> None:
        if self._alarm is not None and is_disk_failure(exc):
            self._alarm.failed("run journal", self._db.path or self.path, exc)

    def _call(self, fn: Callable[[Connection], T], db: Connection) -> T:
        self._write_held(db)
        return fn(db)

    def _write_held(self, db: Connection) -> None:
        while self._held:
            try:
                self._held[0](db)
            except store_errors():
                return  # still refused: kept for the next try; the caller's work goes on
            self._held.pop(0)
            if not self._held:
                log.warning(
                    "the run journal %s takes writes again; held steps written",
                    self._db.path or self.path,
                )

    @property
    def held(self) -> int:
        """Paid steps held in memory because the state disk (or the PostgreSQL server)
        refused them.
        """
        return len(self._held)

    def run_sync(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` on the journal thread and wait (for CLI use outside an event loop)."""
        return self._db.run_sync(fn)

    def exists(self) -> bool:
        """Whether the journal was ever created — its file, or its tables in the schema — so
        a reader can tell "no runs yet" without creating it (waits: the CLI's path).
        """
        if self.backend.kind == "sqlite":
            return self.path.exists()
        from companyd.storage import StoreAbsent  # PostgreSQL only: its driver is loaded

        try:
            return bool(self.run_sync(lambda db: db.execute(_PG_EXISTS).fetchone()[0]))
        except StoreAbsent:  # a read-only open: the schema has no journal yet
            return False
        except store_errors() as exc:
            if getattr(exc, "sqlstate", None) == _UNDEFINED_TABLE:  # no store in the schema
                return False
            raise

    def close_sync(self) -> None:
        """:meth:`close` from a thread with no event loop (the CLI); nothing is held there."""
        self._db.close_sync()

    async def open(self) -> None:
        """Create the database and schema (idempotent)."""
        try:
            await self._db.open()
        except Exception as exc:
            self._disk_failed(exc)
            raise

    async def close(self) -> None:
        """Write the paid steps still held (if the disk takes them now), then close."""
        if self._held and not self._db.closed:
            # _call writes what is held first; still refused: the run resumes from its last
            # journaled step
            with contextlib.suppress(*store_errors()):
                await self._run(lambda db: None)
        await self._db.close()

    # -- tasks ----------------------------------------------------------------------------

    async def add_task(self, task: Task, now: float) -> None:
        """Record a task as queued (idempotent: an existing task is left as it is)."""
        payload = json.dumps(task.to_dict())

        def add(db: Connection) -> None:
            db.execute(
                "INSERT INTO tasks (id, agent, payload, state, created, updated) "
                "VALUES (?, ?, ?, 'queued', ?, ?) ON CONFLICT DO NOTHING",
                (task.id, task.agent, payload, now, now),
            )

        await self._run(add)

    async def set_task_state(self, task_id: str, state: str, now: float) -> None:
        """Set task ``task_id``'s state (a :class:`TaskState` value) as of ``now``; nothing if
        there is no such task.
        """
        await self._run(
            lambda db: db.execute(
                "UPDATE tasks SET state = ?, updated = ? WHERE id = ?", (state, now, task_id)
            )
        )

    async def record_crash(self, task_id: str, error: str, now: float) -> int:
        """Count one crash of the agent while it ran ``task_id``; returns the new count."""

        def rec(db: Connection) -> int:
            row = db.execute("SELECT errors FROM tasks WHERE id = ?", (task_id,)).fetchone()
            errors = json.loads(row[0]) if row else []
            errors.append(error)
            db.execute(
                "UPDATE tasks SET crashes = crashes + 1, errors = ?, updated = ? WHERE id = ?",
                (json.dumps(errors), now, task_id),
            )
            got = db.execute("SELECT crashes FROM tasks WHERE id = ?", (task_id,)).fetchone()
            return int(got[0]) if got else 0

        return await self._run(rec)

    async def queued_tasks(self, agent: str) -> list[Task]:
        """Tasks of ``agent`` accepted but not started, oldest first."""

        def q(db: Connection) -> list[Task]:
            rows = db.execute(
                "SELECT payload FROM tasks WHERE agent = ? AND state = 'queued' "
                "ORDER BY created, rowid",
                (agent,),
            ).fetchall()
            return [Task.from_dict(json.loads(r[0])) for r in rows]

        return await self._run(q)

    async def open_tasks(self) -> set[str]:
        """Ids of tasks still queued or running: what a restart resumes, and whose outcome
        a caller (the scheduler, the pager for a founder's reply) may come back for.
        """

        def q(db: Connection) -> set[str]:
            rows = db.execute("SELECT id FROM tasks WHERE state IN ('queued', 'running')")
            return {r[0] for r in rows.fetchall()}

        return await self._run(q)

    async def last_outcome(self, task_id: str) -> RunOutcome | None:
        """How the latest run of ``task_id`` that ended ended, or None (no run ended)."""

        def q(db: Connection) -> RunOutcome | None:
            row = db.execute(
                "SELECT id, agent, state, reason, answer, started, ended, cost, steps, models, "
                "offline FROM runs WHERE task_id = ? AND state != 'running' "
                "ORDER BY started DESC, rowid DESC LIMIT 1",
                (task_id,),
            ).fetchone()
            if row is None:
                return None
            run, agent, status, reason, answer, started, ended, cost, steps, models, off = row
            return RunOutcome(
                task_id=task_id, run_id=run, agent=agent, status=RunStatus(status),
                reason=reason, answer=answer, started=float(started),
                ended=float(ended if ended is not None else started), cost_usd=float(cost),
                steps=int(steps), models=tuple(json.loads(models)), offline=bool(off),
            )  # fmt: skip

        return await self._run(q)

    async def get_task(self, task_id: str) -> tuple[Task, str, int, list[str]] | None:
        """``(task, state, crashes, errors)`` or None."""

        def g(db: Connection) -> tuple[Task, str, int, list[str]] | None:
            row = db.execute(
                "SELECT payload, state, crashes, errors FROM tasks WHERE id = ?", (task_id,)
            ).fetchone()
            if row is None:
                return None
            return Task.from_dict(json.loads(row[0])), row[1], int(row[2]), json.loads(row[3])

        return await self._run(g)

    async def release_task(self, task_id: str, now: float) -> None:
        """Clear a quarantined task's crash count and queue it again (``companyd retry``)."""
        await self._run(
            lambda db: db.execute(
                "UPDATE tasks SET state = 'queued', crashes = 0, updated = ? WHERE id = ?",
                (now, task_id),
            )
        )

    def list_tasks(self, db: Connection, states: Sequence[str]) -> list[TaskRow]:
        """Tasks in ``states``, newest first (runs on the journal thread; see run_sync)."""
        marks = ",".join("?" for _ in states)
        rows = db.execute(
            f"SELECT payload, state, crashes, errors, updated FROM tasks "
            f"WHERE state IN ({marks}) ORDER BY updated DESC LIMIT 200",
            tuple(states),
        ).fetchall()
        out: list[TaskRow] = []
        for payload, state, crashes, errors, updated in rows:
            t: JournaledTask = json.loads(payload)
            out.append(
                {
                    **t,
                    "state": state,
                    "crashes": crashes,
                    "errors": json.loads(errors),
                    "updated": updated,
                }
            )
        return out

    async def tasks(self, states: Sequence[str]) -> list[TaskRow]:
        """Tasks in ``states``, newest first (at most 200): each task's fields with its state,
        crash count, errors and last update.
        """
        return await self._run(lambda db: self.list_tasks(db, states))

    # -- runs -----------------------------------------------------------------------------

    async def start_run(self, task: Task, run_id: str, attempt: int, started: float) -> None:
        """Journal the start of attempt ``attempt`` of ``task`` as run ``run_id``, and mark the
        task running, in one transaction.
        """

        def start(db: Connection) -> None:
            with transaction(db, immediate=False):
                db.execute(
                    "INSERT INTO runs (id, task_id, agent, routine, attempt, state, started, "
                    "reply_to, asked_by, asked_in) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                    (
                        run_id,
                        task.id,
                        task.agent,
                        task.routine,
                        attempt,
                        started,
                        task.reply_to,
                        task.asked_by,
                        task.asked_in,
                    ),
                )
                db.execute(
                    "UPDATE tasks SET state = 'running', updated = ? WHERE id = ?",
                    (started, task.id),
                )

        await self._run(start)

    async def append_step(
        self,
        run_id: str,
        seq: int,
        kind: str,
        payload: StepPayload,
        ts: float,
        key: str | None = None,
        *,
        paid: bool = False,
    ) -> None:
        """Journal one completed step; returns once it is committed.

        ``paid``: the step records a model call already paid for. If the state disk refuses
        it (on PostgreSQL: the server or the connection to it fails), it is still raised,
        but the step is also held in memory and written before the journal's next work once
        it takes writes again (and at close), so a resumed run replays the call instead of
        paying for it again.
        """
        row = (run_id, seq, kind, key, json.dumps(payload, ensure_ascii=False), ts)

        def insert(db: Connection) -> None:
            db.execute(_INSERT_STEP, row)

        def insert_held(db: Connection) -> None:
            # a connection lost after the server committed it: the step is there already
            db.execute(_INSERT_STEP + " ON CONFLICT DO NOTHING", row)

        def insert_or_hold(db: Connection) -> None:
            try:
                insert(db)
            except store_errors() as exc:
                if is_disk_failure(exc) or connection_lost(exc):
                    self._held.append(insert_held)
                raise

        await self._run(insert_or_hold if paid else insert)

    async def record_delivery(self, run_id: str, entry: Mapping[str, Any], ts: float) -> bool:
        """Add one delivery of a finished run's result to its record (a ``delivery`` step
        after its last one: ``runs show`` lists them under "delivered"). False when the
        journal has no such run (pruned meanwhile): nothing is written then.
        """
        payload = json.dumps(dict(entry), ensure_ascii=False, default=str)

        def add(db: Connection) -> bool:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                return False
            (seq,) = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM steps WHERE run_id = ?", (run_id,)
            ).fetchone()
            db.execute(_INSERT_STEP, (run_id, int(seq), "delivery", None, payload, ts))
            return True

        return await self._run(add)

    async def update_run_totals(
        self, run_id: str, *, cost: str, steps: int, models: Sequence[str], offline: bool
    ) -> None:
        """Record a run's running totals so far: cost (a decimal string, USD), steps, the models
        used, whether it ran offline.
        """
        await self._run(
            lambda db: db.execute(
                "UPDATE runs SET cost = ?, steps = ?, models = ?, offline = ? WHERE id = ?",
                (cost, steps, json.dumps(list(models)), int(offline), run_id),
            )
        )

    async def finish_run(self, outcome: RunOutcome, task_state: str) -> None:
        """Record how a run ended and move its task to ``task_state``; the run's steps are
        bounded in size in the same transaction (nothing resumes a finished run).
        """

        def fin(db: Connection) -> None:
            with transaction(db, immediate=False):
                db.execute(
                    "UPDATE runs SET state = ?, reason = ?, answer = ?, ended = ?, cost = ?, "
                    "steps = ?, models = ?, offline = ? WHERE id = ?",
                    (
                        str(outcome.status),
                        outcome.reason,
                        outcome.answer,
                        outcome.ended,
                        repr(outcome.cost_usd),
                        outcome.steps,
                        json.dumps(list(outcome.models)),
                        int(outcome.offline),
                        outcome.run_id,
                    ),
                )
                db.execute(
                    "UPDATE tasks SET state = ?, updated = ? WHERE id = ?",
                    (task_state, outcome.ended, outcome.task_id),
                )
                _bound_run(db, outcome.run_id)

        await self._run(fin)

    async def unfinished_runs(self, agent: str) -> list[JournaledRun]:
        """Runs of ``agent`` that started and never finished, with their steps."""

        def q(db: Connection) -> list[JournaledRun]:
            rows = db.execute(
                "SELECT r.id, r.attempt, r.started, t.payload, t.crashes, t.errors "
                "FROM runs r JOIN tasks t ON t.id = r.task_id "
                "WHERE r.agent = ? AND r.state = 'running' ORDER BY r.started",
                (agent,),
            ).fetchall()
            out = []
            for run_id, attempt, started, payload, crashes, errors in rows:
                steps = [
                    Step(seq=s[0], kind=s[1], key=s[2], payload=json.loads(s[3]), ts=s[4])
                    for s in db.execute(
                        "SELECT seq, kind, key, payload, ts FROM steps WHERE run_id = ? "
                        "ORDER BY seq",
                        (run_id,),
                    )
                ]
                out.append(
                    JournaledRun(
                        task=Task.from_dict(json.loads(payload)),
                        run_id=run_id,
                        attempt=int(attempt),
                        started=float(started),
                        crashes=int(crashes),
                        errors=json.loads(errors),
                        steps=steps,
                    )
                )
            return out

        return await self._run(q)

    async def steps(self, run_id: str) -> list[Step]:
        """The journaled steps of ``run_id``, in order (the run's own record: what its
        final answer is verified against, companyd.agents._verification).
        """

        def q(db: Connection) -> list[Step]:
            return [
                Step(seq=s[0], kind=s[1], key=s[2], payload=json.loads(s[3]), ts=s[4])
                for s in db.execute(
                    "SELECT seq, kind, key, payload, ts FROM steps WHERE run_id = ? ORDER BY seq",
                    (run_id,),
                )
            ]

        return await self._run(q)

    async def attempts(self, task_id: str) -> int:
        """How many runs ``task_id`` has had."""
        return await self._run(
            lambda db: int(
                db.execute("SELECT COUNT(*) FROM runs WHERE task_id = ?", (task_id,)).fetchone()[0]
            )
        )

    def list_runs(
        self,
        db: Connection,
        agent: str | None = None,
        status: str | None = None,
        limit: int = 20,
        *,
        routine: str | None = None,
        since: float | None = None,
        finished: bool = False,
    ) -> list[RunRow]:
        """Recent runs, newest first (runs on the journal thread; see run_sync): of
        ``agent``, with outcome ``status``, fired by ``routine``, started at or after
        ``since``, only ``finished`` ones.
        """
        sql = (
            "SELECT id, task_id, agent, routine, attempt, state, reason, answer, started, "
            "ended, cost, steps, models, offline, reply_to, asked_by FROM runs"
        )
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("agent", agent), ("state", status), ("routine", routine)):
            if value:
                where.append(f"{column} = ?")
                args.append(value)
        if since is not None:
            where.append("started >= ?")
            args.append(since)
        if finished:
            where.append("state != 'running'")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started DESC LIMIT ?"
        args.append(limit)
        out: list[RunRow] = []
        for row in db.execute(sql, args):
            rid, task_id, agent_, routine_, attempt, state, reason, answer = row[:8]
            started, ended, cost, steps, models, offline, reply_to, asked_by = row[8:]
            out.append(
                {
                    "run_id": rid,
                    "task_id": task_id,
                    "agent": agent_,
                    "routine": routine_,
                    "attempt": attempt,
                    "status": state,
                    "reason": reason,
                    "answer": answer,
                    "started": started,
                    "ended": ended,
                    "cost_usd": float(cost),
                    "steps": steps,
                    "models": json.loads(models),
                    "offline": bool(offline),
                    "reply_to": reply_to,
                    "asked_by": asked_by,
                }
            )
        return out

    async def runs(
        self,
        agent: str | None = None,
        status: str | None = None,
        limit: int = 20,
        *,
        routine: str | None = None,
        since: float | None = None,
        finished: bool = False,
    ) -> list[RunRow]:
        """Recent runs, newest first, filtered as :meth:`list_runs` says (at most ``limit``)."""
        return await self._run(
            lambda db: self.list_runs(
                db, agent, status, limit, routine=routine, since=since, finished=finished
            )
        )

    async def asking_chain(self, run_id: str, depth: int = 32) -> list[tuple[str, str, str | None]]:
        """``run_id`` and the runs that asked for it, in turn (each run's ``asked_by``: a
        consultation, delegation or review), as ``(run id, agent, routine)``: ``run_id``
        first, the run that began the chain (one no run asked for, e.g. a routine's) last;
        at most ``depth`` runs (a chain is as deep as ``max_consult_depth``). Empty when the
        journal has no run ``run_id``.
        """

        def walk(db: Connection) -> list[tuple[str, str, str | None]]:
            chain: list[tuple[str, str, str | None]] = []
            rid: str | None = run_id
            while rid is not None and len(chain) < depth:
                row = db.execute(
                    "SELECT agent, routine, asked_by FROM runs WHERE id = ?", (rid,)
                ).fetchone()
                if row is None or any(r == rid for r, _, _ in chain):
                    break
                chain.append((rid, row[0], row[1]))
                rid = row[2]
            return chain

        return await self._run(walk)

    async def task_of_run(self, run_id: str) -> str | None:
        """The id of run ``run_id``'s task, or None when the journal has no such run."""

        def q(db: Connection) -> str | None:
            row = db.execute("SELECT task_id FROM runs WHERE id = ?", (run_id,)).fetchone()
            return None if row is None else str(row[0])

        return await self._run(q)

    async def open_run(self, task_id: str) -> str | None:
        """The id of task ``task_id``'s run still under way (journaled as running), or None
        when it has none (not started yet, ended, or no such task).
        """

        def q(db: Connection) -> str | None:
            row = db.execute(
                "SELECT id FROM runs WHERE task_id = ? AND state = 'running' "
                "ORDER BY started DESC LIMIT 1",
                (task_id,),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._run(q)

    async def deliveries(self, run_ids: Sequence[str]) -> dict[str, list[ResultDelivery]]:
        """The recorded deliveries of each of ``run_ids``'s results, oldest first (as
        ``runs show`` lists them): the durable record, whatever restarts came between. A
        run with none (or not in the journal) is absent.
        """
        from companyd.runs._transcript import delivery_step  # here: `runs show` needs it

        ids = list(dict.fromkeys(run_ids))

        def read(db: Connection) -> dict[str, list[ResultDelivery]]:
            out: dict[str, list[ResultDelivery]] = {}
            for i in range(0, len(ids), 500):  # within every backend's parameter limit
                chunk = ids[i : i + 500]
                marks = ", ".join("?" * len(chunk))
                for rid, payload, ts in db.execute(
                    "SELECT run_id, payload, ts FROM steps WHERE kind = 'delivery' "
                    f"AND run_id IN ({marks}) ORDER BY run_id, seq",
                    tuple(chunk),
                ):
                    out.setdefault(rid, []).append(delivery_step(json.loads(payload), float(ts)))
            return out

        return await self._run(read) if ids else {}

    def show_run(self, db: Connection, run_id: str) -> dict[str, Any] | None:
        """The whole transcript of ``run_id``, or None (runs on the journal thread; see
        run_sync and :func:`companyd.runs._transcript.read_transcript`).
        """
        from companyd.runs._transcript import read_transcript  # here: `runs show` needs it

        return read_transcript(db, run_id)

    async def transcript(self, run_id: str) -> dict[str, Any] | None:
        """The whole transcript of ``run_id`` (see :meth:`show_run`), or None."""
        return await self._run(lambda db: self.show_run(db, run_id))

    async def prune(self, before: float, batch: int = 2_000) -> int:
        """Delete the runs that ended before ``before`` with their steps, and the done tasks
        left without runs that were last touched before it; the number of runs deleted. An
        unfinished run (no end yet) is never deleted. In transactions of ``batch`` runs, so
        other journal work interleaves.
        """

        def one_batch(db: Connection) -> int:
            with transaction(db, immediate=False):
                ids = [
                    r[0]
                    for r in db.execute(
                        "SELECT id FROM runs WHERE ended < ? AND state != 'running' LIMIT ?",
                        (before, batch),
                    )
                ]
                for run_id in ids:
                    db.execute("DELETE FROM steps WHERE run_id = ?", (run_id,))
                    db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
                if len(ids) < batch:
                    db.execute(
                        "DELETE FROM tasks WHERE state = 'done' AND updated < ? AND NOT EXISTS "
                        "(SELECT 1 FROM runs WHERE runs.task_id = tasks.id)",
                        (before,),
                    )
            return len(ids)

        deleted = 0
        while True:
            n = await self._run(one_batch)
            deleted += n
            if n < batch:
                return deleted

    async def abandon_running(self, agent: str, reason: str, now: float) -> None:
        """Mark every still-running run of ``agent`` cancelled (its task stays as it is);
        their steps are bounded as a finished run's are.
        """

        def abandon(db: Connection) -> None:
            with transaction(db, immediate=False):
                ids = db.execute(
                    "SELECT id FROM runs WHERE agent = ? AND state = 'running'", (agent,)
                ).fetchall()
                db.execute(
                    "UPDATE runs SET state = ?, reason = ?, ended = ? "
                    "WHERE agent = ? AND state = 'running'",
                    (str(RunStatus.CANCELLED), reason, now, agent),
                )
                for (run_id,) in ids:
                    _bound_run(db, run_id)

        await self._run(abandon)

    async def withdraw_task(self, task_id: str, reason: str, now: float) -> None:
        """Nobody waits for ``task_id`` any more: a queued or running task becomes done and
        a run of it left unfinished (its agent stopped) ends ``cancelled`` with ``reason``,
        so a restart neither starts nor resumes it. A finished or quarantined task is left
        as it is.
        """
        await self._withdraw("SELECT ?", (task_id,), reason, now)

    async def withdraw_orphans(
        self, prefixes: Sequence[str], reason: str, now: float, *, unless_asker_runs: bool = False
    ) -> int:
        """Withdraw every queued or running task whose id starts with one of ``prefixes``
        (as :meth:`withdraw_task` does); the number withdrawn. For the start of a daemon:
        a consultation or review whose asker was waiting in the previous process has no
        one waiting for it any more. ``unless_asker_runs``: keep a task whose asking run
        (its ``asked_by``) is still unfinished — that run resumes and waits for it again
        (:meth:`asked_task`).
        """
        # task ids are made lower case by companyd: LIKE matches them alike on SQLite (which
        # ignores ASCII case) and PostgreSQL (which does not)
        like = " OR ".join("id LIKE ?" for _ in prefixes)
        return await self._withdraw(
            f"SELECT id FROM tasks WHERE state IN ('queued', 'running') AND ({like})",
            tuple(f"{p}-%" for p in prefixes),
            reason,
            now,
            keep=_asker_runs if unless_asker_runs else None,
        )

    async def run_states(self, run_ids: Collection[str]) -> dict[str, tuple[str, str | None]]:
        """The state (``running``, ``ok``, ``cancelled``…) and reason of each run of
        ``run_ids`` the journal knows.
        """
        ids = tuple(run_ids)
        if not ids:
            return {}
        marks = ",".join("?" for _ in ids)
        rows = await self._run(
            lambda db: db.execute(
                f"SELECT id, state, reason FROM runs WHERE id IN ({marks})", ids
            ).fetchall()
        )
        return {r[0]: (r[1], r[2]) for r in rows}

    async def asked_task(self, run_id: str, tool_use_id: str) -> Task | None:
        """The task the tool call ``tool_use_id`` of run ``run_id`` asked for (a
        consultation or delegation: its ``asked_by`` and ``asked_in``) — started (ended or
        not) or still queued — or None. For a run resumed after a restart, to wait for the
        colleague again (or take the outcome it reached meanwhile) instead of calling the
        tool twice.
        """

        def q(db: Connection) -> Task | None:
            started = db.execute(
                "SELECT t.payload FROM runs r JOIN tasks t ON t.id = r.task_id "
                "WHERE r.asked_by = ? AND r.asked_in = ? ORDER BY r.started DESC LIMIT 1",
                (run_id, tool_use_id),
            ).fetchone()
            if started is not None:
                return Task.from_dict(json.loads(started[0]))
            rows = db.execute(
                "SELECT payload FROM tasks WHERE state IN ('queued', 'running') "
                "ORDER BY created, rowid"
            ).fetchall()
            for (payload,) in rows:
                task = Task.from_dict(json.loads(payload))
                if task.asked_by == run_id and task.asked_in == tool_use_id:
                    return task
            return None

        return await self._run(q)

    async def withdraw_unassigned(self, agents: Collection[str], reason: str, now: float) -> int:
        """Withdraw every queued or running task of an agent not in ``agents`` (removed from
        company.yaml), and close any run of such an agent left unfinished (as
        :meth:`withdraw_task` does), so none waits forever or comes back if a later edit
        re-adds an agent of that name. The number of tasks withdrawn.
        """
        known = tuple(agents)
        marks = ",".join("?" for _ in known) or "NULL"
        return await self._withdraw(
            f"SELECT id FROM tasks WHERE agent NOT IN ({marks}) AND (state IN ('queued', "
            "'running') OR id IN (SELECT task_id FROM runs WHERE state = 'running'))",
            known,
            reason,
            now,
        )

    async def _withdraw(
        self,
        select_ids: str,
        params: tuple[Any, ...],
        reason: str,
        now: float,
        *,
        keep: Callable[[Connection, str], bool] | None = None,
    ) -> int:
        """In one transaction, for each task id ``select_ids`` yields (but those ``keep``
        says to keep): its unfinished runs end ``cancelled`` with ``reason``, and the task,
        if queued or running, becomes done. The number of tasks withdrawn.
        """

        def withdraw(db: Connection) -> int:
            withdrawn = 0
            with transaction(db, immediate=False):
                for (task_id,) in db.execute(select_ids, params).fetchall():
                    if keep is not None and keep(db, task_id):
                        continue
                    runs = db.execute(
                        "SELECT id FROM runs WHERE task_id = ? AND state = 'running'", (task_id,)
                    ).fetchall()
                    db.execute(
                        "UPDATE runs SET state = ?, reason = ?, ended = ? "
                        "WHERE task_id = ? AND state = 'running'",
                        (str(RunStatus.CANCELLED), f"withdrawn: {reason}", now, task_id),
                    )
                    for (run_id,) in runs:
                        _bound_run(db, run_id)
                    withdrawn += db.execute(
                        "UPDATE tasks SET state = 'done', updated = ? "
                        "WHERE id = ? AND state IN ('queued', 'running')",
                        (now, task_id),
                    ).rowcount
            return withdrawn

        return await self._run(withdraw)

    # -- pauses ---------------------------------------------------------------------------

    async def set_paused(
        self, agent: str, reason: str, budget: bool, now: float, until: float | None = None
    ) -> None:
        """Record that ``agent`` is paused (``budget``: by a spent budget) since ``now`` —
        ``until`` that epoch time, if the pause has an end (a quota wall) — so it stays
        paused across a restart; replaces an earlier pause.
        """
        await self._run(
            lambda db: db.execute(
                "INSERT INTO paused (agent, reason, budget, since, until_ts) VALUES (?,?,?,?,?) "
                "ON CONFLICT(agent) DO UPDATE SET reason = excluded.reason, "
                "budget = excluded.budget, since = excluded.since, "
                "until_ts = excluded.until_ts",
                (agent, reason, int(budget), now, until),
            )
        )

    async def clear_paused(self, agent: str) -> None:
        """Forget ``agent``'s pause (nothing if it was not paused)."""
        await self._run(lambda db: db.execute("DELETE FROM paused WHERE agent = ?", (agent,)))

    async def paused(self) -> dict[str, tuple[str, bool]]:
        """Agent → (reason, paused for budget)."""
        return await self._run(
            lambda db: {
                a: (r, bool(b))
                for a, r, b in db.execute("SELECT agent, reason, budget FROM paused")
            }
        )

    async def paused_until(self) -> dict[str, float]:
        """Agent → the epoch time its pause ends, for the pauses that have an end."""
        return await self._run(
            lambda db: {
                a: float(u)
                for a, u in db.execute(
                    "SELECT agent, until_ts FROM paused WHERE until_ts IS NOT NULL"
                )
            }
        )

    async def turn(self, run_id: str) -> tuple[Task, str, str] | None:
        """``(task, status, answer)`` of run ``run_id`` — what a follow-up in its thread
        shows the agent — or None when the journal has no such run.
        """

        def q(db: Connection) -> tuple[Task, str, str] | None:
            row = db.execute(
                "SELECT t.payload, r.state, r.answer FROM runs r JOIN tasks t ON t.id = r.task_id "
                "WHERE r.id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                return None
            return Task.from_dict(json.loads(row[0])), str(row[1]), str(row[2])

        return await self._run(q)
