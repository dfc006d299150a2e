"""The improver's two tools: ``read_agent`` and ``propose_change`` (docs/agents.md).

An agent whose company.yaml entry has ``can_modify: [...]`` gets these tools. They read and
write through the desk's :class:`~companyd.desk.Proposals` store; nothing changes an agent
until the founder approves the proposal there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from companyd.admin import RunRow
from companyd.agents._tools import Tool, ToolCallContext, ToolError, json_schema
from companyd.desk import ProposalError, Proposals


def improver_tools(
    agent_slug: str,
    can_modify: tuple[str, ...],
    proposals: Proposals,
    recent_runs: Callable[[str], Awaitable[list[RunRow]]],
) -> list[Tool]:
    """``read_agent`` and ``propose_change`` for an improver limited to ``can_modify``."""

    def check(target: str) -> None:
        if target not in can_modify:
            raise ToolError(
                f"{agent_slug} may only read or change {', '.join(can_modify)}; not {target!r}"
            )

    async def read_agent(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
        target = str(args.get("agent", ""))
        check(target)
        a = proposals.config.agents[target]
        runs = await recent_runs(target)
        return {
            "agent": target,
            "title": a.title,
            "instructions": a.instructions,
            "model": list(a.model.chain),
            "limits": a.limits.model_dump(mode="json"),
            "recent_runs": [
                {k: r.get(k) for k in ("status", "reason", "cost_usd", "steps", "started")}
                for r in runs
            ],
        }

    async def propose(args: Mapping[str, Any], ctx: ToolCallContext) -> Any:
        target = str(args.get("agent", ""))
        check(target)
        text = str(args.get("instructions", "")).strip()
        if not text:
            raise ToolError("propose_change needs the full new 'instructions' text")
        try:
            p = await proposals.propose(agent_slug, target, text, str(args.get("reason", "")))
        except ProposalError as exc:
            raise ToolError(str(exc)) from None
        return {"proposal": p.id, "status": p.status, "note": "awaits the founder's approval"}

    agent_enum = {"type": "string", "enum": list(can_modify)}
    return [
        Tool(
            name="read_agent",
            description="Read a colleague's instructions, model, limits and recent runs.",
            input_schema=json_schema({"agent": agent_enum}, ["agent"]),
            handler=read_agent,
            idempotent=True,
            family="improver",
        ),
        Tool(
            name="propose_change",
            description=(
                "Propose new instructions for a colleague. Give the complete new text and the "
                "reason. Nothing changes until the founder approves the proposal."
            ),
            input_schema=json_schema(
                {
                    "agent": agent_enum,
                    "instructions": {"type": "string"},
                    "reason": {"type": "string"},
                },
                ["agent", "instructions", "reason"],
            ),
            handler=propose,
            idempotent=False,
            family="improver",
        ),
    ]
