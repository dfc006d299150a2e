"""How an alert reads on a phone: the message model and its composition.

The core of the alert texts: :class:`Rendered` (title and detail lines) and :class:`Button`
(an action offered) are what the per-kind renderers of :mod:`companyd.alerts._render_kinds`
produce, :class:`KindSpec` is how one event kind is described to them, and :func:`compose`
turns a rendered alert into the full message (icon, details, the coalescing counter, where
and when, what the operator did). :func:`clip` and :func:`split_text` keep any text within
Telegram's limit. Everything here is pure (no I/O, no clock reads) and total.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from companyd._frozen import Frozen
from companyd.alerts._values import Data, secs

__all__ = [
    "ICONS",
    "MAX_TEXT",
    "Button",
    "ButtonMaker",
    "KindSpec",
    "Rendered",
    "Renderer",
    "clip",
    "compose",
    "digest_line",
    "no_buttons",
    "split_text",
]

#: Telegram's limit on a message text, in characters.
MAX_TEXT = 4096

ICONS = {"critical": "🔴", "warning": "🟠", "info": "🔵", "debug": "⚪", "digest": "🌙"}


class Button(Frozen):
    """An inline button offered on an alert.

    Attributes:
        label: what the button says.
        action: ``pause`` | ``resume`` | ``raise`` | ``approve`` | ``reject`` | ``retry`` |
            ``run_job`` | ``approve_tools``.
        arg: the agent, proposal id, task id or routine it acts on ("" = the company, for
            ``raise``; ``AGENT/SERVER`` for ``approve_tools``).
        usd: the amount for ``raise``.
    """

    label: str
    action: str
    arg: str
    usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The button as stored with its alert (the outbox's JSON): label, action, arg, usd."""
        return {"label": self.label, "action": self.action, "arg": self.arg, "usd": self.usd}


class Rendered(Frozen):
    """The variable part of an alert: a title and detail lines."""

    title: str
    lines: tuple[str, ...] = ()


Renderer = Callable[[Data, str, Mapping[str, int]], Rendered]
ButtonMaker = Callable[[Data, Collection[str]], list[Button]]


def no_buttons(data: Data, agents: Collection[str]) -> list[Button]:
    """The :data:`ButtonMaker` of kinds whose alerts offer no button."""
    return []


class KindSpec(Frozen):
    """How one event kind becomes an alert.

    Attributes:
        group: coalescing group; kinds that tell the same story (a child exited, then was
            restarted) share one so they land in one message.
        subject: ``data`` fields that tell *what* the alert is about; with the group and the
            event source they form the coalescing key.
        render: the title and lines.
        buttons: the actions offered.
    """

    group: str
    subject: tuple[str, ...]
    render: Renderer
    buttons: ButtonMaker = field(default=no_buttons)


def compose(
    *,
    severity: str,
    rendered: Rendered,
    count: int,
    first_ts: float,
    last_ts: float,
    company: str,
    tz: ZoneInfo,
    footer: Sequence[str] = (),
) -> str:
    """The full message text: icon and title, details, the coalescing counter, where and
    when, and what the operator did about it. Cut to Telegram's limit.
    """
    out = [f"{ICONS.get(severity, '•')} {rendered.title}", *rendered.lines]
    first = datetime.fromtimestamp(first_ts, tz)
    if count > 1:
        last = datetime.fromtimestamp(last_ts, tz)
        out.append(
            f"×{count} in {secs(max(0.0, last_ts - first_ts))} "
            f"(first {first:%H:%M}, last {last:%H:%M})"
        )
    out.append(f"{company} · {first:%H:%M %Z, %d %b}")
    out += list(footer)
    return clip("\n".join(out))


def digest_line(title: str, count: int, at: str) -> str:
    """One story's line in the quiet-hours digest — Telegram's and every channel's: its
    title, how many times it happened (``(×n)``, from two) and when it began (``at``).
    """
    return f"• {title}" + (f" (×{count})" if count > 1 else "") + f" — {at}"


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 2] + "\n…"


def split_text(text: str, limit: int = MAX_TEXT, max_parts: int = 4) -> list[str]:
    """``text`` as up to ``max_parts`` messages of at most ``limit`` characters each, cut at
    a line end where one is near (else at a space, else anywhere); what does not fit in
    ``max_parts`` is clipped from the last one.
    """
    parts: list[str] = []
    rest = text
    while len(rest) > limit and len(parts) < max_parts - 1:
        cut = rest.rfind("\n", limit // 2, limit + 1)
        if cut < 0:
            cut = rest.rfind(" ", limit // 2, limit + 1)
        if cut < 0:
            parts.append(rest[:limit])
            rest = rest[limit:]
        else:
            parts.append(rest[:cut])
            rest = rest[cut + 1 :]
    parts.append(clip(rest, limit))
    return [p for p in parts if p.strip()]
