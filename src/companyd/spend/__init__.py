"""Money: dated prices, the spend ledger, and budgets enforced before each call.

The agent runtime and the daemon use :class:`SpendBook` (reserve → call → settle/release);
``companyd spend`` and ``companyd budget`` read the ledger directly (docs/spend.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.llm import Price, PriceTable
    from companyd.spend._book import BudgetExhausted, Reservation, SpendBook, SpendError
    from companyd.spend._budgets import read_budget_report
    from companyd.spend._ledger import Ledger, LedgerError
    from companyd.spend._periods import day_key, parse_period
    from companyd.spend._reports import format_budget_report, format_spend_report, spend_report


__all__ = [
    "STORE_STEPS",
    "BudgetExhausted",
    "Ledger",
    "LedgerError",
    "Price",
    "PriceTable",
    "Reservation",
    "SpendBook",
    "SpendError",
    "day_key",
    "format_budget_report",
    "format_spend_report",
    "parse_period",
    "read_budget_report",
    "spend_report",
]


# Every name is imported on first use: the daemon's book (asyncio, the config schema) is
# not what `companyd spend` needs to read the ledger and print a report (issue 31).
_HOMES: dict[str, str] = {
    "BudgetExhausted": "companyd.spend._book",
    "LedgerError": "companyd.spend._ledger",
    "Price": "companyd.llm",
    "PriceTable": "companyd.llm",
    "Reservation": "companyd.spend._book",
    "SpendBook": "companyd.spend._book",
    "SpendError": "companyd.spend._book",
    "STORE_STEPS": "companyd.spend._ledger",
    "Ledger": "companyd.spend._ledger",
    "day_key": "companyd.spend._periods",
    "format_budget_report": "companyd.spend._reports",
    "format_spend_report": "companyd.spend._reports",
    "parse_period": "companyd.spend._periods",
    "read_budget_report": "companyd.spend._budgets",
    "spend_report": "companyd.spend._reports",
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
