"""Event kinds of the agents' external tool servers (:mod:`companyd.agents`, source
``agent/<slug>``).
"""

from __future__ import annotations

from dataclasses import dataclass

from companyd.events.base import Event, Severity

__all__ = ["McpServerFailed", "McpServerRecovered"]


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class McpServerRecovered(Event):
    """An MCP server is up again with ``tools``."""

    KIND = "mcp_server_recovered"
    agent: str
    server: str
    attempt: int
    tools: list[str]
