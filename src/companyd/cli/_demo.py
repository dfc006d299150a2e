"""``companyd demo``: the company's supervision tree offline, with placeholder agents, and
``--crash-test`` (the demo itself is :mod:`companyd.daemon._demo`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from companyd.cli._main import add_config_argument, config_path
from companyd.config import load_config
from companyd.daemon import crash_test, show_tree

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``companyd demo``."""
    p = subparsers.add_parser(
        "demo",
        help="run the company offline with placeholder agents and watch supervision work",
        description=(
            "Build the supervision tree from company.yaml with placeholder agents (no LLM "
            "calls, no network). With --crash-test, crash an agent on purpose and show how "
            "the tree recovers."
        ),
    )
    add_config_argument(p)
    p.add_argument(
        "--crash-test",
        action="store_true",
        help="crash one agent, then crash-loop it until its department gives up",
    )
    p.add_argument(
        "--agent",
        metavar="SLUG",
        help="the agent to crash (default: the first one in a department without backoff)",
    )
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    config = load_config(config_path(args))
    if args.crash_test:
        return asyncio.run(crash_test(config, agent=args.agent))
    return asyncio.run(show_tree(config, sys.stdout))
