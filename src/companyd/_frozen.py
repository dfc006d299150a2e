"""Frozen keyword-only dataclasses that cost ~10× less to define: :class:`Frozen`.

``@dataclass(frozen=True, kw_only=True)`` compiles six methods for every class it decorates
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``: one
``exec`` each, ~0.5 ms a class here). The event kinds (~70) and the operator results (~45)
are loaded by every daemon's start and by many CLI commands: ~60 ms of CPU each time
(issue 31). A class deriving from :class:`Frozen` is made a dataclass when it is defined —
by ``dataclasses.dataclass`` itself, its generated methods turned off — and shares one of
each method, written once here, that behaves as the generated one does:

* keyword-only arguments, with the ``TypeError`` Python raises for an unknown, a missing
  or a positional one, worded the same (``companyd.events.event_from`` relies on it);
* equality over the fields in order, less those declared ``field(compare=False)``, between
  instances of the same class only; the hash over them too, less those declared
  ``field(hash=False)``;
* the dataclass ``repr``, less the fields declared ``field(repr=False)``;
  ``FrozenInstanceError`` on assignment and deletion;
* ``dataclasses.fields``, ``replace``, ``asdict``, ``is_dataclass`` and ``match`` (by
  keyword: ``__match_args__`` is empty, as for keyword-only fields), and pydantic's
  dataclass schemas, as on any dataclass. mypy sees frozen keyword-only dataclasses
  (``typing.dataclass_transform``).

One difference: ``__dataclass_params__.frozen`` reads False — frozen is enforced by the
shared ``__setattr__``, since a class declared frozen makes ``dataclasses`` compile its own.
``__post_init__`` is called as the generated ``__init__`` calls it (at its end; it may
check the values and raise). No ``InitVar`` and no field options but a default,
``repr=False``, ``compare=False`` and ``hash=False`` (no ``init=`` or ``hash=True``): a class
that needs them is refused when defined, and uses ``@dataclass``.
``tests/test_frozen.py`` compares both with ``@dataclass(frozen=True, kw_only=True)`` twins.
"""

from __future__ import annotations

import dataclasses
import reprlib
from dataclasses import FrozenInstanceError
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, dataclass_transform

__all__ = ["Frozen"]


class _Plan:
    """What the shared methods of one Frozen class need, computed once per class."""

    __slots__ = ("defaults", "getter", "hasher", "names", "post_init", "shown")

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        #: the fields in declaration order (the base's first), as ``__init__`` takes them
        self.names = tuple(f.name for f in fields)
        #: per field with a default: the value, or the factory wrapped in a :class:`_Make`
        self.defaults: dict[str, Any] = {}
        for f in fields:
            if f.default is not dataclasses.MISSING:
                self.defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                self.defaults[f.name] = _Make(f.default_factory)
        #: called at the end of ``__init__``, as the generated one does
        self.post_init = getattr(cls, "__post_init__", None)
        # the fields as one tuple, in order: what the generated __eq__ compares (the fields
        # without compare=False)
        self.getter = _tuple_of(tuple(f.name for f in fields if f.compare))
        #: what the generated ``__hash__`` hashes: the compared fields without ``hash=False``
        self.hasher = _tuple_of(tuple(f.name for f in fields if f.compare and f.hash is None))
        #: what the generated ``__repr__`` shows: the fields without ``repr=False``
        self.shown = tuple(f.name for f in fields if f.repr)


def _tuple_of(names: tuple[str, ...]) -> Any:
    """A function of an instance: its ``names`` fields as one tuple, in order."""
    if not names:
        return lambda obj: ()
    get = attrgetter(*names)
    return get if len(names) > 1 else (lambda obj: (get(obj),))


class _Make:
    """A field's ``default_factory`` (called for each instance that does not pass it)."""

    __slots__ = ("factory",)

    def __init__(self, factory: Any) -> None:
        self.factory = factory


_PLANS: dict[type, _Plan] = {}


@dataclass_transform(
    kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field,)
)
class Frozen:
    """A frozen keyword-only dataclass (see the module's docstring): each subclass is made
    a dataclass when it is defined, with ``dataclasses``' generated methods off.
    """

    __slots__ = ()

    if TYPE_CHECKING:  # what dataclasses sets on each subclass, for mypy
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
        __match_args__: ClassVar[tuple[str, ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=True)
        for f in cls.__dataclass_fields__.values():
            if isinstance(f.type, dataclasses.InitVar) or "InitVar" in str(f.type):
                raise TypeError(
                    f"{cls.__qualname__}.{f.name}: Frozen takes no InitVar; use @dataclass"
                )
        for f in dataclasses.fields(cls):  # what the shared methods do not honour
            if not (f.init and f.hash in (None, False)):
                raise TypeError(
                    f"{cls.__qualname__}.{f.name}: Frozen fields take a default, a "
                    "default_factory, repr=False, compare=False and hash=False only (no init= "
                    "or hash=True); use @dataclass"
                )
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
        if plan.post_init is not None:
            plan.post_init(self)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            get = _PLANS[self.__class__].getter
            return bool(get(self) == get(other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(_PLANS[self.__class__].hasher(self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in _PLANS[self.__class__].shown)
        return f"{self.__class__.__qualname__}({fields})"

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
