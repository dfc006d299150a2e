"""Routines: recurring tasks on APScheduler 3 that survive restarts and report every miss.

The daemon runs one :class:`RoutineScheduler` as a supervised child and hands it a
:class:`TaskSink` (the agent runtime). Every fire of a routine ends as one row of
``<state_dir>/routines.sqlite`` with an :class:`Outcome`; failures, misses and skips are also
published on the EventBus. docs/scheduler.md describes the behaviour for operators.

The names below are imported on first use, so ``companyd --help`` (which imports
``companyd.cli._scheduler``) does not pay for APScheduler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.scheduler._jobs_text import format_jobs_result
    from companyd.scheduler._offline import read_fires, read_fires_stopped, read_jobs
    from companyd.scheduler._outcomes import Outcome
    from companyd.scheduler._report import (
        format_history,
        format_history_result,
        format_jobs,
        history_data,
    )
    from companyd.scheduler._service import RoutineBusy, RoutineNotFound, RoutineScheduler
    from companyd.scheduler._sim import ModelCallGate, SimReport, simulate
    from companyd.scheduler._sink import TaskSink
    from companyd.scheduler._store import DB_NAME, FireRecord, RoutineStats, StoreError

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
    "format_history_result",
    "format_jobs",
    "format_jobs_result",
    "history_data",
    "read_fires",
    "read_fires_stopped",
    "read_jobs",
    "simulate",
]

_HOMES: dict[str, str] = {
    "STORE_STEPS": "companyd.scheduler._history",
    "DB_NAME": "companyd.scheduler._store",
    "FireRecord": "companyd.scheduler._store",
    "ModelCallGate": "companyd.scheduler._sim",
    "Outcome": "companyd.scheduler._outcomes",
    "RoutineBusy": "companyd.scheduler._service",
    "RoutineNotFound": "companyd.scheduler._service",
    "RoutineScheduler": "companyd.scheduler._service",
    "RoutineStats": "companyd.scheduler._store",
    "SimReport": "companyd.scheduler._sim",
    "StoreError": "companyd.scheduler._store",
    "TaskSink": "companyd.scheduler._sink",
    "format_history": "companyd.scheduler._report",
    "format_history_result": "companyd.scheduler._report",
    "format_jobs": "companyd.scheduler._report",
    "format_jobs_result": "companyd.scheduler._jobs_text",
    "history_data": "companyd.scheduler._report",
    "read_fires": "companyd.scheduler._offline",
    "read_fires_stopped": "companyd.scheduler._offline",
    "read_jobs": "companyd.scheduler._offline",
    "simulate": "companyd.scheduler._sim",
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
