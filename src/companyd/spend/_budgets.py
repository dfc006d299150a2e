"""Budget limits from company.yaml and the budget report both the daemon and the CLI show.

A *scope* is ``"company"`` or ``"agent:<slug>"``; each scope has up to two limits, daily and
monthly. A one-off raise for today adds to both of today's limits of its scope (so the
extra money can really be spent today, even when the month is nearly used up) and expires
with the day.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from companyd._frozen import Frozen
from companyd.admin import BudgetRow, BudgetsData
from companyd.config import BudgetSpec, CompanyConfig
from companyd.spend._ledger import Ledger, from_pusd, to_pusd
from companyd.spend._periods import day_start, next_day_start, next_month_start, period_keys

__all__ = [
    "BudgetLimit",
    "agent_scope",
    "budget_report",
    "limits_for",
    "resets_at",
    "scope_label",
    "usd",
]

COMPANY = "company"


def agent_scope(agent: str) -> str:
    """The scope name of an agent's own budget."""
    return f"agent:{agent}"


def scope_label(scope: str) -> str:
    """``company`` or ``agent cfo``, for messages."""
    return "company" if scope == COMPANY else f"agent {scope.removeprefix('agent:')!r}"


def usd(value: Decimal | int) -> float:
    """A money figure for reports and events: picodollars (int) or USD (Decimal) → USD
    rounded to a millionth of a dollar.
    """
    d = from_pusd(value) if isinstance(value, int) else value
    return float(round(d, 6))


class BudgetLimit(Frozen):
    """One ceiling: a scope's daily or monthly budget.

    Attributes:
        scope: ``"company"`` or ``"agent:<slug>"``.
        agent: the agent's slug, or None for the company.
        period: ``"day"`` or ``"month"``.
        limit_pusd: the configured ceiling in picodollars (before any raise).
        warn_at: fractions of the limit at which a threshold event is published.
    """

    scope: str
    agent: str | None
    period: str
    limit_pusd: int
    warn_at: tuple[float, ...]


def _from_spec(spec: BudgetSpec | None, scope: str, agent: str | None) -> list[BudgetLimit]:
    if spec is None or spec.unlimited:
        return []
    out = []
    for period, value in (("day", spec.daily_usd), ("month", spec.monthly_usd)):
        if value is not None:
            out.append(
                BudgetLimit(
                    scope=scope,
                    agent=agent,
                    period=period,
                    limit_pusd=to_pusd(Decimal(str(value))),
                    warn_at=spec.warn_at,
                )
            )
    return out


def limits_for(config: CompanyConfig, agent: str | None) -> list[BudgetLimit]:
    """The company's limits, then ``agent``'s own (none for an agent without a budget)."""
    limits = _from_spec(config.spec.company.budget, COMPANY, None)
    if agent is not None and agent in config.agents:
        limits += _from_spec(config.agents[agent].budget, agent_scope(agent), agent)
    return limits


def resets_at(period: str, now: float, tz: ZoneInfo) -> datetime:
    """When a ``day`` or ``month`` budget next resets (aware, in ``tz``)."""
    ts = next_day_start(now, tz) if period == "day" else next_month_start(now, tz)
    return datetime.fromtimestamp(ts, tz=tz)


def budget_report(
    config: CompanyConfig,
    *,
    now: float,
    used: Mapping[tuple[str, str], int],
    reserved: Mapping[str, int],
    raises: Mapping[str, int],
    blocked: Mapping[tuple[str, str], str] | None = None,
) -> BudgetsData:
    """Each budget with its limit, used, reserved and remaining money and when it resets.

    Args:
        config: the company.yaml whose budgets (and timezone) are reported.
        now: the moment to report for (selects today's and this month's keys).
        used: ``(scope, period key)`` → picodollars settled.
        reserved: scope → picodollars reserved by calls in flight.
        raises: scope → picodollars of today's one-off raises.
        blocked: ``(scope, period key)`` → why reservations are refused.
    """
    tz = ZoneInfo(config.timezone)
    day, month = period_keys(now, tz)
    blocked = blocked or {}
    rows: list[BudgetRow] = []
    for agent in (None, *config.agents):
        limits = limits_for(config, agent)
        own = [lim for lim in limits if lim.agent == agent]
        if not own:
            scope = COMPANY if agent is None else agent_scope(agent)
            rows.append(
                {
                    "scope": scope,
                    "agent": agent,
                    "period": None,
                    "limit_usd": None,
                    "used_today_usd": usd(used.get((scope, day), 0)),
                    "used_month_usd": usd(used.get((scope, month), 0)),
                    "reserved_usd": usd(reserved.get(scope, 0)),
                    "note": (
                        "unlimited (budget: unlimited)"
                        if agent is None
                        else "no budget of its own; only the company budget applies"
                    ),
                }
            )
            continue
        for lim in own:
            key = day if lim.period == "day" else month
            raised = raises.get(lim.scope, 0)
            limit = lim.limit_pusd + raised
            u = used.get((lim.scope, key), 0)
            r = reserved.get(lim.scope, 0)
            rows.append(
                {
                    "scope": lim.scope,
                    "agent": lim.agent,
                    "period": lim.period,
                    "key": key,
                    "limit_usd": usd(limit),
                    "configured_usd": usd(lim.limit_pusd),
                    "raised_today_usd": usd(raised),
                    "used_usd": usd(u),
                    # both periods on every row: what the scope used whichever budgets it
                    # has (status shows an agent's day and month from one row)
                    "used_today_usd": usd(used.get((lim.scope, day), 0)),
                    "used_month_usd": usd(used.get((lim.scope, month), 0)),
                    "reserved_usd": usd(r),
                    "remaining_usd": usd(max(0, limit - u - r)),
                    "used_fraction": round(u / limit, 4) if limit else 1.0,
                    "warn_at": list(lim.warn_at),
                    "resets_at": resets_at(lim.period, now, tz).isoformat(),
                    "blocked": blocked.get((lim.scope, key)),
                }
            )
    return {
        "timezone": config.timezone,
        "now": datetime.fromtimestamp(now, tz=tz).isoformat(),
        "day": day,
        "month": month,
        "budgets": rows,
    }


def read_budget_report(config: CompanyConfig, ledger: Ledger | None, *, now: float) -> BudgetsData:
    """:func:`budget_report` from a ledger opened by a reader beside the daemon (the CLI
    without a daemon, a standby): settled spend and raises as stored, and as reserved the
    rows of calls in flight — of processes alive on this host for a file ledger (a dead
    process's rows are dropped by the daemon on its next start), every row of a shared
    PostgreSQL ledger (the leader may run elsewhere). ``ledger`` None: nothing spent yet.
    """
    tz = ZoneInfo(config.timezone)
    day, month = period_keys(now, tz)
    used: dict[tuple[str, str], int] = {}
    reserved: dict[str, int] = {}
    raises: dict[str, int] = {}
    if ledger is not None:
        for key in (day, month):
            used.update({(s, key): v for s, v in ledger.used(key).items()})
        raises = ledger.raises(day, day_start(day, tz))
        for r in ledger.inflight(alive_only=True):
            for scope in ("company", agent_scope(r.agent)):
                reserved[scope] = reserved.get(scope, 0) + r.amount_pusd
    return budget_report(config, now=now, used=used, reserved=reserved, raises=raises)
