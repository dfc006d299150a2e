"""``companyd notify-failure UNIT``: tell the operator on Telegram that a systemd unit died
(``companyd-alert@.service``, started by ``OnFailure=``). The message is
:func:`companyd.alerts.notify.notify_failure`'s; this module reads company.yaml — or, when
it is invalid, the alert settings that can still be read from it — and prints the outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from companyd._fs import read_regular_file
from companyd.alerts import FallbackCompany, fallback_company, notify_failure, resolve_settings
from companyd.config import CompanyConfig, default_config_path, load_config
from companyd.errors import ConfigError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``companyd notify-failure`` to the command line."""
    p = sub.add_parser(
        "notify-failure",
        help="tell the operator on Telegram that a systemd unit failed (for OnFailure=)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Send one Telegram message saying that UNIT died, with systemd's reason when\n"
            "available (MONITOR_* variables, else `systemctl show`). Meant for\n"
            "companyd-alert@.service, started by OnFailure=companyd-alert@%n.service\n"
            "(and companyd-instance-alert@.service, for companyd@NAME instances).\n"
            "Exits 0 when sent or when Telegram is unreachable (the reason is printed),\n"
            "1 when company.yaml has no usable Telegram settings."
        ),
    )
    p.add_argument("unit", help="the unit that failed, e.g. companyd.service")
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="company.yaml (default: $COMPANYD_CONFIG, "
        "$CONFIGURATION_DIRECTORY/company.yaml, ./company.yaml)",
    )
    p.set_defaults(func=_notify_failure_cmd)


def _notify_failure_cmd(args: argparse.Namespace) -> int:
    path = args.config or default_config_path()
    config: CompanyConfig | FallbackCompany
    note = None
    try:
        config = load_config(path)
    except ConfigError as exc:
        # An invalid company.yaml is a reason the daemon died (exit 78 at start): say so,
        # with the alert settings that can still be read, rather than stay silent.
        try:
            # never a plain read: the path may be a FIFO that has no writer
            text = read_regular_file(Path(path), 10 * 1024 * 1024).decode(errors="replace")
        except (OSError, ValueError):
            text = ""
        config = fallback_company(text)
        first = str(exc.issues[0]) if exc.issues else str(exc)
        more = f" (and {len(exc.issues) - 1} more)" if len(exc.issues) > 1 else ""
        unit = args.unit.removesuffix(".service")  # companyd, or an instance companyd@NAME
        note = f"company.yaml is invalid: {first}{more}; fix it, then `systemctl restart {unit}`"
        print(f"companyd notify-failure: {note}", file=sys.stderr)
    sent, why = asyncio.run(notify_failure(config, args.unit, note=note))
    if sent:
        print(f"companyd notify-failure: {why}")
        return 0
    print(f"companyd notify-failure: alert about {args.unit} not sent: {why}", file=sys.stderr)
    if isinstance(resolve_settings(config.spec.alerts), str):
        return 1
    return 0
