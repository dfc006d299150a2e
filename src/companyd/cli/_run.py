"""``companyd run``: start the whole company in the foreground (what systemd starts).

The command checks everything a restart could not fix before it starts anything — the
config, the control group, the state directory, the model backend, the locks — and exits
78 (EX_CONFIG: systemd does not restart-loop on it) or 75 (another daemon holds the lock)
with one line that says what to do; then it runs :class:`~companyd.daemon._main.Daemon`
until SIGTERM/SIGINT. The daemon's modules are imported once the locks are held: a refusal
costs the config's and the locks' imports only.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from companyd._fs import make_dirs
from companyd.clock import Clock, ScaledClock
from companyd.config import default_config_path, load_config
from companyd.daemon import (
    CompanyLock,
    StateLock,
    add_logging_arguments,
    make_backend,
    remember_early_sighup,
    setup_logging,
    socket_path,
)
from companyd.errors import EX_CONFIG, EX_TEMPFAIL, CompanydError, ConfigError, StateLocked
from companyd.llm import ModelUnavailable

# The daemon (its composition root, every service, their SDKs), the control socket's group
# check and the upgrade step are imported where they are used: a `run` that refuses to start
# (78, 75) does not pay for them (tests/test_cli_imports.py).

__all__ = ["register"]

log = logging.getLogger("companyd.daemon")  # the daemon's log lines, as before it starts


def register(sub: Any) -> None:
    """Add ``companyd run`` to the CLI."""
    p = sub.add_parser(
        "run",
        help="run the company in the foreground (what systemd starts)",
        description="Start the whole supervision tree — memory, spend ledger, alerts, "
        "agents, scheduler, control socket — and run until SIGTERM/SIGINT. SIGHUP reloads "
        "company.yaml. Logs go to stderr (journald under systemd).",
    )
    p.add_argument(
        "--config", type=Path, default=None, help="company.yaml (default: ./company.yaml)"
    )
    p.add_argument("--state-dir", type=Path, default=None, help="state directory")
    p.add_argument(
        "--offline",
        action="store_true",
        help="use the built-in offline model instead of Claude (no network, no API key)",
    )
    p.add_argument(
        "--control-group",
        default=None,
        help="make the control socket 0660 owned by this group (static User=/Group= only)",
    )
    add_logging_arguments(p)
    # the cyclic GC stays paused until the company is up (Daemon.main resumes it):
    # companyd._heap.collection_paused
    p.set_defaults(func=_run_command, gc_paused_until_up=True)


def _run_command(args: argparse.Namespace) -> int:
    handle = setup_logging(level=args.log_level, fmt=args.log_format)
    # Until the event loop takes SIGHUP over, its default action would end the process —
    # a death systemd counts as clean, so Restart=on-failure would not bring it back.
    # Remember the request instead; the daemon reloads once it is up.
    signal.signal(signal.SIGHUP, remember_early_sighup)
    try:
        path = args.config or default_config_path()
        try:
            config = load_config(path)
        except ConfigError as exc:
            for issue in exc.issues:
                print(issue, file=sys.stderr)
            print(
                f"companyd: {path} is invalid ({len(exc.issues)} problem(s)); fix it and start "
                "again (exit 78: systemd will not restart-loop on it)",
                file=sys.stderr,
            )
            return EX_CONFIG
        for w in config.warnings:
            log.warning("%s", w)
        if args.control_group is not None:
            from companyd.daemon import resolve_group

            try:  # a typo here cannot be fixed by restarting: say so now, with 78
                resolve_group(args.control_group)
            except CompanydError as exc:
                print(f"companyd: {exc} (exit 78)", file=sys.stderr)
                return EX_CONFIG
        state_dir = config.state_dir(args.state_dir)
        # Everything the daemon creates holds prompts, answers, memory or spend: private
        # whatever umask it was started with (each store also sets its modes explicitly).
        os.umask(os.umask(0o077) | 0o077)
        try:
            scaled = ScaledClock.from_env()
        except ValueError as exc:
            print(f"companyd: {exc}", file=sys.stderr)
            return EX_CONFIG
        if scaled is not None:
            log.warning(
                "benchmark mode: time runs %g× faster than real time (COMPANYD_TIME_SCALE); "
                "never use this in production",
                scaled.scale,
            )
        clock: Clock | None = scaled
        if args.offline:
            log.warning(
                "OFFLINE: answers come from the built-in offline model, not Claude (no network, "
                "no cost); runs, logs and status are labelled offline"
            )
        try:
            backend = make_backend(
                config, offline=args.offline, redact=handle.redactor.add, clock=clock
            )
        except ModelUnavailable as exc:
            print(f"companyd: {exc}", file=sys.stderr)
            print(
                "companyd: to run without Claude, start it with --offline (the built-in "
                "offline model: no network, no cost)",
                file=sys.stderr,
            )
            return EX_CONFIG
        try:  # one daemon per company.yaml, whatever its state directory
            claim = CompanyLock.acquire(config.path, control_socket=socket_path(state_dir))
        except StateLocked as exc:
            print(f"companyd: {exc}", file=sys.stderr)
            return EX_TEMPFAIL
        # the state directory is made once the company is ours: a second `run` of a company
        # already running (exit 75) leaves nothing behind
        try:
            make_dirs(state_dir)
        except OSError as exc:
            print(
                f"companyd: cannot use the state directory {str(state_dir)!r}: "
                f"{exc.strerror or exc}; give a directory the daemon's user can create and "
                "write with --state-dir (or company.yaml's state_dir) (exit 78)",
                file=sys.stderr,
            )
            claim.release()
            return EX_CONFIG
        try:
            lock = StateLock.acquire(state_dir)
        except StateLocked as exc:
            claim.release()
            print(f"companyd: {exc}", file=sys.stderr)
            return EX_TEMPFAIL
        except OSError as exc:
            claim.release()
            print(
                f"companyd: cannot lock the state directory {str(state_dir)!r}: "
                f"{exc.strerror or exc} ({exc.filename}); the daemon's user must be able to "
                "write there — fix its owner or mode, or choose another --state-dir (exit 78)",
                file=sys.stderr,
            )
            return EX_CONFIG
        with claim, lock:
            from companyd.daemon import Daemon
            from companyd.ops import UpgradeRefused, prepare_upgrade

            try:  # before any store opens (and migrates): refuse a newer state, back up
                prepare_upgrade(config, state_dir)
            except UpgradeRefused as exc:
                print(f"companyd: {exc} (exit 78)", file=sys.stderr)
                log.critical("the company cannot start: %s", exc)
                return EX_CONFIG
            daemon = Daemon(
                config,
                state_dir,
                backend=backend,
                clock=clock,
                offline=args.offline,
                control_group=args.control_group,
                redact=handle.redactor.add,
            )
            return asyncio.run(daemon.main())
    finally:
        handle.close()
