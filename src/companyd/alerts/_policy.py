"""Which events become alerts, and when they may ring: routing, severities, quiet hours.

:class:`Policy` is the part of company.yaml the pager reads while running (replaced on
reload). :func:`severity_of` routes one event: ``alerts.routes[kind]`` if set (``off`` drops
it), else the event's own; alerts below ``alerts.min_severity`` are dropped, except the
daemon's own lifecycle, improver proposals and what waits on the founder's desk
(:data:`ALWAYS`); normal exits of children are
never alerts. :func:`quiet_until` tells whether a time falls in the daily quiet window.
Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from companyd._frozen import Frozen
from companyd.alerts._render_kinds import is_abnormal_exit
from companyd.config import CompanyConfig, QuietHoursSpec
from companyd.events import ChildExited, Event

__all__ = ["ALWAYS", "RANK", "Policy", "quiet_until", "severity_of"]

#: Severities in order; an unknown one ranks as ``info``.
RANK = {"debug": 0, "info": 1, "warning": 2, "critical": 3}
#: Told whatever min_severity says (unless routed "off"): they confirm the pager works, and
#: a proposal, an approval or a question waits for the operator's decision.
ALWAYS = frozenset(
    {
        "daemon_started",
        "daemon_stopping",
        "daemon_reloaded",
        "leadership_taken",
        "proposal_created",
        "founder_approval_requested",
        "founder_question",
        "founder_result_for_approval",
        "founder_reminder",
    }
)


class Policy(Frozen):
    """The parts of company.yaml the service reads while running (replaced on reload)."""

    min_rank: int
    routes: Mapping[str, str]
    coalesce: float
    quiet: QuietHoursSpec | None
    quiet_tz: ZoneInfo
    tz: ZoneInfo
    company: str
    agents: frozenset[str]
    #: when the results digest goes out (``alerts.digest_at``, in ``tz``)
    digest_at: str = "08:00"

    @classmethod
    def of(cls, config: CompanyConfig) -> Policy:
        """The policy ``config`` sets: its ``alerts`` section (quiet hours in their own timezone,
        else the company's), the company's name, timezone and agents.
        """
        spec = config.spec.alerts
        tz = ZoneInfo(config.timezone)
        quiet_tz = tz
        if spec.quiet_hours is not None and spec.quiet_hours.timezone:
            quiet_tz = ZoneInfo(spec.quiet_hours.timezone)
        return cls(
            min_rank=RANK[spec.min_severity],
            routes=dict(spec.routes),
            coalesce=float(spec.coalesce_seconds),
            quiet=spec.quiet_hours,
            quiet_tz=quiet_tz,
            tz=tz,
            company=config.name,
            agents=frozenset(config.agents),
            digest_at=spec.digest_at,
        )


def quiet_until(now: float, quiet: QuietHoursSpec | None, tz: ZoneInfo) -> float | None:
    """If ``now`` is inside the daily quiet window, the epoch time it ends; else None.

    The window may cross midnight (``23:00``–``07:00``); ``start == end`` means no window.
    """
    if quiet is None:
        return None
    sh, sm = (int(x) for x in quiet.start.split(":"))
    eh, em = (int(x) for x in quiet.end.split(":"))
    start, end = sh * 60 + sm, eh * 60 + em
    if start == end:
        return None
    local = datetime.fromtimestamp(now, tz)
    minute = local.hour * 60 + local.minute
    day = local.date()
    if start < end:
        if not start <= minute < end:
            return None
    elif minute >= start:
        day = day + timedelta(days=1)
    elif minute >= end:
        return None
    return datetime(day.year, day.month, day.day, eh, em, tzinfo=tz).timestamp()


def severity_of(policy: Policy, event: Event) -> str | None:
    """The alert severity for ``event``, or None when it is not an alert."""
    route = policy.routes.get(event.kind)
    if route == "off":
        return None
    # by kind, not class: a child_exited of another shape (``events.Other``, from
    # ``bus.emit``) is routed the same way
    crash = event.kind == ChildExited.KIND
    if crash and not is_abnormal_exit(event.data.get("reason")):
        return None
    if route:
        severity = route
    else:
        severity = str(event.severity)
        if crash:  # an abnormal exit is a crash, whatever the default
            severity = max(severity, "warning", key=RANK.__getitem__)
    if RANK.get(severity, 1) < policy.min_rank and event.kind not in ALWAYS:
        return None
    if severity == "debug":
        return None
    return severity
