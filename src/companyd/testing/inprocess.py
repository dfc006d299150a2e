"""``companyd run``'s composition root in the test's own process, on a manual clock.

:class:`InProcessDaemon` builds the daemon the way ``companyd run`` does — ``load_config``,
:func:`~companyd.daemon._launch.make_backend` (the real anthropic SDK, pointed by the
environment at the loopback Messages API stand-in, or the offline model), the company and
state-directory locks, :class:`~companyd.daemon._main.Daemon` — and starts its whole tree in
the running event loop: memory, spend, alerts (python-telegram-bot against the loopback Bot
API stand-in), the scheduler, the web dashboard where configured, and the control socket.
Control operations go over that real socket (:meth:`call`); other ``companyd`` commands run
against it by the CLI's entry point in a thread, or as real processes (:meth:`cli`).

Time: every part that takes the injected clock (routines, budget periods, the alert
sender's backoff, quiet hours, the digest, heartbeats) runs on one
:class:`~companyd.clock.ManualClock`, shared with the test, which moves it with
:meth:`advance` — a day passes in milliseconds, and a test can stand exactly one second
before a deadline and check that nothing happened yet. What runs on real time in
``companyd run`` runs on real time here too: I/O deadlines (control requests, memory calls,
HTTP timeouts) and the event-loop lag monitor.

What it does not do (tests that need these keep :class:`~companyd.testing.daemon_process.
DaemonProcess`): signals (no SIGTERM/SIGHUP handlers are installed — :meth:`stop` is the
graceful stop SIGTERM triggers, :meth:`reload` the reload SIGHUP starts), ``kill -9`` (a
crash needs a process to kill), systemd's notify socket, leadership on PostgreSQL
(``main()``'s standby phase), what ``Daemon.main()`` does around the tree (the warning and
event of a tightened state directory, the exit codes), ``companyd run``'s checks before the
daemon is built (``prepare_upgrade``, the state directory's creation) and its process-wide
effects (umask, logging set-up).

The environment (``env``) is applied to ``os.environ`` from :meth:`start` until
:meth:`close` — the daemon reads API keys and Telegram's token from it as ``companyd run``
does — and restored afterwards; tests under xdist run one at a time per worker process, so
nothing else sees it.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from companyd.admin import ReloadApplied, ReloadRejected
from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.daemon import CompanyLock, ControlClient, Daemon, StateLock, make_backend, socket_path
from companyd.events import Event
from companyd.testing.daemon_process import CliResult, run_cli

__all__ = ["InProcessDaemon", "cli_in_thread", "settle"]


class InProcessDaemon:
    """The daemon of ``config`` on ``state_dir``, in this process, on ``clock``.

    Use as ``async with InProcessDaemon(...) as d:`` (start, then stop and restore the
    environment), or call :meth:`start` / :meth:`stop` / :meth:`close` — a test may stop and
    start it again on the same state directory (a graceful restart: a new
    :class:`~companyd.daemon._main.Daemon` reading what the last one left).

    Args:
        config: the company.yaml to run.
        state_dir: its state directory (keep the path short: the control socket is in it).
        clock: the daemon's business clock (default: a :class:`ManualClock` starting at the
            real time now, so that commands reading the wall clock — ``runs --since 1h`` —
            agree with it).
        env: environment variables set while the daemon runs (API keys,
            ``ANTHROPIC_BASE_URL``, ``TELEGRAM_BOT_TOKEN``, …).
        offline: the built-in offline model instead of Claude (as ``--offline``).
    """

    def __init__(
        self,
        config: Path,
        state_dir: Path,
        *,
        clock: ManualClock | None = None,
        env: Mapping[str, str] | None = None,
        offline: bool = True,
    ) -> None:
        self.config = config
        self.state_dir = state_dir
        self.clock = clock or ManualClock(time.time())
        self.env = dict(env or {})
        self.offline = offline
        #: the running daemon (None before :meth:`start` and after :meth:`stop`)
        self.daemon: Daemon | None = None
        self._events: list[Event] = []
        self._saved_env: dict[str, str | None] | None = None
        self._locks: tuple[CompanyLock, StateLock] | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._log = _Recorder()

    @property
    def socket(self) -> Path:
        """The control socket (in the state directory)."""
        return socket_path(self.state_dir)

    @property
    def running(self) -> Daemon:
        """The running daemon.

        Raises:
            RuntimeError: it is not running.
        """
        if self.daemon is None:
            raise RuntimeError("the in-process daemon is not running; call start() first")
        return self.daemon

    async def start(self, timeout: float = 60.0) -> None:
        """Build the daemon as ``companyd run`` does and start its tree (≤ ``timeout`` real
        seconds); returns once the control socket answers.

        Raises:
            RuntimeError: it is already running.
            StateLocked: another daemon holds the company or the state directory.
        """
        if self.daemon is not None:
            raise RuntimeError("the in-process daemon is already running")
        if self._saved_env is None:
            self._saved_env = {k: os.environ.get(k) for k in self.env}
            os.environ.update(self.env)
            logging.getLogger().addHandler(self._log)
        config = load_config(self.config)
        state_dir = config.state_dir(self.state_dir)
        backend = make_backend(
            config, offline=self.offline, redact=lambda _secret: None, clock=self.clock
        )
        claim = CompanyLock.acquire(config.path, control_socket=socket_path(state_dir))
        try:
            lock = StateLock.acquire(state_dir)
        except BaseException:
            claim.release()
            raise
        self._locks = (claim, lock)
        daemon = Daemon(config, state_dir, backend=backend, clock=self.clock, offline=self.offline)
        self._remove_listener = daemon.bus.add_listener(self._events.append)
        self.daemon = daemon
        try:
            async with asyncio.timeout(timeout):
                await daemon.start()
                await self._until_socket_answers()
        except BaseException:
            await self.stop()
            raise

    async def _until_socket_answers(self) -> None:
        client = ControlClient(self.socket, timeout=5.0)
        while True:
            try:
                await client.acall("ping")
                return
            except Exception:
                await asyncio.sleep(0.02)

    async def stop(self, timeout: float = 60.0) -> None:
        """The graceful stop (what SIGTERM starts in ``companyd run``): the tree stops in
        reverse order, runs reach a checkpoint, the stores close; the locks are released.
        Does nothing when not running.
        """
        daemon, self.daemon = self.daemon, None
        try:
            if daemon is not None:
                async with asyncio.timeout(timeout):
                    await daemon.stop(reason="signal")
        finally:
            if self._remove_listener is not None:
                self._remove_listener()
                self._remove_listener = None
            if self._locks is not None:
                for lock in reversed(self._locks):
                    lock.release()
                self._locks = None

    async def reload(self) -> ReloadApplied | ReloadRejected:
        """What SIGHUP does in ``companyd run`` (``Daemon._sighup``: re-read company.yaml as
        the daemon's own reload, not an operator's), awaited; its outcome. The signal
        itself, and the RELOADING=1 / READY=1 around it, need a process.
        """
        return await self.running.reload(via="")

    async def restart(self, timeout: float = 60.0) -> None:
        """:meth:`stop`, then :meth:`start` a new daemon on the same state directory."""
        await self.stop(timeout)
        await self.start(timeout)

    def close(self) -> None:
        """Restore the environment :meth:`start` changed (after :meth:`stop`) and stop
        recording the log.
        """
        logging.getLogger().removeHandler(self._log)
        saved, self._saved_env = self._saved_env, None
        for key, value in (saved or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    async def __aenter__(self) -> InProcessDaemon:
        try:
            await self.start()
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.stop()
        finally:
            self.close()

    # -- the operator's side -------------------------------------------------------------

    async def call(self, op: str, /, **args: Any) -> dict[str, Any]:
        """Run a control operation over the control socket (the client waits up to 30 s —
        ``args`` are the operation's own, ``timeout`` included); its result (raises the
        client's errors).
        """
        return await ControlClient(self.socket, timeout=30.0).acall(op, **args)

    async def cli(self, *argv: str, timeout: float = 60.0, process: bool = False) -> CliResult:
        """Run ``companyd ARGV --config C --state-dir S`` against this daemon: its exit code
        and output.

        By default the CLI's own entry point (:func:`companyd.cli._main.main`) runs in a
        thread of this process, its stdout and stderr captured — the same argument parsing,
        control client, rendering and exit codes as the console script, without a second
        interpreter's start-up (a second or more of CPU per command). ``process=True`` runs
        it as another process (with this process's environment), for what only a process
        shows: start-up imports, a real exit status, a command that outlives its caller.
        """
        if process:
            return await run_cli(self.config, self.state_dir, argv, dict(os.environ), timeout)
        full = [*argv, "--config", str(self.config), "--state-dir", str(self.state_dir)]
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.to_thread(cli_in_thread, full)
        except TimeoutError:
            raise AssertionError(f"companyd {full!r} did not finish within {timeout:g} s") from None

    async def quiet(self, *, calm: float = 0.1, timeout: float = 30.0) -> None:
        """Return once no run is in flight (``companyd status``) on two looks ``calm`` real
        seconds apart, so that a run started in between shows in the second. The check of
        "nothing more was done" after a scenario: a second run the daemon was making has
        shown by then (and what it sent is delivered by the stop's own delivery pass,
        docs/alerts.md), and on the manual clock, which nothing moves meanwhile, nothing
        new starts without the test's own input.

        Raises:
            AssertionError: a run still in flight after ``timeout`` real seconds (which, in
                the message).
        """
        deadline = time.monotonic() + timeout
        calm_looks = 0
        while True:
            runs = (await self.call("status"))["runs_in_flight"]
            calm_looks = 0 if runs else calm_looks + 1
            if calm_looks == 2:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"runs still in flight after {timeout:g} s: {runs}")
            await asyncio.sleep(calm)

    # -- time ----------------------------------------------------------------------------

    async def advance(self, seconds: float, *, step: float | None = None) -> None:
        """Move the clock ``seconds`` forward, from one pending sleep's deadline to the next
        (at most ``step`` at a time, when given), letting the loop run after each move: every
        woken task runs, and the I/O it starts gets a moment to finish, before time moves on.
        """
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards: advance({seconds!r})")
        target = self.clock.monotonic() + seconds
        while (left := target - self.clock.monotonic()) > 1e-9:
            self.clock.advance(self._jump(left, step))
            await settle()

    async def advance_until(
        self,
        done: Callable[[], bool],
        *,
        limit: float,
        step: float | None = None,
        timeout: float = 30.0,
    ) -> float:
        """Move the clock as :meth:`advance` does until ``done()`` holds; the clock seconds
        it took.

        While nothing sleeps on the clock until ``limit`` (without ``step``), moving it
        cannot bring ``done()`` closer — what is left is I/O in real time (a model call to
        the stand-in, a delivery) — so the clock stays and the real time passes instead,
        up to ``timeout``: a jump to the limit would race that I/O and fail under load.

        Raises:
            AssertionError: not done within ``limit`` clock seconds, or ``timeout`` real
                seconds.
        """
        start = self.clock.monotonic()
        deadline = time.monotonic() + timeout
        while not done():
            moved = self.clock.monotonic() - start
            if moved >= limit or time.monotonic() > deadline:
                raise AssertionError(
                    f"not done after {moved:g} s of the daemon's clock "
                    f"({time.monotonic() - deadline + timeout:.1f} real seconds)"
                )
            nxt = self.clock.next_deadline()
            if step is None and (nxt is None or nxt - self.clock.monotonic() >= limit - moved):
                await asyncio.sleep(0.01)  # nothing due on the clock: the I/O's turn
                continue
            self.clock.advance(self._jump(limit - moved, step))
            await settle()
        return self.clock.monotonic() - start

    def _jump(self, left: float, step: float | None) -> float:
        # to the next deadline (a sleeper is due there), else all the way; never past `left`
        # nor `step`. A jump of 0 still wakes the sleepers due now.
        jump = left
        nxt = self.clock.next_deadline()
        if nxt is not None:
            jump = min(jump, max(0.0, nxt - self.clock.monotonic()))
        if step is not None:
            jump = min(jump, step)
        return jump

    # -- what happened -------------------------------------------------------------------

    def log_text(self) -> str:
        """What was logged (warnings and worse, from any logger of this process) while the
        harness ran, one line per record, each traceback in full — what
        ``DaemonProcess.log_text`` reads from a daemon's stderr.
        """
        return "\n".join(self._log.lines)

    def events(
        self, kind: str | None = None, where: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]]:
        """The events published on the daemons' buses so far (every start of this harness),
        as :meth:`Event.to_dict` — the shape ``DaemonProcess.events`` reads from the log —
        oldest first, optionally only of ``kind`` and matching ``where``.
        """
        out = [e.to_dict() for e in self._events]
        return [
            e
            for e in out
            if (kind is None or e.get("kind") == kind) and (where is None or where(e))
        ]


async def settle(turns: int = 3, pause: float = 0.002) -> None:
    """Let the loop run: a few turns, each with a short real pause for threads and sockets."""
    for _ in range(turns):
        await asyncio.sleep(pause)


#: one in-thread CLI at a time: stdout and stderr are the process's
_CLI_LOCK = threading.Lock()


def cli_in_thread(argv: list[str]) -> CliResult:
    """``companyd ARGV`` by :func:`companyd.cli._main.main` in the calling thread (not the
    event loop's: the CLI runs its own loop to reach the daemon), stdout and stderr captured.

    Only the calling thread's output is captured: ``sys.stdout`` and ``sys.stderr`` are the
    whole process's, and the daemon runs in the same process — an MCP server it starts
    meanwhile takes ``sys.stderr.fileno()`` for the child's stderr, which a captured stream
    (``contextlib.redirect_stderr``'s ``StringIO``) has not got. Every other thread keeps
    the streams it had.
    """
    from companyd.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _CLI_LOCK:
        saved = sys.stdout, sys.stderr
        sys.stdout = _ThreadStream(saved[0], out)
        sys.stderr = _ThreadStream(saved[1], err)
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdout, sys.stderr = saved
    return CliResult(rc, out.getvalue(), err.getvalue())


class _ThreadStream:
    """A process stream that, in one thread (the one that made it), is ``capture``, and in
    every other thread the stream it replaced.
    """

    def __init__(self, original: Any, capture: io.StringIO) -> None:
        self._original = original
        self._capture = capture
        self._owner = threading.get_ident()

    def _stream(self) -> Any:
        return self._capture if threading.get_ident() == self._owner else self._original

    def write(self, text: str) -> int:
        return int(self._stream().write(text))

    def flush(self) -> None:
        self._stream().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)


class _Recorder(logging.Handler):
    """Records warnings and worse, with their tracebacks, as text."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            line += "\n" + "".join(traceback.format_exception(record.exc_info[1]))
        if record.stack_info:
            line += "\n" + record.stack_info
        self.lines.append(line)
