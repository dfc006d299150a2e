"""Event kinds of money: budgets, the spend ledger and the API's limits
(:mod:`companyd.spend`, source ``spend``; the API refusals: ``agents``). Amounts are USD
floats in fields ending ``_usd``; ``scope`` is ``company`` or ``agent``.
"""

from __future__ import annotations

from companyd.events._base import Event, Severity, optional

__all__ = [
    "ApiKeyRefused",
    "ApiSpendLimit",
    "BudgetExhausted",
    "BudgetRaised",
    "BudgetReset",
    "BudgetThreshold",
    "SpendRunaway",
    "SpendUnanswered",
    "SpendUnsettled",
    "UnknownModelPrice",
]


class BudgetThreshold(Event):
    """Spend reached a warning ``level`` (a fraction) of a budget."""

    KIND = "budget_threshold"
    severity: Severity = Severity.WARNING
    scope: str
    agent: str | None
    period: str
    key: str
    level: float
    used_usd: float
    limit_usd: float
    resets_at: str
    message: str


class BudgetExhausted(Event):
    """A budget refused a call of ``asked_by`` (the first refusal per scope, period and
    limit).
    """

    KIND = "budget_exhausted"
    severity: Severity = Severity.WARNING
    scope: str
    agent: str | None
    asked_by: str
    period: str
    key: str
    limit_usd: float
    used_usd: float
    needed_usd: float
    remaining_usd: float
    resets_at: str
    reason: str


class ApiSpendLimit(Event):
    """The Anthropic organisation's spend limit refuses calls."""

    KIND = "api_spend_limit"
    severity: Severity = Severity.CRITICAL
    message: str
    repeats_suppressed: int
    action: str


class ApiKeyRefused(Event):
    """The API key was refused (HTTP 401); ``paused``: the agents it paused."""

    KIND = "api_key_refused"
    severity: Severity = Severity.CRITICAL
    message: str
    paused: list[str]


class SpendRunaway(Event):
    """An agent spends ``factor`` times faster than usual."""

    KIND = "spend_runaway"
    severity: Severity = Severity.WARNING
    agent: str
    window_seconds: float
    window_spend_usd: float
    rate_usd_per_min: float
    usual_usd_per_min: float
    factor: float
    basis: str
    message: str


class UnknownModelPrice(Event):
    """A model is not in the price table; ``priced_as`` is the rate charged instead."""

    KIND = "unknown_model_price"
    severity: Severity = Severity.WARNING
    model: str
    priced_as: dict[str, float]
    message: str


class BudgetReset(Event):
    """A budget period rolled over (``company``: whether it unblocked the company)."""

    KIND = "budget_reset"
    period: str
    previous: str
    current: str
    agents: list[str]
    company: bool | None = optional()


class BudgetRaised(Event):
    """The operator raised today's budget of the company or an agent by ``usd``."""

    KIND = "budget_raised"
    scope: str
    agent: str | None
    day: str
    usd: float
    raised_today_usd: float


class SpendUnsettled(Event):
    """Calls were in flight when companyd last stopped; up to ``worst_case_usd`` unrecorded."""

    KIND = "spend_unsettled"
    severity: Severity = Severity.WARNING
    calls: int
    worst_case_usd: float
    agents: list[str]
    runs: list[str]
    message: str


class SpendUnanswered(Event):
    """A call got no answer and may have been billed (with today's count and total)."""

    KIND = "spend_unanswered"
    severity: Severity = Severity.WARNING
    agent: str
    model: str
    run_id: str | None
    routine: str | None
    worst_case_usd: float
    reason: str
    calls: int
    total_worst_case_usd: float
    day: str
    message: str
