"""The record of where each routine result went: the pager's :class:`DeliveryLog` in the
daemon.

Each delivery the pager makes, queues or cannot make is added to the run's record in the
run journal (``runs show``, :meth:`~companyd.runs.Journal.record_delivery`); a
result that could not be delivered is kept in the founder's inbox as a ``kept`` desk item
(``k-…``, one per run however many deliveries failed), which the founder marks read with
``companyd approve``. Nothing is lost silently (docs/alerts.md, "Results").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from companyd.admin import ResultDelivery
from companyd.clock import Clock
from companyd.desk import Desk, ItemKind, ProposalError, Proposals
from companyd.events import FounderDecided, OperatorAction
from companyd.runs import Journal

__all__ = ["KEPT_DAYS", "ResultRecords"]

#: How long a kept result waits in the inbox before it expires unread, at least (days); the
#: run journal's retention, when longer, is used instead.
KEPT_DAYS = 30


class ResultRecords:
    """The daemon's :class:`~companyd.alerts._deliver.DeliveryLog`.

    Args:
        journal: the run journal (each run's record).
        desk: the founder's desk (the inbox), or None (a one-off process: no inbox).
        clock: when a delivery is recorded.
        keep_days: how long a kept result waits (read at each keep: reloads change it).
    """

    def __init__(
        self,
        journal: Journal,
        desk: Desk | None,
        clock: Clock,
        keep_days: Callable[[], float],
        proposals: Proposals | None = None,
    ) -> None:
        self._journal = journal
        self._desk = desk
        self._clock = clock
        self._keep_days = keep_days
        self._proposals = proposals

    async def record(self, run_id: str, entry: ResultDelivery) -> None:
        """Add ``entry`` to run ``run_id``'s record (nothing if the run was pruned)."""
        await self._journal.record_delivery(run_id, entry, self._clock.time())

    async def records(self, run_ids: Sequence[str]) -> Mapping[str, Sequence[ResultDelivery]]:
        """The delivery records of ``run_ids``, from the run journal."""
        return await self._journal.deliveries(run_ids)

    async def decided(self, item_ids: Sequence[str]) -> list[FounderDecided]:
        """The items among ``item_ids`` the founder decided (or that expired or were
        withdrawn), as their ``founder_decided`` events, stamped when decided (the pager's
        :class:`~companyd.alerts._desk_messages.DeskDecisions`).
        """
        if self._desk is None:
            return []
        out: list[FounderDecided] = []
        for item_id in item_ids:
            item = await self._desk.get(item_id)
            if item is None or item.pending:
                continue
            at = item.decided if item.decided is not None else self._clock.time()
            out.append(item.decided_event(at))
        return out

    async def proposals_decided(self, proposal_ids: Sequence[str]) -> list[OperatorAction]:
        """The proposals among ``proposal_ids`` no longer pending, as the operator actions
        that decided them, stamped when decided (the pager's start-up read).
        """
        if self._proposals is None:
            return []
        out: list[OperatorAction] = []
        for pid in proposal_ids:
            try:
                p, _, _ = await self._proposals.get(pid)
            except ProposalError:  # pruned, or never here: nothing to say on its message
                continue
            if p.status == "pending":
                continue
            said = f"{p.status} {p.id}" + (f" by {p.decided_by}" if p.decided_by else "")
            out.append(
                OperatorAction(
                    source=p.via or "cli",
                    ts=p.decided if p.decided is not None else self._clock.time(),
                    action="reject" if p.status == "rejected" else "approve",
                    target=p.id,
                    via=p.via or "cli",
                    ok=True,
                    message=said + (f": {p.note}" if p.note else ""),
                )
            )
        return out

    async def keep(self, data: Mapping[str, Any], reason: str) -> str | None:
        """Keep the result ``data`` (a ``routine_result``'s) in the inbox; its item id."""
        if self._desk is None:
            return None
        run_id = str(data.get("run_id") or "")
        item = await self._desk.request(
            key=f"kept/{run_id}",
            kind=ItemKind.KEPT,
            agent=str(data.get("agent") or "?"),
            run_id=run_id or None,
            routine=str(data["routine"]) if data.get("routine") else None,
            payload={
                "answer": str(data.get("answer") or ""),
                "task": str(data.get("task") or ""),
                "cost_usd": data.get("cost_usd"),
                "reason": reason,
            },
            timeout=max(float(KEPT_DAYS), self._keep_days()) * 86_400.0,
        )
        return item.id
