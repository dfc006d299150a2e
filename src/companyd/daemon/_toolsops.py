"""The Admin operations over the agents' tools: ``tools`` (every tool, its origin, risk,
policy, rate limit and today's use, quarantined or not) and ``tools_approve`` (the founder
approves the held-back tools of an MCP server; they are offered at once). docs/tools.md.

:class:`ToolsOps` is a mixin of :class:`~companyd.daemon._main.Daemon`; it owns no state:
the running toolboxes are the agents' provisions (:class:`~companyd.agents._provision.
Provisions`), the counts and catalogues the tools store.
"""

from __future__ import annotations

from companyd._sqlite import store_errors
from companyd.admin import AdminError, DeskDecision, ToolsApproved, ToolsReport
from companyd.agents import Staff
from companyd.config import CompanyConfig
from companyd.daemon._actions import recorded
from companyd.desk import TOOLS_ITEM, RateLimits, ToolStore

__all__ = ["ToolsOps", "approve_tools_item", "release"]


async def release(
    staff: Staff, config: CompanyConfig, server: str, agent: str | None
) -> list[tuple[str, str]]:
    """Approve the held-back tools of ``server`` (of ``agent``, or every agent with it);
    offered at once. ``[(agent, tool)]``.

    Raises:
        AdminError: an unknown agent, no such server, or the store cannot be written.
    """
    if agent is not None and agent not in config.agents:
        raise AdminError(
            f"no agent {agent!r}; agents: {', '.join(sorted(config.agents)) or '(none)'}"
        )
    try:
        approved = sorted(await staff.provisions.release(server, agent))
    except store_errors() as exc:
        raise AdminError(f"the tools store cannot be written: {exc}") from None
    having = [
        a.slug
        for a in config.agents.values()
        if server in a.mcp_servers and (agent is None or a.slug == agent)
    ]
    if not approved and not having:
        names = sorted({s for a in config.agents.values() for s in a.mcp_servers})
        raise AdminError(
            f"no MCP server {server!r}"
            + (f" for agent {agent!r}" if agent else "")
            + f"; servers: {', '.join(names) or '(none)'}"
        )
    return approved


async def approve_tools_item(
    staff: Staff, config: CompanyConfig, item_id: str, by: str
) -> DeskDecision:
    """``companyd approve tools:AGENT:SERVER`` (the inbox item of held-back tools), as a
    desk decision so every front end (CLI, Telegram, dashboard) shows it like the others.
    """
    agent, _, server = item_id.removeprefix(TOOLS_ITEM).partition(":")
    approved = await release(staff, config, server, agent or None)
    now = staff.clock.time()
    names = ", ".join(t for _, t in approved)
    message = (
        f"approved {names} of {server} for {agent}; offered now"
        if approved
        else f"nothing of {server} was held back any more"
    )
    return DeskDecision(
        id=item_id,
        kind="tools",
        agent=agent,
        run_id=None,
        routine=None,
        details={"server": server, "approved": [t for _, t in approved]},
        state="approved",
        created=now,
        deadline=now,
        decided=now,
        text="",
        decided_by=by,
        message=message,
    )


class ToolsOps:
    """``tools`` and ``tools_approve``. The attributes are the daemon's."""

    config: CompanyConfig
    staff: Staff
    tool_store: ToolStore

    def _known_agent(self, agent: str | None) -> None:
        if agent is not None and agent not in self.config.agents:
            raise AdminError(
                f"no agent {agent!r}; agents: {', '.join(sorted(self.config.agents)) or '(none)'}"
            )

    async def tools(self, agent: str | None = None) -> ToolsReport:
        """:meth:`Admin.tools`.

        Raises:
            AdminError: an unknown agent, or the tools store cannot be read.
        """
        self._known_agent(agent)
        limits = RateLimits(
            self.tool_store,
            bus=self.staff.bus,
            clock=self.staff.clock,
            timezone=lambda: self.config.timezone,
        )
        day = limits.today()
        try:
            used = await self.tool_store.used(day)
        except store_errors() as exc:
            raise AdminError(f"the tools store cannot be read: {exc}") from None
        rows = self.staff.provisions.tool_rows(agent)
        for row in rows:
            row["used_today"] = used.get((row["agent"], row["tool"]), 0)
        return ToolsReport(day=day, tools=rows)

    async def tools_approve(
        self, server: str, agent: str | None = None, via: str = "cli"
    ) -> ToolsApproved:
        """:meth:`Admin.tools_approve` (an ``operator_action`` ``via`` where it was asked).

        Raises:
            AdminError: an unknown agent, no agent has a server ``server``, or the store
                cannot be written.
        """
        target = f"{agent}/{server}" if agent else server
        work = self._tools_approve(server, agent)
        return await recorded(self.staff.bus, "tools_approve", target, via, work)

    async def _tools_approve(self, server: str, agent: str | None) -> ToolsApproved:
        approved = await release(self.staff, self.config, server, agent)
        return ToolsApproved(
            server=server, approved=[{"agent": a, "tool": t} for a, t in sorted(approved)]
        )
