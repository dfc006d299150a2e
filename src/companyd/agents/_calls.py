"""One model call of a run: reserve, send (with fallback), settle, journal.

:class:`ModelCaller` makes the model step of an agent's tool-use loop. Each attempt on each
model is budgeted on its own (:class:`BudgetedCall`); a retryable failure moves on to the
next model of the agent's chain (``model_fallback``); the answer is settled with the spend
book and journaled before the loop sees it, so a restart resumes after it without paying
again. A budget refusal, the organisation's spend limit and a refused API key end the run
(:class:`~companyd.agents._run.RunEnded`) and pause the agent (or every agent) through its
:class:`~companyd.agents._deps.StaffPort`; so does a quota wall on every model of the chain
(a 429 asking to wait past ``anthropic.quota_pause_after``, :mod:`companyd.agents._walls`):
the run ends ``cancelled`` and the agent is paused until the wall's end, a walled model is
skipped without a call meanwhile; a stop that begins during a call ends it
(:class:`~companyd.agents._run.Stopping`) after at most :data:`STOP_CALL_GRACE`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any

from companyd._aio import cancel_and_wait, race
from companyd._fs import is_disk_failure
from companyd.agents._colleagues import withdrawn_at_restart
from companyd.agents._deps import AgentDeps
from companyd.agents._run import RunEnded, RunState, Stopping, StopSignal, cancel_and_reap
from companyd.config import AgentConfig
from companyd.events import ModelFallback
from companyd.llm import (
    ModelAuthFailed,
    ModelBadRequest,
    ModelError,
    ModelRateLimited,
    ModelRequest,
    ModelResponse,
    SpendLimitReached,
    ToolDef,
    estimate_input_tokens,
)
from companyd.runs import LlmStep, RunStatus
from companyd.telemetry import GenAI

__all__ = ["STOP_CALL_GRACE", "BudgetedCall", "ModelCaller"]

#: Seconds a model call in flight when a stop begins may still take to answer; after that it
#: is cancelled (and its worst case kept as spent: it may have been billed).
STOP_CALL_GRACE = 3.0


class ModelCaller:
    """The model calls of one agent.

    Args:
        config: the agent's configuration (model chain, output cap).
        deps: the agent's dependencies.
        stop: whether a stop of the agent or the daemon has begun.
        progress: called whenever the run makes progress (the heartbeat).
    """

    def __init__(
        self,
        config: AgentConfig,
        deps: AgentDeps,
        stop: StopSignal,
        progress: Callable[[], None],
    ) -> None:
        self.config = config
        self.slug = config.slug
        self.deps = deps
        self.stop = stop
        self.progress = progress

    async def step(self, state: RunState, system: str, tools: list[ToolDef]) -> ModelResponse:
        """One model call (with fallback), settled and journaled before returning."""
        deps = self.deps
        base = ModelRequest(
            model=self.config.model.primary,
            system=system,
            messages=list(state.messages),
            tools=tools,
            max_tokens=self.config.model.max_output_tokens,
            metadata={"agent": self.slug, "run_id": state.run_id, "step": state.breaker.steps},
        )
        response, cost = await self._call_with_fallback(state, base)
        self.progress()
        state.seq += 1
        await deps.journal.append_step(
            state.run_id,
            state.seq,
            "llm",
            llm_payload(response, cost),
            deps.clock.time(),
            paid=True,
        )
        state.account(response.model, response.usage, cost, response.offline)
        state.messages.append({"role": "assistant", "content": list(response.content)})
        await deps.journal.update_run_totals(
            state.run_id,
            cost=str(state.cost),
            steps=state.breaker.steps,
            models=state.models,
            offline=state.offline,
        )
        return response

    async def _journal_paid(
        self, state: RunState, response: ModelResponse, exc: BaseException
    ) -> None:
        """Journal the step of a paid call whose ledger row the state disk refused (its
        cost counts in memory and is recorded when space returns).
        """
        cost = getattr(exc, "held_cost", None)
        state.seq += 1
        try:
            await self.deps.journal.append_step(
                state.run_id,
                state.seq,
                "llm",
                llm_payload(response, cost if isinstance(cost, Decimal) else Decimal(0)),
                self.deps.clock.time(),
                paid=True,
            )
        except Exception as journal_exc:
            if not is_disk_failure(journal_exc):
                raise
            # held by the journal and written once the disk takes writes again

    async def _call_with_fallback(
        self, state: RunState, base: ModelRequest
    ) -> tuple[ModelResponse, Decimal]:
        """The step's answer and its cost: the answer's, plus the worst cases of the
        attempts (retries, other models) that got no answer, which the ledger keeps as spent
        under this run — so the run's cost, checked against ``max_cost_usd`` and replayed on
        resume, says what the ledger says. A step that ends without an answer adds those to
        the run's cost as it leaves.
        """
        calls: list[BudgetedCall] = []
        try:
            response, cost = await self._try_chain(state, base, calls)
        except BaseException:
            state.lose(sum((c.forfeited for c in calls), Decimal(0)))
            raise
        return response, cost + sum((c.forfeited for c in calls), Decimal(0))

    async def _try_chain(
        self, state: RunState, base: ModelRequest, calls: list[BudgetedCall]
    ) -> tuple[ModelResponse, Decimal]:
        deps = self.deps
        staff = deps.staff
        chain = self.config.model.chain
        failures: list[str] = []
        walled = 0  # models of the chain behind a quota wall (agents/_walls.py)
        for i, model in enumerate(chain):
            if staff.quota_wall(model) is not None:
                # Rate limited for long (a wall another call met): not called until then.
                walled += 1
                failures.append(f"{model}: rate limited (quota wall)")
                continue
            request = replace(base, model=model)
            call = BudgetedCall(self, state, request)
            calls.append(call)
            try:
                await call.reserve()
                self.progress()
                response = await self._traced_send(state, call, request)
                try:
                    cost = await call.settle(response)
                except Exception as exc:
                    if is_disk_failure(exc):
                        # Paid for, but the ledger holds its row: journal the step anyway
                        # (held too if the journal is refused), so nothing pays for it twice.
                        await self._journal_paid(state, response, exc)
                    raise
                return response, cost
            except deps.budget_exhausted_error as exc:
                # the first attempt or a retry was refused: paused like any budget refusal
                staff.pause(self.slug, f"budget: {exc}", budget=True)
                raise RunEnded(RunStatus.BUDGET_EXHAUSTED, str(exc)) from None
            except SpendLimitReached as exc:
                staff.api_spend_limit(str(exc))
                # its message says it all: "the Anthropic organisation's API spend limit…"
                raise RunEnded(RunStatus.BUDGET_EXHAUSTED, str(exc)) from None
            except ModelAuthFailed as exc:
                # Not this task's fault and not worth another model: stop every agent once.
                staff.api_key_refused(str(exc))
                raise RunEnded(RunStatus.FAILED, str(exc)) from None
            except ModelBadRequest:
                raise  # our request is wrong: crash (a poison input ends in quarantine)
            except ModelError as exc:
                if not exc.retryable:
                    raise
                if self.stop.requested():
                    raise Stopping from None  # no fallback either once a stop has begun
                if isinstance(exc, ModelRateLimited) and staff.meet_quota_wall(
                    model, exc.retry_after
                ):
                    walled += 1
                failures.append(f"{model}: {type(exc).__name__}: {exc}")
                self.progress()
                if i + 1 < len(chain):
                    deps.bus.publish(
                        ModelFallback(
                            source=f"agent/{self.slug}",
                            agent=self.slug,
                            run_id=state.run_id,
                            from_model=model,
                            to_model=chain[i + 1],
                            reason=f"{type(exc).__name__}: {exc}",
                        )
                    )
        walled_reason = (
            staff.quota_walled(self.slug, "; ".join(failures)) if walled == len(chain) else None
        )
        if walled_reason is not None:
            # A quota wall on every model: not the task's fault, and calling again before
            # the wall ends only meets it again. The agent waits (paused) until then.
            raise RunEnded(
                RunStatus.CANCELLED,
                f"{walled_reason} — every model of the chain is rate limited; the agent is "
                "paused until then and resumes by itself",
            )
        raise RunEnded(RunStatus.FAILED, "every model in the chain failed: " + "; ".join(failures))

    async def _traced_send(
        self, state: RunState, call: BudgetedCall, request: ModelRequest
    ) -> ModelResponse:
        """``call.send()`` inside its ``chat {model}`` span (a child of the run's), recorded
        in the GenAI metrics.
        """
        tracer, clock = self.deps.tracer, self.deps.clock
        span = tracer.start(
            f"chat {request.model}",
            parent=state.span,
            kind="client",
            attributes={
                GenAI.OPERATION: "chat",
                GenAI.PROVIDER: GenAI.ANTHROPIC,
                GenAI.REQUEST_MODEL: request.model,
                GenAI.REQUEST_MAX_TOKENS: request.max_tokens,
                GenAI.CONVERSATION_ID: state.run_id,
            },
        )
        span.set_content(GenAI.SYSTEM_INSTRUCTIONS, request.system)
        span.set_content(GenAI.INPUT_MESSAGES, request.messages)
        began = clock.monotonic()
        try:
            response = await call.send()
        except BaseException as exc:
            error = type(exc).__name__
            span.fail(error, str(exc))
            span.end()
            tracer.record_model_call(
                request_model=request.model,
                response_model=None,
                input_tokens=None,
                output_tokens=None,
                seconds=clock.monotonic() - began,
                error_type=error,
            )
            raise
        usage = response.usage
        # GenAI: input_tokens counts every input token, cached ones included (Anthropic's
        # input_tokens leaves the cache reads and writes out)
        input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        span.set(GenAI.RESPONSE_MODEL, response.model)
        span.set(GenAI.RESPONSE_ID, response.request_id or None)
        span.set(GenAI.INPUT_TOKENS, input_tokens)
        span.set(GenAI.OUTPUT_TOKENS, usage.output_tokens)
        span.set(GenAI.CACHE_READ_TOKENS, usage.cache_read_tokens)
        span.set(GenAI.CACHE_CREATION_TOKENS, usage.cache_write_tokens)
        span.set(GenAI.FINISH_REASONS, [response.stop_reason or ""])
        span.set_content(
            GenAI.OUTPUT_MESSAGES, [{"role": "assistant", "content": list(response.content)}]
        )
        span.end()
        tracer.record_model_call(
            request_model=request.model,
            response_model=response.model,
            input_tokens=input_tokens,
            output_tokens=usage.output_tokens,
            seconds=clock.monotonic() - began,
            error_type=None,
        )
        return response


class BudgetedCall:
    """One model call of one agent on one model, each attempt (first try and every retry)
    budgeted on its own (issue 15, docs/spend.md).

    * an attempt is reserved at its worst case before it is sent; no attempt starts once a
      stop has begun (``STOPPING=1``);
    * an attempt that ends with an answer is settled at its real usage; one the provider
      answered with an error (529, 5xx, 429 …) is released: nothing was billed;
    * one that got no answer after it was sent — a timeout, a connection broken mid-call,
      a call cancelled in flight by a stop — is **forfeited**: its worst case stays spent
      for the budget period, since the provider may have processed and billed it.
    """

    def __init__(self, caller: ModelCaller, state: RunState, request: ModelRequest) -> None:
        self._caller = caller
        self._state = state
        self._request = request
        self._open: Any = None  # the open attempt's reservation (SpendPort's type)
        #: what the attempts that got no answer were counted at (forfeited worst cases)
        self.forfeited = Decimal(0)
        #: whether the open attempt has been sent (the backend's ``on_send``)
        self._sent = False

    async def reserve(self) -> None:
        """Reserve the next attempt. A stop that begins meanwhile ends the wait for room in
        the budget (it can last minutes while other calls hold reservations) and the call.
        """
        c, state, request = self._caller, self._state, self._request
        if c.stop.requested():
            raise Stopping
        reserving = asyncio.ensure_future(
            c.deps.spend.reserve(
                agent=c.slug,
                run_id=state.run_id,
                routine=state.task.routine,
                model=request.model,
                input_tokens=estimate_input_tokens(request),
                max_output_tokens=request.max_tokens,
            )
        )
        try:
            while True:
                won = await race(
                    reserving, c.stop.wait(), c.deps.clock.sleep(c.config.heartbeat_seconds / 2)
                )
                if won.index != 2:
                    break
                # Waiting for room in the budget (other calls' reservations; bounded by the
                # book's reserve_wait) is not a stall: the heartbeat must not crash the agent
                # over a busy moment.
                c.progress()
        finally:
            if not reserving.done():
                # A reserve cut by the stop (or our cancellation) is cancelled and awaited:
                # the book undoes it.
                await cancel_and_wait(reserving)
        if won.index == 1:
            raise Stopping
        self._open = reserving.result()
        if c.stop.requested():  # nothing was sent: give the money back
            res, self._open = self._open, None
            await asyncio.shield(c.deps.spend.release(res))
            raise Stopping

    async def _close(self, exc: BaseException) -> None:
        """Settle the open attempt's reservation after ``exc`` ended it."""
        res, self._open = self._open, None
        sent, self._sent = self._sent, False
        if res is None:
            return
        spend = self._caller.deps.spend
        if isinstance(exc, ModelError) and exc.maybe_billed:  # the backend says it was sent
            self.forfeited += await asyncio.shield(
                spend.forfeit(res, reason=f"{type(exc).__name__}: {exc}")
            )
        elif not sent:
            # cut before it left (a stop during a retry's wait): nothing can be billed
            await asyncio.shield(spend.release(res))
        elif isinstance(exc, asyncio.CancelledError | Stopping):
            self.forfeited += await asyncio.shield(
                spend.forfeit(res, reason="cancelled while the request was in flight")
            )
        else:
            await asyncio.shield(spend.release(res))

    def _on_send(self) -> None:
        self._sent = True

    async def _before_retry(self, err: ModelError) -> None:
        await self._close(err)
        self._caller.progress()
        await self.reserve()

    async def send(self) -> ModelResponse:
        """The backend's answer. A stop that begins while the call is in flight gives it
        STOP_CALL_GRACE to answer, then cancels it (forfeited) and raises Stopping; a
        review's call is cancelled at once when the daemon stops (the restart withdraws
        the review, so its answer would not be used).
        """
        c = self._caller
        call = asyncio.ensure_future(
            c.deps.backend.create(
                self._request, before_retry=self._before_retry, on_send=self._on_send
            )
        )
        try:
            await race(call, c.stop.wait())
            if not call.done() and not (
                c.stop.draining() and withdrawn_at_restart(self._state.task)
            ):
                # A stop began while the request was in flight. An answer that comes within
                # STOP_CALL_GRACE is kept (settled and journaled: the run resumes after it);
                # a slow API is not waited out (its timeout times the attempts could hold
                # the stop for many seconds): the call is cancelled, and forfeited. A
                # review's call gets no grace when the daemon stops: the restart withdraws
                # the review (a new one is asked), so its answer would be thrown away.
                await race(call, c.deps.clock.sleep(STOP_CALL_GRACE))
            if not call.done():
                await cancel_and_reap(call, c.slug)
                raise Stopping
            return call.result()
        except BaseException as exc:
            if not call.done():
                call.cancel()
                # Reaped whatever it ends with, our own pending cancellation included: we are
                # leaving with ``exc`` anyway, and a second CancelledError here would change
                # how the agent's exit is counted (tests/agents/test_agent_edges.py).
                with contextlib.suppress(BaseException):
                    await call
            await self._close(exc)
            raise

    async def settle(self, response: ModelResponse) -> Decimal:
        """Record the answered attempt at its real usage; its exact cost."""
        res, self._open = self._open, None
        assert res is not None
        cost: Decimal = await self._caller.deps.spend.settle(
            res,
            model=response.model,
            usage=response.usage,
            request_id=response.request_id,
        )
        return cost


def llm_payload(response: ModelResponse, cost: Decimal) -> LlmStep:
    """A model step as the journal stores it (and a resumed run replays it)."""
    return {
        "model": response.model,
        "content": list(response.content),
        "stop_reason": response.stop_reason,
        "usage": response.usage.to_dict(),
        "cost": str(cost),
        "offline": response.offline,
        "request_id": response.request_id,
    }
