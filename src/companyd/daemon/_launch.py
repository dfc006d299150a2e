"""What ``companyd run`` does before it builds the daemon, without importing the daemon: the
model backend (:func:`make_backend`) and a SIGHUP that comes before the event loop listens
(:func:`remember_early_sighup`, read once by :meth:`Daemon.main
<companyd.daemon._main.Daemon.main>` through :func:`take_early_sighup`).

A ``run`` that refuses to start (exit 78: company.yaml is invalid, no API key; 75: another
daemon runs the company) gets this far and no further: it must not pay for importing the
supervision tree and every service (tests/test_cli_imports.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from companyd.clock import Clock

if TYPE_CHECKING:
    from companyd.config import CompanyConfig
    from companyd.llm import ModelBackend

__all__ = ["make_backend", "remember_early_sighup", "take_early_sighup"]

#: Set by a SIGHUP that arrives before the daemon's event loop handles the signal.
_EARLY_SIGHUP: list[bool] = []


def make_backend(
    config: CompanyConfig,
    *,
    offline: bool,
    redact: Callable[[str], Any],
    clock: Clock | None = None,
) -> ModelBackend:
    """The model backend of ``companyd run`` and ``companyd ask``: the offline model, or
    Claude with its API key registered with the log redactor (``redact``).

    Raises:
        ModelUnavailable: Claude is configured but cannot be used (no API key, …).
    """
    if offline:
        from companyd.llm import OfflineModel

        return OfflineModel()
    # Imported here for start-up time: anthropic takes a noticeable part of a second to
    # import, and `companyd --help` (which loads this module) never needs it.
    from companyd.llm import ClaudeBackend, resolve_api_key

    redact(resolve_api_key(config.spec.anthropic))
    return ClaudeBackend.from_config(config.spec.anthropic, clock=clock)


def remember_early_sighup(signum: int, frame: Any) -> None:
    """A SIGHUP handler for before the event loop takes SIGHUP over (``companyd run``):
    the daemon reloads once it is up.
    """
    _EARLY_SIGHUP[:] = [True]


def take_early_sighup() -> bool:
    """Whether a SIGHUP came before the event loop listened (then forgotten: one reload)."""
    came = bool(_EARLY_SIGHUP)
    _EARLY_SIGHUP.clear()
    return came
