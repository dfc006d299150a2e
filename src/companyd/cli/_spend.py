"""``companyd spend`` and ``companyd budget``: the ledger's spend and budgets.

With a daemon running they ask it (the ``spend`` and ``budget`` operations): it reads the
ledger where it opened it at start — after a reload that renamed a PostgreSQL company (no
``state.schema``) or switched ``state.backend`` in the file, the stores in use, not what the
file now names, until the restart — and its budgets show what it blocks. Without one they
open ``spend.sqlite`` (or the company's schema) read-only, so they are safe beside a daemon
that starts meanwhile (SQLite WAL readers never block the writer); ``budget`` then shows as
*reserved* the calls of live processes. Raising a budget or resuming an agent goes through
the daemon (``companyd resume``, the control socket).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd.cli._daemon import call_daemon, company_zone, store_location
from companyd.cli._main import print_json
from companyd.errors import CompanydError, ConfigError

if TYPE_CHECKING:
    from companyd.storage import Backend

# The ledger, the config schema and the reports are imported by the path that needs them:
# with a daemon running, `spend` and `budget` print its answer (issue 31: no pydantic).

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``spend`` and ``budget`` to the ``companyd`` command line."""
    p = sub.add_parser(
        "spend",
        help="LLM spend from the ledger, grouped and totalled",
        description="LLM spend from the ledger for a period, grouped by agent, model, "
        "routine or day, with the total (offline spend is labelled simulated).",
    )
    p.add_argument(
        "--by",
        choices=("agent", "model", "routine", "day"),
        default="agent",
        help="group rows by (default: agent)",
    )
    p.add_argument(
        "--period",
        default="today",
        metavar="PERIOD",
        help="today (default), yesterday, month, YYYY-MM, YYYY-MM-DD or DATE..DATE",
    )
    _common(p)
    p.set_defaults(func=_spend)

    p = sub.add_parser(
        "budget",
        help="each budget: limit, used, reserved, remaining, reset time",
        description="Each budget (company, department, agent, routine): its limit, what is "
        "used and reserved, what remains and when it resets.",
    )
    _common(p)
    p.set_defaults(func=_budget)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--config", type=Path, help="company.yaml (default: $COMPANYD_CONFIG, …)")
    p.add_argument("--state-dir", type=Path, help="state directory holding spend.sqlite")
    p.add_argument(
        "--socket",
        type=Path,
        help="the running daemon's control socket (default: searched, as `companyd status`)",
    )


def _open_ledger(backend: Backend, state_dir: Path) -> Any:
    from companyd.spend import Ledger
    from companyd.storage import StoreAbsent

    path = state_dir / "spend.sqlite"
    if backend.kind == "postgres":
        # the company's schema on its database (docs/storage.md); read-only: no migration
        try:
            return Ledger(path, readonly=True, backend=backend)
        except StoreAbsent:
            return None  # no daemon has written this company's ledger yet
    if not path.exists():
        return None
    return Ledger(path, readonly=True)


def _spend(args: argparse.Namespace) -> int:
    return call_daemon(
        args,
        "spend",
        _print_spend,
        otherwise=lambda: _spend_from_files(args),
        by=args.by,
        period=args.period,
    )


def _print_spend(result: Mapping[str, Any]) -> int:
    from companyd.spend import format_spend_report

    print(format_spend_report(result))
    return 0


def _spend_from_files(args: argparse.Namespace) -> int:
    """``spend`` with no daemon: the ledger read where company.yaml keeps it, the file found
    without validating it where it has the usual shape (:func:`store_location`, as ``runs``:
    a company.yaml being edited does not hide what was spent), today in its time zone.
    """
    from datetime import date
    from zoneinfo import ZoneInfo

    from companyd.spend import day_key, format_spend_report, parse_period, spend_report
    from companyd.storage import SQLITE

    tzname: str | None
    try:
        cfg, state_dir, backend = store_location(args)
        tzname = cfg.timezone if cfg is not None else company_zone(args)
    except ConfigError:
        if args.state_dir is None:
            raise
        # an invalid company.yaml the line reader cannot place: the zone the daemon wrote
        state_dir, backend, tzname = Path(args.state_dir), SQLITE, None
    ledger = _open_ledger(backend, state_dir)
    try:
        if ledger is not None and tzname is None:
            tzname = ledger.get_meta("timezone")
        today = date.fromisoformat(day_key(time.time(), ZoneInfo(tzname or "UTC")))
        if ledger is None:
            try:
                first, last, label = parse_period(args.period, today)
            except ValueError as exc:
                raise CompanydError(str(exc)) from None
            report: Mapping[str, Any] = {
                "by": args.by,
                "period": {"label": label, "from": first.isoformat(), "to": last.isoformat()},
                "rows": [],
                "total": None,
                "note": (
                    f"no ledger in {backend.describe()} yet: nothing spent yet"
                    if backend.kind == "postgres"
                    else f"no ledger at {str(state_dir / 'spend.sqlite')!r}: nothing spent yet"
                ),
            }
        else:
            try:
                report = spend_report(ledger, args.by, args.period, today)
            except ValueError as exc:
                raise CompanydError(str(exc)) from None
    finally:
        if ledger is not None:
            ledger.close()
    if args.json:
        print_json(report)
    elif ledger is None:
        print(f"{report['note']} (state directory {str(state_dir)!r})")
    else:
        print(format_spend_report(report))
    return 0


def _budget(args: argparse.Namespace) -> int:
    return call_daemon(args, "budget", _print_budget, otherwise=lambda: _budget_from_files(args))


def _print_budget(result: Mapping[str, Any]) -> int:
    from companyd.spend import format_budget_report

    print(format_budget_report(result))
    return 0


def _budget_from_files(args: argparse.Namespace) -> int:
    from companyd.config import default_config_path, load_config, state_backend
    from companyd.spend import format_budget_report, read_budget_report

    # the budgets are company.yaml's: this one needs the file valid
    cfg = load_config(args.config or default_config_path())
    state_dir = cfg.state_dir(args.state_dir)
    ledger = _open_ledger(state_backend(cfg), state_dir)
    try:
        report = read_budget_report(cfg, ledger, now=time.time())
    finally:
        if ledger is not None:
            ledger.close()
    if args.json:
        print_json(report)
    else:
        print(format_budget_report(report))
    return 0
