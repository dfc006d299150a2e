"""Routines: recurring tasks on APScheduler 3 that survive restarts and report every miss.

The daemon runs one :class:`RoutineScheduler` as a supervised child and hands it a
:class:`TaskSink` (the agent runtime). Every fire of a routine ends as one row of
``<state_dir>/routines.sqlite`` with an :class:`Outcome`; failures, misses and skips are also
published on the EventBus. docs/scheduler.md describes the behaviour for operators.

The names below are imported on first use, so ``companyd --help`` (which imports
``companyd.cli.scheduler``) does not pay for APScheduler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.scheduler.offline import read_fires, read_jobs
    from companyd.scheduler.outcomes import Outcome
    from companyd.scheduler.report import format_history, format_jobs, format_jobs_result
    from companyd.scheduler.service import RoutineBusy, RoutineNotFound, RoutineScheduler
    from companyd.scheduler.sim import ModelCallGate, SimReport, simulate
    from companyd.scheduler.sink import TaskSink
    from companyd.scheduler.store import DB_NAME, FireRecord, RoutineStats, StoreError

__all__ = [
    "DB_NAME",
    "STORE_STEPS",
    "FireRecord",
    "ModelCallGate",
    "Outcome",
    "RoutineBusy",
    "RoutineNotFound",
    "RoutineScheduler",
    "RoutineStats",
    "SimReport",
    "StoreError",
    "TaskSink",
    "format_history",
    "format_jobs",
    "format_jobs_result",
    "read_fires",
    "read_jobs",
    "simulate",
]

_HOMES: dict[str, str] = {
    "STORE_STEPS": "companyd.scheduler.history",
    "DB_NAME": "companyd.scheduler.store",
    "FireRecord": "companyd.scheduler.store",
    "ModelCallGate": "companyd.scheduler.sim",
    "Outcome": "companyd.scheduler.outcomes",
    "RoutineBusy": "companyd.scheduler.service",
    "RoutineNotFound": "companyd.scheduler.service",
    "RoutineScheduler": "companyd.scheduler.service",
    "RoutineStats": "companyd.scheduler.store",
    "SimReport": "companyd.scheduler.sim",
    "StoreError": "companyd.scheduler.store",
    "TaskSink": "companyd.scheduler.sink",
    "format_history": "companyd.scheduler.report",
    "format_jobs": "companyd.scheduler.report",
    "format_jobs_result": "companyd.scheduler.report",
    "read_fires": "companyd.scheduler.offline",
    "read_jobs": "companyd.scheduler.offline",
    "simulate": "companyd.scheduler.sim",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
