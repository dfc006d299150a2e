"""``companyd`` processes forked from one interpreter that has already imported companyd.

A ``companyd`` process spends much of its CPU before it does anything: the interpreter's
start, companyd's modules, the SDKs (~1 s; ~1.4 s more for anthropic's ~1,500 pydantic
models). A test whose point is what the process does — signalled, killed, stopped, talked
to over its pipes — not its start-up, can fork it instead: this module's server (``python
-m companyd.testing.forkserver``, one per test process, started on first :func:`spawn`)
imports what ``companyd run`` and ``companyd memory serve-mcp`` import once (anthropic when
the first ``run`` that is not ``--offline`` is asked for), then per request forks a child
that becomes ``companyd ARGV`` as ``python -m companyd ARGV`` does: its own process and
pid, the requested environment and working directory, the descriptors the test sent as its
fds 0, 1 and 2 (a log file is one the test opened), ``sys.argv`` and ``sys.path[0]`` as
``-m`` sets them, runpy of ``companyd``, the interpreter's normal exit.

What differs from a fresh ``python -m companyd``: the modules are already imported (companyd
reads its environment when it runs, not at import); what the interpreter fixes at its start
is the server's (``sys.path``, the hash seed, ``-X`` options, unbuffered stdio as
``PYTHONUNBUFFERED=1``) — a request whose environment sets one of those ``PYTHON*``
variables otherwise is refused, naming it; and the process is the server's child, not the
test's: the server reaps it (``os.wait4``) and reports its exit status (as
``Popen.returncode``: negative for a signal) and CPU. Tests where start-up is the point
(the import cost, ``--version``'s speed, what must not be imported) run ``python -m
companyd``.

Transport: a SOCK_SEQPACKET control socket (the server's argv[1] is its descriptor). A
request is one message, JSON ``{"argv", "env", "cwd"}``, with four descriptors (the child's
stdin, stdout, stderr and a reply socket). On the reply socket the server writes the child's
pid (a line) at once and ``CODE CPU`` (a line) when it has reaped it. When the control
socket closes (the test process is gone) it kills the children still running, reaps them
and exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ForkedProcess", "forked_children_cpu", "spawn"]

#: what an interpreter takes from its environment once, at its start: a child of the
#: server has the server's, whatever its own environment says
_FIXED_AT_START = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONHASHSEED",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONOPTIMIZE",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
    "PYTHONUNBUFFERED",
    "PYTHONWARNINGS",
    "PYTHONDEVMODE",
    "PYTHONTRACEMALLOC",
    "PYTHONFAULTHANDLER",
)

_CPU = [0.0]  # of the children whose status was read (forked_children_cpu)


class ForkedProcess:
    """A child of the fork server with ``Popen``'s face (``pid``, ``returncode``, ``poll``,
    ``wait``, ``send_signal``, ``terminate``, ``kill``) and :meth:`wait_async` for an event
    loop. ``returncode`` is None until the server has reaped it (negative: killed by that
    signal).
    """

    def __init__(self, reply: socket.socket) -> None:
        self._reply = reply
        self._buf = b""
        self._code: int | None = None
        self.pid = int(self._line(60))

    def _line(self, timeout: float | None) -> str:
        self._reply.settimeout(timeout)
        while b"\n" not in self._buf:
            try:
                got = self._reply.recv(64)
            except (TimeoutError, BlockingIOError):
                what = f"forked pid {getattr(self, 'pid', '?')}"
                raise subprocess.TimeoutExpired(what, timeout or 0) from None
            if not got:
                raise RuntimeError("the fork server closed the reply socket without a status")
            self._buf += got
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def wait(self, timeout: float | None = None) -> int:
        """Block until it has exited and been reaped (``subprocess.TimeoutExpired`` after
        ``timeout`` s); its exit status.
        """
        if self._code is None:
            code, cpu = self._line(timeout).split()
            self._reply.close()
            _CPU[0] += float(cpu)
            self._code = int(code)
        return self._code

    def poll(self) -> int | None:
        """Its exit status if it has been reaped, else None (does not block)."""
        if self._code is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(0)
        return self._code

    @property
    def returncode(self) -> int | None:
        """:meth:`poll`."""
        return self.poll()

    async def wait_async(self) -> int:
        """:meth:`wait` without blocking the loop (no deadline of its own: the caller's)."""
        loop = asyncio.get_running_loop()
        while self.poll() is None:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self._reply.fileno(), _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(self._reply.fileno())
        assert self._code is not None
        return self._code

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the process (nothing once it has been reaped)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class _Server:
    """The fork server as seen from the test process (one per process, see :func:`spawn`)."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.fixed = {k: env.get(k) for k in _FIXED_AT_START}
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "companyd.testing.forkserver", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self.lock = threading.Lock()

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, fds: Sequence[int]
    ) -> ForkedProcess:
        differ = [k for k in _FIXED_AT_START if env.get(k) != self.fixed[k]]
        if differ:
            raise ValueError(
                f"a forked process cannot take {', '.join(differ)} from its environment: "
                f"the fork server's interpreter fixed them at its start "
                f"({ {k: self.fixed[k] for k in differ}!r}); start this one as a real "
                "process (DaemonProcess without forked=True)"
            )
        request = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd)})
        reply, theirs = socket.socketpair()
        with theirs, self.lock:
            socket.send_fds(self.control, [request.encode()], [*fds, theirs.fileno()])
        return ForkedProcess(reply)

    def close(self) -> None:
        self.control.close()  # the server kills what is left, reaps it and exits
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


_SERVER: _Server | None = None
_SERVER_LOCK = threading.Lock()


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    *,
    log: Path | None = None,
    stdin: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
) -> ForkedProcess:
    """Start ``companyd ARGV`` (as ``python -m companyd ARGV``) in a child of this process's
    fork server, with exactly ``env`` as its environment, in ``cwd``. Its stdin is
    ``stdin`` (a descriptor; default /dev/null), its stdout and stderr ``stdout`` and
    ``stderr`` (descriptors; default: appended to ``log``, or /dev/null without one). The
    child gets copies: the caller still owns and closes what it passed. Returns once it is
    forked (a few ms).

    Raises:
        ValueError: ``env`` sets a variable the interpreter fixed at its start otherwise.
    """
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or _SERVER.proc.poll() is not None:
            _SERVER = _Server()
            atexit.register(_SERVER.close)
        server = _SERVER
    with contextlib.ExitStack() as opened:

        def _open(path: Path | str, flags: int) -> int:
            fd = os.open(path, flags, 0o644)
            opened.callback(os.close, fd)
            return fd

        out = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        if stdin is None:
            stdin = _open(os.devnull, os.O_RDONLY)
        if log is not None and (stdout is None or stderr is None):
            stdout = _open(log, out) if stdout is None else stdout
            stderr = stdout if stderr is None else stderr
        stdout = _open(os.devnull, os.O_WRONLY) if stdout is None else stdout
        stderr = _open(os.devnull, os.O_WRONLY) if stderr is None else stderr
        return server.spawn(argv, env, cwd, (stdin, stdout, stderr))


def forked_children_cpu() -> float:
    """CPU seconds (user + system) of this process's forked children whose status it has
    read: they are the fork server's children, so ``RUSAGE_CHILDREN`` here does not count
    them.
    """
    return _CPU[0]


# -- the server ---------------------------------------------------------------------------


def _warm_up() -> None:
    """Import what ``python -m companyd`` imports, what ``companyd run`` loads when it starts
    a company — through the faces, and the SDKs it loads on first use: python-telegram-bot
    (the pager), the mcp client (agents' tool servers) — and what ``companyd memory
    serve-mcp`` loads (the memory MCP server, the mcp server SDK). anthropic waits for the
    first daemon with Claude (:func:`_warm_up_claude`).
    """
    import mcp.client.stdio  # noqa: F401
    import telegram.ext  # noqa: F401

    import companyd.cli  # noqa: F401
    from companyd.alerts import AlertService  # noqa: F401
    from companyd.daemon import Daemon, make_backend  # noqa: F401
    from companyd.memory import serve_stdio  # noqa: F401


def _warm_up_claude() -> None:
    """Load the anthropic SDK (~1 s of CPU, once): before the first ``run`` that is not
    ``--offline``, so that a server forking only offline daemons or serve-mcp never pays
    it. Loaded by :func:`companyd.llm.preload_sdk`, never called: importing and talking to
    the SDK stay companyd.llm._claude's alone (the import contract "only companyd.llm._claude
    imports anthropic" covers this package too).
    """
    if _CLAUDE_LOADED:
        return
    from companyd.llm import preload_sdk

    gc.disable()
    try:
        preload_sdk()
        _freeze()
    finally:
        gc.enable()
    _CLAUDE_LOADED.append(True)


#: not empty once :func:`_warm_up_claude` has loaded the SDK
_CLAUDE_LOADED: list[bool] = []


def _freeze() -> None:
    """As companyd._heap does after a start-up: one collection, then what is left (it lives
    as long as any child) out of later full collections — a child's first full collection
    would otherwise walk, and so copy, every page of it.
    """
    gc.collect()
    gc.freeze()


def _serve(control: socket.socket) -> dict[str, Any] | None:
    """Fork per request until the control socket closes (then None), or, in a forked
    child, return the request the child is to carry out (its fds 0-2 already in place).
    """
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ, None)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> pid, reply socket
    listening = True
    while listening or children:
        for key, _ in sel.select():
            if key.data is not None:  # a pidfd: that child has exited
                pid, reply = children.pop(key.fd)
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status, usage = os.wait4(pid, 0)
                cpu = usage.ru_utime + usage.ru_stime
                with contextlib.suppress(OSError):  # the test may have stopped waiting
                    reply.sendall(f"{os.waitstatus_to_exitcode(status)} {cpu:.3f}\n".encode())
                reply.close()
                continue
            msg, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
            if not msg:  # the test process is done: nothing left may outlive it
                for pid, _reply in children.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                sel.unregister(control)
                listening = False
                continue
            request = json.loads(msg)
            argv = request["argv"]
            if argv[:1] == ["run"] and "--offline" not in argv:
                _warm_up_claude()
            pid = os.fork()
            if pid == 0:
                for pidfd, (_pid, reply) in children.items():
                    os.close(pidfd)
                    reply.close()
                sel.close()
                control.close()
                for fd, target in zip(fds[:3], (0, 1, 2), strict=True):
                    os.dup2(fd, target)
                for fd in fds:
                    os.close(fd)
                return dict(request)
            for fd in fds[:3]:
                os.close(fd)
            reply = socket.socket(fileno=fds[3])
            reply.sendall(f"{pid}\n".encode())
            pidfd = os.pidfd_open(pid)
            children[pidfd] = (pid, reply)
            sel.register(pidfd, selectors.EVENT_READ, pid)
    return None


def _become(request: dict[str, Any]) -> None:
    """In the forked child: ``python -m companyd ARGV`` with the request's environment and
    working directory (runpy sets ``sys.argv[0]`` to companyd/__main__.py, as ``-m`` does).
    """
    os.environ.clear()
    os.environ.update(request["env"])
    cwd = str(request["cwd"])
    os.chdir(cwd)
    sys.path[0] = cwd  # as `python -m` has it
    sys.argv = ["companyd", *request["argv"]]
    # SIGINT's handler is Python's, installed at the server's start as at any interpreter's
    runpy.run_module("companyd", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    gc.disable()  # no collections while the modules load (companyd._heap says why)
    _warm_up()
    _freeze()
    gc.enable()
    _request = _serve(socket.socket(fileno=int(sys.argv[1])))
    if _request is not None:
        _become(_request)
