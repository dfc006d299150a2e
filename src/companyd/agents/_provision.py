"""What an agent is given when it starts: its system prompt and its tools.

:class:`Provisions` builds, for one agent of the running configuration,

* the stable, cacheable **system prompt** (who it is, the company context, its instructions,
  whom it reports to, whom it may delegate to or consult) — cached until a reload;
* its **toolbox**: the memory tools, the colleague tools (consult, delegate), the
  improver's tools for an agent with ``can_modify``, ``ask_founder`` for an agent with
  ``tools.ask_founder``, and the tools of every MCP server it
  declares, after company.yaml's allow/deny lists. One bad MCP server never stops the
  agent: it runs without that server's tools, an ``mcp_server_failed`` alert says why, and
  the server is tried again with a growing wait until it comes up (its tools are added then)
  or the agent stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from companyd._aio import cancel_and_wait
from companyd.agents._colleagues import Colleagues
from companyd.agents._deps import MarkerPort
from companyd.agents._founder import ask_founder_tool
from companyd.agents._improver import improver_tools
from companyd.agents._tools import (
    MCP_RETRY_MAX_SECONDS,
    MCP_RETRY_MIN_SECONDS,
    McpServerFailed,
    McpToolServer,
    Tool,
    ToolBox,
    memory_tools,
)
from companyd.clock import Clock
from companyd.config import AgentConfig, CompanyConfig
from companyd.desk import Desk, Proposals
from companyd.events import EventBus, McpServerRecovered, Severity
from companyd.events import McpServerFailed as McpServerFailedEvent  # the exception's name
from companyd.runs import Journal

__all__ = ["Provisions"]

log = logging.getLogger(__name__)


class Provisions:
    """System prompts and toolboxes of the agents of one company.

    Args:
        config: the running configuration, asked at each use (it changes on reload).
        bus: where MCP server failures and recoveries go.
        clock: time source (the MCP retry waits).
        journal: the run journal (the improver's tools read recent runs).
        memory: the memory owner (the memory tools).
        colleagues: the consult and delegate tools.
        proposals: the improver's proposal store, if any.
        desk: the founder's desk (``ask_founder`` for agents with ``tools.ask_founder``).
    """

    def __init__(
        self,
        *,
        config: Callable[[], CompanyConfig],
        bus: EventBus,
        clock: Clock,
        journal: Journal,
        memory: MarkerPort,
        colleagues: Colleagues,
        proposals: Proposals | None,
        desk: Desk | None = None,
    ) -> None:
        self._config = config
        self._bus = bus
        self._clock = clock
        self._journal = journal
        self._memory = memory
        self._colleagues = colleagues
        self._proposals = proposals
        self._desk = desk
        self._prompts: dict[str, str] = {}

    def forget_prompts(self) -> None:
        """Drop the cached prompts (the configuration was reloaded)."""
        self._prompts.clear()

    def system_prompt(self, agent: AgentConfig) -> str:
        """The stable, cacheable system prompt of ``agent``."""
        cached = self._prompts.get(agent.slug)
        if cached is not None:
            return cached
        cfg = self._config()
        reports = [a.slug for a in cfg.agents.values() if a.reports_to == agent.slug]
        lines = [
            f"You are {agent.title} ({agent.slug}) at {cfg.name}.",
        ]
        if cfg.spec.company.context:
            lines += ["", cfg.spec.company.context.strip()]
        lines += ["", "Your instructions:", agent.instructions.strip(), ""]
        if agent.reports_to:
            boss = cfg.agents[agent.reports_to]
            lines.append(f"You report to {boss.title} ({boss.slug}).")
        if reports:
            lines.append("Your direct reports (use the delegate tool): " + ", ".join(reports) + ".")
        if agent.consult:
            lines.append("Colleagues you may consult: " + ", ".join(agent.consult) + ".")
        lines += [
            "",
            "The company memory is a shared knowledge graph; use the memory tools to read it "
            "before you act and to record decisions, facts and results after. Be concise.",
        ]
        prompt = "\n".join(lines)
        self._prompts[agent.slug] = prompt
        return prompt

    async def toolbox_for(self, agent: AgentConfig, stack: contextlib.AsyncExitStack) -> ToolBox:
        """Every tool ``agent`` may use; external MCP servers are started on ``stack``."""
        tools: list[Tool] = memory_tools(self._memory)
        tools += self._colleagues.tools(agent)
        if agent.can_modify and self._proposals is not None:
            tools += improver_tools(
                agent.slug,
                agent.can_modify,
                self._proposals,
                lambda a: self._journal.runs(agent=a, limit=10),
            )
        if agent.tools.ask_founder and self._desk is not None:
            tools.append(ask_founder_tool(self._desk, agent))
        box = ToolBox.build(tools, agent.tools)
        for name, spec in agent.mcp_servers.items():
            # One bad server never stops the agent: it runs without that server's tools,
            # an alert says why, and the server is tried again with backoff.
            try:
                server = await stack.enter_async_context(McpToolServer(name, spec))
            except McpServerFailed as exc:
                self._mcp_failed(agent.slug, name, exc.reason, 1, MCP_RETRY_MIN_SECONDS)
                retry = asyncio.create_task(
                    self._retry_mcp(agent, name, box), name=f"mcp-retry:{agent.slug}:{name}"
                )
                stack.push_async_callback(cancel_and_wait, retry)
                continue
            box.add(server.tools, agent.tools)
        return box

    def _mcp_failed(
        self, agent: str, server: str, reason: str, attempt: int, retry_in: float
    ) -> None:
        # The first failure is a warning (an alert); later ones only count attempts.
        first = attempt == 1
        log.log(
            logging.WARNING if first else logging.INFO,
            "agent %s: MCP server %r %s; running without its tools, retry %d in %g s",
            agent,
            server,
            reason,
            attempt + 1,
            retry_in,
        )
        self._bus.publish(
            McpServerFailedEvent(
                source=f"agent/{agent}",
                severity=Severity.WARNING if first else Severity.DEBUG,
                agent=agent,
                server=server,
                reason=reason,
                attempt=attempt,
                retry_in_s=retry_in,
            )
        )

    async def _retry_mcp(self, agent: AgentConfig, name: str, box: ToolBox) -> None:
        """Start ``name`` again after a growing wait until it comes up, then keep it (and
        its tools in ``box``) until the agent stops and cancels this task.
        """
        spec = agent.mcp_servers[name]
        delay = MCP_RETRY_MIN_SECONDS
        attempt = 1
        while True:
            await self._clock.sleep(delay)
            attempt += 1
            try:
                server = McpToolServer(name, spec)
                await server.__aenter__()
            except McpServerFailed as exc:
                delay = min(delay * 2, MCP_RETRY_MAX_SECONDS)
                self._mcp_failed(agent.slug, name, exc.reason, attempt, delay)
                continue
            added: list[str] = []
            try:
                added = box.add(server.tools, agent.tools)
                log.info("agent %s: MCP server %r is up at attempt %d", agent.slug, name, attempt)
                self._bus.publish(
                    McpServerRecovered(
                        source=f"agent/{agent.slug}",
                        agent=agent.slug,
                        server=name,
                        attempt=attempt,
                        tools=sorted(added),
                    )
                )
                await asyncio.Event().wait()  # until the agent stops
            finally:
                box.remove(added)
                await server.__aexit__(None, None, None)
