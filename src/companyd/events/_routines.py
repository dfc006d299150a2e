"""Event kinds of routines (:mod:`companyd.scheduler`, source ``scheduler``).

``scheduled`` is the fire time as ISO 8601 (UTC); ``outcome`` the scheduler's; a summary at
start (``routine_missed``, ``routine_skipped``) adds ``count`` and ``first`` (the first fire
time it covers).
"""

from __future__ import annotations

from companyd.events._base import Event, Severity, optional

__all__ = [
    "RoutineEvent",
    "RoutineFailed",
    "RoutineLimitReached",
    "RoutineMissed",
    "RoutinePaused",
    "RoutineResult",
    "RoutineResumed",
    "RoutineSkipped",
    "RoutineUnverified",
]


class RoutineEvent(Event):
    """The fields every routine event carries (not a kind itself)."""

    routine: str
    agent: str
    scheduled: str
    reason: str | None
    run_id: str | None
    outcome: str
    fire_kind: str
    fire_id: str
    count: int | None = optional()
    first: str | None = optional()


class RoutineFailed(RoutineEvent):
    """A fire of a routine did not succeed."""

    KIND = "routine_failed"
    severity: Severity = Severity.WARNING


class RoutineMissed(RoutineEvent):
    """A routine missed fire times (overlap, or while companyd was down)."""

    KIND = "routine_missed"
    severity: Severity = Severity.WARNING


class RoutineSkipped(RoutineEvent):
    """A routine skipped a fire (by its policy, or during a planned stop)."""

    KIND = "routine_skipped"


class RoutineUnverified(RoutineEvent):
    """A fire's run ended ``unverified``: its answer did not hold against the run's record
    (``reason``: each unmet condition). ``in_a_row``: how many of the routine's latest runs
    did so; from the second in a row it is a warning (an alert), before that ``info``.
    """

    KIND = "routine_unverified"
    severity: Severity = Severity.INFO
    in_a_row: int | None = optional()


class RoutineResult(Event):
    """A fire ended ok (or ``unverified``: then ``unverified`` says why) and its routine
    delivers its result (``deliver:``), or the founder approved it (``approved``: a routine
    with ``approval: required``; ``deliver`` is then what follows the approval, maybe
    nothing): the whole answer, for the pager to deliver (docs/alerts.md, "Results"). Not an
    alert itself.
    """

    KIND = "routine_result"
    routine: str
    agent: str
    run_id: str
    cost_usd: float
    answer: str
    task: str
    deliver: list[str]
    scheduled: str
    fire_id: str
    ended: float
    approved: bool | None = optional()
    #: the run ended ``unverified``: why (each unmet condition); delivered with a warning
    unverified: str | None = optional()
    #: the run was on the offline model (``companyd run --offline``): its cost is simulated,
    #: and every message of the result says so
    offline: bool | None = optional()


class RoutineLimitReached(Event):
    """A routine ran ``max_runs_per_day`` times on ``day`` (its time zone): its further fires
    that day are skipped. Told once a day per routine.
    """

    KIND = "routine_limit_reached"
    severity: Severity = Severity.WARNING
    routine: str
    agent: str
    max_runs_per_day: int
    day: str


class RoutinePaused(Event):
    """A routine's last ``failures`` runs in a row failed (``pause_after_failures``): it is
    paused — its fires are skipped — until ``companyd jobs resume ROUTINE`` or the
    dashboard resumes it. ``reasons``: why each of those runs failed, oldest first.
    """

    KIND = "routine_paused"
    severity: Severity = Severity.WARNING
    routine: str
    agent: str
    failures: int
    reasons: list[str]


class RoutineResumed(Event):
    """A paused routine fires again (``by``: who resumed it)."""

    KIND = "routine_resumed"
    routine: str
    by: str
