"""What a supervisor raises: :class:`SupervisorError` and one subclass per OTP error atom.

Admin calls answer OTP's ``{error, Term}`` tuples with these exceptions; ``.code`` is the
atom (``not_found``, ``running``, ``restarting``, ``already_present``, …) so a caller or a
control-socket client can tell them apart without matching messages. Every message names the
value at fault and what to do instead (docs/supervision.md lists them).
"""

from __future__ import annotations

from companyd.errors import CompanydError
from companyd.supervision._child import ExitReason, Shutdown
from companyd.supervision._text import secs

__all__ = [
    "AlreadyPresent",
    "AlreadyStarted",
    "ChildNotFound",
    "ChildRestarting",
    "ChildRunning",
    "InvalidSpec",
    "NotSupported",
    "StartFailed",
    "SupervisorError",
    "SupervisorGaveUp",
    "SupervisorNotRunning",
    "SupervisorStartError",
]


class SupervisorError(CompanydError):
    """A supervisor refused a request. ``code`` is OTP's error atom (``not_found``, …)."""

    code = "error"


class InvalidSpec(SupervisorError, ValueError):
    """A child spec or supervisor flag is invalid; the message names the valid values."""

    code = "invalid_spec"


class SupervisorNotRunning(SupervisorError):
    """The supervisor is not running (never started, stopping or stopped)."""

    code = "noproc"


class ChildNotFound(SupervisorError):
    """No child with that id."""

    code = "not_found"


class ChildRunning(SupervisorError):
    """The operation needs the child stopped (``restart_child``, ``delete_child``)."""

    code = "running"


class ChildRestarting(SupervisorError):
    """The child is in its restart loop; terminate it first."""

    code = "restarting"


class AlreadyPresent(SupervisorError):
    """``start_child`` with an id that exists but is not running."""

    code = "already_present"


class AlreadyStarted(SupervisorError):
    """``start_child`` with an id that is running."""

    code = "already_started"


class NotSupported(SupervisorError):
    """The call does not apply to this supervisor's strategy (OTP ``simple_one_for_one``)."""

    code = "simple_one_for_one"


class StartFailed(SupervisorError):
    """A child failed to start (from ``start_child``, ``restart_child``, ``start_instance``).

    Attributes:
        child: the child id.
        reason: why it failed.
    """

    code = "start_failed"

    def __init__(self, message: str, *, child: str, reason: ExitReason) -> None:
        super().__init__(message)
        self.child = child
        self.reason = reason


class SupervisorStartError(SupervisorError):
    """A supervisor failed to start: its init failed or one of its children failed to start.

    OTP: ``{error, {shutdown, {failed_to_start_child, Id, Reason}}}``. The children already
    started were stopped in reverse order; no restart was attempted.

    Attributes:
        path: the supervisor's path.
        child: the id of the child that failed, or None when init itself failed.
        reason: why.
    """

    code = "failed_to_start_child"

    def __init__(self, message: str, *, path: str, child: str | None, reason: ExitReason) -> None:
        super().__init__(message)
        self.path = path
        self.child = child
        self.reason = reason


class SupervisorGaveUp(Shutdown, SupervisorError):
    """A supervisor reached its maximum restart intensity and stopped.

    It is a :class:`~companyd.supervision._child.Shutdown` (exit reason
    ``{shutdown, reached_max_restart_intensity}``, normal class, as in OTP), so the parent
    applies the sub-supervisor's restart type. The root raises it from ``Supervisor.wait``;
    ``exit_code`` is what the daemon exits with so that systemd restarts it.
    """

    code = "reached_max_restart_intensity"
    #: docs/daemon.md: 1 = the root supervisor gave up (systemd restarts the daemon).
    exit_code = 1

    def __init__(
        self,
        *,
        path: str,
        child: str,
        restarts: int,
        max_restarts: int,
        max_seconds: float,
        last_exit: str,
    ) -> None:
        Shutdown.__init__(self, "reached_max_restart_intensity")
        self.path = path
        self.child = child
        self.restarts = restarts
        self.max_restarts = max_restarts
        self.max_seconds = max_seconds
        self.last_exit = last_exit

    def __str__(self) -> str:
        return (
            f"supervisor {self.path!r} gave up: {self.restarts} restarts within "
            f"{secs(self.max_seconds)} exceed max_restarts={self.max_restarts} "
            f"(last: child {self.child!r} exited {self.last_exit}); its children were stopped"
        )
