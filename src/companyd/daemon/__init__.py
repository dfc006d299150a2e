"""The process and its supervision tree: supervisor, company tree, `companyd run`."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.daemon._control import resolve_group
    from companyd.daemon._control_client import ControlClient, claimed_daemon, find_daemon
    from companyd.daemon._demo import crash_test, show_tree
    from companyd.daemon._launch import make_backend, remember_early_sighup
    from companyd.daemon._layout import SYSTEMD_LAYOUT, instance_name_problem
    from companyd.daemon._lock import CompanyLock, StateLock
    from companyd.daemon._logs import add_logging_arguments, setup_logging
    from companyd.daemon._main import Daemon
    from companyd.daemon._protocol import ControlTimeout, RequestFailed, socket_path


__all__ = [
    "SYSTEMD_LAYOUT",
    "CompanyLock",
    "ControlClient",
    "ControlTimeout",
    "Daemon",
    "RequestFailed",
    "StateLock",
    "add_logging_arguments",
    "claimed_daemon",
    "crash_test",
    "find_daemon",
    "instance_name_problem",
    "make_backend",
    "remember_early_sighup",
    "resolve_group",
    "setup_logging",
    "show_tree",
    "socket_path",
]


_HOMES: dict[str, str] = {
    "CompanyLock": "companyd.daemon._lock",
    "ControlClient": "companyd.daemon._control_client",
    "ControlTimeout": "companyd.daemon._protocol",
    "Daemon": "companyd.daemon._main",
    "RequestFailed": "companyd.daemon._protocol",
    "SYSTEMD_LAYOUT": "companyd.daemon._layout",
    "StateLock": "companyd.daemon._lock",
    "add_logging_arguments": "companyd.daemon._logs",
    "claimed_daemon": "companyd.daemon._control_client",
    "crash_test": "companyd.daemon._demo",
    "find_daemon": "companyd.daemon._control_client",
    "instance_name_problem": "companyd.daemon._layout",
    "make_backend": "companyd.daemon._launch",
    "remember_early_sighup": "companyd.daemon._launch",
    "resolve_group": "companyd.daemon._control",
    "setup_logging": "companyd.daemon._logs",
    "show_tree": "companyd.daemon._demo",
    "socket_path": "companyd.daemon._protocol",
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
