"""The run journal and what front ends read of it: tasks, runs, steps, transcripts.

Every task an agent is given, every run and every completed step is journaled here before
the next step (checkpoint and resume, docs/agents.md); the CLI (``companyd runs``), the
dashboard, the scheduler and the desk read runs, tasks and transcripts through this face,
never through the agent runtime (:mod:`companyd.agents`).

* :class:`Task`, :class:`RunOutcome`, :class:`RunStatus` — the unit of work and how a run ended;
* :class:`Journal` — the durable store (SQLite file or PostgreSQL tables), with its records
  (:class:`JournaledRun`, :class:`Step`, :class:`TaskState`, …);
* :func:`read_transcript` and the bounds of a stored run;
* :class:`RunRetention` — pruning old transcripts (``retention.runs_days``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.runs._cut import cut, full_size
    from companyd.runs._journal import Journal
    from companyd.runs._records import (
        ApprovalStep,
        JournaledRun,
        LlmStep,
        ReviewStep,
        Step,
        StepPayload,
        TaskState,
        ToolStartStep,
        VerificationPayload,
    )
    from companyd.runs._retention import RunRetention
    from companyd.runs._tasks import RunOutcome, RunStatus, Task, follow_up_prompt, new_id
    from companyd.runs._transcript import read_transcript

__all__ = [
    "STORE_STEPS",
    "ApprovalStep",
    "Journal",
    "JournaledRun",
    "LlmStep",
    "ReviewStep",
    "RunOutcome",
    "RunRetention",
    "RunStatus",
    "Step",
    "StepPayload",
    "Task",
    "TaskState",
    "ToolStartStep",
    "VerificationPayload",
    "cut",
    "follow_up_prompt",
    "full_size",
    "new_id",
    "read_transcript",
]

_HOMES: dict[str, str] = {
    "STORE_STEPS": "companyd.runs._schema",
    "VerificationPayload": "companyd.runs._records",
    "ApprovalStep": "companyd.runs._records",
    "Journal": "companyd.runs._journal",
    "JournaledRun": "companyd.runs._records",
    "LlmStep": "companyd.runs._records",
    "ReviewStep": "companyd.runs._records",
    "RunOutcome": "companyd.runs._tasks",
    "RunRetention": "companyd.runs._retention",
    "RunStatus": "companyd.runs._tasks",
    "Step": "companyd.runs._records",
    "StepPayload": "companyd.runs._records",
    "Task": "companyd.runs._tasks",
    "TaskState": "companyd.runs._records",
    "ToolStartStep": "companyd.runs._records",
    "cut": "companyd.runs._cut",
    "follow_up_prompt": "companyd.runs._tasks",
    "full_size": "companyd.runs._cut",
    "new_id": "companyd.runs._tasks",
    "read_transcript": "companyd.runs._transcript",
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
