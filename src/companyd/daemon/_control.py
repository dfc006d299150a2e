"""The control socket: how ``companyd status`` and friends talk to the running daemon.

**Where.** :func:`~companyd.daemon._protocol.socket_path`. Mode 0600 (only the daemon's
user, and root, may connect), or 0660 with a ``group`` for operators in that group.

**Protocol.** :mod:`companyd.daemon._protocol` frames requests and answers and says which
are ``bad_request`` (:mod:`companyd.admin._wire` validates the arguments, and turns every
result into JSON here, in one place); an operation that raises a deliberate companyd error
is answered ``admin`` with its message, a bug ``internal`` (logged with its traceback in
the daemon, never crashing the server). The client is :mod:`companyd.daemon._control_client`.

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
import json
import logging
import os
import select
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from companyd import __version__
from companyd._aio import race
from companyd.admin import Admin, AdminError, AdminStopping, result_data
from companyd.clock import Clock, SystemClock
from companyd.daemon._protocol import (
    ADMIN_OPS,
    BUILTIN_OPS,
    DEFAULT_DEADLINES,
    DEFAULT_REQUEST_TIMEOUT,
    GOES_ON_AFTER_DEADLINE,
    MAX_REQUEST_BYTES,
    BadRequest,
    encode_answer,
    error,
    operation_deadline,
    parse_line,
    validate,
    with_deadline,
)
from companyd.errors import CompanydError
from companyd.supervision import ChildContext

__all__ = ["MAX_BUFFERED_BYTES", "MAX_CONNECTIONS", "ControlServer", "resolve_group"]

log = logging.getLogger("companyd.daemon.control")

#: Most client connections served at once. The CLI uses one per command, so this is far
#: above what operators need and far below the default 1,024-file limit.
MAX_CONNECTIONS = 64
#: Most bytes of unfinished request lines held over all connections together.
MAX_BUFFERED_BYTES = 8 << 20
#: Accept failures (EMFILE …) and connection-cap hits are logged at most this often.
LOG_INTERVAL = 60.0
_RECV_CHUNK = 65536
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: The answer to every request but ``ping`` while the daemon stops after this socket's
#: own stop (:meth:`ControlServer.hold_through_stop`).
STOPPING = (
    "the daemon is stopping (its agents are bringing their runs to a checkpoint); nothing "
    "was done — run the command again once the daemon has started (`systemctl status "
    "companyd` names the runs the stop waits for)"
)
#: ``sun_path`` holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


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
            cancelled. An operation that only waits for what the stop ends (``run_job``,
            ``ask``) does not use it: it is answered ``stopping`` at once
            (:class:`~companyd.admin.AdminStopping`); one that changes state is shielded
            and goes on.
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
        memory_path: str | os.PathLike[str] | None = None,
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
        #: the memory file the daemon opened at start (a reload of memory.path waits for the
        #: restart): `companyd memory` commands read this one while it runs
        self.memory_path = str(Path(memory_path).absolute()) if memory_path is not None else None
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
        #: the daemon is stopping (:meth:`hold_through_stop`): this child's stop leaves the
        #: socket bound, every request but ``ping`` answered ``stopping``, until :meth:`close`
        self._hold = False
        self._refusing = False
        self._held: tuple[asyncio.Future[None], socket.socket] | None = None
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
        socket file if it is still ours — unless the daemon is stopping
        (:meth:`hold_through_stop`): then the socket stays up, answering ``stopping``,
        until :meth:`close`.
        """
        # Binding is a few non-blocking syscalls on a local directory: done inline.
        sock = self.bind()
        self._closing = self._refusing = False  # a restart serves anew
        self._spare = _reserve_fd()
        accept = asyncio.ensure_future(self._accept_loop(sock))
        try:
            log.info("control socket listening on %s (mode %o)", self.path, self.mode)
            ctx.started({"path": str(self.path)})
            await race(accept, ctx.stopping.wait())
            if accept.done():
                accept.result()  # the accept loop failed: let the supervisor restart us
        finally:
            held = self._hold and not accept.done()
            if held:
                self._refusing = True
                self._held = (accept, sock)
            else:
                await self._stop_listening(accept, sock)
            try:
                await self._drain()
            finally:
                if not held:
                    self._unlink()

    def hold_through_stop(self) -> None:
        """The daemon began to stop: when this child is stopped (first, before the agents'
        grace), its socket stays bound and answers every new request but ``ping``
        ``stopping`` (the CLI's exit 75) until :meth:`close` — so a command meanwhile is
        told the daemon stops, not that none runs, and never falls back to working on the
        files the daemon still writes. Running requests drain as in any stop.
        """
        self._hold = True

    async def close(self) -> None:
        """Close what :meth:`hold_through_stop` kept open: stop accepting, end the
        connections still open, remove the socket file (if still ours). Does nothing when
        nothing was held.
        """
        held, self._held = self._held, None
        self._hold = False  # the daemon's stop is over: a later stop of this child closes
        if held is None:
            return
        await self._stop_listening(*held)
        tasks = [c.task for c in self._conns if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._unlink()

    async def _stop_listening(self, accept: asyncio.Future[None], sock: socket.socket) -> None:
        self._closing = True
        accept.cancel()
        await asyncio.gather(accept, return_exceptions=True)
        sock.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

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
        gid = resolve_group(self.group) if self.group is not None else None
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
        # the connections open now: one accepted meanwhile (the socket held through a
        # stop) is answered ``stopping``, not cut off here
        conns = list(self._conns)
        for conn in conns:
            if not conn.busy and not conn.writing and conn.task is not None:
                conn.task.cancel()  # idle: waiting for a request that will not be served
        busy_tasks = [c.task for c in conns if c.task is not None and not c.task.done()]
        if busy_tasks:
            try:
                await with_deadline(
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
        tasks = [c.task for c in conns if c.task is not None]
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
                response = error(
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
        extend it.
        """
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
            chunk = await with_deadline(
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
        connection that would hold the most is closed (``busy``) until ``need`` fits.
        """
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
        data = encode_answer(response)
        loop = asyncio.get_running_loop()
        # Not busy meanwhile: an answer waiting on a client that does not read is no
        # operation running, and such a connection may be evicted like an idle one.
        conn.writing = True
        try:
            await with_deadline(
                loop.sock_sendall(conn.sock, data + b"\n"), self.idle_timeout, self.clock
            )
        finally:
            conn.writing = False

    # -- one request ------------------------------------------------------------------------

    async def handle_line(self, line: bytes) -> dict[str, Any]:
        """Parse one request line and answer it (never raises except on cancellation)."""
        try:
            request = parse_line(line)
        except BadRequest as exc:
            self.requests += 1
            self.failures += 1
            return error(str(exc), "bad_request")
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
        try:
            op, call_args = validate(request)
        except BadRequest as exc:
            return error(str(exc), "bad_request")
        if op == "ping":
            return {"ok": True, "result": self._ping()}
        if self._refusing:
            return error(STOPPING, "stopping")
        deadline = self._deadline(op, call_args)
        log.debug("control: %s %s", op, call_args)
        method = getattr(self.admin, op)
        try:
            result = await with_deadline(method(**call_args), deadline, self.clock)
            # the one place an Admin result becomes JSON (a bad result is a bug: internal)
            data = result_data(op, result)
        except TimeoutError:
            if op in GOES_ON_AFTER_DEADLINE:
                log.warning("control: %r did not finish within %.0f s; it goes on", op, deadline)
                return error(
                    f"{op!r} did not finish within {deadline:.0f} s; it goes on in the daemon "
                    f"(never left half-done) — {GOES_ON_AFTER_DEADLINE[op]}",
                    "timeout",
                )
            log.warning("control: %r did not finish within %.0f s; cancelled", op, deadline)
            return error(
                f"{op!r} did not finish within {deadline:.0f} s and was cancelled; the daemon "
                "may be overloaded — see `journalctl -u companyd`",
                "timeout",
            )
        except AdminStopping as exc:
            # the daemon stops under a request that only waited: told at once (the CLI's
            # exit 75), it does not hold the drain below
            return error(str(exc), "stopping")
        except AdminError as exc:
            return error(str(exc), "admin")
        except CompanydError as exc:  # deliberate, operator-facing (e.g. ConfigError)
            return error(str(exc), "admin")
        except Exception as exc:
            log.exception("control: %r failed with an unexpected error", op)
            return error(
                f"internal error: {type(exc).__name__}: {exc} (details in the daemon log)",
                "internal",
            )
        return {"ok": True, "result": data}

    def _deadline(self, op: str, args: Mapping[str, Any]) -> float:
        return operation_deadline(op, args, self.deadlines, self.request_timeout)

    def _ping(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "version": __version__,
            "socket": str(self.path),
            "state_dir": self.state_dir,
            "memory_path": self.memory_path,
            "ops": sorted(ADMIN_OPS | BUILTIN_OPS),
        }


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
    the close into a reset that would hide the answer from it.
    """
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(json.dumps(error(message, "busy")).encode() + b"\n")
        for _ in range(16):
            if not sock.recv(_RECV_CHUNK):
                break
    sock.close()


def resolve_group(group: str | int) -> int:
    """The gid of ``group`` (a name, or a gid as a number or digits).

    Raises:
        CompanydError: no such group (the message says how to create it).
    """
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
