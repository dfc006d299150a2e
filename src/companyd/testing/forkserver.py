"""``companyd`` processes forked from one interpreter that has already imported the daemon.

A ``companyd run`` process spends most of its CPU before it does anything: the interpreter's
start, companyd's modules and — with Claude — the anthropic SDK (about 1.4 s of CPU on the
2-core machine, for its ~1,500 pydantic models), every time. A test whose point is what the
daemon does when it is signalled, killed or stopped (not its start-up imports) can have
its daemon forked instead (``DaemonProcess(..., forked=True)``): this module's server
(``python -m companyd.testing.forkserver``, one per test process, started on first use)
imports all that once (the SDK when the first daemon that is not ``--offline`` is asked
for), then for each request forks a child that becomes ``companyd ARGV``
exactly as ``python -m companyd ARGV`` does — its own process and pid, the requested
environment, working directory and log file as stdin/stdout/stderr, ``sys.argv`` as the
console would set it, the CLI's entry point, and the interpreter's normal exit (atexit
handlers, stream flushes) with the entry point's exit code.

What differs from a fresh ``python -m companyd``: the modules are already imported (so
nothing read at import time sees the child's environment — companyd reads its environment
when it runs, not at import), what the interpreter fixes at its start is the server's
(``sys.path``, the hash seed, ``-X`` options; stdout and stderr unbuffered, as
``PYTHONUNBUFFERED=1``, which :class:`~companyd.testing.daemon_process.DaemonProcess` sets
for every daemon — a request whose environment sets one of those ``PYTHON*`` variables
otherwise is refused, naming it), and the process is the
server's child, not the test's: its exit status (as ``Popen.returncode``: negative for a
signal) and its CPU come from the server, which reaps it. Tests where start-up itself is
the point (the import cost, ``--version``, a command that must not import the SDK) keep
a real ``python -m companyd``.

Protocol (one JSON object per line): the test writes ``{"argv", "env", "cwd", "log"}``;
the server answers ``{"started": PID}`` for each request in order, and
``{"exited": PID, "code": N, "cpu": SECONDS}`` when a child is gone. At the end of its
input the server kills the children still running (a test that forgot one), reaps them and
exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import importlib
import json
import os
import queue
import select
import signal
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


class ForkedProcess:
    """A child of the fork server, driven like ``asyncio.subprocess.Process``."""

    def __init__(self, server: _Server, pid: int) -> None:
        self._server = server
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        """Its exit status once the server reaped it (negative: killed by that signal)."""
        return self._server.codes.get(self.pid)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the process (nothing once it has been reaped)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        """Wait until it has exited and been reaped; its exit status (no deadline of its
        own: the caller's, as with ``asyncio.subprocess.Process.wait``).
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        with self._server.lock:
            code = self.returncode
            if code is not None:
                return code
            self._server.waiters.setdefault(self.pid, []).append((loop, done))
        return await done


class _Server:
    """The fork server as seen from the test process (one per process, see :func:`spawn`)."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.fixed = {k: env.get(k) for k in _FIXED_AT_START}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "companyd.testing.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.codes: dict[int, int] = {}
        self.cpu = 0.0
        #: who waits for which child: its loop and future
        self.waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[int]]]] = {}
        #: guards codes, cpu and waiters (the reader thread writes them)
        self.lock = threading.Lock()
        self._started: queue.Queue[int] = queue.Queue()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, name="forkserver-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "started" in msg:
                self._started.put(int(msg["started"]))
            else:
                pid, code = int(msg["exited"]), int(msg["code"])
                with self.lock:
                    self.cpu += float(msg["cpu"])
                    self.codes[pid] = code
                    waiters = self.waiters.pop(pid, [])
                for loop, done in waiters:
                    with contextlib.suppress(RuntimeError):  # that loop has closed
                        loop.call_soon_threadsafe(_resolve, done, code)
        self._started.put(0)  # the server is gone: a waiting spawn() fails

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path
    ) -> ForkedProcess:
        differ = [k for k in _FIXED_AT_START if env.get(k) != self.fixed[k]]
        if differ:
            raise ValueError(
                f"a forked process cannot take {', '.join(differ)} from its environment: "
                f"the fork server's interpreter fixed them at its start "
                f"({ {k: self.fixed[k] for k in differ}!r}); start this one as a real "
                "process (DaemonProcess without forked=True)"
            )
        request = {"argv": list(argv), "env": dict(env), "cwd": str(cwd), "log": str(log)}
        with self._lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            try:
                pid = self._started.get(timeout=30)
            except queue.Empty:
                raise RuntimeError("the fork server did not start the process in 30 s") from None
        if not pid:
            raise RuntimeError(f"the fork server exited ({self.proc.poll()})")
        return ForkedProcess(self, pid)

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _resolve(done: asyncio.Future[int], code: int) -> None:
    if not done.done():
        done.set_result(code)


_SERVER: _Server | None = None
_SERVER_LOCK = threading.Lock()


def spawn(argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path) -> ForkedProcess:
    """Start ``companyd ARGV`` (as ``python -m companyd ARGV``) in a child of this process's
    fork server, with exactly ``env`` as its environment, in ``cwd``, stdin from /dev/null
    and stdout and stderr appended to ``log``. Returns once it is forked (a few ms).
    """
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or _SERVER.proc.poll() is not None:
            _SERVER = _Server()
            atexit.register(_SERVER.close)
        server = _SERVER
    return server.spawn(argv, env, cwd, log)


def forked_children_cpu() -> float:
    """CPU seconds (user + system) of this process's forked children reaped so far: they
    are the fork server's children, so ``RUSAGE_CHILDREN`` here does not count them.
    """
    return 0.0 if _SERVER is None else _SERVER.cpu


# -- the server ---------------------------------------------------------------------------


def _warm_up() -> None:
    """Import what ``companyd run`` imports when it starts a company — through the faces,
    and the SDKs it loads on first use: python-telegram-bot (the pager), the mcp client
    (agents' tool servers); anthropic waits for the first daemon with Claude
    (:func:`_warm_up_claude`).
    """
    import mcp.client.stdio  # noqa: F401
    import telegram.ext  # noqa: F401

    from companyd.alerts import AlertService  # noqa: F401
    from companyd.daemon import Daemon, make_backend  # noqa: F401


def _warm_up_claude() -> None:
    """Load the anthropic SDK (~1 s of CPU, once): before the first child that is not
    ``--offline``, so that a server forking only offline daemons never pays it. Loaded,
    never called: talking to the SDK stays companyd.llm._claude's alone (it too loads it by
    name, at its first call). A client, built and dropped, loads the HTTP transport's
    modules as the first call does.
    """
    if "anthropic" in sys.modules:
        return
    gc.disable()
    try:
        sdk = importlib.import_module("anthropic")
        sdk.AsyncAnthropic(api_key="warm-up", base_url="http://127.0.0.1:9", max_retries=0)
        _freeze()
    finally:
        gc.enable()


def _freeze() -> None:
    """As companyd._heap does after a start-up: one collection, then what is left (it lives
    as long as any child) out of later full collections — a child's first full collection
    would otherwise walk, and so copy, every page of it.
    """
    gc.collect()
    gc.freeze()


def _serve() -> dict[str, Any] | None:
    """Answer requests until the input ends (then None), or, in a forked child, return the
    request the child is to carry out.
    """
    pidfds: dict[int, int] = {}  # pidfd -> pid
    buf = b""
    stdin_open = True
    while stdin_open or pidfds:
        if not stdin_open:  # the test process is done: nothing left may outlive it
            for pid in pidfds.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        ready, _, _ = select.select([0, *pidfds] if stdin_open else list(pidfds), [], [])
        for fd in ready:
            if fd != 0:
                pid = pidfds.pop(fd)
                os.close(fd)
                _, status, usage = os.wait4(pid, 0)
                cpu = usage.ru_utime + usage.ru_stime
                code = os.waitstatus_to_exitcode(status)
                _say({"exited": pid, "code": code, "cpu": round(cpu, 3)})
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                stdin_open = False
                continue
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                request = json.loads(line)
                if "--offline" not in request["argv"]:
                    _warm_up_claude()
                pid = os.fork()
                if pid == 0:
                    for pidfd in pidfds:
                        os.close(pidfd)
                    return dict(request)
                pidfds[os.pidfd_open(pid)] = pid
                _say({"started": pid})
    return None


def _say(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _become(request: dict[str, Any]) -> None:
    """In the forked child: take the request's streams, environment, directory and argv."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    main_py = Path(__file__).resolve().parents[1] / "__main__.py"
    sys.argv = [str(main_py), *request["argv"]]


if __name__ == "__main__":
    gc.disable()  # no collections while the modules load (companyd._heap says why)
    _warm_up()
    _freeze()
    gc.enable()
    _request = _serve()
    if _request is not None:
        _become(_request)
        # what `python -m companyd` runs (companyd/__main__.py); SIGINT's handler is
        # Python's, installed at the server's start as at any interpreter's
        from companyd.cli import main

        raise SystemExit(main())
