#!/usr/bin/env python3
"""A week of chaos: the example company under a real ``companyd run``, everything failing.

The example company (company.yaml at the repository root, adapted for compressed time —
see ``chaos_config``) runs as a real daemon subprocess for a simulated week, with time
compressed (``COMPANYD_TIME_SCALE``: the daemon's clock runs N× faster, so cron routines,
budget periods, coalescing windows and backoffs all happen in minutes). Around it:

* a loopback Messages API stand-in injecting transient errors (529, 500) and timeouts, and
  a slowdown (every answer later than the client's timeout, billed anyway);
* a loopback Telegram Bot API stand-in (the operator's phone);
* a chaos driver that crashes random agents (the ``debug`` control op), kills the daemon
  with SIGKILL at random moments and starts it again (running ``companyd notify-failure``
  as systemd's ``OnFailure=`` would), corrupts random lines of the memory file while the
  daemon is down, sends SIGHUP with a broken company.yaml and then with an added agent,
  makes the Bot API unreachable for a while, and keeps writing to the memory file from a
  second process through the cross-process lock.

At the end every invariant is printed as one line with its figure; the exit code is 0 only
if all hold:

* no acknowledged memory write lost; the file loads (in companyd and, where node is
  available, in the official MCP memory server);
* no LLM call paid twice: every call the stand-in served is a journaled step, except calls
  answered in the instant before a SIGKILL, and calls cancelled or timed out in flight after
  the stand-in answered — each of those only if the ledger holds a forfeit row of its own
  (same agent and model, written within ``FORFEIT_WITHIN_S`` after the request, worth at
  least what was billed: counted at its worst case, docs/spend.md "Timeouts") (reported
  separately);
* company and agent budgets never exceeded, daily and monthly (an intern with a small
  budget must reach its ceiling, so the check has something to hold);
* what the stand-in billed — timed-out calls included: it bills a request it processed even
  when the client gave up, and the API is slower than the client's timeout for a while —
  stays within every cap plus at most one call's worst case, and in all is at most what the
  ledger recorded (unanswered calls at their worst case) plus what SIGKILLs left unsettled;
* every injected fault produced its alert exactly once (crashes coalesced where the
  alerter coalesces them); an agent crash may be missing only if the alert outbox, read
  right after a SIGKILL, lacked it and it came at most ``CRASH_BEFORE_KILL_S`` before that
  kill — the documented window between an event and its outbox write (docs/alerts.md
  "Outbox first"); a crash is never counted twice;
* routine success rate, and every non-success with its reason;
* the daemon ends healthy (everything running; SIGTERM exits 0).

With ``--backend postgres`` the company's stores live in PostgreSQL (``state: {backend:
postgres, schema: …}``, ``COMPANYD_DATABASE_URL``) on a throwaway cluster the bench starts
itself (:class:`companyd.testing.postgres.ThrowawayCluster`). The checks read the same facts
through each store's read-only API on either backend, never a file directly. Where the
backend changes what a fault means, the check says so in its line:

* the memory's truth is the database's change log (``memory_log``, ``memory_base``);
  ``memory.jsonl`` is each daemon's MCP-format copy, rewritten from the database at each
  start and compaction. A corrupted copy is therefore not *repaired* (no "memory file
  repaired" alert, nothing in ``.corrupt``): it is replaced, clean, at the next start; the
  second process writes through the shared log (a ``SharedGraphStore`` on the same schema);
* every store is in the database now (docs/storage.md), so the state disk holds only the
  memory's local copy (and its lock, the daemon's lock and socket): a full disk refuses
  the copy's compaction (retried later) while runs go on being journaled and paid in the
  database. The daemon must stay up with no crash loop and runs must keep being paid
  during the fault; the "state disk full" alert is raised at most once per fault — by a
  store still in a file, if a build has one (the product raises no alert for a refused
  copy: nothing durable is at risk, and the check does not expect one).

Usage::

    python bench/chaos.py                  # the full week (about 4 minutes)
    python bench/chaos.py --short          # two simulated days, fewer faults (CI)
    python bench/chaos.py --runs 3         # three weeks in a row
    python bench/chaos.py --short --backend postgres   # the stores in PostgreSQL
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from companyd.storage import Backend

REPO = Path(__file__).resolve().parents[1]
TOKEN = "987654321:chaos-stand-in-token-abcdefghijklmnopqrst"
CHAT = 4242
SIM_START = datetime(
    2026, 11, 27, tzinfo=UTC
).timestamp()  # a Friday: the week holds a Monday and a 1st


@dataclass
class Plan:
    days: float = 7.0
    scale: float = 2520.0  # a week in four minutes
    seed: int = 1
    crash_every: float = 9.0  # real seconds between injected agent crashes
    kills: int = 3
    outage: float = 8.0  # real seconds the Bot API is unreachable
    fault_rate: float = 0.2
    timeout_rate: float = 0.01
    write_every: float = 0.4
    slowdown: float = 20.0  # real seconds the Messages API answers slower than the timeout
    disk_full: float = 6.0  # real seconds the state disk stays full (0: no such fault)

    @property
    def real_seconds(self) -> float:
        return self.days * 86400 / self.scale


#: The intern's calls may write at most 512 output tokens, so each reserves a worst case
#: (~$0.01) close to what it costs (~$0.007): it spends most of its ceiling every simulated
#: day before a reservation no longer fits, which is what makes "never exceeded" bind.
INTERN_DAILY_USD = 0.08
INTERN_MAX_OUTPUT_TOKENS = 512

SHORT = Plan(days=2.0, scale=2880.0, crash_every=7.0, kills=1, outage=4.0, slowdown=10.0)


# ---------------------------------------------------------------------------------------
# The company, adapted for compressed time


def chaos_config(extra_agent: bool = False, broken: bool = False, schema: str | None = None) -> str:
    """The example company.yaml with the settings compressed time needs.

    At 2,520× a simulated second is 0.4 ms, so limits written in simulated time must leave
    room for real-time work: per-run ``max_seconds`` 12 h (17 real seconds),
    ``heartbeat_seconds`` 6 h, and the heartbeat routine every 30 min instead of 5; model
    calls keep real-time HTTP deadlines (3 s). Quiet hours are off so every alert can be
    counted before the run ends. ``schema``: the stores in that PostgreSQL schema (the URL in
    ``$COMPANYD_DATABASE_URL``); None: SQLite files in the state directory (the default).
    """
    doc = yaml.safe_load((REPO / "company.yaml").read_text(encoding="utf-8"))
    doc["defaults"]["limits"]["max_seconds"] = "12h"
    doc["defaults"]["heartbeat_seconds"] = "6h"
    # A real run lasts 0.1–0.5 s, i.e. 4–20 simulated minutes at 2,520×: a 5-minute
    # heartbeat would mostly skip for overlap, which says nothing about the daemon.
    doc["routines"]["heartbeat"]["trigger"] = {"every": "30m"}
    for agent in doc["agents"].values():
        if "limits" in agent:
            agent["limits"]["max_seconds"] = "12h"
    # The example's budgets are never approached here (the busiest day spends well under
    # $1 of the $10 company ceiling), so "never exceeded" would hold even with no budget
    # enforcement at all. An intern with a small daily budget and an every-2-hours chore
    # runs into its ceiling every simulated day — across SIGKILLs, restarts and day
    # rollovers — without starving the rest of the company (a tight company ceiling would
    # refuse the daily post and the month close too).
    doc["agents"]["intern"] = {
        "title": "Operations Intern",
        "reports_to": "coo",
        "department": "operations",
        "instructions": "You tidy the company memory: note anything that looks out of date.",
        "budget": {"daily_usd": INTERN_DAILY_USD, "monthly_usd": 40},
        "model": {
            "primary": "claude-sonnet-5-5",
            "fallbacks": ["claude-haiku-5-5"],
            "max_output_tokens": INTERN_MAX_OUTPUT_TOKENS,
        },
    }
    doc["routines"]["intern-chores"] = {
        "assignee": "intern",
        "description": "Look through the company memory and note one thing that is out of date.",
        "trigger": {"every": "2h"},
        "catch_up": "skip",
    }
    doc["anthropic"] = {"api_key_env": "ANTHROPIC_API_KEY", "timeout_seconds": 3, "max_retries": 2}
    doc["alerts"] = {
        "min_severity": "warning",
        "telegram": {
            "bot_token_env": "TELEGRAM_BOT_TOKEN",
            "chat_ids_env": "TELEGRAM_CHAT_ID",
            "api_url": "${BOT_API}",
        },
    }
    if extra_agent:
        doc["agents"]["analyst"] = {
            "title": "Financial Analyst",
            "reports_to": "cfo",
            "department": "finance",
            "instructions": "You analyse revenue and churn for the CFO.",
        }
    if broken:
        doc["company"]["budget"]["daily_usd"] = "fifty"
    if schema is not None:
        doc["state"] = {"backend": "postgres", "schema": schema}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------------------------------
# The model: agents record notes in memory, then answer


_WHO = re.compile(r"You are .*? \(([a-z][a-z0-9_-]*)\) at ")


class ChaosModel:
    """Per request: if memory tools are offered and no tool has answered yet, record a note
    with ``create_entities``; otherwise end the turn. A small share of requests stall past
    the client's deadline (a timeout). Usage is about one token per four bytes.
    """

    def __init__(self, seed: int, timeout_rate: float, stall_for: float) -> None:
        self.rng = random.Random(seed)
        self.timeout_rate = timeout_rate
        self.stall_for = stall_for
        self.lock = threading.Lock()
        self.n = 0
        self.timeouts = 0

    def __call__(self, request: Any) -> Any:
        from companyd.testing.messages_api import Reply, Usage, stall

        body = request.body if isinstance(request.body, dict) else {}
        system = body.get("system")
        text = (
            system
            if isinstance(system, str)
            else " ".join(str(b.get("text", "")) for b in system or [] if isinstance(b, dict))
        )
        m = _WHO.search(text)
        agent = m.group(1) if m else "agent"
        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        messages = body.get("messages") or []
        answered = any(
            isinstance(msg.get("content"), list)
            and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in msg["content"])
            for msg in messages
            if isinstance(msg, dict)
        )
        with self.lock:
            self.n += 1
            n = self.n
            timeout = self.rng.random() < self.timeout_rate
        size = len(json.dumps(body).encode())
        first = messages[0].get("content") if messages and isinstance(messages[0], dict) else ""
        review = isinstance(first, str) and "APPROVE or REJECT" in first
        if review:
            content: tuple[dict[str, Any], ...] = (
                {"type": "text", "text": "APPROVE — the result answers the task."},
            )
            stop = "end_turn"
        elif not answered and "create_entities" in tools:
            content = (
                {
                    "type": "tool_use",
                    "id": f"toolu_chaos_{n:07d}",
                    "name": "create_entities",
                    "input": {
                        "entities": [
                            {
                                "name": f"{agent} note {n}",
                                "entityType": "note",
                                "observations": [f"written by {agent} in call {n}"],
                            }
                        ]
                    },
                },
            )
            stop = "tool_use"
        else:
            content = ({"type": "text", "text": f"{agent}: done (call {n})."},)
            stop = "end_turn"
        reply = Reply(
            content=content,
            stop_reason=stop,
            usage=Usage(input_tokens=max(1, size // 4), output_tokens=60),
        )
        if timeout:
            with self.lock:
                self.timeouts += 1
            return stall(self.stall_for, then=reply)
        return reply


# ---------------------------------------------------------------------------------------
# The driver


@dataclass
class Tally:
    crashes: Counter[str] = field(default_factory=Counter)
    #: when each agent's injected crashes were answered (real seconds since the start)
    crash_times: dict[str, list[float]] = field(default_factory=dict)
    kills: list[float] = field(default_factory=list)
    #: each SIGKILL and the crashes its alert outbox held right after it
    kill_outboxes: list[KillSnapshot] = field(default_factory=list)
    notified: int = 0
    corruptions: int = 0
    corrupt_modes: Counter[str] = field(default_factory=Counter)
    rejected: int = 0
    added_agent: bool = False
    outage_s: float = 0.0
    slowdowns: int = 0
    unsettled_usd: float = 0.0
    acked: list[str] = field(default_factory=list)
    incarnations: int = 0
    #: postgres: corruptions of the memory's local copy found replaced, clean, at the
    #: next start (the copy is rewritten from the database)
    copies_rewritten: int = 0


class Chaos:
    def __init__(
        self,
        plan: Plan,
        work: Path,
        official: str | None,
        verbose: bool,
        store: Backend | None = None,
    ) -> None:
        from companyd.storage import SQLITE

        self.plan = plan
        #: where the company's stores live: SQLite files in the state directory (default),
        #: or a schema of the bench's own PostgreSQL cluster
        self.store = store or SQLITE
        self.postgres = self.store.kind == "postgres"
        self.work = work
        self.state = work / "state"
        self.config = work / "company.yaml"
        self.official = official
        self.verbose = verbose
        self.rng = random.Random(plan.seed)
        self.tally = Tally()
        self.proc: asyncio.subprocess.Process | None = None
        self.writes_on = asyncio.Event()
        self.write_lock = asyncio.Lock()
        self.real_anchor = time.time()
        self.disk: Path | None = None  # the small tmpfs holding the state (full-disk fault)
        self.disk_faults: list[dict[str, Any]] = []
        self.disk_task: asyncio.Task[None] | None = None

    def say(self, msg: str) -> None:
        if self.verbose:
            print(f"  [{time.time() - self.real_anchor:6.1f}s] {msg}", flush=True)

    def sim_now(self) -> float:
        return self.sim_at(time.time())

    def sim_at(self, real: float) -> float:
        """The daemon's (simulated) time at the real time ``real``."""
        return SIM_START + (real - self.real_anchor) * self.plan.scale

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "ANTHROPIC_API_KEY": "chaos-key",
                "ANTHROPIC_BASE_URL": self.api.base_url,
                "TELEGRAM_BOT_TOKEN": TOKEN,
                "TELEGRAM_CHAT_ID": str(CHAT),
                "COMPANYD_DEBUG": "1",
                "COMPANYD_TIME_SCALE": str(self.plan.scale),
                "COMPANYD_TIME_ANCHOR": f"{self.real_anchor}:{SIM_START}",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.postgres:
            assert self.store.dsn is not None
            env["COMPANYD_DATABASE_URL"] = self.store.dsn
        return env

    def write_config(self, **kw: bool) -> None:
        schema = self.store.schema if self.postgres else None
        text = chaos_config(**kw, schema=schema).replace("${BOT_API}", self.bot.url)
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.config)

    # -- the daemon ---------------------------------------------------------------------

    async def start_daemon(self) -> None:
        self.tally.incarnations += 1
        # a log file per incarnation (opening it is instant: no thread needed)
        log = open(self.work / f"daemon-{self.tally.incarnations}.log", "wb")  # noqa: SIM115, ASYNC230
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "companyd",
            "run",
            "--config",
            str(self.config),
            "--state-dir",
            str(self.state),
            env=self.env(),
            stdout=log,
            stderr=log,
        )
        log.close()
        await self.wait_ready()
        self.say(f"daemon #{self.tally.incarnations} ready (pid {self.proc.pid})")

    async def wait_ready(self, timeout: float = 60.0) -> None:
        from companyd.daemon._control_client import ControlClient

        sock = self.state / "companyd.sock"
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode} while starting")
            try:
                await asyncio.to_thread(ControlClient(sock, timeout=5).ping)
                # on PostgreSQL a daemon answers as a standby until it has won the
                # leadership (docs/ha.md): only the leader runs the company
                if not self.postgres or await self._leads():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon not ready (leading) within {timeout:g} s")
            await asyncio.sleep(0.1)

    async def _leads(self) -> bool:
        status = await self.call("status")
        return bool(status["daemon"].get("role") != "standby")

    async def call(self, op: str, **args: Any) -> Any:
        from companyd.daemon._control_client import ControlClient

        client = ControlClient(self.state / "companyd.sock", timeout=30)
        return await asyncio.to_thread(client.call, op, **args)

    # -- chaos actions ------------------------------------------------------------------

    async def crash_agent(self) -> None:
        status = await self.call("status")
        agents = sorted(
            (a for a in _agents(status["tree"]) if a["state"] == "running"), key=lambda a: a["id"]
        )
        if not agents:
            return
        victim = self.rng.choice(agents)["id"]
        result = await self.call("debug", action="crash", target=victim)
        if result.get("crashed"):
            self.tally.crashes[victim] += 1
            self.tally.crash_times.setdefault(victim, []).append(time.time() - self.real_anchor)
            self.say(f"crashed {victim}")

    async def kill_and_restart(self) -> None:
        assert self.proc is not None
        self.writes_on.clear()
        async with self.write_lock:  # no memory write in flight from the driver
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()
            self.tally.kills.append(time.time())
            self.say("SIGKILL")
            # what the dead daemon's alert outbox holds: a crash it lacks was lost with it
            outboxed = outbox_crashes(self.state, self.store)
            self.tally.kill_outboxes.append(
                KillSnapshot(at=self.tally.kills[-1] - self.real_anchor, outboxed=outboxed)
            )
            # the reservations of the calls it had in flight (the next start reports them as
            # spend_unsettled): money the provider may have billed that the ledger never will
            pusd = inflight_pusd(self.state, self.store)
            self.tally.unsettled_usd += pusd / 1e12
            # what systemd's OnFailure=companyd-alert@%n.service does
            notify = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "companyd",
                "notify-failure",
                "companyd.service",
                "--config",
                str(self.config),
                env={**self.env(), "MONITOR_SERVICE_RESULT": "signal"},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            if await notify.wait() == 0:
                self.tally.notified += 1
            await asyncio.sleep(self.rng.uniform(0.5, 2.0))  # 20–80 simulated minutes down
            corrupted = self.tally.corruptions
            self.corrupt_memory()
            corrupted = self.tally.corruptions > corrupted
        await self.start_daemon()
        if corrupted and self.postgres:
            await self.local_copy_rewritten()
        self.writes_on.set()

    async def local_copy_rewritten(self, timeout: float = 10.0) -> None:
        """PostgreSQL: the damaged local copy must be replaced, clean, by the daemon's
        start (it rewrites ``memory.jsonl`` from the database); counted when it is.
        """
        from companyd.memory import parse_graph

        path = self.state / "memory.jsonl"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                report = parse_graph(path.read_bytes())[1]
                if not report.dropped_lines and not report.torn_tail:
                    self.tally.copies_rewritten += 1
                    self.say("the memory's local copy was rewritten from the database")
                    return
            await asyncio.sleep(0.2)
        self.say("the memory's local copy is still damaged after the restart")

    def corrupt_memory(self) -> None:
        path = self.state / "memory.jsonl"
        if not path.exists():
            return
        data = path.read_bytes()
        lines = data.split(b"\n")
        candidates = [i for i, line in enumerate(lines) if line.strip()]
        if not candidates:
            return
        mode = self.rng.choice(["flip", "garbage", "torn"])
        if mode == "flip":
            # a damaged byte where the JSON structure needs it: the line no longer parses
            # (a flip that still parses — a changed letter in a name — is undetectable
            # without checksums, and no JSONL reader, ours or the official one, could notice)
            i = self.rng.choice(candidates)
            line = bytearray(lines[i])
            spots = [j for j, b in enumerate(line) if b in b'":,{}[]']
            j = self.rng.choice(spots)
            line[j] = ord("#")
            lines[i] = bytes(line)
            new = b"\n".join(lines)
        elif mode == "garbage":
            i = self.rng.choice(candidates)
            lines.insert(i, b'{"type":"entity","name":"half a line wri')
            new = b"\n".join(lines)
        else:  # a torn last line: a write cut short
            new = data.rstrip(b"\n") + b'\n{"type":"entity","name":"torn'
        if new != data:
            path.write_bytes(new)
            self.tally.corruptions += 1
            self.tally.corrupt_modes[mode] += 1
            self.say(f"corrupted the memory file ({mode})")

    async def reload_broken_then_added(self) -> None:
        assert self.proc is not None
        self.write_config(broken=True)
        self.proc.send_signal(signal.SIGHUP)
        await asyncio.sleep(1.5)
        self.tally.rejected += 1
        self.say("SIGHUP with a broken company.yaml")
        self.write_config(extra_agent=True)
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status = await self.call("status")
            if any(
                a["id"] == "analyst" and a["state"] == "running" for a in _agents(status["tree"])
            ):
                self.tally.added_agent = True
                break
            await asyncio.sleep(0.2)
        self.say(f"SIGHUP with an added agent: analyst running = {self.tally.added_agent}")

    async def api_slowdown(self) -> None:
        """The Messages API answers later than the client's timeout (3 s) for a while; it
        still bills every request it processed (bill_abandoned).
        """
        self.say(f"Messages API slowdown for {self.plan.slowdown:g} s")
        self.tally.slowdowns += 1
        self.api.latency = 4.5
        try:
            await asyncio.sleep(self.plan.slowdown)
        finally:
            self.api.latency = 0.0

    async def telegram_outage(self) -> None:
        await self.bot.go_down("refuse")
        self.say("Bot API down")
        await asyncio.sleep(self.plan.outage)
        await self.bot.go_up()
        self.tally.outage_s = self.plan.outage
        self.say("Bot API back")

    async def memory_writer(self) -> None:
        """A second process's writes through the cross-process lock, acknowledged when
        ``GraphStore.call`` returns (durable). On PostgreSQL the other process writes
        through the shared log (a ``SharedGraphStore`` on the company's schema, serialised
        by the database), acknowledged when its transaction has committed.
        """
        from companyd.memory import GraphStore

        path = self.state / "memory.jsonl"
        store_of = shared_memory_store if self.postgres else None
        n = 0
        while True:
            await self.writes_on.wait()
            async with self.write_lock:
                if not self.writes_on.is_set():
                    continue
                n += 1
                name = f"driver fact {n}"

                def write(name: str = name, n: int = n) -> None:
                    entity = {"name": name, "entityType": "fact", "observations": [f"#{n}"]}
                    opened = GraphStore(path) if store_of is None else store_of(self, path)
                    with opened as store:
                        store.call("create_entities", {"entities": [entity]})

                try:
                    await asyncio.to_thread(write)
                except Exception as exc:  # the full-disk fault: not acknowledged, not owed
                    from companyd._fs import is_disk_failure

                    if not is_disk_failure(exc):
                        raise
                    continue
                self.tally.acked.append(name)
            await asyncio.sleep(self.plan.write_every)

    # -- the run ------------------------------------------------------------------------

    async def run(self) -> list[tuple[bool, str]]:
        from companyd.testing.bot_api import BotApiServer
        from companyd.testing.messages_api import MessagesAPIServer

        plan = self.plan
        self.model = ChaosModel(plan.seed, plan.timeout_rate, stall_for=4.5)
        self.api = MessagesAPIServer(
            responder=self.model,
            fault_rate=plan.fault_rate,
            fault_statuses=(529, 500),
            seed=plan.seed,
            # the provider bills what it processed even when the client gave up: timeouts
            # (the model's stalls and the slowdown) are billed, as the real API does
            bill_abandoned=True,
        )
        self.api.start()
        try:
            async with BotApiServer(token=TOKEN) as bot, state_disk(self):
                self.bot = bot
                self.state.mkdir(parents=True)
                self.write_config()
                await self.start_daemon()
                self.writes_on.set()
                writer = asyncio.create_task(self.memory_writer())
                try:
                    await self.drive()
                finally:
                    writer.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await writer
                return await self.finish()
        finally:
            # never leave a daemon behind, whatever went wrong in the driver
            if self.proc is not None and self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            self.api.stop()

    async def drive(self) -> None:
        plan = self.plan
        end = self.real_anchor + plan.real_seconds
        span = plan.real_seconds
        kills = sorted(self.rng.uniform(0.12, 0.9) * span for _ in range(plan.kills))
        events: list[tuple[float, str]] = [(t, "kill") for t in kills]
        events.append((0.40 * span, "reload"))
        events.append((0.62 * span, "outage"))
        events.append((0.30 * span, "slowdown"))
        if self.disk is not None:
            events.append((full_disk_at(self, kills, span), "full_disk"))
        t = plan.crash_every
        while t < span * 0.95:
            events.append((t, "crash"))
            t += plan.crash_every * self.rng.uniform(0.7, 1.3)
        events.sort()
        # keep kills away from the outage (notify-failure would be lost with Telegram down)
        for when, what in events:
            delay = self.real_anchor + when - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if what == "crash":
                await self.crash_agent()
            elif what == "kill":
                await self.kill_and_restart()
            elif what == "reload":
                await self.reload_broken_then_added()
            elif what == "outage":
                await self.telegram_outage()
            elif what == "slowdown":
                await self.api_slowdown()
            elif what == "full_disk":  # in the background: the other faults keep their times
                self.disk_task = asyncio.create_task(full_disk_fault(self))
        await asyncio.sleep(max(0.0, end - time.time()))
        if self.disk_task is not None:
            await self.disk_task

    async def finish(self) -> list[tuple[bool, str]]:
        self.writes_on.clear()
        async with self.write_lock:
            pass
        # let the alert outbox drain and the last runs finish (bounded)
        deadline = time.monotonic() + 30
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = await self.call("status")
            if not status.get("runs_in_flight") and not (status.get("alerts") or {}).get("queued"):
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.0)
        status = await self.call("status")
        jobs = await self.call("jobs")
        histories = {
            r["routine"]: await self.call("job_history", routine=r["routine"], limit=10_000)
            for r in jobs["routines"]
        }
        # what the operator's phone received (kept with --keep)
        with open(self.work / "telegram.txt", "w", encoding="utf-8") as f:  # noqa: ASYNC230
            for m in self.bot.messages:
                f.write(f"--- message {m.message_id} ({len(m.edits)} edits)\n{m.text}\n")
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), 60)
        except TimeoutError:
            self.proc.kill()
            code = -9
        return Checks(self, status, jobs, histories, code).all()


# ---------------------------------------------------------------------------------------
# The full-disk fault (issue 15 item 8): the state directory lives on a small tmpfs; for
# ``Plan.disk_full`` real seconds a filler file takes every free byte. The daemon must stay
# up (same process), raise ONE "state disk full" alert, fail runs and pause their agents
# (resumed here afterwards, as the operator the alert tells would), and lose no paid call.


@contextlib.asynccontextmanager
async def state_disk(chaos: Chaos) -> Any:
    """Put ``chaos.state`` on a small tmpfs for the run, if one can be mounted here."""
    from companyd.testing.disk import DiskUnavailable, small_disk

    if chaos.plan.disk_full <= 0:
        yield None
        return
    try:
        with small_disk(chaos.work / "disk", "256m") as disk:
            chaos.disk = disk
            chaos.state = disk / "state"
            yield disk
            # keep the state for the checks and --keep: copy it off before unmounting
            import shutil

            kept = chaos.work / "state"
            shutil.copytree(disk / "state", kept, ignore=shutil.ignore_patterns("*.sock"))
            chaos.state = kept
    except DiskUnavailable as exc:
        chaos.say(f"no full-disk fault: {exc}")
        yield None


def full_disk_at(chaos: Chaos, kills: list[float], span: float) -> float:
    """When to fill the disk: late in the run (60–85 %), away from every SIGKILL (a kill
    during the fault would restart the daemon on a full disk, a different fault), and
    ending before the run does.
    """
    hold = chaos.plan.disk_full + 3.0
    candidates = [span * (0.60 + 0.25 * i / 50) for i in range(51)]
    clear = [
        t for t in candidates if all(not (t - 3.0 <= k <= t + hold) for k in kills)
    ] or candidates
    return chaos.rng.choice(clear)


async def full_disk_fault(chaos: Chaos) -> None:
    from companyd.testing.disk import fill

    assert chaos.disk is not None and chaos.proc is not None
    pid = chaos.proc.pid
    filler = await asyncio.to_thread(fill, chaos.disk)
    fault: dict[str, Any] = {"pid": pid, "start": time.time()}
    chaos.disk_faults.append(fault)
    chaos.say("state disk full")
    await asyncio.sleep(chaos.plan.disk_full)
    # the control socket answers throughout
    status = await chaos.call("status")
    fault["status_ok"] = status["daemon"]["state"] == "running"
    fault["paused"] = sorted(a["id"] for a in _agents(status["tree"]) if a.get("state") == "paused")
    filler.unlink()
    fault["end"] = time.time()
    chaos.say(f"state disk has space again; paused meanwhile: {fault['paused']}")
    await asyncio.sleep(1.0)
    for agent in fault["paused"]:
        with contextlib.suppress(Exception):
            await chaos.call("resume", agent=agent)
    fault["same_process"] = chaos.proc.returncode is None and chaos.proc.pid == pid


def full_disk_checks(
    chaos: Chaos, calls: Callable[[], list[dict[str, Any]]]
) -> list[tuple[bool, str]]:
    """One line: on SQLite, ONE "state disk full" alert per fault and the daemon up; on
    PostgreSQL (the module docstring) the daemon up, runs paid during every fault, and at
    most one such alert per fault.
    """
    if chaos.disk is None:
        return [(True, "full disk: not injected (no tmpfs could be mounted here)")]
    texts = [m.text for m in chaos.bot.messages if str(m.chat_id) == str(CHAT)]
    # The critical alert itself (its title), not the alerts that quote it as their reason:
    # a run failed by the outage and routine fires refused while its agent is paused say
    # "state disk full: writes failing" as the reason they report (issue 15 item 8).
    alerts = sum("state disk full" in (t.splitlines() or [""])[0] for t in texts)
    faults = chaos.disk_faults
    up = all(f.get("same_process") and f.get("status_ok") for f in faults)
    if chaos.postgres:
        sim = [(chaos.sim_at(f["start"]), chaos.sim_at(f["end"])) for f in faults if "end" in f]
        paid = [sum(a <= r["ts"] <= b for r in calls()) for a, b in sim]
        going = len(paid) == len(faults) and all(n > 0 for n in paid)
        return [
            (
                up and going and alerts <= len(faults),
                f"full disk (postgres: the state disk holds the memory's local copy): "
                f"{len(faults)} fault(s) of {chaos.plan.disk_full:g} s; daemon "
                f"stayed up (same pid, status answered) = {up}; calls paid in the "
                f"database's ledger during each fault: {paid}; {alerts} 'state disk full' "
                f"alert(s) (at most one per fault: only a store on that disk raises it); "
                f"agents paused at its end (by it or by their budget): "
                f"{[a for f in faults for a in f.get('paused', [])]}",
            )
        ]
    return [
        (
            up and alerts == len(faults),
            f"full disk: {len(faults)} fault(s) of {chaos.plan.disk_full:g} s; daemon stayed "
            f"up (same pid, status answered) = {up}; {alerts} 'state disk full' alert(s); "
            f"agents paused by it: {sum(len(f.get('paused', [])) for f in faults)}",
        )
    ]


def _agents(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    if (
        node.get("kind") == "worker"
        and node.get("path", "").count("/") >= 2
        and node.get("path", "").split("/")[1] == "agents"
    ):
        out.append(node)
    for child in node.get("children", []):
        out += _agents(child)
    return out


# ---------------------------------------------------------------------------------------
# The invariants


class Checks:
    def __init__(
        self,
        chaos: Chaos,
        status: dict[str, Any],
        jobs: dict[str, Any],
        histories: dict[str, Any],
        exit_code: int,
    ) -> None:
        self.c = chaos
        self.status = status
        self.jobs = jobs
        self.histories = histories
        self.exit_code = exit_code
        self.state = chaos.state
        self._prices: Any = None  # the company's price table, read once when needed
        self._ledger_calls: list[dict[str, Any]] | None = None

    def all(self) -> list[tuple[bool, str]]:
        return [
            self.memory(),
            self.official_server(),
            self.llm_calls(),
            self.budgets(),
            self.billed(),
            *self.alerts(),
            self.routines(),
            self.healthy(),
            *full_disk_checks(self.c, self._calls),
        ]

    def _calls(self) -> list[dict[str, Any]]:
        """The spend ledger's call rows, read once (the daemon has stopped)."""
        if self._ledger_calls is None:
            led = ledger(self.state, self.c.store)
            try:
                self._ledger_calls = led.calls()
            finally:
                led.close()
        return self._ledger_calls

    def _refusals(self) -> list[tuple[str, str]]:
        """``(scope, period)`` of every budget refusal: the ledger's ``exhausted@LIMIT``
        markers of each day and month the run spans (a day either side, any time zone).
        """
        day = 86400.0
        first = datetime.fromtimestamp(SIM_START - 2 * day, UTC).date()
        last = datetime.fromtimestamp(self._sim(time.time()) + 2 * day, UTC).date()
        days = [
            datetime.fromordinal(o).strftime("%Y-%m-%d")
            for o in range(first.toordinal(), last.toordinal() + 1)
        ]
        periods = sorted(set(days) | {d[:7] for d in days})
        led = ledger(self.state, self.c.store)
        try:
            markers = led.markers(periods)
        finally:
            led.close()
        return [(scope, period) for scope, period, m in markers if m.startswith("exhausted@")]

    def _memory_names(self) -> tuple[set[str], str]:
        """The names of the entities the memory holds, and what holds them: the file on
        SQLite; on PostgreSQL the database's log (read through a read-only
        ``SharedGraphStore`` with a scratch local copy, so nothing in the state directory
        is read or touched), which the daemon's own ``memory.jsonl`` must then equal.
        """
        from companyd.memory import parse_graph

        path = self.state / "memory.jsonl"
        graph, _ = parse_graph(path.read_bytes())
        names = {e.name for e in graph.entities()}
        if not self.c.postgres:
            return names, "file"
        scratch = self.c.work / "memory-db-view"
        scratch.mkdir(exist_ok=True)
        store = shared_memory_store(self.c, scratch / "memory.jsonl", readonly=True)
        try:
            held = set(store.read(lambda g: [e.name for e in g.entities()]))
        finally:
            store.close()
        same = "equals it" if held == names else f"DIFFERS ({len(names)} entities)"
        return held, f"database; the daemon's local copy after its stop {same}"

    # no acknowledged memory write lost; the file loads
    def memory(self) -> tuple[bool, str]:
        from companyd.memory import parse_graph

        path = self.state / "memory.jsonl"
        report = parse_graph(path.read_bytes())[1]
        names, held_by = self._memory_names()
        corrupt = (
            (path.with_name(path.name + ".corrupt")).read_bytes().decode("utf-8", "replace")
            if path.with_name(path.name + ".corrupt").exists()
            else ""
        )
        agent_writes = []
        for payload in journal_payloads(self.state, self.c.store, "tool_result"):
            result = json.loads(payload)
            if result.get("is_error"):
                continue
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                for e in json.loads(result["content"]).get("entities", []):
                    agent_writes.append(e["name"])
        acked = self.c.tally.acked + agent_writes
        # "driver fact 1" must not be excused by a damaged "driver fact 12" in .corrupt
        in_corrupt = [
            n
            for n in acked
            if n not in names
            and re.search(re.escape(json.dumps(n)[1:-1]) + r"(?![0-9A-Za-z])", corrupt)
        ]
        lost = [n for n in acked if n not in names and n not in in_corrupt]
        clean = not report.quarantined if hasattr(report, "quarantined") else True
        copy_ok = held_by == "file" or "DIFFERS" not in held_by
        ok = not lost and copy_ok
        return ok, (
            f"memory: {len(acked)} acknowledged writes ({len(self.c.tally.acked)} by a second "
            f"process, {len(agent_writes)} by agents), {len(lost)} lost"
            + (f" {lost[:3]}" if lost else "")
            + f"; {self.c.tally.corruptions} corruptions injected "
            f"({dict(self.c.tally.corrupt_modes)}), {len(in_corrupt)} damaged entries kept "
            f"byte for byte in .corrupt; file {'loads cleanly' if clean else 'needed repair'} "
            f"({len(names)} entities" + ("" if held_by == "file" else f" in the {held_by}") + ")"
        )

    def official_server(self) -> tuple[bool, str]:
        if not self.c.official:
            return True, (
                "official MCP memory server: not checked (node/npm or the install is "
                "unavailable; set COMPANYD_OFFICIAL_MEMORY_SERVER)"
            )
        script = (
            "import asyncio, json, sys\n"
            "from mcp import ClientSession\n"
            "from mcp.client.stdio import StdioServerParameters, stdio_client\n"
            "async def main():\n"
            "    p = StdioServerParameters(command='node', args=[sys.argv[1]],"
            " env={'MEMORY_FILE_PATH': sys.argv[2]})\n"
            "    async with stdio_client(p) as (r, w), ClientSession(r, w) as s:\n"
            "        await s.initialize()\n"
            "        res = await s.call_tool('read_graph', {})\n"
            "        graph = res.structured_content or {}\n"
            "        print(json.dumps({'error': res.is_error,"
            " 'n': len(graph.get('entities', []))}))\n"
            "asyncio.run(main())\n"
        )
        from companyd.memory import parse_graph

        path = self.state / "memory.jsonl"
        ours = len(parse_graph(path.read_bytes())[0])
        proc = subprocess.run(
            [sys.executable, "-c", script, self.c.official, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        try:
            got = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return (
                False,
                f"official MCP memory server: could not read the file: {proc.stderr[-300:]}",
            )
        ok = not got["error"] and got["n"] == ours
        return ok, (
            f"official MCP memory server reads the file: {got['n']} entities "
            f"(companyd: {ours}){'' if ok else ' — MISMATCH'}"
        )

    # no LLM call paid twice
    def llm_calls(self) -> tuple[bool, str]:
        api = self.c.api
        served = [r for r in api.requests if r.outcome == "served"]
        journaled: Counter[str] = Counter()
        for payload in journal_payloads(self.state, self.c.store, "llm"):
            journaled[json.loads(payload).get("request_id") or ""] += 1
        twice = [rid for rid, n in journaled.items() if rid and n > 1]
        not_journaled = [r for r in served if (_header_id(r) or "") not in journaled]
        at_kill = [
            r for r in not_journaled if any(0 <= k - r.received <= 10 for k in self.c.tally.kills)
        ]
        # a call cancelled (or timed out) in flight whose reply the stand-in had written:
        # excused only by a forfeit row of its own in the ledger (docs/spend.md "Timeouts")
        rest = [r for r in not_journaled if r not in at_kill]
        excused = forfeited_calls(
            [self._unjournaled(r) for r in rest], self._forfeit_rows(), within=self._within()
        )
        forfeited = sum(excused)
        other = len(rest) - forfeited
        ok = not twice and other == 0
        return ok, (
            f"LLM calls: {len(served)} served by the stand-in, {sum(journaled.values())} "
            f"journaled as completed steps, {len(twice)} journaled twice; "
            f"{len(at_kill)} answered in the instant before a SIGKILL and re-issued after the "
            f"restart (the provider bills those; nothing can journal a reply never read), "
            f"{forfeited} cancelled in flight after the stand-in answered, each matched to its "
            f"own forfeit row in the ledger (counted at its worst case), "
            f"{other} unexplained; {api.injected_faults} injected 529/500 faults and "
            f"{self.c.model.timeouts} timeouts absorbed by retries and fallback"
        )

    def _sim(self, real: float) -> float:
        return SIM_START + (real - self.c.real_anchor) * self.c.plan.scale

    def _within(self) -> float:
        return FORFEIT_WITHIN_S * self.c.plan.scale

    def _unjournaled(self, r: Any) -> UnjournaledCall:
        from companyd.config import load_config
        from companyd.llm._prices import PriceTable
        from companyd.testing.messages_api import usage_of

        if self._prices is None:
            self._prices = PriceTable.from_config(load_config(self.c.config).spec.pricing)
        body = r.body if isinstance(r.body, dict) else {}
        model = str(body.get("model", ""))
        day = datetime.fromtimestamp(self._sim(r.received), UTC).date()
        price, _ = self._prices.lookup(model, day)
        billed = float(price.cost(usage_of(r.response))) if r.response else 0.0
        return UnjournaledCall(
            at=self._sim(r.received), agent=_agent_of(body), model=model, billed_usd=billed
        )

    def _forfeit_rows(self) -> list[ForfeitRow]:
        """The ledger's rows of calls with no answer: no tokens, no request id, the reserved
        worst case as cost (``SpendBook.forfeit``).
        """
        return [
            ForfeitRow(
                at=r["ts"], agent=r["agent"], model=r["model"], cost_usd=r["cost_pusd"] / 1e12
            )
            for r in self._calls()
            if r["request_id"] is None
            and r["input_tokens"] == 0
            and r["output_tokens"] == 0
            and r["cost_pusd"] > 0
        ]

    # budgets never exceeded
    def budgets(self) -> tuple[bool, str]:
        from companyd.config import load_config

        cfg = load_config(self.c.config)
        per: Counter[tuple[str, str]] = Counter()  # (scope, day or month) → USD
        for row in self._calls():
            when = datetime.fromtimestamp(row["ts"], UTC)
            usd = row["cost_pusd"] / 1e12
            agent = row["agent"]
            for scope in ("company", f"agent:{agent}"):
                per[(scope, when.strftime("%Y-%m-%d"))] += usd
                per[(scope, when.strftime("%Y-%m"))] += usd
        # a refusal leaves one 'exhausted@LIMIT' marker per scope and period
        refused = sorted(set(self._refusals()))

        def limit(scope: str, period: str) -> float | None:
            daily = len(period) == 10
            if scope == "company":
                b = cfg.spec.company.budget
            else:
                a = cfg.agents.get(scope.removeprefix("agent:"))
                b = a.budget if a is not None else None
            if b is None:
                return None
            return b.daily_usd if daily else b.monthly_usd

        over = [
            (scope, period, round(v, 6))
            for (scope, period), v in per.items()
            if (cap := limit(scope, period)) is not None and v > cap + 1e-9
        ]
        intern_days = [p for s, p in refused if s == "agent:intern" and len(p) == 10]
        days = sorted({p for s, p in per if s == "company" and len(p) == 10})
        top = max((v for (s, p), v in per.items() if s == "company" and len(p) == 10), default=0)
        intern_top = max(
            (v for (s, p), v in per.items() if s == "agent:intern" and len(p) == 10), default=0
        )
        # the ceiling must actually have been reached, or "never exceeded" proves nothing
        ok = not over and bool(intern_days)
        return ok, (
            f"budgets: {len(over)} company or agent daily/monthly budgets exceeded"
            + (f" {over[:3]}" if over else "")
            + f"; the intern reached its ${INTERN_DAILY_USD:g}/day ceiling on "
            f"{len(intern_days)} of {len(days)} days (highest day ${intern_top:.4f}) and was "
            f"refused from then on; {len(refused)} budget refusals in all; company highest "
            f"day ${top:.4f} of ${cfg.spec.company.budget.daily_usd or 0:g}"
        )

    # what the provider billed (timed-out calls included) stays within every cap plus at
    # most one call's worst case (issue 15)
    def billed(self) -> tuple[bool, str]:
        from companyd.config import load_config
        from companyd.llm._prices import PriceTable
        from companyd.testing.messages_api import usage_of

        cfg = load_config(self.c.config)
        prices = PriceTable.from_config(cfg.spec.pricing)
        per: Counter[tuple[str, str]] = Counter()
        worst: dict[str, float] = {}
        unanswered = unknown = 0
        for r in self.c.api.requests:
            message = r.response if r.outcome == "served" else r.billed
            body = r.body if isinstance(r.body, dict) else {}
            agent = _agent_of(body)
            unknown += agent == "?"
            model = str(body.get("model", ""))
            day = datetime.fromtimestamp(
                SIM_START + (r.received - self.c.real_anchor) * self.c.plan.scale, UTC
            )
            price, _ = prices.lookup(model, day.date())
            # an upper bound of the input the daemon estimates (bytes + overheads)
            est = len(json.dumps(body).encode()) + 64 + 16 * len(body.get("messages") or [])
            w = float(price.worst_case(est + 1024, int(body.get("max_tokens") or 0)))
            for scope in ("company", f"agent:{agent}"):
                worst[scope] = max(worst.get(scope, 0.0), w)
            if message is None or r.outcome not in ("served", "abandoned"):
                continue
            unanswered += r.outcome == "abandoned"
            usd = float(price.cost(usage_of(message)))
            for scope in ("company", f"agent:{agent}"):
                per[(scope, day.strftime("%Y-%m-%d"))] += usd
                per[(scope, day.strftime("%Y-%m"))] += usd

        def cap(scope: str, period: str) -> float | None:
            if scope == "company":
                b = cfg.spec.company.budget
            else:
                a = cfg.agents.get(scope.removeprefix("agent:"))
                b = a.budget if a is not None else None
            if b is None:
                return None
            return b.daily_usd if len(period) == 10 else b.monthly_usd

        over = [
            (scope, period, round(v, 6))
            for (scope, period), v in per.items()
            if (c := cap(scope, period)) is not None and v > c + worst.get(scope, 0.0) + 1e-9
        ]
        # Exact, with no day to attribute: every billed request was settled at its usage,
        # kept at its worst case (no answer), or left unsettled by a SIGKILL.
        total_billed = sum(v for (s, p), v in per.items() if s == "company" and len(p) == 7)
        ledger_pusd = sum(row["cost_pusd"] for row in self._calls())
        accounted = int(ledger_pusd) / 1e12 + self.c.tally.unsettled_usd
        under = total_billed > accounted + 1e-9
        intern = max(
            (v for (s, p), v in per.items() if s == "agent:intern" and len(p) == 10), default=0.0
        )
        # every request must be attributed to its agent, or its scope would go unchecked
        return not over and not under and not unknown and self.c.tally.slowdowns > 0, (
            f"billed: {len(over)} caps passed by what the stand-in billed (beyond one call's "
            f"worst case)" + (f" {over[:3]}" if over else "") + f"; {unanswered} timed-out "
            f"calls billed anyway, {self.c.tally.slowdowns} API slowdown(s); intern's highest "
            f"billed day ${intern:.4f} of ${INTERN_DAILY_USD:g} + "
            f"${worst.get('agent:intern', 0.0):.4f}; {unknown} requests of no known agent; "
            f"billed in all ${total_billed:.4f} ≤ ledger + unsettled at kills ${accounted:.4f}"
            + (" — NOT ACCOUNTED FOR" if under else "")
        )

    # every injected fault produced its alert exactly once
    def alerts(self) -> list[tuple[bool, str]]:
        texts = [m.text for m in self.c.bot.messages if str(m.chat_id) == str(CHAT)]
        crash_counts: Counter[str] = Counter()
        for t in texts:
            first = t.splitlines()[0] if t else ""
            m = CRASH_LINE.search(first)
            if m:
                crash_counts[m.group(1).strip("*_`")] += int(m.group(2) or 1)
        injected = self.c.tally.crashes
        # crashes nobody injected (a run that made no progress for heartbeat_seconds on a
        # machine too busy for the scaled clock: HeartbeatTimeout) are crashes too, and must
        # reach the founder exactly once as well: read from the daemons' own event lines
        unplanned = unplanned_crashes(sorted(self.c.work.glob("daemon-*.log")))
        expected = Counter(injected) + Counter({a: n for a, (n, _) in unplanned.items()})
        # exact: each crash counted at most once; one not counted only if a SIGKILL took it
        # before its alert reached the outbox, measured at the kill, within the documented
        # window (docs/alerts.md "Outbox first")
        lost, late = crashes_lost_to_kills(
            self.c.tally.crash_times, self.c.tally.kill_outboxes, window=CRASH_BEFORE_KILL_S
        )
        crash_ok = crash_alerts_exact(dict(expected), crash_counts, lost) and not late
        also = "".join(
            f" + {n} not injected ({a}: {', '.join(sorted(why))})"
            for a, (n, why) in sorted(unplanned.items())
        )
        repaired = sum("memory file repaired" in t for t in texts)
        rejected = sum("company.yaml change rejected" in t for t in texts)
        died = sum(") died" in t and "companyd (unit" in t for t in texts)
        status_alerts = self.status.get("alerts") or {}
        queued = int(status_alerts.get("queued") or 0) + int(status_alerts.get("held") or 0)
        t = self.c.tally
        return [
            (
                crash_ok,
                f"alerts: {sum(injected.values())} injected agent crashes{also} → "
                f"{sum(crash_counts.values())} counted in crash alerts "
                f"({sum(1 for x in texts if 'crash' in x.splitlines()[0])} messages, "
                "repeats coalesced into one edited message); "
                f"{sum(lost.values())} lost with a SIGKILL before reaching the outbox "
                f"(≤ {CRASH_BEFORE_KILL_S:g} s before it; {dict(lost)})"
                + (f"; OUTSIDE THE WINDOW: {late}" if late else ""),
            ),
            self._corruptions(repaired),
            (
                rejected == t.rejected,
                f"alerts: {t.rejected} broken company.yaml reloads → "
                f"{rejected} 'change rejected' alerts (agent added on the "
                f"next reload: {t.added_agent})",
            ),
            (
                died == len(t.kills) == t.notified,
                f"alerts: {len(t.kills)} SIGKILLs → {died} "
                "'companyd died' alerts (OnFailure= unit)",
            ),
            (
                queued == 0,
                f"alerts: Bot API unreachable for {t.outage_s:g} s → {queued} alerts "
                f"still undelivered at the end; {len(texts)} messages in all",
            ),
        ]

    def _corruptions(self, repaired: int) -> tuple[bool, str]:
        t = self.c.tally
        if not self.c.postgres:
            return (
                repaired == t.corruptions,
                f"alerts: {t.corruptions} memory corruptions → "
                f"{repaired} 'memory file repaired' alerts",
            )
        # PostgreSQL: the damaged file is the daemon's local copy, not the memory; the next
        # start replaces it from the database, so there is nothing to repair or alert about
        return (
            repaired == 0 and t.copies_rewritten == t.corruptions,
            f"alerts: {t.corruptions} corruptions of the memory's local copy → "
            f"{repaired} 'memory file repaired' alerts (the memory is the database's log: "
            f"nothing to repair); the copy replaced, clean, at the next start "
            f"{t.copies_rewritten} of {t.corruptions} times",
        )

    # routine success rate, every non-success with a reason
    def routines(self) -> tuple[bool, str]:
        attempted = ok = unexplained = 0
        reasons: Counter[str] = Counter()
        outcomes: Counter[str] = Counter()
        for routine, hist in self.histories.items():
            for fire in hist.get("fires") or []:
                outcome = fire.get("outcome")
                outcomes[outcome] += 1
                if outcome in ("idle", "running", None):
                    continue
                if outcome == "ok":
                    ok += 1
                    attempted += 1
                    continue
                if outcome not in ("missed", "skipped", "stopped"):
                    attempted += 1
                if not fire.get("reason"):
                    unexplained += 1
                reasons[f"{routine} {outcome}: {_short(fire.get('reason'), 48)}"] += 1
        rate = ok / attempted if attempted else 1.0
        lines = "; ".join(f"{k} ×{v}" for k, v in reasons.most_common(5))
        return unexplained == 0 and attempted > 0, (
            f"routines: {ok}/{attempted} runs that started succeeded ({rate:.2%}); all fires: "
            f"{dict(outcomes)}; {unexplained} non-successes without a reason"
            + (f"; top reasons: {lines}" if lines else "")
        )

    def healthy(self) -> tuple[bool, str]:
        tree = self.status.get("tree") or {}
        agents = _agents(tree)
        bad = [a["id"] for a in agents if a["state"] not in ("running", "paused")]
        ok = tree.get("state") == "running" and not bad and self.exit_code == 0
        return ok, (
            f"daemon ends healthy: tree {tree.get('state')}, {len(agents)} agents, "
            f"{len(bad)} not running {bad if bad else ''}; SIGTERM → exit "
            f"{self.exit_code}; {self.c.tally.incarnations} daemon incarnations"
        )


# -- exact excuses: what the invariants forgive, and only that ------------------------------

#: How long after its request a cancelled or timed-out call's forfeit row may be written
#: (real seconds): the client's 3 s timeout, a stop's grace, and loop lag on a loaded
#: machine. The match itself is one row per call, of the same agent and model.
FORFEIT_WITHIN_S = 30.0
#: How close before a SIGKILL an agent crash may be and still not be in the alert outbox:
#: the alert service takes events off the bus and writes them in batches (docs/alerts.md
#: "Outbox first": durable from the outbox write on; before it, lost with the process).
CRASH_BEFORE_KILL_S = 1.0
#: an agent crash alert's first line, and how many crashes it counts
CRASH_LINE = re.compile(r"(\S+) (?:crashed and was restarted|is crash-looping: (\d+) crashes)")


@dataclass(frozen=True)
class UnjournaledCall:
    """A call the stand-in served (and billed) whose reply no journal step records."""

    at: float  # simulated time the request arrived
    agent: str
    model: str
    billed_usd: float


@dataclass(frozen=True)
class ForfeitRow:
    """A ledger row of a call with no answer: no tokens, its reserved worst case as cost."""

    at: float  # simulated time it was written
    agent: str
    model: str
    cost_usd: float


def forfeited_calls(
    calls: list[UnjournaledCall], rows: list[ForfeitRow], *, within: float
) -> list[bool]:
    """For each call (in order), whether the ledger recorded it as forfeited: a row of its
    own — same agent and model, written at or after the request and at most ``within``
    simulated seconds later, worth at least what the stand-in billed — each row excusing
    one call only. Earliest-deadline first (all windows are the same length), so no call
    is left unmatched that a different pairing would have matched.
    """
    used = [False] * len(rows)
    out = [False] * len(calls)
    for i in sorted(range(len(calls)), key=lambda i: calls[i].at):
        c = calls[i]
        for j in sorted(range(len(rows)), key=lambda j: rows[j].at):
            r = rows[j]
            if used[j] or (r.agent, r.model) != (c.agent, c.model):
                continue
            if c.at <= r.at <= c.at + within and r.cost_usd >= c.billed_usd - 1e-12:
                used[j] = out[i] = True
                break
    return out


@dataclass(frozen=True)
class KillSnapshot:
    """A SIGKILL, and the crashes per agent its alert outbox held right after it."""

    at: float  # real time of the kill
    outboxed: Counter[str]


def outbox_crashes(state: Path, store: Backend) -> Counter[str]:
    """Agent crashes per agent counted in the alert outbox's records (read-only)."""
    counts: Counter[str] = Counter()
    rows = outbox_bodies(state, store)
    for (body,) in rows:
        b = json.loads(body)
        if b.get("status") == "folded":
            continue  # counted in its digest's own record
        m = CRASH_LINE.search((b.get("text") or "").split("\n", 1)[0])
        if m:
            counts[m.group(1).strip("*_`")] += int(m.group(2) or 1)
    return counts


def crashes_lost_to_kills(
    crashes: dict[str, list[float]], kills: list[KillSnapshot], *, window: float
) -> tuple[Counter[str], list[str]]:
    """Per agent, the injected crashes a SIGKILL took before their alert reached the outbox
    (measured: injected before the kill minus what the outbox held right after it), and a
    line for each such loss outside the documented window — a crash more than ``window``
    seconds before the kill that the outbox still lacked is a broken promise, not the window.
    """
    lost: Counter[str] = Counter()
    late: list[str] = []
    for kill in sorted(kills, key=lambda k: k.at):
        for agent, times in sorted(crashes.items()):
            before = sorted(t for t in times if t < kill.at)
            missing = max(0, len(before) - kill.outboxed.get(agent, 0))
            new = missing - lost[agent]
            if new <= 0:
                continue
            lost[agent] = missing
            gap = kill.at - before[-new]  # the oldest of the crashes this kill took
            if gap > window:
                late.append(
                    f"{agent}: {new} crash(es) missing from the outbox at the SIGKILL at "
                    f"{kill.at:.1f} s, the latest injected {kill.at - before[-1]:.1f} s before "
                    f"it (the window is {window:g} s)"
                )
    return lost, late


_CHILD_CRASHED = re.compile(
    r"child_exited \S+: child='([^']+)' .*?action='restart' .*?exception='(\w+)'"
)


def unplanned_crashes(logs: list[Path]) -> dict[str, tuple[int, set[str]]]:
    """Crashes the chaos did not inject, per child, with their exceptions: the daemons'
    ``child_exited`` event lines (INFO, in ``daemon-N.log``) of a child restarted after an
    exception other than ``InjectedCrash``.
    """
    found: dict[str, tuple[int, set[str]]] = {}
    for log in logs:
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            m = _CHILD_CRASHED.search(line)
            if m and m.group(2) != "InjectedCrash":
                n, why = found.get(m.group(1), (0, set()))
                found[m.group(1)] = (n + 1, why | {m.group(2)})
    return found


def crash_alerts_exact(injected: dict[str, int], counted: Counter[str], lost: Counter[str]) -> bool:
    """Every injected crash counted in the alerts at most once, and every one not counted
    lost to a SIGKILL before its alert reached the outbox (:func:`crashes_lost_to_kills`).
    A lost crash may still be counted: its alert can have gone out from memory.
    """
    agents = set(injected) | set(counted)
    return all(
        injected.get(a, 0) - lost.get(a, 0) <= counted.get(a, 0) <= injected.get(a, 0)
        for a in agents
    )


_WHO = re.compile(r"You are .*? \(([a-z][a-z0-9_-]*)\) at ")


# -- reading the stores: the same facts through each store's read-only API, on either backend


def outbox_bodies(state: Path, store: Backend) -> list[tuple[str]]:
    """Every record of the alert outbox (``alerts.sqlite``, or the ``alerts`` tables of the
    company's schema), read-only — opened as ``AlertStore`` opens it, without migrating or
    creating anything; [] when there is none yet or it cannot be read.
    """
    from companyd.alerts._outbox import STEPS
    from companyd.storage import DB_ERRORS, StoreAbsent, open_database

    path = state / "alerts.sqlite"
    if store.kind == "sqlite" and not path.exists():
        return []
    database = open_database(
        store,
        path=path,
        store="alerts",
        migrations=STEPS,
        what="the alert outbox",
        readonly=True,
        worker=False,
    )
    try:
        return database.run_sync(lambda conn: conn.execute("SELECT body FROM alerts").fetchall())
    except StoreAbsent:  # no daemon has written this company's outbox yet
        return []
    except DB_ERRORS:
        return []
    finally:
        database.close_sync()


def ledger(state: Path, store: Backend) -> Any:
    """The spend ledger, read-only (``Ledger.close`` when done)."""
    from companyd.spend._ledger import Ledger

    return Ledger(state / "spend.sqlite", readonly=True, backend=store)


def inflight_pusd(state: Path, store: Backend) -> int:
    """Picodollars of the reservations the ledger holds as in flight."""
    led = ledger(state, store)
    try:
        return sum(row.amount_pusd for row in led.inflight())
    finally:
        led.close()


def journal_payloads(state: Path, store: Backend, kind: str) -> list[str]:
    """The payloads of the run journal's steps of ``kind`` (``llm``, ``tool_result``)."""
    from companyd.runs import Journal

    journal = Journal(state / "runs.sqlite", backend=store, readonly=True)
    try:
        return journal.run_sync(
            lambda db: [
                str(p) for (p,) in db.execute("SELECT payload FROM steps WHERE kind = ?", (kind,))
            ]
        )
    finally:
        journal.close_sync()


def shared_memory_store(chaos: Chaos, path: Path, *, readonly: bool = False) -> Any:
    """A ``SharedGraphStore`` on the company's schema with ``path`` as its local copy: a
    process other than the daemon using the memory on PostgreSQL (opened).
    """
    from companyd.memory._shared import MIGRATIONS, SharedGraphStore
    from companyd.storage import PgDatabase, open_database

    database = open_database(
        chaos.store,
        path=None,
        store="memory",
        migrations=MIGRATIONS,
        what="memory log",
        readonly=readonly,
        worker=False,
    )
    assert isinstance(database, PgDatabase)
    store = SharedGraphStore(path, database, readonly=readonly)
    try:
        store.open()
    except BaseException:
        store.close()
        raise
    return store


def _agent_of(body: dict[str, Any]) -> str:
    """The agent a Messages API request came from (its system prompt names it), or "?"."""
    system = body.get("system")
    text = system if isinstance(system, str) else json.dumps(system)
    m = _WHO.search(text or "")
    return m.group(1) if m else "?"


def _header_id(r: Any) -> str | None:
    """The ``request-id`` the stand-in sent with a served response (it pairs with the
    message id: ``msg_standin_N`` ↔ ``req_standin_N``), which the journal records.
    """
    msg_id = (r.response or {}).get("id")
    return f"req_standin_{msg_id.removeprefix('msg_standin_')}" if msg_id else None


def _short(text: Any, n: int = 60) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------------------------------


def official_server() -> str | None:
    env = os.environ.get("COMPANYD_OFFICIAL_MEMORY_SERVER")
    if env:
        return env
    script = REPO / "bench" / "install_official_memory_server.sh"
    try:
        out = subprocess.run([str(script)], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short", action="store_true", help="two simulated days, fewer faults (CI)")
    p.add_argument("--days", type=float)
    p.add_argument("--scale", type=float)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", type=int, default=1, help="runs in a row (seeds seed, seed+1, …)")
    p.add_argument("--keep", action="store_true", help="keep the work directories")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--no-official", action="store_true", help="skip the official-server check")
    p.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="where the stores live: SQLite files (default) or PostgreSQL (a throwaway "
        "cluster started here: Debian's postgresql package)",
    )
    args = p.parse_args(argv)
    official = None if args.no_official else official_server()
    with contextlib.ExitStack() as stack:
        cluster = None
        if args.backend == "postgres":
            from companyd.testing.postgres import ThrowawayCluster

            cluster = stack.enter_context(ThrowawayCluster())
        return _runs(args, official, cluster)


def _runs(args: argparse.Namespace, official: str | None, cluster: Any) -> int:
    failures = 0
    for i in range(args.runs):
        base = SHORT if args.short else Plan()
        plan = Plan(
            **{
                **base.__dict__,
                "seed": args.seed + i,
                **({"days": args.days} if args.days else {}),
                **({"scale": args.scale} if args.scale else {}),
            }
        )
        work = Path(tempfile.mkdtemp(prefix="companyd-chaos-"))
        store = None
        where = ""
        if cluster is not None:
            from companyd.storage import Backend

            store = Backend(kind="postgres", dsn=cluster.dsn, schema=cluster.fresh_schema("chaos"))
            where = f", stores in PostgreSQL {cluster.port} schema {store.schema}"
        print(
            f"chaos run {i + 1}/{args.runs}: {plan.days:g} simulated days at {plan.scale:g}× "
            f"(~{plan.real_seconds:.0f} s real), seed {plan.seed}, work dir {work}{where}",
            flush=True,
        )
        started = time.monotonic()
        results = asyncio.run(Chaos(plan, work, official, not args.quiet, store).run())
        took = time.monotonic() - started
        for ok, line in results:
            print(f"  {'✓' if ok else '✗'} {line}")
        bad = sum(not ok for ok, _ in results)
        print(
            f"  {'all invariants hold' if not bad else f'{bad} invariant(s) FAILED'} "
            f"({took:.0f} s)",
            flush=True,
        )
        failures += bad
        if not args.keep and not bad:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
