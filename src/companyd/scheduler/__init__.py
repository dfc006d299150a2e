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
    from companyd.scheduler.outcomes import Outcome
    from companyd.scheduler.service import RoutineBusy, RoutineNotFound, RoutineScheduler
    from companyd.scheduler.sink import TaskSink
    from companyd.scheduler.store import FireRecord, RoutineStats, StoreError

__all__ = [
    "FireRecord",
    "Outcome",
    "RoutineBusy",
    "RoutineNotFound",
    "RoutineScheduler",
    "RoutineStats",
    "StoreError",
    "TaskSink",
]

_WHERE = {
    "FireRecord": "store",
    "Outcome": "outcomes",
    "RoutineBusy": "service",
    "RoutineNotFound": "service",
    "RoutineScheduler": "service",
    "RoutineStats": "store",
    "StoreError": "store",
    "TaskSink": "sink",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"companyd.scheduler.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'companyd.scheduler' has no attribute {name!r}")
