"""The control protocol: where the socket is, how a request and its answer are framed, and
what makes a request a ``bad_request``. Shared by the server (:mod:`companyd.daemon._control`)
and the client (:mod:`companyd.daemon._control_client`); no sockets are opened here.

**Where.** A Unix stream socket named ``companyd.sock`` in ``$RUNTIME_DIRECTORY`` under
systemd (``/run/companyd/companyd.sock``), else in the state directory
(:func:`socket_path`).

**Framing.** Newline-delimited JSON, any number of requests per connection, answered in
order::

    → {"op": "pause", "args": {"agent": "cfo"}, "id": 7}
    ← {"ok": true, "result": {...}, "id": 7}
    ← {"ok": false, "error": "unknown agent 'cfoo'; agents: ceo, cfo, …", "code": "admin"}

``op`` is a method of :class:`~companyd.admin.Admin` (``status``, ``pause``, …) or the
built-in ``ping``; ``args`` are its keyword arguments, checked against the method's
signature and types before the call (:func:`validate`); ``id`` is optional and echoed back.
``code`` says which kind of failure it was: ``bad_request`` (unknown op, bad JSON, wrong
arguments, a line over ``MAX_REQUEST_BYTES``; the connection stays usable), ``admin`` (the
daemon refused: :class:`AdminError` or another deliberate companyd error, whose message is
shown as it is), ``timeout`` (the operation missed its deadline), ``internal`` (a bug) or
``busy`` (the server is at one of its limits; the connection is closed).

**Deadlines.** Each operation has one on the server (:data:`DEFAULT_DEADLINES`, else
:data:`DEFAULT_REQUEST_TIMEOUT`; an operation with a ``timeout`` argument gets that plus ten
seconds if longer); the client waits 15 s longer, so the daemon reports a slow operation
(``timeout``) rather than being cut off.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from companyd._secrets import SECRETS
from companyd.admin import AdminError
from companyd.errors import CompanydError

if TYPE_CHECKING:
    import asyncio

    from companyd.clock import Clock

__all__ = [
    "ADMIN_OPS",  # noqa: F822 (module __getattr__)
    "BUILTIN_OPS",
    "DEFAULT_DEADLINES",
    "DEFAULT_REQUEST_TIMEOUT",
    "GOES_ON_AFTER_DEADLINE",
    "MAX_REQUEST_BYTES",
    "MAX_REQUEST_DEPTH",
    "MAX_RESPONSE_BYTES",
    "SOCKET_NAME",
    "SYSTEMD_SOCKET",
    "BadRequest",
    "ControlError",
    "ControlTimeout",
    "RequestFailed",
    "decode_answer",
    "encode_answer",
    "encode_request",
    "error",
    "operation_deadline",
    "parse_line",
    "socket_path",
    "validate",
    "with_deadline",
]

T = TypeVar("T")

SOCKET_NAME = "companyd.sock"
#: Where the shipped unit's daemon listens (``RuntimeDirectory=companyd``).
SYSTEMD_SOCKET = Path("/run/companyd") / SOCKET_NAME
#: Longest request line the server reads; longer ones are answered ``bad_request`` and
#: skipped (never buffered) up to their newline.
MAX_REQUEST_BYTES = 1 << 20
#: Deepest nesting of arrays and objects in a request (real requests need three).
MAX_REQUEST_DEPTH = 32
#: Longest answer line a client reads (a 1,000-agent status is a few hundred KB).
MAX_RESPONSE_BYTES = 64 << 20

#: The operations a client may ask for: the public methods of the Admin protocol.
BUILTIN_OPS = frozenset({"ping"})

#: Deadline (seconds) of an operation without its own entry in DEFAULT_DEADLINES.
DEFAULT_REQUEST_TIMEOUT = 30.0
#: Deadlines (seconds) for operations that legitimately take longer than a status read.
DEFAULT_DEADLINES: Mapping[str, float] = {
    "reload": 120.0,
    "approve": 120.0,
    "revert": 120.0,
    "run_job": 60.0,
    "backup": 600.0,  # copies every store and the memory: minutes for a large company
}
#: Operations whose work goes on when the socket stops waiting at their deadline (it is
#: shielded: a reload, a decision, a proposal's apply or revert is never left half-done),
#: so their timeout answer must not say "cancelled": it says where to see how it ended.
GOES_ON_AFTER_DEADLINE: Mapping[str, str] = {
    "reload": "`companyd status` shows how it ended",
    "approve": "`companyd inbox` shows whether it still waits (a proposal: "
    "`companyd proposals` shows it applied)",
    "revert": "`companyd proposals` shows whether it was reverted",
    "reject": "`companyd inbox` shows whether it still waits (a proposal: "
    "`companyd proposals` shows it rejected)",
    "answer": "`companyd inbox` shows whether it still waits",
}

_EXAMPLE = 'send one JSON object per line, e.g. {"op": "status", "args": {}}'


class ControlError(CompanydError):
    """The control connection failed (not the operation): permissions, protocol, EOF."""


class ControlTimeout(ControlError):
    """The daemon did not answer within the client's deadline."""


class RequestFailed(AdminError):
    """The daemon answered ``ok: false``; ``str()`` is its message, ``code`` its kind
    (``bad_request``, ``admin``, ``timeout``, ``internal``, ``busy`` or ``stopping``).
    """

    def __init__(self, message: str, code: str = "admin") -> None:
        super().__init__(message)
        self.code = code


class BadRequest(ValueError):
    """A request the server answers ``bad_request``; ``str()`` is the answer's message."""


def __getattr__(name: str) -> Any:
    """``ADMIN_OPS``, the operations a client may ask for (the public methods of the Admin
    protocol), computed on first use: it needs :mod:`companyd.admin._wire` (pydantic), which
    the servers load and the clients (every CLI command) need not.
    """
    if name == "ADMIN_OPS":
        from companyd.admin import OPERATIONS

        return OPERATIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def socket_path(state_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """Where the daemon listens: ``$RUNTIME_DIRECTORY/companyd.sock`` under systemd, else
    ``<state_dir>/companyd.sock``.
    """
    env = os.environ if env is None else env
    runtime = env.get("RUNTIME_DIRECTORY")
    if runtime:
        return Path(runtime.split(":")[0]) / SOCKET_NAME
    return Path(state_dir).absolute() / SOCKET_NAME


def operation_deadline(
    op: str,
    args: Mapping[str, Any],
    deadlines: Mapping[str, float] = DEFAULT_DEADLINES,
    default: float = DEFAULT_REQUEST_TIMEOUT,
) -> float:
    """The server's deadline (seconds) for ``op`` called with ``args``."""
    deadline = deadlines.get(op, default)
    timeout = args.get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        deadline = max(deadline, float(timeout) + 10.0)
    return deadline


# -- requests --------------------------------------------------------------------------------


def encode_request(op: str, args: Mapping[str, Any]) -> bytes:
    """One request line."""
    return json.dumps({"op": op, "args": dict(args)}, ensure_ascii=False).encode() + b"\n"


def parse_line(line: bytes) -> Any:
    """Decode one request line (not yet checked as a request: see :func:`validate`).

    Raises:
        BadRequest: not UTF-8, not JSON, nested too deep, or holding an unpaired surrogate.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request is not valid UTF-8 ({exc}); {_EXAMPLE}") from None
    try:
        request = json.loads(text)
    except RecursionError:
        problem: str | None = f"nested deeper than {MAX_REQUEST_DEPTH} levels"
    except ValueError as exc:  # JSONDecodeError, or an integer of over 4,300 digits
        problem = str(exc)
    else:
        problem = _check_shape(request)
    if problem is not None:
        raise BadRequest(f"request is not valid JSON ({problem}); {_EXAMPLE}")
    return request


def validate(request: Any) -> tuple[str, dict[str, Any]]:
    """The operation and its keyword arguments from a decoded request.

    Arguments of an Admin operation are bound to its signature and validated against its
    annotations (:func:`companyd.admin._wire.check_arguments`; integers become floats where
    a float is expected); a built-in op's are returned as sent.

    Raises:
        BadRequest: not an object, an unknown op, ``args`` not an object, bad arguments.
    """
    from companyd.admin import OPERATIONS as ADMIN_OPS  # pydantic: servers only
    from companyd.admin import ArgumentError, check_arguments

    valid = ", ".join(sorted(ADMIN_OPS | BUILTIN_OPS))
    if not isinstance(request, dict):
        raise BadRequest(f"request must be a JSON object with 'op' and 'args', got {request!r:.80}")
    op = request.get("op")
    args = request.get("args", {})
    if args is None:
        args = {}
    if not isinstance(op, str) or op not in ADMIN_OPS | BUILTIN_OPS:
        raise BadRequest(f"unknown op {op!r:.80}; valid ops: {valid}")
    if not isinstance(args, dict):
        raise BadRequest(
            f"'args' of {op!r} must be a JSON object of keyword arguments, got {args!r:.80}"
        )
    if op in BUILTIN_OPS:
        return op, args
    try:
        return op, check_arguments(op, args)
    except ArgumentError as exc:
        raise BadRequest(str(exc)) from None


# -- answers ---------------------------------------------------------------------------------


def error(message: str, code: str) -> dict[str, Any]:
    """A failure answer."""
    return {"ok": False, "error": message, "code": code}


def encode_answer(response: Mapping[str, Any]) -> bytes:
    """One answer line (without its newline), every secret in it masked."""
    # Every answer passes the one redactor: an agent's answer, an error or a log excerpt
    # that holds a secret (or something that looks like one) never leaves the daemon.
    text = json.dumps(response, ensure_ascii=False, default=str)
    if SECRETS.known(text):  # rare: mask string by string, so the JSON stays valid
        text = json.dumps(SECRETS.redact_data(json.loads(text)), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate somewhere: escape it
        return json.dumps(json.loads(text)).encode()


def decode_answer(op: str, data: bytes) -> dict[str, Any]:
    """The ``result`` of the answer line ``data`` to ``op``.

    Raises:
        RequestFailed: the daemon answered ``ok: false``.
        ControlError: no whole answer, not JSON, or not an answer.
    """
    if not data.endswith(b"\n"):
        raise ControlError(
            f"the daemon closed the connection without answering {op!r} (is it stopping?)"
        )
    try:
        response = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ControlError(f"the daemon sent an answer that is not JSON: {exc}") from None
    if not isinstance(response, dict) or "ok" not in response:
        raise ControlError(f"the daemon sent an unexpected answer: {response!r:.200}")
    if not response["ok"]:
        raise RequestFailed(
            str(response.get("error", "request failed")), str(response.get("code", "admin"))
        )
    result = response.get("result")
    return result if isinstance(result, dict) else {"value": result}


# -- deadlines -------------------------------------------------------------------------------


async def with_deadline(aw: Awaitable[T], seconds: float | None, clock: Clock) -> T:
    """Await ``aw``, or cancel it and raise TimeoutError after ``seconds`` on ``clock``.

    On a timeout the operation is cancelled but not waited for: one that ignores
    cancellation must not hold the caller (a later failure of it is logged).
    """
    import asyncio  # here: the CLI's clients (blocking ``call``) need not import it

    from companyd.clock import within

    if seconds is None:
        return await aw
    task = asyncio.ensure_future(aw)
    try:
        return await within(clock, seconds, task)  # the task is ours: within leaves it
    except TimeoutError:
        if task.done():  # the operation's own TimeoutError
            raise
        task.cancel()
        task.add_done_callback(_consume)
        raise TimeoutError from None
    except asyncio.CancelledError:
        task.cancel()
        raise


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        import logging  # here: the CLI's clients import this module and never log

        logging.getLogger("companyd.daemon.control").warning(
            "control: a timed-out operation later failed: %r", task.exception()
        )


# -- request shape -------------------------------------------------------------------------


def _check_shape(request: Any) -> str | None:
    r"""What is wrong with a decoded request that JSON itself allows: nesting deeper than
    MAX_REQUEST_DEPTH, or a string with an unpaired surrogate (``"\ud800"``), which is
    not Unicode and could not be echoed back as UTF-8. Iterative: no recursion limit.
    """
    stack: list[tuple[Any, int]] = [(request, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"a string holds an unpaired surrogate: {value!r:.60}"
        elif isinstance(value, dict | list):
            if depth >= MAX_REQUEST_DEPTH:
                return f"nested deeper than {MAX_REQUEST_DEPTH} levels"
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)
    return None
