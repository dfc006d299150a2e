"""The control client: how the CLI (and tests, benchmarks, Telegram-less tools) reach a
running daemon's control socket — :class:`ControlClient` for one daemon, :func:`find_daemon`
to find the daemon of a company.yaml, a state directory or ``$RUNTIME_DIRECTORY``; a
company.yaml of a ``companyd@NAME`` instance leads to that instance's socket only
(:mod:`companyd.daemon._layout`).

The wire format is :mod:`companyd.daemon._protocol`'s; the server is
:mod:`companyd.daemon._control`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd._fs import read_regular_file
from companyd.config import DEFAULT_STATE_DIR
from companyd.daemon._lock import locate
from companyd.daemon._protocol import (
    MAX_RESPONSE_BYTES,
    SOCKET_NAME,
    ControlError,
    ControlTimeout,
    decode_answer,
    encode_request,
    operation_deadline,
    with_deadline,
)
from companyd.errors import CompanydError, DaemonNotRunning

if TYPE_CHECKING:
    from companyd.clock import Clock
    from companyd.daemon._layout import SystemdLayout

__all__ = ["ControlClient", "candidate_sockets", "claimed_daemon", "connect_unix", "find_daemon"]


class ControlClient:
    """Talks to a daemon's control socket; one connection per call.

    ``call`` blocks (for the CLI); ``acall`` is the asyncio version. Both return the
    ``result`` dict. Each call waits for the answer 15 s longer than the daemon's own
    deadline for that operation (see :class:`ControlServer`), and at least ``timeout``.

    Raises (from both):
        DaemonNotRunning: nothing listens on the socket (no file, or a stale one).
        RequestFailed: the daemon answered ``ok: false`` (an :class:`AdminError`).
        ControlTimeout: no answer within the deadline.
        ControlError: permission denied, or the connection broke before an answer.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"ControlClient({str(self.path)!r})"

    def _deadline(self, op: str, args: Mapping[str, Any]) -> float:
        # Wait longer than the server's own deadline for this op (default ones assumed),
        # so a slow operation is reported by the daemon ("timeout") rather than cut off.
        return max(self.timeout, operation_deadline(op, args) + 15.0)

    def call(self, op: str, /, **args: Any) -> dict[str, Any]:
        """Run ``op`` with keyword ``args`` on the daemon and return its result."""
        deadline = self._deadline(op, args)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(deadline)
        try:
            try:
                connect_unix(sock, os.fsencode(self.path), deadline)
            except OSError as exc:
                raise self._connect_error(exc) from None
            try:
                # Refused at once (busy)? Its answer may still be waiting to be read.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    sock.sendall(encode_request(op, args))
                data = bytearray()
                while b"\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                    if len(data) > MAX_RESPONSE_BYTES:
                        raise ControlError(
                            f"the answer to {op!r} is larger than {MAX_RESPONSE_BYTES} bytes"
                        )
            except TimeoutError:
                raise self._timeout(op, deadline) from None
            except ConnectionError as exc:
                raise ControlError(
                    f"the connection to {str(self.path)!r} broke during {op!r}: {exc}"
                ) from None
        finally:
            sock.close()
        return decode_answer(op, bytes(data))

    async def acall(self, op: str, /, clock: Clock | None = None, **args: Any) -> dict[str, Any]:
        """Like :meth:`call`, without blocking the event loop (deadline on ``clock``)."""
        import asyncio  # here: the blocking ``call`` of the CLI does without it

        from companyd.clock import SystemClock

        deadline = self._deadline(op, args)

        async def exchange() -> bytes:
            loop = asyncio.get_running_loop()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            sock.setblocking(False)
            try:
                try:
                    await loop.sock_connect(sock, os.fsencode(self.path))
                except OSError as exc:
                    raise self._connect_error(exc) from None
                # Refused at once (busy)? Its answer may still be waiting to be read.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    await loop.sock_sendall(sock, encode_request(op, args))
                data = bytearray()
                while b"\n" not in data:
                    chunk = await loop.sock_recv(sock, 65536)
                    if not chunk:
                        break
                    data += chunk
                    if len(data) > MAX_RESPONSE_BYTES:
                        raise ControlError(
                            f"the answer to {op!r} is larger than {MAX_RESPONSE_BYTES} bytes"
                        )
                return bytes(data)
            finally:
                sock.close()

        try:
            data = await with_deadline(exchange(), deadline, clock or SystemClock())
        except TimeoutError:
            raise self._timeout(op, deadline) from None
        except ConnectionError as exc:
            raise ControlError(
                f"the connection to {str(self.path)!r} broke during {op!r}: {exc}"
            ) from None
        return decode_answer(op, data)

    def ping(self) -> dict[str, Any]:
        """The daemon's pid, version, socket and state directory."""
        return self.call("ping")

    def _connect_error(self, exc: OSError) -> CompanydError:
        where = str(self.path)
        if isinstance(exc, FileNotFoundError):
            return DaemonNotRunning(
                f"no companyd daemon is running: the control socket {where!r} does not exist. "
                "Start it with `systemctl start companyd` (or `companyd run`), or point at "
                "it with --state-dir / --socket"
            )
        if isinstance(exc, ConnectionRefusedError):
            return DaemonNotRunning(
                f"no companyd daemon is running: nothing listens on {where!r} (a stale socket "
                "from a daemon that was killed). Start it with `systemctl start companyd` "
                "(or `companyd run`)"
            )
        if isinstance(exc, PermissionError):
            return ControlError(
                f"permission denied on the control socket {where!r}: it is mode 0600 for the "
                "daemon's user. Run the command as root (sudo), or give operators a group "
                "with the daemon's --control-group option"
            )
        if exc.errno == errno.ENOTSOCK or exc.errno == errno.ECONNREFUSED:
            return DaemonNotRunning(f"no companyd daemon is listening on {where!r}: {exc}")
        return ControlError(f"cannot connect to the control socket {where!r}: {exc}")

    def _timeout(self, op: str, deadline: float) -> ControlTimeout:
        return ControlTimeout(
            f"the daemon at {str(self.path)!r} did not answer {op!r} within {deadline:.0f} s; "
            "it may be stuck or overloaded — check `journalctl -u companyd` and "
            "`systemctl status companyd`"
        )


# -- discovery (for the CLI commands of every area) ------------------------------------------


def _state_dir_from_config(config: Path) -> Path | None:
    """The state directory company.yaml names, read leniently: the daemon may be running an
    older, valid version of a file that is currently broken, and status must still work.

    ``state_dir`` relative to the directory really holding the file (symlinks resolved),
    else ``state`` there — as :meth:`companyd.config.CompanyConfig.state_dir` does. None
    when the file cannot be read at all.
    """
    from companyd.config import UNUSUAL, peek_or_load

    try:
        # never a plain read: a FIFO given as --config must not hang `status`; read line by
        # line when the file has the usual shape, by the YAML library otherwise (issue 31)
        data = peek_or_load(read_regular_file(config, 10 * 1024 * 1024), ("state_dir",))
    except Exception:
        return None
    if data is None:
        return None
    base = Path(os.path.realpath(config)).parent
    value = data.get("state_dir")
    if isinstance(value, str) and value and value != UNUSUAL:
        return (base / value).absolute()
    return base / DEFAULT_STATE_DIR


def candidate_sockets(
    *,
    state_dir: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    layout: SystemdLayout | None = None,
) -> list[Path]:
    """Where a running daemon's socket may be, most specific first (no duplicates).

    ``$RUNTIME_DIRECTORY``; for a company.yaml at ``/etc/companyd/NAME/company.yaml``, the
    instance's ``/run/companyd/NAME/companyd.sock``; the state directory's socket, the state
    directory being ``state_dir``, else ``$STATE_DIRECTORY``, else company.yaml's
    ``state_dir``, else ``state`` next to company.yaml (the same order the daemon uses;
    ``./state`` only when the file cannot be read); then, unless company.yaml is an
    instance's, the single unit's ``/run/companyd/companyd.sock``. ``layout`` is
    :data:`~companyd.daemon._layout.SYSTEMD_LAYOUT` unless given.
    """
    from companyd.daemon._layout import SYSTEMD_LAYOUT

    env = os.environ if env is None else env
    layout = layout or SYSTEMD_LAYOUT
    instance = layout.instance_of(config) if config is not None else None
    found: list[Path] = []
    runtime = env.get("RUNTIME_DIRECTORY")
    if runtime:
        found.append(Path(runtime.split(":")[0]) / SOCKET_NAME)
    if instance is not None:
        found.append(layout.socket(instance))
    if state_dir is not None:
        sd = Path(state_dir).absolute()
    elif env.get("STATE_DIRECTORY"):
        sd = Path(env["STATE_DIRECTORY"].split(":")[0]).absolute()
    else:
        from_config = _state_dir_from_config(Path(config)) if config is not None else None
        sd = from_config if from_config is not None else Path("state").absolute()
    found.append(sd / SOCKET_NAME)
    if instance is None:
        # another company's daemon when company.yaml is an instance's: never asked then
        found.append(layout.single_socket)
    return list(dict.fromkeys(found))


def claimed_daemon(
    config: str | os.PathLike[str], *, timeout: float = 10.0
) -> ControlClient | None:
    """A client for the socket the daemon running ``config`` names through its claim
    (:func:`~companyd.daemon._lock.locate`), not yet asked anything; None when no daemon of
    the same user (or root) claims the file.

    For a caller about to send a request anyway: the request itself shows whether the
    control socket is up (a :class:`DaemonNotRunning` is raised before anything is sent),
    one ``ping`` fewer than :func:`find_daemon` — a round trip through the daemon's event
    loop, the largest part of a CLI command's wait on a busy machine (issue 31). On
    DaemonNotRunning the caller searches with :func:`find_daemon`, as before.
    """
    found = locate(config)
    return ControlClient(found[1], timeout=timeout) if found is not None else None


def find_daemon(
    *,
    socket: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    layout: SystemdLayout | None = None,
) -> ControlClient:
    """A client for the running daemon, found as :func:`candidate_sockets` says.

    With an explicit ``socket`` only that path is tried. With ``config``, the daemon
    running that very file (same user or root) is asked for its socket first, and is the
    answer when it meets the ``state_dir`` condition below, so ``--config`` finds it
    whatever state directory it runs on, without reading the file. With an explicit
    ``state_dir``, a daemon found elsewhere (``$RUNTIME_DIRECTORY``, ``/run/companyd``,
    through ``config``) must report that state directory, so ``--state-dir`` never reaches
    another company's daemon. With the ``config`` of a ``companyd@NAME`` instance, only
    that instance's sockets are tried (``layout``: as in :func:`candidate_sockets`).

    Raises:
        DaemonNotRunning: no candidate answered; the message lists the paths tried.
        ControlError: a socket exists but may not be used (permissions).
    """
    if socket is not None:
        client = ControlClient(socket, timeout=timeout)
        client.ping()
        return client
    want = Path(state_dir).absolute() if state_dir is not None else None
    own = want / SOCKET_NAME if want is not None else None
    # The daemon running this very file says where its socket is, whatever state
    # directory it was started with (daemon/_lock.py CompanyLock). Asked first: when it
    # answers, company.yaml is not even read (the everyday `status`, issue 31).
    found = locate(config) if config is not None else None
    if found is not None:
        client = ControlClient(found[1], timeout=timeout)
        try:
            info = client.ping()
        except ControlTimeout:
            raise
        except CompanydError:
            pass  # tried again below, in turn, where its failure is reported as before
        else:
            if want is None or found[1] == own or _same_dir(info.get("state_dir"), want):
                return client
    from companyd.daemon._layout import SYSTEMD_LAYOUT  # here: a dataclass, on this path only

    layout = layout or SYSTEMD_LAYOUT
    paths = candidate_sockets(state_dir=state_dir, config=config, env=env, layout=layout)
    if found is not None and found[1] not in paths:
        paths.insert(0, found[1])
    # A refusal on the socket the caller named (``state_dir``) is the one to report: the
    # daemon claiming company.yaml (tried first) may be another company's, in a directory
    # the caller may not enter either, and naming that one sends the operator elsewhere.
    denied: dict[Path, ControlError] = {}
    for path in paths:
        client = ControlClient(path, timeout=timeout)
        try:
            if not path.exists():
                continue
        except PermissionError:  # in a directory we may not enter (a 0700 state dir)
            denied[path] = ControlError(
                f"permission denied on the control socket {str(path)!r}: its directory "
                f"{str(path.parent)!r} is only for the daemon's user. Run the command as "
                "that user or as root (sudo)"
            )
            continue
        try:
            info = client.ping()
        except DaemonNotRunning:
            continue
        except ControlTimeout:
            raise
        except ControlError as exc:
            denied[path] = exc
            continue
        if want is not None and path != own and not _same_dir(info.get("state_dir"), want):
            continue
        return client
    if denied:
        mine = denied.get(own) if own is not None else None
        raise mine or next(iter(denied.values()))
    tried = ", ".join(repr(str(p)) for p in paths)
    instance = layout.instance_of(config) if config is not None else None
    unit = f"companyd@{instance}" if instance is not None else "companyd"
    raise DaemonNotRunning(
        f"no companyd daemon is running (tried {tried}). Start it with "
        f"`systemctl start {unit}` or `companyd run`, or point at it with --state-dir or "
        "--socket"
    )


def _same_dir(reported: Any, want: Path) -> bool:
    if not isinstance(reported, str):
        return False
    return Path(reported) == want or os.path.realpath(reported) == os.path.realpath(want)


#: How long :func:`connect_unix` retries at most.
BACKLOG_WAIT = 10.0


def connect_unix(sock: socket.socket, path: bytes, deadline: float) -> None:
    """Connect ``sock`` to the Unix socket ``path``, waiting out a full listen backlog.

    A Unix socket with a timeout does not wait for room in the daemon's backlog: connect()
    fails at once with EAGAIN (a daemon busy accepting a flood of connections). That is
    transient, so it is retried every 20 ms for up to ``min(deadline, BACKLOG_WAIT)``
    seconds; every other error is raised at once.

    Raises:
        OSError: the connection failed, or the backlog stayed full for the whole wait.
    """
    give_up = time.monotonic() + min(deadline, BACKLOG_WAIT)
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() >= give_up:
                raise
            time.sleep(0.02)
