"""A request as the Messages API stand-in received it, and the checks the real API makes.

:class:`RecordedRequest` is what the stand-in records for every request (and what a
responder is asked to answer); :func:`validate_request` rejects the malformed bodies the real
API answers with a 400 (a ``tool_use`` left without its ``tool_result``, a missing model or
``max_tokens``), so a broken tool-use loop fails here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RecordedRequest", "validate_request"]


@dataclass(kw_only=True)
class RecordedRequest:
    """One request as the stand-in received it.

    Attributes:
        index: 0-based arrival order.
        method / path: the HTTP request line.
        headers: header names lower-cased.
        body: the parsed JSON body (None if absent or not JSON).
        received: wall-clock arrival time.
        outcome: ``"pending"``, then ``"served"`` (200 written), ``"error"`` (error response
            written), ``"abandoned"`` (the client left before the answer) or ``"control"``.
        status: HTTP status written (0 if none).
        response: the JSON body written, if any.

    Control requests (``/_standin/*``) are not recorded and have ``index`` -1.
    """

    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received: float
    outcome: str = "pending"
    status: int = 0
    response: dict[str, Any] | None = None
    #: the reply billed although the client gave up (``bill_abandoned``), if any
    billed: dict[str, Any] | None = None

    @property
    def api_key(self) -> str | None:
        """The credential sent (Bearer token or x-api-key), if any."""
        auth = self.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return self.headers.get("x-api-key")

    def to_json(self) -> dict[str, Any]:
        """The request as ``/_standin/requests`` lists it (every field, JSON-ready)."""
        return {
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "received": self.received,
            "outcome": self.outcome,
            "status": self.status,
            "response": self.response,
        }


def validate_request(body: Any) -> str | None:
    """Why the real API would reject this request body with a 400, or None."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    mt = body.get("max_tokens")
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        return "max_tokens: Field required (an integer >= 1)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    pending: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        if not isinstance(content, str | list):
            return f"messages.{i}.content: Input should be a string or a list of blocks"
        if pending:
            answered = {
                b.get("tool_use_id")
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_result"
            }
            if m["role"] != "user" or not pending <= answered:
                missing = sorted(pending - answered)
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                    "a corresponding `tool_result` block in the next message."
                )
        elif m["role"] == "user" and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks
        ):
            return (
                f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                "blocks: each `tool_result` block must have a corresponding `tool_use` block "
                "in the previous message."
            )
        pending = (
            {
                str(b.get("id"))
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_use"
            }
            if m["role"] == "assistant"
            else set()
        )
    return None
