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
    from companyd.agents._agent import Agent
    from companyd.agents._breaker import Breaker, BreakerTripped
    from companyd.agents._calls import ModelCaller
    from companyd.agents._deps import AgentDeps, InjectedCrash, MarkerPort, SpendPort, StaffPort
    from companyd.agents._founder import ApprovalGate, ResultApprovals, ask_founder_tool
    from companyd.agents._improver import improver_tools
    from companyd.agents._run import RunState
    from companyd.agents._staff import Staff
    from companyd.agents._tools import (
        McpServerFailed,
        McpToolServer,
        Tool,
        ToolBox,
        ToolCallContext,
        ToolError,
    )

__all__ = [
    "Agent",
    "AgentDeps",
    "ApprovalGate",
    "Breaker",
    "BreakerTripped",
    "InjectedCrash",
    "MarkerPort",
    "McpServerFailed",
    "McpToolServer",
    "ModelCaller",
    "ResultApprovals",
    "RunState",
    "SpendPort",
    "Staff",
    "StaffPort",
    "Tool",
    "ToolBox",
    "ToolCallContext",
    "ToolError",
    "ask_founder_tool",
    "improver_tools",
]

_HOMES: dict[str, str] = {
    "Agent": "companyd.agents._agent",
    "AgentDeps": "companyd.agents._deps",
    "ApprovalGate": "companyd.agents._founder",
    "Breaker": "companyd.agents._breaker",
    "BreakerTripped": "companyd.agents._breaker",
    "InjectedCrash": "companyd.agents._deps",
    "MarkerPort": "companyd.agents._deps",
    "McpServerFailed": "companyd.agents._tools",
    "McpToolServer": "companyd.agents._tools",
    "ModelCaller": "companyd.agents._calls",
    "ResultApprovals": "companyd.agents._founder",
    "RunState": "companyd.agents._run",
    "SpendPort": "companyd.agents._deps",
    "Staff": "companyd.agents._staff",
    "StaffPort": "companyd.agents._deps",
    "Tool": "companyd.agents._tools",
    "ToolBox": "companyd.agents._tools",
    "ToolCallContext": "companyd.agents._tools",
    "ToolError": "companyd.agents._tools",
    "ask_founder_tool": "companyd.agents._founder",
    "improver_tools": "companyd.agents._improver",
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
