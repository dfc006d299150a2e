"""Event kinds of the pager itself (:mod:`companyd.alerts`, source ``alerts``)."""

from __future__ import annotations

from dataclasses import dataclass

from companyd.events.base import Event, Severity

__all__ = ["TelegramCommandsFailing", "TelegramCommandsRecovered"]


@dataclass(frozen=True, kw_only=True)
class TelegramCommandsFailing(Event):
    """Telegram commands do not reach companyd ``since`` (epoch seconds)."""

    KIND = "telegram_commands_failing"
    severity: Severity = Severity.WARNING
    since: float | None
    error: str


@dataclass(frozen=True, kw_only=True)
class TelegramCommandsRecovered(Event):
    """Telegram commands work again (they failed ``since``, last with ``error``)."""

    KIND = "telegram_commands_recovered"
    since: float | None
    error: str
