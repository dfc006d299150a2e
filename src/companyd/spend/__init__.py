"""Money: dated prices, the spend ledger, and budgets enforced before each call.

The agent runtime and the daemon use :class:`SpendBook` (reserve → call → settle/release);
``companyd spend`` and ``companyd budget`` read the ledger directly (docs/spend.md).
"""

from companyd.llm.prices import Price, PriceTable
from companyd.spend.book import BudgetExhausted, Reservation, SpendBook, SpendError
from companyd.spend.ledger import LedgerError

__all__ = [
    "BudgetExhausted",
    "LedgerError",
    "Price",
    "PriceTable",
    "Reservation",
    "SpendBook",
    "SpendError",
]
