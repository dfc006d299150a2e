"""Event kinds of the agents' external tool servers (:mod:`companyd.agents`, source
``agent/<slug>``).
"""

from __future__ import annotations

from companyd.events._base import Event, Severity

__all__ = ["McpServerFailed", "McpServerRecovered", "ToolRateLimited", "ToolsQuarantined"]


class McpServerFailed(Event):
    """An MCP server of an agent failed (``attempt`` 1: at start); retried in
    ``retry_in_s``. Warning for the first failure, debug for the retries.
    """

    KIND = "mcp_server_failed"
    severity: Severity = Severity.WARNING
    agent: str
    server: str
    reason: str
    attempt: int
    retry_in_s: float


class McpServerRecovered(Event):
    """An MCP server is up again with ``tools``."""

    KIND = "mcp_server_recovered"
    agent: str
    server: str
    attempt: int
    tools: list[str]


class ToolRateLimited(Event):
    """A call of ``tool`` by ``agent`` was refused: ``limit`` calls on ``day`` (company
    timezone) were already made (``tools.rate_limit``). Once per agent, tool and day.
    """

    KIND = "tool_rate_limited"
    severity: Severity = Severity.WARNING
    agent: str
    tool: str
    limit: int
    day: str


class ToolsQuarantined(Event):
    """MCP server ``server`` of ``agent`` started with tools that are new or changed since
    the founder approved its catalogue: ``tools`` (name → what changed) are held back from
    the agent until ``companyd tools approve SERVER``. Once per change.
    """

    KIND = "tools_quarantined"
    severity: Severity = Severity.WARNING
    agent: str
    server: str
    tools: dict[str, str]
