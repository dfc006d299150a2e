"""The spend book: budgets enforced *before* each LLM call, and the ledger after it.

Every model call goes through three steps::

    res = await book.reserve(agent="cfo", run_id=run, routine=None, model=m,
                             input_tokens=estimate_input_tokens(req),
                             max_output_tokens=req.max_tokens)   # may raise BudgetExhausted
    try:
        resp = await backend.create(req)
    except ModelError as exc:
        if exc.maybe_billed:                                      # sent, no answer
            await book.forfeit(res, reason=str(exc))              # worst case stays spent
        else:
            await book.release(res)                               # nothing was billed
        raise
    cost = await book.settle(res, model=resp.model, usage=resp.usage,
                             request_id=resp.request_id)

(The agent runtime reserves each retry on its own the same way: ``agents/_agent.py``,
``_BudgetedCall``.)

``reserve`` sets aside the call's worst case (every input token at the dearest input-side
rate, ``max_output_tokens`` at the output rate) against the company's and the agent's
remaining daily and monthly budgets. The check and the set-aside happen with no ``await``
between them on the event loop, so concurrent agents can never overshoot a shared budget
together: the sum of settled costs stays within the limit as long as each call costs at
most its reservation (which the input estimate guarantees).

Refusals come in two kinds:

* the worst case exceeds what is left *after settled spend* → :class:`BudgetExhausted` at
  once; the scope is marked blocked for the period (``exhausted()`` tells why) and one
  ``budget_exhausted`` event is published per scope, period and limit;
* it fits the settled spend but not the money other calls have reserved → ``reserve``
  waits (up to ``reserve_wait`` seconds) for those calls to settle or release, then checks
  again — so a busy moment never pauses an agent for the rest of the day.

Reservations live in memory and are also written to the ledger's ``inflight`` table with
the process id. A ``kill -9`` between reserve and settle therefore leaves no phantom
reservation: on start the table is emptied (every row belongs to a dead process) and a
``spend_unsettled`` event tells the operator how many calls were in flight and their
worst-case cost — money that may have been spent without being recorded.

Periods (day, month) are local to ``company.timezone`` and read from the injected clock;
``run`` wakes at each local midnight (and at least once a minute) to roll them over and
publish ``budget_reset``. Threshold events (``budget_threshold``) are published once per
level, scope and period, and remembered in the ledger so a restart does not repeat them.

This module is the supervised child and the operations; what it composes lives beside it:
the contract's types in :mod:`companyd.spend._reservations`, the budgets' in-memory state and
the decisions on it in :mod:`companyd.spend._standing`, the ledger's owner thread in
:mod:`companyd.spend._ledger_thread`, the settled calls a full disk refused in
:mod:`companyd.spend._held`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

from companyd._aio import race
from companyd._fs import DiskAlarm, is_disk_failure
from companyd.admin import RUN_COST_PLACES, BudgetsData, SpendReportData
from companyd.clock import Clock
from companyd.config import CompanyConfig
from companyd.events import (
    ApiSpendLimit,
    BudgetRaised,
    BudgetReset,
    EventBus,
    SpendRunaway,
    SpendUnanswered,
    SpendUnsettled,
)
from companyd.llm import Price, PriceTable, Usage
from companyd.spend._budgets import (
    COMPANY,
    BudgetLimit,
    agent_scope,
    budget_report,
)
from companyd.spend._budgets import (
    usd as as_usd,
)
from companyd.spend._held import UNRECORDED_RETRY_SECONDS, HeldCalls
from companyd.spend._ledger import (
    CallRow,
    InflightRow,
    Ledger,
    LedgerError,
    from_pusd,
    to_pusd,
    usd_said,
)
from companyd.spend._ledger_thread import LedgerThread
from companyd.spend._periods import day_start, next_day_start, parse_period, period_keys
from companyd.spend._pricing import Pricing
from companyd.spend._reservations import BudgetExhausted, Reservation, SpendError
from companyd.spend._runaway import HISTORY_SECONDS, RunawayDetector
from companyd.spend._standing import SOURCE, Standing
from companyd.storage import SQLITE, Backend
from companyd.supervision import ChildContext

__all__ = ["BudgetExhausted", "Reservation", "SpendBook", "SpendError"]

log = logging.getLogger("companyd.spend.book")


#: Repeated API spend-limit reports within this many seconds publish one event.
API_LIMIT_REPEAT_SECONDS = 3600.0


class SpendBook:
    """Prices, the ledger, budgets and reservations for one company (see module docstring).

    Args:
        config: the company (budgets, time zone, pricing overrides, runaway settings).
        state_dir: where ``spend.sqlite`` lives.
        bus: where events go.
        clock: time source (defaults to the bus's clock).
        reserve_wait: longest time ``reserve`` waits for other calls' reservations to free
            room before refusing.
        backend: where the ledger lives (``spend.sqlite`` in ``state_dir`` by default).
    """

    def __init__(
        self,
        config: CompanyConfig,
        state_dir: Path,
        *,
        bus: EventBus,
        clock: Clock | None = None,
        reserve_wait: float = 900.0,
        backend: Backend = SQLITE,
    ) -> None:
        self._bus = bus
        self._clock: Clock = clock or bus.clock
        self._path = Path(state_dir) / "spend.sqlite"
        self._reserve_wait = reserve_wait
        self._boot = uuid.uuid4().hex
        self._config = config
        self._tz = ZoneInfo(config.timezone)
        self._st = Standing(config, self._tz)
        self._pricing = Pricing(PriceTable.from_config(config.spec.pricing), bus, SOURCE)
        self._runaway = RunawayDetector(
            float(config.spec.spend.runaway_window),
            Decimal(str(config.spec.spend.runaway_factor)),
        )
        self._db = LedgerThread(self._path, backend)
        self._opened = False
        self._period_lock = asyncio.Lock()
        self._api_limit_last: float | None = None
        self._api_limit_suppressed = 0
        #: settled calls whose ledger write failed on the disk, oldest first
        self._held = HeldCalls(self._db, bus)
        #: why the ledger could not be opened (a disk failure), while run() retries it
        self._degraded: LedgerError | None = None

    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    @property
    def prices(self) -> PriceTable:
        """The price table in force (built-in plus company.yaml overrides)."""
        return self._pricing.table

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self, ctx: ChildContext) -> None:
        """Supervised child: open the ledger, signal ready, roll periods over, close."""
        await self.open()
        ctx.started({"ledger": str(self._path)})
        stop = asyncio.ensure_future(ctx.stopping.wait())
        retry_wake = self._held.wake = asyncio.Event()
        try:
            while not stop.done():
                now = self._clock.time()
                # Wake at local midnight, and at least every minute so a wall-clock jump
                # (NTP, suspend) is noticed promptly; every few seconds while settled calls
                # wait for the disk to take writes again.
                wake = max(0.001, min(next_day_start(now, self._tz) - now, 60.0))
                if self._held or self._degraded is not None:
                    retry_wake.clear()
                    wake = min(wake, UNRECORDED_RETRY_SECONDS)
                await race(stop, self._clock.sleep(wake), retry_wake.wait())
                if self._degraded is not None:
                    await self.open()
                if self._held:
                    await self.flush_unrecorded()
                try:
                    await self._ensure_period()
                except LedgerError as exc:  # the disk: retried at the next wake, no crash
                    log.warning("%s", exc)
        finally:
            stop.cancel()
            await self.close()

    async def open(self) -> None:
        """Open the ledger, drop stale reservations and load the current periods.

        Raises:
            LedgerError: the ledger cannot be opened.
        """
        if self._opened:
            return
        self._db.start()
        now = self._clock.time()
        day, month = period_keys(now, self._tz)
        since = now - HISTORY_SECONDS

        try:
            o = await self._db.open(
                timezone=self._config.timezone, day=day, month=month, since=since
            )
        except BaseException as exc:
            self._db.stop()
            if isinstance(exc, LedgerError) and is_disk_failure(exc):
                # Started on a full disk and the ledger cannot even be opened: come up
                # degraded. Every reservation is refused with the reason (its run fails,
                # its agent is paused) — never a call the budget cannot see; run()
                # retries the open until it works.
                if self._degraded is None:
                    log.error("%s", exc)
                self._degraded = exc
                DiskAlarm.of(self._bus).failed("spend ledger", self._path, exc)
                return
            raise
        if self._degraded is not None:
            self._degraded = None
            log.warning("the spend ledger %s opened: spending is possible again", self._path)
            DiskAlarm.of(self._bus).recovered("spend ledger")
        self._opened = True
        if o.write_failure is not None:
            failed = o.write_failure
            log.error("the spend ledger %s cannot be written at start: %s", self._path, failed)
            DiskAlarm.of(self._bus).failed("spend ledger", self._path, failed)
        self._st.apply_period(day, month, o.used_day, o.used_month, o.raises, o.markers)
        for agent, ts, pusd in o.history:
            self._runaway.add(agent, ts, pusd)
        stale = o.stale
        if stale:
            worst = sum(r.amount_pusd for r in stale)
            self._bus.publish(
                SpendUnsettled(
                    source=SOURCE,
                    calls=len(stale),
                    worst_case_usd=as_usd(worst),
                    agents=sorted({r.agent for r in stale}),
                    runs=sorted({r.run_id for r in stale if r.run_id}),
                    message=(
                        f"{len(stale)} LLM call(s) were in flight when companyd last stopped "
                        "without settling; up to "
                        f"{usd_said(from_pusd(worst), RUN_COST_PLACES)} may have been spent "
                        "without being recorded. Their reservations were dropped."
                    ),
                )
            )
        prev_day, prev_month = o.last
        for period, prev, cur in (("day", prev_day, day), ("month", prev_month, month)):
            if prev and prev != cur:
                self._bus.publish(
                    BudgetReset(
                        source=SOURCE,
                        period=period,
                        previous=prev,
                        current=cur,
                        agents=[],
                    )
                )

    async def close(self) -> None:
        """Close the ledger. Reservations still open stay in ``inflight`` and are reported
        as unsettled at the next start.
        """
        if not self._opened or not self._db.running:
            return
        if self._held and not await self.flush_unrecorded():
            # Their reservations stay in `inflight`: the next start reports them as
            # unsettled at their worst case (spend_unsettled), so the money is not lost.
            log.error(
                "closing the spend ledger %s with %d settled call(s) it could not record "
                "(the state disk is failing); the next start reports them as unsettled",
                self._path,
                len(self._held),
            )
        self._opened = False

        try:
            await self._db.close()
        finally:
            self._db.stop()
            self._st.notify()

    async def __aenter__(self) -> SpendBook:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def reconfigure(self, config: CompanyConfig) -> None:
        """Apply a reloaded company.yaml: budgets, prices and runaway settings take effect
        from the next reservation; settled spend and open reservations are kept. Blocks are
        cleared (a raised budget lets agents go on; an unchanged one refuses again).
        """
        self._config = config
        tz = ZoneInfo(config.timezone)
        if tz != self._tz:
            # the same date can begin at another instant in the new zone: today's spend and
            # raises are read again at the next look (_ensure_period), not kept by date
            self._st.day = ""
        self._tz = tz
        self._pricing.table = PriceTable.from_config(config.spec.pricing)
        self._st.configure(config, self._tz)
        self._runaway.reconfigure(
            float(config.spec.spend.runaway_window),
            Decimal(str(config.spec.spend.runaway_factor)),
        )
        self._st.blocked.clear()
        self._st.notify()

    # -- the three steps of a call --------------------------------------------------------

    async def reserve(
        self,
        *,
        agent: str,
        run_id: str,
        routine: str | None,
        model: str,
        input_tokens: int,
        max_output_tokens: int,
    ) -> Reservation:
        """Set aside the worst case of one call, or refuse it.

        Raises:
            BudgetExhausted: the worst case does not fit the company's or the agent's
                remaining daily or monthly budget.
            LedgerError: the ledger is not open.
        """
        self._require_open()
        if input_tokens < 0 or max_output_tokens < 0:
            raise ValueError(
                f"token counts must be >= 0, got input_tokens={input_tokens!r}, "
                f"max_output_tokens={max_output_tokens!r}"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._reserve_wait
        while True:
            await self._ensure_period()
            price = self._price_known(model)[0]
            need = to_pusd(price.worst_case(input_tokens, max_output_tokens))
            verdict, lim = self._st.check(agent, need)
            if verdict == "ok":
                break
            assert lim is not None
            if verdict == "refuse":
                self._refuse(agent, lim, need)
            changed = self._st.changed
            try:
                async with asyncio.timeout_at(deadline):
                    await changed.wait()
            except TimeoutError:
                self._refuse(agent, lim, need, waited=True)
        # No await between the check above and these lines: the set-aside is atomic.
        res = Reservation(
            id=uuid.uuid4().hex,
            agent=agent,
            run_id=run_id,
            routine=routine,
            model=model,
            input_tokens=input_tokens,
            max_output_tokens=max_output_tokens,
            amount_usd=from_pusd(need),
            amount_pusd=need,
            created=self._clock.time(),
        )
        self._st.hold(res)
        row = InflightRow(
            id=res.id,
            agent=agent,
            run_id=run_id,
            routine=routine,
            model=model,
            amount_pusd=need,
            created=res.created,
            pid=os.getpid(),
            boot=self._boot,
        )
        try:
            await self._db.write(lambda led: led.add_inflight(row))
        except BaseException as exc:
            # Cancelled or failed before the caller got the reservation: undo it.
            self._st.drop(res, "released")
            with contextlib.suppress(LedgerError):  # closed meanwhile: the row goes on start
                self._db.submit(lambda led: led.delete_inflight(res.id))
            if isinstance(exc, LedgerError) and is_disk_failure(exc):
                DiskAlarm.of(self._bus).failed("spend ledger", self._path, exc)
            raise
        self._wrote()
        return res

    def _wrote(self) -> None:
        """A ledger write succeeded: with no settled call held and the ledger open, the
        ledger is not failing (the disk alarm's "spend ledger" is cleared).
        """
        if not self._held and self._degraded is None:
            DiskAlarm.of(self._bus).recovered("spend ledger")

    async def settle(
        self,
        reservation: Reservation,
        *,
        model: str,
        usage: Usage,
        request_id: str | None = None,
    ) -> Decimal:
        """Record the call's actual cost, release the rest of its reservation, and publish
        the threshold / runaway events it causes. Returns the exact cost in USD.

        Raises:
            SpendError: the reservation was already settled.
            LedgerError: the ledger cannot be written (the spend still counts in memory).
        """
        self._require_open()
        if reservation.state == "settled":
            raise SpendError(
                f"reservation {reservation.id!r} (agent {reservation.agent!r}, run "
                f"{reservation.run_id!r}) is already settled; settle each call once"
            )
        # Money was spent: recording it must not depend on the caller staying alive. A
        # caller cancelled mid-settle (a heartbeat timeout, a shutdown) leaves the task to
        # finish; it never leaves the reservation open or the cost unrecorded.
        task = asyncio.ensure_future(self._settle(reservation, model, usage, request_id))
        task.add_done_callback(_log_failure)
        return await asyncio.shield(task)

    async def forfeit(self, reservation: Reservation, *, reason: str) -> Decimal:
        """The call got no answer but may have been billed (it timed out, its connection
        broke after the request was sent, or it was cancelled in flight): record its
        reservation as spent at its worst case, for the budget period, and publish a
        ``spend_unanswered`` event (the alert coalesces them: "N calls timed out; up to $X
        may have been billed"). A reservation no longer open is left alone. Returns the
        amount counted.

        Raises:
            LedgerError: the ledger cannot be written (the spend still counts in memory).
        """
        self._require_open()
        if reservation.state != "open":
            return Decimal(0)
        task = asyncio.ensure_future(
            self._settle(reservation, reservation.model, Usage(), None, unanswered=reason)
        )
        task.add_done_callback(_log_failure)
        return await asyncio.shield(task)

    async def _settle(
        self,
        reservation: Reservation,
        model: str,
        usage: Usage,
        request_id: str | None,
        *,
        unanswered: str | None = None,
    ) -> Decimal:
        try:
            await self._ensure_period()
        except LedgerError as exc:
            if not is_disk_failure(exc):
                raise
            # A new period cannot be loaded while the disk refuses writes; the call was
            # paid for all the same: count it in the period in force, and hold its row.
            log.warning("settling in the period in force (%s): %s", self._st.day, exc)
        if reservation.state == "settled":  # a concurrent settle of the same reservation won
            raise SpendError(
                f"reservation {reservation.id!r} is already settled; settle each call once"
            )
        price, known = self._price_known(model)
        if unanswered is not None:
            # No usage to price: the worst case that was reserved is what may have been
            # billed. The row has no tokens and this cost (docs/spend.md).
            if reservation.state != "open":
                return Decimal(0)
            pusd = reservation.amount_pusd
            cost = from_pusd(pusd)
        else:
            cost = price.cost(usage)
            pusd = to_pusd(cost)
        was_open = self._st.drop(reservation, "settled")
        if unanswered is not None:
            log.warning(
                "call of agent %r on %r got no answer (%s): its worst case $%s counts as spent",
                reservation.agent,
                model,
                unanswered,
                reservation.amount_usd,
            )
        elif not was_open:
            log.warning(
                "settling reservation %s of agent %r after it was released; the cost is "
                "recorded anyway",
                reservation.id,
                reservation.agent,
            )
        elif pusd > reservation.amount_pusd:
            log.warning(
                "call of agent %r on %r cost $%s, more than its reservation $%s: the input "
                "estimate was not an upper bound",
                reservation.agent,
                model,
                cost,
                reservation.amount_usd,
            )
        now = self._clock.time()
        day, month = self._st.day, self._st.month
        agent = reservation.agent
        self._st.spend(agent, pusd)
        crossings = self._st.thresholds(agent, now)
        self._runaway.add(agent, now, pusd)
        limits = self._config.agents[agent].limits if agent in self._config.agents else None
        runaway = self._runaway.check(agent, now, limits.max_cost_usd if limits else None)
        row = CallRow(
            ts=now,
            day=day,
            month=month,
            agent=agent,
            routine=reservation.routine,
            run_id=reservation.run_id,
            model=model,
            usage=usage,
            cost_pusd=pusd,
            request_id=request_id,
            price_known=known,
        )
        inflight_id = reservation.id if was_open else None
        markers = [m for m, _ in crossings]
        self._st.notify()

        unanswered_event: SpendUnanswered | None = None
        if unanswered is not None:
            unanswered_event = self._st.unanswered(reservation, model, unanswered, pusd)

        def publish() -> None:
            if unanswered_event is not None:
                self._bus.publish(unanswered_event)
            for _, crossing in crossings:
                if crossing is not None:
                    self._bus.publish(crossing)
            if runaway is not None:
                self._bus.publish(SpendRunaway(source=SOURCE, **runaway))

        def record(led: Ledger) -> None:
            led.record_call(row, inflight_id=inflight_id, markers=markers)

        if self._held:  # keep the ledger in order: this one waits behind the others
            self._held.append(record, publish)
            await self._held.flush()
            if self._held:
                held = LedgerError(
                    f"the spend ledger {str(self._path)!r} cannot be written (the state disk "
                    f"is failing); this call's ${cost} is counted and held in memory with "
                    f"{len(self._held) - 1} other(s) until it can be recorded"
                )
                held.__cause__ = self._held.disk_error  # a full disk is told by its cause
                held.held_cost = cost
                raise held
            return cost
        try:
            await self._db.write(record, then=publish)
        except LedgerError as exc:
            if not is_disk_failure(exc):
                raise
            # The call was paid for: hold its row and record it once the disk takes writes
            # again (retried by run(), and on close); its cost already counts in memory.
            self._held.append(record, publish)
            self._held.failed(exc)
            self._held.kick()
            exc.held_cost = cost
            raise
        self._wrote()
        return cost

    @property
    def unrecorded(self) -> int:
        """Settled calls held in memory because the ledger could not be written."""
        return len(self._held)

    async def flush_unrecorded(self) -> bool:
        """Write the settled calls held in memory, in order; True when none is left."""
        return await self._held.flush()

    async def release(self, reservation: Reservation) -> None:
        """Give back a reservation whose call failed before anything was billed. Idempotent;
        a settled reservation is left alone.
        """
        if reservation.state != "open":
            return
        self._st.drop(reservation, "released")
        if self._opened:
            await self._db.write(lambda led: led.delete_inflight(reservation.id))

    # -- questions and operator actions ---------------------------------------------------

    def exhausted(self, agent: str) -> str | None:
        """Why ``agent`` cannot spend now (its own or the company's budget is used up or
        refused a call this period), or None.
        """
        if not self._opened:
            return None
        if period_keys(self._clock.time(), self._tz) != (self._st.day, self._st.month):
            return None  # a new period has begun; reserve() will load it
        return self._st.exhausted(agent, self._clock.time())

    async def raise_today(self, agent: str | None, usd: Decimal | float) -> None:
        """Add ``usd`` to today's budget of ``agent`` (None: the company). It adds
        to both today's daily and this month's limit, for today only.

        Raises:
            SpendError: unknown agent, a non-positive amount, or a scope without a budget.
        """
        from companyd.spend import _raises as raises  # here: only a raise needs it (issue 31)

        self._require_open()
        if agent is not None and agent not in self._config.agents:
            raise SpendError(f"unknown agent {agent!r}; agents: {', '.join(self._config.agents)}")
        amount = raises.parse_amount(usd)
        scope = COMPANY if agent is None else agent_scope(agent)
        own = [lim for lim in self._st.limits(agent) if lim.scope == scope]
        raises.check_scope(scope, agent is None, bool(own))
        await self._ensure_period()
        st = self._st
        day = st.day
        # raises still being written count too: two at once cannot pass the bound together
        already = st.raises.get(scope, 0) + st.raising.get(scope, 0)
        raises.check_bound(scope, amount, usd, already)
        pusd = to_pusd(amount)
        ts = self._clock.time()
        # All or nothing: the ledger first (a failed write changes nothing), then memory with
        # no await in between, so memory and ledger always agree.
        st.raising[scope] = st.raising.get(scope, 0) + pusd
        try:
            await self._db.write(lambda led: led.add_raise(scope, day, pusd, ts))
        finally:
            st.raising[scope] -= pusd
        if st.day == day:  # a period rolled over meanwhile: the raise was for that day
            st.raises[scope] = st.raises.get(scope, 0) + pusd
            for key in (st.day, st.month):
                st.blocked.pop((scope, key), None)
        st.notify()
        self._bus.publish(
            BudgetRaised(
                source=SOURCE,
                scope="company" if agent is None else "agent",
                agent=agent,
                day=day,
                usd=as_usd(amount),
                raised_today_usd=as_usd(st.raises.get(scope, 0)),
            )
        )

    def note_api_spend_limit(self, message: str) -> None:
        """Publish a critical ``api_spend_limit`` event: the Anthropic organisation's spend
        limit was hit (the runtime pauses every agent). Repeats within an hour are counted
        into the next event instead of each paging the operator.
        """
        now = self._clock.monotonic()
        if self._api_limit_last is not None and now - self._api_limit_last < (
            API_LIMIT_REPEAT_SECONDS
        ):
            self._api_limit_suppressed += 1
            log.info("API spend limit reported again (suppressed): %s", message)
            return
        self._api_limit_last = now
        repeats, self._api_limit_suppressed = self._api_limit_suppressed, 0
        self._bus.publish(
            ApiSpendLimit(
                source=SOURCE,
                message=message,
                repeats_suppressed=repeats,
                action=(
                    "every agent is paused and no call is made; top up the credit balance or "
                    "raise the organisation's spend limit in the Anthropic console (Settings "
                    "→ Billing / Limits), then resume them all with one command: `companyd "
                    "resume --all` (or /resume all)"
                ),
            )
        )

    async def budget_report(self) -> BudgetsData:
        """Each budget: limit, used, reserved, remaining, when it resets (JSON-ready)."""
        self._require_open()
        await self._ensure_period()
        report = budget_report(
            self._config,
            now=self._clock.time(),
            used=self._st.used,
            reserved=self._st.reserved,
            raises=self._st.raises,
            blocked=self._st.blocked,
        )
        report["in_flight"] = len(self._st.open)
        return report

    async def simulated(self) -> tuple[float, float]:
        """The offline model's spend (simulated: no money spent) today and this month, USD."""
        self._require_open()
        await self._ensure_period()
        day, month = self._st.day, self._st.month

        def read(led: Ledger) -> tuple[float, float]:
            today = sum(led.simulated_between("company", day, day).values())
            this_month = sum(led.simulated_between("company", f"{month}-01", day).values())
            # rounded as the budget report's figures are, so the two compare equal
            return as_usd(today), as_usd(this_month)

        return await self._db.run(read)

    async def spend_report(
        self, by: str = "agent", period: str = "today", *, per_day: bool = False
    ) -> SpendReportData:
        """Spend grouped ``by`` agent, model, routine or day over ``period`` (``today``,
        ``month``, ``YYYY-MM``, ``DATE`` or ``DATE..DATE``); ``per_day``: per day and key.

        Raises:
            SpendError: an unknown grouping or period (the message lists the valid ones).
        """
        from companyd.spend import _reports as reports  # here: only a report needs it (issue 31)

        self._require_open()
        await self._ensure_period()
        today = date.fromisoformat(self._st.day)
        try:
            if by not in reports.GROUPINGS:
                raise ValueError(
                    f"cannot group spend by {by!r}; expected one of {', '.join(reports.GROUPINGS)}"
                )
            parse_period(period, today)
        except ValueError as exc:
            raise SpendError(str(exc)) from None
        return await self._db.run(
            lambda led: reports.spend_report(led, by, period, today, per_day=per_day)
        )

    async def flush(self) -> None:
        """Wait until every ledger write queued so far is done and the events that follow
        them (``budget_exhausted`` is published once its marker is stored) are published.
        """
        self._require_open()
        await self._db.run(lambda led: None)

    async def run_cost(self, run_id: str) -> Decimal:
        """What the ledger holds under ``run_id`` (answered calls and unanswered ones kept
        as spent), in USD; a resumed run's cost starts from it.
        """
        self._require_open()
        return from_pusd(await self._db.run(lambda led: led.run_cost(run_id)))

    async def ledger_rows(self) -> list[dict[str, Any]]:
        """Every ledger row, oldest first (audits, tests)."""
        self._require_open()
        return await self._db.run(lambda led: led.calls())

    # -- internals: periods ---------------------------------------------------------------

    async def _ensure_period(self) -> None:
        if period_keys(self._clock.time(), self._tz) == (self._st.day, self._st.month):
            return
        async with self._period_lock:
            day, month = period_keys(self._clock.time(), self._tz)
            if (day, month) == (self._st.day, self._st.month):
                return
            # The new period's spend is read from the ledger: settled calls still held in
            # memory (a full disk) must be in it first, or the month would forget them.
            if self._held and not await self._held.flush():
                raise LedgerError(
                    f"the spend ledger {str(self._path)!r} cannot be written (the state disk "
                    f"is failing); {len(self._held)} settled call(s) wait to be recorded "
                    "before the new budget period can begin"
                ) from self._held.disk_error

            def load(led: Ledger) -> tuple[Any, ...]:
                led.set_meta({"day": day, "month": month, "timezone": self._config.timezone})
                return (
                    led.used(day),
                    led.used(month),
                    led.raises(day, day_start(day, self._tz)),
                    led.markers([day, month]),
                )

            used_d, used_m, raises, markers = await self._db.run(load)
            resets = self._st.apply_period(day, month, used_d, used_m, raises, markers)
            for reset in resets:
                self._bus.publish(reset)

    # -- internals: budgets ---------------------------------------------------------------

    def _refuse(self, agent: str, lim: BudgetLimit, need: int, *, waited: bool = False) -> NoReturn:
        exc, marker, event = self._st.refuse(
            agent, lim, need, self._clock.time(), waited=self._reserve_wait if waited else None
        )
        if marker is not None and event is not None:
            ts, told = self._clock.time(), event
            self._db.submit(
                lambda led: led.add_markers([marker], ts),
                then=lambda: self._bus.publish(told),
            )
        raise exc

    # -- internals ------------------------------------------------------------------------

    def _price_known(self, model: str) -> tuple[Price, bool]:
        return self._pricing.lookup(
            model, date.fromisoformat(self._st.day) if self._st.day else None
        )

    def _require_open(self) -> None:
        if self._degraded is not None:
            raise LedgerError(
                f"state disk full: the spend ledger {str(self._path)!r} cannot be opened "
                f"({self._degraded.__cause__ or self._degraded}); no LLM call can be budgeted "
                "until the disk takes writes again"
            ) from self._degraded
        if not self._opened:
            raise LedgerError(
                f"the spend ledger {str(self._path)!r} is not open: the spend service has not "
                "started or has stopped; no LLM call can be budgeted"
            )


def _log_failure(task: asyncio.Future[Any]) -> None:
    # Read the outcome so a settle whose caller was cancelled does not end in "exception
    # never retrieved"; the ledger error itself is logged where it happens.
    if not task.cancelled() and task.exception() is not None:
        log.debug("settle failed: %s", task.exception())
