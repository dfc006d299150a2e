"""The operator contract as JSON: the one place where Admin arguments are checked and Admin
results are serialised, both with pydantic ``TypeAdapter`` objects built from :class:`Admin`'s
signatures.

- :func:`check_arguments` binds a request's ``args`` to ``Admin.<op>``'s signature and
  validates each one strictly against its annotation (a JSON number for a ``float``, a
  string for a ``str``; NaN and infinity refused): what the control socket answers
  ``bad_request``, quoting the field and the value.
- :func:`result_data` turns an operation's result (a dataclass of
  :mod:`companyd.admin._results`) into JSON data: the field order is the key order, a field
  marked ``Omitted`` is left out when None. The control socket sends
  it, the CLI prints it (``--json``), and front ends that render a result generically
  render this form.
- :func:`load_result` is the inverse, for a client that wants the dataclass back.

Adapters are built on first use of an operation and kept (building one costs a few
milliseconds; ``companyd --help`` builds none).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from companyd._frozen import Frozen
from companyd.admin._operations import Admin

__all__ = ["OPERATIONS", "ArgumentError", "check_arguments", "load_result", "result_data"]

#: The operations a client may ask for: the public coroutine methods of the Admin protocol.
OPERATIONS: frozenset[str] = frozenset(
    name
    for name, member in vars(Admin).items()
    if not name.startswith("_") and inspect.iscoroutinefunction(member)
)

_STRICT_JSON = ConfigDict(allow_inf_nan=False)


class ArgumentError(ValueError):
    """The arguments do not fit the operation's signature; ``str()`` says which and why."""


class _Operation(Frozen):
    name: str
    signature: inspect.Signature
    shown: str
    arguments: Mapping[str, tuple[Any, TypeAdapter[Any]]]
    result: TypeAdapter[Any]
    result_types: tuple[type, ...]


@functools.cache
def _operation(op: str) -> _Operation:
    if op not in OPERATIONS:
        raise KeyError(op)
    method = getattr(Admin, op)
    sig = inspect.signature(method)
    hints = typing.get_type_hints(method, include_extras=True)
    params = [p for name, p in sig.parameters.items() if name != "self"]
    shown = ", ".join(_shown(p, hints.get(p.name, Any)) for p in params)
    arguments = {
        p.name: (hints.get(p.name, Any), TypeAdapter(hints.get(p.name, Any), config=_STRICT_JSON))
        for p in params
    }
    returns = hints["return"]
    members = typing.get_args(returns) if _is_union(returns) else (returns,)
    return _Operation(
        name=op,
        signature=sig,
        shown=shown,
        arguments=arguments,
        result=TypeAdapter(returns),
        result_types=tuple(m for m in members if isinstance(m, type)),
    )


def check_arguments(op: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``Admin.<op>`` from a request's ``args``, validated.

    Raises:
        ArgumentError: missing, unexpected or mistyped arguments (the message quotes the
            argument and its value, and shows the signature).
    """
    spec = _operation(op)
    try:
        bound = spec.signature.bind(None, **args)
    except TypeError as exc:
        raise ArgumentError(
            f"bad arguments for {op!r}: {exc}; expected {op}({spec.shown})"
        ) from None
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name == "self":
            continue
        hint, adapter = spec.arguments[name]
        try:
            out[name] = adapter.validate_python(value, strict=True)
        except ValidationError as exc:
            finite = any(e["type"] == "finite_number" for e in exc.errors())
            expected = "a finite number (not NaN or infinity)" if finite else _describe(hint)
            raise ArgumentError(
                f"bad argument {name}={value!r:.200} for {op!r}: expected {expected}; "
                f"signature: {op}({spec.shown})"
            ) from None
    return out


def result_data(op: str, result: Any) -> Any:
    """``result`` of ``Admin.<op>`` as JSON data (dicts, lists, strings, numbers, None).

    A result that already is plain data (a test double's dict) is passed through as JSON.

    Raises:
        TypeError: a result of neither the operation's declared type nor plain data.
    """
    spec = _operation(op)
    if isinstance(result, spec.result_types):
        return spec.result.dump_python(result, mode="json", warnings="error")
    if dataclasses.is_dataclass(result):
        names = " | ".join(t.__name__ for t in spec.result_types)
        raise TypeError(f"{op!r} returned a {type(result).__name__}, not its result {names}")
    return _PLAIN.dump_python(result, mode="json")


def load_result(op: str, data: Any) -> Any:
    """The dataclass of ``Admin.<op>``'s result from its JSON data (:func:`result_data`).

    Raises:
        pydantic.ValidationError: ``data`` is not that result's shape.
    """
    return _operation(op).result.validate_python(data)


_PLAIN: TypeAdapter[Any] = TypeAdapter(Any)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _shown(param: inspect.Parameter, hint: Any) -> str:
    text = f"{param.name}: {_type_name(hint)}"
    if param.default is not inspect.Parameter.empty:
        text += f" = {param.default!r}"
    return text


def _type_name(hint: Any) -> str:
    if _is_union(hint):
        return " | ".join(_type_name(m) for m in typing.get_args(hint))
    if hint is type(None):
        return "None"
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else str(hint)


def _describe(hint: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    if _is_union(hint):
        return " or ".join(
            "null" if m is type(None) else _describe(m) for m in typing.get_args(hint)
        )
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(hint))
    return names.get(hint, _type_name(hint))
