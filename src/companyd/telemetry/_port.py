"""The tracing port: what the runtime calls to emit spans and metrics, and the no-op default.

The agents, their model and tool calls and the scheduler's fires emit through a
:class:`Tracer` they are handed (``AgentDeps.tracer``, ``Scheduler(tracer=...)``); they never
import OpenTelemetry. Parents are passed explicitly (a :class:`Span`), not through context
variables: a routine's fire and the run it waits for are on different asyncio tasks (the
agent takes the task from its mailbox), so the fire registers its span for the task
(:meth:`Tracer.bind_task`) and the run finds it there (:meth:`Tracer.task_parent`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

__all__ = ["NO_SPAN", "NO_TRACING", "GenAI", "Span", "SpanKind", "Tracer", "telemetry_endpoint"]

#: An attribute value OpenTelemetry accepts (None: the attribute is left out).
AttrValue = str | bool | int | float | Sequence[str] | None
SpanKind = Literal["internal", "client"]


class GenAI:
    """The OpenTelemetry GenAI semantic-convention names companyd emits (status Development;
    round3-notes), and companyd's own (``companyd.*``: cost has no standard attribute).
    """

    OPERATION = "gen_ai.operation.name"
    PROVIDER = "gen_ai.provider.name"
    REQUEST_MODEL = "gen_ai.request.model"
    RESPONSE_MODEL = "gen_ai.response.model"
    RESPONSE_ID = "gen_ai.response.id"
    REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
    INPUT_TOKENS = "gen_ai.usage.input_tokens"
    OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
    CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
    CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
    FINISH_REASONS = "gen_ai.response.finish_reasons"
    AGENT_NAME = "gen_ai.agent.name"
    AGENT_ID = "gen_ai.agent.id"
    CONVERSATION_ID = "gen_ai.conversation.id"
    TOOL_NAME = "gen_ai.tool.name"
    TOOL_CALL_ID = "gen_ai.tool.call.id"
    TOOL_TYPE = "gen_ai.tool.type"
    INPUT_MESSAGES = "gen_ai.input.messages"
    OUTPUT_MESSAGES = "gen_ai.output.messages"
    SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
    TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
    TOOL_RESULT = "gen_ai.tool.call.result"
    ERROR_TYPE = "error.type"
    #: the content attributes: exported only with ``telemetry.capture_content: true``
    CONTENT = frozenset(
        {INPUT_MESSAGES, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS, TOOL_ARGUMENTS, TOOL_RESULT}
    )
    ANTHROPIC = "anthropic"
    COST = "companyd.cost.usd"
    ROUTINE = "companyd.routine"
    RUN_ID = "companyd.run.id"
    TASK_ID = "companyd.task.id"
    RUN_STATUS = "companyd.run.status"
    #: the run's verification outcome (docs/agents.md, "Verification"): ``verified`` (its
    #: answer was checked and held), ``unverified`` (it did not hold) or ``none`` (nothing
    #: to check) — on the ``invoke_agent`` span and the routine fire's span
    RUN_VERIFICATION = "companyd.run.verification"
    RUN_REASON = "companyd.run.reason"
    FIRE_ID = "companyd.fire.id"
    FIRE_KIND = "companyd.fire.kind"
    FIRE_OUTCOME = "companyd.fire.outcome"
    AGENT = "companyd.agent"


class Span(Protocol):
    """One span, ended exactly once by whoever started it."""

    def set(self, key: str, value: AttrValue) -> None:
        """Set attribute ``key`` (a None value is left out)."""
        ...

    def set_content(self, key: str, value: object) -> None:
        """Set a content attribute (messages, tool arguments and results): only when the
        tracer captures content, then as redacted JSON bounded in size.
        """
        ...

    def fail(self, error_type: str, message: str = "") -> None:
        """Mark the span failed: ``error.type`` and an error status."""
        ...

    def end(self) -> None:
        """End the span (it is exported in the background)."""
        ...

    def carrier(self) -> dict[str, str]:
        """This span's W3C trace context (``traceparent``, ``tracestate``), for another
        process (an MCP tool server's ``params._meta``); empty when not tracing.
        """
        ...


class Tracer(Protocol):
    """Where the runtime's spans and GenAI metrics go."""

    @property
    def enabled(self) -> bool:
        """Whether spans are exported (False: every call does nothing)."""
        ...

    def start(
        self,
        name: str,
        *,
        parent: Span | None = None,
        kind: SpanKind = "internal",
        attributes: Mapping[str, AttrValue] | None = None,
    ) -> Span:
        """Start a span (a root span without ``parent``)."""
        ...

    def bind_task(self, task_id: str, span: Span) -> None:
        """Make ``span`` the parent of the runs of task ``task_id`` (a routine's fire), or,
        with a run's id, of the runs that run asks for (consultations, reviews).
        """
        ...

    def unbind_task(self, task_id: str) -> None:
        """Forget :meth:`bind_task` (the fire ended)."""
        ...

    def task_parent(self, task_id: str) -> Span | None:
        """The span bound to task ``task_id``, if any."""
        ...

    def record_model_call(
        self,
        *,
        request_model: str,
        response_model: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        seconds: float,
        error_type: str | None,
    ) -> None:
        """Record one model call in ``gen_ai.client.token.usage`` and
        ``gen_ai.client.operation.duration``.
        """
        ...

    def shutdown(self) -> None:
        """Flush what can be flushed within a short deadline and stop exporting (blocking:
        call it in a thread).
        """
        ...


class _NoSpan:
    __slots__ = ()

    def set(self, key: str, value: AttrValue) -> None:
        pass

    def set_content(self, key: str, value: object) -> None:
        pass

    def fail(self, error_type: str, message: str = "") -> None:
        pass

    def end(self) -> None:
        pass

    def carrier(self) -> dict[str, str]:
        return {}


#: The span of nothing traced.
NO_SPAN: Span = _NoSpan()


class _NoTracing:
    """The default tracer: nothing is recorded, nothing is imported."""

    __slots__ = ()

    @property
    def enabled(self) -> bool:
        return False

    def start(
        self,
        name: str,
        *,
        parent: Span | None = None,
        kind: SpanKind = "internal",
        attributes: Mapping[str, AttrValue] | None = None,
    ) -> Span:
        return NO_SPAN

    def bind_task(self, task_id: str, span: Span) -> None:
        pass

    def unbind_task(self, task_id: str) -> None:
        pass

    def task_parent(self, task_id: str) -> Span | None:
        return None

    def record_model_call(
        self,
        *,
        request_model: str,
        response_model: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        seconds: float,
        error_type: str | None,
    ) -> None:
        pass

    def shutdown(self) -> None:
        pass


#: The tracer of a company without telemetry.
NO_TRACING: Tracer = _NoTracing()


def telemetry_endpoint(
    configured: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """Where telemetry goes, or None when it is off: ``telemetry.otlp_endpoint`` from
    company.yaml, else the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the per-signal
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) from the environment. ``OTEL_SDK_DISABLED=true``
    turns it off whatever is set.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if configured:
        return configured
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        value = env.get(name, "").strip()
        if value:
            return value
    return None
