"""``companyd notify-failure UNIT``: the alert the daemon cannot send itself (private).

Part of :mod:`companyd.alerts._service`. systemd starts ``companyd-alert@.service`` through
``OnFailure=companyd-alert@%n.service`` when the daemon died of SIGKILL, OOM, a watchdog
timeout or a start-limit; this sends one message per chat, directly, with systemd's reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from companyd._frozen import Frozen
from companyd.alerts._render import ICONS, clip
from companyd.alerts._telegram import protect, quiet_library_loggers, redact, resolve_settings
from companyd.config import AlertsSpec, CompanyConfig

__all__ = ["FallbackCompany", "fallback_company", "notify_failure", "unit_facts"]


class _FallbackSpec(Frozen):
    alerts: AlertsSpec


class FallbackCompany(Frozen):
    """What :func:`notify_failure` needs of a company.yaml that does not validate."""

    spec: _FallbackSpec
    name: str
    timezone: str


def fallback_company(text: str) -> FallbackCompany:
    """The name, time zone and alert settings of a company.yaml that does not validate as a
    whole — the daemon then exits 78 at start, which is exactly when the operator must hear
    of it. Each part that is unreadable takes its default (no Telegram settings at worst).
    """
    try:
        loaded: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    raw: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
    company: dict[str, Any] = raw["company"] if isinstance(raw.get("company"), dict) else {}
    name = company.get("name")
    name = name if isinstance(name, str) and name else "companyd"
    zone = company.get("timezone")
    zone = zone if isinstance(zone, str) else "UTC"
    try:
        ZoneInfo(zone)
    except (ValueError, KeyError, OSError):
        zone = "UTC"
    try:
        alerts = AlertsSpec.model_validate(raw.get("alerts") or {})
    except ValueError:
        alerts = AlertsSpec()
    return FallbackCompany(spec=_FallbackSpec(alerts=alerts), name=name, timezone=zone)


_RESULTS = {
    "exit-code": "exited with an error",
    "signal": "killed by a signal",
    "core-dump": "crashed (core dump)",
    "watchdog": "watchdog timeout — the event loop stopped answering",
    "timeout": "timed out starting or stopping",
    "oom-kill": "killed: out of memory",
    "start-limit-hit": "restarted too often; systemd gave up",
    "resources": "could not get its resources (directories, credentials, user)",
    "protocol": "broke the sd_notify protocol",
    "exec-condition": "start condition failed",
}


def unit_facts(unit: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """What is known about a failed unit: systemd's ``MONITOR_*`` variables (given to
    ``OnFailure=`` units since systemd 251), else ``systemctl show``. Never raises.
    """
    env = os.environ if environ is None else environ
    props: dict[str, str] = {}
    systemctl = shutil.which("systemctl", path=env.get("PATH"))
    if systemctl:
        try:
            out = subprocess.run(
                [
                    systemctl,
                    "show",
                    unit,
                    "--no-pager",
                    "--property=Result,ExecMainCode,ExecMainStatus,NRestarts,ActiveState,SubState",
                ],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
                env=dict(env),
            )
            if out.returncode == 0:
                for line in out.stdout.splitlines():
                    k, _, v = line.partition("=")
                    if v:
                        props[k.strip()] = v.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    facts: list[str] = []
    result = env.get("MONITOR_SERVICE_RESULT") or props.get("Result")
    if result:
        facts.append(f"result: {_RESULTS.get(result, result)}")
    code = env.get("MONITOR_EXIT_CODE")
    status = env.get("MONITOR_EXIT_STATUS")
    if not code and props.get("ExecMainCode") in ("1", "2", "3"):
        code = {"1": "exited", "2": "killed", "3": "dumped"}[props["ExecMainCode"]]
        status = props.get("ExecMainStatus")
    if code:
        if code == "exited":
            facts.append(f"main process: exit status {status}")
        else:
            sig = status or "?"
            if sig.isdigit():
                with contextlib.suppress(ValueError):
                    sig = signal.Signals(int(sig)).name
            facts.append(f"main process: {code} by signal {sig}")
    if props.get("NRestarts"):
        facts.append(f"restarts so far: {props['NRestarts']}")
    if props.get("ActiveState"):
        facts.append(f"now: {props['ActiveState']} ({props.get('SubState', '?')})")
    return facts


async def notify_failure(
    config: CompanyConfig | FallbackCompany,
    unit: str,
    *,
    environ: Mapping[str, str] | None = None,
    timeout: float = 20.0,
    note: str | None = None,
) -> tuple[bool, str]:
    """Send "companyd (unit UNIT) died: …" to every chat, once, directly (no outbox);
    ``note`` is added as a line (e.g. that company.yaml is invalid).

    Returns ``(sent, why)``: ``sent`` is False when Telegram is not configured or not
    reachable, and ``why`` says so (token-free).
    """
    settings = await asyncio.to_thread(resolve_settings, config.spec.alerts, environ)
    if isinstance(settings, str):
        return False, settings
    protect(settings.token)
    quiet_library_loggers()
    facts = await asyncio.to_thread(unit_facts, unit, environ)
    when = datetime.now(ZoneInfo(config.timezone))
    text = "\n".join(
        [
            f"{ICONS['critical']} companyd (unit {unit}) died"
            + (f": {facts[0].removeprefix('result: ')}" if facts else ""),
            *facts[1:],
            *([note] if note else []),
            f"{config.name} · host {socket.gethostname()} · {when:%H:%M %Z, %d %b}",
        ]
    )
    from telegram import Bot
    from telegram.error import TelegramError

    bot = Bot(
        settings.token,
        base_url=f"{settings.api_url}/bot",
        base_file_url=f"{settings.api_url}/file/bot",
    )
    sent, errors = 0, []
    try:
        async with asyncio.timeout(timeout):
            async with bot:
                for chat in settings.chat_ids:
                    try:
                        await bot.send_message(chat, clip(redact(text)))
                        sent += 1
                    except TelegramError as exc:
                        errors.append(f"chat {chat}: {type(exc).__name__}: {exc}")
    except (TelegramError, TimeoutError, OSError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    why = redact("; ".join(errors)) if errors else f"sent to {sent} chat(s)"
    return sent > 0, why
