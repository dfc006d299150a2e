"""The control socket: how ``companyd status`` and friends talk to the running daemon.

**Where.** A Unix stream socket named ``companyd.sock`` in ``$RUNTIME_DIRECTORY`` under
systemd (``/run/companyd/companyd.sock``), else in the state directory. Mode 0600 (only the
daemon's user, and root, may connect), or 0660 with a ``group`` for operators in that group.

**Protocol.** Newline-delimited JSON, any number of requests per connection, answered in
order::

    → {"op": "pause", "args": {"agent": "cfo"}, "id": 7}
    ← {"ok": true, "result": {...}, "id": 7}
    ← {"ok": false, "error": "unknown agent 'cfoo'; agents: ceo, cfo, …", "code": "admin"}

``op`` is a method of :class:`~companyd.admin.Admin` (``status``, ``pause``, …) or the
built-in ``ping``; ``args`` are its keyword arguments, checked against the method's
signature and types before the call; ``id`` is optional and echoed back. ``code`` says
which kind of failure it was: ``bad_request`` (unknown op, bad JSON, wrong arguments,
a line over ``MAX_REQUEST_BYTES``; the connection stays usable),
``admin`` (the daemon refused: :class:`AdminError` or another deliberate companyd error,
whose message is shown as it is), ``timeout`` (the operation missed its deadline) or
``internal`` (a bug: logged with its traceback in the daemon, never crashing the server)
or ``busy`` (the server is at one of its limits; the connection is closed).

**Limits.** At most ``max_connections`` clients at once: over the cap the oldest idle
connection (no operation running) is told ``busy`` and closed to make room, so the CLI
gets through however many idle clients there are; if every connection is running an
operation the new client is told ``busy``. Unfinished request bytes are capped per
connection (``max_request_bytes``) and over all connections (``max_buffered_bytes``; over
it the connection buffering the most is told ``busy`` and closed). When the process runs
out of file descriptors the oldest idle connection is closed to free one, else the new
client is told ``busy`` through a descriptor kept in reserve; such failures are logged at
most once a minute.

**Deadlines.** Reading a request, running it and writing the answer each have one. An
operation that misses its deadline is cancelled, so Admin implementations must make
operations safe to cancel (shield the part that has to complete).

**Stale sockets.** A daemon killed with SIGKILL leaves its socket file behind. On start the
server probes an existing file: if nothing answers it is replaced (bind to a temporary
name, set the mode, then ``rename`` over it, so the socket is never reachable with a wider
mode); if a process answers, start fails naming the path; a non-socket file is never
touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import grp
import inspect
import json
import logging
import math
import os
import select
import socket
import stat
import types
import typing
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from companyd import __version__
from companyd._secrets import SECRETS
from companyd.admin import Admin, AdminError
from companyd.clock import Clock, SystemClock
from companyd.errors import CompanydError, DaemonNotRunning
from companyd.supervision.child import ChildContext

__all__ = [
    "ADMIN_OPS",
    "SOCKET_NAME",
    "SYSTEMD_SOCKET",
    "ControlClient",
    "ControlError",
    "ControlServer",
    "ControlTimeout",
    "RequestFailed",
    "candidate_sockets",
    "find_daemon",
    "socket_path",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

SOCKET_NAME = "companyd.sock"
#: Where the shipped unit's daemon listens (``RuntimeDirectory=companyd``).
SYSTEMD_SOCKET = Path("/run/companyd") / SOCKET_NAME
#: Longest request line the server reads; longer ones are answered ``bad_request`` and
#: skipped (never buffered) up to their newline.
MAX_REQUEST_BYTES = 1 << 20
#: Most client connections served at once. The CLI uses one per command, so this is far
#: above what operators need and far below the default 1,024-file limit.
MAX_CONNECTIONS = 64
#: Most bytes of unfinished request lines held over all connections together.
MAX_BUFFERED_BYTES = 8 << 20
#: Accept failures (EMFILE …) and connection-cap hits are logged at most this often.
LOG_INTERVAL = 60.0
_RECV_CHUNK = 65536
#: Deepest nesting of arrays and objects in a request (real requests need three).
MAX_REQUEST_DEPTH = 32
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Longest answer line a client reads (a 1,000-agent status is a few hundred KB).
MAX_RESPONSE_BYTES = 64 << 20
#: ``sun_path`` holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107

#: The operations a client may ask for: the public methods of the Admin protocol.
ADMIN_OPS: frozenset[str] = frozenset(
    name
    for name, member in vars(Admin).items()
    if not name.startswith("_") and inspect.iscoroutinefunction(member)
)
BUILTIN_OPS = frozenset({"ping"})

#: Deadline (seconds) of an operation without its own entry in DEFAULT_DEADLINES.
DEFAULT_REQUEST_TIMEOUT = 30.0
#: Deadlines (seconds) for operations that legitimately take longer than a status read.
DEFAULT_DEADLINES: Mapping[str, float] = {
    "reload": 120.0,
    "approve": 120.0,
    "revert": 120.0,
    "run_job": 60.0,
}


class ControlError(CompanydError):
    """The control connection failed (not the operation): permissions, protocol, EOF."""


class ControlTimeout(ControlError):
    """The daemon did not answer within the client's deadline."""


class RequestFailed(AdminError):
    """The daemon answered ``ok: false``; ``str()`` is its message, ``code`` its kind
    (``bad_request``, ``admin``, ``timeout``, ``internal`` or ``busy``)."""

    def __init__(self, message: str, code: str = "admin") -> None:
        super().__init__(message)
        self.code = code


def socket_path(state_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """Where the daemon listens: ``$RUNTIME_DIRECTORY/companyd.sock`` under systemd, else
    ``<state_dir>/companyd.sock``."""
    env = os.environ if env is None else env
    runtime = env.get("RUNTIME_DIRECTORY")
    if runtime:
        return Path(runtime.split(":")[0]) / SOCKET_NAME
    return Path(state_dir).absolute() / SOCKET_NAME


# ---------------------------------------------------------------------------------------
# server


class ControlServer:
    """Serves an :class:`~companyd.admin.Admin` on a Unix socket; a supervised child.

    Args:
        admin: the daemon's operator operations.
        path: the socket file (see :func:`socket_path`).
        clock: paces every deadline.
        group: if set (name or gid), the socket is mode 0660 owned by this group, so its
            members may use the CLI without root; else mode 0600.
        state_dir: reported by ``ping`` so clients can check they reached the right daemon.
        request_timeout: default deadline of one operation, in seconds.
        deadlines: per-operation deadlines overriding ``request_timeout``; an operation
            with a ``timeout`` argument (``ask``) gets that plus ten seconds if longer.
        idle_timeout: a connection that has not sent a whole request line within this long
            is closed (trickling bytes does not extend it); also the deadline for writing
            an answer to a client that does not read.
        drain_timeout: on stop, how long running operations may finish before they are
            cancelled.
        max_request_bytes: longest request line accepted.
        max_connections: most clients served at once (see the module docstring).
        max_buffered_bytes: most unfinished request bytes held over all connections.
    """

    def __init__(
        self,
        admin: Admin,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        group: str | int | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        deadlines: Mapping[str, float] | None = None,
        idle_timeout: float = 60.0,
        drain_timeout: float = 5.0,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_connections: int = MAX_CONNECTIONS,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
    ) -> None:
        self.admin = admin
        self.path = Path(path).absolute()
        self.clock: Clock = clock or SystemClock()
        self.group = group
        self.mode = 0o660 if group is not None else 0o600
        self.state_dir = str(Path(state_dir).absolute()) if state_dir is not None else None
        self.request_timeout = request_timeout
        self.deadlines = dict(DEFAULT_DEADLINES if deadlines is None else deadlines)
        self.idle_timeout = idle_timeout
        self.drain_timeout = drain_timeout
        self.max_request_bytes = max_request_bytes
        self.max_connections = max(1, max_connections)
        self.max_buffered_bytes = max(max_request_bytes, max_buffered_bytes)
        self.requests = 0
        self.failures = 0
        #: clients refused or closed for a limit (``busy``) since start
        self.refused = 0
        self._identity: tuple[int, int] | None = None
        # The open connections, least recently active first (the eviction order).
        self._conns: dict[_Conn, None] = {}
        self._closing = False
        self._spare: int | None = None
        self._logged: dict[str, tuple[float, int]] = {}  # what → (last logged, suppressed)

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return len(self._conns)

    @property
    def busy_connections(self) -> int:
        """Connections running an operation now."""
        return sum(1 for c in self._conns if c.busy)

    @property
    def writing_connections(self) -> int:
        """Connections whose answer waits for the client to read it."""
        return sum(1 for c in self._conns if c.writing)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of unfinished request lines held now, over all connections."""
        return sum(len(c.buf) for c in self._conns)

    # -- lifecycle ----------------------------------------------------------------------

    async def run(self, ctx: ChildContext) -> None:
        """Bind, report started (info: ``{"path": …}``), serve until asked to stop, then
        stop accepting, let running operations finish (``drain_timeout``) and remove the
        socket file if it is still ours."""
        # Binding is a few non-blocking syscalls on a local directory: done inline.
        sock = self.bind()
        self._spare = _reserve_fd()
        accept = asyncio.ensure_future(self._accept_loop(sock))
        try:
            log.info("control socket listening on %s (mode %o)", self.path, self.mode)
            ctx.started({"path": str(self.path)})
            stopping = asyncio.ensure_future(ctx.stopping.wait())
            try:
                await asyncio.wait({accept, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if accept.done():
                accept.result()  # the accept loop failed: let the supervisor restart us
        finally:
            self._closing = True
            accept.cancel()
            await asyncio.gather(accept, return_exceptions=True)
            sock.close()
            if self._spare is not None:
                os.close(self._spare)
                self._spare = None
            try:
                await self._drain()
            finally:
                self._unlink()

    def bind(self) -> socket.socket:
        """Create the listening socket at :attr:`path` (replacing a stale one) and return it.

        Raises:
            CompanydError: the path is too long, is not a socket, or a live process
                listens on it; the group is unknown; the directory is not writable.
        """
        path = self.path
        raw = os.fsencode(path)
        if len(raw) > MAX_SOCKET_PATH:
            raise CompanydError(
                f"control socket path {str(path)!r} is {len(raw)} bytes; Unix sockets allow "
                f"at most {MAX_SOCKET_PATH}. Use a shorter --state-dir or set "
                "RUNTIME_DIRECTORY to a short directory such as /run/companyd"
            )
        gid = _resolve_group(self.group) if self.group is not None else None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._check_existing(path)
        tmp = path.parent / f".ctl{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(os.fsencode(tmp))
            # Not listening yet, so nobody can connect before the mode is right.
            os.chmod(tmp, self.mode)
            if gid is not None and os.stat(tmp).st_gid != gid:
                os.chown(tmp, -1, gid)
            os.rename(tmp, path)
            sock.listen(64)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise CompanydError(
                f"cannot create the control socket {str(path)!r}: {exc.strerror or exc}; "
                "check that the daemon's user may write to that directory"
            ) from exc
        st = os.stat(path)
        self._identity = (st.st_dev, st.st_ino)
        return sock

    @staticmethod
    def _check_existing(path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise CompanydError(
                f"{str(path)!r} exists and is not a socket; companyd will not replace it. "
                "Move it away, or choose another --state-dir"
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        probe.setblocking(False)
        try:
            probe.connect(os.fsencode(path))
        except (ConnectionRefusedError, FileNotFoundError):
            log.info("replacing stale control socket %s (nothing listens on it)", path)
            return
        except BlockingIOError:
            pass  # a listener with a full backlog: very much alive
        except PermissionError as exc:
            raise CompanydError(
                f"control socket {str(path)!r} exists and belongs to another user "
                f"({exc.strerror}); is another companyd running there? Stop it or remove the "
                "file as its owner"
            ) from exc
        finally:
            probe.close()
        raise CompanydError(
            f"another process is already listening on the control socket {str(path)!r}; is "
            "another companyd running with the same runtime directory? Stop it first, or "
            "start this one with a different --state-dir / RUNTIME_DIRECTORY"
        )

    def _unlink(self) -> None:
        if self._identity is None:
            return
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        # Only remove the file we created: a successor may already have replaced it.
        if (st.st_dev, st.st_ino) == self._identity:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self._identity = None

    async def _drain(self) -> None:
        for conn in list(self._conns):
            if not conn.busy and not conn.writing and conn.task is not None:
                conn.task.cancel()  # idle: waiting for a request that will not be served
        busy_tasks = [c.task for c in self._conns if c.task is not None and not c.task.done()]
        if busy_tasks:
            try:
                await _with_deadline(
                    asyncio.gather(*busy_tasks, return_exceptions=True),
                    self.drain_timeout,
                    self.clock,
                )
            except TimeoutError:
                log.warning(
                    "control: %d request(s) still running after %.0f s at shutdown; cancelled",
                    len([t for t in busy_tasks if not t.done()]),
                    self.drain_timeout,
                )
        tasks = [c.task for c in self._conns if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- accepting ------------------------------------------------------------------------

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except (ConnectionAbortedError, InterruptedError):
                continue  # the client gave up before we accepted it
            except OSError as exc:
                await self._accept_failed(listener, exc)
                continue
            sock.setblocking(False)
            self._admit(sock)

    async def _accept_failed(self, listener: socket.socket, exc: OSError) -> None:
        """Out of descriptors (or another accept error): free one, or refuse, or wait."""
        if exc.errno in _OUT_OF_RESOURCES:
            action = "closing the oldest idle control connection or refusing new ones"
        else:
            action = "retrying in a second"
        self._log_limited(
            "accept",
            logging.WARNING,
            "control: cannot accept a connection: %s; %s",
            exc,
            action,
        )
        if exc.errno in _OUT_OF_RESOURCES:
            if not _pending(listener):
                # Linux allocates the new descriptor before it looks for a client, so
                # accept() fails with EMFILE when nobody is waiting: wait for one, and
                # never evict a connection for a client that is not there.
                await _readable(listener)
                return
            victim = self._oldest_idle()
            if victim is not None:
                self._evict(
                    victim,
                    "busy: the daemon is out of file descriptors; this idle connection was "
                    "closed to make room. Reconnect when you have a request",
                )
                return
            if self._refuse_with_spare(listener):
                return
        await self.clock.sleep(1.0)

    def _refuse_with_spare(self, listener: socket.socket) -> bool:
        """Accept one client on the reserved descriptor, tell it ``busy``, close it."""
        if self._spare is None:
            return False
        os.close(self._spare)
        self._spare = None
        try:
            sock, _ = listener.accept()
        except OSError:
            return False
        finally:
            self._spare = _reserve_fd()
        sock.setblocking(False)
        self.refused += 1
        _tell_and_close(
            sock,
            "busy: the daemon is out of file descriptors and every control connection is "
            "running an operation; try again in a few seconds, and check `ulimit -n` / "
            "LimitNOFILE= of the daemon",
        )
        return True

    def _admit(self, sock: socket.socket) -> None:
        if self._closing:
            sock.close()
            return
        if len(self._conns) >= self.max_connections:
            self._log_limited(
                "cap",
                logging.WARNING,
                "control: %d connections at once (the cap); closing the oldest idle ones",
                self.max_connections,
            )
            victim = self._oldest_idle()
            if victim is None:
                self.refused += 1
                _tell_and_close(
                    sock,
                    f"busy: the control socket serves at most {self.max_connections} "
                    "connections at once and all are running operations; try again in a few "
                    "seconds",
                )
                return
            self._evict(
                victim,
                f"busy: the control socket serves at most {self.max_connections} connections "
                "at once; this idle one was closed to make room. Reconnect when you have a "
                "request",
            )
        conn = _Conn(sock)
        self._conns[conn] = None
        conn.task = asyncio.create_task(self._on_client(conn))

    def _oldest_idle(self) -> _Conn | None:
        return next((c for c in self._conns if not c.busy), None)

    def _evict(self, conn: _Conn, message: str) -> None:
        """Close an idle connection now (its descriptor is free when this returns)."""
        self.refused += 1
        self._conns.pop(conn, None)
        conn.buf.clear()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError, ValueError):
            # Unregister first: the descriptor number may be reused by the next accept.
            fd = conn.sock.fileno()
            if fd >= 0:
                loop.remove_reader(fd)
                loop.remove_writer(fd)
        _tell_and_close(conn.sock, message)
        if conn.task is not None:
            conn.task.cancel()

    def _log_limited(self, what: str, level: int, msg: str, *args: Any) -> None:
        """Log ``msg`` at most once per LOG_INTERVAL for ``what``, counting the rest."""
        now = self.clock.monotonic()
        last, suppressed = self._logged.get(what, (None, 0))
        if last is not None and now - last < LOG_INTERVAL:
            self._logged[what] = (last, suppressed + 1)
            return
        self._logged[what] = (now, 0)
        more = f" ({suppressed} more since)" if suppressed else ""
        log.log(level, "%s (logged at most once a minute%s)", msg % args, more)

    # -- one connection -------------------------------------------------------------------

    async def _on_client(self, conn: _Conn) -> None:
        try:
            await self._serve_connection(conn)
        except asyncio.CancelledError:
            pass  # server shutdown or eviction; the connection is closed below
        except (ConnectionError, TimeoutError):
            pass  # the client went away, stopped reading, or sent nothing in time
        except _Refused as exc:
            self.refused += 1
            self._conns.pop(conn, None)
            conn.buf.clear()
            _tell_and_close(conn.sock, str(exc))
        except OSError as exc:
            log.debug("control: connection failed: %s", exc)
        finally:
            self._conns.pop(conn, None)
            conn.buf.clear()
            conn.sock.close()

    async def _serve_connection(self, conn: _Conn) -> None:
        while not self._closing:
            line = await self._next_line(conn)
            if line is None:
                return  # EOF
            if line is _TOO_LONG:
                response = _error(
                    f"request longer than {self.max_request_bytes} bytes; it was skipped. "
                    "Send one JSON object per line",
                    "bad_request",
                )
                self.requests += 1
                self.failures += 1
                await self._send(conn, response)
                continue
            if not line.strip():
                continue
            conn.busy = True
            try:
                response = await self.handle_line(line)
            finally:
                conn.busy = False
            await self._send(conn, response)
            if conn in self._conns:  # most recently active last: evicted last
                del self._conns[conn]
                self._conns[conn] = None

    async def _next_line(self, conn: _Conn) -> bytes | None:
        """The next request line, ``_TOO_LONG`` for one over the limit (its bytes were
        skipped, not kept), or None at EOF (unfinished bytes before it are a last line).
        The whole line must arrive within ``idle_timeout``: trickling bytes does not
        extend it."""
        loop = asyncio.get_running_loop()
        deadline = self.clock.monotonic() + self.idle_timeout
        skipping = False
        while True:
            nl = conn.buf.find(b"\n")
            if nl >= 0:
                line = bytes(conn.buf[: nl + 1])
                del conn.buf[: nl + 1]
                if skipping or len(line) > self.max_request_bytes:
                    return _TOO_LONG
                return line
            if len(conn.buf) > self.max_request_bytes:
                skipping = True
                conn.buf.clear()
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                raise TimeoutError
            chunk = await _with_deadline(
                loop.sock_recv(conn.sock, _RECV_CHUNK), remaining, self.clock
            )
            if not chunk:  # EOF: a last request without its newline is still one
                if skipping:
                    return _TOO_LONG
                if conn.buf.strip():
                    line = bytes(conn.buf)
                    conn.buf.clear()
                    return line
                return None
            if skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                chunk = chunk[nl:]
            self._make_room(conn, len(chunk))
            conn.buf += chunk

    def _make_room(self, conn: _Conn, need: int) -> None:
        """Keep the bytes buffered over all connections under ``max_buffered_bytes``: the
        connection that would hold the most is closed (``busy``) until ``need`` fits."""
        while self.buffered_bytes + need > self.max_buffered_bytes:
            candidates = [c for c in self._conns if not c.busy and c is not conn and c.buf]
            victim = max(candidates, key=lambda c: len(c.buf), default=None)
            if victim is None or len(conn.buf) + need >= len(victim.buf):
                raise _Refused(
                    f"busy: the control socket holds at most {self.max_buffered_bytes} bytes "
                    "of unfinished requests over all connections, and this connection "
                    f"buffered the most ({len(conn.buf) + need} bytes); it was closed. "
                    "Send each request as one short line"
                )
            self._evict(
                victim,
                f"busy: the control socket holds at most {self.max_buffered_bytes} bytes of "
                f"unfinished requests over all connections, and this connection buffered the "
                f"most ({len(victim.buf)} bytes); it was closed. Send each request as one "
                "short line",
            )

    async def _send(self, conn: _Conn, response: Mapping[str, Any]) -> None:
        # Every answer passes the one redactor: an agent's answer, an error or a log excerpt
        # that holds a secret (or something that looks like one) never leaves the daemon.
        text = json.dumps(response, ensure_ascii=False, default=str)
        if SECRETS.known(text):  # rare: mask string by string, so the JSON stays valid
            text = json.dumps(SECRETS.redact_data(json.loads(text)), ensure_ascii=False)
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate somewhere: escape it
            data = json.dumps(json.loads(text)).encode()
        loop = asyncio.get_running_loop()
        # Not busy meanwhile: an answer waiting on a client that does not read is no
        # operation running, and such a connection may be evicted like an idle one.
        conn.writing = True
        try:
            await _with_deadline(
                loop.sock_sendall(conn.sock, data + b"\n"), self.idle_timeout, self.clock
            )
        finally:
            conn.writing = False

    # -- one request ------------------------------------------------------------------------

    async def handle_line(self, line: bytes) -> dict[str, Any]:
        """Parse one request line and answer it (never raises except on cancellation)."""
        example = 'send one JSON object per line, e.g. {"op": "status", "args": {}}'
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.requests += 1
            self.failures += 1
            return _error(f"request is not valid UTF-8 ({exc}); {example}", "bad_request")
        try:
            request = json.loads(text)
        except RecursionError:
            problem: str | None = f"nested deeper than {MAX_REQUEST_DEPTH} levels"
        except ValueError as exc:  # JSONDecodeError, or an integer of over 4,300 digits
            problem = str(exc)
        else:
            problem = _check_shape(request)
        if problem is not None:
            self.requests += 1
            self.failures += 1
            return _error(f"request is not valid JSON ({problem}); {example}", "bad_request")
        return await self.handle_request(request)

    async def handle_request(self, request: Any) -> dict[str, Any]:
        """Answer one decoded request (never raises except on cancellation)."""
        self.requests += 1
        rid = request.get("id") if isinstance(request, dict) else None
        response = await self._dispatch(request)
        if not response.get("ok"):
            self.failures += 1
        if rid is not None:
            response["id"] = rid
        return response

    async def _dispatch(self, request: Any) -> dict[str, Any]:
        valid = ", ".join(sorted(ADMIN_OPS | BUILTIN_OPS))
        if not isinstance(request, dict):
            return _error(
                f"request must be a JSON object with 'op' and 'args', got {request!r:.80}",
                "bad_request",
            )
        op = request.get("op")
        args = request.get("args", {})
        if args is None:
            args = {}
        if not isinstance(op, str) or op not in ADMIN_OPS | BUILTIN_OPS:
            return _error(f"unknown op {op!r:.80}; valid ops: {valid}", "bad_request")
        if not isinstance(args, dict):
            return _error(
                f"'args' of {op!r} must be a JSON object of keyword arguments, got {args!r:.80}",
                "bad_request",
            )
        if op == "ping":
            return {"ok": True, "result": self._ping()}
        try:
            call_args = _check_arguments(op, args)
        except ValueError as exc:
            return _error(str(exc), "bad_request")
        deadline = self._deadline(op, call_args)
        log.debug("control: %s %s", op, call_args)
        method = getattr(self.admin, op)
        try:
            result = await _with_deadline(method(**call_args), deadline, self.clock)
        except TimeoutError:
            log.warning("control: %r did not finish within %.0f s; cancelled", op, deadline)
            return _error(
                f"{op!r} did not finish within {deadline:.0f} s and was cancelled; the daemon "
                "may be overloaded — see `journalctl -u companyd`",
                "timeout",
            )
        except AdminError as exc:
            return _error(str(exc), "admin")
        except CompanydError as exc:  # deliberate, operator-facing (e.g. ConfigError)
            return _error(str(exc), "admin")
        except Exception as exc:
            log.exception("control: %r failed with an unexpected error", op)
            return _error(
                f"internal error: {type(exc).__name__}: {exc} (details in the daemon log)",
                "internal",
            )
        return {"ok": True, "result": result}

    def _deadline(self, op: str, args: Mapping[str, Any]) -> float:
        deadline = self.deadlines.get(op, self.request_timeout)
        timeout = args.get("timeout")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            deadline = max(deadline, float(timeout) + 10.0)
        return deadline

    def _ping(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "version": __version__,
            "socket": str(self.path),
            "state_dir": self.state_dir,
            "ops": sorted(ADMIN_OPS | BUILTIN_OPS),
        }


def _error(message: str, code: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "code": code}


class _Refused(Exception):
    """This connection is over a limit: tell it (``busy``) and close it."""


_TOO_LONG = b"<too long>"  # a sentinel, compared by identity


@dataclass(eq=False)
class _Conn:
    """One client connection: its socket, the task serving it and its unfinished bytes."""

    sock: socket.socket
    task: asyncio.Task[None] | None = None
    #: running an operation (never evicted)
    busy: bool = False
    #: writing an answer (evicted like an idle connection if the client does not read)
    writing: bool = False
    buf: bytearray = field(default_factory=bytearray)


def _pending(listener: socket.socket) -> bool:
    """Whether a client waits to be accepted (poll(2) needs no descriptor of its own)."""
    poller = select.poll()
    poller.register(listener.fileno(), select.POLLIN)
    return bool(poller.poll(0))


async def _readable(listener: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    fd = listener.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def _reserve_fd() -> int | None:
    """A descriptor kept in reserve, closed to accept (and refuse) a client under EMFILE."""
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _tell_and_close(sock: socket.socket, message: str) -> None:
    """Best effort, never blocking: send one ``busy`` answer, then close.

    What the client already sent is read and dropped first, so the kernel does not turn
    the close into a reset that would hide the answer from it."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(json.dumps(_error(message, "busy")).encode() + b"\n")
        for _ in range(16):
            if not sock.recv(_RECV_CHUNK):
                break
    sock.close()


def _resolve_group(group: str | int) -> int:
    if isinstance(group, int):
        return group
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise CompanydError(
            f"unknown group {group!r} for the control socket; create it (`groupadd {group}`) "
            "or leave the group unset for a root-only 0600 socket"
        ) from None


def _check_arguments(op: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Bind ``args`` to ``Admin.<op>`` and check simple types; ValueError says what's wrong."""
    method = getattr(Admin, op)
    sig = inspect.signature(method, eval_str=True)
    params = [p for name, p in sig.parameters.items() if name != "self"]
    shown = ", ".join(str(p) for p in params)
    try:
        bound = sig.bind(None, **args)
    except TypeError as exc:
        raise ValueError(f"bad arguments for {op!r}: {exc}; expected {op}({shown})") from None
    hints = typing.get_type_hints(method)
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name == "self":
            continue
        hint = hints.get(name, Any)
        ok, converted = _conforms(value, hint)
        if ok and isinstance(converted, float) and not math.isfinite(converted):
            raise ValueError(
                f"bad argument {name}={value!r} for {op!r}: expected a finite number "
                f"(not NaN or infinity); signature: {op}({shown})"
            )
        if not ok:
            raise ValueError(
                f"bad argument {name}={value!r} for {op!r}: expected {_describe(hint)}; "
                f"signature: {op}({shown})"
            )
        out[name] = converted
    return out


def _check_shape(request: Any) -> str | None:
    """What is wrong with a decoded request that JSON itself allows: nesting deeper than
    MAX_REQUEST_DEPTH, or a string with an unpaired surrogate (``"\\ud800"``), which is
    not Unicode and could not be echoed back as UTF-8. Iterative: no recursion limit."""
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


def _conforms(value: Any, hint: Any) -> tuple[bool, Any]:
    if hint is Any:
        return True, value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(hint):
            ok, converted = _conforms(value, member)
            if ok:
                return True, converted
        return False, value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return True, float(value)
            except OverflowError:  # an integer beyond any float (1 followed by 400 zeros)
                return False, value
        return False, value
    if hint is str:
        return isinstance(value, str), value
    return True, value  # containers and the rest: the Admin implementation checks them


def _describe(hint: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(
            "null" if m is type(None) else names.get(m, str(m)) for m in typing.get_args(hint)
        )
    return names.get(hint, str(hint))


async def _with_deadline(aw: Awaitable[T], seconds: float | None, clock: Clock) -> T:
    """Await ``aw``, or cancel it and raise TimeoutError after ``seconds`` on ``clock``."""
    if seconds is None:
        return await aw
    task = asyncio.ensure_future(aw)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        timer.cancel()
        raise
    if task.done():
        timer.cancel()
        return task.result()
    task.cancel()
    # Do not wait for it: an operation that ignores cancellation must not hold us.
    task.add_done_callback(_consume)
    raise TimeoutError


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("control: a timed-out operation later failed: %r", task.exception())


# ---------------------------------------------------------------------------------------
# client


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
        server = DEFAULT_DEADLINES.get(op, DEFAULT_REQUEST_TIMEOUT)
        timeout = args.get("timeout")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            server = max(server, float(timeout) + 10.0)
        return max(self.timeout, server + 15.0)

    def _encode(self, op: str, args: Mapping[str, Any]) -> bytes:
        return json.dumps({"op": op, "args": dict(args)}, ensure_ascii=False).encode() + b"\n"

    def call(self, op: str, /, **args: Any) -> dict[str, Any]:
        """Run ``op`` with keyword ``args`` on the daemon and return its result."""
        deadline = self._deadline(op, args)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(deadline)
        try:
            try:
                sock.connect(os.fsencode(self.path))
            except OSError as exc:
                raise self._connect_error(exc) from None
            try:
                # Refused at once (busy)? Its answer may still be waiting to be read.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    sock.sendall(self._encode(op, args))
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
        return self._decode(op, bytes(data))

    async def acall(self, op: str, /, clock: Clock | None = None, **args: Any) -> dict[str, Any]:
        """Like :meth:`call`, without blocking the event loop (deadline on ``clock``)."""
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
                    await loop.sock_sendall(sock, self._encode(op, args))
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
            data = await _with_deadline(exchange(), deadline, clock or SystemClock())
        except TimeoutError:
            raise self._timeout(op, deadline) from None
        except ConnectionError as exc:
            raise ControlError(
                f"the connection to {str(self.path)!r} broke during {op!r}: {exc}"
            ) from None
        return self._decode(op, data)

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

    def _decode(self, op: str, data: bytes) -> dict[str, Any]:
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


# ---------------------------------------------------------------------------------------
# discovery (for the CLI commands of every area)


def _state_dir_from_config(config: Path) -> Path | None:
    """The state directory company.yaml names, read leniently: the daemon may be running an
    older, valid version of a file that is currently broken, and status must still work.

    ``state_dir`` relative to the directory really holding the file (symlinks resolved),
    else ``state`` there — as :meth:`companyd.config.CompanyConfig.state_dir` does. None
    when the file cannot be read at all.
    """
    from companyd.config import DEFAULT_STATE_DIR

    try:
        import yaml

        from companyd._fs import read_regular_file

        # never a plain read: a FIFO given as --config must not hang `status`
        data = yaml.safe_load(read_regular_file(config, 10 * 1024 * 1024).decode())
    except Exception:
        return None
    base = Path(os.path.realpath(config)).parent
    value = data.get("state_dir") if isinstance(data, dict) else None
    if isinstance(value, str) and value:
        return (base / value).absolute()
    return base / DEFAULT_STATE_DIR


def candidate_sockets(
    *,
    state_dir: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Path]:
    """Where a running daemon's socket may be, most specific first (no duplicates).

    ``$RUNTIME_DIRECTORY``; the state directory's socket, the state directory being
    ``state_dir``, else ``$STATE_DIRECTORY``, else company.yaml's ``state_dir``, else
    ``state`` next to company.yaml (the same order the daemon uses; ``./state`` only when
    the file cannot be read); then the systemd unit's
    ``/run/companyd/companyd.sock``.
    """
    env = os.environ if env is None else env
    found: list[Path] = []
    runtime = env.get("RUNTIME_DIRECTORY")
    if runtime:
        found.append(Path(runtime.split(":")[0]) / SOCKET_NAME)
    if state_dir is not None:
        sd = Path(state_dir).absolute()
    elif env.get("STATE_DIRECTORY"):
        sd = Path(env["STATE_DIRECTORY"].split(":")[0]).absolute()
    else:
        from_config = _state_dir_from_config(Path(config)) if config is not None else None
        sd = from_config if from_config is not None else Path("state").absolute()
    found.append(sd / SOCKET_NAME)
    found.append(SYSTEMD_SOCKET)
    return list(dict.fromkeys(found))


def find_daemon(
    *,
    socket: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> ControlClient:
    """A client for the running daemon, found as :func:`candidate_sockets` says.

    With an explicit ``socket`` only that path is tried. With ``config``, the daemon
    running that very file (same user or root) is asked for its socket first, so
    ``--config`` finds it whatever state directory it runs on. With an explicit
    ``state_dir``, a daemon found elsewhere (``$RUNTIME_DIRECTORY``, ``/run/companyd``,
    through ``config``) must report that state directory, so ``--state-dir`` never reaches
    another company's daemon.

    Raises:
        DaemonNotRunning: no candidate answered; the message lists the paths tried.
        ControlError: a socket exists but may not be used (permissions).
    """
    if socket is not None:
        client = ControlClient(socket, timeout=timeout)
        client.ping()
        return client
    paths = candidate_sockets(state_dir=state_dir, config=config, env=env)
    if config is not None:
        # The daemon running this very file says where its socket is, whatever state
        # directory it was started with (daemon/lock.py CompanyLock).
        from companyd.daemon.lock import locate

        found = locate(config)
        if found is not None and found[1] not in paths:
            paths.insert(0, found[1])
    want = Path(state_dir).absolute() if state_dir is not None else None
    own = want / SOCKET_NAME if want is not None else None
    denied: ControlError | None = None
    for path in paths:
        client = ControlClient(path, timeout=timeout)
        try:
            if not path.exists():
                continue
        except PermissionError:  # in a directory we may not enter (a 0700 state dir)
            denied = denied or ControlError(
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
            denied = denied or exc
            continue
        if want is not None and path != own and not _same_dir(info.get("state_dir"), want):
            continue
        return client
    if denied is not None:
        raise denied
    tried = ", ".join(repr(str(p)) for p in paths)
    raise DaemonNotRunning(
        f"no companyd daemon is running (tried {tried}). Start it with "
        "`systemctl start companyd` or `companyd run`, or point at it with --state-dir or "
        "--socket"
    )


def _same_dir(reported: Any, want: Path) -> bool:
    if not isinstance(reported, str):
        return False
    return Path(reported) == want or os.path.realpath(reported) == os.path.realpath(want)
