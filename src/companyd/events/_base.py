"""What an event is: the :class:`Event` base class every event kind derives from.

An event kind is a frozen dataclass deriving from :class:`Event`. The class carries the
kind's name (``KIND``) and its default severity (the default of its ``severity`` field) as
class-level data; its other fields are the kind-specific facts, typed. Publishers construct
the class (``bus.publish(ChildExited(source=..., child=..., ...))``); consumers ``match`` on
it. Defining the class registers the kind (:data:`EVENT_TYPES`); nothing else lists kinds.

A kind is declared without a decorator: deriving from :class:`Event` makes it a frozen,
keyword-only dataclass (:class:`companyd._frozen.Frozen`: one ``__init__``, ``__eq__``,
``__hash__``, ``__repr__`` and frozen ``__setattr__`` shared by every kind instead of six
compiled per class — defining the ~70 kinds cost ~35 ms of every process's start, issue 31).

The JSON view is unchanged from the untyped events this replaced: :attr:`Event.data` is the
kind's fields as a dict (in declaration order, leaving out the fields declared with
:func:`optional` while they are None) and :meth:`Event.to_dict` is
``{"kind", "ts", "source", "severity", "data"}``. Fields hold JSON values only (str, int,
float, bool, None, lists and dicts of them), so every event can be logged, stored and sent
as it is.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from enum import StrEnum
from typing import Any, ClassVar, Self

from companyd._frozen import Frozen

__all__ = ["EVENT_TYPES", "UNSTAMPED", "Event", "Other", "Severity", "optional"]


class Severity(StrEnum):
    """How urgently a human should hear about an event."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """The severity's order, DEBUG 0 to CRITICAL 3: compare ranks, not names."""
        return _RANK[self]


_RANK = {Severity.DEBUG: 0, Severity.INFO: 1, Severity.WARNING: 2, Severity.CRITICAL: 3}

#: The ``ts`` of an event not yet published: the bus stamps it with its clock's time.
UNSTAMPED = math.nan

#: Every event kind, by name: filled by defining the classes (see :class:`Event`).
EVENT_TYPES: dict[str, type[Event]] = {}

_BASE_FIELDS = frozenset({"source", "ts", "severity"})
_OMIT_NONE = "omit_none"


def optional() -> Any:
    """A field that is left out of :attr:`Event.data` while None (a fact only some events
    of the kind carry, e.g. ``resumed_at_step`` of a resumed run).
    """
    return field(default=None, metadata={_OMIT_NONE: True})


class Event(Frozen):
    """Something that happened, told once.

    Attributes:
        source: who tells it: a supervisor path such as ``"companyd/agents/finance"``, or a
            service name such as ``"spend"``.
        ts: wall-clock time (epoch seconds); :data:`UNSTAMPED` until the bus publishes it
            (the bus stamps it with its clock, the only write to an event), unless the
            publisher set it.
        severity: urgency; defaults to the kind's (alert routing may override it per kind).

    Subclasses set ``KIND`` and may redeclare ``severity`` with their default.
    """

    #: The kind's name, e.g. ``"restart"``; ``""`` for an abstract base of kinds.
    KIND: ClassVar[str] = ""

    source: str
    ts: float = UNSTAMPED
    severity: Severity = Severity.INFO

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("KIND")
        if kind:
            if kind in EVENT_TYPES:
                raise TypeError(f"event kind {kind!r} is defined twice")
            EVENT_TYPES[kind] = cls

    @property
    def kind(self) -> str:
        """What happened, e.g. ``"restart"`` (the class's ``KIND``)."""
        return self.KIND

    @property
    def data(self) -> dict[str, Any]:
        """The kind-specific facts as JSON values (a new dict)."""
        out: dict[str, Any] = {}
        for name, omit_none in _data_fields(type(self)):
            value = getattr(self, name)
            if value is None and omit_none:
                continue
            out[name] = value
        return out

    @property
    def stamped(self) -> bool:
        """Whether ``ts`` is set."""
        return not math.isnan(self.ts)

    def at(self, ts: float) -> Self:
        """This event with time ``ts``."""
        return dataclasses.replace(self, ts=ts)

    def to_dict(self) -> dict[str, Any]:
        """The JSON view: ``kind``, ``ts``, ``source``, ``severity`` and ``data``."""
        return {
            "kind": self.kind,
            "ts": self.ts,
            "source": self.source,
            "severity": str(self.severity),
            "data": self.data,
        }


#: Per class: its data fields and whether each is left out while None (``data`` is read on
#: every publish by the log and metrics listeners; ``dataclasses.fields`` is slow).
_FIELDS: dict[type[Event], tuple[tuple[str, bool], ...]] = {}


def _data_fields(cls: type[Event]) -> tuple[tuple[str, bool], ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(
            (f.name, bool(f.metadata.get(_OMIT_NONE)))
            for f in dataclasses.fields(cls)
            if f.name not in _BASE_FIELDS
        )
    return names


class Other(Event):
    """An event of a kind no class describes (or a stored one that no longer fits its
    class): its name and its data as they are. Severity defaults to INFO.
    """

    name: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The kind as published (no class of this name exists, or its data no longer fits)."""
        return self.name

    @property
    def data(self) -> dict[str, Any]:
        """A copy of the data as published: a consumer's changes never reach other subscribers."""
        return dict(self.fields)
