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

(The agent runtime reserves each retry on its own the same way: ``roles/agent.py``,
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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from companyd._fs import DiskAlarm, is_disk_failure
from companyd.clock import Clock
from companyd.config import CompanyConfig
from companyd.daemon.child import ChildContext
from companyd.errors import CompanydError
from companyd.events import EventBus
from companyd.roles.model import Usage
from companyd.spend import reports
from companyd.spend.budgets import (
    COMPANY,
    BudgetLimit,
    agent_scope,
    budget_report,
    limits_for,
    resets_at,
    scope_label,
)
from companyd.spend.budgets import (
    usd as as_usd,
)
from companyd.spend.ledger import (
    CallRow,
    InflightRow,
    Ledger,
    LedgerError,
    from_pusd,
    to_pusd,
)
from companyd.spend.periods import next_day_start, parse_period, period_keys
from companyd.spend.prices import Price, PriceTable
from companyd.spend.runaway import HISTORY_SECONDS, RunawayDetector

__all__ = ["BudgetExhausted", "Reservation", "SpendBook", "SpendError"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SOURCE = "spend"

#: The most today's budget of one scope can be raised by in a day, in total. It keeps every
#: sum the ledger stores far inside SQLite's 64-bit integers (picodollars: 2⁶³ ≈ $9.2 million)
#: and turns a typo (an extra zero or three) into a refusal instead of a blank cheque.
MAX_RAISE_USD = Decimal(1_000_000)

#: Repeated API spend-limit reports within this many seconds publish one event.
API_LIMIT_REPEAT_SECONDS = 3600.0


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
        limit = f" of ${limit_usd:.2f}" if limit_usd is not None else ""
        when = f"; it resets at {resets_at}" if resets_at else ""
        super().__init__(
            f"{whose} {which} budget{limit} is exhausted: this call could cost up to "
            f"${needed_usd:.4f} but only ${remaining_usd:.4f} is left{when} — or raise "
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


class SpendBook:
    """Prices, the ledger, budgets and reservations for one company (see module docstring).

    Args:
        config: the company (budgets, time zone, pricing overrides, runaway settings).
        state_dir: where ``spend.sqlite`` lives.
        bus: where events go.
        clock: time source (defaults to the bus's clock).
        reserve_wait: longest time ``reserve`` waits for other calls' reservations to free
            room before refusing.
    """

    def __init__(
        self,
        config: CompanyConfig,
        state_dir: Path,
        *,
        bus: EventBus,
        clock: Clock | None = None,
        reserve_wait: float = 900.0,
    ) -> None:
        self._bus = bus
        self._clock: Clock = clock or bus.clock
        self._path = Path(state_dir) / "spend.sqlite"
        self._reserve_wait = reserve_wait
        self._boot = uuid.uuid4().hex
        self._set_config(config)
        self._runaway = RunawayDetector(
            float(config.spec.spend.runaway_window),
            Decimal(str(config.spec.spend.runaway_factor)),
        )
        self._executor: ThreadPoolExecutor | None = None
        self._ledger: Ledger | None = None  # touched only in the executor's thread
        self._opened = False
        self._day = ""
        self._month = ""
        self._used: dict[tuple[str, str], int] = {}
        self._reserved: dict[str, int] = {}
        self._open_res: dict[str, Reservation] = {}
        self._raises: dict[str, int] = {}
        self._raising: dict[str, int] = {}  # raises being written to the ledger
        self._sent: set[tuple[str, str, str]] = set()
        self._blocked: dict[tuple[str, str], str] = {}
        self._changed = asyncio.Event()
        self._period_lock = asyncio.Lock()
        self._warned_models: set[str] = set()
        self._api_limit_last: float | None = None
        self._api_limit_suppressed = 0
        #: calls that got no answer today (count, worst case in pusd, day), for the alert
        self._unanswered: tuple[int, int, str] = (0, 0, "")
        #: settled calls whose ledger write failed on the disk, oldest first: (write, then)
        self._unrecorded: list[tuple[Callable[[Ledger], Any], Callable[[], object]]] = []
        self._disk_error: BaseException | None = None  # the last disk failure of a held row
        self._retry_wake: asyncio.Event | None = None
        #: why the ledger could not be opened (a disk failure), while run() retries it
        self._degraded: LedgerError | None = None

    def _set_config(self, config: CompanyConfig) -> None:
        self._config = config
        self._tz = ZoneInfo(config.timezone)
        self._prices = PriceTable.from_config(config.spec.pricing)
        self._limits_cache: dict[str | None, list[BudgetLimit]] = {}

    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    @property
    def prices(self) -> PriceTable:
        """The price table in force (built-in plus company.yaml overrides)."""
        return self._prices

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self, ctx: ChildContext) -> None:
        """Supervised child: open the ledger, signal ready, roll periods over, close."""
        await self.open()
        ctx.started({"ledger": str(self._path)})
        stop = asyncio.ensure_future(ctx.stopping.wait())
        self._retry_wake = asyncio.Event()
        try:
            while not stop.done():
                now = self._clock.time()
                # Wake at local midnight, and at least every minute so a wall-clock jump
                # (NTP, suspend) is noticed promptly; every few seconds while settled calls
                # wait for the disk to take writes again.
                wake = max(0.001, min(next_day_start(now, self._tz) - now, 60.0))
                if self._unrecorded or self._degraded is not None:
                    self._retry_wake.clear()
                    wake = min(wake, UNRECORDED_RETRY_SECONDS)
                sleeper = asyncio.ensure_future(self._clock.sleep(wake))
                try:
                    kicked = asyncio.ensure_future(self._retry_wake.wait())
                    await asyncio.wait({stop, sleeper, kicked}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
                    kicked.cancel()
                if self._degraded is not None:
                    await self.open()
                if self._unrecorded:
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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="companyd-spend")
        now = self._clock.time()
        day, month = period_keys(now, self._tz)
        since = now - HISTORY_SECONDS

        failed: list[BaseException] = []

        def _open() -> tuple[Any, ...]:
            led = Ledger(self._path)
            try:
                last = (led.get_meta("day"), led.get_meta("month"))
                try:
                    stale = led.take_inflight()
                    led.set_meta({"timezone": self._config.timezone, "day": day, "month": month})
                except (sqlite3.Error, OSError) as exc:
                    if not is_disk_failure(exc):
                        raise
                    # Started on a full disk: come up (degraded) on what can be read. The
                    # stale reservations stay in the ledger and are reported next start.
                    failed.append(exc)
                    stale = []
                state = (
                    stale,
                    last,
                    led.used(day),
                    led.used(month),
                    led.raises(day),
                    led.markers([day, month]),
                    led.spend_since(since),
                )
            except (sqlite3.Error, OSError) as exc:
                led.close()
                raise LedgerError(
                    f"cannot read the spend ledger {str(self._path)!r}: {exc}; check the "
                    "file (move a damaged one aside to start a new ledger)"
                ) from exc
            self._ledger = led
            return state

        try:
            stale, last, used_d, used_m, raises, markers, history = await self._run_raw(_open)
        except BaseException as exc:
            self._executor.shutdown(wait=False)
            self._executor = None
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
        if failed:
            log.error("the spend ledger %s cannot be written at start: %s", self._path, failed[0])
            DiskAlarm.of(self._bus).failed("spend ledger", self._path, failed[0])
        self._apply_period(day, month, used_d, used_m, raises, markers, publish=False)
        for agent, ts, pusd in history:
            self._runaway.add(agent, ts, pusd)
        if stale:
            worst = sum(r.amount_pusd for r in stale)
            self._bus.emit(
                "spend_unsettled",
                SOURCE,
                calls=len(stale),
                worst_case_usd=as_usd(worst),
                agents=sorted({r.agent for r in stale}),
                runs=sorted({r.run_id for r in stale if r.run_id}),
                message=(
                    f"{len(stale)} LLM call(s) were in flight when companyd last stopped "
                    f"without settling; up to ${from_pusd(worst):.4f} may have been spent "
                    "without being recorded. Their reservations were dropped."
                ),
            )
        prev_day, prev_month = last
        for period, prev, cur in (("day", prev_day, day), ("month", prev_month, month)):
            if prev and prev != cur:
                self._bus.emit(
                    "budget_reset", SOURCE, period=period, previous=prev, current=cur, agents=[]
                )

    async def close(self) -> None:
        """Close the ledger. Reservations still open stay in ``inflight`` and are reported
        as unsettled at the next start."""
        if not self._opened or self._executor is None:
            return
        if self._unrecorded and not await self.flush_unrecorded():
            # Their reservations stay in `inflight`: the next start reports them as
            # unsettled at their worst case (spend_unsettled), so the money is not lost.
            log.error(
                "closing the spend ledger %s with %d settled call(s) it could not record "
                "(the state disk is failing); the next start reports them as unsettled",
                self._path,
                len(self._unrecorded),
            )
        self._opened = False

        def _close() -> None:
            if self._ledger is not None:
                self._ledger.close()
            self._ledger = None

        try:
            await self._run_raw(_close)
        finally:
            self._executor.shutdown(wait=False)
            self._executor = None
            self._notify()

    async def __aenter__(self) -> SpendBook:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def reconfigure(self, config: CompanyConfig) -> None:
        """Apply a reloaded company.yaml: budgets, prices and runaway settings take effect
        from the next reservation; settled spend and open reservations are kept. Blocks are
        cleared (a raised budget lets agents go on; an unchanged one refuses again)."""
        self._set_config(config)
        self._runaway.reconfigure(
            float(config.spec.spend.runaway_window),
            Decimal(str(config.spec.spend.runaway_factor)),
        )
        self._blocked.clear()
        self._notify()

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
            price = self._price(model)
            need = to_pusd(price.worst_case(input_tokens, max_output_tokens))
            verdict, lim = self._check(agent, need)
            if verdict == "ok":
                break
            assert lim is not None
            if verdict == "refuse":
                self._refuse(agent, lim, need)
            changed = self._changed
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
        self._open_res[res.id] = res
        for scope in self._scopes(agent):
            self._reserved[scope] = self._reserved.get(scope, 0) + need
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
            await self._write(lambda led: led.add_inflight(row))
        except BaseException:
            # Cancelled or failed before the caller got the reservation: undo it.
            self._drop(res, "released")
            with contextlib.suppress(LedgerError):  # closed meanwhile: the row goes on start
                self._submit(lambda led: led.delete_inflight(res.id))
            raise
        return res

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
        await self._ensure_period()
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
        was_open = self._drop(reservation, "settled")
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
        day, month = self._day, self._month
        agent = reservation.agent
        for scope in (COMPANY, agent_scope(agent)):
            for key in (day, month):
                self._used[(scope, key)] = self._used.get((scope, key), 0) + pusd
        crossings = self._thresholds(agent, now)
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
        self._notify()

        unanswered_data: dict[str, Any] | None = None
        if unanswered is not None:
            n, total, seen = self._unanswered
            if seen != day:
                n, total = 0, 0
            n, total = n + 1, total + pusd
            self._unanswered = (n, total, day)
            unanswered_data = {
                "agent": agent,
                "model": model,
                "run_id": reservation.run_id,
                "routine": reservation.routine,
                "worst_case_usd": as_usd(pusd),
                "reason": unanswered,
                "calls": n,
                "total_worst_case_usd": as_usd(total),
                "day": day,
                "message": (
                    f"{n} call{'s' if n != 1 else ''} timed out; up to ${from_pusd(total):.4f} "
                    "may have been billed"
                ),
            }

        def publish() -> None:
            if unanswered_data is not None:
                self._bus.emit("spend_unanswered", SOURCE, **unanswered_data)
            for _, data in crossings:
                self._bus.emit("budget_threshold", SOURCE, **data)
            if runaway is not None:
                self._bus.emit("spend_runaway", SOURCE, **runaway)

        def record(led: Ledger) -> None:
            led.record_call(row, inflight_id=inflight_id, markers=markers)

        if self._unrecorded:  # keep the ledger in order: this one waits behind the others
            self._unrecorded.append((record, publish))
            await self.flush_unrecorded()
            if self._unrecorded:
                held = LedgerError(
                    f"the spend ledger {str(self._path)!r} cannot be written (the state disk "
                    f"is failing); this call's ${cost} is counted and held in memory with "
                    f"{len(self._unrecorded) - 1} other(s) until it can be recorded"
                )
                held.__cause__ = self._disk_error  # a full disk is told apart by its cause
                held.held_cost = cost
                raise held
            return cost
        try:
            await self._write(record, then=publish)
        except LedgerError as exc:
            if not is_disk_failure(exc):
                raise
            # The call was paid for: hold its row and record it once the disk takes writes
            # again (retried by run(), and on close); its cost already counts in memory.
            self._unrecorded.append((record, publish))
            self._disk_error = exc
            DiskAlarm.of(self._bus).failed("spend ledger", self._path, exc)
            self._kick_retry()
            exc.held_cost = cost
            raise
        return cost

    @property
    def unrecorded(self) -> int:
        """Settled calls held in memory because the ledger could not be written."""
        return len(self._unrecorded)

    async def flush_unrecorded(self) -> bool:
        """Write the settled calls held in memory, in order; True when none is left."""
        while self._unrecorded and self._executor is not None:
            record, publish = self._unrecorded[0]
            try:
                await self._write(record, then=publish)
            except LedgerError as exc:
                if is_disk_failure(exc):
                    self._disk_error = exc
                    DiskAlarm.of(self._bus).failed("spend ledger", self._path, exc)
                return False
            self._unrecorded.pop(0)
            if not self._unrecorded:
                log.warning(
                    "the spend ledger %s takes writes again; held calls recorded", self._path
                )
                DiskAlarm.of(self._bus).recovered("spend ledger")
        return not self._unrecorded

    def _kick_retry(self) -> None:
        wake = self._retry_wake
        if wake is not None and not wake.is_set():
            wake.set()

    async def release(self, reservation: Reservation) -> None:
        """Give back a reservation whose call failed before anything was billed. Idempotent;
        a settled reservation is left alone."""
        if reservation.state != "open":
            return
        self._drop(reservation, "released")
        if self._opened:
            await self._write(lambda led: led.delete_inflight(reservation.id))

    # -- questions and operator actions ---------------------------------------------------

    def exhausted(self, agent: str) -> str | None:
        """Why ``agent`` cannot spend now (its own or the company's budget is used up or
        refused a call this period), or None."""
        if not self._opened:
            return None
        if period_keys(self._clock.time(), self._tz) != (self._day, self._month):
            return None  # a new period has begun; reserve() will load it
        now = self._clock.time()
        for lim in self._limits(agent):
            key = self._key(lim)
            reason = self._blocked.get((lim.scope, key))
            if reason:
                return reason
            limit = lim.limit_pusd + self._raises.get(lim.scope, 0)
            used = self._used.get((lim.scope, key), 0)
            if used >= limit:
                return (
                    f"{scope_label(lim.scope)} {_which(lim.period)} budget of "
                    f"${from_pusd(limit):.2f} is used up (${from_pusd(used):.4f} spent); it "
                    f"resets at {resets_at(lim.period, now, self._tz).isoformat()}"
                )
        return None

    async def raise_today(self, agent: str | None, usd: Decimal | float) -> None:
        """Add ``usd`` to today's budget of ``agent`` (None: the company). It adds
        to both today's daily and this month's limit, for today only.

        Raises:
            SpendError: unknown agent, a non-positive amount, or a scope without a budget.
        """
        self._require_open()
        if agent is not None and agent not in self._config.agents:
            raise SpendError(f"unknown agent {agent!r}; agents: {', '.join(self._config.agents)}")
        try:
            amount = usd if isinstance(usd, Decimal) else Decimal(str(usd))
        except ArithmeticError:
            amount = Decimal("NaN")
        if not amount.is_finite() or amount <= 0:
            raise SpendError(
                "a budget raise must be a positive amount of USD such as 5 or 2.50, got "
                f"{str(usd)!r}"
            )
        scope = COMPANY if agent is None else agent_scope(agent)
        own = [lim for lim in self._limits(agent) if lim.scope == scope]
        if not own:
            raise SpendError(
                f"{scope_label(scope)} has no budget to raise "
                + (
                    "(the company budget is unlimited)"
                    if agent is None
                    else "(only the company budget applies to it; raise that instead)"
                )
            )
        await self._ensure_period()
        day = self._day
        # raises still being written count too: two at once cannot pass the bound together
        already = self._raises.get(scope, 0) + self._raising.get(scope, 0)
        if amount > MAX_RAISE_USD or to_pusd(amount) + already > to_pusd(MAX_RAISE_USD):
            shown = f"${amount:,.2f}" if amount <= MAX_RAISE_USD else f"${usd}"
            raise SpendError(
                f"a budget raise of {shown:.40} is refused: {scope_label(scope)} may be "
                f"raised by at most ${MAX_RAISE_USD:,} a day in total (already raised today: "
                f"${from_pusd(already):,.2f}); for a lasting change edit the budget in "
                "company.yaml and reload"
            )
        pusd = to_pusd(amount)
        ts = self._clock.time()
        # All or nothing: the ledger first (a failed write changes nothing), then memory with
        # no await in between, so memory and ledger always agree.
        self._raising[scope] = self._raising.get(scope, 0) + pusd
        try:
            await self._write(lambda led: led.add_raise(scope, day, pusd, ts))
        finally:
            self._raising[scope] -= pusd
        if self._day == day:  # a period rolled over meanwhile: the raise was for that day
            self._raises[scope] = self._raises.get(scope, 0) + pusd
            for key in (self._day, self._month):
                self._blocked.pop((scope, key), None)
        self._notify()
        self._bus.emit(
            "budget_raised",
            SOURCE,
            scope="company" if agent is None else "agent",
            agent=agent,
            day=day,
            usd=as_usd(amount),
            raised_today_usd=as_usd(self._raises.get(scope, 0)),
        )

    def note_api_spend_limit(self, message: str) -> None:
        """Publish a critical ``api_spend_limit`` event: the Anthropic organisation's spend
        limit was hit (the runtime pauses every agent). Repeats within an hour are counted
        into the next event instead of each paging the operator."""
        now = self._clock.monotonic()
        if self._api_limit_last is not None and now - self._api_limit_last < (
            API_LIMIT_REPEAT_SECONDS
        ):
            self._api_limit_suppressed += 1
            log.info("API spend limit reported again (suppressed): %s", message)
            return
        self._api_limit_last = now
        repeats, self._api_limit_suppressed = self._api_limit_suppressed, 0
        self._bus.emit(
            "api_spend_limit",
            SOURCE,
            message=message,
            repeats_suppressed=repeats,
            action=(
                "every agent is paused; raise the organisation's spend limit in the "
                "Anthropic console, then resume the agents"
            ),
        )

    async def budget_report(self) -> dict[str, Any]:
        """Each budget: limit, used, reserved, remaining, when it resets (JSON-ready)."""
        self._require_open()
        await self._ensure_period()
        report = budget_report(
            self._config,
            now=self._clock.time(),
            used=self._used,
            reserved=self._reserved,
            raises=self._raises,
            blocked=self._blocked,
        )
        report["in_flight"] = len(self._open_res)
        return report

    async def spend_report(self, by: str = "agent", period: str = "today") -> dict[str, Any]:
        """Spend grouped ``by`` agent, model, routine or day over ``period`` (``today``,
        ``month``, ``YYYY-MM``, ``DATE`` or ``DATE..DATE``).

        Raises:
            SpendError: an unknown grouping or period (the message lists the valid ones).
        """
        self._require_open()
        await self._ensure_period()
        today = date.fromisoformat(self._day)
        try:
            if by not in reports.GROUPINGS:
                raise ValueError(
                    f"cannot group spend by {by!r}; expected one of {', '.join(reports.GROUPINGS)}"
                )
            parse_period(period, today)
        except ValueError as exc:
            raise SpendError(str(exc)) from None
        return await self._run_db(lambda led: reports.spend_report(led, by, period, today))

    async def flush(self) -> None:
        """Wait until every ledger write queued so far is done and the events that follow
        them (``budget_exhausted`` is published once its marker is stored) are published."""
        self._require_open()
        await self._run_db(lambda led: None)

    async def ledger_rows(self) -> list[dict[str, Any]]:
        """Every ledger row, oldest first (audits, tests)."""
        self._require_open()
        return await self._run_db(lambda led: led.calls())

    # -- internals: periods ---------------------------------------------------------------

    def _key(self, lim: BudgetLimit) -> str:
        return self._day if lim.period == "day" else self._month

    async def _ensure_period(self) -> None:
        if period_keys(self._clock.time(), self._tz) == (self._day, self._month):
            return
        async with self._period_lock:
            day, month = period_keys(self._clock.time(), self._tz)
            if (day, month) == (self._day, self._month):
                return

            def load(led: Ledger) -> tuple[Any, ...]:
                led.set_meta({"day": day, "month": month, "timezone": self._config.timezone})
                return (
                    led.used(day),
                    led.used(month),
                    led.raises(day),
                    led.markers([day, month]),
                )

            used_d, used_m, raises, markers = await self._run_db(load)
            self._apply_period(day, month, used_d, used_m, raises, markers, publish=True)

    def _apply_period(
        self,
        day: str,
        month: str,
        used_d: dict[str, int],
        used_m: dict[str, int],
        raises: dict[str, int],
        markers: set[tuple[str, str, str]],
        *,
        publish: bool,
    ) -> None:
        old_day, old_month = self._day, self._month
        was_blocked = dict(self._blocked)
        used = {(s, day): v for s, v in used_d.items()}
        used.update({(s, month): v for s, v in used_m.items()})
        self._used = used
        self._raises = dict(raises)
        self._sent = set(markers)
        self._blocked = {k: v for k, v in self._blocked.items() if k[1] in (day, month)}
        self._day, self._month = day, month
        self._notify()
        if not publish:
            return
        for period, old, new in (("day", old_day, day), ("month", old_month, month)):
            if old and old != new:
                lifted = sorted(s for (s, k) in was_blocked if k == old)
                self._bus.emit(
                    "budget_reset",
                    SOURCE,
                    period=period,
                    previous=old,
                    current=new,
                    agents=[s.removeprefix("agent:") for s in lifted if s != COMPANY],
                    company=COMPANY in lifted,
                )

    # -- internals: budgets ---------------------------------------------------------------

    def _limits(self, agent: str | None) -> list[BudgetLimit]:
        lims = self._limits_cache.get(agent)
        if lims is None:
            lims = self._limits_cache[agent] = limits_for(self._config, agent)
        return lims

    def _scopes(self, agent: str) -> tuple[str, str]:
        return (COMPANY, agent_scope(agent))

    def _check(self, agent: str, need: int) -> tuple[str, BudgetLimit | None]:
        """``("ok", None)``, ``("wait", limit)`` or ``("refuse", limit)``."""
        waiting: BudgetLimit | None = None
        for lim in self._limits(agent):
            key = self._key(lim)
            limit = lim.limit_pusd + self._raises.get(lim.scope, 0)
            used = self._used.get((lim.scope, key), 0)
            if need > limit - used:
                return "refuse", lim
            if need > limit - used - self._reserved.get(lim.scope, 0) and waiting is None:
                waiting = lim
        return ("wait", waiting) if waiting is not None else ("ok", None)

    def _refuse(self, agent: str, lim: BudgetLimit, need: int, *, waited: bool = False) -> None:
        key = self._key(lim)
        limit = lim.limit_pusd + self._raises.get(lim.scope, 0)
        used = self._used.get((lim.scope, key), 0)
        remaining = max(0, limit - used - self._reserved.get(lim.scope, 0))
        when = resets_at(lim.period, self._clock.time(), self._tz).isoformat()
        exc = BudgetExhausted(
            "company" if lim.scope == COMPANY else "agent",
            agent,
            lim.period,
            from_pusd(need),
            from_pusd(remaining),
            limit_usd=from_pusd(limit),
            resets_at=when,
        )
        reason = str(exc)
        if waited:
            reason += (
                f" (waited {self._reserve_wait:g} s for calls in flight to free their reservations)"
            )
        self._blocked[(lim.scope, key)] = reason
        marker = (lim.scope, key, f"exhausted@{limit}")
        if marker not in self._sent:
            self._sent.add(marker)
            data: dict[str, Any] = {
                "scope": "company" if lim.scope == COMPANY else "agent",
                "agent": lim.agent,
                "asked_by": agent,
                "period": lim.period,
                "key": key,
                "limit_usd": as_usd(limit),
                "used_usd": as_usd(used),
                "needed_usd": as_usd(need),
                "remaining_usd": as_usd(remaining),
                "resets_at": when,
                "reason": reason,
            }
            ts = self._clock.time()
            self._submit(
                lambda led: led.add_markers([marker], ts),
                then=lambda: self._bus.emit("budget_exhausted", SOURCE, **data),
            )
        raise exc

    def _drop(self, res: Reservation, state: str) -> bool:
        """Remove an open reservation from the in-memory totals; False if it was not open."""
        if self._open_res.pop(res.id, None) is None:
            if res.state == "open":
                res.state = state
            return False
        res.state = state
        for scope in self._scopes(res.agent):
            left = self._reserved.get(scope, 0) - res.amount_pusd
            if left > 0:
                self._reserved[scope] = left
            else:
                self._reserved.pop(scope, None)
        self._notify()
        return True

    def _thresholds(self, agent: str, now: float) -> list[tuple[tuple[str, str, str], Any]]:
        out: list[tuple[tuple[str, str, str], Any]] = []
        for lim in self._limits(agent):
            key = self._key(lim)
            limit = lim.limit_pusd + self._raises.get(lim.scope, 0)
            used = self._used.get((lim.scope, key), 0)
            for level in lim.warn_at:
                if Decimal(used) < Decimal(str(level)) * limit:
                    continue
                marker = (lim.scope, key, f"warn:{level:g}")
                if marker in self._sent:
                    continue
                self._sent.add(marker)
                out.append(
                    (
                        marker,
                        {
                            "scope": "company" if lim.scope == COMPANY else "agent",
                            "agent": lim.agent,
                            "period": lim.period,
                            "key": key,
                            "level": level,
                            "used_usd": as_usd(used),
                            "limit_usd": as_usd(limit),
                            "resets_at": resets_at(lim.period, now, self._tz).isoformat(),
                            "message": (
                                f"{scope_label(lim.scope)} has used {used / limit:.0%} of its "
                                f"{_which(lim.period)} budget (${from_pusd(used):.2f} of "
                                f"${from_pusd(limit):.2f})"
                            ),
                        },
                    )
                )
        return out

    # -- internals: prices ----------------------------------------------------------------

    def _price_known(self, model: str) -> tuple[Price, bool]:
        on = date.fromisoformat(self._day) if self._day else None
        price, known = self._prices.lookup(model, on)
        if not known and model not in self._warned_models:
            self._warned_models.add(model)
            p = price
            self._bus.emit(
                "unknown_model_price",
                SOURCE,
                model=model,
                priced_as={
                    "input": float(p.input),
                    "cache_write_5m": float(p.cache_write_5m),
                    "cache_write_1h": float(p.cache_write_1h),
                    "cache_read": float(p.cache_read),
                    "output": float(p.output),
                },
                message=(
                    f"model {model!r} is not in the price table; its calls are priced at the "
                    "most expensive known rate — add it under 'pricing' in company.yaml"
                ),
            )
        return price, known

    def _price(self, model: str) -> Price:
        return self._price_known(model)[0]

    # -- internals: the ledger thread -----------------------------------------------------

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

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _submit(
        self, fn: Callable[[Ledger], Any], *, then: Callable[[], object] | None = None
    ) -> asyncio.Future[Any]:
        """Queue ``fn(ledger)`` on the ledger thread; ``then()`` runs on the loop after it
        succeeds, even if whoever awaited the result was cancelled meanwhile."""
        if self._executor is None:
            raise LedgerError(f"the spend ledger {str(self._path)!r} is closed")
        path = self._path

        def job() -> Any:
            led = self._ledger
            if led is None:
                raise LedgerError(f"the spend ledger {str(path)!r} is closed")
            try:
                return fn(led)
            except (sqlite3.Error, OSError) as exc:  # the disk, not our logic
                raise LedgerError(
                    f"the spend ledger {str(path)!r} could not be written or read: "
                    f"{type(exc).__name__}: {exc}; check free disk space and permissions"
                ) from exc

        fut = asyncio.get_running_loop().run_in_executor(self._executor, job)

        def done(f: asyncio.Future[Any]) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if exc is not None:
                if isinstance(exc, LedgerError):
                    log.error("%s", exc)
                return
            if then is not None:
                then()

        fut.add_done_callback(done)
        return fut

    async def _write(
        self, fn: Callable[[Ledger], Any], *, then: Callable[[], object] | None = None
    ) -> Any:
        # shield: a caller cancelled mid-write must not leave the write (or the events that
        # follow it) half done; the job finishes in the ledger thread either way.
        return await asyncio.shield(self._submit(fn, then=then))

    async def _run_db(self, fn: Callable[[Ledger], T]) -> T:
        result: T = await self._submit(fn)
        return result

    async def _run_raw(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the ledger thread (opening and closing the connection)."""
        if self._executor is None:
            raise LedgerError(f"the spend ledger {str(self._path)!r} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)


#: How often settled calls held in memory are retried while the ledger cannot be written.
UNRECORDED_RETRY_SECONDS = 5.0


def _log_failure(task: asyncio.Future[Any]) -> None:
    # Read the outcome so a settle whose caller was cancelled does not end in "exception
    # never retrieved"; the ledger error itself is logged where it happens.
    if not task.cancelled() and task.exception() is not None:
        log.debug("settle failed: %s", task.exception())


def _which(period: str) -> str:
    return "daily" if period == "day" else "monthly"
