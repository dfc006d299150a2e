"""An operator's action through the CLI or Telegram, recorded as an ``operator_action``
event — as the dashboard records its own (``companyd.dashboard._actions``), so the event
stream says who did what, where, whichever front end it came through.

``via`` is where the action was made: ``cli`` (the control socket), ``telegram`` (a
command or a button) or ``dashboard`` (recorded by the dashboard itself, so not here).
An empty ``via`` is the daemon calling its own operation (a reload after an applied
proposal, SIGHUP): no operator action, no record.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from companyd._secrets import redact
from companyd.admin import AdminError, AdminStopping, RunEnded
from companyd.events import EventBus, OperatorAction

__all__ = ["publish_action", "recorded"]

_T = TypeVar("_T")

#: The ``via`` whose actions are recorded elsewhere (the dashboard's ``perform``) or not
#: at all (the daemon's own calls).
_NOT_HERE = frozenset({"dashboard", ""})


async def recorded(bus: EventBus, action: str, target: str, via: str, work: Awaitable[_T]) -> _T:
    """``work``'s result, recorded as an ``operator_action`` (done, or refused with the
    :class:`~companyd.admin.AdminError`'s message, which is raised again; an
    :class:`~companyd.admin.AdminStopping` is done if its ``done`` says so). A result with
    ``applied=False`` (a rejected reload) is recorded as not done.
    """
    try:
        result = await work
    except AdminStopping as exc:
        # the stop ended the caller's wait, not the work: done (and going on) unless the
        # stop came first
        publish_action(bus, action, target, via, ok=exc.done, message=str(exc))
        raise
    except AdminError as exc:
        publish_action(bus, action, target, via, ok=False, message=str(exc))
        raise
    status, run_id = getattr(result, "status", None), getattr(result, "run_id", None)
    reason = getattr(result, "reason", None)
    ok = getattr(result, "applied", True) is not False
    refused = isinstance(result, RunEnded) and not run_id
    if refused:
        # a run's outcome (``ask``) with no run: refused before anything ran (a paused
        # agent, a budget) — not done, and why
        ok = False
    said = "done"
    if status and run_id:
        said = f"{status} ({run_id})"  # a run's outcome (``ask``)
    elif refused:
        said = f"{status}: {reason}" if reason else str(status)
    message = getattr(result, "message", "") or f"{action} {target}: {said}"
    publish_action(bus, action, target, via, ok=ok, message=message)
    return result


def publish_action(
    bus: EventBus, action: str, target: str, via: str, *, ok: bool, message: str
) -> None:
    """Publish one ``operator_action`` (nothing for ``via`` ``dashboard`` or empty)."""
    if via in _NOT_HERE:
        return
    bus.publish(
        OperatorAction(
            source=via,
            action=action,
            target=target,
            via=via,
            ok=ok,
            message=redact(message),
        )
    )
