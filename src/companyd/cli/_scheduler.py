"""``companyd jobs``: routines, their history, and firing one now.

* ``companyd jobs [--json]`` — each routine's schedule, next fire, last outcome and 7-day
  success rate;
* ``companyd jobs history ROUTINE [--limit N] [--json]`` — its latest fires with outcome,
  reason, cost and run id;
* ``companyd jobs run ROUTINE`` — fire it now (inside the running daemon).

``jobs`` and ``history`` ask the running daemon when one runs (its live schedule: what a
reload added or removed, even while company.yaml on disk is being edited or is broken; its
history where its stores are — after a rename on PostgreSQL the schema it opened at start,
not the new name's, until the restart); without one, they read
``<state_dir>/routines.sqlite`` directly (read-only; safe beside a running
daemon thanks to WAL), or with ``state.backend: postgres`` the company's schema (read-only:
nothing is created or migrated). ``run`` needs the daemon, because the run happens inside it under
its budgets; it goes through the control socket (op ``run_job``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd.cli._daemon import call_daemon, company_zone, running_daemon
from companyd.cli._main import print_json
from companyd.errors import DaemonNotRunning

if TYPE_CHECKING:
    from companyd.scheduler import RoutineNotFound
    from companyd.storage import Backend

# The handlers import config, SQLite and APScheduler-backed modules when they run, so
# building the top-level parser (every `companyd` invocation) stays cheap.
if TYPE_CHECKING:
    from companyd.config import CompanyConfig
    from companyd.scheduler import RoutineNotFound

__all__ = ["register"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def _common(p: argparse.ArgumentParser, *, nested: bool) -> None:
    # Nested parsers default to SUPPRESS so `companyd jobs --json history x` and
    # `companyd jobs history x --json` both work without one overwriting the other.
    default: Any = argparse.SUPPRESS if nested else None
    p.add_argument(
        "--config",
        type=Path,
        default=default,
        help="company.yaml (default: $COMPANYD_CONFIG or ./company.yaml)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=default,
        help="state directory (default: $STATE_DIRECTORY, company.yaml's state_dir, else "
        "state next to company.yaml)",
    )
    p.add_argument(
        "--socket",
        type=Path,
        default=default,
        help="the running daemon's control socket (default: searched, as `companyd status`)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if nested else False,
        help="machine-readable output",
    )


def register(sub: Any) -> None:
    """Add ``jobs`` (with ``history`` and ``run``) to the top-level subparsers."""
    p = sub.add_parser(
        "jobs",
        help="routines: schedule, next fire, last outcome, 7-day success rate",
        description="Show each routine's schedule, next fire, last outcome and 7-day success "
        "rate (read from the state directory; no daemon needed).",
    )
    _common(p, nested=False)
    p.set_defaults(func=_jobs)
    jsub = p.add_subparsers(dest="jobs_command", metavar="ACTION")

    h = jsub.add_parser(
        "history",
        help="the latest fires of one routine, newest first",
        description="The latest fires of one routine, newest first: outcome, cost, run and "
        "the reason of every non-success.",
    )
    h.add_argument("routine", help="routine name (a key under 'routines:' in company.yaml)")
    h.add_argument("--limit", type=_positive, default=20, help="how many fires (default 20)")
    _common(h, nested=True)
    h.set_defaults(func=_history)

    r = jsub.add_parser(
        "run",
        help="fire a routine now (needs a running daemon)",
        description="Fire a routine now, as its schedule would (needs a running daemon), and "
        "wait for the run to end. It answers as soon as the run waits for you instead — its "
        "result for your approval (`approval: required`), a tool call for your approval or a "
        "question for your answer — saying where to decide (exit 0; --json: state "
        "awaiting_approval or waiting_for_founder, and approval_item).",
    )
    r.add_argument("routine", help="routine name")
    _common(r, nested=True)
    r.set_defaults(func=_run)

    u = jsub.add_parser(
        "resume",
        help="let a routine paused by pause_after_failures fire again (needs a running daemon)",
        description="Let a routine that pause_after_failures stopped fire again, from its next "
        "fire time (needs a running daemon).",
    )
    u.add_argument("routine", help="routine name")
    _common(u, nested=True)
    u.set_defaults(func=_resume)


def _load(args: argparse.Namespace) -> tuple[CompanyConfig, Path]:
    from companyd.config import default_config_path, load_config
    from companyd.scheduler import DB_NAME

    cfg = load_config(args.config or default_config_path())
    return cfg, cfg.state_dir(args.state_dir) / DB_NAME


def _where(path: Path, backend: Backend) -> str:
    """Where the routine history is read from, for the operator."""
    return str(path) if backend.kind == "sqlite" else f"postgres schema {backend.schema!r}"


def _jobs(args: argparse.Namespace) -> int:
    return call_daemon(
        args,
        "jobs",
        lambda result: _print_live_jobs(result, company_zone(args)),
        otherwise=lambda: _jobs_from_files(args),
    )


def _print_live_jobs(result: dict[str, Any], tz: str) -> int:
    """The daemon's table; "in 3m", "4m ago" counted from the daemon's own now (``generated``),
    the clock its next fires are on (a time-scaled benchmark daemon's too).
    """
    from datetime import datetime

    from companyd.scheduler import format_jobs_result

    generated = result.get("generated")
    now = datetime.fromisoformat(generated).timestamp() if generated else time.time()
    print(format_jobs_result(result, now, tz))
    return 0


def _jobs_from_files(args: argparse.Namespace) -> int:
    from companyd.clock import utc_from_ts
    from companyd.config import state_backend
    from companyd.scheduler import format_jobs, read_jobs

    cfg, path = _load(args)
    backend = state_backend(cfg)
    now = time.time()
    # no daemon runs for this state directory (SQLite): a routine's fire still open in the
    # history is its last, read as `jobs history` reads it; a shared history: as stored
    ended = (lambda ids: _ended(args, ids, None)) if backend.kind == "sqlite" else None
    views, found = read_jobs(cfg, path, backend, now, ended)
    if args.json:
        print_json(
            {
                "live": False,
                "generated": utc_from_ts(now).isoformat(),
                "history": _where(path, backend),
                "routines": [v.to_dict() for v in views],
            }
        )
        return 0
    print(format_jobs(views, now, daemon=False, tz=cfg.timezone))
    if not found and backend.kind == "sqlite":
        print(f"(no routine history yet: {path} does not exist — it appears on first start)")
    elif not found:
        print(f"(no routine history yet in {_where(path, backend)} — it appears on first start)")
    return 0


def _history(args: argparse.Namespace) -> int:
    return call_daemon(
        args,
        "job_history",
        lambda result: _print_live_history(args, result),
        otherwise=lambda: _history_from_files(args),
        routine=args.routine,
        limit=args.limit,
    )


def _print_live_history(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """The daemon's answer: the routine as it runs it, its fires; times in company.yaml's zone
    (read off the file's text, as ``jobs``: no schema loaded, issue 31).
    """
    from companyd.scheduler import format_history, format_history_result

    if "schedule" in result:
        print(format_history_result(result, company_zone(args)))
        return 0
    # a daemon started before its answer named the routine's agent and schedule (upgraded
    # since, not yet restarted): the heading from company.yaml, as before
    from companyd.config import default_config_path, load_config
    from companyd.errors import ConfigError
    from companyd.scheduler import FireRecord

    try:
        cfg: CompanyConfig | None = load_config(args.config or default_config_path())
    except ConfigError:
        cfg = None
    routine = cfg.routines.get(result["routine"]) if cfg is not None else None
    records = [FireRecord.from_dict(f) for f in result["fires"]]
    tz = cfg.timezone if cfg is not None else None
    print(format_history(routine, result["routine"], records, tz))
    return 0


def _history_from_files(args: argparse.Namespace) -> int:
    from companyd.config import state_backend
    from companyd.scheduler import format_history, read_fires, read_fires_stopped

    cfg, path = _load(args)
    backend = state_backend(cfg)
    if backend.kind == "sqlite":
        # no daemon runs for this state directory: a fire still open in the history is not
        # running — it reads as the journal's outcome or as interrupted (nothing written)
        records = read_fires_stopped(
            path,
            backend,
            args.routine,
            args.limit,
            cfg.timezone,
            lambda ids: _ended(args, ids, args.routine),
        )
    else:  # a shared history: another node may be running the open fires
        records = read_fires(path, backend, args.routine, args.limit)
    routine = cfg.routines.get(args.routine)
    if routine is None and not records:
        raise _unknown(cfg, args.routine)
    if args.json:
        print_json({"routine": args.routine, "fires": [r.to_dict() for r in records]})
    else:
        print(format_history(routine, args.routine, records, cfg.timezone))
    return 0


def _ended(
    args: argparse.Namespace, task_ids: Sequence[str], routine: str | None
) -> dict[str, dict[str, Any]]:
    """The latest run the journal ended of each of ``task_ids`` (among the 50 latest ended
    runs of ``routine``, None: of every routine — those that ended as the daemon stopped
    are the newest; none: no journal yet), as ``companyd runs`` rows.
    """
    from companyd.cli._roles import _journal_read

    if not task_ids:
        return {}
    rows = _journal_read(
        args,
        lambda j, db: j.list_runs(db, routine=routine, limit=50, finished=True),
        list,
    )
    ended: dict[str, dict[str, Any]] = {}
    for row in rows:  # newest first: the first of a task is its latest
        if row["task_id"] in task_ids:
            ended.setdefault(row["task_id"], dict(row))
    return ended


def _run(args: argparse.Namespace) -> int:
    from companyd.cli._roles import _print_answer
    from companyd.scheduler import RoutineNotFound

    def show(result: dict[str, Any]) -> int:
        if result.get("state", "ended") == "ended":
            return _print_answer(result)
        # started, and waiting for the founder: a success that is not over yet (exit 0)
        answer = str(result.get("answer") or "").strip()
        if answer:
            print(answer)
        print(str(result.get("message") or ""))
        return 0

    if running_daemon(args) is not None:
        # the daemon checks the routine against the company.yaml it runs, not the file
        return call_daemon(args, "run_job", show, routine=args.routine)
    cfg, _ = _load(args)
    routine = cfg.routines.get(args.routine)
    if routine is None:
        raise _unknown(cfg, args.routine)
    if not routine.enabled:
        raise RoutineNotFound(
            f"routine {args.routine!r} is disabled in company.yaml; set 'enabled: true' and "
            "reload the daemon to run it"
        )
    raise DaemonNotRunning(
        f"`companyd jobs run {args.routine}` needs a running daemon: the run happens inside "
        "it, under its budgets, and none answers for this state directory. Start it "
        "(`companyd run`, or `systemctl start companyd`), or pass --state-dir of the one "
        "that runs"
    )


def _resume(args: argparse.Namespace) -> int:
    def show(result: dict[str, Any]) -> int:
        print(str(result.get("message") or f"resumed routine {args.routine}"))
        return 0

    if running_daemon(args) is None:
        raise DaemonNotRunning(
            f"`companyd jobs resume {args.routine}` needs a running daemon (it resumes the "
            "routine in its scheduler); start it (`companyd run`, or `systemctl start "
            "companyd`), or pass --state-dir of the one that runs"
        )
    return call_daemon(args, "resume_job", show, routine=args.routine)


def _unknown(cfg: CompanyConfig, name: str) -> RoutineNotFound:
    from companyd.scheduler import RoutineNotFound

    known = list(cfg.routines)
    import difflib  # here: only a misspelt name needs it

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return RoutineNotFound(
        f"no routine {name!r} in company.yaml or in the history; {hint}routines: "
        f"{', '.join(known) or '(none)'}"
    )
