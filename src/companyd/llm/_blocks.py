"""The Messages API's JSON shapes that companyd builds and reads, as TypedDicts.

A message is a role and its content: a string, or a list of content blocks. companyd sends
and receives three kinds of block — ``text``, ``tool_use`` (the model asks for a tool) and
``tool_result`` (the answer, in the next user turn) — and offers tools by their definition.
Image and document blocks are typed only as far as the input estimate reads them.
They stay plain dicts at run time (they are sent, journaled as JSON and replayed verbatim);
the types only let mypy check the keys where blocks are built and read. Keys the API treats
as optional are ``NotRequired``. A block is told apart by its ``type`` (``b["type"] ==
"tool_use"`` narrows a :data:`ContentBlock` to a :class:`ToolUseBlock`).

Thinking blocks never pass through: companyd does not ask for extended thinking.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "CacheControl",
    "ContentBlock",
    "DocumentBlock",
    "ImageBlock",
    "Message",
    "TextBlock",
    "ToolParam",
    "ToolResultBlock",
    "ToolUseBlock",
    "text_of",
    "tool_uses_of",
]


class CacheControl(TypedDict):
    """A prompt-cache breakpoint: ``{"type": "ephemeral"}``, with a TTL other than 5m."""

    type: Literal["ephemeral"]
    ttl: NotRequired[str]


class TextBlock(TypedDict):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    text: str
    citations: NotRequired[list[Any]]
    cache_control: NotRequired[CacheControl]


class ToolUseBlock(TypedDict):
    """The model asks for one tool call: ``{"type": "tool_use", "id", "name", "input"}``."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(TypedDict):
    """The answer to the ``tool_use`` block ``tool_use_id``, in the next user turn."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: NotRequired[str | list[TextBlock]]
    is_error: NotRequired[bool]


class ImageBlock(TypedDict):
    """An image (billed by its pixels: see ``estimate_input_tokens``)."""

    type: Literal["image"]
    source: dict[str, Any]


class DocumentBlock(TypedDict):
    """A document (a PDF or a text file)."""

    type: Literal["document"]
    source: dict[str, Any]


#: A block of a message's content.
ContentBlock = TextBlock | ToolUseBlock | ToolResultBlock | ImageBlock | DocumentBlock


class Message(TypedDict):
    """One turn of the conversation."""

    role: Literal["user", "assistant"]
    content: str | Sequence[ContentBlock]


class ToolParam(TypedDict):
    """A tool as offered to the model (``tools`` of a request)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    cache_control: NotRequired[CacheControl]


def tool_uses_of(content: Iterable[ContentBlock]) -> list[ToolUseBlock]:
    """The ``tool_use`` blocks of ``content``, in order."""
    return [b for b in content if b["type"] == "tool_use"]


def text_of(content: Iterable[ContentBlock]) -> str:
    """The text of the ``text`` blocks of ``content``, joined."""
    return "".join(b["text"] for b in content if b["type"] == "text")
