"""What became of one fire of a routine.

Every fire time of a routine ends in exactly one :class:`Outcome`, stored in the history:

* the run's own status when a task was submitted (``ok``, ``failed``, ``budget_exhausted``,
  ``quarantined``, ``circuit_breaker``, ``cancelled`` — the values of
  :class:`companyd.runs._tasks.RunStatus`);
* ``missed`` — the fire time passed without a run (the daemon was down, or the scheduler woke
  too late: a blocked event loop, a suspended host);
* ``skipped`` — the concurrency policy refused it (a run was still active, or the one queue
  place was taken);
* ``idle`` — the precondition found nothing to do; no task was submitted, no model was
  called, $0 was spent. Idle fires are not *due runs*: they do not count for or against the
  success rate.
* ``unverified`` — the run ended its turn, but its answer did not hold against the run's
  own record (``done_when``, the claim check; docs/agents.md, "Verification"). A due run
  that is not a success, counted apart from ``ok`` and ``failed``; each publishes
  ``routine_unverified`` (a warning from the second in a row).
* ``stopped`` — skipped because the daemon was stopped on purpose (SIGTERM, ``systemctl
  restart``) at this fire time and the routine's catch-up did not serve it. Not a due run,
  not an alert: the operator chose the downtime. A fire time lost to a crash is ``missed``.
"""

from __future__ import annotations

from enum import StrEnum

from companyd.runs import RunStatus

__all__ = ["ALERTING", "Outcome", "from_run_status"]


class Outcome(StrEnum):
    """How one fire of a routine ended (the ``outcome`` column of the history)."""

    OK = "ok"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    QUARANTINED = "quarantined"
    CIRCUIT_BREAKER = "circuit_breaker"
    CANCELLED = "cancelled"
    UNVERIFIED = "unverified"
    MISSED = "missed"
    SKIPPED = "skipped"
    IDLE = "idle"
    STOPPED = "stopped"

    @property
    def is_due_run(self) -> bool:
        """Whether this outcome counts in the success rate (all but ``idle`` and ``stopped``)."""
        return self not in (Outcome.IDLE, Outcome.STOPPED)

    @property
    def event_kind(self) -> str | None:
        """The EventBus kind published for this outcome, or None for ``ok``, ``idle`` and
        ``stopped`` (the scheduler tells those at debug level only).
        """
        if self is Outcome.MISSED:
            return "routine_missed"
        if self is Outcome.SKIPPED:
            return "routine_skipped"
        if self in ALERTING:
            return "routine_failed"
        if self is Outcome.UNVERIFIED:
            return "routine_unverified"
        return None


#: Outcomes of a submitted run that did not succeed; each publishes ``routine_failed``.
ALERTING = frozenset(
    {
        Outcome.FAILED,
        Outcome.BUDGET_EXHAUSTED,
        Outcome.QUARANTINED,
        Outcome.CIRCUIT_BREAKER,
        Outcome.CANCELLED,
    }
)


def from_run_status(status: RunStatus) -> Outcome:
    """The history outcome for a run that ended with ``status``."""
    return Outcome(str(status))
