"""Operator commands for agents: ask, runs (list, show, last), tasks, retry, proposals,
approve, reject, revert.

``approve`` and ``reject`` take any id ``companyd inbox`` shows with those actions: a
proposal's (``prop-…``) or a tool call's waiting for approval (``ap-…``, :mod:`.desk`).

Each talks to the running daemon through the control socket when one runs. Without a
daemon, the read commands read the state directory directly, ``ask`` starts the company
in-process for one task (no scheduler, no alerts, no control socket) and stops it again,
and the proposal commands work on the files (there is nothing to reload).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd.cli._daemon import (
    add_daemon_arguments,
    call_daemon,
    company_zone,
    running_daemon,
    store_location,
)
from companyd.cli._main import print_json
from companyd.errors import CompanydError, UnknownName, UsageError

if TYPE_CHECKING:
    from companyd.admin import ResultDecision
    from companyd.daemon import ControlClient

__all__ = ["register"]


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (``--timeout``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


#: ``runs --status`` choices: "running" and every :class:`companyd.runs.RunStatus`, written
#: out so that listing runs does not import the run records (dataclasses, uuid: issue 31);
#: tests/test_cli.py checks it against the enum.
_STATUSES = (
    "running",
    "ok",
    "failed",
    "budget_exhausted",
    "circuit_breaker",
    "quarantined",
    "cancelled",
    "unverified",
)
_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw])")
_UNIT = {"m": 60.0, "h": 3_600.0, "d": 86_400.0, "w": 604_800.0}


def _since(text: str) -> float:
    """``--since``: a duration back from now (``24h``), a UTC date or date and time."""
    m = _AGO.fullmatch(text.strip())
    if m:
        return time.time() - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a date (2026-11-01), a date and time (2026-11-01T14:00) or a duration "
            f"back from now (90m, 24h, 7d, 2w), got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _positive(text: str) -> int:
    """A whole number of at least 1 (``--limit``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def register(sub: Any) -> None:
    """Add the agent commands to the top-level ``companyd`` parser: ``ask``, ``runs``, ``tasks``,
    ``retry``, ``proposals`` and the proposal decisions.
    """
    p = sub.add_parser(
        "ask",
        help="give an agent a one-off task and print its answer, model, tokens and cost",
        description="Run one task on an agent. Uses the running daemon if there is one; "
        "otherwise starts the company in-process for this one task.",
    )
    p.add_argument("agent", help="agent slug, as in company.yaml")
    p.add_argument("question", nargs="+", help="what to ask or do")
    p.add_argument("--timeout", type=_seconds, default=300.0, help="seconds to wait (default 300)")
    p.add_argument(
        "--reply-to",
        metavar="RUN_ID",
        help="a follow-up in that run's thread: the agent sees the run's task and result "
        "with your question as the reply",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="without a daemon: use the built-in offline model instead of Claude",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_ask)

    p = sub.add_parser(
        "runs",
        help="recent runs with outcome, cost and answer; `runs show RUN_ID`, `runs last ROUTINE`",
        description="Without a word: recent runs, newest first. `runs show RUN_ID`: the whole "
        "transcript of one run. `runs last ROUTINE`: the latest result of a routine.",
    )
    p.add_argument(
        "words",
        nargs="*",
        metavar="show RUN_ID | last ROUTINE",
        help="show one run's transcript, or a routine's latest result",
    )
    p.add_argument("--agent", help="only this agent's runs")
    p.add_argument("--routine", help="only the runs of this routine")
    p.add_argument("--status", choices=_STATUSES, help="only runs with this outcome")
    p.add_argument(
        "--since",
        type=_since,
        help="only runs started since: a date (2026-11-01, UTC), a time (2026-11-01T14:00) "
        "or a duration back from now (90m, 24h, 7d, 2w)",
    )
    p.add_argument("--limit", type=_positive, default=20)
    add_daemon_arguments(p)
    p.set_defaults(func=_runs)

    p = sub.add_parser(
        "tasks",
        help="tasks waiting or running; --quarantined for poison pills",
        description="The tasks queued or running; with --quarantined, the tasks set aside "
        "after crashing their agent (release one with `companyd retry`).",
    )
    p.add_argument("--quarantined", action="store_true", help="show quarantined tasks")
    add_daemon_arguments(p)
    p.set_defaults(func=_tasks)

    p = sub.add_parser(
        "retry",
        help="release a quarantined task and run it again",
        description="Release a quarantined task (an id from `companyd tasks --quarantined`) "
        "so its agent runs it again.",
    )
    p.add_argument("task_id")
    add_daemon_arguments(p)
    p.set_defaults(func=_retry)

    p = sub.add_parser(
        "proposals",
        help="the improver's proposals and their status",
        description="The improver's proposals to change company.yaml, newest first, with "
        "their status (decide them with approve, reject, revert).",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_proposals)

    for name, verb in (
        ("approve", "approve a tool call (ap-…) or apply a proposal (and reload)"),
        ("reject", "reject a tool call (ap-…, with a reason) or discard a proposal"),
        ("revert", "undo an applied proposal (and reload)"),
    ):
        p = sub.add_parser(name, help=verb, description=verb[0].upper() + verb[1:] + ".")
        p.add_argument("proposal_id", metavar="ID", help="an id from `companyd inbox`")
        if name == "reject":
            p.add_argument(
                "reason", nargs="*", help="why (a tool call: the agent reads it in the error)"
            )
        add_daemon_arguments(p)
        p.set_defaults(func=_decide, decision=name)


# ---------------------------------------------------------------------------------------


def _via_daemon_or_files(
    args: argparse.Namespace,
    op: str,
    op_args: dict[str, Any],
    offline: Callable[[], dict[str, Any]],
    printer: Callable[[dict[str, Any]], int],
    client: ControlClient | None = None,
) -> int:
    """Ask the daemon if one runs, else compute the answer from the files. ``client``: the
    daemon :func:`_check_name` just found (not searched for again).
    """

    def from_files() -> int:
        result = offline()
        if args.json:
            print_json(result)
            return 0
        return printer(result)

    return call_daemon(args, op, printer, client=client, otherwise=from_files, **op_args)


def _config_and_state(args: argparse.Namespace) -> tuple[Any, Path]:
    from companyd.config import default_config_path, load_config

    cfg = load_config(args.config or default_config_path())
    return cfg, cfg.state_dir(args.state_dir)


def _journal_read(
    args: argparse.Namespace, fn: Callable[[Any, Any], Any], missing: Callable[[], Any]
) -> Any:
    """``fn(journal, db)`` on the state directory's run journal; ``missing()`` when there
    is none yet — a query must not create the directory and an empty journal (owned by
    whoever ran it: root under sudo) where the daemon will start, or at a mistyped path.
    """
    import sqlite3

    cfg, state_dir, backend = store_location(args)
    from companyd._sqlite import store_errors
    from companyd.runs import Journal

    # on PostgreSQL a reader migrates nothing: the daemons of the company own the schema
    journal = Journal(
        state_dir / "runs.sqlite",
        backend=backend,
        readonly=backend.kind == "postgres",
        worker=False,  # a reader in this thread: no worker thread to start and join
    )
    try:
        if not journal.exists():
            return missing()
        return journal.run_sync(lambda db: fn(journal, db))
    except store_errors() as exc:
        if backend.kind == "sqlite":
            raise
        if isinstance(exc, sqlite3.DatabaseError):  # SchemaTooNew: it says what to do
            raise CompanydError(str(exc)) from exc
        raise CompanydError(
            f"cannot read the run journal in the company's PostgreSQL schema "
            f"{backend.schema!r}: {type(exc).__name__}: {exc}; check that the database is "
            f"reachable with the URL in ${cfg.spec.state.dsn_env} (or state.dsn_credential)"
        ) from exc
    finally:
        journal.close_sync()


#: The status shown, with no daemon running, for a run the journal has as ``running``
#: (not a RunStatus: the next start resumes the run from its journal)
INTERRUPTED = "interrupted"


def _not_running(
    args: argparse.Namespace, run: Mapping[str, Any], key: str = "status"
) -> dict[str, Any]:
    """``run`` (a journal row, transcript or task — its ``key`` the state — read with no
    daemon) as what is known: one the journal has as ``running`` is not running — nothing
    runs it — but was interrupted by the daemon's stop (or crash) and is resumed at the next
    start (a run also gets the ``reason``). Nothing is written (the next start owns it). On
    PostgreSQL another node may be running it: shown as stored.
    """
    out = dict(run)
    if out.get(key) != "running" or store_location(args)[2].kind != "sqlite":
        return out
    out[key] = INTERRUPTED
    if key == "status":
        out["reason"] = (
            "interrupted: the daemon stopped or died during this run; the next start resumes "
            "it from its journal"
        )
    return out


# -- ask --------------------------------------------------------------------------------


def _ask(args: argparse.Namespace) -> int:
    import asyncio

    from companyd.daemon import StateLock, make_backend

    question = " ".join(args.question)
    if running_daemon(args) is not None:
        return call_daemon(
            args,
            "ask",
            _print_answer,
            agent=args.agent,
            question=question,
            timeout=args.timeout,
            reply_to=args.reply_to,
        )

    cfg, state_dir = _config_and_state(args)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    backend = make_backend(cfg, offline=args.offline, redact=lambda _: None)
    with StateLock.acquire(state_dir):
        result = asyncio.run(_ask_in_process(cfg, state_dir, backend, args, question))
    if args.json:
        print_json(result)
        return 0 if result.get("status") == "ok" else 1
    return _print_answer(result)


async def _ask_in_process(
    cfg: Any, state_dir: Path, backend: Any, args: argparse.Namespace, question: str
) -> dict[str, Any]:
    from companyd.admin import result_data
    from companyd.daemon import Daemon

    async with Daemon(cfg, state_dir, backend=backend, offline=args.offline, oneoff=True) as d:
        # the JSON form, as a daemon would answer: one printer for both
        data: dict[str, Any] = result_data(
            "ask",
            await d.ask(args.agent, question, timeout=args.timeout, reply_to=args.reply_to),
        )
        return data


def _print_answer(result: Mapping[str, Any]) -> int:
    from companyd.admin import RUN_COST_PLACES, format_usd, usd_places

    status = str(result.get("status", "?"))
    answer = str(result.get("answer") or "").strip()
    if answer:
        print(answer)
    tokens = int(result.get("tokens") or 0)
    cost = float(result.get("cost_usd") or 0.0)
    # calls sent but never answered (timed out) are charged at their worst case: "no model
    # call" beside a cost would say the money went nowhere
    unanswered = "no model answer (calls unanswered, charged as sent)" if cost else ""
    models = ", ".join(str(m) for m in result.get("models") or []) or unanswered or "no model call"
    # as `companyd runs` prints a run's cost: never a non-zero cost as "$0.0000"
    shown = format_usd(cost, usd_places([cost], minimum=RUN_COST_PLACES))
    line = (
        f"— {models} · {tokens:,} tokens · {shown} · {result.get('steps', 0)} steps · "
        f"{result.get('run_id') or 'no run'}"
    )
    if result.get("offline"):
        line += " · OFFLINE model"
    if status != "ok":
        line += f" · {status}: {result.get('reason')}"
    print(line, file=sys.stderr if not answer else sys.stdout)
    return 0 if status == "ok" else 1


# -- runs / tasks / retry ---------------------------------------------------------------


def _runs(args: argparse.Namespace) -> int:
    words = list(args.words)
    if words and words[0] == "show" and len(words) == 2:
        return _runs_show(args, words[1])
    if words and words[0] == "last" and len(words) == 2:
        return _runs_last(args, words[1])
    if words:
        raise UsageError(
            f"unexpected {' '.join(words)!r} after `companyd runs`; expected nothing (the "
            "list), `show RUN_ID` or `last ROUTINE`"
        )
    op_args = {
        "agent": args.agent,
        "status": args.status,
        "limit": args.limit,
        "routine": args.routine,
        "since": args.since,
    }
    client = None
    if args.agent:
        client = _check_name(args, "agent", args.agent)
    if args.routine:
        client = _check_name(args, "routine", args.routine, client)

    def offline() -> dict[str, Any]:
        runs = _journal_read(
            args,
            lambda j, db: j.list_runs(
                db,
                args.agent,
                args.status,
                args.limit,
                routine=args.routine,
                since=args.since,
            ),
            list,
        )
        return {"runs": [_not_running(args, r) for r in runs]}

    return _via_daemon_or_files(
        args,
        "runs",
        op_args,
        offline,
        lambda result: _print_runs(result, company_zone(args)),
        client,
    )


def _runs_show(args: argparse.Namespace, run_id: str) -> int:
    def offline() -> dict[str, Any]:
        import asyncio  # here: a running daemon answers without an event loop in the CLI

        shown = _journal_read(args, lambda j, db: j.show_run(db, run_id), lambda: None)
        if shown is None:
            cfg, _ = _config_and_state(args)
            raise CompanydError(
                f"no run {run_id!r} in the journal; see `companyd runs` for run ids (runs "
                f"are kept {cfg.spec.retention.runs_days} days: retention.runs_days)"
            )
        result: dict[str, Any] = _not_running(args, shown)
        result["decisions"] = asyncio.run(_decisions_offline(args, run_id))
        return result

    return _via_daemon_or_files(
        args,
        "run_show",
        {"run_id": run_id},
        offline,
        lambda result: _print_transcript(result, company_zone(args)),
    )


async def _decisions_offline(args: argparse.Namespace, run_id: str) -> list[ResultDecision]:
    """The founder's decisions on run ``run_id``'s result, from the desk file (none when
    there is no desk yet: reading must not create it).
    """
    _, state, backend = store_location(args)
    from companyd.clock import SystemClock
    from companyd.desk import Desk, decisions_of
    from companyd.events import EventBus

    desk = Desk(state / "desk.sqlite", bus=EventBus(), clock=SystemClock(), backend=backend)
    try:
        if not await desk.present():
            return []
        return decisions_of(await desk.of_run(run_id))
    finally:
        await desk.close()


def _runs_last(args: argparse.Namespace, routine: str) -> int:
    from companyd.cli._runs_text import last_lines

    client = _check_name(args, "routine", routine)
    op_args = {"routine": routine, "limit": 1, "finished": True}

    def offline() -> dict[str, Any]:
        runs = _journal_read(
            args, lambda j, db: j.list_runs(db, limit=1, routine=routine, finished=True), list
        )
        return {"runs": runs}

    def printer(result: Mapping[str, Any]) -> int:
        runs = result.get("runs") or []
        if not runs:
            print(f"routine {routine} has no finished run yet")
            return 0
        for line in last_lines(runs[0], company_zone(args)):
            print(line)
        return 0 if runs[0].get("status") == "ok" else 1

    return _via_daemon_or_files(args, "runs", op_args, offline, printer, client)


def _check_name(
    args: argparse.Namespace, kind: str, name: str, client: ControlClient | None = None
) -> ControlClient | None:
    """``name`` is an agent (``kind="agent"``) or routine of company.yaml, or has runs in
    the journal (one since removed); otherwise UnknownName — exit 1, as an unknown name is
    in every command.

    A running daemon answers for its own company.yaml (it refuses a name neither there
    nor in its journal). With none, the journal is asked first: a name with runs is known
    whatever company.yaml now says, and the question costs a read, where loading
    company.yaml costs its schema (~0.15 s, issue 31); company.yaml is read only for a
    name with no run yet. Returns the running daemon it asked (``client``, else the one it
    found), None when there is none.
    """
    query = {"agent": None, "routine": None, kind: name}
    if (client := client or running_daemon(args)) is not None:
        client.call("runs", status=None, limit=1, **query)
        return client
    past = _journal_read(
        args,
        lambda j, db: j.list_runs(db, query["agent"], None, 1, routine=query["routine"]),
        list,
    )
    if past:
        return client
    cfg, _ = _config_and_state(args)
    known = cfg.agents if kind == "agent" else cfg.routines
    if name not in known:
        raise UnknownName(
            f"unknown {kind} {name!r} (not in {cfg.path} and no runs in the journal); "
            f"{kind}s: {', '.join(known) or '(none)'}"
        )
    return client


def _print_runs(result: Mapping[str, Any], tz: str) -> int:
    from companyd.cli._runs_text import run_list_lines

    runs = result.get("runs") or []
    if not runs:
        print("no runs yet")
        return 0
    for line in run_list_lines(runs, tz):
        print(line)
    return 0


def _print_transcript(result: Mapping[str, Any], tz: str) -> int:
    from companyd.cli._runs_text import transcript_lines

    for line in transcript_lines(result, tz):
        print(line)
    return 0


def _tasks(args: argparse.Namespace) -> int:
    states = ["quarantined"] if args.quarantined else ["queued", "running"]

    def offline() -> dict[str, Any]:
        tasks = _journal_read(args, lambda j, db: j.list_tasks(db, states), list)
        return {"tasks": [_not_running(args, t, "state") for t in tasks]}

    return _via_daemon_or_files(
        args, "tasks", {"quarantined": args.quarantined}, offline, _print_tasks
    )


def _print_tasks(result: Mapping[str, Any]) -> int:
    tasks = result.get("tasks") or []
    if not tasks:
        print("no tasks")
        return 0
    for t in tasks:
        prompt = " ".join(str(t.get("prompt", "")).split())[:60]
        print(f"{t.get('id')}  {t.get('agent'):12} {t.get('state'):11} {prompt}")
        for err in t.get("errors") or []:
            print(f"    crash: {err}")
    return 0


def _retry(args: argparse.Namespace) -> int:
    def offline() -> dict[str, Any]:
        def unknown() -> dict[str, Any]:
            raise CompanydError(
                f"no quarantined task {args.task_id!r}; see `companyd tasks --quarantined`"
            )

        def release(j: Any, db: Any) -> dict[str, Any]:
            row = db.execute("SELECT state FROM tasks WHERE id = ?", (args.task_id,)).fetchone()
            if row is None or row[0] != "quarantined":
                unknown()
            db.execute(
                "UPDATE tasks SET state = 'queued', crashes = 0, updated = ? WHERE id = ?",
                (time.time(), args.task_id),
            )
            return {
                "task_id": args.task_id,
                "queued": True,
                "message": f"released {args.task_id}; it runs when the daemon starts",
            }

        result: dict[str, Any] = _journal_read(args, release, unknown)
        return result

    return _via_daemon_or_files(args, "retry", {"task_id": args.task_id}, offline, _print_message)


def _print_message(result: Mapping[str, Any]) -> int:
    print(result.get("message") or result)
    return 0


# -- proposals --------------------------------------------------------------------------


def _store(args: argparse.Namespace) -> Any:
    from companyd.clock import SystemClock
    from companyd.config import state_backend
    from companyd.desk import Proposals
    from companyd.events import EventBus

    cfg, state_dir = _config_and_state(args)
    return Proposals(
        state_dir, cfg, bus=EventBus(), clock=SystemClock(), backend=state_backend(cfg)
    )


def _proposals(args: argparse.Namespace) -> int:
    def offline() -> dict[str, Any]:
        import asyncio  # here: a running daemon answers without an event loop in the CLI

        async def go() -> dict[str, Any]:
            store = _store(args)
            try:
                if not await store.present():  # none made yet: do not create it to say so
                    return {"proposals": []}
                return {"proposals": [p.to_dict() for p in await store.list()]}
            finally:
                await store.close()

        return asyncio.run(go())

    return _via_daemon_or_files(args, "proposals", {}, offline, _print_proposals)


def _print_proposals(result: Mapping[str, Any]) -> int:
    items = result.get("proposals") or []
    if not items:
        print("no proposals")
        return 0
    for p in items:
        print(f"{p.get('id')}  {p.get('status'):9} {p.get('agent')}: {p.get('reason')}")
        if p.get("decided_by"):  # who decided, through what, and why (a rejection's reason)
            said = f"    {p.get('status')} by {p.get('decided_by')}"
            said += f" via {p.get('via')}" if p.get("via") else ""
            print(said + (f": {p.get('note')}" if p.get("note") else ""))
        if p.get("status") == "pending":
            for line in str(p.get("diff", "")).splitlines()[:40]:
                print(f"    {line}")
    return 0


def _decide(args: argparse.Namespace) -> int:
    import asyncio

    from companyd.cli._desk import decide_offline, login
    from companyd.desk import TOOLS_ITEM, ItemState, ProposalError, not_an_inbox_id, on_desk

    reason = " ".join(getattr(args, "reason", None) or [])
    if args.decision != "revert" and on_desk(args.proposal_id):
        # who decided, for the run's transcript: the login running the command
        op_args = {"item_id": args.proposal_id, "by": login(), "via": "cli"}
        if args.decision == "reject":
            op_args["reason"] = reason
        state = ItemState.APPROVED if args.decision == "approve" else ItemState.REJECTED
        return _via_daemon_or_files(
            args,
            args.decision,
            op_args,
            lambda: decide_offline(args, args.proposal_id, state, reason),
            _print_message,
        )

    def offline() -> dict[str, Any]:
        if args.decision == "approve" and args.proposal_id.startswith(TOOLS_ITEM):
            # held-back MCP tools: written to the tools store, offered at the next start
            agent, _, server = args.proposal_id.removeprefix(TOOLS_ITEM).partition(":")
            approved = asyncio.run(_approve_tools_offline(args, server, agent))
            names = ", ".join(t for _, t in approved)
            return {
                "message": f"approved {names} of {server} for {agent}; offered when the daemon "
                "starts"
                if approved
                else f"nothing of {server} was held back"
            }

        async def go() -> dict[str, Any]:
            if (why := not_an_inbox_id(args.proposal_id)) is not None:
                raise CompanydError(why)  # as the daemon says it
            store = _store(args)
            try:
                if not await store.present():
                    raise CompanydError(f"no proposal {args.proposal_id!r}; pending: (none)")
                who = {"by": login(), "via": "cli"}
                if args.decision == "reject":
                    p = await store.reject(args.proposal_id, reason, **who)
                else:
                    p = await getattr(store, args.decision)(args.proposal_id, **who)
            except ProposalError as exc:
                raise CompanydError(str(exc)) from None
            finally:
                await store.close()
            done = {"approve": "applied", "reject": "rejected", "revert": "reverted"}
            return {**p.to_dict(), "message": f"{done[args.decision]} {p.id}"}

        return asyncio.run(go())

    asked: dict[str, Any] = {"proposal_id": args.proposal_id}
    if args.decision != "revert":
        # who decided and why, kept with the proposal (`proposals --json`)
        asked = {"item_id": args.proposal_id, "by": login(), "via": "cli"}
        if args.decision == "reject":
            asked["reason"] = reason
    return _via_daemon_or_files(args, args.decision, asked, offline, _print_message)


async def _approve_tools_offline(
    args: argparse.Namespace, server: str, agent: str
) -> list[tuple[str, str]]:
    from companyd.config import state_backend
    from companyd.desk import ToolStore

    cfg, state_dir = _config_and_state(args)
    store = ToolStore(state_dir / "tools.sqlite", backend=state_backend(cfg))
    try:
        return await store.approve(server, agent or None)
    finally:
        await store.close()
