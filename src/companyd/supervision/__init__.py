"""The OTP supervision library: child specs, child contexts, the supervisor.

Layer 1: imports only the foundation modules (errors, clock, events, _aio), never the
application. See docs/supervision.md for the contract and docs/architecture.md for the layers.

Modules: :mod:`~companyd.supervision._child` (the contract a child follows, exit reasons,
``IGNORE``), :mod:`~companyd.supervision._spec` (child specs, supervisor flags, backoff, call
results), :mod:`~companyd.supervision._errors` (what a supervisor raises) and
:mod:`~companyd.supervision._supervisor` (the supervisor process). ``Supervisor`` composes
mixins over the state in ``_state``: ``_startup`` (init, starting a child), ``_restart``
(restart types, strategies, intensity, backoff, auto_shutdown), ``_shutdown`` (the stop
protocol), ``_dynamic`` (the admin calls) and ``_views`` (the read-only calls). Import the
public names from here.
"""

from companyd.supervision._child import (
    IGNORE,
    ChildContext,
    ChildFn,
    ExitReason,
    Shutdown,
    StandaloneContext,
)
from companyd.supervision._errors import (
    AlreadyPresent,
    AlreadyStarted,
    ChildNotFound,
    ChildRestarting,
    ChildRunning,
    InvalidSpec,
    NotSupported,
    StartFailed,
    SupervisorError,
    SupervisorGaveUp,
    SupervisorNotRunning,
    SupervisorStartError,
)
from companyd.supervision._spec import (
    BRUTAL_KILL,
    DEFAULT_KILL_GRACE,
    DEFAULT_WORKER_SHUTDOWN,
    INFINITY,
    AutoShutdown,
    Backoff,
    ChildCounts,
    ChildInfo,
    ChildSpec,
    ChildState,
    ChildType,
    InitResult,
    Restart,
    ShutdownSpec,
    Started,
    Strategy,
    SupervisorFlags,
)
from companyd.supervision._supervisor import Supervisor

__all__ = [
    "BRUTAL_KILL",
    "DEFAULT_KILL_GRACE",
    "DEFAULT_WORKER_SHUTDOWN",
    "IGNORE",
    "INFINITY",
    "AlreadyPresent",
    "AlreadyStarted",
    "AutoShutdown",
    "Backoff",
    "ChildContext",
    "ChildCounts",
    "ChildFn",
    "ChildInfo",
    "ChildNotFound",
    "ChildRestarting",
    "ChildRunning",
    "ChildSpec",
    "ChildState",
    "ChildType",
    "ExitReason",
    "InitResult",
    "InvalidSpec",
    "NotSupported",
    "Restart",
    "Shutdown",
    "ShutdownSpec",
    "StandaloneContext",
    "StartFailed",
    "Started",
    "Strategy",
    "Supervisor",
    "SupervisorError",
    "SupervisorFlags",
    "SupervisorGaveUp",
    "SupervisorNotRunning",
    "SupervisorStartError",
]
