"""What the Messages API stand-in answers with: scripted replies, faults and stalls.

A script is a queue of items, one per ``/v1/messages`` request: a :class:`Reply` (a
``message`` object), a :class:`Fault` (an error response with the API's error body and retry
headers) or a :class:`Stall` (hold the request, then answer or hang up). The builders
(:func:`reply_text`, :func:`reply_tool_use`, :func:`overloaded`, :func:`rate_limited`,
:func:`spend_limit`, …) make the common ones; :func:`item_from_json` reads the JSON form the
``/_standin/enqueue`` control endpoint and ``--script`` files use.

This module also owns the API's JSON shape of token usage (:func:`usage_to_api` writes it,
:func:`usage_of` reads it back from a served message body).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from companyd.llm import ContentBlock, Usage

__all__ = [
    "Fault",
    "Reply",
    "ScriptItem",
    "Stall",
    "bad_request",
    "fault",
    "item_from_json",
    "overloaded",
    "rate_limited",
    "reply_text",
    "reply_tool_use",
    "server_error",
    "spend_limit",
    "stall",
    "usage_of",
    "usage_to_api",
]


def usage_to_api(usage: Usage, breakdown: bool) -> dict[str, Any]:
    """``usage`` in the API's JSON shape (with the 5m/1h ``cache_creation`` split if
    ``breakdown``).
    """
    body: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "service_tier": "standard",
    }
    if breakdown:
        body["cache_creation"] = {
            "ephemeral_5m_input_tokens": usage.cache_write_5m_tokens,
            "ephemeral_1h_input_tokens": usage.cache_write_1h_tokens,
        }
    return body


def _usage_from_json(d: Mapping[str, Any] | None) -> Usage:
    if not d:
        return Usage(input_tokens=10, output_tokens=5)
    return Usage(
        input_tokens=int(d.get("input_tokens", 0)),
        output_tokens=int(d.get("output_tokens", 0)),
        cache_write_5m_tokens=int(d.get("cache_write_5m_tokens", 0)),
        cache_write_1h_tokens=int(d.get("cache_write_1h_tokens", 0)),
        cache_read_tokens=int(d.get("cache_read_tokens", 0)),
    )


@dataclass(frozen=True, kw_only=True)
class Reply:
    """A successful ``message`` response.

    Attributes:
        content: content blocks in the API's JSON shape.
        stop_reason: ``end_turn``, ``tool_use``, ``max_tokens``, …
        usage: token counts to report.
        usage_breakdown: include ``usage.cache_creation`` (5m/1h split); False mimics
            responses that only carry ``cache_creation_input_tokens``.
        model: model id to report; None echoes the request's model.
        latency: seconds to wait before answering.
    """

    content: tuple[ContentBlock, ...]
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=10, output_tokens=5))
    usage_breakdown: bool = True
    model: str | None = None
    latency: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The reply in the script's JSON form (``"type": "message"``); :func:`item_from_json`
        reads it back.
        """
        return {
            "type": "message",
            "content": [dict(b) for b in self.content],
            "stop_reason": self.stop_reason,
            "usage": self.usage.to_dict(),
            "usage_breakdown": self.usage_breakdown,
            "model": self.model,
            "latency": self.latency,
        }


@dataclass(frozen=True, kw_only=True)
class Fault:
    """An error response.

    Attributes:
        status: HTTP status (400, 401, 429, 500, 529, …).
        error_type: ``error.type`` (``overloaded_error``, ``rate_limit_error``, …).
        message: ``error.message``.
        error_code: ``error.details.error_code`` (e.g. ``enforced_spend_limit_reached``).
        retry_after: ``retry-after`` header value (seconds, or an HTTP date string).
        retry_after_ms: ``retry-after-ms`` header value.
        should_retry: ``x-should-retry`` header (True/False), or absent.
        latency: seconds to wait before answering.
        headers: further response headers (e.g. ``anthropic-ratelimit-tokens-reset``).
    """

    status: int
    error_type: str
    message: str
    error_code: str | None = None
    retry_after: float | str | None = None
    retry_after_ms: float | None = None
    should_retry: bool | None = None
    latency: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The fault in the script's JSON form (``"type": "error"``); :func:`item_from_json`
        reads it back.
        """
        return {
            "type": "error",
            "status": self.status,
            "error_type": self.error_type,
            "message": self.message,
            "error_code": self.error_code,
            "retry_after": self.retry_after,
            "retry_after_ms": self.retry_after_ms,
            "should_retry": self.should_retry,
            "latency": self.latency,
            "headers": dict(self.headers),
        }


@dataclass(frozen=True, kw_only=True)
class Stall:
    """Hold the request open, then answer with ``then`` (or just close the connection).

    Attributes:
        seconds: how long to hold it; None holds it until
            :meth:`MessagesAPIServer.release_stalls` or the server stops.
        then: what to answer afterwards if the client is still connected; None closes the
            connection without an answer.

    Used for client timeouts (hold longer than the client's deadline) and for "the call was
    in flight when the process was killed" tests.
    """

    seconds: float | None = None
    then: Reply | Fault | None = None

    def to_json(self) -> dict[str, Any]:
        """The stall in the script's JSON form (``"type": "stall"``, with the item that follows
        it); :func:`item_from_json` reads it back.
        """
        return {
            "type": "stall",
            "seconds": self.seconds,
            "then": self.then.to_json() if self.then is not None else None,
        }


ScriptItem = Reply | Fault | Stall

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def reply_text(
    text: str,
    *,
    usage: Usage | None = None,
    stop_reason: str = "end_turn",
    usage_breakdown: bool = True,
    model: str | None = None,
    latency: float = 0.0,
) -> Reply:
    """A reply with one text block."""
    return Reply(
        content=({"type": "text", "text": text},),
        stop_reason=stop_reason,
        usage=usage or Usage(input_tokens=10, output_tokens=max(1, len(text) // 4)),
        usage_breakdown=usage_breakdown,
        model=model,
        latency=latency,
    )


_TOOL_IDS = itertools.count(1)


def reply_tool_use(
    name: str,
    input: Mapping[str, Any],
    *,
    id: str | None = None,
    text: str | None = None,
    usage: Usage | None = None,
    usage_breakdown: bool = True,
    model: str | None = None,
    latency: float = 0.0,
) -> Reply:
    """A reply calling tool ``name`` with ``input`` (optionally after a text block)."""
    blocks: list[ContentBlock] = []
    if text:
        blocks.append({"type": "text", "text": text})
    blocks.append(
        {
            "type": "tool_use",
            "id": id or f"toolu_script_{next(_TOOL_IDS):06d}",
            "name": name,
            "input": dict(input),
        }
    )
    return Reply(
        content=tuple(blocks),
        stop_reason="tool_use",
        usage=usage or Usage(input_tokens=10, output_tokens=20),
        usage_breakdown=usage_breakdown,
        model=model,
        latency=latency,
    )


def fault(
    status: int,
    message: str | None = None,
    *,
    error_type: str | None = None,
    error_code: str | None = None,
    retry_after: float | str | None = None,
    retry_after_ms: float | None = None,
    should_retry: bool | None = None,
    latency: float = 0.0,
    headers: Mapping[str, str] | None = None,
) -> Fault:
    """An error response with the API's error type for ``status`` unless given."""
    etype = error_type or _ERROR_TYPES.get(status, "api_error")
    return Fault(
        status=status,
        error_type=etype,
        message=message or f"stand-in {etype} (HTTP {status})",
        error_code=error_code,
        retry_after=retry_after,
        retry_after_ms=retry_after_ms,
        should_retry=should_retry,
        latency=latency,
        headers=tuple((k.lower(), str(v)) for k, v in (headers or {}).items()),
    )


def overloaded(**kw: Any) -> Fault:
    """HTTP 529 ``overloaded_error``."""
    return fault(529, "Overloaded", **kw)


def rate_limited(
    retry_after: float | str | None = None, retry_after_ms: float | None = None, **kw: Any
) -> Fault:
    """HTTP 429 ``rate_limit_error`` (the organisation's rate limit)."""
    return fault(
        429,
        "Number of request tokens has exceeded your per-minute rate limit",
        retry_after=retry_after,
        retry_after_ms=retry_after_ms,
        **kw,
    )


def server_error(status: int = 500, **kw: Any) -> Fault:
    """HTTP 5xx ``api_error``."""
    return fault(status, "Internal server error", **kw)


def bad_request(message: str = "invalid request", **kw: Any) -> Fault:
    """HTTP 400 ``invalid_request_error``."""
    return fault(400, message, **kw)


def spend_limit(**kw: Any) -> Fault:
    """HTTP 429 with ``error.details.error_code = "enforced_spend_limit_reached"``: the
    organisation's monthly spend limit. Like the real API it carries no ``retry-after``.
    """
    return fault(
        429,
        "You have reached your specified API usage limits. You will regain access on "
        "2026-12-01 at 00:00 UTC.",
        error_code="enforced_spend_limit_reached",
        **kw,
    )


def stall(seconds: float | None = None, then: Reply | Fault | None = None) -> Stall:
    """Hold the request ``seconds`` (None: until released), then answer ``then``."""
    return Stall(seconds=seconds, then=then)


def item_from_json(d: Mapping[str, Any]) -> ScriptItem:
    """A script item from its JSON form (``to_json()`` output, or the short forms
    ``{"type": "text", "text": …}`` and ``{"type": "tool_use", "name": …, "input": …}``).

    Raises:
        ValueError: naming the accepted ``type`` values.
    """
    kind = d.get("type")
    latency = float(d.get("latency") or 0.0)
    if kind == "text":
        return reply_text(
            str(d["text"]),
            usage=_usage_from_json(d.get("usage")),
            stop_reason=str(d.get("stop_reason", "end_turn")),
            usage_breakdown=bool(d.get("usage_breakdown", True)),
            model=d.get("model"),
            latency=latency,
        )
    if kind == "tool_use":
        return reply_tool_use(
            str(d["name"]),
            d.get("input") or {},
            id=d.get("id"),
            text=d.get("text"),
            usage=_usage_from_json(d.get("usage")),
            usage_breakdown=bool(d.get("usage_breakdown", True)),
            model=d.get("model"),
            latency=latency,
        )
    if kind == "message":
        return Reply(
            content=tuple(d["content"]),
            stop_reason=str(d.get("stop_reason", "end_turn")),
            usage=_usage_from_json(d.get("usage")),
            usage_breakdown=bool(d.get("usage_breakdown", True)),
            model=d.get("model"),
            latency=latency,
        )
    if kind == "error":
        return fault(
            int(d["status"]),
            d.get("message"),
            error_type=d.get("error_type"),
            error_code=d.get("error_code"),
            retry_after=d.get("retry_after"),
            retry_after_ms=d.get("retry_after_ms"),
            should_retry=d.get("should_retry"),
            latency=latency,
            headers=d.get("headers") or None,
        )
    if kind == "stall":
        then = d.get("then")
        then_item = item_from_json(then) if then else None
        if isinstance(then_item, Stall):
            raise ValueError("a stall's 'then' must be a reply or an error, not another stall")
        seconds = d.get("seconds")
        return Stall(seconds=None if seconds is None else float(seconds), then=then_item)
    raise ValueError(
        f"unknown script item type {kind!r}; expected one of 'text', 'tool_use', 'message', "
        "'error', 'stall'"
    )


def usage_of(message: Mapping[str, Any]) -> Usage:
    """The :class:`Usage` a served message body reports (the 5m/1h split from
    ``cache_creation`` when present, else all cache writes as 5m).
    """
    u = message.get("usage") or {}
    cc = u.get("cache_creation")
    if isinstance(cc, dict):
        w5 = int(cc.get("ephemeral_5m_input_tokens") or 0)
        w1 = int(cc.get("ephemeral_1h_input_tokens") or 0)
    else:
        w5, w1 = int(u.get("cache_creation_input_tokens") or 0), 0
    return Usage(
        input_tokens=int(u.get("input_tokens") or 0),
        output_tokens=int(u.get("output_tokens") or 0),
        cache_write_5m_tokens=w5,
        cache_write_1h_tokens=w1,
        cache_read_tokens=int(u.get("cache_read_input_tokens") or 0),
    )
