"""The operator contract's refusals, apart from the results: the control client and every
CLI command that talks to the daemon raise them without importing pydantic (which the
results' annotations need).
"""

from __future__ import annotations

from companyd.errors import CompanydError

__all__ = ["AdminError", "AdminStopping"]


class AdminError(CompanydError):
    """The request cannot be done as asked (unknown agent, no such proposal, …)."""


class AdminStopping(AdminError):
    """The daemon began to stop before the work asked for ended: it is journaled and goes
    on after the restart (a caller that kept what it needs, e.g. the task id, picks it up
    then). Answered ``stopping`` on the control socket (the CLI's exit 75).

    ``done``: whether what was asked for was done (a task submitted, a routine fired) —
    the operator's ``operator_action`` record says so; False when the stop came first and
    nothing was started.
    """

    def __init__(self, message: str, *, done: bool = True) -> None:
        super().__init__(message)
        self.done = done
