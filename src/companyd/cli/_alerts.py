"""``companyd notify-failure UNIT``: tell the operator on Telegram that a systemd unit died
(``companyd-alert@.service``, started by ``OnFailure=``). The message is
:func:`companyd.alerts._notify.notify_failure`'s; this module reads company.yaml — or, when
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
from companyd.cli._main import print_json
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
    register_telegram(sub)


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
    if note is not None and config.spec.alerts.telegram is None:
        # the file did not parse far enough to show its alert settings: not "it has none"
        why = (
            "its alerts.telegram settings cannot be read from the invalid file (above); the "
            "failure is in the journal (`journalctl -u " + args.unit + "`)"
        )
    print(f"companyd notify-failure: alert about {args.unit} not sent: {why}", file=sys.stderr)
    if isinstance(resolve_settings(config.spec.alerts), str):
        return 1
    return 0


def register_telegram(sub: Any) -> None:
    """Add ``companyd telegram setup``."""
    p = sub.add_parser(
        "telegram",
        help="connect Telegram: find your chat id and send a test message",
        description="Telegram commands. `companyd telegram setup` checks the bot token, "
        "reads your chat id from a message you send to the bot, writes it where the "
        "service reads it and sends a test message.",
    )
    actions = p.add_subparsers(dest="telegram_action", metavar="ACTION", required=True)
    s = actions.add_parser(
        "setup",
        help="check the token, read your chat id, write it, send a test message",
        description="Check the bot token (getMe: the bot's name), ask you to send any "
        "message to the bot, read its chat id (getUpdates, within --wait seconds), write "
        "TELEGRAM_CHAT_ID=<id> (or the variable company.yaml's alerts.telegram.chat_ids_env "
        "names) into --env-file (other lines kept; the shipped unit reads "
        "/etc/companyd/companyd.env) or print the line to add, then send a test message. "
        "Stop a running companyd first: only one program may read a bot's messages.",
    )
    s.add_argument(
        "--config",
        type=Path,
        help="company.yaml (default: $COMPANYD_CONFIG, …); its alerts.telegram names the "
        "token's variable or credential and the Bot API",
    )
    s.add_argument(
        "--env-file",
        type=Path,
        help="the service's environment file to write the chat id into (e.g. "
        "/etc/companyd/companyd.env); without it the line is printed",
    )
    s.add_argument(
        "--wait",
        type=float,
        default=120.0,
        help="seconds to wait for your message (default: %(default)g)",
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_telegram_setup_cmd)


def _telegram_setup_cmd(args: argparse.Namespace) -> int:
    from companyd.alerts import telegram_setup

    path = args.config or default_config_path()
    config = load_config(path)
    say = (lambda _line: None) if args.json else print
    result = asyncio.run(
        telegram_setup(
            config.spec.alerts,
            company=config.name,
            env_file=args.env_file,
            wait=args.wait,
            say=say,
        )
    )
    if args.json:
        print_json(
            {
                "ok": True,
                "bot": result.bot,
                "chat_id": result.chat_id,
                "env_line": result.env_line,
                "env_file": None if result.env_file is None else str(result.env_file),
                "config_names_env": result.config_names_env,
                "test_message_id": result.test_message_id,
            }
        )
        return 0
    if result.env_file is not None:
        print(f"wrote {result.env_line} to {result.env_file}")
    else:
        print(
            f"add this line to the service's environment file (/etc/companyd/companyd.env, "
            f"read by the unit's EnvironmentFile=; docs/deploy.md): {result.env_line}"
        )
        print(f"  or, for a company run from this shell: export {result.env_line}")
    if not result.config_names_env:
        print(
            "company.yaml does not read the chat id yet: under alerts.telegram add "
            f"`chat_ids_env: {result.env_name}` (or `chat_ids: [{result.chat_id}]`)"
        )
    print(
        f"sent a test message to chat {result.chat_id} (message {result.test_message_id}): "
        "check your phone"
    )
    return 0
