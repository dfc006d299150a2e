"""The reserve → call → settle contract's types: a reservation and the two refusals.

A :class:`Reservation` is the money :meth:`~companyd.spend._book.SpendBook.reserve` set aside
for one call in flight; the caller hands it back to ``settle``, ``forfeit`` or ``release``.
:class:`BudgetExhausted` is the refusal of a call whose worst case does not fit a budget (the
message says which budget, what is left and when it resets); :class:`SpendError` an operator
request about money that cannot be done as asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from companyd.admin import RUN_COST_PLACES, one_usd
from companyd.errors import CompanydError
from companyd.spend._ledger import usd_said

__all__ = ["BudgetExhausted", "Reservation", "SpendError"]


class SpendError(CompanydError):
    """An operator request about money that cannot be done as asked."""


class BudgetExhausted(CompanydError):
    """A call's worst case does not fit in a budget; the call was not made.

    Attributes:
        scope: ``"company"`` or ``"agent"``.
        agent: the agent that asked.
        period: ``"day"`` or ``"month"``.
        needed_usd: the call's worst-case cost.
        remaining_usd: what the budget has left (settled and reserved spend deducted).
        limit_usd: the budget, including today's raises.
        resets_at: ISO time the budget resets, in the company's time zone.

    ``resets_said`` is the same time as the message says it to a person (the company's
    clock, named: ``2026-11-29 00:00 CET``); without it, the message quotes ``resets_at``.
    """

    def __init__(
        self,
        scope: str,
        agent: str | None,
        period: str,
        needed_usd: Decimal,
        remaining_usd: Decimal,
        *,
        limit_usd: Decimal | None = None,
        resets_at: str | None = None,
        resets_said: str | None = None,
    ) -> None:
        self.scope = scope
        self.agent = agent
        self.period = period
        self.needed_usd = needed_usd
        self.remaining_usd = remaining_usd
        self.limit_usd = limit_usd
        self.resets_at = resets_at
        whose = "the company's" if scope == "company" else f"agent {agent}'s"
        which = "daily" if period == "day" else "monthly"
        limit = f" of {usd_said(limit_usd)}" if limit_usd is not None else ""
        # each amount exact to a millionth, at least a run cost's four decimals
        needed, remaining = (one_usd(a, RUN_COST_PLACES) for a in (needed_usd, remaining_usd))
        said = resets_said or resets_at
        when = f"; it resets at {said}" if said else ""
        if limit_usd is not None and needed_usd > limit_usd:
            # no call fits even in the whole budget: "exhausted", and waiting for the
            # reset, would mislead (nothing need have been spent)
            super().__init__(
                f"{whose} {which} budget{limit} is too small for one call: this call could "
                f"cost up to {needed}, more than the whole budget — "
                "raise today's budget, increase it in company.yaml, or lower "
                "model.max_output_tokens"
            )
            return
        super().__init__(
            f"{whose} {which} budget{limit} is exhausted: this call could cost up to "
            f"{needed} but only {remaining} "
            f"is left{when} — or raise "
            "today's budget, or increase it in company.yaml"
        )


@dataclass(kw_only=True, eq=False)
class Reservation:
    """Money set aside for one call in flight. Pass it back to settle() or release().

    Attributes:
        id: unique id (also the ``inflight`` row's key).
        amount_usd: the reserved worst case.
        state: ``"open"``, ``"settled"`` or ``"released"``.
    """

    id: str
    agent: str
    run_id: str
    routine: str | None
    model: str
    input_tokens: int
    max_output_tokens: int
    amount_usd: Decimal
    amount_pusd: int
    created: float
    state: str = "open"
