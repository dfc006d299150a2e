"""The catalog of event kinds, derived from the classes: :data:`KINDS` and :func:`event_from`.

Importing this module imports every module of kinds, so :data:`KINDS` (kind → default
severity, which company.yaml's ``alerts.routes`` may override per kind) is complete. It is
computed from the classes; there is no second list to keep in step.

:func:`event_from` turns a kind name and its JSON data back into the typed event — for
stored events and rows, for tests, and for :meth:`EventBus.emit` — and falls back to
:class:`~companyd.events._base.Other` for a kind no class describes or data that does not fit
its class (a row written by another version), so nothing stored is ever lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from companyd.events import _agents as agents
from companyd.events import _daemon as daemon
from companyd.events import _memory as memory
from companyd.events import _money as money
from companyd.events import _pager as pager
from companyd.events import _routines as routines
from companyd.events import _supervision as supervision
from companyd.events import _tools as tools
from companyd.events._base import EVENT_TYPES, UNSTAMPED, Event, Other, Severity

__all__ = ["KINDS", "MODULES", "event_from", "event_from_dict"]

#: The modules of kinds, by concern (docs/events.md has one section per module).
MODULES = (supervision, daemon, agents, money, routines, memory, pager, tools)

#: Known event kinds and their default severity. Other kinds default to INFO.
KINDS: Mapping[str, Severity] = MappingProxyType(
    {kind: cls.severity for kind, cls in EVENT_TYPES.items()}
)


def event_from(
    kind: str,
    *,
    source: str,
    ts: float = UNSTAMPED,
    severity: Severity | str | None = None,
    data: Mapping[str, Any] | None = None,
) -> Event:
    """The event of ``kind`` with ``data`` as its fields: its class when the data fits it
    (every field it needs, none it does not know), else :class:`Other` (with the kind's
    default severity if it has a class).
    """
    fields = dict(data or {})
    cls = EVENT_TYPES.get(kind)
    if severity is not None:
        sev = {"severity": Severity(severity)}
    else:  # the kind's default, also when its data does not fit the class
        sev = {"severity": cls.severity} if cls is not None else {}
    if cls is not None:
        try:
            return cls(source=source, ts=ts, **sev, **fields)
        except TypeError:  # a missing or unknown field: keep it as it is
            pass
    return Other(name=kind, source=source, ts=ts, **sev, fields=fields)


def event_from_dict(d: Mapping[str, Any]) -> Event:
    """The inverse of :meth:`Event.to_dict <companyd.events._base.Event.to_dict>`."""
    return event_from(
        str(d["kind"]),
        source=str(d.get("source", "")),
        ts=float(d.get("ts", UNSTAMPED)),
        severity=d.get("severity"),
        data=d.get("data") or {},
    )
