"""Who answers the Messages API stand-in when its script is empty.

A :data:`Responder` maps a :class:`~companyd.testing.messages_requests.RecordedRequest` to a
script item. :class:`AgentLikeResponder`, the default, behaves like a model doing agent work
(calls one offered tool, then ends the turn) with realistic, deterministic token usage and
simulated prompt caching.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Callable
from typing import Any, cast

from companyd.llm import ContentBlock, Usage
from companyd.testing.messages_requests import RecordedRequest
from companyd.testing.messages_script import Reply, ScriptItem

__all__ = ["AgentLikeResponder", "Responder"]

Responder = Callable[[RecordedRequest], ScriptItem]


def _ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _cache_ttl(blocks: Any) -> str | None:
    """The TTL of the first ``cache_control`` marker in a list of blocks/tools, if any."""
    if not isinstance(blocks, list):
        return None
    for b in blocks:
        if isinstance(b, dict) and isinstance(b.get("cache_control"), dict):
            return str(b["cache_control"].get("ttl", "5m"))
    return None


def _example_input(schema: Any) -> dict[str, Any]:
    """A deterministic input satisfying the required properties of a JSON Schema."""
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name in schema.get("required") or []:
        t = (props.get(name) or {}).get("type", "string")
        if isinstance(t, list):
            t = t[0] if t else "string"
        out[name] = {
            "string": f"example {name}",
            "integer": 1,
            "number": 1.0,
            "boolean": True,
            "array": [],
            "object": {},
            "null": None,
        }.get(t, f"example {name}")
    return out


class AgentLikeResponder:
    """A deterministic stand-in for a model doing agent work.

    Behaviour: if tools are offered and the conversation's last user turn is not a tool
    result, call one offered tool (``prefer`` if offered, else the first) with an input
    built from the schema's required properties; otherwise end the turn with a short text.

    Usage is derived from the request so it is realistic and reproducible: about one token
    per four bytes of JSON (never more tokens than bytes, so companyd's byte-based upper
    bound always holds). When the request marks its stable prefix (tools and system) with
    ``cache_control``, the first request with that prefix reports it as a cache write (5m or
    1h, per the marker's ``ttl``) and later ones as a cache read — as the real API would.

    Args:
        prefer: name of the tool to call when it is offered.
        text: the final answer's text.
        bytes_per_token: bytes of JSON per reported input token (≥ 1).
    """

    def __init__(
        self, *, prefer: str | None = None, text: str = "Done.", bytes_per_token: int = 4
    ) -> None:
        if bytes_per_token < 1:
            raise ValueError(f"bytes_per_token must be >= 1, got {bytes_per_token!r}")
        self.prefer = prefer
        self.text = text
        self.bytes_per_token = bytes_per_token
        self._seen_prefixes: set[str] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def __call__(self, request: RecordedRequest) -> ScriptItem:
        """The reply to ``request`` by the rules in the class docstring: a call of one offered
        tool, or a final text, with usage derived from the request's size.
        """
        body = request.body if isinstance(request.body, dict) else {}
        tools = body.get("tools") or []
        system = body.get("system")
        messages = body.get("messages") or []
        max_tokens = int(body.get("max_tokens") or 1)
        bpt = self.bytes_per_token

        prefix = _canonical([tools, system]) if (tools or system) else ""
        rest = _canonical(messages)
        prefix_tokens = _ceil_div(len(prefix.encode()), bpt)
        rest_tokens = max(1, _ceil_div(len(rest.encode()), bpt))
        ttl = _cache_ttl(system) or _cache_ttl(tools)
        write5 = write1 = read = 0
        if ttl is not None and prefix_tokens:
            key = hashlib.sha256(prefix.encode()).hexdigest()
            with self._lock:
                seen = key in self._seen_prefixes
                self._seen_prefixes.add(key)
            if seen:
                read = prefix_tokens
            elif ttl == "1h":
                write1 = prefix_tokens
            else:
                write5 = prefix_tokens
            input_tokens = rest_tokens
        else:
            input_tokens = rest_tokens + prefix_tokens

        last = messages[-1] if messages else {}
        last_content = last.get("content") if isinstance(last, dict) else None
        answered_tool = isinstance(last_content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in last_content
        )
        names = [t.get("name") for t in tools if isinstance(t, dict)]
        content: list[ContentBlock]
        if names and not answered_tool:
            chosen = self.prefer if self.prefer in names else names[0]
            schema = next(t.get("input_schema") for t in tools if t.get("name") == chosen)
            with self._lock:
                n = next(self._ids)
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_agent_{n:06d}",
                    "name": cast(str, chosen),  # as the request's JSON has it
                    "input": _example_input(schema),
                }
            ]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": self.text}]
            stop = "end_turn"
        output = min(max_tokens, max(1, _ceil_div(len(_canonical(content).encode()), bpt)))
        return Reply(
            content=tuple(content),
            stop_reason=stop,
            usage=Usage(
                input_tokens=input_tokens,
                output_tokens=output,
                cache_write_5m_tokens=write5,
                cache_write_1h_tokens=write1,
                cache_read_tokens=read,
            ),
        )
