"""The founder's side of the operator contract: the inbox and decisions on desk items.

:func:`gather_inbox` is what ``companyd inbox`` and Telegram ``/inbox`` show — the desk's
approvals, questions and results (:class:`~companyd.desk._store.Desk`), the improver's
pending proposals and the quarantined tasks, oldest first, each with its actions — for the
daemon's :class:`~companyd.daemon._operator.Operator` and for the CLI without a daemon
alike. :func:`decide` turns a desk decision into the Admin result. Ids tell the two kinds of
decision apart (:func:`on_desk`): the founder approves and rejects with one pair of verbs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from companyd.admin import AdminError, DeskDecision, Inbox, InboxItem
from companyd.desk._store import Desk, DeskError, DeskItem, ItemKind, ItemState

if TYPE_CHECKING:
    # the stores gather_inbox is handed, for their types only (issue 31: loading this
    # module does not load the proposals' config schema)
    from companyd.desk._proposals import Proposals
    from companyd.desk._toolstore import ToolStore
    from companyd.runs import Journal

__all__ = ["TOOLS_ITEM", "decide", "gather_inbox", "not_an_inbox_id", "on_desk"]


#: The id prefix of an inbox item for the held-back tools of an MCP server:
#: ``tools:AGENT:SERVER``.
TOOLS_ITEM = "tools:"


def on_desk(item_id: str) -> bool:
    """Whether ``item_id`` names a founder's-desk item (an approval ``ap-``, a question
    ``q-``, a routine result ``r-`` or an undelivered result kept ``k-``) rather than an
    improver proposal.
    """
    return item_id.startswith(("ap-", "q-", "r-", "k-"))


async def decide(
    desk: Desk, item_id: str, state: ItemState, text: str, by: str, via: str = "cli"
) -> DeskDecision:
    """Decide desk item ``item_id`` (``by`` whom, ``via`` telegram or cli); the item after
    it, with a line saying what was done.

    Raises:
        AdminError: no such item, not pending, or not a decision its kind takes.
    """
    try:
        item = await desk.decide(item_id, state, text, by=by, via=via)
    except DeskError as exc:
        raise AdminError(str(exc)) from None
    if item.kind is ItemKind.APPROVAL:
        what = f"{item.payload.get('tool')} call of {item.agent}"
    elif item.kind is ItemKind.RESULT:
        what = f"result of {item.routine} by {item.agent}"
    elif item.kind is ItemKind.KEPT:
        what = f"undelivered result of {item.routine} by {item.agent}"
    else:
        what = f"question of {item.agent}"
    verb = "sent back with changes" if item.state is ItemState.CHANGES else str(item.state)
    if item.kind is ItemKind.KEPT:
        verb = "marked read"
    return DeskDecision(
        id=item.id,
        kind=str(item.kind),
        agent=item.agent,
        run_id=item.run_id,
        routine=item.routine,
        details=dict(item.payload),
        state=str(item.state),
        created=item.created,
        deadline=item.deadline,
        decided=item.decided,
        text=item.text,
        decided_by=item.decided_by,
        message=f"{verb} {item.id} ({what})",
    )


async def gather_inbox(
    desk: Desk | None,
    proposals: Proposals | None,
    journal: Journal | None,
    tools: ToolStore | None = None,
) -> Inbox:
    """What waits for the founder, oldest first, each with its actions.

    A store given as None has nothing (the CLI without a daemon passes None for a file that
    does not exist yet: reading must not create it). ``tools``: the MCP servers' tools held
    back (an item ``tools:AGENT:SERVER`` per server, approved with ``companyd approve``).
    """
    items = [_desk_entry(i) for i in await desk.pending()] if desk is not None else []
    if proposals is not None:
        items += [
            InboxItem(
                id=p.id,
                kind="proposal",
                agent=p.agent,
                created=p.created,
                summary=f"change {p.agent}'s instructions (from {p.proposer}): {p.reason}",
                actions=["approve", "reject"],
            )
            for p in await proposals.list(include_decided=False)
        ]
    if journal is not None:
        items += [
            InboxItem(
                id=str(t["id"]),
                kind="quarantined",
                agent=str(t["agent"]),
                created=float(t["updated"]),
                summary=f"crashed {t['crashes']}× on: {_short(t.get('prompt', ''), 160)}",
                actions=["retry"],
            )
            for t in await journal.tasks(["quarantined"])
        ]
    if tools is not None:
        items += [
            InboxItem(
                id=f"{TOOLS_ITEM}{h['agent']}:{h['server']}",
                kind="tools",
                agent=h["agent"],
                created=h["since"],
                summary=(
                    f"MCP server {h['server']} offers new or changed tools, held back from "
                    f"{h['agent']}: {', '.join(h['tools'])}"
                ),
                actions=["approve"],
            )
            for h in await tools.held()
        ]
    items.sort(key=lambda i: (i.created, i.id))
    return Inbox(items=items)


def _desk_entry(item: DeskItem) -> InboxItem:
    """One desk item as an inbox row."""
    p = item.payload
    if item.kind is ItemKind.APPROVAL:
        summary = f"{item.agent} wants to call {p.get('tool')} with {_short(p.get('input'), 200)}"
        reason = str(p.get("reason") or "").strip()
        if reason:
            summary += f" — {_short(reason, 200)}"
        actions = ["approve", "reject"]
    elif item.kind is ItemKind.RESULT:
        summary = f"result of {item.routine} by {item.agent} awaits approval: "
        if p.get("unverified"):  # said before the founder decides (docs/agents.md)
            summary += f"⚠ unverified: {_short(p.get('unverified'), 200)} — "
        summary += _short(p.get("answer"), 200)
        actions = ["approve", "changes", "reject"]
    elif item.kind is ItemKind.KEPT:
        summary = (
            f"result of {item.routine} by {item.agent}, not delivered "
            f"({_short(p.get('reason'), 120)}): {_short(p.get('answer'), 200)}"
        )
        actions = ["approve"]  # marks it read
    else:
        summary = f"{item.agent} asks: {_short(p.get('question'), 300)}"
        if item.announced is None:
            # one question of an agent is on screen at a time (docs/desk.md): say this one
            # is not, so its deadline does not read as ignored
            summary += (
                " (queued: not sent to Telegram yet; it follows the answer to the agent's "
                "question before it)"
            )
        actions = ["answer"]
    return InboxItem(
        id=item.id,
        kind=str(item.kind),
        agent=item.agent,
        created=item.created,
        summary=summary,
        actions=actions,
        deadline=item.deadline,
        run_id=item.run_id,
    )


def not_an_inbox_id(item_id: str) -> str | None:
    """Why ``item_id`` names nothing ``approve`` or ``reject`` could decide — neither a desk
    item's id nor a proposal's (a task's says to retry it) — or None when it may. Such an id
    fell through to the proposals: "no proposal 'nope'; pending: (none)" read as if nothing
    waited, with approvals waiting.
    """
    if item_id.startswith(("prop-", TOOLS_ITEM)) or on_desk(item_id):
        return None
    if item_id.startswith("task-"):
        return (
            f"{item_id!r} is a task, not an inbox item: a quarantined task runs again with "
            f"`companyd retry {item_id}`"
        )
    return (
        f"nothing in the inbox has id {item_id!r}: approvals are ap-…, results r-…, "
        "questions q-…, kept results k-…, proposals prop-…; `companyd inbox` lists what waits"
    )


def _short(value: Any, limit: int) -> str:
    """``value`` on one line, at most ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
