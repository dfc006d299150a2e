"""The founder's actions from the dashboard: :func:`perform`.

Every action (pause, resume, ask, approve, reject, answer, raise budget, run now, retry, …)
is one :class:`~companyd.admin.Admin` operation — the same the control socket and Telegram
call — and is recorded in the event stream as an ``operator_action`` event with
``via="dashboard"``: the operation, its target, whether it was done and what the founder
was told. A refusal (:class:`~companyd.admin.AdminError`) is not an exception for the page:
:func:`perform` returns it as :class:`Outcome` with ``ok=False`` and the operator's message.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from companyd._secrets import redact
from companyd.admin import AdminError
from companyd.dashboard._context import ctx_of
from companyd.events import OperatorAction

__all__ = ["VIA", "Outcome", "perform"]

#: The ``via`` of the dashboard's actions.
VIA = "dashboard"


@dataclass(frozen=True)
class Outcome:
    """What an action came to: ``ok``, the ``message`` for the founder, and the operation's
    ``result`` (one of :mod:`companyd.admin._results`; None when refused).
    """

    ok: bool
    message: str
    result: Any = None


async def perform(request: Request, operation: str, target: str, **arguments: Any) -> Outcome:
    """Call ``admin.<operation>(**arguments)`` and record it "via dashboard".

    Args:
        request: the request acting (its application's context has the admin and the bus).
        operation: an :class:`~companyd.admin.Admin` method name (``pause``, ``approve``, …).
        target: what it acts on, for the record (an agent, item id or routine).
        arguments: the operation's keyword arguments.

    Returns:
        The outcome; an :class:`~companyd.admin.AdminError` becomes ``ok=False`` with its
        message.
    """
    ctx = ctx_of(request)
    method = getattr(ctx.admin, operation)
    if "via" in inspect.signature(method).parameters:
        # the operation records actions made elsewhere; this one is recorded below
        arguments.setdefault("via", VIA)
    try:
        result = await method(**arguments)
    except AdminError as exc:
        outcome = Outcome(ok=False, message=redact(str(exc)))
    else:
        outcome = Outcome(
            ok=True, message=redact(_message(operation, target, result)), result=result
        )
    ctx.bus.publish(
        OperatorAction(
            source="dashboard",
            action=operation,
            target=target,
            via=VIA,
            ok=outcome.ok,
            message=outcome.message,
        )
    )
    return outcome


def _message(operation: str, target: str, result: Any) -> str:
    message = getattr(result, "message", None)
    if isinstance(message, str) and message:
        return message
    if getattr(result, "applied", None) is True:  # a reload: what it changed
        keys = ("added", "removed", "changed")
        moved = [f"{k} {', '.join(getattr(result, k))}" for k in keys if getattr(result, k, None)]
        unchanged = getattr(result, "unchanged", 0)
        return (
            "company.yaml reloaded: "
            + ("; ".join(moved) or "no agent changed")
            + (f"; {unchanged} unchanged" if unchanged else "")
        )
    if dataclasses.is_dataclass(result) and hasattr(result, "answer"):
        return f"{target} answered"
    return f"{operation} {target}: done"
