"""The operator's pager: Telegram alerts from the event stream, and commands from the phone.

``service`` (the supervised child composing the rest), ``policy`` (routing, severities,
quiet hours), ``coalesce`` (the alert book: events → alerts, coalescing, the digest),
``sender`` (delivery and backoff), ``link`` (the bot, polling for commands), ``commands``
(commands and buttons, replies in a result's thread), ``deliver`` (a routine's result →
its deliveries), ``digest`` (the daily results digest), ``outbox`` (the durable alert
store and the threads), ``render`` /
``render_kinds`` / ``render_status`` / ``values`` (event or Admin result → message text
and buttons), ``ops`` (operator commands and buttons → Admin calls), ``telegram`` (the Bot
API connection), ``notify`` (``companyd notify-failure`` for systemd's OnFailure=),
``_outbound`` (the durable queue for targets other than Telegram, and their ``Target``
interface) and ``_webhooks`` (signed webhooks out; docs/webhooks.md).
Layer 5; the only package that imports ``telegram``. See docs/alerts.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.alerts._check import check_telegram
    from companyd.alerts._notify import FallbackCompany, fallback_company, notify_failure
    from companyd.alerts._probes import TargetProbe, probe_channel, probe_webhook
    from companyd.alerts._service import AlertService
    from companyd.alerts._setup import SetupFailed, telegram_setup
    from companyd.alerts._telegram import resolve_settings


__all__ = [
    "STORE_STEPS",
    "AlertService",
    "FallbackCompany",
    "SetupFailed",
    "TargetProbe",
    "check_telegram",
    "fallback_company",
    "notify_failure",
    "probe_channel",
    "probe_webhook",
    "resolve_settings",
    "telegram_setup",
]


_HOMES: dict[str, str] = {
    "SetupFailed": "companyd.alerts._setup",
    "telegram_setup": "companyd.alerts._setup",
    "STORE_STEPS": "companyd.alerts._outbox",
    "AlertService": "companyd.alerts._service",
    "FallbackCompany": "companyd.alerts._notify",
    "check_telegram": "companyd.alerts._check",
    "fallback_company": "companyd.alerts._notify",
    "notify_failure": "companyd.alerts._notify",
    "resolve_settings": "companyd.alerts._telegram",
    "TargetProbe": "companyd.alerts._probes",
    "probe_channel": "companyd.alerts._probes",
    "probe_webhook": "companyd.alerts._probes",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
