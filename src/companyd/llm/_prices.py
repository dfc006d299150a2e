"""Dated prices of Claude models, and what one call costs.

The built-in table holds USD per million tokens for each current model, with the date the
figure was taken from (docs/spend.md gives the sources). company.yaml's ``pricing`` block
overrides or extends it. A model id that is in neither is priced at the **most expensive
known rate** for every token kind and reported once as ``unknown_model_price`` — never at
$0 (several public tools priced new models at zero and users paid unnoticed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import date
from decimal import Decimal
from typing import Protocol

from companyd._frozen import Frozen
from companyd.llm._model import Usage

__all__ = ["BUILTIN_PRICES", "Price", "PriceTable", "is_known_model"]


class PriceSpec(Protocol):
    """What the catalog reads of one model's configured rates (config's ``PriceSpec``
    satisfies it); a protocol so the catalog sits below the configuration layer.
    """

    @property
    def input(self) -> float: ...
    @property
    def output(self) -> float: ...
    @property
    def cache_write_5m(self) -> float | None: ...
    @property
    def cache_write_1h(self) -> float | None: ...
    @property
    def cache_read(self) -> float | None: ...
    @property
    def effective_from(self) -> date | None: ...


_MTOK = Decimal(1_000_000)


class Price(Frozen):
    """USD per million tokens. ``long_*`` rates apply to the whole request when its prompt
    (input + cache write + cache read) exceeds ``long_context_threshold`` tokens.
    """

    input: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal
    output: Decimal
    effective_from: date | None = None
    source: str = ""
    long_context_threshold: int | None = None
    long: Price | None = None

    def cost(self, usage: Usage) -> Decimal:
        """Exact USD cost of ``usage`` at this price. Above the long-context threshold each
        token kind costs the long rate, but never less than the base rate: an override that
        raised a model's price above its built-in long tier is not undercut by that tier.
        """
        prompt = usage.input_tokens + usage.cache_write_tokens + usage.cache_read_tokens
        p: Price = self
        threshold = self.long_context_threshold
        if self.long is not None and threshold is not None and prompt > threshold:
            lp = self.long
            p = replace(
                lp,
                input=max(self.input, lp.input),
                cache_write_5m=max(self.cache_write_5m, lp.cache_write_5m),
                cache_write_1h=max(self.cache_write_1h, lp.cache_write_1h),
                cache_read=max(self.cache_read, lp.cache_read),
                output=max(self.output, lp.output),
            )
        return (
            usage.input_tokens * p.input
            + usage.cache_write_5m_tokens * p.cache_write_5m
            + usage.cache_write_1h_tokens * p.cache_write_1h
            + usage.cache_read_tokens * p.cache_read
            + usage.output_tokens * p.output
        ) / _MTOK

    def worst_case(self, input_tokens: int, max_output_tokens: int) -> Decimal:
        """Upper bound of a call's cost: every input token at the dearest input-side rate
        (a cache write can cost more than plain input), every output token at the output
        rate, using the long-context rates if they are higher.
        """
        rates = [self] + ([self.long] if self.long is not None else [])
        in_rate = max(max(r.input, r.cache_write_5m, r.cache_write_1h) for r in rates)
        out_rate = max(r.output for r in rates)
        return (input_tokens * in_rate + max_output_tokens * out_rate) / _MTOK


def _p(
    inp: str,
    cw5: str,
    cw1: str,
    cr: str,
    out: str,
    when: str,
    source: str,
    **kw: object,
) -> Price:
    return Price(
        input=Decimal(inp),
        cache_write_5m=Decimal(cw5),
        cache_write_1h=Decimal(cw1),
        cache_read=Decimal(cr),
        output=Decimal(out),
        effective_from=date.fromisoformat(when),
        source=source,
        **kw,  # type: ignore[arg-type]
    )


_OFFICIAL = "platform.claude.com models overview / pricing (docs snapshot, 2026-11)"

#: Built-in prices (USD / MTok). Dates are the release or price-change date the source gave.
BUILTIN_PRICES: Mapping[str, Price] = {
    "claude-fable-5-1": _p("10", "12.50", "20", "0.25", "50", "2026-09-01", _OFFICIAL),
    "claude-opus-5-5": _p("4", "5", "8", "0.20", "20", "2026-09-23", _OFFICIAL),
    # The official page says cache read $0.20; trackers report $0.10 from 2026-10-07. We keep
    # the higher figure: over-estimating spend is safe, under-estimating is not.
    "claude-sonnet-5-5": _p("2", "2.50", "4", "0.20", "10", "2026-09-28", _OFFICIAL),
    "claude-haiku-5-5": _p(
        "0.10",
        "0.125",
        "0.20",
        "0.01",
        "0.50",
        "2026-10-07",
        _OFFICIAL,
        long_context_threshold=100_000,
        long=_p("0.50", "0.625", "1.00", "0.05", "2.50", "2026-10-07", _OFFICIAL),
    ),
    "claude-opus-5": _p("5", "6.25", "10", "0.50", "25", "2026-07-24", _OFFICIAL),
    "claude-sonnet-5": _p("2", "2.50", "4", "0.20", "10", "2026-06-30", _OFFICIAL),
    "claude-fable-5": _p("10", "12.50", "20", "1", "50", "2026-06-09", _OFFICIAL),
    "claude-haiku-4-5": _p("1", "1.25", "2", "0.10", "5", "2025-10-15", _OFFICIAL),
}

# Dated model ids the API also accepts for the same model.
_ALIASES = {"claude-haiku-4-5-20251001": "claude-haiku-4-5"}


def is_known_model(model: str) -> bool:
    """Whether the built-in table prices ``model``."""
    return _ALIASES.get(model, model) in BUILTIN_PRICES


class PriceTable:
    """Built-in prices plus company.yaml overrides, dated.

    Each model has a history of prices, each valid from its ``effective_from`` date (a price
    without a date is valid from the beginning). :meth:`lookup` with ``on=`` picks the price
    in force on that date, so a scheduled price change in company.yaml (``effective_from``
    in the future) applies from that day on; without ``on``, the newest price applies.

    Args:
        overrides: model id → Price. An override applies from its ``effective_from`` date
            (or always, without one); the built-in price still applies to dates before it.
    """

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self._history: dict[str, list[Price]] = {m: [p] for m, p in BUILTIN_PRICES.items()}
        for model, price in (overrides or {}).items():
            model = _ALIASES.get(model, model)
            history = self._history.setdefault(model, [])
            if price.effective_from is not None:
                # Built-in prices from before the override's date still price older calls.
                history[:] = [*(p for p in history if _before(p, price)), price]
            else:
                history[:] = [price]
        self._prices: dict[str, Price] = {m: h[-1] for m, h in self._history.items()}
        rates = [p for h in self._history.values() for p in h]
        rates += [p.long for p in rates if p.long is not None]
        self.most_expensive = Price(
            input=max(r.input for r in rates),
            cache_write_5m=max(r.cache_write_5m for r in rates),
            cache_write_1h=max(r.cache_write_1h for r in rates),
            cache_read=max(r.cache_read for r in rates),
            output=max(r.output for r in rates),
            source="most expensive known rate (model not in the price table)",
        )

    @classmethod
    def from_config(cls, pricing: Mapping[str, PriceSpec]) -> PriceTable:
        """The table for company.yaml's ``pricing`` block.

        A missing cache rate is derived from the input rate with Anthropic's published
        multipliers for older models (5-minute write 1.25×, 1-hour write 2×, read 0.1×);
        newer models are cheaper than that, so the derived figure errs high, which is the
        safe side. An override of a built-in model with a long-context tier keeps that tier.
        """
        overrides: dict[str, Price] = {}
        for model, spec in pricing.items():
            inp = _dec(spec.input)
            base = BUILTIN_PRICES.get(_ALIASES.get(model, model))
            overrides[model] = Price(
                input=inp,
                output=_dec(spec.output),
                cache_write_5m=(
                    _dec(spec.cache_write_5m)
                    if spec.cache_write_5m is not None
                    else inp * Decimal("1.25")
                ),
                cache_write_1h=(
                    _dec(spec.cache_write_1h) if spec.cache_write_1h is not None else inp * 2
                ),
                cache_read=(
                    _dec(spec.cache_read) if spec.cache_read is not None else inp * Decimal("0.1")
                ),
                effective_from=spec.effective_from,
                source="company.yaml pricing",
                long_context_threshold=base.long_context_threshold if base else None,
                long=base.long if base else None,
            )
        return cls(overrides)

    def lookup(self, model: str, on: date | None = None) -> tuple[Price, bool]:
        """``(price, known)``; unknown models get :attr:`most_expensive` and ``False``.

        ``on``: the date whose price applies (None: the newest price).
        """
        history = self._history.get(_ALIASES.get(model, model))
        if not history:
            return self.most_expensive, False
        if on is None:
            return history[-1], True
        current = history[0]
        for p in history:
            if p.effective_from is None or p.effective_from <= on:
                current = p
        return current, True

    def cost(self, model: str, usage: Usage, on: date | None = None) -> Decimal:
        """USD cost of one call."""
        return self.lookup(model, on)[0].cost(usage)

    def models(self) -> Mapping[str, Price]:
        """The newest price of every known model."""
        return dict(self._prices)


def _before(p: Price, new: Price) -> bool:
    # Keep a price in the history only if it took effect strictly before ``new``.
    return (
        p.effective_from is not None
        and new.effective_from is not None
        and p.effective_from < new.effective_from
    )


def _dec(value: float) -> Decimal:
    # str() of a float is its shortest round-trip form: 0.1 -> Decimal("0.1"), not the
    # binary expansion, so yaml's `cache_read: 0.1` is exactly ten cents per MTok.
    return Decimal(str(value))
