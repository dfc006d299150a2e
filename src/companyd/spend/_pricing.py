"""The price a call is charged at: the price table in force, and the warning for a model it
does not know.

A model missing from the table is priced at the most expensive known rate (so a budget is
never under-counted) and one ``unknown_model_price`` event per model tells the operator to add
it under ``pricing`` in company.yaml.
"""

from __future__ import annotations

from datetime import date

from companyd.events import EventBus, UnknownModelPrice
from companyd.llm import Price, PriceTable

__all__ = ["Pricing"]


class Pricing:
    """The price table in force and the models already warned about (across reloads).

    Args:
        table: built-in prices plus company.yaml's overrides (replaced on reload).
        bus: where ``unknown_model_price`` goes.
        source: the events' source.
    """

    def __init__(self, table: PriceTable, bus: EventBus, source: str) -> None:
        self.table = table
        self._bus = bus
        self._source = source
        self._warned: set[str] = set()

    def lookup(self, model: str, on: date | None) -> tuple[Price, bool]:
        """``model``'s price on day ``on`` and whether the table knows it (warning once per
        model when it does not).
        """
        price, known = self.table.lookup(model, on)
        if not known and model not in self._warned:
            self._warned.add(model)
            p = price
            self._bus.publish(
                UnknownModelPrice(
                    source=self._source,
                    model=model,
                    priced_as={
                        "input": float(p.input),
                        "cache_write_5m": float(p.cache_write_5m),
                        "cache_write_1h": float(p.cache_write_1h),
                        "cache_read": float(p.cache_read),
                        "output": float(p.output),
                    },
                    message=(
                        f"model {model!r} is not in the price table; its calls are priced at "
                        "the most expensive known rate — add it under 'pricing' in company.yaml"
                    ),
                )
            )
        return price, known
