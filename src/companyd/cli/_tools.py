"""The agents' tools from the command line: ``companyd tools`` and ``companyd tools approve``.

``companyd tools [--agent A] [--json]`` lists every tool of every running agent: where it
comes from, its risk (from its MCP annotations), its approval policy, its daily rate limit
and today's use, and whether it is held back (quarantined: new or changed since the
founder approved its server's catalogue). ``companyd tools approve SERVER [--agent A]``
approves the held-back tools of an MCP server: with a daemon running they are offered at
once; without one the approval is written to the tools store and holds at the next start.
docs/tools.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from companyd.cli._daemon import add_daemon_arguments, call_daemon
from companyd.cli._main import print_json
from companyd.errors import CompanydError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``tools`` to the subcommands."""
    p = sub.add_parser(
        "tools",
        help="every tool of every agent: origin, risk, policy, rate limit, quarantine; "
        "`tools approve SERVER` releases held-back tools",
        description="Without arguments: every tool of every running agent. "
        "`approve SERVER`: approve the new or changed tools of an MCP server.",
    )
    p.add_argument(
        "words",
        nargs="*",
        metavar="approve SERVER",
        help="`approve SERVER` to approve the held-back tools of MCP server SERVER",
    )
    p.add_argument("--agent", help="only this agent")
    add_daemon_arguments(p)
    p.set_defaults(func=_tools)


def _tools(args: argparse.Namespace) -> int:
    words: list[str] = args.words
    if words and (words[0] != "approve" or len(words) != 2):
        raise CompanydError(
            f"expected `companyd tools` or `companyd tools approve SERVER`, got {' '.join(words)!r}"
        )
    if words:
        server = words[1]

        def offline() -> int:
            import asyncio  # here: the daemon's answer needs no event loop in the CLI

            result = asyncio.run(_approve_offline(args, server))
            if args.json:
                print_json(result)
                return 0
            return _print_approved(result)

        return call_daemon(
            args,
            "tools_approve",
            _print_approved,
            otherwise=offline,
            server=server,
            agent=args.agent,
        )

    # the tools are those the running agents were given: with no daemon, exit 69 and where
    # it was looked for, as every command that needs one (docs/daemon.md, "Exit codes")
    return call_daemon(args, "tools", _print_tools, agent=args.agent)


async def _approve_offline(args: argparse.Namespace, server: str) -> dict[str, Any]:
    # the config machinery and the tools store: for this path only (issue 31)
    from companyd.config import default_config_path, load_config, state_backend
    from companyd.desk import ToolStore

    cfg = load_config(args.config or default_config_path())
    store = ToolStore(cfg.state_dir(args.state_dir) / "tools.sqlite", backend=state_backend(cfg))
    try:
        approved = await store.approve(server, args.agent)
    finally:
        await store.close()
    return {"server": server, "approved": [{"agent": a, "tool": t} for a, t in approved]}


def _print_approved(result: Mapping[str, Any]) -> int:
    approved = result.get("approved") or []
    if not approved:
        print(f"nothing of MCP server {result.get('server')!r} was held back")
        return 0
    for row in approved:
        print(f"approved {row['tool']} of {result.get('server')} for {row['agent']}")
    return 0


def _print_tools(result: Mapping[str, Any]) -> int:
    rows = result.get("tools") or []
    if not rows:
        print("no tools (no agent is running)")
        return 0
    header = ("AGENT", "TOOL", "ORIGIN", "RISK", "POLICY", f"TODAY ({result.get('day')})")
    lines = [header]
    for r in rows:
        limit = r.get("rate_limit")
        use = (
            f"{r.get('used_today', 0)}/{limit}"
            if limit is not None
            else str(r.get("used_today", 0))
        )
        policy = "QUARANTINED (companyd tools approve)" if r.get("quarantined") else r["policy"]
        lines.append((r["agent"], r["tool"], r["origin"], r["risk"], policy, use))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    return 0
