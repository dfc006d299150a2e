"""The rules of a one-off budget raise for today (``companyd raise-budget``, Telegram's
``/raise``): what amount is accepted, which scope can be raised, and the daily bound.

The book applies a raise all or nothing (the ledger first, then memory); this module only
decides whether it may be applied, and words the refusal (:class:`SpendError`).
"""

from __future__ import annotations

from decimal import Decimal

from companyd.spend._budgets import scope_label
from companyd.spend._ledger import from_pusd, to_pusd, usd_said
from companyd.spend._reservations import SpendError

__all__ = ["MAX_RAISE_USD", "check_bound", "check_scope", "parse_amount"]

#: The most today's budget of one scope can be raised by in a day, in total. It keeps every
#: sum the ledger stores far inside SQLite's 64-bit integers (picodollars: 2⁶³ ≈ $9.2 million)
#: and turns a typo (an extra zero or three) into a refusal instead of a blank cheque.
MAX_RAISE_USD = Decimal(1_000_000)


#: The smallest raise: a millionth of a dollar, the precision money is printed with.
_LEAST = Decimal("0.000001")


def parse_amount(usd: Decimal | float) -> Decimal:
    """The raise in USD.

    Raises:
        SpendError: not a positive, finite amount.
    """
    try:
        amount = usd if isinstance(usd, Decimal) else Decimal(str(usd))
    except ArithmeticError:
        amount = Decimal("NaN")
    if not amount.is_finite() or amount <= 0:
        raise SpendError(
            f"a budget raise must be a positive amount of USD such as 5 or 2.50, got {str(usd)!r}"
        )
    if amount < _LEAST:
        # money is kept and printed to a millionth: a smaller raise would read "$0.000000"
        raise SpendError(
            f"a budget raise must be at least $0.000001 (a millionth of a dollar), got ${amount:f}"
        )
    return amount


def check_scope(scope: str, company: bool, has_budget: bool) -> None:
    """Refuse raising a scope without a budget of its own (``company``: the company's).

    Raises:
        SpendError: naming what to raise instead.
    """
    if not has_budget:
        raise SpendError(
            f"{scope_label(scope)} has no budget to raise "
            + (
                "(the company budget is unlimited)"
                if company
                else "(only the company budget applies to it; raise that instead)"
            )
        )


def check_bound(scope: str, amount: Decimal, usd: Decimal | float, already: int) -> None:
    """Refuse a raise that would take today's raises of ``scope`` past :data:`MAX_RAISE_USD`.

    Args:
        scope: the budget raised.
        amount: the raise (:func:`parse_amount`).
        usd: the raise as asked (shown when it is too large to format).
        already: picodollars raised today, including raises still being written.

    Raises:
        SpendError: the bound, and what to do for a lasting change.
    """
    if amount > MAX_RAISE_USD or to_pusd(amount) + already > to_pusd(MAX_RAISE_USD):
        # said as money, not a float's repr ("$1000000000000.0"); absurd ones by their size
        shown = usd_said(amount) if amount < 10**15 else "more than $1,000,000,000,000,000"
        raise SpendError(
            f"a budget raise of {shown:.40} is refused: {scope_label(scope)} may be "
            f"raised by at most ${MAX_RAISE_USD:,} a day in total (already raised today: "
            f"{usd_said(from_pusd(already))}); for a lasting change edit the budget in "
            "company.yaml and reload"
        )
