"""The event stream: typed events and the bus that carries them (layer L0).

Supervisors, agents, the spend ledger, the scheduler, the memory owner and the daemon
*publish* events to one :class:`EventBus`; alerts (Telegram), logs, metrics and
``companyd status`` *subscribe*. Nothing reads another component's internals to find out
what happened — if an alert or a status line needs a fact, that fact is in an event.

* :mod:`~companyd.events._base`: :class:`Event` (one frozen dataclass per kind derives from
  it), :class:`Severity`, the JSON view.
* one module of kinds per concern: :mod:`~companyd.events._supervision`,
  :mod:`~companyd.events._daemon`, :mod:`~companyd.events._agents`,
  :mod:`~companyd.events._money`, :mod:`~companyd.events._routines`,
  :mod:`~companyd.events._memory`, :mod:`~companyd.events._pager`,
  :mod:`~companyd.events._tools`.
* :mod:`~companyd.events._catalog`: :data:`KINDS` (derived from the classes) and
  :func:`event_from` (JSON back to the typed event).
* :mod:`~companyd.events._bus`: :class:`EventBus` and :class:`Subscription`.

This package only re-exports; docs/events.md documents every kind.
"""

from companyd.events._agents import (
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
from companyd.events._base import EVENT_TYPES, UNSTAMPED, Event, Other, Severity
from companyd.events._bus import EventBus, Subscription
from companyd.events._catalog import KINDS, event_from, event_from_dict
from companyd.events._daemon import (
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
from companyd.events._memory import MemoryRepaired
from companyd.events._money import (
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
from companyd.events._pager import (
    ResultDelivered,
    ResultUndelivered,
    TelegramCommandsFailing,
    TelegramCommandsRecovered,
)
from companyd.events._routines import (
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
from companyd.events._supervision import (
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
from companyd.events._tools import (
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
