"""What an event is: the :class:`Event` base class every event kind derives from.

An event kind is a frozen dataclass deriving from :class:`Event`. The class carries the
kind's name (``KIND``) and its default severity (the default of its ``severity`` field) as
class-level data; its other fields are the kind-specific facts, typed. Publishers construct
the class (``bus.publish(ChildExited(source=..., child=..., ...))``); consumers ``match`` on
it. Defining the class registers the kind (:data:`EVENT_TYPES`); nothing else lists kinds.

A kind is declared without a decorator: deriving from :class:`Event` makes it a dataclass
(``typing.dataclass_transform`` tells mypy: keyword-only, frozen). Every kind shares one
``__init__``, ``__eq__``, ``__hash__``, ``__repr__``, ``__setattr__`` and ``__delattr__``,
written once here, instead of the six that ``@dataclass(frozen=True)`` compiles for each
class — defining the ~70 kinds cost ~40 ms of every process's start (the daemon's and every
CLI command's; issue 31), now ~8 ms. They behave as the generated ones do: keyword-only
arguments with the same ``TypeError`` for a missing or unknown one (``event_from`` relies on
it), equality and hash over the fields in order between instances of the same class, the
dataclass ``repr``, ``FrozenInstanceError`` on assignment; ``dataclasses.fields``,
``dataclasses.replace`` and ``match`` work as on any dataclass (the classes are processed by
``dataclasses.dataclass`` itself, with the generated methods turned off). One difference:
``__dataclass_params__.frozen`` reads False (frozen is enforced by the shared
``__setattr__``), since a dataclass declared frozen makes ``dataclasses`` compile its own.

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
import reprlib
from dataclasses import FrozenInstanceError, field
from enum import StrEnum
from operator import attrgetter
from typing import Any, ClassVar, NoReturn, Self, dataclass_transform

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


class _Plan:
    """What the shared methods of one event class need, computed once per class."""

    __slots__ = ("defaults", "getter", "names")

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        #: the fields in declaration order (the base's first), as ``__repr__`` shows them
        self.names = tuple(f.name for f in fields)
        #: per field with a default: the value, or the factory wrapped in a :class:`_Make`
        self.defaults: dict[str, Any] = {}
        for f in fields:
            if f.default is not dataclasses.MISSING:
                self.defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                self.defaults[f.name] = _Make(f.default_factory)
        # the fields as one tuple, in order: what the generated __eq__ and __hash__ compare
        get = attrgetter(*self.names)
        self.getter = get if len(self.names) > 1 else (lambda obj: (get(obj),))


class _Make:
    """A field's ``default_factory`` (called for each instance that does not pass it)."""

    __slots__ = ("factory",)

    def __init__(self, factory: Any) -> None:
        self.factory = factory


_PLANS: dict[type, _Plan] = {}


@dataclass_transform(
    kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field,)
)
class _Frozen:
    """The shared methods of the event classes (see the module's docstring): each subclass
    is made a dataclass when it is defined, with ``dataclasses``' generated methods off.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=True)
        _PLANS[cls] = _Plan(cls)

    def __init__(self, **kwargs: Any) -> None:
        plan = _PLANS[self.__class__]
        setter = object.__setattr__
        missing: list[str] = []
        given = 0
        for name in plan.names:
            if name in kwargs:
                setter(self, name, kwargs[name])
                given += 1
            elif name in plan.defaults:
                value = plan.defaults[name]
                setter(self, name, value.factory() if value.__class__ is _Make else value)
            else:
                missing.append(name)
        where = f"{self.__class__.__qualname__}.__init__()"
        if given != len(kwargs):  # as Python says it: an unknown argument before a missing one
            unknown = next(n for n in kwargs if n not in plan.names)
            raise TypeError(f"{where} got an unexpected keyword argument {unknown!r}")
        if missing:
            quoted = [repr(n) for n in missing]
            names = (
                " and ".join(quoted)
                if len(quoted) < 3
                else ", ".join(quoted[:-1]) + ", and " + quoted[-1]
            )
            s = "s" if len(missing) > 1 else ""
            raise TypeError(
                f"{where} missing {len(missing)} required keyword-only argument{s}: {names}"
            )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            get = _PLANS[self.__class__].getter
            return bool(get(self) == get(other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(_PLANS[self.__class__].getter(self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in _PLANS[self.__class__].names)
        return f"{self.__class__.__qualname__}({fields})"

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


class Event(_Frozen):
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
