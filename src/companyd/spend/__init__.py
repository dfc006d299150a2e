"""Money: dated prices, the spend ledger, and budgets enforced before each call."""
