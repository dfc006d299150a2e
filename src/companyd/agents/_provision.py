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
  or the agent stops; a server that dies later (found by a call: it exited, or a resource
  limit killed it) is restarted the same way. Each server runs in its sandbox
  (:mod:`companyd.sandbox`, docs/tools.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from companyd._aio import cancel_and_wait
from companyd._sqlite import store_errors
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
from companyd.config import AgentConfig, CompanyConfig, McpServerSpec
from companyd.desk import Desk, Proposals, ToolStore
from companyd.events import EventBus, McpServerRecovered, Severity, ToolsQuarantined
from companyd.events import (
    McpServerFailed as McpServerFailedEvent,  # the exception's name
)
from companyd.runs import Journal
from companyd.sandbox import Launch, ToolSandbox

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
        sandbox: starts each MCP server in its sandbox (docs/tools.md); None: as the
            daemon's own children (tests of the bare runtime).
        tool_store: the approved catalogues of the MCP servers (changed-tool quarantine);
            None: every listed tool is offered.
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
        sandbox: ToolSandbox | None = None,
        tool_store: ToolStore | None = None,
    ) -> None:
        self._config = config
        self._bus = bus
        self._clock = clock
        self._journal = journal
        self._memory = memory
        self._colleagues = colleagues
        self._proposals = proposals
        self._desk = desk
        self._sandbox = sandbox
        self._tool_store = tool_store
        #: (agent, server) → what a running MCP server offers in which toolbox
        self._live: dict[tuple[str, str], _Live] = {}
        #: agent → its configuration and toolbox, as last built (``companyd tools``)
        self._boxes: dict[str, tuple[AgentConfig, ToolBox]] = {}
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
        box = ToolBox.build(tools, agent.tools, max_result_chars=agent.max_result_chars)
        self._boxes[agent.slug] = (agent, box)
        for name, spec in agent.mcp_servers.items():
            # One bad server never stops the agent: it runs without that server's tools,
            # an alert says why, and the server is tried again with backoff — also when it
            # dies later (it exited, a resource limit killed it).
            server: McpToolServer | None
            added: list[str] = []
            try:
                server = await stack.enter_async_context(self._server(agent, name, spec))
            except McpServerFailed as exc:
                self._mcp_failed(agent.slug, name, exc.reason, 1, MCP_RETRY_MIN_SECONDS)
                server = None
            else:
                added = await self._offer(agent, name, box, server, [])
            keep = asyncio.create_task(
                self._keep_mcp(agent, name, box, server, added),
                name=f"mcp-keeper:{agent.slug}:{name}",
            )
            stack.push_async_callback(cancel_and_wait, keep)
        return box

    def _server(self, agent: AgentConfig, name: str, spec: McpServerSpec) -> McpToolServer:
        """An MCP server of ``agent``, started in its sandbox (when there is one)."""
        sandbox = self._sandbox
        if sandbox is None:
            return McpToolServer(name, spec)

        def launch() -> Awaitable[Launch]:
            return sandbox.launch(agent.slug, name, spec)

        return McpToolServer(name, spec, launcher=launch)

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

    async def _keep_mcp(
        self,
        agent: AgentConfig,
        name: str,
        box: ToolBox,
        server: McpToolServer | None,
        added: list[str],
    ) -> None:
        """Keep MCP server ``name`` of ``agent`` up until the agent stops and cancels this
        task: while it is down (it failed to start, ``server`` is None, or it died — found
        by a call), start it again after a growing wait; when it comes up its tools replace
        the old ones in ``box``. Each failure episode is one warning alert; later attempts
        only count.
        """
        spec = agent.mcp_servers[name]
        owned: McpToolServer | None = None  # started here, so stopped here (anyio scopes)
        delay = MCP_RETRY_MIN_SECONDS
        attempt = 1
        try:
            while True:
                if server is not None:
                    await server.dead.wait()
                    self._mcp_failed(agent.slug, name, server.death, 1, MCP_RETRY_MIN_SECONDS)
                    closing, owned = owned, None
                    if closing is not None:
                        await closing.__aexit__(None, None, None)
                    server = None
                    delay, attempt = MCP_RETRY_MIN_SECONDS, 1
                await self._clock.sleep(delay)
                attempt += 1
                try:
                    candidate = self._server(agent, name, spec)
                    await candidate.__aenter__()
                except McpServerFailed as exc:
                    delay = min(delay * 2, MCP_RETRY_MAX_SECONDS)
                    self._mcp_failed(agent.slug, name, exc.reason, attempt, delay)
                    continue
                server = owned = candidate
                added = await self._offer(agent, name, box, server, added)
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
        finally:
            live = self._live.get((agent.slug, name))
            if live is not None and live.box is box:
                del self._live[(agent.slug, name)]
            if owned is not None:
                box.remove(added)
                await owned.__aexit__(None, None, None)

    async def _offer(
        self,
        agent: AgentConfig,
        name: str,
        box: ToolBox,
        server: McpToolServer,
        before: list[str],
    ) -> list[str]:
        """Put the tools of ``server`` the founder approved into ``box`` (in place of
        ``before``, its previous tools): the first catalogue of a server is approved as it
        is; a new or changed tool is held back, and the founder told once. The names added.
        """
        tools = server.tools
        if self._tool_store is not None:
            offered = {t.name for t in tools}
            definitions = {
                t.name: _definition(t) for t in server.listed if getattr(t, "name", "") in offered
            }
            try:
                cat = await self._tool_store.check_catalogue(
                    agent.slug, name, definitions, now=self._clock.time()
                )
            except store_errors() as exc:
                # fail closed: nothing unapproved is offered while the store cannot say
                log.warning(
                    "agent %s: MCP server %r: its approved catalogue cannot be read (%r); "
                    "none of its tools is offered until it can",
                    agent.slug,
                    name,
                    exc,
                )
                tools = []
            else:
                if cat.newly_held:
                    log.warning(
                        "agent %s: MCP server %r offers new or changed tools, held back until "
                        "`companyd tools approve %s`: %s",
                        agent.slug,
                        name,
                        name,
                        ", ".join(f"{k} ({v})" for k, v in sorted(cat.newly_held.items())),
                    )
                    self._bus.publish(
                        ToolsQuarantined(
                            source=f"agent/{agent.slug}",
                            agent=agent.slug,
                            server=name,
                            tools=dict(sorted(cat.newly_held.items())),
                        )
                    )
                tools = [t for t in tools if t.name in cat.offered]
        box.remove(before)
        added = box.add(tools, agent.tools)
        self._live[(agent.slug, name)] = _Live(agent, box, server, added)
        return added

    async def release(self, server: str, agent: str | None = None) -> list[tuple[str, str]]:
        """The founder approves the held-back tools of MCP server ``server`` (of ``agent``,
        or of every agent with a server of that name): they are offered at once to the
        running agents, no restart. ``[(agent, tool)]`` approved.
        """
        if self._tool_store is None:
            return []
        approved = await self._tool_store.approve(server, agent)
        for (slug, name), live in list(self._live.items()):
            if name == server and (agent is None or slug == agent):
                live.added = await self._offer(live.agent, name, live.box, live.server, live.added)
        return approved

    @property
    def tool_store(self) -> ToolStore | None:
        """The approved catalogues and daily counts (None: not kept)."""
        return self._tool_store

    def tool_rows(self, agent: str | None = None) -> list[dict[str, Any]]:
        """Every tool of every started agent (or of ``agent``), for ``companyd tools``:
        ``{agent, tool, origin, risk, policy, rate_limit, quarantined}``; the held-back tools
        of its MCP servers included (``quarantined: true``).
        """
        rows: list[dict[str, Any]] = []
        for slug, (cfg, box) in sorted(self._boxes.items()):
            if agent is not None and slug != agent:
                continue
            for t in box.tools.values():
                rows.append(_row(cfg, t, box.needs_approval(t.name), False))
            for (a, _), live in sorted(self._live.items(), key=lambda kv: kv[0]):
                if a != slug or live.box is not box:
                    continue
                for t in live.server.tools:
                    if t.name not in live.added and t.name not in box.tools:
                        rows.append(_row(cfg, t, t.approval, True))
        return rows


@dataclass
class _Live:
    """A running MCP server of an agent and what it offers in the agent's toolbox."""

    agent: AgentConfig
    box: ToolBox
    server: McpToolServer
    added: list[str]


def _row(agent: AgentConfig, tool: Tool, asks: bool, held: bool) -> dict[str, Any]:
    name = tool.name
    if name in agent.require_approval:
        policy = "approval (require_approval)"
    elif name in agent.tools.allow_without_approval:
        policy = "free (allow_without_approval)"
    elif asks:
        policy = "approval (risk)"
    else:
        policy = "free"
    origin = tool.family.removeprefix("external:")
    return {
        "agent": agent.slug,
        "tool": name,
        "origin": f"mcp server {origin}" if tool.family.startswith("external:") else origin,
        "risk": tool.risk or "built-in",
        "policy": policy,
        "rate_limit": agent.tools.rate_limit.get(name),
        "quarantined": held,
    }


def _definition(tool: Any) -> dict[str, Any]:
    """What of a listed MCP tool the approved catalogue fingerprints."""
    ann = getattr(tool, "annotations", None)
    return {
        "name": tool.name,
        "description": tool.description or "",
        "input_schema": tool.input_schema or {},
        "annotations": ann.model_dump(exclude_none=True, mode="json") if ann is not None else {},
    }
