"""The text an event becomes on the operator's phone, for tests that check alert wording
(the renderer and composer the alert service uses, without Telegram).
"""

from __future__ import annotations

from collections.abc import Collection
from zoneinfo import ZoneInfo

from companyd.alerts._render import compose
from companyd.alerts._render_kinds import render
from companyd.events import Event


def alert_text(event: Event, *, agents: Collection[str], company: str) -> str:
    """The message ``event`` renders to (as a warning, seen once, in UTC), then its buttons'
    labels in brackets.
    """
    rendered, buttons = render(event.kind, event.data, event.source, {event.kind: 1}, agents)
    body = compose(
        severity="warning",
        rendered=rendered,
        count=1,
        first_ts=event.ts,
        last_ts=event.ts,
        company=company,
        tz=ZoneInfo("UTC"),
    )
    return body + "\n[" + " | ".join(b.label for b in buttons) + "]"
