"""``companyd doctor``: one line per check — ok, warning, problem or skipped — with what to do.

The checks are :mod:`companyd.ops._doctor`'s. When a daemon runs (found as ``status`` finds
it), doctor also asks it which company.yaml it loaded and when, to tell whether the file
changed since. Exit 0 when no check is a problem, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from companyd.cli._main import print_json
from companyd.config import default_config_path
from companyd.daemon import SYSTEMD_LAYOUT, find_daemon
from companyd.errors import CompanydError
from companyd.ops import DoctorReport, RunningDaemon, run_doctor

__all__ = ["register"]

_MARK = {"ok": "ok", "warning": "warning", "problem": "PROBLEM", "skipped": "skipped"}


def register(sub: Any) -> None:
    """Add ``doctor``."""
    p = sub.add_parser(
        "doctor",
        help="check the set-up: config, secrets, API key, Telegram, state, disk, memory, "
        "clock, systemd",
        description="Check that everything is set up right, one line per check (ok, "
        "warning, PROBLEM, skipped), each problem with what to do. --fix applies only safe, "
        "local fixes (the state directory's permissions, a missing state directory) and "
        "says what it changed. Exit 0 when nothing is a problem.",
    )
    p.add_argument("--config", type=Path, help="company.yaml (default: $COMPANYD_CONFIG, …)")
    p.add_argument("--state-dir", type=Path, help="the state directory (default: as `run`)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--fix", action="store_true", help="tighten permissions, create a missing state dir"
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="skip the checks that need the network (API key, Telegram, test sends)",
    )
    p.add_argument(
        "--send-test",
        action="store_true",
        help="send a test message to each of alerts.channels and a signed test event to "
        "each of alerts.webhooks, and report what each answered",
    )
    p.set_defaults(func=_doctor)


def _running(config: Path, state_dir: Path | None) -> RunningDaemon | None:
    try:
        status = find_daemon(config=config, state_dir=state_dir, timeout=5.0).call("status")
    except CompanydError:
        return None
    d = status.get("daemon") or {}
    try:
        return RunningDaemon(
            config=str(d["config"]),
            config_loaded_at=float(d["config_loaded_at"]),
            state_dir=str(d["state_dir"]),
            restart_required=tuple(str(s) for s in d.get("restart_required") or ()),
            config_sha256=str(d["config_sha256"]) if d.get("config_sha256") else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _unit_state_dir(config: Path) -> Path | None:
    """The state directory the shipped units give a company.yaml in their place
    (``/etc/companyd/company.yaml`` → ``/var/lib/companyd``; an instance's
    ``/etc/companyd/NAME/company.yaml`` → ``/var/lib/companyd/NAME``), else None.
    """
    instance = SYSTEMD_LAYOUT.instance_of(config)
    if instance is not None:
        return SYSTEMD_LAYOUT.state_dir(instance)
    single = SYSTEMD_LAYOUT.config_root / "company.yaml"
    for path in (Path(os.path.abspath(config)), Path(os.path.realpath(config))):
        if path == single:
            return SYSTEMD_LAYOUT.state_root
    return None


def _unit_name(config: Path) -> str | None:
    """The shipped unit that runs a company.yaml in its place (``companyd.service`` for
    ``/etc/companyd/company.yaml``, ``companyd@NAME.service`` for an instance's), else None.
    """
    instance = SYSTEMD_LAYOUT.instance_of(config)
    if instance is not None:
        return f"companyd@{instance}.service"
    return "companyd.service" if _unit_state_dir(config) is not None else None


def _doctor(args: argparse.Namespace) -> int:
    config = args.config or default_config_path()
    running = _running(config, args.state_dir)
    # the state directory checked is the one the daemon uses: the running daemon's, else
    # the unit's for a company.yaml where the units keep it
    state_dir = args.state_dir
    if state_dir is None and running is not None:
        state_dir = Path(running.state_dir)
    report: DoctorReport = asyncio.run(
        run_doctor(
            config,
            state_dir=state_dir,
            offline=args.offline,
            fix=args.fix,
            running=running,
            send_test=args.send_test,
            unit_state_dir=_unit_state_dir(config),
            unit=_unit_name(config),
        )
    )
    if args.json:
        print_json(report.to_dict())
        return 0 if report.ok else 1
    width = max(len(c.name) for c in report.checks)
    for c in report.checks:
        print(f"{_MARK[c.status]:<8} {c.name:<{width}}  {c.summary}")
        if c.fix and c.status in ("warning", "problem"):
            print(f"{'':<8} {'':<{width}}  → {c.fix}")
        for change in c.changed:
            print(f"{'':<8} {'':<{width}}  fixed: {change}")
    problems = sum(1 for c in report.checks if c.status == "problem")
    warnings = sum(1 for c in report.checks if c.status == "warning")
    if problems:
        print(f"{problems} problem(s), {warnings} warning(s)")
    else:
        print(f"no problems ({warnings} warning(s))")
    return 0 if report.ok else 1
