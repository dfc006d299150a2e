"""The agent runtime: role agents, their tool-use loop, tools, provisioning and staff.

* :class:`Staff` — the company's agents as one group (mailboxes, pauses, colleagues): the
  façade the daemon hands the scheduler as its :class:`~companyd.scheduler.TaskSink`;
* :class:`Agent` — one supervised agent running tasks from its mailbox; :class:`ModelCaller`
  one budgeted model call; :class:`RunState` one run's live state; :class:`Breaker` the
  per-run circuit breaker;
* :class:`AgentDeps` — the ports an agent needs from the rest of the company;
* tools: :class:`Tool`, :class:`ToolBox`, MCP tool servers, the approval gate
  (:class:`ApprovalGate`), ``ask_founder`` and the improver's tools — the agent's side of
  the desk, whose store is :mod:`companyd.desk`.

Front ends and the scheduler never import this package: they read :mod:`companyd.runs` and
:mod:`companyd.desk` (the layers contract in pyproject.toml).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.agents._agent import (
        MAX_REVIEW_ATTEMPTS,
        QUARANTINE_AFTER,
        Agent,
        HeartbeatTimeout,
    )
    from companyd.agents._breaker import Breaker, BreakerTripped
    from companyd.agents._calls import STOP_CALL_GRACE, BudgetedCall, ModelCaller
    from companyd.agents._colleagues import DEFAULT_COLLEAGUE_TIMEOUT, Colleagues
    from companyd.agents._deps import AgentDeps, InjectedCrash, MarkerPort, SpendPort, StaffPort
    from companyd.agents._founder import (
        ASK_FOUNDER,
        ApprovalGate,
        ResultApprovals,
        ask_founder_tool,
        wait_text,
    )
    from companyd.agents._improver import improver_tools
    from companyd.agents._mailbox import Mailboxes
    from companyd.agents._pauses import Pause, Pauses
    from companyd.agents._provision import Provisions
    from companyd.agents._run import (
        PendingTool,
        RunEnded,
        RunState,
        Stopping,
        StopSignal,
        cancel_and_reap,
        stopped_from_outside,
        turn_ended,
    )
    from companyd.agents._staff import Staff
    from companyd.agents._tools import (
        MCP_RETRY_MAX_SECONDS,
        MCP_RETRY_MIN_SECONDS,
        McpServerFailed,
        McpToolServer,
        Tool,
        ToolBox,
        ToolCallContext,
        ToolError,
        unknown_outcome_result,
    )

__all__ = [
    "ASK_FOUNDER",
    "DEFAULT_COLLEAGUE_TIMEOUT",
    "MAX_REVIEW_ATTEMPTS",
    "MCP_RETRY_MAX_SECONDS",
    "MCP_RETRY_MIN_SECONDS",
    "QUARANTINE_AFTER",
    "STOP_CALL_GRACE",
    "Agent",
    "AgentDeps",
    "ApprovalGate",
    "Breaker",
    "BreakerTripped",
    "BudgetedCall",
    "Colleagues",
    "HeartbeatTimeout",
    "InjectedCrash",
    "Mailboxes",
    "MarkerPort",
    "McpServerFailed",
    "McpToolServer",
    "ModelCaller",
    "Pause",
    "Pauses",
    "PendingTool",
    "Provisions",
    "ResultApprovals",
    "RunEnded",
    "RunState",
    "SpendPort",
    "Staff",
    "StaffPort",
    "StopSignal",
    "Stopping",
    "Tool",
    "ToolBox",
    "ToolCallContext",
    "ToolError",
    "ask_founder_tool",
    "cancel_and_reap",
    "improver_tools",
    "stopped_from_outside",
    "turn_ended",
    "unknown_outcome_result",
    "wait_text",
]

_HOMES: dict[str, str] = {
    "ASK_FOUNDER": "companyd.agents._founder",
    "Agent": "companyd.agents._agent",
    "AgentDeps": "companyd.agents._deps",
    "ApprovalGate": "companyd.agents._founder",
    "Breaker": "companyd.agents._breaker",
    "BreakerTripped": "companyd.agents._breaker",
    "BudgetedCall": "companyd.agents._calls",
    "Colleagues": "companyd.agents._colleagues",
    "DEFAULT_COLLEAGUE_TIMEOUT": "companyd.agents._colleagues",
    "HeartbeatTimeout": "companyd.agents._agent",
    "InjectedCrash": "companyd.agents._deps",
    "MAX_REVIEW_ATTEMPTS": "companyd.agents._agent",
    "MCP_RETRY_MAX_SECONDS": "companyd.agents._tools",
    "MCP_RETRY_MIN_SECONDS": "companyd.agents._tools",
    "Mailboxes": "companyd.agents._mailbox",
    "MarkerPort": "companyd.agents._deps",
    "McpServerFailed": "companyd.agents._tools",
    "McpToolServer": "companyd.agents._tools",
    "ModelCaller": "companyd.agents._calls",
    "Pause": "companyd.agents._pauses",
    "Pauses": "companyd.agents._pauses",
    "PendingTool": "companyd.agents._run",
    "Provisions": "companyd.agents._provision",
    "QUARANTINE_AFTER": "companyd.agents._agent",
    "ResultApprovals": "companyd.agents._founder",
    "RunEnded": "companyd.agents._run",
    "RunState": "companyd.agents._run",
    "STOP_CALL_GRACE": "companyd.agents._calls",
    "SpendPort": "companyd.agents._deps",
    "Staff": "companyd.agents._staff",
    "StaffPort": "companyd.agents._deps",
    "StopSignal": "companyd.agents._run",
    "Stopping": "companyd.agents._run",
    "Tool": "companyd.agents._tools",
    "ToolBox": "companyd.agents._tools",
    "ToolCallContext": "companyd.agents._tools",
    "ToolError": "companyd.agents._tools",
    "ask_founder_tool": "companyd.agents._founder",
    "cancel_and_reap": "companyd.agents._run",
    "improver_tools": "companyd.agents._improver",
    "stopped_from_outside": "companyd.agents._run",
    "turn_ended": "companyd.agents._run",
    "unknown_outcome_result": "companyd.agents._tools",
    "wait_text": "companyd.agents._founder",
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
