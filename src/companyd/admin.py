"""What an operator can ask of a running daemon.

The same operations are reachable from the CLI (through the control socket) and from the
operator's phone (Telegram commands and buttons). Both front ends call an :class:`Admin`;
the daemon implements it once. Every result is a JSON-serialisable dict, so front ends only
format. A refused request raises :class:`AdminError` whose message is shown to the operator
as it is (it quotes the value and names the valid choices).
"""

from __future__ import annotations

from typing import Any, Protocol

from companyd.errors import CompanydError

__all__ = ["Admin", "AdminError"]

Result = dict[str, Any]


class AdminError(CompanydError):
    """The request cannot be done as asked (unknown agent, no such proposal, …)."""


class Admin(Protocol):
    """Operator operations on the running company."""

    async def status(self) -> Result:
        """Supervision tree (states, restart counts, uptime), runs in flight, spend today and
        this month against budget, next routines.
        """
        ...

    async def spend(self, by: str = "agent", period: str = "today") -> Result:
        """Settled spend grouped ``by`` agent | model | routine | day over ``period``
        (``today``, ``month`` or ``YYYY-MM-DD..YYYY-MM-DD``).
        """
        ...

    async def budget(self) -> Result:
        """Each budget: limit, used, reserved, remaining, when it resets."""
        ...

    async def raise_budget(self, agent: str | None, usd: float) -> Result:
        """Raise today's budget of ``agent`` (or the company when None) by ``usd``, once."""
        ...

    async def jobs(self) -> Result:
        """Each routine: schedule, next fire, last outcome, 7-day success rate."""
        ...

    async def job_history(self, routine: str, limit: int = 20) -> Result:
        """The latest fires of one routine with outcome, reason, cost and run id."""
        ...

    async def run_job(self, routine: str) -> Result:
        """Fire a routine now."""
        ...

    async def pause(self, agent: str) -> Result:
        """Stop an agent from starting new runs (the current run finishes)."""
        ...

    async def resume(self, agent: str) -> Result:
        """Let a paused agent (operator or budget pause) run again."""
        ...

    async def ask(self, agent: str, question: str, timeout: float = 300.0) -> Result:
        """Run a one-off task; the result has answer, models, tokens and cost."""
        ...

    async def runs(
        self, agent: str | None = None, status: str | None = None, limit: int = 20
    ) -> Result:
        """Recent runs, newest first."""
        ...

    async def tasks(self, quarantined: bool = False) -> Result:
        """Tasks waiting, running or (with ``quarantined``) quarantined."""
        ...

    async def retry(self, task_id: str) -> Result:
        """Release a quarantined task and run it again."""
        ...

    async def proposals(self) -> Result:
        """Improver proposals awaiting approval (and recent decisions)."""
        ...

    async def approve(self, proposal_id: str) -> Result:
        """Apply a proposal (then reload the config)."""
        ...

    async def reject(self, proposal_id: str) -> Result:
        """Discard a proposal."""
        ...

    async def revert(self, proposal_id: str) -> Result:
        """Undo an applied proposal (then reload the config)."""
        ...

    async def debug(self, action: str, target: str | None = None, seconds: float = 0.0) -> Result:
        """Fault injection for tests and the chaos benchmark: ``crash`` an agent (its next
        step raises), ``block`` the event loop for ``seconds`` (a synchronous sleep, as a
        careless blocking call would). Refused unless the daemon runs with
        ``COMPANYD_DEBUG=1`` in its environment.
        """
        ...

    async def reload(self) -> Result:
        """Re-read company.yaml and apply the difference (or report why it was rejected)."""
        ...
