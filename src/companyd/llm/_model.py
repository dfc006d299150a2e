"""The model boundary: what an agent sends to a language model and what comes back.

Agents never see SDK objects. They build a :class:`ModelRequest`, hand it to a
:class:`ModelBackend` and get a :class:`ModelResponse` — or one of the errors below. Two
backends implement the protocol:

* ``companyd.llm._claude.ClaudeBackend`` — the official ``anthropic`` SDK (the only module
  that imports it), with its errors mapped to these;
* ``companyd.llm._offline.OfflineModel`` — a deterministic built-in stand-in used with
  ``--offline``.

Content blocks are plain dicts in the Messages API's own JSON shapes (``{"type": "text",
"text": ...}``, ``{"type": "tool_use", "id": ..., "name": ..., "input": {...}}``,
``{"type": "tool_result", ...}``), so they can be journaled as JSON and replayed verbatim;
their TypedDicts are in :mod:`companyd.llm._blocks`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, Protocol

from companyd._frozen import Frozen
from companyd.errors import CompanydError
from companyd.llm._blocks import (
    ContentBlock,
    Message,
    ToolParam,
    ToolUseBlock,
    text_of,
    tool_uses_of,
)

__all__ = [
    "ModelAuthFailed",
    "ModelBackend",
    "ModelBadRequest",
    "ModelError",
    "ModelOverloaded",
    "ModelRateLimited",
    "ModelRequest",
    "ModelResponse",
    "ModelServerError",
    "ModelTimeout",
    "ModelUnavailable",
    "RetryHook",
    "SpendLimitReached",
    "ToolDef",
    "Usage",
    "estimate_input_tokens",
]


class Usage(Frozen):
    """Token counts of one model call, as the Messages API reports them.

    ``input_tokens`` excludes cached tokens; cache writes are split by TTL.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    cache_read_tokens: int = 0

    @property
    def cache_write_tokens(self) -> int:
        """Tokens written to the prompt cache, both TTLs together."""
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens

    @property
    def total_tokens(self) -> int:
        """Every token of the call: input, output, cache writes and cache reads."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_write_5m_tokens
            + self.cache_write_1h_tokens
            + self.cache_read_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_write_5m_tokens=self.cache_write_5m_tokens + other.cache_write_5m_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """The five counts keyed by field name, JSON-ready (as the run journal stores them)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_write_5m_tokens": self.cache_write_5m_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
            "cache_read_tokens": self.cache_read_tokens,
        }


class ToolDef(Frozen):
    """A tool as the model sees it (name, description, JSON Schema of its input)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]

    def to_api(self) -> ToolParam:
        """The tool as a Messages API ``tools`` entry (a fresh copy of the input schema)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
        }


class ModelRequest(Frozen):
    """One Messages API call.

    Attributes:
        model: model id, e.g. ``"claude-sonnet-5-5"``.
        system: the system prompt (the stable, cacheable prefix together with ``tools``).
        messages: the conversation, in the API's JSON shape.
        tools: the tools offered.
        max_tokens: output cap for this call (also the worst case reserved against budgets).
        cache: mark the stable prefix (system + tools) for prompt caching.
        metadata: companyd's own labels (agent, run id, step) — not sent to the model.
    """

    model: str
    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolDef] = ()
    max_tokens: int = 4096
    cache: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict)


class ModelResponse(Frozen):
    """What came back from one call.

    Attributes:
        model: the model that actually served the call.
        content: the assistant's content blocks, as API JSON dicts, to echo back verbatim.
        stop_reason: ``end_turn``, ``tool_use``, ``max_tokens``, ``refusal``, …
        usage: token counts to price.
        request_id: the provider's request id (for support tickets), if any.
        offline: True when the offline stand-in produced it.
    """

    model: str
    content: Sequence[ContentBlock]
    stop_reason: str
    usage: Usage
    request_id: str | None = None
    offline: bool = False

    @property
    def text(self) -> str:
        """All text blocks joined."""
        return text_of(self.content)

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        """The ``tool_use`` blocks of :attr:`content`, in order (empty when the turn ended)."""
        return tool_uses_of(self.content)


#: Called by a backend before it retries a failed attempt, with that attempt's error. The
#: caller settles the failed attempt's reservation (kept as spent when the error says it
#: ``maybe_billed``) and reserves the next attempt; whatever it raises (a refused budget, a
#: stop) ends the call without the retry.
RetryHook = Callable[["ModelError"], Awaitable[None]]


class ModelBackend(Protocol):
    """Something that answers Messages API requests."""

    async def create(
        self,
        request: ModelRequest,
        *,
        before_retry: RetryHook | None = None,
        on_send: Callable[[], None] | None = None,
    ) -> ModelResponse:
        """Send one request (after the backend's own retries) or raise a ModelError.

        ``before_retry`` is awaited before every retry (not before the first attempt), so
        each attempt can be budgeted on its own. ``on_send()`` is called as each attempt
        (the first and every retry) is about to leave: until then, a call cut short (a
        stop during a retry's wait) sent nothing that could be billed.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class ModelError(CompanydError):
    """A model call failed. ``retryable`` says whether another model may be tried.

    ``maybe_billed`` is True when the request was sent and no answer came back (a timeout,
    a connection broken after sending): the provider may have processed and billed it, so
    its reservation is kept as spent at its worst case (docs/spend.md).
    """

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        maybe_billed: bool = False,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.status = status
        self.request_id = request_id
        self.maybe_billed = maybe_billed


class ModelOverloaded(ModelError):
    """HTTP 529: the API is overloaded. Fall back to the next model."""

    retryable = True


class ModelRateLimited(ModelError):
    """HTTP 429 (not a spend limit): the organisation's rate limit. Fall back."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ModelServerError(ModelError):
    """HTTP 5xx. Fall back."""

    retryable = True


class ModelTimeout(ModelError):
    """No response within the deadline, or the connection failed. Fall back."""

    retryable = True


class ModelUnavailable(ModelError):
    """The model cannot be reached at all (no API key, every fallback failed)."""


class ModelBadRequest(ModelError):
    """HTTP 4xx other than 429: our request is wrong. Do not retry it as it is."""


class ModelAuthFailed(ModelError):
    """HTTP 401: the API refused the key. No call can succeed until the operator fixes it,
    so nothing is retried and the task is not blamed: every agent is paused and a critical
    ``api_key_refused`` event is published.
    """


class SpendLimitReached(ModelError):
    """HTTP 429 with ``enforced_spend_limit_reached``: the organisation's API spend limit.

    Not retried: every agent is paused and a critical event is published.
    """


# Upper-bound estimate constants (see estimate_input_tokens).
_REQUEST_OVERHEAD = 64
_MESSAGE_OVERHEAD = 16
_TOOLS_OVERHEAD = 1024
_IMAGE_TOKENS = 2000


def _count_images(obj: Any) -> int:
    if isinstance(obj, dict):
        n = 1 if obj.get("type") in ("image", "document") else 0
        return n + sum(_count_images(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_count_images(v) for v in obj)
    return 0


def least_input_tokens(text_bytes: int, tools_bytes: int) -> int:
    """What :func:`estimate_input_tokens` reserves at least for a one-message request whose
    system prompt and message hold ``text_bytes`` of text and whose tools' definitions are
    ``tools_bytes`` long (the JSON around them left out: a floor, never more).
    """
    tools = _TOOLS_OVERHEAD if tools_bytes else 0
    return text_bytes + tools_bytes + tools + _MESSAGE_OVERHEAD + _REQUEST_OVERHEAD


def estimate_input_tokens(request: ModelRequest) -> int:
    """A guaranteed upper bound of the prompt tokens ``request`` will be billed for.

    The sum of: the UTF-8 length in bytes of the JSON-serialised system prompt, messages and
    tools (a token always stands for at least one byte of text, and JSON adds quotes, keys
    and escapes on top); 16 per message and 64 per request for role and turn markers; 1,024
    when tools are offered (the API's hidden tool-use system prompt is a few hundred
    tokens); 2,000 per image or document block (an image is billed by its pixels, at most
    about 1,600 tokens after the API's resizing, not by its base64 size). Used to reserve
    the worst case against budgets before the call, so it errs high on purpose.
    """
    payload = {
        "system": request.system,
        "messages": list(request.messages),
        "tools": [t.to_api() for t in request.tools],
    }
    size = len(json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8"))
    images = _count_images(payload["messages"])
    return (
        size
        + _REQUEST_OVERHEAD
        + _MESSAGE_OVERHEAD * len(request.messages)
        + (_TOOLS_OVERHEAD if request.tools else 0)
        + _IMAGE_TOKENS * images
    )
