"""The founder's desk: what waits for the founder, and the founder's decisions.

* :class:`Desk` — the durable desk store: approvals of tool calls, questions (``ask_founder``),
  results held for review, and the runs that wait on them (docs/desk.md);
* :class:`Proposals` — the improver's proposals to change an agent, applied only when the
  founder approves (:func:`replace_instructions` rewrites the instructions text);
* :func:`gather_inbox` / :func:`decide` — the inbox the CLI, dashboard and Telegram show,
  and one decision on an item of it.

The agent-side of the desk (the approval gate around a tool, the ``ask_founder`` and improver
tools) is agent runtime and lives in :mod:`companyd.agents`; this package never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.desk._inbox import TOOLS_ITEM, decide, gather_inbox, not_an_inbox_id, on_desk
    from companyd.desk._proposals import Proposal, ProposalError, Proposals
    from companyd.desk._store import (
        DEFAULT_APPROVAL_TIMEOUT,
        Desk,
        DeskError,
        DeskFull,
        DeskItem,
        ItemKind,
        ItemState,
        decisions_of,
    )
    from companyd.desk._toolstore import TOOL_STORE_STEPS, RateLimits, ToolStore

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "PROPOSAL_STORE_STEPS",
    "STORE_STEPS",
    "TOOLS_ITEM",
    "TOOL_STORE_STEPS",
    "Desk",
    "DeskError",
    "DeskFull",
    "DeskItem",
    "ItemKind",
    "ItemState",
    "Proposal",
    "ProposalError",
    "Proposals",
    "RateLimits",
    "ToolStore",
    "decide",
    "decisions_of",
    "gather_inbox",
    "not_an_inbox_id",
    "on_desk",
]

_HOMES: dict[str, str] = {
    "TOOL_STORE_STEPS": "companyd.desk._toolstore",
    "TOOLS_ITEM": "companyd.desk._inbox",
    "RateLimits": "companyd.desk._toolstore",
    "ToolStore": "companyd.desk._toolstore",
    "PROPOSAL_STORE_STEPS": "companyd.desk._proposals",
    "STORE_STEPS": "companyd.desk._store",
    "DeskFull": "companyd.desk._store",
    "DEFAULT_APPROVAL_TIMEOUT": "companyd.desk._store",
    "Desk": "companyd.desk._store",
    "DeskError": "companyd.desk._store",
    "DeskItem": "companyd.desk._store",
    "ItemKind": "companyd.desk._store",
    "ItemState": "companyd.desk._store",
    "Proposal": "companyd.desk._proposals",
    "ProposalError": "companyd.desk._proposals",
    "Proposals": "companyd.desk._proposals",
    "decide": "companyd.desk._inbox",
    "decisions_of": "companyd.desk._store",
    "gather_inbox": "companyd.desk._inbox",
    "not_an_inbox_id": "companyd.desk._inbox",
    "on_desk": "companyd.desk._inbox",
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
