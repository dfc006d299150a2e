"""What routines.sqlite holds, as values: a routine's schedule position, one fire of the
history, a routine's success figures (see :mod:`companyd.scheduler._store` for the tables
and their owner). Plain frozen dataclasses, also what the reports and the CLI read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.admin import FireRow

from companyd._frozen import Frozen

__all__ = ["UNSCHEDULED", "FireRecord", "RoutineState", "RoutineStats"]

#: Fire kinds outside the schedule: the operator's ``jobs run`` and a routine's webhook. They
#: move no cursor and are never claimed (their fire time is when they were asked for).
UNSCHEDULED = frozenset({"manual", "webhook"})


class RoutineState(Frozen):
    """The persisted schedule position of one routine (see the module docstring)."""

    routine: str
    trigger: str
    cursor: float
    last_fire: float | None = None
    memory_marker: str | None = None
    updated: float = 0.0


class FireRecord(Frozen):
    """One row of the history. Times are epoch seconds; ``outcome`` is None while the fire is
    waiting for its turn or running.
    """

    fire_id: str
    routine: str
    agent: str
    kind: str
    scheduled: float
    fired: float | None = None
    started: float | None = None
    ended: float | None = None
    outcome: str | None = None
    reason: str | None = None
    cost_usd: float = 0.0
    run_id: str | None = None
    task_id: str | None = None
    fires: int = 1

    def to_dict(self) -> FireRow:
        """JSON-ready: times as ISO 8601 in UTC."""

        def iso(ts: float | None) -> str | None:
            return (
                None if ts is None else datetime.fromtimestamp(ts, tz=UTC).isoformat()
            )  # not clock's: no asyncio

        return {
            "fire_id": self.fire_id,
            "routine": self.routine,
            "agent": self.agent,
            "kind": self.kind,
            "scheduled": iso(self.scheduled),
            "fired": iso(self.fired),
            "started": iso(self.started),
            "ended": iso(self.ended),
            "outcome": self.outcome,
            "reason": self.reason,
            "cost_usd": self.cost_usd,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "fires": self.fires,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FireRecord:
        """The inverse of :meth:`to_dict` (for front ends that received it as JSON)."""

        def ts(text: str | None) -> float | None:
            return None if text is None else datetime.fromisoformat(text).timestamp()

        scheduled = ts(d["scheduled"])
        assert scheduled is not None
        return cls(
            fire_id=d["fire_id"],
            routine=d["routine"],
            agent=d["agent"],
            kind=d["kind"],
            scheduled=scheduled,
            fired=ts(d.get("fired")),
            started=ts(d.get("started")),
            ended=ts(d.get("ended")),
            outcome=d.get("outcome"),
            reason=d.get("reason"),
            cost_usd=float(d.get("cost_usd", 0.0)),
            run_id=d.get("run_id"),
            task_id=d.get("task_id"),
            fires=int(d.get("fires", 1)),
        )

    def _row(self) -> tuple[Any, ...]:
        return (
            self.fire_id,
            self.routine,
            self.agent,
            self.kind,
            self.scheduled,
            self.fired,
            self.started,
            self.ended,
            self.outcome,
            self.reason,
            self.cost_usd,
            self.run_id,
            self.task_id,
            self.fires,
        )


class RoutineStats(Frozen):
    """Due runs and successes of one routine over a window (``idle`` and manual runs are not
    due runs).
    """

    routine: str
    due: int
    ok: int
    #: due runs that ended ``unverified`` (neither ok nor failed)
    unverified: int = 0

    @property
    def success_rate(self) -> float | None:
        """``ok / due``, or None when nothing was due."""
        return self.ok / self.due if self.due else None
