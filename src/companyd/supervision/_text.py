"""How the supervision library words values in its messages and event fields.

One place, so an error message and the event about the same thing agree: long reprs are
clipped to :data:`CLIP` characters, seconds are written ``"5 s"``.
"""

from __future__ import annotations

#: Longest text (a reason, a list of ids) put into a message or an event field.
CLIP = 300


def clip(text: str, limit: int = CLIP) -> str:
    """``text``, cut to ``limit`` characters with a trailing ellipsis when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def secs(seconds: float) -> str:
    """Seconds for a message: ``5.0`` → ``"5 s"``."""
    return f"{seconds:g} s"
