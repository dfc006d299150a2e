"""A deterministic, built-in stand-in for Claude, used with ``--offline``.

It lets the daemon, the demo and the quick start run with no network and no API key, and
still exercise everything around the model: tools, memory, the journal, spend tracking.
Its behaviour is a small fixed script, the same for the same input:

1. If the ``create_entities`` memory tool is offered and the conversation has no tool
   result yet, it records the task in memory: it creates the entity ``"<agent> log"``
   (type ``run-log``) with an observation summarising the task.
2. If that entity already existed (nothing was created), it adds the observation with
   ``add_observations`` instead.
3. Then it ends its turn with a short text answer that starts with ``[offline]`` and
   names the task by its first sentence, whole (never cut mid-sentence).
   Review requests (a prompt asking to APPROVE or REJECT) are approved.

Token usage is computed from the request size (about four bytes per token) so the spend
ledger, budgets and ``companyd spend`` show realistic figures; the second and later calls of
a conversation report the system prompt as a cache read, as prompt caching would.
Everything it produces is labelled offline (``ModelResponse.offline``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from companyd.llm._blocks import ContentBlock, ToolUseBlock
from companyd.llm._model import ModelRequest, ModelResponse, RetryHook, Usage

__all__ = ["OfflineModel"]


class OfflineModel:
    """The offline stand-in; implements :class:`companyd.llm._model.ModelBackend`."""

    def __init__(self) -> None:
        self.calls = 0

    async def create(
        self,
        request: ModelRequest,
        *,
        before_retry: RetryHook | None = None,
        on_send: Callable[[], None] | None = None,
    ) -> ModelResponse:
        """The next step of the module's fixed script for ``request``: the same request gives the
        same answer. Never raises and never retries, so ``before_retry`` is never called; the
        response is marked ``offline``.
        """
        self.calls += 1  # never fails, so never retries: before_retry is not called
        if on_send is not None:
            on_send()
        tool_names = {t.name for t in request.tools}
        results = _tool_results(request)
        prompt = _first_user_text(request)
        agent = str(request.metadata.get("agent", "agent"))
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
        log_name = f"{agent} log"
        note = f"task {digest}: {' '.join(prompt.split())[:160]}"
        content: list[ContentBlock]
        stop = "tool_use"
        if not results and "create_entities" in tool_names:
            content = [
                {"type": "text", "text": "[offline] Recording this task in the company memory."},
                _tool_use(
                    f"toolu_offline_{digest}_1",
                    "create_entities",
                    {
                        "entities": [
                            {"name": log_name, "entityType": "run-log", "observations": [note]}
                        ]
                    },
                ),
            ]
        elif (
            len(results) == 1
            and '"entities": []' in results[0]
            and "add_observations" in tool_names
        ):
            # the log entity already existed, so create_entities added nothing
            content = [
                _tool_use(
                    f"toolu_offline_{digest}_2",
                    "add_observations",
                    {"observations": [{"entityName": log_name, "contents": [note]}]},
                )
            ]
        else:
            if "APPROVE" in prompt and "REJECT" in prompt:
                text = "APPROVE — [offline] the result addresses the task."
            else:
                text = f"[offline] {agent} handled the task: {_gist(prompt)}"
            content = [{"type": "text", "text": text}]
            stop = "end_turn"
        return ModelResponse(
            model=request.model,
            content=content,
            stop_reason=stop,
            usage=_usage(request, content),
            request_id=f"offline-{digest}-{self.calls}",
            offline=True,
        )

    async def aclose(self) -> None:
        """Nothing to release: the stand-in holds no connection."""
        return None


#: How long the task's gist in an offline answer may be (characters).
GIST_CHARS = 160


def _gist(prompt: str, limit: int = GIST_CHARS) -> str:
    """The task's first sentence as a whole sentence, ending with its punctuation: an
    offline answer must not look cut off mid-sentence (which reads as a truncation bug).
    A first sentence longer than ``limit`` is shortened at a word and closed with "…".
    """
    text = " ".join(prompt.split())
    if not text:
        return "(no task text)."
    m = re.search(r"[.!?](?=\s|$)", text)
    sentence = text[: m.end()] if m else text
    if len(sentence) > limit:
        cut = sentence[:limit].rsplit(" ", 1)[0].rstrip(" ,;:-")
        return f"{cut} (…)."
    return sentence if sentence[-1] in ".!?" else sentence + "."


def _first_user_text(request: ModelRequest) -> str:
    """The task text of the first user turn (without the runtime's "Task … from …" line)."""
    text = _first_user_turn(request)
    head, sep, rest = text.partition("\n\n")
    return rest if sep and head.startswith("Task ") else text


def _first_user_turn(request: ModelRequest) -> str:
    for m in request.messages:
        if m["role"] != "user":
            continue
        c = m["content"]
        if isinstance(c, str):
            return c
        texts = [b["text"] if b["type"] == "text" else "" for b in c]
        if any(texts):
            return " ".join(texts)
    return ""


def _tool_use(tool_id: str, name: str, arguments: dict[str, Any]) -> ToolUseBlock:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def _tool_results(request: ModelRequest) -> list[str]:
    """The text of every tool_result block in the conversation, in order."""
    out: list[str] = []
    for m in request.messages:
        c = m["content"]
        if isinstance(c, str):
            continue
        for b in c:
            if b["type"] == "tool_result":
                inner = b.get("content")
                if isinstance(inner, list):
                    out.append(" ".join(x["text"] for x in inner))
                else:
                    out.append(str(inner))
    return out


def _usage(request: ModelRequest, content: list[ContentBlock]) -> Usage:
    system = len(request.system.encode()) + len(
        json.dumps([t.to_api() for t in request.tools]).encode()
    )
    convo = len(json.dumps(list(request.messages), default=str).encode())
    out = len(json.dumps(content).encode())
    sys_tokens = max(1, system // 4)
    cached = request.cache and any(
        m["role"] == "assistant" for m in request.messages
    )  # later calls in a conversation hit the prompt cache
    return Usage(
        input_tokens=max(1, convo // 4) + (0 if request.cache else sys_tokens),
        output_tokens=max(1, out // 4),
        cache_write_5m_tokens=sys_tokens if request.cache and not cached else 0,
        cache_read_tokens=sys_tokens if cached else 0,
    )
