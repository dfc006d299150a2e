"""Event kinds of the pager itself (:mod:`companyd.alerts`, source ``alerts``)."""

from __future__ import annotations

from companyd.events._base import Event, Severity

__all__ = [
    "ResultDelivered",
    "ResultUndelivered",
    "TelegramCommandsFailing",
    "TelegramCommandsRecovered",
]


class TelegramCommandsFailing(Event):
    """Telegram commands do not reach companyd ``since`` (epoch seconds)."""

    KIND = "telegram_commands_failing"
    severity: Severity = Severity.WARNING
    since: float | None
    error: str


class TelegramCommandsRecovered(Event):
    """Telegram commands work again (they failed ``since``, last with ``error``)."""

    KIND = "telegram_commands_recovered"
    since: float | None
    error: str


class ResultDelivered(Event):
    """A routine's result was delivered ``to`` memory or a file (``where``: the entity or
    the path); Telegram and digest deliveries are the outbox's.
    """

    KIND = "result_delivered"
    severity: Severity = Severity.DEBUG
    routine: str
    run_id: str
    to: str
    where: str


class ResultUndelivered(Event):
    """A routine's result could not be delivered ``to`` memory or a file, and why."""

    KIND = "result_undelivered"
    severity: Severity = Severity.WARNING
    routine: str
    run_id: str
    to: str
    reason: str
