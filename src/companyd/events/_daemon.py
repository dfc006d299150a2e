"""Event kinds of the daemon's lifecycle (:mod:`companyd.daemon`, source ``daemon`` or
``companyd``) and of its state disk (:class:`companyd._fs.DiskAlarm`).
"""

from __future__ import annotations

from typing import Any

from companyd.events._base import Event, Severity, optional

__all__ = [
    "ConfigRejected",
    "DaemonReloaded",
    "DaemonStarted",
    "DaemonStopping",
    "LeadershipTaken",
    "LoopLag",
    "OperatorAction",
    "StateDirTightened",
    "StateDiskFull",
    "StateDiskRecovered",
]


class DaemonStarted(Event):
    """companyd is up (``agents`` and ``routines`` are counts). ``planned_stop``: the reason
    of the deliberate stop just before this start (SIGTERM, ``systemctl restart``), from the
    scheduler's clean-stop marker; None after a crash, a kill or at a first start.
    """

    KIND = "daemon_started"
    pid: int
    version: str
    agents: int
    routines: int
    offline: bool
    company: str
    planned_stop: str | None = optional()
    #: company.yaml's warnings as ``validate`` prints them (``file:line:col: warning: …``),
    #: absent when it has none: the start's message tells the founder, not only the journal
    warnings: list[str] | None = optional()


class DaemonStopping(Event):
    """companyd is stopping (``reason``: ``signal``, ``operator``, ``fatal: …``)."""

    KIND = "daemon_stopping"
    pid: int
    reason: str


class DaemonReloaded(Event):
    """A reloaded company.yaml was applied: agent slugs started, stopped, restarted, the
    count unchanged, the scheduler's summary of its routines, and the settings of the file
    that only a restart applies (``restart_required``; left out when none).
    """

    KIND = "daemon_reloaded"
    started: list[str]
    stopped: list[str]
    restarted: list[str]
    unchanged: int
    routines: dict[str, list[str]]
    failures: list[Any]
    restart_required: list[str] | None = optional()
    #: the reloaded file's warnings (``file:line:col: warning: …``), absent when none
    warnings: list[str] | None = optional()


class LeadershipTaken(Event):
    """This daemon took over the company from another daemon on the shared database
    (docs/ha.md): ``node`` and ``host`` are this daemon's, ``epoch`` its fencing token,
    ``previous`` the leader it replaced (``node (host, pid N)``).
    """

    KIND = "leadership_taken"
    severity: Severity = Severity.WARNING
    node: str
    host: str
    epoch: int
    previous: str


class StateDirTightened(Event):
    """The state directory was open to the group or others (``was``, e.g. ``"0755"``) and
    was set to 0700.
    """

    KIND = "state_dir_tightened"
    severity: Severity = Severity.WARNING
    path: str
    was: str


class StateDiskFull(Event):
    """Writes of ``what`` to the state disk fail (one per outage)."""

    KIND = "state_disk_full"
    severity: Severity = Severity.CRITICAL
    what: str
    path: str
    error: str
    message: str


class StateDiskRecovered(Event):
    """State disk writes succeed again; ``failures`` failed meanwhile."""

    KIND = "state_disk_recovered"
    what: str
    failures: int
    message: str


class ConfigRejected(Event):
    """A changed company.yaml was rejected: its first ``errors`` and their ``count``."""

    KIND = "config_rejected"
    severity: Severity = Severity.WARNING
    file: str
    errors: list[str]
    count: int


class LoopLag(Event):
    """The event loop ran a periodic callback ``lag_s`` late (one per excursion)."""

    KIND = "loop_lag"
    severity: Severity = Severity.WARNING
    lag_s: float
    threshold_s: float


class OperatorAction(Event):
    """The founder acted through a front end (``via``: ``dashboard``, ``cli`` or
    ``telegram``, where the action was made) — a decision (``approve``, ``reject``,
    ``answer``) or any operation that changes the company's state (``pause``, ``resume``,
    ``resume_all``, ``raise_budget``, ``run_job``, ``resume_job``, ``retry``, ``revert``,
    ``reload``, ``tools_approve``, ``ask``): the Admin operation ``action`` on ``target``, whether
    it was done (``ok``) and what the operator was told (``message``).
    """

    KIND = "operator_action"
    action: str
    target: str
    via: str
    ok: bool
    message: str
