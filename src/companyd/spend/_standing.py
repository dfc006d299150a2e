"""Where every budget stands now: the current periods' spend, reservations, raises and blocks.

:class:`Standing` is the spend book's in-memory state, loaded from the ledger for the current
day and month and kept up to date as calls are reserved, settled and released. It does no
I/O and never awaits, so a check and the set-aside that follows it (both on the event loop,
with no ``await`` between them) are atomic: concurrent agents can never overshoot a shared
budget together. The book writes to the ledger and publishes the events; this module decides:

* :meth:`Standing.check` — does a call's worst case fit (``ok``), fit the settled spend but
  not what others reserved (``wait``), or not fit at all (``refuse``);
* :meth:`Standing.refuse` — block the scope for the period and build the refusal (and, once
  per scope, period and limit, the ``budget_exhausted`` event);
* :meth:`Standing.thresholds` — the ``budget_threshold`` levels a settled call crossed (once
  per level, scope and period);
* :meth:`Standing.exhausted` — why an agent cannot spend now;
* :meth:`Standing.apply_period` — a new day or month (and which blocks it lifted).

Amounts are integer picodollars (``companyd.spend._ledger``). :attr:`Standing.changed` is set
(and replaced) on every change that may free room, for callers waiting in ``reserve``.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from zoneinfo import ZoneInfo

from companyd.admin import RUN_COST_PLACES, format_usd, format_when, usd_places
from companyd.config import CompanyConfig
from companyd.events import BudgetExhausted as BudgetExhaustedEvent  # the exception's name
from companyd.events import BudgetReset, BudgetThreshold, SpendUnanswered
from companyd.spend._budgets import (
    COMPANY,
    BudgetLimit,
    agent_scope,
    limits_for,
    resets_at,
    scope_label,
)
from companyd.spend._budgets import (
    usd as as_usd,
)
from companyd.spend._ledger import from_pusd, usd_said
from companyd.spend._reservations import BudgetExhausted, Reservation

__all__ = ["SOURCE", "Marker", "Standing"]

#: The source of the spend events.
SOURCE = "spend"

#: a threshold or exhaustion already published: (scope, period key, what)
Marker = tuple[str, str, str]


class Standing:
    """The budgets' state for the current day and month (see module docstring).

    Args:
        config: the company (its budgets).
        tz: the company's time zone (periods and reset times are local to it).
    """

    def __init__(self, config: CompanyConfig, tz: ZoneInfo) -> None:
        self.day = ""
        self.month = ""
        #: settled spend per (scope, period key)
        self.used: dict[tuple[str, str], int] = {}
        #: money set aside by calls in flight, per scope
        self.reserved: dict[str, int] = {}
        #: the calls in flight, by reservation id
        self.open: dict[str, Reservation] = {}
        #: today's raises per scope
        self.raises: dict[str, int] = {}
        #: raises being written to the ledger, per scope
        self.raising: dict[str, int] = {}
        #: threshold and exhaustion events already published this period
        self.sent: set[Marker] = set()
        #: scopes that refused a call this period: (scope, period key) → why
        self.blocked: dict[tuple[str, str], str] = {}
        self.changed = asyncio.Event()
        #: calls that got no answer today (count, worst case in pusd, day), for the alert
        self._unanswered: tuple[int, int, str] = (0, 0, "")
        self.configure(config, tz)

    def configure(self, config: CompanyConfig, tz: ZoneInfo) -> None:
        """Use a (reloaded) company's budgets from the next question on."""
        self._config = config
        self._tz = tz
        self._limits_cache: dict[str | None, list[BudgetLimit]] = {}

    def notify(self) -> None:
        """Wake every ``reserve`` waiting for room."""
        self.changed.set()
        self.changed = asyncio.Event()

    def key(self, lim: BudgetLimit) -> str:
        """The period key (``YYYY-MM-DD`` or ``YYYY-MM``) a limit counts against now."""
        return self.day if lim.period == "day" else self.month

    def limits(self, agent: str | None) -> list[BudgetLimit]:
        """The limits a call of ``agent`` (None: the company alone) must fit."""
        lims = self._limits_cache.get(agent)
        if lims is None:
            lims = self._limits_cache[agent] = limits_for(self._config, agent)
        return lims

    # -- reservations ---------------------------------------------------------------------

    def check(self, agent: str, need: int) -> tuple[str, BudgetLimit | None]:
        """``("ok", None)``, ``("wait", limit)`` or ``("refuse", limit)``."""
        waiting: BudgetLimit | None = None
        for lim in self.limits(agent):
            key = self.key(lim)
            limit = lim.limit_pusd + self.raises.get(lim.scope, 0)
            used = self.used.get((lim.scope, key), 0)
            if need > limit - used:
                return "refuse", lim
            if need > limit - used - self.reserved.get(lim.scope, 0) and waiting is None:
                waiting = lim
        return ("wait", waiting) if waiting is not None else ("ok", None)

    def hold(self, res: Reservation) -> None:
        """Set ``res`` aside against its agent's and the company's budgets."""
        self.open[res.id] = res
        for scope in (COMPANY, agent_scope(res.agent)):
            self.reserved[scope] = self.reserved.get(scope, 0) + res.amount_pusd

    def drop(self, res: Reservation, state: str) -> bool:
        """Remove an open reservation from the in-memory totals; False if it was not open."""
        if self.open.pop(res.id, None) is None:
            if res.state == "open":
                res.state = state
            return False
        res.state = state
        for scope in (COMPANY, agent_scope(res.agent)):
            left = self.reserved.get(scope, 0) - res.amount_pusd
            if left > 0:
                self.reserved[scope] = left
            else:
                self.reserved.pop(scope, None)
        self.notify()
        return True

    def refuse(
        self, agent: str, lim: BudgetLimit, need: int, now: float, *, waited: float | None
    ) -> tuple[BudgetExhausted, Marker | None, BudgetExhaustedEvent | None]:
        """Block ``lim``'s scope for the period and build the refusal of ``agent``'s call.

        ``waited``: how long ``reserve`` waited for room, if it did. Returns the exception,
        and the marker and the ``budget_exhausted`` event when it is the first of its scope,
        period and limit (the marker is then counted as sent).
        """
        key = self.key(lim)
        limit = lim.limit_pusd + self.raises.get(lim.scope, 0)
        used = self.used.get((lim.scope, key), 0)
        remaining = max(0, limit - used - self.reserved.get(lim.scope, 0))
        resets = resets_at(lim.period, now, self._tz)
        when = resets.isoformat()
        exc = BudgetExhausted(
            "company" if lim.scope == COMPANY else "agent",
            agent,
            lim.period,
            from_pusd(need),
            from_pusd(remaining),
            limit_usd=from_pusd(limit),
            resets_at=when,
            resets_said=format_when(resets.timestamp(), self._tz),
        )
        reason = str(exc)
        if waited is not None:
            reason += f" (waited {waited:g} s for calls in flight to free their reservations)"
        self.blocked[(lim.scope, key)] = reason
        marker = (lim.scope, key, f"exhausted@{limit}")
        if marker in self.sent:
            return exc, None, None
        self.sent.add(marker)
        event = BudgetExhaustedEvent(
            source=SOURCE,
            scope="company" if lim.scope == COMPANY else "agent",
            agent=lim.agent,
            asked_by=agent,
            period=lim.period,
            key=key,
            limit_usd=as_usd(limit),
            used_usd=as_usd(used),
            needed_usd=as_usd(need),
            remaining_usd=as_usd(remaining),
            resets_at=when,
            reason=reason,
        )
        return exc, marker, event

    # -- settled spend --------------------------------------------------------------------

    def spend(self, agent: str, pusd: int) -> None:
        """Count a settled call of ``agent`` in today's and this month's spend."""
        for scope in (COMPANY, agent_scope(agent)):
            for key in (self.day, self.month):
                self.used[(scope, key)] = self.used.get((scope, key), 0) + pusd

    def unanswered(self, res: Reservation, model: str, reason: str, pusd: int) -> SpendUnanswered:
        """Count a call of today that got no answer; the ``spend_unanswered`` event (with
        today's count and total, which the alert coalesces).
        """
        day = self.day
        n, total, seen = self._unanswered
        if seen != day:
            n, total = 0, 0
        n, total = n + 1, total + pusd
        self._unanswered = (n, total, day)
        return SpendUnanswered(
            source=SOURCE,
            agent=res.agent,
            model=model,
            run_id=res.run_id,
            routine=res.routine,
            worst_case_usd=as_usd(pusd),
            reason=reason,
            calls=n,
            total_worst_case_usd=as_usd(total),
            day=day,
            message=(
                f"{n} call{'s' if n != 1 else ''} timed out; up to "
                f"{usd_said(from_pusd(total), RUN_COST_PLACES)} may have been billed"
            ),
        )

    def thresholds(self, agent: str, now: float) -> list[tuple[Marker, BudgetThreshold | None]]:
        """The warning levels ``agent``'s spend has newly reached: a marker for each, and an
        event for the highest of each budget only (None with the others) — one call that
        jumps over several levels is one message saying where the spend is, not one per
        level passed ("has used 50%" of a budget already over 100%).
        """
        out: list[tuple[Marker, BudgetThreshold | None]] = []
        for lim in self.limits(agent):
            key = self.key(lim)
            limit = lim.limit_pusd + self.raises.get(lim.scope, 0)
            used = self.used.get((lim.scope, key), 0)
            reached: list[tuple[Marker, float]] = []
            for level in lim.warn_at:
                if Decimal(used) < Decimal(str(level)) * limit:
                    continue
                marker = (lim.scope, key, f"warn:{level:g}")
                if marker in self.sent:
                    continue
                self.sent.add(marker)
                reached.append((marker, level))
            if not reached:
                continue
            *lower, (marker, level) = sorted(reached, key=lambda r: r[1])
            out.extend((m, None) for m, _ in lower)
            out.append(
                (
                    marker,
                    BudgetThreshold(
                        source=SOURCE,
                        scope="company" if lim.scope == COMPANY else "agent",
                        agent=lim.agent,
                        period=lim.period,
                        key=key,
                        level=level,
                        used_usd=as_usd(used),
                        limit_usd=as_usd(limit),
                        resets_at=resets_at(lim.period, now, self._tz).isoformat(),
                        message=(
                            f"{scope_label(lim.scope)} has used {used / limit:.0%} of its "
                            f"{which(lim.period)} budget ({_usd_of(used, limit)})"
                        ),
                    ),
                )
            )
        return out

    def exhausted(self, agent: str, now: float) -> str | None:
        """Why ``agent`` cannot spend in the current periods, or None."""
        for lim in self.limits(agent):
            key = self.key(lim)
            reason = self.blocked.get((lim.scope, key))
            if reason:
                return reason
            limit = lim.limit_pusd + self.raises.get(lim.scope, 0)
            used = self.used.get((lim.scope, key), 0)
            if used >= limit:
                resets = resets_at(lim.period, now, self._tz).timestamp()
                return (
                    f"{scope_label(lim.scope)} {which(lim.period)} budget of "
                    f"{usd_said(from_pusd(limit))} is used up "
                    f"({usd_said(from_pusd(used), RUN_COST_PLACES)} spent); it "
                    f"resets at {format_when(resets, self._tz)}"
                )
        return None

    # -- periods --------------------------------------------------------------------------

    def apply_period(
        self,
        day: str,
        month: str,
        used_d: dict[str, int],
        used_m: dict[str, int],
        raises: dict[str, int],
        markers: set[Marker],
    ) -> list[BudgetReset]:
        """Take the ledger's figures for ``day`` and ``month`` as the current periods.

        Returns one ``budget_reset`` event per period that changed (the agents
        and whether the company it unblocked); empty at the first load.
        """
        old_day, old_month = self.day, self.month
        was_blocked = dict(self.blocked)
        used = {(s, day): v for s, v in used_d.items()}
        used.update({(s, month): v for s, v in used_m.items()})
        self.used = used
        self.raises = dict(raises)
        self.sent = set(markers)
        self.blocked = {k: v for k, v in self.blocked.items() if k[1] in (day, month)}
        self.day, self.month = day, month
        self.notify()
        resets: list[BudgetReset] = []
        for period, old, new in (("day", old_day, day), ("month", old_month, month)):
            if old and old != new:
                lifted = sorted(s for (s, k) in was_blocked if k == old)
                resets.append(
                    BudgetReset(
                        source=SOURCE,
                        period=period,
                        previous=old,
                        current=new,
                        agents=[s.removeprefix("agent:") for s in lifted if s != COMPANY],
                        company=COMPANY in lifted,
                    )
                )
        return resets


def which(period: str) -> str:
    """``daily`` or ``monthly``."""
    return "daily" if period == "day" else "monthly"


def _usd_of(used: int, limit: int) -> str:
    """``$USED of $LIMIT``, the two with one precision (as a table's column), with the
    decimals that tell them apart when they differ ("$0.0035 of $0.0040", never "$0.004 of
    $0.004" at 88%).
    """
    a, b = from_pusd(used), from_pusd(limit)
    places = usd_places([a, b])
    # 6: companyd.admin's MAX_USD_PLACES, a millionth of a dollar
    while a != b and places < 6 and format_usd(a, places) == format_usd(b, places):
        places += 1
    return f"{format_usd(a, places)} of {format_usd(b, places)}"
