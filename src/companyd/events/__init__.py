"""The event stream: typed events and the bus that carries them (layer L0).

Supervisors, agents, the spend ledger, the scheduler, the memory owner and the daemon
*publish* events to one :class:`EventBus`; alerts (Telegram), logs, metrics and
``companyd status`` *subscribe*. Nothing reads another component's internals to find out
what happened — if an alert or a status line needs a fact, that fact is in an event.

* :mod:`~companyd.events.base`: :class:`Event` (one frozen dataclass per kind derives from
  it), :class:`Severity`, the JSON view.
* one module of kinds per concern: :mod:`~companyd.events.supervision`,
  :mod:`~companyd.events.daemon`, :mod:`~companyd.events.agents`,
  :mod:`~companyd.events.money`, :mod:`~companyd.events.routines`,
  :mod:`~companyd.events.memory`, :mod:`~companyd.events.pager`,
  :mod:`~companyd.events.tools`.
* :mod:`~companyd.events.catalog`: :data:`KINDS` (derived from the classes) and
  :func:`event_from` (JSON back to the typed event).
* :mod:`~companyd.events.bus`: :class:`EventBus` and :class:`Subscription`.

This package only re-exports; docs/events.md documents every kind.
"""

from companyd.events.agents import (
    AgentPaused,
    AgentResumed,
    CircuitBreaker,
    FounderApprovalRequested,
    FounderDecided,
    FounderQuestion,
    FounderReminder,
    FounderResultForApproval,
    ModelFallback,
    ProposalApplied,
    ProposalCreated,
    QuotaWall,
    QuotaWallLifted,
    RunFailed,
    RunFinished,
    RunStarted,
    TaskQuarantined,
)
from companyd.events.base import EVENT_TYPES, UNSTAMPED, Event, Other, Severity
from companyd.events.bus import EventBus, Subscription
from companyd.events.catalog import KINDS, event_from, event_from_dict
from companyd.events.daemon import (
    ConfigRejected,
    DaemonReloaded,
    DaemonStarted,
    DaemonStopping,
    LeadershipTaken,
    LoopLag,
    OperatorAction,
    StateDirTightened,
    StateDiskFull,
    StateDiskRecovered,
)
from companyd.events.memory import MemoryRepaired
from companyd.events.money import (
    ApiKeyRefused,
    ApiSpendLimit,
    BudgetExhausted,
    BudgetRaised,
    BudgetReset,
    BudgetThreshold,
    SpendRunaway,
    SpendUnanswered,
    SpendUnsettled,
    UnknownModelPrice,
)
from companyd.events.pager import (
    ResultDelivered,
    ResultUndelivered,
    TelegramCommandsFailing,
    TelegramCommandsRecovered,
)
from companyd.events.routines import (
    RoutineEvent,
    RoutineFailed,
    RoutineLimitReached,
    RoutineMissed,
    RoutinePaused,
    RoutineResult,
    RoutineResumed,
    RoutineSkipped,
    RoutineUnverified,
)
from companyd.events.supervision import (
    AutoShutdown,
    Backoff,
    ChildExited,
    ChildIgnored,
    ChildKillFailed,
    ChildStarted,
    ChildStartFailed,
    ChildTerminated,
    MaxIntensity,
    Restart,
    SupStarted,
    SupStopped,
)
from companyd.events.tools import (
    McpServerFailed,
    McpServerRecovered,
    ToolRateLimited,
    ToolsQuarantined,
)

__all__ = [
    "EVENT_TYPES",
    "KINDS",
    "UNSTAMPED",
    "AgentPaused",
    "AgentResumed",
    "ApiKeyRefused",
    "ApiSpendLimit",
    "AutoShutdown",
    "Backoff",
    "BudgetExhausted",
    "BudgetRaised",
    "BudgetReset",
    "BudgetThreshold",
    "ChildExited",
    "ChildIgnored",
    "ChildKillFailed",
    "ChildStartFailed",
    "ChildStarted",
    "ChildTerminated",
    "CircuitBreaker",
    "ConfigRejected",
    "DaemonReloaded",
    "DaemonStarted",
    "DaemonStopping",
    "Event",
    "EventBus",
    "FounderApprovalRequested",
    "FounderDecided",
    "FounderQuestion",
    "FounderReminder",
    "FounderResultForApproval",
    "LeadershipTaken",
    "LoopLag",
    "MaxIntensity",
    "McpServerFailed",
    "McpServerRecovered",
    "MemoryRepaired",
    "ModelFallback",
    "OperatorAction",
    "Other",
    "ProposalApplied",
    "ProposalCreated",
    "QuotaWall",
    "QuotaWallLifted",
    "Restart",
    "ResultDelivered",
    "ResultUndelivered",
    "RoutineEvent",
    "RoutineFailed",
    "RoutineLimitReached",
    "RoutineMissed",
    "RoutinePaused",
    "RoutineResult",
    "RoutineResumed",
    "RoutineSkipped",
    "RoutineUnverified",
    "RunFailed",
    "RunFinished",
    "RunStarted",
    "Severity",
    "SpendRunaway",
    "SpendUnanswered",
    "SpendUnsettled",
    "StateDirTightened",
    "StateDiskFull",
    "StateDiskRecovered",
    "Subscription",
    "SupStarted",
    "SupStopped",
    "TaskQuarantined",
    "TelegramCommandsFailing",
    "TelegramCommandsRecovered",
    "ToolRateLimited",
    "ToolsQuarantined",
    "UnknownModelPrice",
    "event_from",
    "event_from_dict",
]
