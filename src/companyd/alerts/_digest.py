"""The daily digest of results: digest items → one message at ``alerts.digest_at``.

A routine with ``deliver: [digest]`` leaves its result in the alert outbox as a
``digest_item``, held until the next ``alerts.digest_at`` (:func:`next_digest`, in the
company's time zone). When that time comes the alert book folds every item due into one
``results_digest`` message (:func:`fold`) — "📰 Yesterday's work: 5 results, $0.41", one
line per result with, under it, where else the result went as its run's delivery records
say (``→ sent to telegram · written to outputs/…``, :func:`sent_to`), and a button per
result that sends it whole. The items stay in the
outbox, so a restart neither loses nor repeats the digest, and a digest time passed while
the daemon was down is told at the next start. Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from companyd.alerts._outbox import AlertRecord, Delivery
from companyd.alerts._render import clip
from companyd.alerts._telegram import redact
from companyd.alerts._values import result_cost, usd

__all__ = ["ICON", "LINE_LIMIT", "fold", "next_digest", "sent_to", "title"]

#: The digest's icon.
ICON = "📰"
#: Characters of a result shown on its digest line.
LINE_LIMIT = 80


def next_digest(now: float, at: str, tz: ZoneInfo) -> float:
    """The first ``at`` (``"HH:MM"`` in ``tz``) strictly after ``now``, as epoch seconds."""
    hour, minute = (int(x) for x in at.split(":"))
    local = datetime.fromtimestamp(now, tz)
    day = local.date()
    for _ in range(3):  # today, tomorrow, or (a skipped local time) the day after
        t = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz).timestamp()
        if t > now:
            return t
        day += timedelta(days=1)
    return now + 86400.0


def title(items: Sequence[AlertRecord], now: float, tz: ZoneInfo) -> str:
    """``Yesterday's work: 5 results, $0.41`` (``Today's``, or ``Work since 3 Nov``, when
    the results are not all from yesterday).
    """
    total = sum(float(r.data.get("cost_usd") or 0.0) for r in items)
    n = len(items)
    today = datetime.fromtimestamp(now, tz).date()
    days = {datetime.fromtimestamp(r.first_ts, tz).date() for r in items}
    if days == {today - timedelta(days=1)}:
        when = "Yesterday's work"
    elif days == {today}:
        when = "Today's work"
    else:
        when = f"Work since {min(days):%-d %b}"
    simulated = all(r.data.get("offline") is True for r in items)  # an offline daemon's
    return f"{when}: {n} result{'s' if n != 1 else ''}, {usd(total)}" + (
        " (simulated)" if simulated and items else ""
    )


def _line(i: int, item: AlertRecord) -> str:
    answer = " ".join(str(item.data.get("answer") or "").split()) or "(no answer)"
    if len(answer) > LINE_LIMIT:
        answer = answer[: LINE_LIMIT - 1] + "…"
    routine = item.data.get("routine") or "?"
    agent = item.data.get("agent") or "?"
    why = item.data.get("unverified")
    if why:  # the run's answer did not hold against its record: said before the answer
        answer = f"⚠ unverified: {' '.join(str(why).split())[:LINE_LIMIT]} — {answer}"
    cost = result_cost({**item.data, "cost_usd": item.data.get("cost_usd") or 0.0})
    return f"{i}. {routine} ({agent}, {cost}): {answer}"


def sent_to(records: Sequence[Mapping[str, Any]]) -> str:
    """Where a result went besides the digest, from its run's delivery records (oldest
    first; the latest of each channel counts): ``sent to telegram · written to
    outputs/daily-post/….md · kept in the inbox: Telegram is not configured``; "" when
    nothing but the digest was recorded.
    """
    latest: dict[str, Mapping[str, Any]] = {}
    for r in records:
        to = str(r.get("to") or "")
        if to and to != "digest":
            latest.pop(to, None)  # re-inserted: the channels in the order they last moved
            latest[to] = r
    said = []
    for to, r in latest.items():
        outcome = r.get("outcome")
        if outcome == "delivered":
            if to == "telegram":
                said.append("sent to telegram")
            elif to == "memory":
                said.append("added to the company memory")
            else:
                said.append(str(r.get("text") or f"delivered to {to}"))
        elif outcome == "queued":
            said.append(f"queued for {to}")
        else:
            why = str(r.get("reason") or "not delivered").split(" (", 1)[0]
            said.append(
                f"kept in the inbox: {why}" if r.get("kept") else f"not sent to {to}: {why}"
            )
    return " · ".join(said)


def fold(
    items: Sequence[AlertRecord],
    *,
    digest_id: int,
    now: float,
    tz: ZoneInfo,
    chats: Sequence[int],
    deliveries: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> AlertRecord:
    """The digest message for ``items`` (oldest first); marks each item folded into it.
    ``deliveries`` (run id → its delivery records, the run journal's) adds under each
    result where else it went (:func:`sent_to`).
    """
    items = sorted(items, key=lambda r: r.id)
    lines = [f"{ICON} {title(items, now, tz)}", ""]
    for i, r in enumerate(items, 1):
        lines.append(_line(i, r))
        where = sent_to((deliveries or {}).get(str(r.data.get("run_id") or ""), ()))
        if where:
            lines.append(f"   → {where}")
    lines += ["", "Tap a number to read that result whole; reply to it to follow up."]
    digest = AlertRecord(
        id=digest_id,
        key=f"results_digest|{digest_id}",
        kind="results_digest",
        severity="info",
        source="alerts",
        data={"items": [r.id for r in items]},
        counts={"results_digest": 1},
        first_ts=now,
        last_ts=now,
        window_end=now,
        text=clip(redact("\n".join(lines))),
        deliveries={c: Delivery() for c in chats},
    )
    for i, r in enumerate(items, 1):
        digest.buttons.append(
            {"id": digest.next_button, "label": f"📄 {i}", "action": "open_result", "arg": r.id}
        )
        digest.next_button += 1
        r.status, r.folded_into, r.held_until = "folded", digest.id, None
        for d in r.deliveries.values():
            if d.state == "pending":
                d.state = "folded"
    return digest
